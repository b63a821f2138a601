import CouchGzip
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

@Suite(.ownThreads) struct EngineGzipTests {
    @Test func matchesZlibForShortText() {
        let text = Data("Hello, CouchDB! Hello, CouchDB! Hello, CouchDB!\n".utf8)
        let gz = ZlibCompatibleGzip.compress(text)
        // Recorded from CouchDB 3.5.0 (Erlang zlib): the stored gzip bytes of this attachment.
        #expect(Crypto.hex(gz) == "1f8b0800000000000003f348cdc9c9d75170ce2f4dce70715254f0c0cfe70200155b492730000000")
    }
}

@Suite(.ownThreads) struct EngineLargeAttachmentTests {
    @Test func largeTextAttachmentIsStoredQuickly() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let text = Data(String(repeating: "line of text for a big attachment\n", count: 30_000).utf8)
        let start = Date()
        let put = engine.send("PUT", "/db/doc/big.txt", body: text, headers: [("Content-Type", "text/plain")])
        #expect(put.status == 201)
        #expect(engine.send("GET", "/db/doc/big.txt").data == text)
        let gz = engine.send("GET", "/db/doc/big.txt", headers: [("Accept-Encoding", "gzip")])
        #expect(gz.headers["Content-Encoding"] == "gzip")
        #expect(gz.data.count > text.count)
        print("large text attachment round trip:", Date().timeIntervalSince(start))
        let bin = Data((0..<(8 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let t2 = Date()
        #expect(
            engine.send("PUT", "/db/doc2/b.bin", body: bin, headers: [("Content-Type", "application/octet-stream")])
                .status == 201)
        print("8 MiB binary attachment:", Date().timeIntervalSince(t2))
    }
}
