import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import Testing

/// Records that the server answered a feature it lacks (Cloudant-only endpoints, search) with a proper
/// HTTP `CouchError`, and prints why the rest of the check is skipped. Never fails for the missing feature.
func expectUnsupported(_ feature: String, _ error: CouchError) {
    #expect(error.kind == .http, "\(feature) should fail with an HTTP error, got \(error)")
    let status = error.statusCode ?? 0
    #expect((400..<600).contains(status), "\(feature): unexpected status \(status)")
    print(
        "Skipping \(feature): the server does not support it "
            + "(\(status) \(error.error ?? "-"): \(error.reason ?? error.bodyText ?? "-")).")
}

@Suite("End to end: server endpoints")
struct ServerEndToEndTests {
    @Test("GET /_up: the server is up")
    func up() async throws {
        let status = try await E2EEnvironment.shared.client().value(GetServerStatusOperation())
        #expect(status.status == "ok")
        #expect(status.isUp)
    }

    @Test("GET /_uuids: as many distinct 32-hex-digit ids as asked; count 0 refused before sending")
    func uuids() async throws {
        let client = E2EEnvironment.shared.client()
        let one = try await client.value(GetUUIDsOperation())
        #expect(one.uuids.count == 1)
        let list = try await client.value(GetUUIDsOperation(count: 5))
        #expect(list.uuids.count == 5)
        #expect(Set(list.uuids).count == 5)
        let hex = Set("0123456789abcdef")
        #expect(list.uuids.allSatisfy { $0.count == 32 && $0.allSatisfy(hex.contains) })
        #expect(!list.uuids.contains(one.uuids[0]))
        do {
            _ = try await client.execute(GetUUIDsOperation(count: 0))
            Issue.record("count 0 should be refused")
        } catch {
            #expect(error.kind == .validation)
        }
    }

    @Test("GET /_all_dbs and /_dbs_info: key ranges, limit, skip, descending; POST /_dbs_info keys")
    func databaseListing() async throws {
        let client = E2EEnvironment.shared.client()
        let prefix = E2EEnvironment.uniqueDatabaseName("alldbs")
        let names = ["a", "b", "c"].map { "\(prefix)-\($0)" }
        do {
            for name in names { _ = try await client.execute(CreateDatabaseOperation(name: name)) }
            _ = try await client.execute(
                PutDocumentOperation(database: names[1], id: "x", document: Note(text: "x", n: 1)))
            let end = prefix + "-\u{fff0}"
            let all = try await client.value(ListDatabasesOperation(startKey: prefix, endKey: end))
            #expect(all == names)
            let page1 = try await client.value(ListDatabasesOperation(limit: 2, startKey: prefix, endKey: end))
            #expect(page1 == Array(names[0..<2]))
            let page2 = try await client.value(
                ListDatabasesOperation(limit: 2, skip: 2, startKey: prefix, endKey: end))
            #expect(page2 == [names[2]])
            let backwards = try await client.value(
                ListDatabasesOperation(descending: true, startKey: end, endKey: prefix))
            #expect(backwards == names.reversed())
            let everything = try await client.value(ListDatabasesOperation())
            #expect(everything.contains("_users"))
            #expect(Set(names).isSubset(of: Set(everything)))

            for name in names { try await settle(client, name) }  // `_dbs_info` reads one copy of each shard
            let infos = try await converged(
                read: {
                    try await client.value(GetDatabasesInfoOperation(startKey: prefix, endKey: end))
                }, until: { $0.map { $0.info?.docCount } == [0, 1, 0] })
            #expect(infos.map(\.key) == names)
            #expect(infos.map { $0.info?.docCount } == [0, 1, 0])
            #expect(infos.allSatisfy { $0.info?.dbName == $0.key && $0.error == nil })
            let limited = try await client.value(GetDatabasesInfoOperation(limit: 1, startKey: names[1], endKey: end))
            #expect(limited.map(\.key) == [names[1]])

            let missing = prefix + "-missing"
            let byKeys = try await client.value(GetDatabasesInfoOperation(keys: [missing, names[1]]))
            #expect(byKeys.map(\.key) == [missing, names[1]])
            #expect(byKeys[0].error == "not_found")
            #expect(byKeys[0].info == nil)
            #expect(byKeys[1].info?.docCount == 1)
        } catch {
            for name in names { _ = try? await client.execute(DeleteDatabaseOperation(name: name)) }
            throw error
        }
        for name in names { _ = try await client.execute(DeleteDatabaseOperation(name: name)) }
    }

