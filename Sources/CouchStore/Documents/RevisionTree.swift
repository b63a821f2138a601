import CouchQuery
import CouchGzip
import Foundation

/// One attachment as stored with a revision. The bytes are kept whole and binary safe.
struct Attachment: Sendable {
    var name: String
    var contentType: String
    /// `md5-<base64 of the MD5 of the bytes>`.
    var digest: String
    /// The revision generation that added this version of the attachment.
    var revpos: Int
    var data: Data
    /// The gzip bytes CouchDB stores for compressible types (the digest is their MD5), nil otherwise.
    var encoded: Data?

    var length: Int { data.count }

    /// A new attachment: compressible types are gzip-encoded and digested as CouchDB stores them.
    /// `encoded` is the gzip form `data` arrived in (a replicated `"encoding": "gzip"` attachment): CouchDB
    /// stores those bytes as they are, so they give the digest.
    init(name: String, contentType: String, revpos: Int, data: Data, digest: String? = nil, encoded: Data? = nil) {
        self.name = name
        self.contentType = contentType
        self.revpos = revpos
        self.data = data
        self.digest = ""
        if let encoded {
            self.encoded = encoded
            self.digest = digest ?? "md5-" + Crypto.md5(encoded).base64EncodedString()
        } else if isCompressible {
            let gz = ZlibCompatibleGzip.compress(data)
            self.encoded = gz
            self.digest = digest ?? "md5-" + Crypto.md5(gz).base64EncodedString()
        } else {
            self.digest = digest ?? "md5-" + Crypto.md5(data).base64EncodedString()
        }
    }

    /// Whether CouchDB stores this content type gzip-compressed (`[attachments] compressible_types`).
    var isCompressible: Bool {
        let base =
            contentType.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        return base.hasPrefix("text/") || base == "application/javascript" || base == "application/json"
            || base == "application/xml"
    }
}

/// One revision in a document's revision tree.
struct RevNode: Sendable {
    var pos: Int
    var hash: String
    /// The parent revision (`N-hash`), nil for a root (or a stemmed branch start).
    var parent: String?
    var deleted: Bool
    /// The document's own members (no `_id`, `_rev`, `_attachments`, `_deleted`); nil when only the
    /// revision id is known (ancestors received through replication, or purged bodies).
    var body: JSON?
    var atts: [Attachment]

    var rev: String { "\(pos)-\(hash)" }
}

/// A revision hash as CouchDB holds it: 16 raw bytes when it is 32 hex digits, else its text.
func revIDBytes(_ hash: String) -> [UInt8] {
    if hash.utf8.count == 32, let bytes = Crypto.fromHex(hash) { return Array(bytes) }
    return Array(hash.utf8)
}

/// Splits `N-hash` into its parts.
func parseRev(_ rev: String) -> (pos: Int, hash: String)? {
    guard let dash = rev.firstIndex(of: "-") else { return nil }
    guard let pos = Int(rev[rev.startIndex..<dash]), pos >= 0 else { return nil }
    let hash = String(rev[rev.index(after: dash)...])
    return (pos, hash)
}

/// A document: its revision tree and the sequence of its latest change.
struct DocEntry: Sendable {
    var id: String
    var nodes: [String: RevNode] = [:]
    /// The update sequence of the latest change to this document.
    var seq: Int = 0

    init(id: String) { self.id = id }

    /// Revisions nothing else descends from.
    var leaves: [RevNode] {
        var parents = Set<String>()
        for node in nodes.values { if let p = node.parent { parents.insert(p) } }
        return nodes.values.filter { !parents.contains($0.rev) }
    }

    /// Leaves in CouchDB's winning order: live before deleted, then longer paths, then larger hashes.
    /// Leaves as CouchDB orders them (the winner first): live before deleted, then the higher
    /// generation, then the greater revision id compared as CouchDB holds it — 16 raw bytes for a
    /// 32-digit hex hash, the text's bytes otherwise (which orders non-hex ids differently from
    /// their text).
    var sortedLeaves: [RevNode] {
        leaves.sorted { a, b in
            if a.deleted != b.deleted { return !a.deleted }
            if a.pos != b.pos { return a.pos > b.pos }
            return revIDBytes(b.hash).lexicographicallyPrecedes(revIDBytes(a.hash))
        }
    }

    var winner: RevNode? { sortedLeaves.first }

    var isDeleted: Bool { winner?.deleted ?? true }

    /// Live leaves other than the winner (`_conflicts`).
    var conflicts: [String] {
        Array(sortedLeaves.dropFirst().filter { !$0.deleted }.map(\.rev))
    }

    /// Deleted leaves other than the winner (`_deleted_conflicts`).
    var deletedConflicts: [String] {
        Array(sortedLeaves.dropFirst().filter { $0.deleted }.map(\.rev))
    }

    func isLeaf(_ rev: String) -> Bool {
        guard nodes[rev] != nil else { return false }
        return !nodes.values.contains { $0.parent == rev }
    }

    /// The revision and its ancestors, newest first, as far as the tree knows them.
    func path(to rev: String) -> [RevNode] {
        var out: [RevNode] = []
        var current = nodes[rev]
        var seen = Set<String>()
        while let node = current, !seen.contains(node.rev) {
            seen.insert(node.rev)
            out.append(node)
            current = node.parent.flatMap { nodes[$0] }
        }
        return out
    }

    /// Removes revisions whose generation is more than `limit` below their leaf on every branch (revs_limit).
    mutating func stem(limit: Int) {
        guard limit > 0 else { return }
        var keep = Set<String>()
        for leaf in leaves {
            for node in path(to: leaf.rev).prefix(limit) { keep.insert(node.rev) }
        }
        if keep.count == nodes.count { return }
        for key in nodes.keys where !keep.contains(key) { nodes.removeValue(forKey: key) }
        for (key, node) in nodes where node.parent.map({ nodes[$0] == nil }) ?? false {
            nodes[key]?.parent = nil
        }
    }
}

/// A `_local` document: no revision tree, a counter rev `0-N`.
struct LocalDoc: Sendable {
    var rev: Int
    var body: JSON
}

/// The revision hash CouchDB 3.5 gives the same write (see ``RevisionID``).
func newRevHash(deleted: Bool, parent: String?, body: JSON, atts: [Attachment]) -> String {
    RevisionID.hash(deleted: deleted, parent: parent, body: body, atts: atts)
}
