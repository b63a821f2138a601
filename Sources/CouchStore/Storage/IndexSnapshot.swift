import CouchQuery
import Foundation

/// The in-memory index of a database as of one point of its file, kept beside it (`<file>.index`) so
/// that opening reads the index whole and replays only the records written after that point,
/// instead of every record of the file.
///
/// Layout (little-endian): the magic `SWCIDX01`; the committed end of the data file it covers
/// (`UInt64`); a JSON head (the data file's identity, sequences, counts, settings, `_local`
/// documents); the shard logs; the documents in sequence order (id, record offset, sequence,
/// flags); the attachments' chunk lists; a CRC-32 of everything before it. A snapshot that does not
/// check out (damaged, of another file, past the file's end) is ignored: the file is read whole.
struct IndexSnapshot {
    var coveredEnd: Int64
    var head: JSON
    var shardLogs: [[Int]]
    /// In sequence order.
    var documents: [(id: String, entry: DocTableEntry)]
    /// Each attachment's chunks by digest; a streamed upload's also name the tag its chunks carry (stored after the
    /// digest and a space: digests have none).
    var blobs: [(digest: String, chunks: [Int64], length: Int, tag: String?)]

    static let magic: [UInt8] = Array("SWCIDX01".utf8)

    static func url(for file: URL) -> URL { file.appendingPathExtension("index") }

    func encoded() -> [UInt8] {
        var out = Self.magic
        appendUInt64(&out, UInt64(coveredEnd))
        let headBytes = Array(head.serialized.utf8)
        appendUInt32(&out, UInt32(headBytes.count))
        out += headBytes
        appendUInt32(&out, UInt32(shardLogs.count))
        for log in shardLogs {
            appendUInt32(&out, UInt32(log.count))
            for seq in log { appendUInt64(&out, UInt64(clamping: seq)) }
        }
        appendUInt32(&out, UInt32(documents.count))
        for (id, entry) in documents {
            let idBytes = Array(id.utf8)
            appendUInt32(&out, UInt32(idBytes.count))
            out += idBytes
            appendUInt64(&out, UInt64(clamping: entry.offset))
            appendUInt64(&out, UInt64(clamping: entry.seq))
            out.append(entry.flags)
        }
        appendUInt32(&out, UInt32(blobs.count))
        for blob in blobs {
            let d = Array((blob.digest + (blob.tag.map { " " + $0 } ?? "")).utf8)
            appendUInt32(&out, UInt32(d.count))
            out += d
            appendUInt64(&out, UInt64(clamping: blob.length))
            appendUInt32(&out, UInt32(blob.chunks.count))
            for chunk in blob.chunks { appendUInt64(&out, UInt64(clamping: chunk)) }
        }
        appendUInt32(&out, StoreFile.crc32(out[...]))
        return out
    }

    /// Writes the snapshot beside `file` (a temporary file renamed over the old snapshot).
    func write(beside file: URL) {
        let target = Self.url(for: file)
        let tmp = target.appendingPathExtension("tmp")
        do {
            try Data(encoded()).write(to: tmp)
            // Not atomic, and need not be: without a snapshot (a crash in between), the file is read whole.
            try? FileManager.default.removeItem(at: target)
            try FileManager.default.moveItem(at: tmp, to: target)
        } catch {
            try? FileManager.default.removeItem(at: tmp)
        }
    }

    /// The snapshot beside `file`, or nil when there is none or it does not check out.
    static func read(beside file: URL) -> IndexSnapshot? {
        guard let data = try? Data(contentsOf: url(for: file)) else { return nil }
        var reader = ByteReader(bytes: [UInt8](data))
        return try? reader.snapshot()
    }

    /// Reads the binary layout; every count and length is checked against the bytes left.
    private struct ByteReader {
        let bytes: [UInt8]
        var at = 0

        struct Invalid: Error {}

        mutating func take(_ n: Int) throws -> ArraySlice<UInt8> {
            guard n >= 0, n <= bytes.count - at else { throw Invalid() }
            defer { at += n }
            return bytes[at..<(at + n)]
        }

        mutating func u32() throws -> Int { Int(StoreFile.readUInt32(try take(4), 0)) }

        mutating func u64() throws -> Int64 {
            let slice = try take(8)
            var value: UInt64 = 0
            for (k, byte) in slice.enumerated() { value |= UInt64(byte) << UInt64(8 * k) }
            guard value <= UInt64(Int64.max) else { throw Invalid() }
            return Int64(value)
        }

        /// A count of items each at least `size` bytes long, checked against the bytes left.
        mutating func count(_ size: Int) throws -> Int {
            let n = try u32()
            guard n <= (bytes.count - at) / max(size, 1) else { throw Invalid() }
            return n
        }

        mutating func string() throws -> String {
            let n = try u32()
            return String(decoding: try take(n), as: UTF8.self)
        }

        mutating func snapshot() throws -> IndexSnapshot {
            guard bytes.count >= 12, Array(try take(8)) == IndexSnapshot.magic else { throw Invalid() }
            let crc = StoreFile.readUInt32(bytes[(bytes.count - 4)...], 0)
            guard StoreFile.crc32(bytes[..<(bytes.count - 4)]) == crc else { throw Invalid() }
            let coveredEnd = try u64()
            let head = try JSON.parse(try take(try u32()))
            var shards: [[Int]] = []
            for _ in 0..<(try count(4)) {
                var log: [Int] = []
                let n = try count(8)
                log.reserveCapacity(n)
                for _ in 0..<n { log.append(Int(try u64())) }
                shards.append(log)
            }
            var documents: [(id: String, entry: DocTableEntry)] = []
            let documentCount = try count(21)
            documents.reserveCapacity(documentCount)
            for _ in 0..<documentCount {
                let id = try string()
                let offset = try u64()
                let seq = try u64()
                let flags = try take(1).first ?? 0
                documents.append((id, DocTableEntry(offset: offset, seq: Int(seq), flags: flags)))
            }
            var blobs: [(digest: String, chunks: [Int64], length: Int, tag: String?)] = []
            for _ in 0..<(try count(16)) {
                let named = try string()
                let parts = named.split(separator: " ", maxSplits: 1)
                let digest = parts.first.map(String.init) ?? named
                let tag = parts.count > 1 ? String(parts[1]) : nil
                let length = try u64()
                var chunks: [Int64] = []
                for _ in 0..<(try count(8)) { chunks.append(try u64()) }
                blobs.append((digest, chunks, Int(length), tag))
            }
            guard at == bytes.count - 4 else { throw Invalid() }
            return IndexSnapshot(
                coveredEnd: coveredEnd, head: head, shardLogs: shards, documents: documents, blobs: blobs)
        }
    }
}
