import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchSync
import Testing

extension Endpoint {
    /// The endpoint as a replication endpoint (a remote database handle).
    var remote: SwiftCouchSync.SyncEndpoint { .remote(client.database(database)) }
}

/// What one replication run ended with.
struct RunResult: Sendable {
    let summary: ReplicationSummary
    let events: [ReplicationEvent]
    let replicationID: String

    /// The documents written, as `id@rev`.
    var written: [String] {
        events.compactMap { event in
            if case .documentWritten(let doc) = event { return "\(doc.id)@\(doc.rev)" }
            return nil
        }
    }

    var denied: [DeniedWrite] {
        events.compactMap { event in
            if case .writeDenied(let denial) = event { return denial }
            return nil
        }
    }

    var checkpoints: Int {
        events.filter { if case .checkpoint = $0 { return true } else { return false } }.count
    }

    var completed: Bool {
        events.contains { if case .completed = $0 { return true } else { return false } }
    }

    /// `id@rev` written more than once in this run.
    var writtenTwice: [String] {
        Dictionary(grouping: written, by: { $0 }).filter { $0.value.count > 1 }.keys.sorted()
    }
}

/// Runs a one-shot replication to its end, with its events; fails when it takes longer than `deadline`
/// seconds (a generous bound proving it ended instead of hanging).
func replicate(
    _ source: SwiftCouchSync.SyncEndpoint, _ target: SwiftCouchSync.SyncEndpoint,
    _ options: ReplicationOptions = .init(),
    deadline: Double = 120
) async throws -> RunResult {
    try await settleReplicas()
    let replicator = Replicator(source: source, target: target, options: options)
    let log = EventLog(replicator)
    let summary = try await withDeadline(deadline, "replication \(replicator.replicationID)") {
        try await replicator.run()
    }
    return RunResult(summary: summary, events: await log.finished(), replicationID: replicator.replicationID)
}

struct DeadlineExceeded: Error, CustomStringConvertible {
    let description: String
}

/// `body`, or `DeadlineExceeded` after `seconds` (the body is cancelled).
func withDeadline<T: Sendable>(_ seconds: Double, _ what: String, _ body: @escaping @Sendable () async throws -> T)
    async throws -> T
{
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
            throw DeadlineExceeded(description: "\(what) did not end within \(seconds) s")
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

/// Waits (at most `seconds` of pauses) until `condition` holds; returns whether it did.
func eventually(_ seconds: Double = 60, pause: Double = 0.1, _ condition: () async throws -> Bool) async throws
    -> Bool
{
    var slept = 0.0
    while true {
        if try await condition() { return true }
        if slept >= seconds { return false }
        try await Task.sleep(nanoseconds: UInt64(pause * 1e9))
        slept += pause
    }
}

/// The requests a TestServer saw (method, path, query), for the database `name`.
func requests(_ server: TestServer, to name: String) -> [(method: String, path: String, query: String?)] {
    server.requestLog.filter { $0.path.hasPrefix("/\(name)/") || $0.path == "/\(name)" }.map {
        ($0.method, $0.path, $0.query)
    }
}

/// A TestServer's request handler that records every revision sent to `_bulk_docs` (`id@rev`) before
/// passing the request to the engine: a revision written twice shows as a repeated entry.
final class RecordingHandler: RequestHandler, @unchecked Sendable {
    let engine: ServerEngine
    private let lock = NSLock()
    private var revisions: [String] = []

    init(engine: ServerEngine) { self.engine = engine }

    func handle(_ request: ServerRequest) -> ServerResponse {
        let response = engine.handle(request)
        if request.method == "POST", request.rawPath.hasSuffix("/_bulk_docs"), (200..<300).contains(response.status),
            let json = try? JSONDecoder().decode(JSONValue.self, from: request.body)
        {
            let sent = (json["docs"]?.arrayValue ?? []).compactMap { doc -> String? in
                guard let id = doc["_id"]?.stringValue, let rev = doc["_rev"]?.stringValue else { return nil }
                return "\(request.rawPath.split(separator: "/").first ?? "")/\(id)@\(rev)"
            }
            lock.withLock { revisions += sent }
        }
        return response
    }

    /// Every revision accepted in a `_bulk_docs` body, as `db/id@rev`, in order.
    var recorded: [String] { lock.withLock { revisions } }

    /// Revisions sent more than once.
    var repeated: [String] {
        Dictionary(grouping: recorded, by: { $0 }).filter { $0.value.count > 1 }.keys.sorted()
    }
}

/// On the TestServer's cluster mode with lagging replicas, waits until writes just made are old enough for
/// every copy to serve them: a one-shot replication reads the source's `_changes` from one copy of each shard,
/// which (as on a real cluster) may not list a write made a moment before. Nothing to wait for otherwise.
func settleReplicas() async throws {
    if SyncEnvironment.replicaLag > 0 {
        try await Task.sleep(nanoseconds: UInt64((SyncEnvironment.replicaLag * 1.5 + 0.1) * 1e9))
    }
}
