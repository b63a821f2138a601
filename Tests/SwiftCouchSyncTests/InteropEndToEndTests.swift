import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchSync
import SwiftCouchTestSupport
import Testing

/// Interoperability: CouchDB's own replicator against a TestServer serving a local database (with
/// `COUCHDB_URL`), and SwiftCouch's replicator against the server's own on the same source.
@Suite struct InteropEndToEndTests {
    /// SwiftCouch's replicator and the server's (CouchDB's with `COUCHDB_URL`, else the TestServer's)
    /// copy the same source: the two copies are identical, and identical to the source.
    @Test func swiftCouchsCopyIsIdenticalToTheServersOwn() async throws {
        try await withRemoteDatabases("interop", count: 3) { endpoints in
            let (source, ours, theirs) = (endpoints[0], endpoints[1], endpoints[2])
            _ = try await Corpus.build(in: source, spec: .onRequest)
            let run = try await replicate(source.remote, ours.remote)
            #expect(run.summary.docWriteFailures == 0)
            let answer = try await serverReplicate(source, theirs)
            #expect(answer["history"]?[0]?["doc_write_failures"]?.intValue ?? 0 == 0, "\(answer)")
            try await expectIdenticalTrees(theirs, ours, "SwiftCouch's copy against the server's")
            try await expectIdenticalTrees(source, ours, "SwiftCouch's copy against the source")
        }
    }

    /// CouchDB's replicator pulls from and pushes to a TestServer that serves a local database (the
    /// store a `LocalDatabase` wrote, opened by the TestServer over HTTP): 0 failures, identical trees.
    @Test func couchDBsReplicatorAgainstATestServerServingALocalDatabase() async throws {
        guard SyncEnvironment.isRealCouchDB else {
            print("Skipping the CouchDB interoperability test: it needs a real CouchDB (COUCHDB_URL).")
            return
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sync-interop-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        // A local database written by the app, then served over HTTP.
        let local = try await LocalDatabase.open(at: directory, name: "app")
        let corpus = try await Corpus.build(in: Endpoint(local), spec: .onRequest, seed: 7)
        local.close()
        var configuration = TestServer.Configuration()
        // The store keeps its engine's files in `data` beside its lock.
        configuration.dataDirectory = directory.appendingPathComponent("data", isDirectory: true)
        configuration.passwordIterations = 10
        let server = try TestServer.start(configuration)
        defer { server.stop() }
        let testClient = server.adminClient()
        defer { testClient.shutdown() }
        let served = Endpoint(testClient, "app")
        let basic =
            "Basic " + Data("\(server.adminName):\(server.adminPassword)".utf8).base64EncodedString()
        let environment = SyncEnvironment.shared
        let couchBasic =
            "Basic "
            + Data("\(environment.credentials.username):\(environment.credentials.password)".utf8)
            .base64EncodedString()
        func url(_ base: URL, _ name: String, _ authorization: String) -> JSONValue {
            ["url": .string(base.absoluteString + "/" + name), "headers": ["Authorization": .string(authorization)]]
        }
        try await withRemoteDatabases("interop-couch", count: 1) { endpoints in
            let couch = endpoints[0]
            // CouchDB pulls from the TestServer.
            let pull = try await couch.client.value(
                GenericJSONOperation<JSONValue>(
                    try GenericOperation(
                        method: .post, path: CouchPath("_replicate"),
                        jsonBody: JSONValue.object([
                            "source": url(server.url, "app", basic),
                            "target": url(environment.url, couch.database, couchBasic),
                        ]))),
                options: CallOptions(timeout: 600))
            #expect(pull["ok"] == true, "\(pull)")
            #expect(pull["history"]?[0]?["doc_write_failures"]?.intValue == 0, "\(pull)")
            try await expectIdenticalTrees(served, couch, "CouchDB pulling from the TestServer")
            #expect(try await corpus.localDocumentsPresent(in: couch).isEmpty)

            // CouchDB pushes to the TestServer (a new database there).
            _ = try await testClient.execute(CreateDatabaseOperation(name: "pushed"))
            let push = try await couch.client.value(
                GenericJSONOperation<JSONValue>(
                    try GenericOperation(
                        method: .post, path: CouchPath("_replicate"),
                        jsonBody: JSONValue.object([
                            "source": url(environment.url, couch.database, couchBasic),
                            "target": url(server.url, "pushed", basic),
                        ]))),
                options: CallOptions(timeout: 600))
            #expect(push["ok"] == true, "\(push)")
            #expect(push["history"]?[0]?["doc_write_failures"]?.intValue == 0, "\(push)")
            try await expectIdenticalTrees(couch, Endpoint(testClient, "pushed"), "CouchDB pushing to the TestServer")
        }
    }
}
