import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchSync
import Testing

@Suite("Replicator: one-shot pull and push between TestServer and local databases")
struct ReplicatorTests {
    @Test("Pull remote → local, push local → remote: identical trees; a second run copies nothing")
    func pullThenPush() async throws {
        let client = SyncFixture.client()
        defer { client.shutdown() }
        let remote = try await SyncFixture.remoteDatabase(client)
        let directory = SyncFixture.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await LocalStore.open(at: directory)
        defer { store.close() }
        try await SyncFixture.fill(remote)

        let local = try await store.database("pulled")
        let pull = Replicator(source: .remote(remote), target: .local(local))
        let log = EventLog(pull)
        let summary = try await pull.settledRun()
        #expect(summary.docWriteFailures == 0)
        #expect(summary.docsWritten == summary.missingFound)
        #expect(summary.docsWritten > 30)
        let sourceTrees = try await SyncFixture.trees(remote)
        #expect(try await SyncFixture.trees(local) == sourceTrees)
        let events = await log.finished()
        let checkpoints = events.filter { if case .checkpoint = $0 { return true } else { return false } }
        #expect(!checkpoints.isEmpty)
        guard case .completed(let completed) = events.last(where: { if case .state = $0 { false } else { true } })
        else {
            Issue.record("The last event before the final state is not completed: \(events.suffix(3))")
            return
        }
        #expect(completed == summary)

        // Both sides hold the checkpoint, in CouchDB's format.
        for side in [remote as any DocumentStore, local as any DocumentStore] {
            let checkpoint = try await side.client.value(
                GetDocumentOperation<JSONValue>(database: side.name, id: "_local/" + pull.replicationID))
            #expect(checkpoint["history"]?.arrayValue?.count == 1)
            #expect(checkpoint["history"]?[0]?["docs_written"]?.intValue == Int64(summary.docsWritten))
            #expect(checkpoint["source_last_seq"] != nil)
        }

        // Nothing changed: nothing to copy, no _revs_diff (missing_checked 0), no checkpoint rewritten.
        let before = try await remote.client.value(
            GetDocumentOperation<JSONValue>(database: remote.name, id: "_local/" + pull.replicationID))
        let again = try await Replicator(source: .remote(remote), target: .local(local)).settledRun()
        #expect(again.missingChecked == 0)
        #expect(again.docsWritten == 0)
        let after = try await remote.client.value(
            GetDocumentOperation<JSONValue>(database: remote.name, id: "_local/" + pull.replicationID))
        #expect(before["_rev"] == after["_rev"])

        // One more change: only it is copied.
        try await remote.put(JSONValue.object(["late": true]), id: "late")
        let third = try await Replicator(source: .remote(remote), target: .local(local)).settledRun()
        #expect(third.missingChecked == 1)
        #expect(third.docsWritten == 1)
        #expect(try await SyncFixture.trees(local) == (try await SyncFixture.trees(remote)))

        // Push the local copy to a new remote database, created by the replication.
        let copy = try await SyncFixture.remoteDatabase(client, create: false)
        let push = try await Replicator(
            source: .local(local), target: .remote(copy), options: ReplicationOptions(createTarget: true)
        ).settledRun()
        #expect(push.docWriteFailures == 0)
        #expect(try await SyncFixture.trees(copy) == (try await SyncFixture.trees(remote)))
        try await remote.delete()
        try await copy.delete()
    }

    @Test("A first run with nothing to copy records a checkpoint; a missing target is an error unless created")
    func emptySourceAndMissingTarget() async throws {
        let client = SyncFixture.client()
        defer { client.shutdown() }
        let empty = try await SyncFixture.remoteDatabase(client)
        let target = try await SyncFixture.remoteDatabase(client)
        let replicator = Replicator(source: .remote(empty), target: .remote(target))
        let summary = try await replicator.settledRun()
        #expect(summary.missingChecked == 0)
        let checkpoint = try await client.value(
            GetDocumentOperation<JSONValue>(database: target.name, id: "_local/" + replicator.replicationID))
        #expect(checkpoint["session_id"] != nil)

        let missing = try await SyncFixture.remoteDatabase(client, create: false)
        await #expect(throws: CouchError.self) {
            try await Replicator(source: .remote(empty), target: .remote(missing)).settledRun()
        }
        await #expect(throws: CouchError.self) {
            try await client.value(GetDatabaseInfoOperation(name: missing.name))
        }
        try await empty.delete()
        try await target.delete()
    }
}
