import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchSync
import Testing

/// The corpus replicated by SwiftCouch's `Replicator` between every pair of endpoint kinds: identical
/// revision trees (leaves, deleted flags, paths, bodies, attachments, winners, conflicts), `_local`
/// documents left behind, no write failure, no revision written twice.
@Suite struct CorpusReplicationEndToEndTests {
    /// The full corpus: remote → local (pull), then local → a new remote (push, creating the target).
    @Test func theFullCorpusPulledAndPushedIsIdentical() async throws {
        try await withRemoteDatabases("full") { endpoints in
            let source = endpoints[0]
            let corpus = try await Corpus.build(in: source, spec: .fullUnlessCluster)
            try await withLocalDatabase { local in
                let pulled = try await replicate(source.remote, .local(local), deadline: 300)
                #expect(pulled.summary.docWriteFailures == 0)
                #expect(pulled.completed, "a completed event")
                #expect(pulled.writtenTwice.isEmpty, "\(pulled.writtenTwice)")
                let (found, _, copy) = try await RevisionTrees.compareWithSnapshots(source, Endpoint(local))
                #expect(found.isEmpty, "pull: \(found.prefix(25).map(\.description).joined(separator: "\n"))")
                #expect(corpus.shapeProblems(in: copy).isEmpty, "\(corpus.shapeProblems(in: copy))")
                #expect(try await corpus.localDocumentsPresent(in: Endpoint(local)).isEmpty)

                let name = SyncEnvironment.uniqueDatabaseName("full-push")
                let target = Endpoint(source.client, name)
                defer {
                    Task { [client = source.client] in
                        _ = try? await client.execute(DeleteDatabaseOperation(name: name))
                    }
                }
                let pushed = try await replicate(
                    .local(local), target.remote, ReplicationOptions(createTarget: true), deadline: 300)
                #expect(pushed.summary.docWriteFailures == 0)
                #expect(pushed.writtenTwice.isEmpty, "\(pushed.writtenTwice)")
                try await expectIdenticalTrees(Endpoint(local), target, "push of the full corpus")
                #expect(try await corpus.localDocumentsPresent(in: target).isEmpty)
                _ = try? await source.client.execute(DeleteDatabaseOperation(name: name))
            }
        }
    }

    /// The small corpus remote → remote and local → local.
    @Test func remoteToRemoteAndLocalToLocal() async throws {
        try await withRemoteDatabases("r2r", count: 2) { endpoints in
            let corpus = try await Corpus.build(in: endpoints[0], spec: .onRequest)
            let run = try await replicate(endpoints[0].remote, endpoints[1].remote)
            #expect(run.summary.docWriteFailures == 0)
            try await expectIdenticalTrees(endpoints[0], endpoints[1], "remote to remote")
            #expect(try await corpus.localDocumentsPresent(in: endpoints[1]).isEmpty)
        }
        try await withLocalDatabase("one") { one in
            try await withLocalDatabase("two") { two in
                let corpus = try await Corpus.build(in: Endpoint(one), spec: .onRequest)
                let run = try await replicate(.local(one), .local(two))
                #expect(run.summary.docWriteFailures == 0)
                try await expectIdenticalTrees(Endpoint(one), Endpoint(two), "local to local")
                #expect(try await corpus.localDocumentsPresent(in: Endpoint(two)).isEmpty)
            }
        }
    }

    /// Two-way sync of two databases each holding its own corpus (same ids, other revisions): both end
    /// with the union, every document with the same winner and conflicts.
    @Test func syncOfTwoCorporaConverges() async throws {
        try await withRemoteDatabases("sync") { endpoints in
            let remote = endpoints[0]
            _ = try await Corpus.build(in: remote, spec: .small, seed: 1)
            try await withLocalDatabase { local in
                _ = try await Corpus.build(in: Endpoint(local), spec: .small, seed: 2)
                let sync = Sync(local: .local(local), remote: remote.remote)
                try await settleReplicas()
                let summary = try await withDeadline(120, "sync") { try await sync.run() }
                #expect(summary.pull.docWriteFailures == 0 && summary.push.docWriteFailures == 0)
                let (found, _, merged) = try await RevisionTrees.compareWithSnapshots(Endpoint(local), remote)
                #expect(found.isEmpty, "\(found.prefix(25).map(\.description).joined(separator: "\n"))")
                // Both corpora wrote doc-0000 at its own revisions: the merged tree has both branches.
                #expect((merged.documents["doc-0000"]?.leaves.count ?? 0) >= 2)
            }
        }
    }
}
