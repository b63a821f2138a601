import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchSync
import SwiftCouchTestSupport
import Testing

/// Incremental runs, faults on the wire, and lost checkpoints or targets: the result is always the
/// source's trees, nothing written twice, and the replication ends.
@Suite struct ResilienceEndToEndTests {
    /// A second run copies only what changed since the first; a run with nothing to do sends no
    /// `_revs_diff` and writes no checkpoint (counted in the TestServer's request log), both ways.
    @Test func aSecondRunCopiesOnlyWhatChangedAndAnIdleRunWritesNothing() async throws {
        try await withPrivateTestServer(for: "incremental runs") { server, client in
            try await withRemoteDatabases("incr", client: client) { endpoints in
                let remote = endpoints[0]
                let corpus = try await Corpus.build(in: remote, spec: .small)
                try await withLocalDatabase { local in
                    let first = try await replicate(remote.remote, .local(local))
                    #expect(first.summary.docWriteFailures == 0)
                    // Two updates, a deletion, a new document.
                    let one = try await remote.json(.get, ["doc-0001"])
                    try await remote.json(.put, ["doc-0001"], body: ["_rev": one["_rev"]!, "second": true])
                    let two = try await remote.json(.get, ["doc-0002"])
                    try await remote.json(.put, ["doc-0002"], body: ["_rev": two["_rev"]!, "second": true])
                    let four = try await remote.json(.get, ["doc-0004"])
                    try await remote.json(.delete, ["doc-0004"], query: [("rev", four["_rev"]!.stringValue!)])
                    try await remote.json(.put, ["added"], body: ["second": true])
                    let second = try await replicate(remote.remote, .local(local))
                    #expect(second.summary.docsWritten == 4, "\(second.summary)")
                    #expect(second.summary.missingFound == 4, "\(second.summary)")
                    #expect(
                        Set(second.written.map { String($0.split(separator: "@")[0]) }) == [
                            "doc-0001", "doc-0002", "doc-0004", "added",
                        ])
                    try await expectIdenticalTrees(remote, Endpoint(local), "after the second run")

                    // Nothing to do, pulling: no _revs_diff, no checkpoint written on the remote source.
                    server.resetRequestCounts()
                    let idle = try await replicate(remote.remote, .local(local))
                    #expect(idle.summary.docsWritten == 0 && idle.summary.missingChecked == 0, "\(idle.summary)")
                    let pulled = requests(server, to: remote.database)
                    #expect(!pulled.contains { $0.path.hasSuffix("/_revs_diff") }, "\(pulled)")
                    #expect(!pulled.contains { $0.method == "PUT" && $0.path.contains("/_local/") }, "\(pulled)")

                    // Pushing back the same documents: nothing to do after the first push.
                    _ = try await replicate(.local(local), remote.remote)
                    server.resetRequestCounts()
                    let idlePush = try await replicate(.local(local), remote.remote)
                    #expect(idlePush.summary.docsWritten == 0, "\(idlePush.summary)")
                    let pushed = requests(server, to: remote.database)
                    #expect(!pushed.contains { $0.path.hasSuffix("/_revs_diff") }, "\(pushed)")
                    #expect(!pushed.contains { $0.method == "PUT" && $0.path.contains("/_local/") }, "\(pushed)")
                    #expect(try await corpus.localDocumentsPresent(in: Endpoint(local)).isEmpty)
                }
            }
        }
    }

    /// A first run with nothing to copy still records a checkpoint on both sides.
    @Test func aFirstRunWithNothingToCopyRecordsACheckpoint() async throws {
        try await withRemoteDatabases("empty", count: 2) { endpoints in
            let run = try await replicate(endpoints[0].remote, endpoints[1].remote)
            #expect(run.summary.docsWritten == 0)
            for side in endpoints {
                let checkpoint = try await side.json(.get, ["_local", run.replicationID])
                #expect(checkpoint["history"]?.arrayValue?.isEmpty == false, "\(side): \(checkpoint)")
            }
        }
    }

    enum Fault: String, CaseIterable, Sendable {
        case lostBulkDocsAnswers, lostCheckpointAnswers, droppedConnections, tooManyRequestsStorm
    }

    /// Each fault shape of the TestServer, on a remote → remote and a remote → local replication: the
    /// replication finishes, with the source's trees, and no revision is written twice.
    @Test(arguments: Fault.allCases)
    func faultsLeaveTheResultIdentical(_ fault: Fault) async throws {
        guard !SyncEnvironment.isRealCouchDB else { return }
        let engine = try ServerEngine()
        let recorder = RecordingHandler(engine: engine)
        let server = try TestServer.start(handler: recorder)
        defer {
            server.stop()
            engine.close()
        }
        var configuration = Configuration()
        configuration.retryPolicy = RetryPolicy(maximumRetries: 10, initialDelay: 0.01, maximumDelay: 0.2)
        let client = server.adminClient(configuration: configuration)
        defer { client.shutdown() }
        try await withRemoteDatabases("fault", count: 2, client: client) { endpoints in
            let (source, target) = (endpoints[0], endpoints[1])
            _ = try await Corpus.build(in: source, spec: .small)
            switch fault {
            case .lostBulkDocsAnswers:
                server.faults.failNext(
                    3, with: .dropAfterProcessing, matching: .path("/\(target.database)/_bulk_docs", method: "POST"))
            case .lostCheckpointAnswers:
                server.faults.failNext(
                    2, with: .dropAfterProcessing, matching: .pathPrefix("/\(target.database)/_local/", method: "PUT"))
                server.faults.failNext(
                    2, with: .dropAfterProcessing, matching: .pathPrefix("/\(source.database)/_local/", method: "PUT"))
            case .droppedConnections:
                server.faults.failFraction(0.15, with: .dropConnection, matching: .any)
            case .tooManyRequestsStorm:
                server.faults.failFraction(0.4, with: .tooManyRequests(retryAfter: nil), matching: .any)
            }
            let options = ReplicationOptions(batchSize: 10, checkpointInterval: 0)
            let run = try await replicate(source.remote, target.remote, options)
            let triggered = server.faults.triggeredCount
            server.faults.clear()
            #expect(triggered > 0, "the fault happened")
            #expect(run.summary.docWriteFailures == 0, "\(run.summary)")
            #expect(run.completed)
            #expect(recorder.repeated.isEmpty || fault == .lostBulkDocsAnswers, "\(recorder.repeated)")
            try await expectIdenticalTrees(source, target, "\(fault)")
            // A second run finds nothing left to copy: the checkpoint holds.
            let again = try await replicate(source.remote, target.remote, options)
            #expect(again.summary.docsWritten == 0, "\(again.summary)")

            // The same fault on the remote side of a pull into a local database (which has no wire: a lost
            // answer there is one on the source's _bulk_get).
            switch fault {
            case .lostBulkDocsAnswers:
                server.faults.failNext(
                    3, with: .dropAfterProcessing,
                    matching: .pathPrefix("/\(source.database)/_bulk_get", method: "POST"))
            case .lostCheckpointAnswers:
                server.faults.failNext(
                    2, with: .dropAfterProcessing, matching: .pathPrefix("/\(source.database)/_local/", method: "PUT"))
            case .droppedConnections:
                server.faults.failFraction(0.15, with: .dropConnection, matching: .any)
            case .tooManyRequestsStorm:
                server.faults.failFraction(0.4, with: .tooManyRequests(retryAfter: nil), matching: .any)
            }
            try await withLocalDatabase { local in
                let pulled = try await replicate(source.remote, .local(local), options)
                let hits = server.faults.triggeredCount
                server.faults.clear()
                #expect(hits > 0, "the fault happened on the pull")
                #expect(pulled.summary.docWriteFailures == 0 && pulled.completed, "\(pulled.summary)")
                #expect(pulled.writtenTwice.isEmpty, "\(pulled.writtenTwice)")
                try await expectIdenticalTrees(source, Endpoint(local), "\(fault), pulled into a local database")
                let idle = try await replicate(source.remote, .local(local), options)
                #expect(idle.summary.docsWritten == 0, "\(idle.summary)")
            }
        }
    }

    /// A continuous replication meets a 429 storm with `Retry-After: 1` on `_changes`, longer than the
    /// per-request retries (5 tries, the client retrying none itself): the session ends, the state is
    /// `offline`, and the planned wait (the `retrying` event) is at least the server's Retry-After and at
    /// most the backoff's cap, where the backoff alone would have waited at most 0.05 s. It then connects
    /// again and finishes with identical trees.
    @Test func continuousBackoffWaitsTheServersRetryAfter() async throws {
        try await withPrivateTestServer(for: "a 429 storm with Retry-After") { server, _ in
            var configuration = Configuration()
            configuration.retryPolicy = .disabled  // every 429 reaches the replicator's own retries
            let client = server.adminClient(configuration: configuration)
            defer { client.shutdown() }
            try await withRemoteDatabases("retry-after", count: 2, client: client) { endpoints in
                let (source, target) = (endpoints[0], endpoints[1])
                _ = try await Corpus.build(in: source, spec: .small)
                server.faults.failNext(
                    5, with: .tooManyRequests(retryAfter: 1),
                    matching: .path("/\(source.database)/_changes", method: "GET"))
                let replicator = Replicator(
                    source: source.remote, target: target.remote,
                    options: ReplicationOptions(
                        continuous: true, feedTimeout: 1, backoff: ReplicationBackoff(base: 0.05, cap: 1.5)))
                let log = EventLog(replicator)
                replicator.start()
                // Idle only once a session caught up (the first never does); compared only then, since the
                // comparison reads _changes too and would meet the 429s itself.
                let caughtUp = try await eventually(60) { replicator.state.name == "idle" }
                await replicator.stop()
                let events = await log.finished()
                #expect(caughtUp, "the replication connected again and caught up")
                #expect(server.faults.triggeredCount == 5, "every try of the first _changes was a 429")
                let retries = events.compactMap { event -> ReplicationRetry? in
                    if case .retrying(let retry) = event { return retry }
                    return nil
                }
                #expect(retries.count == 1, "one failed session: \(retries.map(\.delay))")
                let retry = try #require(retries.first)
                #expect(retry.error.statusCode == 429)
                #expect(retry.retryAfter == 1)
                #expect(retry.failures == 1)
                #expect(retry.delay >= 1 && retry.delay <= 1.5, "planned wait \(retry.delay) s")
                let states = events.compactMap { event -> String? in
                    if case .state(let state) = event { return state.name }
                    return nil
                }
                #expect(states.contains("offline") && !states.contains("failed"), "\(states)")
                try await expectIdenticalTrees(source, target, "after the 429 storm")
            }
        }
    }

    /// A checkpoint deleted on one side: the next run starts over, copies what is new, and the trees
    /// are identical.
    @Test(arguments: ["source", "target"])
    func aDeletedCheckpointOnOneSide(_ side: String) async throws {
        try await withRemoteDatabases("ckpt", count: 2) { endpoints in
            let (source, target) = (endpoints[0], endpoints[1])
            _ = try await Corpus.build(in: source, spec: .small)
            let first = try await replicate(source.remote, target.remote)
            let holder = side == "source" ? source : target
            let checkpoint = try await holder.json(.get, ["_local", first.replicationID])
            try await holder.json(
                .delete, ["_local", first.replicationID], query: [("rev", checkpoint["_rev"]?.stringValue ?? "0-1")])
            try await source.json(.put, ["after-checkpoint-loss"], body: ["new": true])
            let second = try await replicate(source.remote, target.remote)
            #expect(second.summary.docWriteFailures == 0)
            #expect(second.summary.docsWritten == 1, "only the new document is missing: \(second.summary)")
            try await expectIdenticalTrees(source, target, "after a checkpoint deleted on the \(side)")
            // Both sides hold a checkpoint again.
            for endpoint in endpoints {
                _ = try await endpoint.json(.get, ["_local", second.replicationID])
            }
        }
    }

    /// A continuous replication whose target is deleted and recreated: it notices, starts over and ends
    /// with the source's trees, without a crash loop (it comes back to idle).
    @Test func aTargetDeletedAndRecreatedMidRun() async throws {
        try await withRemoteDatabases("recreate", count: 2) { endpoints in
            let (source, target) = (endpoints[0], endpoints[1])
            _ = try await Corpus.build(in: source, spec: .small)
            let replicator = Replicator(
                source: source.remote, target: target.remote,
                options: ReplicationOptions(continuous: true, checkpointInterval: 0.2))
            let log = EventLog(replicator)
            replicator.start()
            let caughtUp = try await eventually(60) {
                try await RevisionTrees.compare(source, target, settle: 0).isEmpty
            }
            #expect(caughtUp, "the continuous replication copied the corpus")
            _ = try await target.client.execute(DeleteDatabaseOperation(name: target.database))
            _ = try await target.client.execute(CreateDatabaseOperation(name: target.database))
            try await source.json(.put, ["after-recreation"], body: ["new": true])
            let recovered = try await eventually(60, pause: 0.5) {
                try await RevisionTrees.compare(source, target, settle: 0).isEmpty
            }
            await replicator.stop()
            let events = await log.finished()
            #expect(recovered, "the recreated target got the whole source again")
            let failures = events.filter {
                if case .state(.failed) = $0 { return true } else { return false }
            }
            #expect(failures.count <= 1, "no crash loop: \(failures.count) failures")
        }
    }
}
