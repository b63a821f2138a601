import CouchQuery
import Foundation

/// The records of one request: the databases it wrote (made durable together when it ends, one
/// `fsync` each, before it is answered) and the first stored body or attachment it failed to read.
///
/// A scope belongs to the thread running the request (the engine answers a request on one thread).
/// Writes made outside any scope (background work) are made durable at once.
final class RequestScope: @unchecked Sendable {
    // Safe: a scope is only reached through the thread-local slot of the one thread that runs it.
    private(set) var dirty: [Database] = []
    private(set) var readFailure: StoreFileError?

    /// The thread-local slot (a POSIX key: cheaper than `Thread.threadDictionary`, read on every write).
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        precondition(pthread_key_create(&key, nil) == 0, "no thread-local key for request scopes")
        return key
    }()

    /// The scope of the request the calling thread runs (unretained: ``run(_:)`` holds it while it is set).
    static var current: RequestScope? {
        pthread_getspecific(key).map { Unmanaged<RequestScope>.fromOpaque($0).takeUnretainedValue() }
    }

    /// Runs `body` in a new scope (restoring any enclosing one afterwards) and returns the scope.
    static func run<T>(_ body: () -> T) -> (T, RequestScope) {
        let scope = RequestScope()
        let previous = pthread_getspecific(key)
        pthread_setspecific(key, Unmanaged.passUnretained(scope).toOpaque())
        defer { pthread_setspecific(key, previous) }
        return withExtendedLifetime(scope) { (body(), scope) }
    }

    /// Notes that `db` has records waiting for its sync; false when no scope runs (sync at once).
    static func noteDirty(_ db: Database) -> Bool {
        guard let scope = current else { return false }
        if !scope.dirty.contains(where: { $0 === db }) { scope.dirty.append(db) }
        return true
    }

    static func reportReadFailure(_ error: StoreFileError) {
        if let scope = current, scope.readFailure == nil { scope.readFailure = error }
    }
}

/// The document record (``StoreRecordKind/document``): `[UInt32 head length][head JSON][bodies JSON array]`.
/// The head holds what the in-memory index needs (id, sequence, the new nodes without their bodies,
/// attachment metadata), so opening a database reads heads only; bodies are read when asked.
enum DocumentRecord {
    /// Encodes a document record holding a document's whole tree (`nodes`). A body already stored
    /// in `file` is referred to (`bo`: the record, `bi`: its index there); others are written in this
    /// record's bodies. `purge` marks a tree written by a purge (reading it back counts one).
    static func encode(id: String, seq: Int, nodes: [RevNode], in file: StoreFile, purge: Bool = false)
        -> (bytes: [UInt8], bodies: [(index: Int, size: Int)?])
    {
        var bodies = "["
        var placed: [(index: Int, size: Int)?] = []
        var heads: [JSON] = []
        var written = 0
        var position: [String: Int] = [:]
        for (index, node) in nodes.enumerated() { position[node.rev] = index }
        for node in nodes {
            // Defaults are left out (no parent, not deleted, no attachments), and a parent in this record
            // is named by its place in `add` (`pi`) rather than its revision: compacted files stay small.
            var members: [(String, JSON)] = [("r", .string(node.rev))]
            if let parent = node.parent {
                if let index = position[parent] {
                    members.append(("pi", .int(Int64(index))))
                } else {
                    members.append(("p", .string(parent)))
                }
            }
            if node.deleted { members.append(("d", true)) }
            switch node.storedBody {
            case .stored(let f, let offset, let index, let size) where f === file:
                members += [("bo", .int(offset)), ("bi", .int(Int64(index))), ("bs", .int(Int64(size)))]
                placed.append(nil)
            case .some:
                if written > 0 { bodies += "," }
                let before = bodies.utf8.count
                if let body = node.body { body.write(to: &bodies) } else { bodies += "{}" }
                let size = bodies.utf8.count - before
                members += [("bi", .int(Int64(written))), ("bs", .int(Int64(size)))]
                placed.append((written, size))
                written += 1
            case nil:
                placed.append(nil)
            }
            let atts: [JSON] = node.atts.map { att in
                var a: [(String, JSON)] = [
                    ("n", .string(att.name)), ("ct", .string(att.contentType)), ("dg", .string(att.digest)),
                    ("rp", .int(Int64(att.revpos))), ("len", .int(Int64(att.length))),
                ]
                if case .stored(let blob) = att.bytes {
                    a.append(("ck", .array(blob.chunks.map { .int($0) })))
                    if let tag = blob.tag { a.append(("tg", .string(tag))) }
                }
                if case .stored(let blob) = att.received {
                    a += [("eck", .array(blob.chunks.map { .int($0) })), ("elen", .int(Int64(blob.length)))]
                    if let tag = blob.tag { a.append(("etg", .string(tag))) }
                }
                return .object(a)
            }
            if !atts.isEmpty { members.append(("a", .array(atts))) }
            heads.append(.object(members))
        }
        bodies += "]"
        var members: [(String, JSON)] = [
            ("id", .string(id)), ("seq", .int(Int64(seq))), ("add", .array(heads)),
        ]
        if purge { members.append(("purge", true)) }
        let head = JSON.object(members).serialized
        var out: [UInt8] = []
        out.reserveCapacity(4 + head.utf8.count + bodies.utf8.count)
        appendUInt32(&out, UInt32(head.utf8.count))
        out.append(contentsOf: head.utf8)
        out.append(contentsOf: bodies.utf8)
        return (out, placed)
    }

