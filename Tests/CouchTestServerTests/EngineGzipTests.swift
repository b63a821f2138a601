import Foundation
import Testing

@testable import CouchTestServer

@Suite struct EngineGzipTests {
    @Test func matchesZlibForShortText() {
        let text = Data("Hello, CouchDB! Hello, CouchDB! Hello, CouchDB!\n".utf8)
        let gz = Gzip.compress(text)
        // Recorded from CouchDB 3.5.0 (Erlang zlib): the stored gzip bytes of this attachment.
        #expect(Crypto.hex(gz) == "1f8b0800000000000003f348cdc9c9d75170ce2f4dce70715254f0c0cfe70200155b492730000000")
    }
}