    @Test("GET /_active_tasks and /_membership decode")
    func tasksAndMembership() async throws {
        let client = E2EEnvironment.shared.client()
        let tasks = try await client.value(GetActiveTasksOperation())
        #expect(tasks.allSatisfy { !$0.type.rawValue.isEmpty })
        let membership = try await client.value(GetMembershipOperation())
        #expect(!membership.allNodes.isEmpty)
        #expect(!membership.clusterNodes.isEmpty)
        #expect(Set(membership.clusterNodes).isSubset(of: Set(membership.allNodes)))
    }

    /// CouchDB serves `_db_updates` from the `_global_changes` database, which a single node does
    /// not have until someone creates it: without it the feed is 404. The test never creates it on a
    /// shared server (and could not delete it again: deleting `_global_changes` stops CouchDB's
    /// global_changes application and, with it, the node); it follows the feed where the database
    /// exists, and on a TestServer of its own where it does not.
    @Test("GET /_db_updates: 404 without _global_changes; with it, normal, and longpoll sees a new database")
    func databaseUpdates() async throws {
        let client = E2EEnvironment.shared.client()
        if try await client.value(DatabaseExistsOperation(name: "_global_changes")) {
            try await Self.followDatabaseUpdates(client)
        } else {
            do {
                _ = try await client.value(GetDatabaseUpdatesOperation())
                Issue.record("_db_updates answered without _global_changes")
            } catch {
                #expect(error.statusCode == 404)
                #expect(error.error == "not_found")
                #expect(error.reason == "Database does not exist.")
            }
            try await withPrivateTestServer(for: "the _db_updates feed (the server has no _global_changes)") {
                _, privateClient in
                _ = try await privateClient.execute(CreateDatabaseOperation(name: "_global_changes"))
                try await Self.followDatabaseUpdates(privateClient)
            }
        }
    }

    static func followDatabaseUpdates(_ client: CouchDBClient) async throws {
        let normal = try await client.value(GetDatabaseUpdatesOperation())
        #expect(normal.results.allSatisfy { !$0.dbName.isEmpty && !$0.type.isEmpty })

        // Returns at the timeout (or earlier when other tests create databases meanwhile).
        let quiet = try await client.value(GetDatabaseUpdatesOperation(feed: .longpoll, since: .now, timeout: 200))
        #expect(quiet.results.allSatisfy { !$0.dbName.isEmpty })

        let start = try await client.value(GetDatabaseUpdatesOperation(feed: .longpoll, since: .now, timeout: 100))
        try await withDatabase("dbupdates", client: client) { client, db in
            var since = start.lastSeq
            var seen: [DatabaseUpdate] = []
            for _ in 0..<20 where !seen.contains(where: { $0.dbName == db }) {
                let page = try await client.value(
                    GetDatabaseUpdatesOperation(feed: .longpoll, since: since, timeout: 1_000))
                seen += page.results
                since = page.lastSeq
            }
            let mine = seen.filter { $0.dbName == db }
            #expect(!mine.isEmpty, "no _db_updates event for \(db)")
            #expect(mine.allSatisfy { ["created", "updated"].contains($0.type) })
        }
    }

