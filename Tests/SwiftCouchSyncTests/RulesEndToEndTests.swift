import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchSync
import Testing

/// Filters, a target's `validate_doc_update`, a target's `revs_limit`, compaction during a continuous
/// replication, and two-way sync with conflicts.
@Suite struct RulesEndToEndTests {
    /// The source of the filter tests: plain documents (group = n % 5, some deleted, some updated) and a
    /// design document with a filter function reading a query parameter and a view.
    static func filterSource(_ source: Endpoint) async throws -> TreeSnapshot {
        _ = try await Corpus.build(
            in: source,
            spec: CorpusSpec(documents: 30, conflictLeaves: [3], bigAttachments: [], textAttachmentBytes: 100))
        try await source.json(
            .put, ["_design", "foo"],
            body: [
                "filters": ["by_group": "function(doc, req) { return doc.group == req.query.group; }"],
                "views": ["ones": ["map": "function(doc) { if (doc.group === 1) { emit(doc._id, null); } }"]],
            ])
        return try await RevisionTrees.snapshot(of: source)
    }

    /// Ids whose winning revision is live and has `group` == `group` in the source.
    static func live(_ snapshot: TreeSnapshot, group: Int64) -> Set<String> {
        Set(
            snapshot.documents.filter { _, tree in
                guard !tree.winnerDeleted, let winner = tree.winner else { return false }
                return tree.leaves[winner]?.body["group"] == .int(group)
            }.keys)
    }

    @Test func filtersKeepOtherDocumentsOffTheTarget() async throws {
        try await withRemoteDatabases("filter") { endpoints in
            let source = endpoints[0]
            let snapshot = try await Self.filterSource(source)
            let cases: [(String, ReplicationFilter, Set<String>)] = [
                (
                    "doc_ids", .documentIDs(["doc-0001", "doc-0005", "_design/foo", "conflict-3"]),
                    ["doc-0001", "doc-0005", "_design/foo", "conflict-3"]
                ),
                ("selector", .selector(["group": 2]), Self.live(snapshot, group: 2)),
                (
                    "design filter", .designFilter(designDocument: "foo", name: "by_group", parameters: ["group": "3"]),
                    Self.live(snapshot, group: 3)
                ),
                ("view", .view(designDocument: "foo", view: "ones"), Self.live(snapshot, group: 1)),
            ]
            for (what, filter, expected) in cases {
                #expect(!expected.isEmpty)
                try await withLocalDatabase { local in
                    let run = try await replicate(source.remote, .local(local), ReplicationOptions(filter: filter))
                    #expect(run.summary.docWriteFailures == 0, "\(what)")
                    let copy = try await RevisionTrees.snapshot(of: Endpoint(local))
                    let outside = Set(copy.documents.keys).subtracting(expected)
                    #expect(outside.isEmpty, "\(what): documents outside the filter reached the target: \(outside)")
                    let found = RevisionTrees.differences(expected: snapshot, actual: copy, ids: expected)
                    #expect(found.isEmpty, "\(what): \(found.prefix(20).map(\.description).joined(separator: "\n"))")
                }
            }
        }
    }

