import Foundation
import SwiftCouch
import Testing

/// Every document's revision tree as a database reports it: what two databases must agree on after a
/// replication.
struct TreeSnapshot: Sendable, Equatable {
    var documents: [String: DocumentTree] = [:]
}

/// One document: its leaves (from `open_revs=all&revs=true`), its winner (from `_all_docs` with `keys`,
/// which lists deleted documents too) and, when the winner is live, `_conflicts` and `_deleted_conflicts`
/// (from `GET ?conflicts=true&deleted_conflicts=true`).
struct DocumentTree: Sendable, Equatable {
    var leaves: [String: LeafRevision] = [:]
    var winner: String?
    var winnerDeleted = false
    var conflicts: [String] = []
    var deletedConflicts: [String] = []
}

struct LeafRevision: Sendable, Equatable {
    var deleted: Bool
    /// The `_revisions` path, leaf first (`N-id`, `N-1-id`, …).
    var path: [String]
    /// The body without the fields that start with `_`.
    var body: JSONValue
    var attachments: [String: AttachmentInfo]
}

struct AttachmentInfo: Sendable, Equatable {
    var digest: String?
    var revpos: Int64?
    var length: Int64?
    var contentType: String?
    /// The bytes served for this leaf (`GET /db/doc/att?rev=leaf`), as their count and a 64-bit FNV-1a digest.
    var bytes: String?
}

/// One way two trees differ.
struct TreeDifference: Sendable, Equatable, CustomStringConvertible {
    enum Kind: String, Sendable, CaseIterable {
        case missingDocument, extraDocument, missingLeaf, extraLeaf, deletedFlag, revisionPath, body
        case missingAttachment, extraAttachment, attachmentDigest, attachmentRevpos, attachmentLength
        case attachmentContentType, attachmentBytes, winner, conflicts, deletedConflicts
    }
    var id: String
    var rev: String?
    var kind: Kind
    var detail: String

    var description: String { "\(id)\(rev.map { " @\($0)" } ?? ""): \(kind.rawValue) (\(detail))" }
}

enum RevisionTrees {
    /// Reads every document's tree from `endpoint` (ids from `_all_docs` and `_changes?style=all_docs`, so
    /// deleted documents are included; `_local` documents are not part of a tree).
    /// On the TestServer's cluster mode with lagging replicas, this waits out the lag first: `_all_docs` and
    /// `_changes` are served by one copy of each shard, which sees a write only once it is that old.
    static func snapshot(of endpoint: Endpoint, concurrency: Int = 8) async throws -> TreeSnapshot {
        if SyncEnvironment.replicaLag > 0 {
            try await Task.sleep(nanoseconds: UInt64((SyncEnvironment.replicaLag * 1.5 + 0.1) * 1e9))
        }
        var ids = Set<String>()
        let all = try await endpoint.json(.get, ["_all_docs"])
        for row in all["rows"]?.arrayValue ?? [] { if let id = row["id"]?.stringValue { ids.insert(id) } }
        let changes = try await endpoint.json(.get, ["_changes"], query: [("style", "all_docs")])
        for row in changes["results"]?.arrayValue ?? [] { if let id = row["id"]?.stringValue { ids.insert(id) } }
        ids = ids.filter { !$0.hasPrefix("_local/") }
        let sorted = ids.sorted()

        // Winners, deleted ones included, from _all_docs with keys.
        var winners: [String: (rev: String, deleted: Bool)] = [:]
        for start in stride(from: 0, to: sorted.count, by: 200) {
            let keys = sorted[start..<min(sorted.count, start + 200)].map { JSONValue.string($0) }
            let answer = try await endpoint.json(.post, ["_all_docs"], body: ["keys": .array(keys)])
            for row in answer["rows"]?.arrayValue ?? [] {
                guard let id = row["id"]?.stringValue, let rev = row["value"]?["rev"]?.stringValue else { continue }
                winners[id] = (rev, row["value"]?["deleted"]?.boolValue == true)
            }
        }

        var snapshot = TreeSnapshot()
        // A window of `concurrency` reads in flight.
        try await withThrowingTaskGroup(of: (String, DocumentTree).self) { group in
            var next = sorted.makeIterator()
            func addNext() {
                guard let id = next.next() else { return }
                let winner = winners[id]
                group.addTask { (id, try await document(id, in: endpoint, winner: winner)) }
            }
            for _ in 0..<concurrency { addNext() }
            while let (id, tree) = try await group.next() {
                snapshot.documents[id] = tree
                addNext()
            }
        }
        return snapshot
    }

