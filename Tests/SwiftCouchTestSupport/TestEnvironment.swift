import CouchTestServer
import Foundation
import SwiftCouch

/// Where the end-to-end and replication tests' remote databases live: a real CouchDB named by `COUCHDB_URL` (with
/// `COUCHDB_USER` and `COUCHDB_PASSWORD`), or else one TestServer started in this process, shared by every suite of
/// the test binary.
///
/// `SWIFTCOUCH_TESTSERVER_NODES=3` (and `SWIFTCOUCH_TESTSERVER_REPLICA_LAG=0.5`) run the suites against the
/// TestServer's cluster mode, as users of Cloudant or a clustered CouchDB meet it; `SWIFTCOUCH_TRANSPORT=socket` or
/// `urlsession` forces a transport on the clients made here.
public final class CouchTestEnvironment: Sendable {
    /// The server's URL.
    public let url: URL
    /// The admin's credentials.
    public let credentials: Credentials
    /// The embedded TestServer, when no `COUCHDB_URL` is set. Fault tests need it.
    public let testServer: TestServer?

    /// The one environment of the test binary (its TestServer started on first use).
    public static let shared: CouchTestEnvironment = {
        do {
            return try CouchTestEnvironment()
        } catch {
            fatalError("Could not start the embedded TestServer: \(error)")
        }
    }()

    /// Whether the tests run against a real CouchDB (`COUCHDB_URL`).
    public static var isRealCouchDB: Bool { shared.testServer == nil }

    /// The cluster's node count when the embedded TestServer runs in cluster mode (1 otherwise).
    public static let nodes = Int(ProcessInfo.processInfo.environment["SWIFTCOUCH_TESTSERVER_NODES"] ?? "") ?? 1

    /// How long the TestServer's lagging replicas take to see a write (`SWIFTCOUCH_TESTSERVER_REPLICA_LAG`); 0 against
    /// a real CouchDB.
    public static let replicaLag: Double = {
        let environment = ProcessInfo.processInfo.environment
        if let url = environment["COUCHDB_URL"], !url.isEmpty { return 0 }
        return Double(environment["SWIFTCOUCH_TESTSERVER_REPLICA_LAG"] ?? "") ?? 0
    }()

    /// The transport the suites run over: `SWIFTCOUCH_TRANSPORT=socket` or `urlsession` forces ``SocketTransport`` or
    /// ``URLSessionTransport``; unset, the library's default (``AutomaticTransport``: on Linux, the socket transport
    /// for the `http` TestServer).
    public static let transportChoice = ProcessInfo.processInfo.environment["SWIFTCOUCH_TRANSPORT"] ?? ""

    private init() throws {
        let environment = ProcessInfo.processInfo.environment
        if let raw = environment["COUCHDB_URL"], !raw.isEmpty, let url = URL(string: raw) {
            self.url = url
            self.credentials = Credentials(
                username: environment["COUCHDB_USER"] ?? "admin",
                password: environment["COUCHDB_PASSWORD"] ?? "password")
            self.testServer = nil
        } else {
            var configuration = TestServer.Configuration()
            configuration.nodes = Self.nodes
            configuration.replicaLag = Self.replicaLag
            let server = try TestServer.start(configuration)
            self.url = server.url
            self.credentials = server.adminCredentials
            self.testServer = server
        }
    }

    /// The retry policy of the tests' clients: quick retries, so that a test does not wait out a production backoff.
    public static let retryPolicy = RetryPolicy(maximumRetries: 8, initialDelay: 0.02, maximumDelay: 0.5)

    /// A client for the admin, over the forced transport if any, with a configuration the test may adjust.
    public func client(_ adjust: (inout Configuration) -> Void = { _ in }) -> CouchDBClient {
        var configuration = Configuration()
        configuration.retryPolicy = Self.retryPolicy
        Self.selectTransport(&configuration)
        adjust(&configuration)
        return CouchDBClient(url: url, credentials: credentials, configuration: configuration)
    }

    /// Puts the forced transport, if any, into `configuration`.
    public static func selectTransport(_ configuration: inout Configuration) {
        switch transportChoice {
        case "socket": configuration.transport = SocketTransport()
        case "urlsession": configuration.transport = URLSessionTransport()
        default: break
        }
    }

    /// A database name no other test (or earlier run) uses.
    public static func uniqueDatabaseName(_ purpose: String) -> String {
        "swiftcouch-test-\(purpose)-\(UUID().uuidString.lowercased().prefix(12))"
    }
}

/// Runs `body` against a TestServer of its own (so its faults, session expiries and request counts touch no other
/// test), with an admin client over the forced transport if any; or skips with a printed reason when the suites run
/// against a real CouchDB (`COUCHDB_URL`), since faults need the TestServer.
public func withPrivateTestServer(
    for what: String, configuration serverConfiguration: TestServer.Configuration = TestServer.Configuration(),
    concurrency: Int = 6, retryPolicy: RetryPolicy = CouchTestEnvironment.retryPolicy,
    _ body: (TestServer, CouchDBClient) async throws -> Void
) async throws {
    guard !CouchTestEnvironment.isRealCouchDB else {
        print("Skipping \(what): it needs the embedded TestServer (COUCHDB_URL is set).")
        return
    }
    let server = try TestServer.start(serverConfiguration)
    defer { server.stop() }
    var configuration = Configuration()
    configuration.retryPolicy = retryPolicy
    configuration.maximumConcurrentOperations = concurrency
    CouchTestEnvironment.selectTransport(&configuration)
    let client = server.adminClient(configuration: configuration)
    defer { client.shutdown() }
    try await body(server, client)
}
