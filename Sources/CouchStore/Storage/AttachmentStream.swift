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
    private var buffer = Data()
    private var chunks: [Int64] = []
    private var md5 = Crypto.MD5()
    private(set) var length = 0
    private var start: Int64?
    private var end: Int64 = 0

    init(file: StoreFile) {
        self.file = file
    }

    /// Adds the next bytes: every chunk they complete is written to the file.
    func write(_ data: Data) throws(StoreFileError) {
        guard !data.isEmpty else { return }
        md5.update(data)
        length += data.count
        buffer.append(data)
        if buffer.count >= StoreFile.blobChunkSize {
            var offset = buffer.startIndex
            while buffer.endIndex - offset >= StoreFile.blobChunkSize {
                try writeChunk(buffer[offset..<(offset + StoreFile.blobChunkSize)])
                offset += StoreFile.blobChunkSize
            }
            buffer = Data(buffer[offset...])
        }
    }

    /// Writes the last chunk; returns the attachment's chunks (an empty attachment has one empty chunk, as
    /// `Database.writeChunks` stores it).
    func finish() throws(StoreFileError) -> StoredBlob {
        if !buffer.isEmpty || chunks.isEmpty {
            try writeChunk(buffer[...])
            buffer = Data()
        }
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

    private func writeChunk(_ bytes: Data) throws(StoreFileError) {
        let payload = DocumentRecord.blobChunk(digest: tag, bytes: bytes)
        let offset = try file.writeNow(.blob, payload)
        if start == nil { start = offset }
        end = offset + Int64(StoreFile.frameHeaderSize + 1 + payload.count)
        chunks.append(offset)
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
