import CouchQuery
import CouchGzip
import Foundation

/// One attachment as stored with a revision: its bytes in memory, or chunks of the database's file.
struct Attachment: Sendable {
    var name: String
    var contentType: String
    /// `md5-<base64 of the MD5 of the bytes>`.
    var digest: String
    /// The revision generation that added this version of the attachment.
    var revpos: Int
    /// The bytes, in memory or stored.
    var bytes: AttachmentBytes
    /// The length of the bytes (decoded).
    var length: Int

    /// The bytes, read from the database's file when they are stored there (a read failure is
    /// reported to the request in progress, see ``RequestScope``, and gives empty bytes).
    var data: Data { bytes.load() }

    /// The gzip bytes an attachment arrived in (a replicated `"encoding": "gzip"` attachment), kept in
    /// memory until the attachment is stored; nil otherwise.
    var received: AttachmentBytes?

    /// The gzip bytes CouchDB stores for compressible types (the digest is their MD5), nil otherwise:
    /// the bytes it arrived in when it came gzip-encoded, else the compressor's.
    var encoded: Data? {
        if let received { return received.load() }
        return isCompressible ? ZlibCompatibleGzip.compress(data) : nil
    }

    /// A new attachment: compressible types are gzip-encoded and digested as CouchDB stores them.
    /// `encoded` is the gzip form `data` arrived in (a replicated `"encoding": "gzip"` attachment): CouchDB
    /// stores those bytes as they are, so they give the digest.
    init(name: String, contentType: String, revpos: Int, data: Data, digest: String? = nil, encoded: Data? = nil) {
        self.name = name
        self.contentType = contentType
        self.revpos = revpos
        self.bytes = .inline(data)
        self.length = data.count
        self.digest = ""
        self.received = encoded.map(AttachmentBytes.inline)
        if let encoded {
            self.digest = digest ?? "md5-" + Crypto.md5(encoded).base64EncodedString()
        } else if let digest {
            self.digest = digest
        } else if isCompressible {
            self.digest = "md5-" + Crypto.md5(ZlibCompatibleGzip.compress(data)).base64EncodedString()
        } else {
            self.digest = "md5-" + Crypto.md5(data).base64EncodedString()
        }
    }

    /// An attachment whose bytes are already stored (read back from a database's file).
    init(name: String, contentType: String, revpos: Int, digest: String, length: Int, bytes: AttachmentBytes) {
        self.name = name
        self.contentType = contentType
        self.revpos = revpos
        self.digest = digest
        self.length = length
        self.bytes = bytes
        self.received = nil
    }

    /// Whether CouchDB stores this content type gzip-compressed (`[attachments] compressible_types`).
    var isCompressible: Bool {
        let base =
            contentType.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        return base.hasPrefix("text/") || base == "application/javascript" || base == "application/json"
            || base == "application/xml"
    }
}

/// Where an attachment's bytes are.
enum AttachmentBytes: Sendable {
    case inline(Data)
    case stored(StoredBlob)

    func load() -> Data {
        switch self {
        case .inline(let data): return data
        case .stored(let blob):
            do throws(StoreFileError) {
                return try blob.read()
            } catch {
                RequestScope.reportReadFailure(error)
                return Data()
            }
        }
    }
}

/// An attachment's bytes in a database's file: the chunk records, in order.
struct StoredBlob: Sendable {
    let file: StoreFile
    let chunks: [Int64]
    let length: Int
    /// What the chunk records name instead of the attachment's digest: a streamed upload's chunks are written
    /// before its digest is known, so they carry a tag of their own (`upload-<uuid>`); nil when they name the digest.
    var tag: String? = nil

    func read() throws(StoreFileError) -> Data {
        var out = Data()
        // The length is the file's word: reserve no more than the chunks can hold.
        let (capacity, overflow) = chunks.count.multipliedReportingOverflow(by: StoreFile.blobChunkSize)
        out.reserveCapacity(overflow ? length : min(length, capacity))
        for offset in chunks {
            let (kind, payload) = try file.read(at: offset)
            guard kind == .blob, let digestLength = payload.first, payload.count > Int(digestLength) else {
                throw StoreFileError(description: "\(file.url.lastPathComponent): no attachment chunk at \(offset)")
            }
            out.append(contentsOf: payload.dropFirst(1 + Int(digestLength)))
        }
        guard out.count == length else {
            throw StoreFileError(
                description: "\(file.url.lastPathComponent): an attachment of \(length) bytes read as \(out.count)")
        }
        return out
    }
}

