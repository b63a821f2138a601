import CouchTestServer
import Foundation
import SwiftCouch
@testable import SwiftCouchSync
import SwiftCouchTestSupport
import Testing

/// A one-shot replication whose source or target is deleted and created again mid-run, at a fixed point
/// (after its second batch, through the replicator's internal hook, so it works against the TestServer
/// and a real CouchDB alike). As CouchDB's replicator, it notices the new `instance_start_time` before
/// the next checkpoint and drops the session without a checkpoint; as CouchDB's scheduler does with a
/// crashed `_replicator` job, it then starts over, reading the checkpoints the databases hold now (none on
/// the new database: from the start). The run completes, once, and its events say what happened.
@Suite struct RecreatedPeerEndToEndTests {
    static let documents = 60
    static let newDocuments = 25

    @Test(arguments: ["target", "source"])
    func aOneShotRunStartsOverWhenAPeerIsRecreated(_ side: String) async throws {
        try await withRemoteDatabases("recreate-once", count: 2) { endpoints in
            let (source, target) = (endpoints[0], endpoints[1])
            let docs: [JSONValue] = (0..<Self.documents).map {
                ["_id": .string(String(format: "old-%03d", $0)), "n": .int(Int64($0))]
            }
            try await source.json(.post, ["_bulk_docs"], body: ["docs": .array(docs)])
            try await settleReplicas()
            // One worker: no request is in flight while the hook runs; a checkpoint after every batch.
            let replicator = Replicator(
                source: source.remote, target: target.remote,
                options: ReplicationOptions(batchSize: 10, workers: 1, checkpointInterval: 0))
            let batches = LockedBox(0)
            let oldSource = LockedBox<TreeSnapshot?>(nil)
            replicator.hooks.withLock {
                $0.batchCommitted = {
                    batches.mutate { $0 += 1 }
                    guard batches.value == 2 else { return }
                    if side == "target" {
                        try await Self.recreate(target)
                        return
                    }
                    let snapshot = try await RevisionTrees.snapshot(of: source)
                    oldSource.mutate { $0 = snapshot }
                    try await Self.recreate(source)
                    let fresh: [JSONValue] = (0..<Self.newDocuments).map {
                        ["_id": .string(String(format: "new-%03d", $0)), "n": .int(Int64($0))]
                    }
                    try await source.json(.post, ["_bulk_docs"], body: ["docs": .array(fresh)])
                    try await settleReplicas()
                }
            }
            let (summary, events, restarts) = try await Self.run(replicator, "the replication with a recreated \(side)")

            // The events: one restart naming the database, one completion with the whole run's counts.
            #expect(restarts.count == 1, "\(restarts)")
            #expect(restarts.first?.contains("on \(side) database") == true, "\(restarts)")
            let completions = events.compactMap { event -> ReplicationSummary? in
                if case .completed(let counts) = event { return counts }
                return nil
            }
            #expect(completions == [summary], "the completed event carries what run() returned")
            let states = events.compactMap { event -> String? in
                if case .state(let state) = event { return state.name }
                return nil
            }
            #expect(!states.contains("failed") && states.last == "stopped", "\(states)")
            #expect(states.filter { $0 == "connecting" }.count == 2, "two sessions: \(states)")
            // No checkpoint of the abandoned session after the recreation: the restart comes before any.
            let restartIndex = try #require(
                events.firstIndex { if case .restarting = $0 { return true } else { return false } })
            let checkpointsBefore = events[..<restartIndex].filter {
                if case .checkpoint = $0 { return true } else { return false }
            }
            #expect(checkpointsBefore.count == 1, "the first batch's checkpoint only")

            if side == "target" {
                // Started over from the start: the 20 documents of the first session, then all 60 again.
                #expect(summary.docsWritten == 20 + Self.documents, "\(summary)")
                try await expectIdenticalTrees(source, target, "after the target was recreated")
            } else {
                // The target keeps what it had from the old source (20 documents, unchanged) and gets every
                // document of the new source; nothing of the old source's sequence was used on the new one.
                #expect(summary.docsWritten == 20 + Self.newDocuments, "\(summary)")
                let old = try #require(oldSource.value)
                let newSource = try await RevisionTrees.snapshot(of: source)
                let copied = try await RevisionTrees.snapshot(of: target)
                let fromNew = Set(newSource.documents.keys)
                let fromOld = Set(copied.documents.keys).subtracting(fromNew)
                #expect(fromOld.count == 20 && fromOld.allSatisfy { $0.hasPrefix("old-") }, "\(fromOld.sorted())")
                let differences =
                    RevisionTrees.differences(expected: newSource, actual: copied, ids: fromNew)
                    + RevisionTrees.differences(expected: old, actual: copied, ids: fromOld)
                #expect(differences.isEmpty, "\(differences.prefix(10))")
            }
            // The checkpoints hold the new session only (no entry of the session before the recreation).
            for endpoint in [source, target] {
                let checkpoint = try await endpoint.json(.get, ["_local", replicator.replicationID])
                #expect(checkpoint["history"]?.arrayValue?.count == 1, "\(endpoint): \(checkpoint)")
            }
            // A second run finds nothing to copy.
            let again = try await replicate(source.remote, target.remote)
            #expect(again.summary.docsWritten == 0, "\(again.summary)")
        }
    }

    /// A server whose databases all answer `instance_start_time: "0"` (CouchDB before 3.3 in a cluster),
    /// so a recreation cannot be seen there: the target recreated after the second batch is noticed because
    /// the checkpoint the session wrote there is gone, and the run starts over. Before, the next checkpoint
    /// PUT named the old checkpoint's revision on the new database: the TestServer refuses that (409, and the
    /// run failed); CouchDB 3.5 accepts it (checked by hand: `_rev` 0-2 on a new database gives 0-3), so the
    /// documents of the first batches would have been missing from the new target for good, the checkpoint
    /// saying they were copied.
    @Test func aRecreationOnAServerWithoutInstanceStartTimeIsNoticedByTheCheckpoint() async throws {
        guard !SyncEnvironment.isRealCouchDB else {
            print("Skipping the instance_start_time \"0\" case: it needs the embedded TestServer (COUCHDB_URL is set).")
            return
        }
        let engine = try ServerEngine()
        let server = try TestServer.start(handler: InstanceZeroHandler(engine: engine))
        defer {
            server.stop()
            engine.close()
        }
        let client = server.adminClient()
        defer { client.shutdown() }
        try await withRemoteDatabases("recreate-zero", count: 2, client: client) { endpoints in
            let (source, target) = (endpoints[0], endpoints[1])
            #expect(try await target.json()["instance_start_time"]?.stringValue == "0")
            let docs: [JSONValue] = (0..<Self.documents).map {
                ["_id": .string(String(format: "old-%03d", $0)), "n": .int(Int64($0))]
            }
            try await source.json(.post, ["_bulk_docs"], body: ["docs": .array(docs)])
            let replicator = Replicator(
                source: source.remote, target: target.remote,
                options: ReplicationOptions(batchSize: 10, workers: 1, checkpointInterval: 0))
            let batches = LockedBox(0)
            replicator.hooks.withLock {
                $0.batchCommitted = {
                    batches.mutate { $0 += 1 }
                    guard batches.value == 2 else { return }
                    _ = try await target.client.execute(DeleteDatabaseOperation(name: target.database))
                    _ = try await target.client.execute(CreateDatabaseOperation(name: target.database))
                }
            }
            let (summary, _, restarts) = try await Self.run(replicator, "the replication with a recreated target")
            #expect(restarts.count == 1 && restarts.first?.contains("checkpoint") == true, "\(restarts)")
            #expect(summary.docsWritten == 20 + Self.documents, "\(summary)")
            try await expectIdenticalTrees(source, target, "after the target was recreated unseen")
            let again = try await replicate(source.remote, target.remote)
            #expect(again.summary.docsWritten == 0, "\(again.summary)")
            try await expectIdenticalTrees(source, target, "after a second run")
        }
    }

    /// Deletes `endpoint`'s database and creates it again, until its `instance_start_time` differs: it
    /// counts whole seconds (on CouchDB too), so a database recreated within the second it was created in
    /// cannot be told from the old one; then the next second is waited for and the database recreated again.
    /// Runs `replicator` once within a deadline: its summary, every event, and the reasons of its restarts.
    private static func run(_ replicator: Replicator, _ what: String) async throws
        -> (summary: ReplicationSummary, events: [ReplicationEvent], restarts: [String])
    {
        let log = EventLog(replicator)
        let summary = try await withDeadline(120, what) { try await replicator.run() }
        let events = await log.finished()
        let restarts = events.compactMap { event -> String? in
            if case .restarting(let reason) = event { return reason }
            return nil
        }
        return (summary, events, restarts)
    }

    private static func recreate(_ endpoint: Endpoint) async throws {
        let before = try await endpoint.json()["instance_start_time"]?.stringValue
        for _ in 0..<4 {
            _ = try await endpoint.client.execute(DeleteDatabaseOperation(name: endpoint.database))
            _ = try await endpoint.client.execute(CreateDatabaseOperation(name: endpoint.database))
            let after = try await endpoint.json()["instance_start_time"]?.stringValue
            if after != before { return }
            try await Task.sleep(nanoseconds: 1_100_000_000)
        }
        Issue.record("\(endpoint.database)'s instance_start_time stayed \(before ?? "nil")")
    }
}

/// Answers every `GET /{db}` with `instance_start_time` "0", as CouchDB 2.x to 3.2 did for clustered databases.
final class InstanceZeroHandler: RequestHandler, @unchecked Sendable {
    let engine: ServerEngine

    init(engine: ServerEngine) { self.engine = engine }

    func handle(_ request: ServerRequest) -> ServerResponse {
        var response = engine.handle(request)
        let segments = request.rawPath.split(separator: "/")
        guard request.method == "GET", response.status == 200, segments.count == 1, !segments[0].hasPrefix("_"),
            case .data(let body) = response.body,
            case .object(let fields)? = try? JSONDecoder().decode(JSONValue.self, from: body),
            fields["instance_start_time"] != nil,
            let changed = try? JSONEncoder().encode(
                JSONValue.object(fields.merging(["instance_start_time": "0"]) { $1 }))
        else { return response }
        response.body = .data(changed)
        return response
    }
}
