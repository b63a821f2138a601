import Foundation
import Testing

@testable import CouchStore
@testable import CouchTestServer

@Suite struct EngineCryptoTests {
    @Test func md5KnownVectors() {
        #expect(Crypto.hex(Crypto.md5(Data())) == "d41d8cd98f00b204e9800998ecf8427e")
        #expect(
            Crypto.hex(Crypto.md5(Data("The quick brown fox jumps over the lazy dog".utf8)))
                == "9e107d9d372bb6826bd81d3542a419d6")
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
