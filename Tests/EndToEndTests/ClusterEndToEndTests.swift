import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import Testing

/// What users of Cloudant or of a clustered CouchDB meet, against the TestServer's cluster mode:
/// three nodes, three copies of each shard, write quorums, and reads that may lag.
@Suite("End to end: a cluster of three nodes")
struct ClusterEndToEndTests {
    static func clusterConfiguration(replicaLag: Double = 0) -> TestServer.Configuration {
        var configuration = TestServer.Configuration()
        configuration.nodes = 3
        configuration.replicaLag = replicaLag
        return configuration
    }

    @Test("_membership lists every node, each answers _node/{name}, and shards have three copies")
    func membershipAndShards() async throws {
        try await withPrivateTestServer(for: "cluster membership", configuration: Self.clusterConfiguration()) {
            server, client in
            let membership = try await client.value(GetMembershipOperation())
            #expect(membership.allNodes.count == 3)
            #expect(Set(membership.clusterNodes) == Set(server.nodeNames))
            for node in server.nodeNames {
                let value = try await client.value(
                    GetConfigurationValueOperation(section: "couch_httpd_auth", key: "authentication_db", node: node))
                #expect(value == "_users")
            }
            let db = E2EEnvironment.uniqueDatabaseName("cluster")
            _ = try await client.execute(CreateDatabaseOperation(name: db))
            let info = try await client.value(GetDatabaseInfoOperation(name: db))
            #expect(info.cluster?.n == 3)
            #expect(info.cluster?.w == 2)
            let shards = try await client.value(GetShardsOperation(database: db))
            #expect(shards.shards.values.allSatisfy { Set($0).count == 3 })
            _ = try await client.execute(DeleteDatabaseOperation(name: db))
        }
    }

    /// Writes are acknowledged by a quorum (w=2 of 3). With two of the three nodes down, a write
    /// is made on the one copy left and answered 202 Accepted: not durable yet.
    @Test("With nodes down a write is 202 Accepted and the client says it is not durable; with all down it fails")
    func acceptedWithoutQuorum() async throws {
        try await withPrivateTestServer(for: "cluster 202", configuration: Self.clusterConfiguration()) {
            server, client in
            let db = E2EEnvironment.uniqueDatabaseName("quorum")
            _ = try await client.execute(CreateDatabaseOperation(name: db))
            let durable = try await client.value(
                PutDocumentOperation(database: db, id: "a", document: Note(text: "all up", n: 1)))
            #expect(!durable.isAccepted)

            server.markNodesDown(Set(server.nodeNames.dropFirst()))
            let accepted = try await client.value(
                PutDocumentOperation(database: db, id: "b", document: Note(text: "one copy", n: 2)))
            #expect(accepted.isAccepted)
            #expect(accepted.rev?.hasPrefix("1-") == true)
            let posted = try await client.value(CreateDocumentOperation(database: db, document: Note(text: "p", n: 3)))
            #expect(posted.isAccepted)
            let deleted = try await client.value(DeleteDocumentOperation(database: db, id: "a", revision: durable.rev!))
            #expect(deleted.isAccepted)
            // `w=1` asks for one copy only: that is met.
            var one = PutDocumentOperation(database: db, id: "c", document: Note(text: "w=1", n: 4))
            one.writeQuorum = 1
            #expect(try await client.value(one).isAccepted == false)

            server.markNodesDown(Set(server.nodeNames))
            do {
                _ = try await client.value(
                    PutDocumentOperation(database: db, id: "d", document: Note(text: "none", n: 5)))
                Issue.record("a write with no copy up succeeded")
            } catch let error as CouchError {
                #expect(error.statusCode == 500)
            }
            server.markNodesDown([])
            #expect(try await client.value(GetDocumentOperation<Note>(database: db, id: "b")).text == "one copy")
            #expect(
                await statusOf { try await client.execute(GetDocumentOperation<Note>(database: db, id: "d")) } == 404)
            _ = try await client.execute(DeleteDatabaseOperation(name: db))
        }
    }

    /// Reads CouchDB serves from one copy may come from a copy that has not seen the latest
    /// writes; they converge. A test (or an application) must wait for that, or read with a
    /// quorum (a document GET's default), never assume read-your-writes on `_all_docs`.
    @Test("Replica lag: _all_docs, _changes and r=1 reads may miss a fresh write, then converge; a quorum read sees it")
    func replicaLag() async throws {
        try await withPrivateTestServer(
            for: "replica lag", configuration: Self.clusterConfiguration(replicaLag: 10_000)
        ) {
            server, client in
            let db = E2EEnvironment.uniqueDatabaseName("lag")
            _ = try await client.execute(CreateDatabaseOperation(name: db))
            _ = try await client.value(AllDocsOperation<JSONValue>(database: db))  // the copy as it is now
            _ = try await client.value(PutDocumentOperation(database: db, id: "fresh", document: Note(text: "x", n: 1)))
            let stale = try await client.value(AllDocsOperation<JSONValue>(database: db))
            #expect(stale.rows.isEmpty)  // the lagging copy has not seen it
            var oneCopy = GetDocumentOperation<Note>(database: db, id: "fresh")
            oneCopy.readQuorum = 1
            #expect(await statusOf { try await client.execute(oneCopy) } == 404)
            // A quorum read (the default for a document) sees it at once.
            #expect(try await client.value(GetDocumentOperation<Note>(database: db, id: "fresh")).n == 1)
            // Converges: once the copy catches up (here, at most 0.2 s from now on).
            server.setReplicaLag(0.2)
            let converged = try await eventually(seconds: 30) {
                try await client.value(AllDocsOperation<JSONValue>(database: db)).rows.count == 1
            }
            #expect(converged)
            let changes = try await client.value(ChangesOperation<JSONValue>(database: db))
            #expect(changes.results.map(\.id) == ["fresh"])
            _ = try await client.execute(DeleteDatabaseOperation(name: db))
        }
    }
}

/// The HTTP status `body` ended with: its response's, or its error's.
func statusOf<T>(_ body: () async throws -> CouchResponse<T>) async -> Int? {
    do {
        return try await body().statusCode
    } catch let error as CouchError {
        return error.statusCode
    } catch {
        return nil
    }
}

/// Polls `condition` until it holds, or until it has waited `seconds` (see ``Patience``): for what
/// CouchDB promises only eventually.
func eventually(seconds: Double = 10, _ condition: () async throws -> Bool) async throws -> Bool {
    var patience = Patience(seconds: seconds)
    repeat {
        if try await condition() { return true }
    } while try await patience.waitAgain()
    return false
}
