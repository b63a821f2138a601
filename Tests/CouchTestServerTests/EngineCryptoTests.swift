import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

@Suite(.ownThreads) struct EngineCryptoTests {
    @Test func md5KnownVectors() {
        #expect(Crypto.hex(Crypto.md5(Data())) == "d41d8cd98f00b204e9800998ecf8427e")
        #expect(
            Crypto.hex(Crypto.md5(Data("The quick brown fox jumps over the lazy dog".utf8)))
                == "9e107d9d372bb6826bd81d3542a419d6")
    }

    /// The MD5 compression is written out step by step: RFC 1321's test suite, a million `a`, and the streaming
    /// form fed in random pieces against the one-shot form on random inputs.
    @Test func md5WrittenOutMatchesRFC1321() {
        let suite: [(String, String)] = [
            ("a", "0cc175b9c0f1b6a831c399e269772661"), ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            ("abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"),
            (
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                "d174ab98d277d9f5a5611c2c9f419d9f"
            ),
            (String(repeating: "1234567890", count: 8), "57edf4a22be3c955ac49da2e2107b67a"),
        ]
        for (text, digest) in suite { #expect(Crypto.hex(Crypto.md5(Data(text.utf8))) == digest, "\(text)") }
        #expect(Crypto.hex(Crypto.md5(Data(repeating: 0x61, count: 1_000_000))) == "7707d6ae4e027c70eea2a935c2296f21")
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20 {
            let data = Data((0..<Int.random(in: 0...5000, using: &generator)).map { _ in UInt8.random(in: 0...255) })
            var md5 = Crypto.MD5()
            var start = 0
            while start < data.count {
                let end = min(data.count, start + Int.random(in: 1...200, using: &generator))
                md5.update(data[start..<end])
                start = end
            }
            #expect(md5.finish() == Crypto.md5(data))
        }
    }

    /// base64url is written out: it must equal Foundation's base64 with `+/` swapped for `-_` and no padding.
    @Test func base64URLMatchesFoundation() {
        for length in 0..<70 {
            let data = Data((0..<length).map { _ in UInt8.random(in: 0...255) })
            let expected = data.base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            #expect(Crypto.base64URL(data) == expected)
            #expect(Crypto.fromBase64URL(Crypto.base64URL(data)) == data)
        }
    }

    @Test func sha256KnownVectors() {
        #expect(
            Crypto.hex(Crypto.sha256(Data("abc".utf8)))
                == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        let long = Data(repeating: 0x61, count: 1000)
        #expect(Crypto.hex(Crypto.sha256(long)) == "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3")
    }

    @Test func hmacAndPBKDF2KnownVectors() {
        // RFC 4231 test case 2.
        let mac = Crypto.hmacSHA256(key: Data("Jefe".utf8), message: Data("what do ya want for nothing?".utf8))
        #expect(Crypto.hex(mac) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        // PBKDF2-HMAC-SHA256 ("password", "salt", c=2), first 32 bytes.
        let dk = Crypto.pbkdf2SHA256(password: Data("password".utf8), salt: Data("salt".utf8), iterations: 2)
        #expect(Crypto.hex(dk) == "ae4d0c95af6b46d32d0adff928f06dd02a303f8ef3c251dfd6e2d85a95474c43")
        let dk4096 = Crypto.pbkdf2SHA256(password: Data("password".utf8), salt: Data("salt".utf8), iterations: 4096)
        #expect(Crypto.hex(dk4096) == "c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a")
    }

    @Test func crc32KnownVector() {
        #expect(Crypto.crc32(Data("123456789".utf8)) == 0xCBF4_3926)
    }
}
