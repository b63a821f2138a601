import CouchGzip
import CouchQuery
import Foundation
import HTTPWire
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// Records every chunk a streamed response writes.
private final class ChunkRecorder: ChunkWriter, @unchecked Sendable {
    // @unchecked Sendable: `chunks` is guarded by `lock`.
    private let lock = NSLock()
    private var chunks: [Data] = []

    var recorded: [Data] {
        lock.lock()
        defer { lock.unlock() }
        return chunks
    }

    @discardableResult
    func write(_ data: Data) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        chunks.append(data)
        return true
    }
}

/// A stored attachment is answered from the database's file chunk by chunk (`GET /db/doc/att`, ranges, gzip, `HEAD`),
/// with its `Content-Length`, and never read whole.
@Suite(.ownThreads) struct StoredAttachmentStreamTests {
    private static let chunkSize = StoreFile.blobChunkSize

    /// The chunks of a streamed body; an issue when the body is not streamed.
    private func chunks(of response: ServerResponse) -> [Data] {
        guard case .stream(let produce) = response.body else {
            Issue.record("the attachment was answered whole, not streamed from the file")
            if case .data(let data) = response.body { return [data] }
            return []
        }
        let recorder = ChunkRecorder()
        produce(recorder)
        return recorder.recorded
    }

    /// An engine whose database `db` holds `a/file` of `data` (`contentType`), read back from its file.
    private func engine(with data: Data, contentType: String) throws -> ServerEngine {
        let engine = try ServerEngine(options: testOptions())
        #expect(engine.send("PUT", "/db").status == 201)
        let put = engine.send("PUT", "/db/a/file", body: data, headers: [("Content-Type", contentType)])
        #expect(put.status == 201)
        return engine
    }

    @Test func aLargeAttachmentIsStreamedInChunksWithItsContentLength() throws {
        let data = randomPayload(3 * Self.chunkSize + 12_345)
        let engine = try engine(with: data, contentType: "application/octet-stream")
        defer { engine.close() }
        let response = engine.handle(engineRequest("GET", "/db/a/file"))
        #expect(response.status == 200)
        #expect(response.headers["Content-Length"] == String(data.count))
        #expect(response.headers["Accept-Ranges"] == "bytes")
        let pieces = chunks(of: response)
        #expect(pieces.count == 4)
        #expect(pieces.allSatisfy { $0.count <= Self.chunkSize })
        #expect(Data(pieces.joined()) == data)
    }

    @Test func aRangeAcrossChunksIsStreamedFromTheChunksItNeeds() throws {
        let data = randomPayload(3 * Self.chunkSize + 7)
        let engine = try engine(with: data, contentType: "application/octet-stream")
        defer { engine.close() }
        let (start, end) = (Self.chunkSize - 10, 2 * Self.chunkSize + 20)
        let response = engine.handle(engineRequest("GET", "/db/a/file", headers: [("Range", "bytes=\(start)-\(end)")]))
        #expect(response.status == 206)
        #expect(response.headers["Content-Range"] == "bytes \(start)-\(end)/\(data.count)")
        #expect(response.headers["Content-Length"] == String(end - start + 1))
        let pieces = chunks(of: response)
        #expect(pieces.map(\.count) == [10, Self.chunkSize, 21])
        #expect(Data(pieces.joined()) == data.subdata(in: start..<(end + 1)))
        // The last bytes only, and a range past the end.
        let tail = engine.handle(engineRequest("GET", "/db/a/file", headers: [("Range", "bytes=-5")]))
        #expect(tail.status == 206)
        #expect(Data(chunks(of: tail).joined()) == data.suffix(5))
        let outside = engine.handle(engineRequest("GET", "/db/a/file", headers: [("Range", "bytes=\(data.count)-")]))
        #expect(outside.status == 416)
    }

