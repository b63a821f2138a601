import Foundation
import SwiftCouch

/// What a replication test corpus holds. ``full`` is the corpus of the issue (1,000 documents, conflicts of
/// 10, 100 and 210 leaves, attachments of 2 MB and 6.6 MB); ``small`` keeps every kind of revision tree at a
/// size fast tests can copy many times.
struct CorpusSpec: Sendable {
    /// Plain documents (`doc-0000`…), some updated, some deleted.
    var documents: Int
    /// Leaf counts of the conflicted documents built with `new_edits=false`; the last one is a design document.
    var conflictLeaves: [Int]
    /// Sizes of the generated binary attachments, each on a document updated after it was attached.
    var bigAttachments: [Int]
    /// Size of the compressible text attachment (which the server stores gzipped).
    var textAttachmentBytes: Int

    static let full = CorpusSpec(
        documents: 1_000, conflictLeaves: [10, 100, 210], bigAttachments: [2_000_000, 6_600_000],
        textAttachmentBytes: 200_000)
    /// ``full`` when `SWIFTCOUCH_SYNC_FULL_CORPUS=1` (heavier runs), else ``small``: for the tests that use the
    /// full corpus only on request.
    static let onRequest: CorpusSpec =
        ProcessInfo.processInfo.environment["SWIFTCOUCH_SYNC_FULL_CORPUS"] == "1" ? .full : .small
    /// ``full``, except in the TestServer's cluster mode and under ThreadSanitizer (`TSAN_OPTIONS` set), the two
    /// other CI runs of the suite, where it is ``small`` unless `SWIFTCOUCH_SYNC_FULL_CORPUS=1`.
    static let fullUnlessCluster: CorpusSpec =
        SyncEnvironment.nodes > 1 || ProcessInfo.processInfo.environment["TSAN_OPTIONS"] != nil ? onRequest : .full
    static let small = CorpusSpec(
        documents: 40, conflictLeaves: [3, 10], bigAttachments: [150_000], textAttachmentBytes: 20_000)
}

/// Deterministic pseudo-random numbers (SplitMix64), so a corpus is the same in every run.
struct SeededGenerator: RandomNumberGenerator, Sendable {
    var state: UInt64
    init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    /// 32 hexadecimal digits, the shape of a CouchDB revision id.
    mutating func hex() -> String {
        String(format: "%016llx%016llx", next(), next())
    }
    /// `count` bytes.
    mutating func bytes(_ count: Int) -> Data {
        var bytes = [UInt8](repeating: 0, count: count)
        var offset = 0
        while offset < count {
            let word = next()
            for k in 0..<min(8, count - offset) { bytes[offset + k] = UInt8(truncatingIfNeeded: word >> (8 * k)) }
            offset += 8
        }
        return Data(bytes)
    }
}

/// A corpus written into a database: what was built, for the tests that check a copy of it.
struct Corpus: Sendable {
    let spec: CorpusSpec
    /// Every replicable document id (plain, conflicted, design, attachment documents).
    let ids: Set<String>
    /// The `_local` documents written, which must never replicate.
    let localIDs: [String]
    /// The documents deleted (tombstones).
    let deletedIDs: Set<String>
    /// The conflicted documents, by leaf count.
    let conflictIDs: [Int: String]

    /// The id of plain document `i`.
    static func plainID(_ i: Int) -> String { String(format: "doc-%04d", i) }

