import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchTestSupport
import Testing

/// Where the replication tests' remote databases live: a real CouchDB named by `COUCHDB_URL`, or else the TestServer
/// the test binary starts (shared with the end-to-end tests; see `SwiftCouchTestSupport`).
typealias SyncEnvironment = CouchTestEnvironment

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