    @Test func aCompressibleAttachmentIsStreamedAsTheGzipCouchStoreWouldSend() throws {
        let text = Data((0..<(2 * Self.chunkSize + 999)).map { UInt8(0x61 + $0 % 26) })
        let engine = try engine(with: text, contentType: "text/plain")
        defer { engine.close() }
        let response = engine.handle(engineRequest("GET", "/db/a/file", headers: [("Accept-Encoding", "gzip")]))
        #expect(response.status == 200)
        #expect(response.headers["Content-Encoding"] == "gzip")
        let gzip = Data(chunks(of: response).joined())
        #expect(response.headers["Content-Length"] == String(gzip.count))
        #expect(gzip == ZlibCompatibleGzip.compress(text))
        #expect(try Gzip.decompress(gzip) == text)
        // Without Accept-Encoding: the bytes as they are, streamed.
        let plain = engine.handle(engineRequest("GET", "/db/a/file"))
        #expect(plain.headers["Content-Encoding"] == nil)
        #expect(Data(chunks(of: plain).joined()) == text)
    }

    @Test func headAnswersTheLengthWithoutABody() throws {
        let data = randomPayload(2 * Self.chunkSize + 1)
        let engine = try engine(with: data, contentType: "application/octet-stream")
        defer { engine.close() }
        let response = engine.handle(engineRequest("HEAD", "/db/a/file"))
        #expect(response.status == 200)
        #expect(response.headers["Content-Length"] == String(data.count))
        guard case .empty = response.body else {
            Issue.record("HEAD answered a body")
            return
        }
    }

    @Test func aDamagedLaterChunkEndsTheBodyShortOfItsLength() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let data = randomPayload(3 * Self.chunkSize)
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            engine.send("PUT", "/db")
            engine.send("PUT", "/db/a/file", body: data, headers: [("Content-Type", "application/octet-stream")])
            // A later group, so that the damaged one is not the last (whose chunks are checked on open).
            engine.send("PUT", "/db/later", json: [:])
            engine.close()
        }
        let url = DataDirectory(root: dir).fileURL(for: "db")
        var bytes = try Data(contentsOf: url)
        let second = data.subdata(in: Self.chunkSize..<(Self.chunkSize + 64))
        let at = try #require(bytes.range(of: second)).lowerBound + 1000
        bytes[at] ^= 0x55
        try bytes.write(to: url)
        let engine = try ServerEngine(options: testOptions(dir))
        defer { engine.close() }
        let response = engine.handle(engineRequest("GET", "/db/a/file"))
        #expect(response.status == 200)
        #expect(response.headers["Content-Length"] == String(data.count))
        let sent = Data(chunks(of: response).joined())
        #expect(sent == data.prefix(Self.chunkSize), "only the chunks before the damage are sent")
    }

    @Test func aDamagedFirstChunkIsAnErrorBeforeAnythingIsSent() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let data = randomPayload(2 * Self.chunkSize + 3)
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            engine.send("PUT", "/db")
            engine.send("PUT", "/db/a/file", body: data, headers: [("Content-Type", "application/octet-stream")])
            // A later group, so that the damaged one is not the last (whose chunks are checked on open).
            engine.send("PUT", "/db/later", json: [:])
            engine.close()
        }
        let url = DataDirectory(root: dir).fileURL(for: "db")
        var bytes = try Data(contentsOf: url)
        let at = try #require(bytes.range(of: data.prefix(64))).lowerBound + 100
        bytes[at] ^= 0x55
        try bytes.write(to: url)
        let engine = try ServerEngine(options: testOptions(dir))
        defer { engine.close() }
        let answer = engine.send("GET", "/db/a/file")
        #expect(answer.status == 500)
        #expect(answer.json["error"] == "file_error")
    }

    @Test func theStreamEncoderMatchesCompressForEveryPieceSize() throws {
        let input = Data((0..<(300_000)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        let expected = ZlibCompatibleGzip.compress(input)
        #expect(ZlibCompatibleGzip.StreamEncoder.encodedLength(ofInput: input.count) == expected.count)
        for pieceSize in [1_000, 65_535, 65_536, 100_000, 300_000] {
            var encoder = ZlibCompatibleGzip.StreamEncoder(inputLength: input.count)
            var out = encoder.header
            var offset = 0
            while offset < input.count {
                let end = min(offset + pieceSize, input.count)
                out.append(encoder.encode(input.subdata(in: offset..<end)))
                offset = end
            }
            #expect(out == expected, "pieces of \(pieceSize)")
        }
    }
}