    /// Writes the corpus described by `spec` into `endpoint` (an empty database).
    static func build(in endpoint: Endpoint, spec: CorpusSpec, seed: UInt64 = 26) async throws -> Corpus {
        var random = SeededGenerator(seed: seed)
        var ids = Set<String>()
        var deleted = Set<String>()
        var revs: [String: String] = [:]

        // Plain documents, then updates (a third once, a ninth twice more), then tombstones (every tenth).
        let plain = (0..<spec.documents).map { plainID($0) }
        var docs: [JSONValue] = plain.enumerated().map { i, id in
            [
                "_id": .string(id), "kind": "plain", "n": .int(Int64(i)), "group": .int(Int64(i % 5)),
                "text": .string("document \(i) " + String(repeating: "abc", count: i % 40)),
            ]
        }
        try await bulk(endpoint, docs, revs: &revs)
        ids.formUnion(plain)
        for round in 0..<3 {
            docs = plain.enumerated().compactMap { i, id in
                guard i % 3 == 0, round == 0 || i % 9 == 0 else { return nil }
                return [
                    "_id": .string(id), "_rev": .string(revs[id]!), "kind": "plain", "n": .int(Int64(i)),
                    "group": .int(Int64(i % 5)), "updated": .int(Int64(round + 1)),
                ]
            }
            try await bulk(endpoint, docs, revs: &revs)
        }
        docs = plain.enumerated().compactMap { i, id in
            guard i % 10 == 5 else { return nil }
            deleted.insert(id)
            return ["_id": .string(id), "_rev": .string(revs[id]!), "_deleted": true]
        }
        try await bulk(endpoint, docs, revs: &revs)

        // Conflicts built with new_edits=false: leaves branching from one root, some two revisions deep,
        // every seventh deleted (deleted conflicts); the last conflicted document is a design document.
        var conflictIDs: [Int: String] = [:]
        for (k, leaves) in spec.conflictLeaves.enumerated() {
            let id = k == spec.conflictLeaves.count - 1 ? "_design/conflict-\(leaves)" : "conflict-\(leaves)"
            conflictIDs[leaves] = id
            let root = random.hex()
            var branch: [JSONValue] = []
            for j in 0..<leaves {
                var path = [random.hex(), root]
                if j % 4 == 3 { path.insert(random.hex(), at: 0) }
                var doc: [String: JSONValue] = [
                    "_id": .string(id), "_rev": .string("\(path.count)-\(path[0])"), "leaf": .int(Int64(j)),
                    "_revisions": ["start": .int(Int64(path.count)), "ids": .array(path.map { .string($0) })],
                ]
                if j % 7 == 6 { doc["_deleted"] = true } else { doc["kind"] = "conflict" }
                branch.append(.object(doc))
            }
            try await replicatedWrite(endpoint, branch)
            ids.insert(id)
        }
        // A live winner beside deleted leaves, and a document whose every leaf is deleted.
        for (id, shape) in [("deleted-conflicts", [false, true, true]), ("all-deleted", [true, true])] {
            let root = random.hex()
            let branch: [JSONValue] = shape.enumerated().map { j, isDeleted in
                let path = j == 2 ? [random.hex(), random.hex(), root] : [random.hex(), root]
                var doc: [String: JSONValue] = [
                    "_id": .string(id), "_rev": .string("\(path.count)-\(path[0])"), "leaf": .int(Int64(j)),
                    "_revisions": ["start": .int(Int64(path.count)), "ids": .array(path.map { .string($0) })],
                ]
                if isDeleted { doc["_deleted"] = true }
                return .object(doc)
            }
            try await replicatedWrite(endpoint, branch)
            ids.insert(id)
            if !shape.contains(false) { deleted.insert(id) }
        }
        // Conflicting leaves that carry attachments of their own.
        do {
            let root = random.hex()
            let branch: [JSONValue] = (0..<3).map { j in
                let path = [random.hex(), root]
                let bytes = random.bytes(500 + j * 300)
                return [
                    "_id": "conflict-attachments", "_rev": .string("2-\(path[0])"), "leaf": .int(Int64(j)),
                    "_revisions": ["start": 2, "ids": .array(path.map { .string($0) })],
                    "_attachments": [
                        "leaf.bin": [
                            "content_type": "application/octet-stream", "data": .string(bytes.base64EncodedString()),
                        ]
                    ],
                ]
            }
            try await replicatedWrite(endpoint, branch)
            ids.insert("conflict-attachments")
        }

        // Attachments: large binary ones and compressible text ones, attached at revision 2 of a document
        // updated twice afterwards, so their revpos (2) is below the leaf's position (4).
        var attached: [(id: String, name: String, type: String, bytes: Data)] = []
        for size in spec.bigAttachments {
            attached.append(("att-big-\(size)", "blob.bin", "application/octet-stream", random.bytes(size)))
        }
        var text = ""
        var line = 0
        while text.utf8.count < spec.textAttachmentBytes {
            text += "line \(line): the quick brown fox jumps over the lazy dog \(line % 17)\n"
            line += 1
        }
        attached.append(("att-text", "notes.txt", "text/plain", Data(text.utf8)))
        attached.append(("att-text", "data.json", "application/json", Data("{\"lines\":\(line)}".utf8)))
        for (id, name, type, bytes) in attached {
            if revs[id] == nil {
                let answer = try await endpoint.json(.put, Endpoint.segments(id), body: ["kind": "attachment"])
                revs[id] = answer["rev"]?.stringValue
                ids.insert(id)
            }
            let answer = try await endpoint.json(
                request: GenericOperation(
                    method: .put, path: CouchPath(segments: [endpoint.database, id, name]),
                    query: [URLQueryItem(name: "rev", value: revs[id]!)], body: bytes, contentType: type))
            revs[id] = answer["rev"]?.stringValue
        }
        for id in Set(attached.map(\.id)).sorted() {
            for update in 1...2 {
                var doc = try await endpoint.json(.get, Endpoint.segments(id))
                guard case .object(var object) = doc else { throw CorpusError("\(id) is not an object") }
                object["updated"] = .int(Int64(update))
                doc = .object(object)
                let answer = try await endpoint.json(.put, Endpoint.segments(id), body: doc)
                revs[id] = answer["rev"]?.stringValue
            }
        }
        // Small inline attachments on a few documents; one of them deleted afterwards.
        for i in 0..<4 {
            let id = "att-small-\(i)"
            let bytes = random.bytes(100 + 37 * i)
            let answer = try await endpoint.json(
                .put, [id],
                body: [
                    "kind": "attachment",
                    "_attachments": [
                        "a.bin": [
                            "content_type": "application/octet-stream", "data": .string(bytes.base64EncodedString()),
                        ],
                        "b.txt": [
                            "content_type": "text/plain",
                            "data": .string(Data("small \(i)".utf8).base64EncodedString()),
                        ],
                    ],
                ])
            revs[id] = answer["rev"]?.stringValue
            ids.insert(id)
        }
        _ = try await endpoint.json(.delete, ["att-small-3"], query: [("rev", revs["att-small-3"]!)])
        deleted.insert("att-small-3")

        // `_local` documents: never replicated.
        let localIDs = ["_local/corpus-settings", "_local/corpus-cursor"]
        for id in localIDs {
            try await endpoint.json(.put, Endpoint.segments(id), body: ["private": true, "id": .string(id)])
        }
        return Corpus(spec: spec, ids: ids, localIDs: localIDs, deletedIDs: deleted, conflictIDs: conflictIDs)
    }

