import Foundation
import SwiftCouch
import Testing

/// The URL of a database on the server under test, optionally with the admin's credentials in it.
private func databaseURL(_ db: String, withCredentials: Bool) throws -> URL {
    let environment = E2EEnvironment.shared
    var components = try #require(URLComponents(url: environment.url, resolvingAgainstBaseURL: false))
    if withCredentials {
        components.percentEncodedUser = percentEncodedUserInfo(environment.credentials.username)
        components.percentEncodedPassword = percentEncodedUserInfo(environment.credentials.password)
    }
    let base =
        components.percentEncodedPath.hasSuffix("/")
        ? components.percentEncodedPath : components.percentEncodedPath + "/"
    components.percentEncodedPath = base + (db.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? db)
    return try #require(components.url)
}

/// Only what RFC 3986 does not leave as it is gets percent-encoded: CouchDB's replicator takes a
/// URL's user information verbatim, without decoding it (`swiftcouch%2Dadmin` is not the password
/// `swiftcouch-admin` to it), so credentials with reserved characters go in `basicAuth` instead.
private func percentEncodedUserInfo(_ text: String) -> String {
    text.addingPercentEncoding(withAllowedCharacters: CharacterSet(charactersIn: "-._~").union(.alphanumerics))
        ?? text
}

/// Waits (bounded) until `db` holds `count` documents; returns the last count seen.
private func waitForDocumentCount(_ client: CouchDBClient, _ db: String, _ count: Int) async throws -> Int {
    var seen = -1
    for _ in 0..<300 {
        seen = try await client.value(GetDatabaseInfoOperation(name: db)).docCount
        if seen == count { break }
        try await Task.sleep(nanoseconds: 100_000_000)
    }
    return seen
}

@Suite("End to end: replication")
struct ReplicationEndToEndTests {
    @Test("One-shot _replicate between two databases given as URLs (credentials in the URL, and as basic auth)")
    func oneShotByURL() async throws {
        try await withDatabase("rep-src") { client, source in
            try await withDatabase("rep-tgt", client: client) { client, target in
                try await writeNotes(client: client, db: source, ids: ["r1", "r2", "r3", "r4", "r5"])
                let result = try await client.value(
                    ReplicateOperation(
                        source: .remote(url: try databaseURL(source, withCredentials: true)),
                        target: .remote(
                            url: try databaseURL(target, withCredentials: false),
                            basicAuth: E2EEnvironment.shared.credentials)))
                #expect(result.ok)
                #expect(result.history?.first?.docsWritten == 5)
                #expect(result.sourceLastSeq != nil)
                let copied = try await converged(
                    read: {
                        try await client.value(AllDocsOperation<JSONValue>(database: target))
                    },
                    until: {
                        $0.rows.count == 5
                    })
                #expect(copied.rows.map(\.id) == ["r1", "r2", "r3", "r4", "r5"])
                let note = try await client.value(GetDocumentOperation<Note>(database: target, id: "r3"))
                let original = try await client.value(GetDocumentOperation<Note>(database: source, id: "r3"))
                #expect(note == original)

                // Again: nothing new to copy.
                _ = try await client.value(
                    PutDocumentOperation(database: source, id: "r6", document: Note(text: "6", n: 6)))
                let again = try await client.value(
                    ReplicateOperation(
                        source: .remote(url: try databaseURL(source, withCredentials: true)),
                        target: .remote(url: try databaseURL(target, withCredentials: true))))
                #expect(again.ok)
                // Database info sums one copy of each shard: on a cluster it may lag behind the copy.
                let count = try await converged(
                    read: { try await client.value(GetDatabaseInfoOperation(name: target)).docCount },
                    until: { $0 == 6 })
                #expect(count == 6)
            }
        }
    }