    private static func document(_ id: String, in endpoint: Endpoint, winner: (rev: String, deleted: Bool)?)
        async throws -> DocumentTree
    {
        var tree = DocumentTree()
        tree.winner = winner?.rev
        tree.winnerDeleted = winner?.deleted ?? false
        let segments = Endpoint.segments(id)
        let leaves = try await endpoint.json(.get, segments, query: [("open_revs", "all"), ("revs", "true")])
        for entry in leaves.arrayValue ?? [] {
            guard let doc = entry["ok"]?.objectValue, let rev = doc["_rev"]?.stringValue else { continue }
            var path: [String] = []
            if let start = doc["_revisions"]?["start"]?.intValue, let revIDs = doc["_revisions"]?["ids"]?.arrayValue {
                path = revIDs.enumerated().map { "\(start - Int64($0.offset))-\($0.element.stringValue ?? "?")" }
            }
            var attachments: [String: AttachmentInfo] = [:]
            for (name, stub) in doc["_attachments"]?.objectValue ?? [:] {
                let bytes = try await endpoint.data(.get, segments + [name], query: [("rev", rev)])
                attachments[name] = AttachmentInfo(
                    digest: stub["digest"]?.stringValue, revpos: stub["revpos"]?.intValue,
                    length: stub["length"]?.intValue, contentType: stub["content_type"]?.stringValue,
                    bytes: byteDigest(bytes))
            }
            tree.leaves[rev] = LeafRevision(
                deleted: doc["_deleted"]?.boolValue == true, path: path,
                body: .object(doc.filter { !$0.key.hasPrefix("_") }), attachments: attachments)
        }
        // `_conflicts` and `_deleted_conflicts` list other leaves: a document with one leaf has neither.
        if winner?.deleted == false, tree.leaves.count > 1 {
            let doc = try await endpoint.json(
                .get, segments, query: [("conflicts", "true"), ("deleted_conflicts", "true")])
            tree.conflicts = doc["_conflicts"]?.arrayValue?.compactMap(\.stringValue) ?? []
            tree.deletedConflicts = doc["_deleted_conflicts"]?.arrayValue?.compactMap(\.stringValue) ?? []
        }
        return tree
    }

