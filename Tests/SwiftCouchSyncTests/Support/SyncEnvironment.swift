import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchStore
import Testing

/// Where the replication tests' remote databases live: a real CouchDB named by `COUCHDB_URL` (with
/// `COUCHDB_USER` and `COUCHDB_PASSWORD`), or else a TestServer started in this process (a cluster of
/// `SWIFTCOUCH_TESTSERVER_NODES` nodes whose replicas lag `SWIFTCOUCH_TESTSERVER_REPLICA_LAG` seconds,
/// as the end-to-end suite runs in CI).
final class SyncEnvironment: Sendable {
    let url: URL
    let credentials: Credentials
    /// The embedded TestServer, when no `COUCHDB_URL` is set.
    let testServer: TestServer?

    static let shared: SyncEnvironment = {
        do {
            return try SyncEnvironment()
        } catch {
            fatalError("Could not start the embedded TestServer: \(error)")
        }
    }()

    /// Whether the tests run against a real CouchDB.
    static var isRealCouchDB: Bool { shared.testServer == nil }

    /// The cluster's node count when the embedded TestServer runs in cluster mode (1 otherwise).
    static let nodes = Int(ProcessInfo.processInfo.environment["SWIFTCOUCH_TESTSERVER_NODES"] ?? "") ?? 1

    /// How long the TestServer's lagging replicas take to see a write (`SWIFTCOUCH_TESTSERVER_REPLICA_LAG`).
    static let replicaLag: Double = {
        let environment = ProcessInfo.processInfo.environment
        if let url = environment["COUCHDB_URL"], !url.isEmpty { return 0 }
        return Double(environment["SWIFTCOUCH_TESTSERVER_REPLICA_LAG"] ?? "") ?? 0
    }()

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
            self.credentials = Credentials(username: server.adminName, password: server.adminPassword)
            self.testServer = server
        }
    }

    /// A client for the admin.
    func client(_ adjust: (inout Configuration) -> Void = { _ in }) -> CouchDBClient {
        var configuration = Configuration()
        configuration.retryPolicy = RetryPolicy(maximumRetries: 8, initialDelay: 0.02, maximumDelay: 0.5)
        adjust(&configuration)
        return CouchDBClient(url: url, credentials: credentials, configuration: configuration)
    }

    /// A database name no other test (or earlier run) uses.
    static func uniqueDatabaseName(_ purpose: String) -> String {
        "swiftcouch-sync-\(purpose)-\(UUID().uuidString.lowercased().prefix(12))"
    }
}

/// A database reached through a client: a remote database (TestServer or CouchDB) or a local one
/// (`local.client`, `local.name`).
struct Endpoint: Sendable, CustomStringConvertible {
    let client: CouchDBClient
    let database: String

    init(_ client: CouchDBClient, _ database: String) {
        self.client = client
        self.database = database
    }

    init(_ local: LocalDatabase) {
        self.init(local.client, local.name)
    }

    var description: String { database }

    /// Sends a request to `/{database}/{segments…}` and decodes the JSON answer.
    @discardableResult
    func json(
        _ method: HTTPMethod = .get, _ segments: [String] = [], query: [(String, String)] = [], body: JSONValue? = nil
    ) async throws -> JSONValue {
        try await client.value(GenericJSONOperation<JSONValue>(request(method, segments, query: query, body: body)))
    }

    /// Sends a request to `/{database}/{segments…}` and returns the answer's bytes.
    func data(
        _ method: HTTPMethod = .get, _ segments: [String] = [], query: [(String, String)] = [], body: Data? = nil,
        contentType: String? = nil
    ) async throws -> Data {
        var op = GenericOperation(
            method: method, path: CouchPath(segments: [database] + segments),
            query: query.map { URLQueryItem(name: $0.0, value: $0.1) }, body: body, contentType: contentType)
        if body != nil, contentType == nil { op.contentType = "application/json" }
        return try await client.execute(op).value.data
    }

    func request(_ method: HTTPMethod, _ segments: [String], query: [(String, String)], body: JSONValue?) throws
        -> GenericOperation
    {
        let items = query.map { URLQueryItem(name: $0.0, value: $0.1) }
        let path = CouchPath(segments: [database] + segments)
        if let body {
            return try GenericOperation(method: method, path: path, query: items, jsonBody: body)
        }
        return GenericOperation(method: method, path: path, query: items)
    }

    /// The path segments of document `id` (`_design/x` and `_local/x` keep their prefix as a segment).
    static func segments(_ id: String) -> [String] {
        for prefix in ["_design/", "_local/"] where id.hasPrefix(prefix) {
            return [String(prefix.dropLast()), String(id.dropFirst(prefix.count))]
        }
        return [id]
    }
}

/// Creates uniquely named databases on the shared server, runs `body`, and deletes them afterwards.
func withRemoteDatabases(
    _ purpose: String, count: Int = 1, client: CouchDBClient? = nil, _ body: ([Endpoint]) async throws -> Void
) async throws {
    let client = client ?? SyncEnvironment.shared.client()
    let names = (0..<count).map { _ in SyncEnvironment.uniqueDatabaseName(purpose) }
    for name in names { _ = try await client.execute(CreateDatabaseOperation(name: name)) }
    do {
        try await body(names.map { Endpoint(client, $0) })
    } catch {
        for name in names { _ = try? await client.execute(DeleteDatabaseOperation(name: name)) }
        throw error
    }
    for name in names { _ = try? await client.execute(DeleteDatabaseOperation(name: name)) }
}

/// Opens a local database in a temporary directory of its own, runs `body`, then closes and removes it.
func withLocalDatabase(_ name: String = "local", _ body: (LocalDatabase) async throws -> Void) async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
        "swiftcouch-sync-\(UUID().uuidString)")
    let local = try await LocalDatabase.open(at: directory, name: name)
    defer {
        local.close()
        try? FileManager.default.removeItem(at: directory)
    }
    try await body(local)
}

/// Runs `body` against a TestServer of its own (faults and request counts touch no other test), or
/// skips with a printed reason when the tests run against a real CouchDB.
func withPrivateTestServer(
    for what: String, configuration serverConfiguration: TestServer.Configuration = TestServer.Configuration(),
    _ body: (TestServer, CouchDBClient) async throws -> Void
) async throws {
    guard !SyncEnvironment.isRealCouchDB else {
        print("Skipping \(what): it needs the embedded TestServer (COUCHDB_URL is set).")
        return
    }
    let server = try TestServer.start(serverConfiguration)
    defer { server.stop() }
    var configuration = Configuration()
    configuration.retryPolicy = RetryPolicy(maximumRetries: 8, initialDelay: 0.02, maximumDelay: 0.5)
    let client = CouchDBClient(
        url: server.url, credentials: Credentials(username: server.adminName, password: server.adminPassword),
        configuration: configuration)
    defer { client.shutdown() }
    try await body(server, client)
}