    @Test("_replicate: selected document ids; a missing target → db_not_found")
    func docIDsAndMissingTarget() async throws {
        try await withDatabase("rep-ids-src") { client, source in
            try await withDatabase("rep-ids-tgt", client: client) { client, target in
                try await writeNotes(client: client, db: source, ids: ["a", "b", "c"])
                var settings = ReplicationSettings(
                    source: .remote(url: try databaseURL(source, withCredentials: true)),
                    target: .remote(url: try databaseURL(target, withCredentials: true)))
                settings.docIDs = ["a", "c"]
                let result = try await client.value(ReplicateOperation(settings: settings))
                #expect(result.ok)
                let copied = try await converged(
                    read: {
                        try await client.value(AllDocsOperation<JSONValue>(database: target))
                    },
                    until: {
                        $0.rows.count == 2
                    })
                #expect(copied.rows.map(\.id) == ["a", "c"])

                do {
                    _ = try await client.execute(
                        ReplicateOperation(
                            source: .remote(url: try databaseURL(source, withCredentials: true)),
                            target: .remote(url: try databaseURL(target + "-missing", withCredentials: true))))
                    Issue.record("replicating to a missing database should fail")
                } catch let error as CouchError {
                    #expect(error.error == "db_not_found")
                    #expect(error.statusCode == 500)
                }

                // Credentials the server refuses: CouchDB's replicator reports its refused session request. An
                // unknown user, so no lockout of the admin follows however often the suite runs.
                var stranger = try #require(
                    URLComponents(url: try databaseURL(source, withCredentials: false), resolvingAgainstBaseURL: false))
                stranger.user = "swiftcouch-nobody"
                stranger.password = "wrong"
                do {
                    _ = try await client.execute(
                        ReplicateOperation(
                            source: .remote(url: try #require(stranger.url)),
                            target: .remote(url: try databaseURL(target, withCredentials: true))))
                    Issue.record("replicating with credentials the server refuses should fail")
                } catch let error as CouchError {
                    #expect(error.error == "replication_auth_error")
                    #expect(error.statusCode == 500)
                    #expect(error.reason?.contains("session_request_unauthorized") == true)
                }
            }
        }
    }

    @Test("_replicator document: create, read, the replication runs, delete")
    func replicatorDocument() async throws {
        try await withDatabase("repdoc-src") { client, source in
            try await withDatabase("repdoc-tgt", client: client) { client, target in
                try await writeNotes(client: client, db: source, ids: ["x1", "x2", "x3"])
                let id = "swiftcouch-e2e-" + UUID().uuidString.lowercased()
                let settings = ReplicationSettings(
                    source: .remote(
                        url: try databaseURL(source, withCredentials: false),
                        basicAuth: E2EEnvironment.shared.credentials),
                    target: .remote(
                        url: try databaseURL(target, withCredentials: false),
                        basicAuth: E2EEnvironment.shared.credentials))
                let created = try await client.value(
                    PutReplicationDocumentOperation(document: ReplicationDocument(id: id, settings: settings)))
                #expect(created.id == id)
                #expect(created.rev?.hasPrefix("1-") == true)
                do {
                    let read = try await client.value(GetReplicationDocumentOperation(id: id))
                    #expect(read.id == id)
                    #expect(read.settings.continuous == nil)
                    if case .remote(let url, _, let auth) = read.settings.source {
                        #expect(url.path.hasSuffix("/" + source))
                        #expect(auth?.username == E2EEnvironment.shared.credentials.username)
                    } else {
                        Issue.record("the source should read back as a remote endpoint: \(read.settings.source)")
                    }
                    #expect(try await waitForDocumentCount(client, target, 3) == 3)

                    let scheduled = try await client.value(GetSchedulerDocumentsOperation(database: "_replicator"))
                    if let mine = scheduled.docs.first(where: { $0.docID == id }) {
                        #expect(mine.database == "_replicator")
                        #expect(!mine.state.isEmpty)
                    }
                } catch {
                    if let doc = try? await client.value(GetReplicationDocumentOperation(id: id)),
                        let rev = doc.revision
                    {
                        _ = try? await client.execute(DeleteReplicationDocumentOperation(id: id, revision: rev))
                    }
                    throw error
                }
                // The replicator may have written `_replication_state` meanwhile: delete the current revision.
                var deleted = false
                for _ in 0..<5 where !deleted {
                    let current = try await client.value(GetReplicationDocumentOperation(id: id))
                    do {
                        let answer = try await client.value(
                            DeleteReplicationDocumentOperation(id: id, revision: try #require(current.revision)))
                        #expect(answer.ok == true)
                        deleted = true
                    } catch let error as CouchError where error.statusCode == 409 {
                        continue
                    }
                }
                #expect(deleted)
                // On a cluster, a copy may answer before it has seen the delete, and the replicator's
                // own update of the document on another copy may survive as a conflict branch: read
                // until it is gone, deleting what is still there.
                let status = try await convergedStatus(404) {
                    let current = try await client.value(GetReplicationDocumentOperation(id: id))
                    if let rev = current.revision {
                        _ = try? await client.execute(DeleteReplicationDocumentOperation(id: id, revision: rev))
                    }
                }
                #expect(status == 404, "a deleted replication document should be 404")
            }
        }
    }
}