    /// The nodes a document record's head describes, their bodies and attachments pointing into `file`.
    static func nodes(fromHead head: JSON, file: StoreFile, offset: Int64) -> [RevNode] {
        var out: [RevNode] = []
        let added = head["add"]?.arrayValue ?? []
        let revs = added.map { $0["r"]?.stringValue }
        for (place, node) in added.enumerated() {
            guard let rev = node["r"]?.stringValue, let (pos, hash) = parseRev(rev) else { continue }
            var parent = node["p"]?.stringValue
            if let index = node["pi"]?.intValue, index >= 0, index < Int64(revs.count), Int(index) != place {
                parent = revs[Int(index)]
            }
            let atts: [Attachment] = (node["a"]?.arrayValue ?? []).compactMap { a in
                guard let name = a["n"]?.stringValue, let digest = a["dg"]?.stringValue,
                    let length = a["len"]?.storedNumber
                else { return nil }
                // A chunk offset out of range is left out: the attachment then reads short, a clear error.
                let chunks = (a["ck"]?.arrayValue ?? []).compactMap(\.storedNumber).map(Int64.init)
                var att = Attachment(
                    name: name, contentType: a["ct"]?.stringValue ?? "application/octet-stream",
                    revpos: a["rp"]?.storedNumber ?? 1, digest: digest, length: length,
                    bytes: .stored(
                        StoredBlob(file: file, chunks: chunks, length: Int(length), tag: a["tg"]?.stringValue)))
                if let encodedChunks = a["eck"]?.arrayValue, let encodedLength = a["elen"]?.storedNumber {
                    att.received = .stored(
                        StoredBlob(
                            file: file, chunks: encodedChunks.compactMap(\.storedNumber).map(Int64.init),
                            length: encodedLength,
                            tag: a["etg"]?.stringValue))
                }
                return att
            }
            var body: StoredBody?
            if let index = node["bi"]?.intValue, index >= 0, index <= Int64(Int32.max) {
                let size = min(node["bs"]?.storedNumber ?? 0, StoreFile.maximumRecordSize)
                let at = node["bo"].map { $0.storedNumber.map(Int64.init) ?? -1 } ?? offset  // -1: read as an error
                body = .stored(file, offset: at, index: Int(index), size: size)
            }
            out.append(
                RevNode(
                    pos: pos, hash: hash, parent: parent, deleted: node["d"]?.boolValue ?? false,
                    storedBody: body, atts: atts))
        }
        return out
    }

    /// The whole tree of document `id` from the document record at `offset`.
    static func tree(id: String, in file: StoreFile, at offset: Int64) throws -> DocEntry {
        let (kind, payload) = try file.read(at: offset)
        guard kind == .document else {
            throw StoreFileError(description: "\(file.url.lastPathComponent): no document record at \(offset)")
        }
        let head = try Self.head(payload)
        guard head["id"]?.stringValue == id, let seq = head["seq"]?.storedNumber else {
            throw StoreFileError(description: "\(file.url.lastPathComponent): the record at \(offset) is not \(id)'s")
        }
        var tree = DocEntry(id: id)
        tree.seq = seq
        for node in nodes(fromHead: head, file: file, offset: offset) { tree.nodes[node.rev] = node }
        return tree
    }

    /// The head of a document record's payload.
    static func head(_ payload: ArraySlice<UInt8>) throws -> JSON {
        let (head, _) = try split(payload)
        return try JSON.parse(head)
    }

