import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchSync
import SwiftCouchTestSupport
import Testing

/// The TestServer, local stores and databases the replication tests use.
enum SyncFixture {
    /// Where the remote databases live: a real CouchDB named by `COUCHDB_URL` (with `COUCHDB_USER`
    /// and `COUCHDB_PASSWORD`), or else a TestServer started in this process
    /// (`SWIFTCOUCH_TESTSERVER_NODES=3` and `SWIFTCOUCH_TESTSERVER_REPLICA_LAG` for its cluster mode).
    static let remote: (url: URL, credentials: Credentials, server: TestServer?) = {
        let environment = ProcessInfo.processInfo.environment
        if let raw = environment["COUCHDB_URL"], !raw.isEmpty, let url = URL(string: raw) {
            let credentials = Credentials(
                username: environment["COUCHDB_USER"] ?? "admin",
                password: environment["COUCHDB_PASSWORD"] ?? "password")
            return (url, credentials, nil)
        }
        var configuration = TestServer.Configuration()
        configuration.nodes = Int(environment["SWIFTCOUCH_TESTSERVER_NODES"] ?? "") ?? 1
        configuration.replicaLag = Double(environment["SWIFTCOUCH_TESTSERVER_REPLICA_LAG"] ?? "") ?? 0
        do {
            let server = try TestServer.start(configuration)
            return (server.url, server.adminCredentials, server)
        } catch {
            fatalError("Could not start the TestServer: \(error)")
        }
    }()

    /// The TestServer's replica lag in cluster mode (0 otherwise).
    static let replicaLag = Double(ProcessInfo.processInfo.environment["SWIFTCOUCH_TESTSERVER_REPLICA_LAG"] ?? "") ?? 0

    /// In cluster mode, waits out the replicas' lag, so that what was just written is what every
    /// replica (and so `_changes`) shows: a replication started at once would rightly not see it yet.
    static func settle() async {
        guard remote.server != nil, replicaLag > 0 else { return }
        try? await Task.sleep(nanoseconds: UInt64((replicaLag * 2 + 0.2) * 1_000_000_000))
    }

    /// A client of the remote server, as its admin.
    static func client() -> CouchDBClient {
        var configuration = Configuration()
        configuration.retryPolicy = RetryPolicy(maximumRetries: 8, initialDelay: 0.02, maximumDelay: 0.5)
        return CouchDBClient(url: remote.url, credentials: remote.credentials, configuration: configuration)
    }

    /// A new, empty remote database.
    static func remoteDatabase(_ client: CouchDBClient, create: Bool = true) async throws -> Database {
        let database = client.database("sync-\(UUID().uuidString.lowercased().prefix(12))")
        if create { try await database.create() }
        return database
    }

    /// A new directory path under the temporary directory (not created).
    static func temporaryDirectory() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("swiftcouchsync-\(UUID().uuidString)")
    }

    /// Writes revisions as they are (`new_edits=false`): `rev` with its ancestors `history`
    /// (newest first, without the generation prefix).
    static func writeRevision(
        _ client: CouchDBClient, _ database: String, id: String, generation: Int, hashes: [String],
        deleted: Bool = false, body: [String: JSONValue] = [:]
    ) async throws {
        var members = body
        members["_id"] = .string(id)
        members["_rev"] = .string("\(generation)-\(hashes[0])")
        members["_revisions"] = .object(["start": .int(Int64(generation)), "ids": .array(hashes.map(JSONValue.string))])
        if deleted { members["_deleted"] = .bool(true) }
        let rows = try await client.value(
            BulkDocsOperation(database: database, documents: [JSONValue.object(members)], newEdits: false))
        #expect(rows.allSatisfy { $0.error == nil })
    }

    /// Fills `database` with plain documents, updated ones, tombstones and a conflicted document
    /// (three live leaves, one deleted leaf) and a design document.
    static func fill(_ store: any DocumentStore, count: Int = 30) async throws {
        var documents: [JSONValue] = []
        for index in 0..<count {
            documents.append(.object(["_id": .string(String(format: "doc-%04d", index)), "n": .int(Int64(index))]))
        }
        let written = try await store.bulk(documents)
        // Update every third, delete every fifth.
        for (index, row) in written.enumerated() {
            guard case .success(let id, let rev) = row else { continue }
            if index % 5 == 0 {
                try await store.delete(id, revision: rev)
            } else if index % 3 == 0 {
                try await store.put(
                    JSONValue.object(["n": .int(Int64(index)), "updated": .bool(true)]), id: id, revision: rev)
            }
        }
        let client = store.client
        try await writeRevision(
            client, store.name, id: "conflicted", generation: 2, hashes: ["aaa", "root"], body: ["v": "a"])
        try await writeRevision(
            client, store.name, id: "conflicted", generation: 2, hashes: ["bbb", "root"], body: ["v": "b"])
        try await writeRevision(
            client, store.name, id: "conflicted", generation: 3, hashes: ["ccc", "ddd", "root"], body: ["v": "c"])
        try await writeRevision(
            client, store.name, id: "conflicted", generation: 3, hashes: ["eee", "fff", "root"], deleted: true)
        try await store.put(
            JSONValue.object(["views": .object(["all": .object(["map": "function(doc){emit(doc._id,null)}"])])]),
            id: "_design/app")
    }

    /// Every document's revision tree as comparable text: for each id (`_changes`, all leaves),
    /// each leaf (`open_revs=all&revs=true`) with its deletion, revision path and body.
    static func trees(_ store: any DocumentStore) async throws -> [String: [String]] {
        await settle()
        let client = store.client
        let feed = try await client.value(ChangesOperation<JSONValue>(database: store.name, style: .allDocs))
        var trees: [String: [String]] = [:]
        for change in feed.results {
            let leaves = try await client.value(
                GetOpenRevisionsOperation<JSONValue>(
                    database: store.name, id: change.id, revisions: .all,
                    options: DocumentReadOptions(revisions: true, attachments: true)))
            trees[change.id] = leaves.compactMap(\.document).map(canonical).sorted()
        }
        return trees
    }

    /// A document's JSON with sorted keys (attachments without `revpos`-independent noise kept).
    static func canonical(_ value: JSONValue) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return String(decoding: (try? encoder.encode(value)) ?? Data(), as: UTF8.self)
    }
}

/// Collects a replicator's events.
final class EventLog: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [ReplicationEvent] = []
    private var task: Task<Void, Never>?

    init(_ replicator: Replicator) {
        let stream = replicator.events()
        task = Task { [weak self] in
            for await event in stream { self?.append(event) }
        }
    }

    private func append(_ event: ReplicationEvent) {
        lock.lock()
        storage.append(event)
        lock.unlock()
    }

    /// Waits until the sequence has ended (the replication ended), then the events.
    func finished() async -> [ReplicationEvent] {
        await task?.value
        return lock.withLock { storage }
    }
}

extension Replicator {
    /// ``run()`` after the cluster's replicas have caught up with what the test wrote.
    @discardableResult
    func settledRun() async throws -> ReplicationSummary {
        await SyncFixture.settle()
        return try await run()
    }
}

extension Sync {
    /// ``run()`` after the cluster's replicas have caught up with what the test wrote.
    @discardableResult
    func settledRun() async throws -> Sync.Summary {
        await SyncFixture.settle()
        return try await run()
    }
}