    /// A target whose `validate_doc_update` refuses some documents: the others are written, the counts
    /// are exact, and each refusal is one event with CouchDB's reason.
    @Test func aTargetValidationFunctionDeniesSomeWrites() async throws {
        try await withRemoteDatabases("vdu", count: 2) { endpoints in
            let (source, target) = (endpoints[0], endpoints[1])
            let docs: [JSONValue] = (0..<20).map { i in
                ["_id": .string(String(format: "v-%02d", i)), "reject": .bool(i % 4 == 0), "n": .int(Int64(i))]
            }
            _ = try await source.json(.post, ["_bulk_docs"], body: ["docs": .array(docs)])
            try await target.json(
                .put, ["_design", "guard"],
                body: [
                    "validate_doc_update":
                        "function(doc) { if (doc.reject) { throw({forbidden: 'rejected ' + doc._id}); } }"
                ])
            let run = try await replicate(source.remote, target.remote)
            let rejected = Set((0..<20).filter { $0 % 4 == 0 }.map { String(format: "v-%02d", $0) })
            #expect(run.summary.docsWritten == 15, "\(run.summary)")
            #expect(run.summary.docWriteFailures == 5, "\(run.summary)")
            #expect(run.denied.count == 5, "one event per denial: \(run.denied)")
            #expect(Set(run.denied.map(\.id)) == rejected)
            #expect(
                run.denied.allSatisfy { $0.error == "forbidden" && $0.reason == "rejected \($0.id)" }, "\(run.denied)")
            let copy = try await RevisionTrees.snapshot(of: target)
            #expect(
                Set(copy.documents.keys)
                    == Set(docs.compactMap { $0["_id"]?.stringValue }).subtracting(rejected).union(["_design/guard"]))
        }
    }

    /// A target with `revs_limit=3` and a document whose attachment was written at revision 2, updated
    /// six times between replications: the attachment stubs the replicator sends may name revisions the
    /// target has stemmed (`missing_stub`); the replication recovers and the target has the source's winner
    /// with the same attachment bytes.
    @Test func aStemmedTargetRecoversMissingStubs() async throws {
        try await withRemoteDatabases("stem", count: 2) { endpoints in
            let (source, target) = (endpoints[0], endpoints[1])
            _ = try await target.data(.put, ["_revs_limit"], body: Data("3".utf8))
            var rev = try await source.json(.put, ["stemmed"], body: ["v": 0])["rev"]!.stringValue!
            var random = SeededGenerator(seed: 3)
            let bytes = random.bytes(300_000)
            rev =
                try await source.json(
                    request: GenericOperation(
                        method: .put, path: CouchPath(source.database, "stemmed", "blob.bin"),
                        query: [URLQueryItem(name: "rev", value: rev)], body: bytes,
                        contentType: "application/octet-stream"))["rev"]!.stringValue!
            _ = try await replicate(source.remote, target.remote)
            for round in 0..<2 {
                for v in 1...6 {
                    var doc = try await source.json(.get, ["stemmed"])
                    if case .object(var object) = doc {
                        object["v"] = .int(Int64(round * 10 + v))
                        doc = .object(object)
                    }
                    try await source.json(.put, ["stemmed"], body: doc)
                }
                let run = try await replicate(source.remote, target.remote)
                #expect(run.summary.docWriteFailures == 0, "round \(round): \(run.summary) \(run.denied)")
                let expected = try await RevisionTrees.snapshot(of: source)
                let actual = try await RevisionTrees.snapshot(of: target)
                let found = RevisionTrees.differences(expected: expected, actual: actual).filter {
                    $0.kind != .revisionPath  // the target keeps 3 revisions of each path
                }
                #expect(found.isEmpty, "round \(round): \(found.map(\.description).joined(separator: "\n"))")
                #expect(actual.documents["stemmed"]?.leaves.count == 1, "no conflict from stemming")
            }
        }
    }

    /// The source compacted again and again while a continuous replication follows it: every write
    /// arrives, the replication never stalls.
    @Test func compactionOfTheSourceDuringAContinuousReplication() async throws {
        try await withRemoteDatabases("compact", count: 2) { endpoints in
            let (source, target) = (endpoints[0], endpoints[1])
            let replicator = Replicator(
                source: source.remote, target: target.remote,
                options: ReplicationOptions(continuous: true, batchSize: 20, checkpointInterval: 0.2))
            replicator.start()
            var revs: [String: String] = [:]
            for round in 0..<6 {
                let docs: [JSONValue] = (0..<40).map { i in
                    let id = String(format: "c-%03d", i)
                    var doc: [String: JSONValue] = ["_id": .string(id), "round": .int(Int64(round))]
                    if let rev = revs[id] { doc["_rev"] = .string(rev) }
                    return .object(doc)
                }
                let rows = try await source.json(.post, ["_bulk_docs"], body: ["docs": .array(docs)])
                for row in rows.arrayValue ?? [] {
                    if let id = row["id"]?.stringValue, let rev = row["rev"]?.stringValue { revs[id] = rev }
                }
                _ = try await source.json(.post, ["_compact"], body: [:])
                try await Task.sleep(nanoseconds: 100_000_000)
            }
            let caughtUp = try await eventually(60, pause: 0.3) {
                try await RevisionTrees.compare(source, target, settle: 0).isEmpty
            }
            await replicator.stop()
            let left = try await RevisionTrees.compare(source, target, settle: 0)
            #expect(
                caughtUp, "every write arrived: \(left.prefix(5))"
            )
        }
    }

    /// Concurrent edits on both sides of a two-way sync converge to identical trees and winners;
    /// resolving on one side clears the conflict on both after the next sync.
    @Test func twoWaySyncConvergesAndResolutionsTravel() async throws {
        try await withRemoteDatabases("twoway") { endpoints in
            let remote = endpoints[0]
            try await withLocalDatabase { local in
                let docs: [JSONValue] = (0..<10).map { ["_id": .string("s-\($0)"), "v": 0] }
                _ = try await remote.json(.post, ["_bulk_docs"], body: ["docs": .array(docs)])
                let sync = Sync(local: .local(local), remote: remote.remote)
                try await settleReplicas()
                _ = try await withDeadline(120, "first sync") { try await sync.run() }
                try await expectIdenticalTrees(remote, Endpoint(local), "after the first sync")
                // Both sides edit the same documents (and the remote edits one more).
                for i in 0..<5 {
                    for (side, tag) in [(remote, "remote"), (Endpoint(local), "local")] {
                        let doc = try await side.json(.get, ["s-\(i)"])
                        try await side.json(.put, ["s-\(i)"], body: ["_rev": doc["_rev"]!, "v": .string(tag)])
                    }
                }
                let doc = try await remote.json(.get, ["s-9"])
                try await remote.json(.put, ["s-9"], body: ["_rev": doc["_rev"]!, "v": "remote only"])
                try await settleReplicas()
                _ = try await withDeadline(120, "second sync") { try await sync.run() }
                let (found, _, merged) = try await RevisionTrees.compareWithSnapshots(remote, Endpoint(local))
                #expect(found.isEmpty, "\(found.prefix(20).map(\.description).joined(separator: "\n"))")
                for i in 0..<5 { #expect(merged.documents["s-\(i)"]?.conflicts.count == 1, "s-\(i) is in conflict") }

                // Resolve on the local side, keeping the winner; after the next sync no conflict remains anywhere.
                for i in 0..<5 {
                    let winner = try #require(merged.documents["s-\(i)"]?.winner)
                    _ = try await local.resolveConflicts(of: "s-\(i)", keeping: winner)
                }
                try await settleReplicas()
                _ = try await withDeadline(120, "third sync") { try await sync.run() }
                let (after, _, resolved) = try await RevisionTrees.compareWithSnapshots(remote, Endpoint(local))
                #expect(after.isEmpty, "\(after.prefix(20).map(\.description).joined(separator: "\n"))")
                for i in 0..<5 {
                    #expect(resolved.documents["s-\(i)"]?.conflicts.isEmpty == true, "s-\(i) resolved on both")
                }
                #expect(try await remote.json(.get, ["_all_docs"], query: [("conflicts", "true")])["rows"] != nil)
            }
        }
    }
}