/// Where a revision's body is: in memory, or in a document record of the database's file.
enum StoredBody: Sendable {
    case inline(JSON)
    /// The record at `offset`, the `index`th body in it; `size` is its serialised length.
    case stored(StoreFile, offset: Int64, index: Int, size: Int)

    func load() -> JSON? {
        switch self {
        case .inline(let json): return json
        case .stored(let file, let offset, let index, _):
            return Self.reading { try DocumentRecord.body(in: file, at: offset, index: index) }
        }
    }

    /// The body as JSON text: a stored body is copied from its record as written, not parsed.
    func loadText() -> String? {
        switch self {
        case .inline(let json): return json.serialized
        case .stored(let file, let offset, let index, _):
            return Self.reading { try DocumentRecord.bodyText(in: file, at: offset, index: index) }
        }
    }

    /// Runs a read of the file; a failure is reported to the request (see ``RequestScope``) and reads as nil.
    private static func reading<T>(_ read: () throws -> T?) -> T? {
        do {
            return try read()
        } catch {
            RequestScope.reportReadFailure(
                error as? StoreFileError ?? StoreFileError(description: "a stored body does not parse: \(error)"))
            return nil
        }
    }
}

/// One revision in a document's revision tree.
struct RevNode: Sendable {
    var pos: Int
    var hash: String
    /// The parent revision (`N-hash`), nil for a root (or a stemmed branch start).
    var parent: String?
    var deleted: Bool
    /// Where the body is; nil when only the revision id is known.
    var storedBody: StoredBody?
    var atts: [Attachment]

    /// The document's own members (no `_id`, `_rev`, `_attachments`, `_deleted`); nil when only the
    /// revision id is known (ancestors received through replication, or bodies dropped by compaction).
    /// A stored body is read from the database's file.
    var body: JSON? {
        get { storedBody?.load() }
        set { storedBody = newValue.map(StoredBody.inline) }
    }

    /// The body as JSON text (an object), a stored one copied from the file as written: what a
    /// response sends, with no parse and no serialisation.
    var bodyText: String? { storedBody?.loadText() }

    /// Whether the body is known, without reading it.
    var hasBody: Bool { storedBody != nil }

    init(pos: Int, hash: String, parent: String?, deleted: Bool, body: JSON?, atts: [Attachment]) {
        self.pos = pos
        self.hash = hash
        self.parent = parent
        self.deleted = deleted
        self.storedBody = body.map(StoredBody.inline)
        self.atts = atts
    }

    init(pos: Int, hash: String, parent: String?, deleted: Bool, storedBody: StoredBody?, atts: [Attachment]) {
        self.pos = pos
        self.hash = hash
        self.parent = parent
        self.deleted = deleted
        self.storedBody = storedBody
        self.atts = atts
    }

    var rev: String { "\(pos)-\(hash)" }
}

/// A revision hash as CouchDB holds it: 16 raw bytes when it is 32 hex digits, else its text.
func revIDBytes(_ hash: String) -> [UInt8] {
    if hash.utf8.count == 32, let bytes = Crypto.fromHex(hash) { return Array(bytes) }
    return Array(hash.utf8)
}

/// Splits `N-hash` into its parts.
/// The largest revision generation the engine takes, 2^62 - 1. CouchDB's are unbounded integers, but no document
/// is edited anywhere near this often; with it, a child's generation, a path's first one and a sequence of them
/// never overflow, whatever a client or a replication peer sends.
let maximumGeneration = Int.max >> 1

/// A revision string's generation and hash; nil when it is not one (no dash, or a generation that is not an
/// integer from 0 to `maximumGeneration`).
func parseRev(_ rev: String) -> (pos: Int, hash: String)? {
    guard let dash = rev.firstIndex(of: "-") else { return nil }
    guard let pos = Int(rev[rev.startIndex..<dash]), pos >= 0, pos <= maximumGeneration else { return nil }
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