    /// The `index`th body of the document record at `offset`.
    static func body(in file: StoreFile, at offset: Int64, index: Int) throws -> JSON? {
        let (kind, payload) = try file.read(at: offset)
        guard kind == .document else {
            throw StoreFileError(description: "\(file.url.lastPathComponent): no document record at \(offset)")
        }
        let (_, bodies) = try split(payload)
        guard case .array(let list) = try JSON.parse(bodies), index >= 0, index < list.count else {
            throw StoreFileError(description: "\(file.url.lastPathComponent): no body \(index) at \(offset)")
        }
        return list[index].isNull ? nil : list[index]
    }

    /// The `index`th body of the document record at `offset` as it is stored: the JSON text of an
    /// object, copied, not parsed (what a response sends as it is). Nil for a body stored as `null`.
    static func bodyText(in file: StoreFile, at offset: Int64, index: Int) throws -> String? {
        let (kind, payload) = try file.read(at: offset)
        guard kind == .document else {
            throw StoreFileError(description: "\(file.url.lastPathComponent): no document record at \(offset)")
        }
        let (_, bodies) = try split(payload)
        guard let range = StoredJSON.element(index, ofArray: bodies) else {
            throw StoreFileError(description: "\(file.url.lastPathComponent): no body \(index) at \(offset)")
        }
        let text = bodies[range]
        if text.elementsEqual("null".utf8) { return nil }
        return String(decoding: text, as: UTF8.self)
    }

    private static func split(_ payload: ArraySlice<UInt8>) throws -> (ArraySlice<UInt8>, ArraySlice<UInt8>) {
        guard payload.count >= 4 else { throw StoreFileError(description: "a document record too short") }
        let length = Int(StoreFile.readUInt32(payload, 0))
        let start = payload.startIndex + 4
        guard length <= payload.count - 4 else { throw StoreFileError(description: "a document record cut short") }
        return (payload[start..<(start + length)], payload[(start + length)...])
    }

    /// A blob chunk record's payload: `[UInt8 digest length][digest][bytes]`.
    static func blobChunk(digest: String, bytes: Data) -> [UInt8] {
        let d = Array(digest.utf8.prefix(255))
        var out: [UInt8] = [UInt8(d.count)]
        out.reserveCapacity(1 + d.count + bytes.count)
        out.append(contentsOf: d)
        out.append(contentsOf: bytes)
        return out
    }
}

/// Finds values in JSON text the engine wrote itself (compact, checksummed in its record), without
/// parsing them: the text is copied to a response as it is.
enum StoredJSON {
    /// The byte range of the `index`th element of the array `bytes` holds; nil when there is none.
    static func element(_ index: Int, ofArray bytes: ArraySlice<UInt8>) -> Range<Int>? {
        guard index >= 0, bytes.first == UInt8(ascii: "[") else { return nil }
        var position = bytes.startIndex + 1
        var element = 0
        while position < bytes.endIndex, bytes[position] != UInt8(ascii: "]") {
            guard let end = valueEnd(bytes, from: position) else { return nil }
            if element == index { return position..<end }
            guard end < bytes.endIndex, bytes[end] == UInt8(ascii: ",") else { return nil }
            position = end + 1
            element += 1
        }
        return nil
    }

    /// Where the value starting at `start` ends: after its closing bracket or quote, or at the `,`, `]`
    /// or `}` after a number or literal. Nil when the text ends first.
    static func valueEnd(_ bytes: ArraySlice<UInt8>, from start: Int) -> Int? {
        var depth = 0
        var inString = false
        var position = start
        while position < bytes.endIndex {
            let byte = bytes[position]
            if inString {
                if byte == UInt8(ascii: "\\") {
                    position += 2
                    continue
                }
                if byte == UInt8(ascii: "\"") {
                    inString = false
                    if depth == 0 { return position + 1 }
                }
            } else {
                switch byte {
                case UInt8(ascii: "\""): inString = true
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    if depth == 0 { return position > start ? position : nil }
                    depth -= 1
                    if depth == 0 { return position + 1 }
                case UInt8(ascii: ","):
                    if depth == 0 { return position > start ? position : nil }
                default: break
                }
            }
            position += 1
        }
        return nil
    }
}

extension JSON {
    /// A count, size, sequence or offset as the engine writes them in its records: an integer from 0 to 2^62 - 1;
    /// nil for anything else, which only a file damaged where its checksums cannot see, or written by someone else,
    /// holds. Read through this, no number from a file can overflow the engine's arithmetic or become a negative
    /// count.
    var storedNumber: Int? {
        guard let value = intValue, value >= 0, value <= Int64(Int.max >> 1) else { return nil }
        return Int(value)
    }
}