    /// The count and a 64-bit FNV-1a hash (over 8-byte words) of `data`: large bytes are compared by digest.
    static func byteDigest(_ data: Data) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        // Eight bytes a step (a debug build hashes megabytes byte by byte slowly).
        data.withUnsafeBytes { raw in
            let words = raw.count / 8
            for i in 0..<words {
                hash = (hash ^ raw.loadUnaligned(fromByteOffset: i * 8, as: UInt64.self)) &* 0x100_0000_01b3
            }
            for i in (words * 8)..<raw.count { hash = (hash ^ UInt64(raw[i])) &* 0x100_0000_01b3 }
        }
        return "\(data.count) bytes, fnv1a \(String(hash, radix: 16))"
    }

    /// How `actual` differs from `expected`, document by document (only the documents in `ids` when given).
    static func differences(expected: TreeSnapshot, actual: TreeSnapshot, ids: Set<String>? = nil)
        -> [TreeDifference]
    {
        var out: [TreeDifference] = []
        let all = Set(expected.documents.keys).union(actual.documents.keys).filter { ids?.contains($0) ?? true }
        for id in all.sorted() {
            guard let e = expected.documents[id] else {
                out.append(.init(id: id, kind: .extraDocument, detail: "only in the target"))
                continue
            }
            guard let a = actual.documents[id] else {
                out.append(.init(id: id, kind: .missingDocument, detail: "not in the target"))
                continue
            }
            out += differences(id: id, expected: e, actual: a)
        }
        return out
    }

    private static func differences(id: String, expected e: DocumentTree, actual a: DocumentTree) -> [TreeDifference] {
        var out: [TreeDifference] = []
        func add(_ rev: String?, _ kind: TreeDifference.Kind, _ detail: String) {
            out.append(TreeDifference(id: id, rev: rev, kind: kind, detail: detail))
        }
        for rev in Set(e.leaves.keys).subtracting(a.leaves.keys).sorted() {
            add(rev, .missingLeaf, "leaf not in target")
        }
        for rev in Set(a.leaves.keys).subtracting(e.leaves.keys).sorted() {
            add(rev, .extraLeaf, "leaf only in target")
        }
        for (rev, el) in e.leaves.sorted(by: { $0.key < $1.key }) {
            guard let al = a.leaves[rev] else { continue }
            if el.deleted != al.deleted { add(rev, .deletedFlag, "deleted \(el.deleted) vs \(al.deleted)") }
            if el.path != al.path { add(rev, .revisionPath, "\(el.path) vs \(al.path)") }
            if el.body != al.body { add(rev, .body, "\(el.body) vs \(al.body)") }
            for name in Set(el.attachments.keys).subtracting(al.attachments.keys).sorted() {
                add(rev, .missingAttachment, name)
            }
            for name in Set(al.attachments.keys).subtracting(el.attachments.keys).sorted() {
                add(rev, .extraAttachment, name)
            }
            for (name, ea) in el.attachments.sorted(by: { $0.key < $1.key }) {
                guard let aa = al.attachments[name] else { continue }
                if ea.digest != aa.digest { add(rev, .attachmentDigest, "\(name): \(d(ea.digest)) vs \(d(aa.digest))") }
                if ea.revpos != aa.revpos { add(rev, .attachmentRevpos, "\(name): \(d(ea.revpos)) vs \(d(aa.revpos))") }
                if ea.length != aa.length { add(rev, .attachmentLength, "\(name): \(d(ea.length)) vs \(d(aa.length))") }
                if ea.contentType != aa.contentType {
                    add(rev, .attachmentContentType, "\(name): \(d(ea.contentType)) vs \(d(aa.contentType))")
                }
                if ea.bytes != aa.bytes { add(rev, .attachmentBytes, "\(name): \(d(ea.bytes)) vs \(d(aa.bytes))") }
            }
        }
        if e.winner != a.winner || e.winnerDeleted != a.winnerDeleted {
            add(nil, .winner, "\(d(e.winner)) deleted \(e.winnerDeleted) vs \(d(a.winner)) deleted \(a.winnerDeleted)")
        }
        if e.conflicts != a.conflicts { add(nil, .conflicts, "\(e.conflicts) vs \(a.conflicts)") }
        if e.deletedConflicts != a.deletedConflicts {
            add(nil, .deletedConflicts, "\(e.deletedConflicts) vs \(a.deletedConflicts)")
        }
        return out
    }

    private static func d<T>(_ value: T?) -> String { value.map { "\($0)" } ?? "nil" }

    /// The differences between the trees of `source` and `target` (only the documents in `ids` when given).
    /// On the TestServer's cluster mode (or a real cluster) reads served by one copy may lag: the comparison
    /// is repeated until it finds nothing, for at most `settle` seconds of pauses.
    static func compare(
        _ source: Endpoint, _ target: Endpoint, ids: Set<String>? = nil, settle: Double? = nil
    ) async throws -> [TreeDifference] {
        try await compareWithSnapshots(source, target, ids: ids, settle: settle).differences
    }

    /// ``compare(_:_:ids:settle:)``, with the snapshots the last comparison read.
    static func compareWithSnapshots(
        _ source: Endpoint, _ target: Endpoint, ids: Set<String>? = nil, settle: Double? = nil
    ) async throws -> (differences: [TreeDifference], source: TreeSnapshot, target: TreeSnapshot) {
        let patience = settle ?? (SyncEnvironment.nodes > 1 || SyncEnvironment.isRealCouchDB ? 20 : 0)
        var slept = 0.0
        while true {
            let expected = try await snapshot(of: source)
            let actual = try await snapshot(of: target)
            let found = differences(expected: expected, actual: actual, ids: ids)
            if found.isEmpty || slept >= patience { return (found, expected, actual) }
            try await Task.sleep(nanoseconds: 500_000_000)
            slept += 0.5
        }
    }
}

/// Fails the current test with the first differences, each naming the document, the revision and what differs.
func expectIdenticalTrees(
    _ source: Endpoint, _ target: Endpoint, ids: Set<String>? = nil, _ what: String = "",
    sourceLocation: SourceLocation = #_sourceLocation
) async throws {
    let found = try await RevisionTrees.compare(source, target, ids: ids)
    #expect(
        found.isEmpty,
        Comment(
            rawValue: "\(what): \(found.count) differences between \(source) and \(target):\n"
                + found.prefix(25).map(\.description).joined(separator: "\n")), sourceLocation: sourceLocation)
}
