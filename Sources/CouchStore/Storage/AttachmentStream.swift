import CouchGzip
import Foundation

/// Writes one attachment's bytes into a database's file as they arrive (a streamed upload), so that memory holds
/// at most one chunk whatever the attachment's size.
///
/// Each full chunk (``StoreFile/blobChunkSize`` bytes, the last one shorter) is written straight to the file
/// (``StoreFile/writeNow(_:_:)``) as a blob record, uncommitted, while the MD5 digest and the length are computed.
/// The chunks name a tag of the upload's own (the digest is not known before the last byte): the document record
/// that refers to them keeps that tag (``StoredBlob/tag``). Nothing is visible until that record is committed; an
/// upload that fails leaves its chunks as garbage (cut off again when nothing followed them, skipped by compaction),
/// and a crash before the commit leaves them in an uncommitted tail that opening cuts off.
///
/// Used by one request on one thread, without the database's lock.
final class AttachmentStreamWriter {
    let file: StoreFile
    /// What the chunk records name (see ``StoredBlob/tag``).
    let tag = "upload-" + UUID().uuidString
    /// The chunk being filled, built in place as its record's frame (``StoreFile/emptyFrame(_:capacity:)``, the
    /// tag, then the bytes), so that each byte is copied once on its way to the file.
    private var frame: [UInt8] = []
    /// Where the bytes begin in `frame`.
    private var bytesStart = 0
    private var chunks: [Int64] = []
    private var md5 = Crypto.MD5()
    private(set) var length = 0
    private var start: Int64?
    private var end: Int64 = 0

    init(file: StoreFile) {
        self.file = file
        let name = Array(tag.utf8.prefix(255))
        frame = StoreFile.emptyFrame(.blob, capacity: 1 + name.count + StoreFile.blobChunkSize)
        frame.append(UInt8(name.count))
        frame.append(contentsOf: name)
        bytesStart = frame.count
    }

    /// Adds the next bytes: every chunk they complete is written to the file.
    func write(_ data: Data) throws(StoreFileError) {
        guard !data.isEmpty else { return }
        md5.update(data)
        length += data.count
        var rest = data[...]
        while !rest.isEmpty {
            let room = bytesStart + StoreFile.blobChunkSize - frame.count
            frame.append(contentsOf: rest.prefix(room))
            rest = rest.dropFirst(room)
            if frame.count == bytesStart + StoreFile.blobChunkSize { try writeChunk() }
        }
    }

    /// Writes the last chunk; returns the attachment's chunks (an empty attachment has one empty chunk, as
    /// `Database.writeChunks` stores it).
    func finish() throws(StoreFileError) -> StoredBlob {
        if frame.count > bytesStart || chunks.isEmpty { try writeChunk() }
        frame = []
        return StoredBlob(file: file, chunks: chunks, length: length, tag: tag)
    }

    /// The digest of the bytes as received: `md5-<base64>`.
    var identityDigest: String { "md5-" + md5.finish().base64EncodedString() }

    /// Gives the chunks written up: cut off the file again when nothing was written after them.
    func abandon() {
        guard let start else { return }
        file.abandonWritten(from: start, to: end)
        self.start = nil
    }

    /// Writes the chunk in `frame` (a record the same as ``DocumentRecord/blobChunk(digest:bytes:)`` makes) and
    /// empties it for the next one.
    private func writeChunk() throws(StoreFileError) {
        let offset = try file.writeNow(frame: &frame)
        if start == nil { start = offset }
        end = offset + Int64(frame.count)
        chunks.append(offset)
        frame.removeSubrange(bytesStart...)
    }

    /// The digest CouchDB gives an attachment of a compressible type stored in `blob`: the MD5 of the gzip bytes
    /// it stores (``ZlibCompatibleGzip``), computed by reading the chunks back one at a time.
    static func gzipDigest(of blob: StoredBlob) throws(StoreFileError) -> String {
        if blob.length <= ZlibCompatibleGzip.compressionLimit {
            return "md5-" + Crypto.md5(ZlibCompatibleGzip.compress(try blob.read())).base64EncodedString()
        }
        var encoder = ZlibCompatibleGzip.StreamEncoder(inputLength: blob.length)
        var md5 = Crypto.MD5()
        md5.update(encoder.header)
        for index in blob.chunks.indices {
            md5.update(encoder.encode(try blob.chunk(index, digest: "")))
        }
        return "md5-" + md5.finish().base64EncodedString()
    }
}