    @Test("_node/_local/_config: read all, a section and a value; write, read back, delete, 404 afterwards")
    func configuration() async throws {
        let client = E2EEnvironment.shared.client()
        let all = try await client.value(GetConfigurationOperation())
        // Keys CouchDB 3.5's default.ini sets (max_document_size, say, is commented out there).
        let couchdb = try #require(all["couchdb"])
        let uuid = try #require(couchdb["uuid"])
        #expect(uuid == (try await client.value(GetServerInfoOperation())).uuid)  // the uuid GET / reports
        #expect(all["couch_httpd_auth"]?["authentication_db"] == "_users")
        let section = try await client.value(GetConfigurationSectionOperation(section: "couch_httpd_auth"))
        #expect(section["authentication_db"] == "_users")
        let value = try await client.value(
            GetConfigurationValueOperation(section: "couch_httpd_auth", key: "authentication_db"))
        #expect(value == "_users")
        do {
            _ = try await client.execute(
                GetConfigurationValueOperation(section: "couchdb", key: "swiftcouch_no_such_key"))
            Issue.record("an unknown configuration key should be 404")
        } catch {
            #expect(error.statusCode == 404)
            #expect(error.reason == "unknown_config_value")
        }

        // A section and key of our own, removed at the end, so the server is left as it was.
        let ownSection = "swiftcouch_e2e"
        let key = "k" + UUID().uuidString.lowercased().prefix(8)
        do {
            let previous = try await client.value(
                SetConfigurationValueOperation(section: ownSection, key: key, value: "first value"))
            #expect(previous == "")
            let replaced = try await client.value(
                SetConfigurationValueOperation(section: ownSection, key: key, value: "second, with \"quotes\""))
            #expect(replaced == "first value")
            let read = try await client.value(GetConfigurationValueOperation(section: ownSection, key: key))
            #expect(read == "second, with \"quotes\"")
            let own = try await client.value(GetConfigurationSectionOperation(section: ownSection))
            #expect(own[key] == "second, with \"quotes\"")
        } catch {
            _ = try? await client.execute(DeleteConfigurationValueOperation(section: ownSection, key: key))
            throw error
        }
        let deleted = try await client.value(DeleteConfigurationValueOperation(section: ownSection, key: key))
        #expect(deleted == "second, with \"quotes\"")
        do {
            _ = try await client.execute(GetConfigurationValueOperation(section: ownSection, key: key))
            Issue.record("a deleted configuration value should be 404")
        } catch {
            #expect(error.statusCode == 404)
            #expect(error.error == "not_found")
        }
        do {
            _ = try await client.execute(DeleteConfigurationValueOperation(section: ownSection, key: key))
            Issue.record("deleting a missing configuration value should be 404")
        } catch {
            #expect(error.statusCode == 404)
        }
    }

    @Test("_node/_local/_stats (whole and one metric) and _system")
    func statisticsAndSystem() async throws {
        let client = E2EEnvironment.shared.client()
        let stats = try await client.value(GetNodeStatisticsOperation())
        let requestTime = try #require(stats["couchdb", "request_time"]?.metric)
        #expect(requestTime.type == "histogram")
        let openDatabases = try #require(stats["couchdb", "open_databases"]?.metric)
        #expect(openDatabases.type == "counter")
        let one = try await client.value(GetNodeStatisticsOperation(path: ["couchdb", "request_time"]))
        #expect(one.metric?.type == "histogram")

        let system = try await client.value(GetNodeSystemOperation())
        #expect((system.uptime ?? -1) >= 0)
        #expect(system.memory != nil)
        #expect((system.processLimit ?? 0) > 0)

        do {
            _ = try await client.execute(GetNodeSystemOperation(node: "nobody@nowhere"))
            Issue.record("an unknown node should fail")
        } catch {
            #expect(error.kind == .http)
            #expect(error.statusCode.map { (400..<600).contains($0) } == true)
        }
    }

    @Test("GET /_scheduler/jobs and /_scheduler/docs decode, with limit")
    func scheduler() async throws {
        let client = E2EEnvironment.shared.client()
        let jobs = try await client.value(GetSchedulerJobsOperation())
        #expect(jobs.jobs.count <= jobs.totalRows)
        let limited = try await client.value(GetSchedulerJobsOperation(limit: 1))
        #expect(limited.jobs.count <= 1)
        let docs = try await client.value(GetSchedulerDocumentsOperation())
        #expect(docs.docs.count <= docs.totalRows)
        let replicator = try await client.value(GetSchedulerDocumentsOperation(database: "_replicator", limit: 5))
        #expect(replicator.docs.count <= 5)
        #expect(replicator.docs.allSatisfy { $0.database == "_replicator" })
    }

    @Test("Cloudant capacity/throughput: used where supported, otherwise a clean CouchError")
    func cloudantThroughput() async throws {
        let client = E2EEnvironment.shared.client()
        do {
            let provisioned = try await client.value(GetProvisionedThroughputOperation())
            #expect(provisioned.current.read > 0)
            let current = try await client.value(GetCurrentThroughputOperation())
            #expect(current.throughput.read >= 0)
        } catch {
            expectUnsupported("Cloudant capacity/throughput", error)
        }
    }
}