    /// `_bulk_docs` with new edits; records the new revisions, and fails on any per-document error.
    private static func bulk(_ endpoint: Endpoint, _ docs: [JSONValue], revs: inout [String: String]) async throws {
        for start in stride(from: 0, to: docs.count, by: 250) {
            let slice = Array(docs[start..<min(docs.count, start + 250)])
            let answer = try await endpoint.json(.post, ["_bulk_docs"], body: ["docs": .array(slice)])
            for row in answer.arrayValue ?? [] {
                guard let id = row["id"]?.stringValue, let rev = row["rev"]?.stringValue else {
                    throw CorpusError("bulk write failed: \(row)")
                }
                revs[id] = rev
            }
        }
    }

    /// `_bulk_docs` with `new_edits=false` (revisions given with their history).
    static func replicatedWrite(_ endpoint: Endpoint, _ docs: [JSONValue]) async throws {
        let answer = try await endpoint.json(.post, ["_bulk_docs"], body: ["docs": .array(docs), "new_edits": false])
        if let errors = answer.arrayValue, !errors.isEmpty {
            throw CorpusError("new_edits=false write failed: \(errors)")
        }
    }

    /// The corpus's `_local` documents present in `endpoint` (none may be, on a replication's target).
    func localDocumentsPresent(in endpoint: Endpoint) async throws -> [String] {
        var present: [String] = []
        for id in localIDs {
            do {
                _ = try await endpoint.json(.get, Endpoint.segments(id))
                present.append(id)
            } catch let error as CouchError where error.isNotFound {}
        }
        return present
    }
}

struct CorpusError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension Endpoint {
    /// Runs `request` and decodes its JSON answer.
    func json(request: GenericOperation) async throws -> JSONValue {
        try await client.value(GenericJSONOperation<JSONValue>(request))
    }
}

extension Corpus {
    /// What a snapshot of a database holding this corpus must show, so the corpus cannot silently become
    /// weaker than it claims: every conflict with its leaf count and deleted leaves, tombstones, attachments
    /// whose revpos is below their leaf's position.
    func shapeProblems(in snapshot: TreeSnapshot) -> [String] {
        var problems: [String] = []
        if snapshot.documents.count != ids.count {
            problems.append("\(snapshot.documents.count) documents, \(ids.count) expected")
        }
        for (leaves, id) in conflictIDs {
            guard let tree = snapshot.documents[id] else {
                problems.append("\(id) missing")
                continue
            }
            if tree.leaves.count != leaves { problems.append("\(id): \(tree.leaves.count) leaves, \(leaves) expected") }
            if tree.deletedConflicts.isEmpty && leaves >= 7 { problems.append("\(id): no deleted conflicts") }
            if tree.conflicts.isEmpty { problems.append("\(id): no _conflicts") }
        }
        for id in deletedIDs where snapshot.documents[id]?.winnerDeleted != true {
            problems.append("\(id): not a tombstone")
        }
        if snapshot.documents["all-deleted"]?.leaves.count != 2 { problems.append("all-deleted: not 2 leaves") }
        if snapshot.documents["deleted-conflicts"]?.deletedConflicts.count != 2 {
            problems.append("deleted-conflicts: not 2 deleted conflicts")
        }
        for id in ids where id.hasPrefix("att-big-") || id == "att-text" {
            guard let tree = snapshot.documents[id], let leaf = tree.leaves.values.first, !leaf.attachments.isEmpty,
                let position = tree.winner.flatMap({ Int64($0.prefix(while: \.isNumber)) })
            else {
                problems.append("\(id): no attachment")
                continue
            }
            for (name, attachment) in leaf.attachments where (attachment.revpos ?? .max) >= position {
                problems.append("\(id)/\(name): revpos \(attachment.revpos ?? -1) not below \(position)")
            }
        }
        return problems
    }
}
