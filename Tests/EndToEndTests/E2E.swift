import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import Testing

/// Where the end-to-end tests run: a real CouchDB named by `COUCHDB_URL`, or else the TestServer the test binary
/// starts (shared with the replication tests; see `SwiftCouchTestSupport`).
typealias E2EEnvironment = CouchTestEnvironment

/// Creates a uniquely named database, runs `body`, and deletes the database afterwards, so the
/// server is left as it was found.
func withDatabase(
    _ purpose: String, client: CouchDBClient? = nil, partitioned: Bool? = nil,
    _ body: (CouchDBClient, String) async throws -> Void
) async throws {
    let client = client ?? E2EEnvironment.shared.client()
    let name = E2EEnvironment.uniqueDatabaseName(purpose)
    _ = try await client.execute(CreateDatabaseOperation(name: name, partitioned: partitioned))
    do {
        try await body(client, name)
    } catch {
        _ = try? await client.execute(DeleteDatabaseOperation(name: name))
        throw error
    }
    _ = try await client.execute(DeleteDatabaseOperation(name: name))
}

/// A small document type.
struct Note: Codable, Sendable, Equatable {
    var _id: String?
    var _rev: String?
    var text: String
    var n: Int
}

/// Reads with `read` until `done` holds (at most `seconds`), and returns the last value: for reads
/// CouchDB serves from one copy of each shard (`_all_docs`, views, `_changes`, `_security`,
/// `_local_docs`, `_dbs_info`), which on a cluster may lag behind a write just acknowledged.
/// CouchDB promises that they converge, not that they see the write at once.
///
/// On a real cluster successive requests may reach different copies, so the condition must hold
/// on three reads in a row.
func converged<T>(
    seconds: Double = 30, read: () async throws -> T, until done: (T) -> Bool
) async throws -> T {
    var patience = Patience(seconds: seconds)
    var value = try await read()
    var streak = done(value) ? 1 : 0
    while streak < 3, try await patience.waitAgain(pause: streak > 0 ? 0.02 : 0.05) {
        value = try await read()
        streak = done(value) ? streak + 1 : 0
    }
    return value
}

/// How long a retry loop may go on, counted in the pauses it slept rather than on the wall clock.
///
/// In a full parallel run synchronous tests can hold every cooperative thread for longer than any
/// deadline a test would set (48 s has been seen on a 2-core machine), and a loop bounded by
/// `Date()` would then give up after one try without the server having had its time. Counting
/// the pauses it slept, a loop waits at least `seconds` of its own, however long it was held off.
struct Patience {
    private var slept: Double = 0
    let seconds: Double

    init(seconds: Double = 30) { self.seconds = seconds }

    /// Sleeps `pause` and returns true, or returns false once `seconds` of pauses were slept.
    mutating func waitAgain(pause: Double = 0.05) async throws -> Bool {
        guard slept < seconds else { return false }
        try await Task.sleep(nanoseconds: UInt64(pause * 1_000_000_000))
        slept += pause
        return true
    }

    /// False when `done`; otherwise as `waitAgain(pause:)`: `repeat { … } while try await
    /// patience.waitAgain(unless: …)`.
    mutating func waitAgain(unless done: Bool, pause: Double = 0.05) async throws -> Bool {
        done ? false : try await waitAgain(pause: pause)
    }
}

/// Waits until every copy of document `id` has revision `rev`: on a cluster, a copy that has not
/// seen it would take a write based on an older revision (a conflict branch, not a 409) or refuse
/// attachment stubs it does not know. Reads from every copy (`r` = n; a quorum read repairs the
/// copies it sees behind). Immediate on a single node.
func awaitEveryCopy(_ client: CouchDBClient, _ db: String, id: String, rev: String) async throws {
    var everyCopy = GetDocumentOperation<JSONValue>(database: db, id: id)
    everyCopy.readQuorum = (try await client.value(GetDatabaseInfoOperation(name: db))).cluster?.n ?? 1
    _ = try await converged(read: { try? await client.value(everyCopy) }, until: { $0?["_rev"] == .string(rev) })
}

/// ``awaitEveryCopy(_:_:id:rev:)`` for many documents at once (a bulk write's results), a few
/// at a time: for queries such as `_find`, whose every request may reach any copy of a shard.
func awaitEveryCopy(_ client: CouchDBClient, _ db: String, writes: [(id: String, rev: String)]) async throws {
    var pending = writes[...]
    while !pending.isEmpty {
        let slice = pending.prefix(8)
        pending = pending.dropFirst(8)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for write in slice { group.addTask { try await awaitEveryCopy(client, db, id: write.id, rev: write.rev) } }
            try await group.waitForAll()
        }
    }
}

/// The HTTP status `request` ends with (200 for an answer, nil for a non-HTTP error), read until
/// it is `expected` (see ``converged(seconds:read:until:)``): for what a cluster's copies learn
/// soon, not at once (a `_security` change, a user's new roles).
func convergedStatus(_ expected: Int, _ request: () async throws -> Void) async throws -> Int? {
    try await converged(
        read: { () async -> Int? in
            do {
                try await request()
                return 200
            } catch let error as CouchError {
                return error.statusCode
            } catch {
                return nil
            }
        }, until: { $0 == expected })
}

/// Waits until reads served from one copy of each shard (`_changes`, `_all_docs`, views, ...)
/// have caught up with every write made to `db` so far: on a cluster they may lag behind writes
/// already acknowledged (CouchDB promises convergence, not read-your-writes). Compares the
/// number CouchDB's sequences start with (the sum of the shards' own sequences) of `_changes`
/// with that of the database's `update_seq`. Immediate on a single node.
func settle(_ client: CouchDBClient, _ db: String, seconds: Double = 30) async throws {
    func count(_ sequence: String) -> Int { Int(sequence.prefix { $0.isNumber }) ?? 0 }
    let info = try await client.value(GetDatabaseInfoOperation(name: db))
    let target: Int
    switch info.updateSeq {
    case .string(let text): target = count(text)
    case .int(let number): target = Int(number)
    default: target = 0
    }
    _ = try await converged(
        seconds: seconds,
        read: {
            try await client.value(ChangesOperation<JSONValue>(database: db, since: .now)).lastSeq.queryValue
        }, until: { count($0) >= target })
}
