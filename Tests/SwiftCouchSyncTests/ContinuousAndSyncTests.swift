import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchSync
import Testing

/// Polls `condition` until it holds or `seconds` pass (a generous bound, not a timing assertion).
func eventually(within seconds: TimeInterval = 120, _ condition: () async throws -> Bool) async throws -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try await condition() { return true }
        try await Task.sleep(nanoseconds: 20_000_000)
    }
    return try await condition()
}

@Suite("Replicator: continuous mode, two-way sync, conflict resolution")
struct ContinuousAndSyncTests {
    @Test("Continuous: later changes arrive, the state goes idle between them, stop() ends it")
    func continuous() async throws {
        let client = SyncFixture.client()
        defer { client.shutdown() }
        let source = try await SyncFixture.remoteDatabase(client)
        try await source.put(JSONValue.object(["n": 1]), id: "first")
        try await withLocalStore { store in
            let local = try await store.database("live")
            let replicator = Replicator(
                source: .remote(source), target: .local(local),
                options: ReplicationOptions(continuous: true, feedTimeout: 1))
            let log = EventLog(replicator)
            replicator.start()
            #expect(try await eventually { (try? await local.get("first", as: JSONValue.self)) != nil })
            #expect(try await eventually { replicator.state.name == "idle" })
            try await source.put(JSONValue.object(["n": 2]), id: "second")
            #expect(try await eventually { (try? await local.get("second", as: JSONValue.self)) != nil })
            let started = Date()
            await replicator.stop()
            #expect(Date().timeIntervalSince(started) < 10)
            #expect(replicator.state.name == "stopped")
            let events = await log.finished()
            let states = events.compactMap { event -> String? in
                if case .state(let state) = event { return state.name }
                return nil
            }
            #expect(states.first == "connecting")
            #expect(states.contains("idle"))
            #expect(states.last == "stopped")
            #expect(!states.contains("failed"))
        }
        try await source.delete()
    }

    @Test("Continuous: a source that is unreachable makes the state offline, not failed; stop() still ends it")
    func offline() async throws {
        // A port nothing listens on.
        let nowhere = CouchDBClient(
            url: URL(string: "http://127.0.0.1:9")!,
            configuration: {
                var configuration = Configuration()
                configuration.retryPolicy = RetryPolicy(maximumRetries: 0)
                return configuration
            }())
        defer { nowhere.shutdown() }
        try await withLocalStore { store in
            let local = try await store.database("offline")
            let replicator = Replicator(
                source: .remote(nowhere.database("gone")), target: .local(local),
                options: ReplicationOptions(continuous: true, backoff: ReplicationBackoff(base: 0.05, cap: 0.2)))
            replicator.start()
            #expect(try await eventually { replicator.state.name == "offline" })
            await replicator.stop()
            #expect(replicator.state.name == "stopped")
        }
    }

    @Test("Two-way sync: edits on both sides converge; a conflict resolved by the resolver is gone on both sides")
    func twoWay() async throws {
        let client = SyncFixture.client()
        defer { client.shutdown() }
        let remote = try await SyncFixture.remoteDatabase(client)
        try await withLocalStore { store in
            let local = try await store.database("both")
            let shared = try await remote.put(JSONValue.object(["v": "base"]), id: "shared")
            try await remote.put(JSONValue.object(["side": "remote"]), id: "from-remote")
            try await local.put(JSONValue.object(["side": "local"]), id: "from-local")
            _ = try await Sync(local: .local(local), remote: .remote(remote)).settledRun()
            #expect(try await SyncFixture.trees(local) == (try await SyncFixture.trees(remote)))

            // Concurrent edits of one document: a conflict on both sides after a sync without a resolver.
            try await local.put(JSONValue.object(["v": "local edit"]), id: "shared", revision: shared.rev)
            try await remote.put(JSONValue.object(["v": "remote edit"]), id: "shared", revision: shared.rev)
            _ = try await Sync(local: .local(local), remote: .remote(remote)).settledRun()
            #expect(try await SyncFixture.trees(local) == (try await SyncFixture.trees(remote)))
            #expect(try await local.conflictedDocumentIDs() == ["shared"])
            let localWinner = try await local.get("shared", as: JSONValue.self)
            let remoteWinner = try await remote.get("shared", as: JSONValue.self)
            #expect(localWinner == remoteWinner)

            // Another concurrent edit, this time resolved by the pull's resolver with a merge.
            let resolved = LockedIDs()
            var options = ReplicationOptions()
            options.conflictResolver = { batch in
                for id in batch.conflictedIDs {
                    try await batch.database.resolveConflicts(of: id, merged: JSONValue.object(["v": "merged"]))
                    resolved.add(id)
                }
            }
            _ = try await Sync(local: .local(local), remote: .remote(remote), options: options).settledRun()
            // The resolver ran (a pulled batch carried the conflicted document) or there was nothing
            // new to pull; either way resolve now through a sync that pulls the conflict again.
            if resolved.ids.isEmpty {
                let leaves = try await local.conflictLeaves(of: "shared", as: JSONValue.self)
                try await local.resolveConflicts(of: "shared", keeping: leaves[0].rev ?? "")
            }
            _ = try await Sync(local: .local(local), remote: .remote(remote)).settledRun()
            #expect(try await local.conflictedDocumentIDs().isEmpty)
            await SyncFixture.settle()
            #expect(try await remote.conflictedDocumentIDs().isEmpty)
            #expect(try await SyncFixture.trees(local) == (try await SyncFixture.trees(remote)))
        }
        try await remote.delete()
    }

    @Test("The resolver is called after a pulled batch with that batch's conflicted ids")
    func resolverCalled() async throws {
        let client = SyncFixture.client()
        defer { client.shutdown() }
        let remote = try await SyncFixture.remoteDatabase(client)
        try await SyncFixture.writeRevision(client, remote.name, id: "c", generation: 2, hashes: ["x1", "r0"])
        try await SyncFixture.writeRevision(client, remote.name, id: "c", generation: 2, hashes: ["y1", "r0"])
        try await remote.put(JSONValue.object(["plain": true]), id: "p")
        try await withLocalStore { store in
            let local = try await store.database("resolved")
            let seen = LockedIDs()
            var options = ReplicationOptions()
            options.conflictResolver = { batch in
                for id in batch.conflictedIDs {
                    seen.add(id)
                    let leaves = try await batch.database.conflictLeaves(of: id, as: JSONValue.self)
                    try await batch.database.resolveConflicts(of: id, keeping: leaves[0].rev ?? "")
                }
            }
            _ = try await Replicator(source: .remote(remote), target: .local(local), options: options).settledRun()
            #expect(seen.ids == ["c"])
            #expect(try await local.conflictedDocumentIDs().isEmpty)
        }
        try await remote.delete()
    }

    @Test("Sync state combines both directions")
    func combinedState() {
        let sync = Sync(
            local: .remote(CouchDBClient(url: URL(string: "http://127.0.0.1:1")!).database("a")),
            remote: .remote(CouchDBClient(url: URL(string: "http://127.0.0.1:2")!).database("b")))
        #expect(sync.state.name == "stopped")
        #expect(sync.pull.direction == .pull)
        #expect(sync.push.direction == .push)
        #expect(sync.pull.replicationID != sync.push.replicationID)
    }
}

/// Ids collected from a resolver.
final class LockedIDs: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [String] = []
    func add(_ id: String) { lock.withLock { storage.append(id) } }
    var ids: [String] { lock.withLock { storage } }
}
