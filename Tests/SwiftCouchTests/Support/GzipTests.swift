import Foundation
import SwiftCouchTestSupport
import Testing

@testable import CouchGzip

/// Reference streams made by Python's gzip and zlib modules (zlib 1.2/1.3), embedded as base64.
enum GzipVectors {
    /// The text all the level vectors compress: 200 small JSON objects joined by commas.
    static let plain = Data(
        (0..<200).map { "{\"id\":\"doc\($0)\",\"n\":\($0 * 37 % 101)}" }.joined(separator: ",").utf8)

    /// `gzip.compress(plain, level, mtime=0)` for levels 1, 6 and 9.
    static let gzipLevels: [(level: Int, base64: String)] = [
        (
            1,
            "H4sIAAAAAAAEA13WMW7cQBAF0btsrGCbQw45uo6dOLEPIOjuNsAug/VTAvvADxXE/nr9+vn6fP388+P9+nj9fn2+vz++/j+r+9k4"
                + "nw+3++G5Px+O+2Hp5/v9cNfPj/vhpZ/P++Gmn5/3w0M/v+6HSz9f98Ohn1cvmvp9sen59tWbdgM96jTQq2pI6FmHhd51Wehhm4Ve"
                + "Ni30tCVh62lDwtbTTglbb5vP19162m6gp10GelpZ6GmHhZ62LPS0zUJPmxJGT6u3iMGfTcSgRRM9bj0XD2I0QI0GeltZoEcLBGmh"
                + "t20SdoqUsPe07fm6ey8bBijSAEVa6Gm7BYq0QJEWetphgSIlHBQp4ehpU8LR247n4IMiDfS00wBFWqBICz3tskCRFihSwuxpS8Ik"
                + "SAmTIC30tus5eBKkAYI0QJAWCNICQVogSAknQUo4e1o9X/ckSAMEaYAgLRCkBYK0QJAWCNICQUq4CFLCRZASrt6mb8pFkAYI0gBB"
                + "WiBICwRpgSAtEKSERZASFkFKWARpgT/b8y+8CNIAQRogSH2WFkFaIEgLBCnh33/9+1M+RdS7x+mbUG+aDIN1YVBlIGQZCF0GQpiB"
                + "UGYgpGmEyyTuFU6TPFhY+fxjVZGnX6To0y9SBKqvVBWFBkKigdBoIERqhBvFl0txpPh0Ka4U3y7FnaJvTW2U6hfZSDVehFYDIdZA"
                + "qDUQcjXCteIbprhW4ogp7pURCsH6VThZ9N2pQa9h0GsYvdKnTA16DYRejXC3+JopDpdphNNF35/ae6MPmtrpNQx6DaRH+qapnV4D"
                + "oddAeqTPmuKCWUY4YYYRbhhfNsUVo09RHfQaRo/0cVMHvQZCr4H0SN83ddCrEW6ZaYRjxidOcc2MQMg1kF6pr1JNcg2DXMMg10DI"
                + "NRByNcJVsxnhrJlGOGz0daqTXMMg1zDINRByDYRcAyHXQMjVCPfNMsKBM4xw4cxAeqU/Txe5hkGuYZBrIOQaCLkGQq5GuHSmEU6d"
                + "ZYRbZwRCroHwp9RndZFrGOQaBrn6Q7nINRByre+/isZfOHcRAAA="
        ),
        (
            6,
            "H4sIAAAAAAAAA22XO07lUBAF9+KY4LXv9Y/tQDLJzAIQe5/AXYg6ctqSS+/IJVx8LX8+l/fl89/Ha3lb/i7vr++3r59b3bdx/D6u"
                + "9/GYv4/jPpYen/dx6vHtPp56fL+Pqx4/7uOmx8/7eOnxq3+nf3wv2vV8sUnH3jQN6FGHAb2qTOhZmwm96zShh60m9LLdhJ52+RX0"
                + "tCHC2tMOEdbetuvY06YBPe00oKeVCT1tM6GnXSb0tNWEnraLMF6YJMTgtQkxcNGIHnfpiIwGYKMBva1MwEcTENKE3raKMDFShNnT"
                + "Vh172TAAIw3ASBN62jQBI03ASBN62mYCRoqwYaQIW0/bRdh626YjRhrQ0w4DMNIEjDShp50mYKQJGCnC3tMuEXaEFGFHSBN626kj"
                + "QhqAkAYgpAkIaQJCmoCQIhwIKcLR00pHhDQAIQ1ASBMQ0gSENAEhTUBIExBShBMhRTgRUoSTP/86IqQBCGkAQpqAkCYgpAkIaQJC"
                + "inAhpAgXQvrLiJAm8Np0REgDENIAhDQBIU1ASBMQ0p/GF0ZOn+upTl44GQzWBQMrA4KWAcHLgCBmQDAzIKhpCGUSvUKaZLCw0lf0"
                + "DAZ+BgNBA4KhAUHRgOBoQJDUEBrF5VJEyogAw9OAjId4KTplBgNVg4GrAUHWgGBrQNDVEGrFDVPUSkRM0SsjKAgblPnQMUWyzGDg"
                + "azCOp5QpqmULCL4aQre4Zopwcc4U6bL6Op6CpmiXIxj4GpD9qWmKfDkDgq8BuZ6ypigYd02RMA6bomH2gIyHtCkqZgZje4qbomMq"
                + "IPgakPOpb4qUceAULePCKWLGiVPUzAgIugaE/x58RddgoGsw0DUg6BoQdDWEqnHrFFnj2CnCpnxF12CgazDQNSDoGhB0DQi6BgRd"
                + "DaFvXD1F4Dh7isLZA8JHxFd0DQa6BgNdA4KuAUHXgKCrIZSO+6dIHQdQ0TojIOgaEF6lr+gaDHQNBroGBF0Dgq71/R+Kxl84dxEA"
                + "AA=="
        ),
        (
            9,
            "H4sIAAAAAAACA22WO24bURAE78JYwfa+v65jJU7sAwi+uwTstKEaTDrAK7DBAlmfr98fr/fXx99f1+vt9ef1fv17+/x/03Nr6+fx"
                + "fo6r/zy25yg878+x4/l4jhvP53O88Xw9x4Hn+zkePD/xOfnhY9HEe3kTjrGpExCjFgGxSiTErEFC7NokxLCbhFg2SYhph19BTGsg"
                + "3DFtgXDHtoljTOsExLRNQEwTCTFtkBDTDgkx7SYhpk0Q2mWTgGj+2oBodpGIGHdwtIwE2EYCYptIsI8kWEgSYtsNQreRIPSYduMY"
                + "yxoBNpIAG0lCTOsk2EgSbCQJMW2QYCNBGDYShBHTJggjtg0cbSQBMW0RYCNJsJEkxLRNgo0kwUaCMGPaAWFaSBCmhSQhtm0cLSQB"
                + "FpIAC0mChSTBQpJgIUFYFhKEFdOEo4UkwEISYCFJsJAkWEgSLCQJFpIECwnCtpAgbAsJwvbPP44WkgALSYCFJMFCkmAhSbCQJFhI"
                + "EI6FBOFYSP4zWkgS/LXhaCEJsJAEWEgSLCQJFpIEC8m/xstGdp5V1cl1V32iq1WFoqtXjaJrVJWia1adomtVpaJrV62i61S1IpdJ"
                + "6hWnSQ6WuyoWx0lKFtdJahbnSYoW90mqFgdKyhYXSuoWJ0oKFzcKy0WOlJYC7K7aRe6UyWuv6kUOlZ0Ys+oXOVVGguyqYORYYcLI"
                + "tcKGkWslRYzcKy1RWpUxcrIcXkcVMnKz7MRYVcrI1TIS5FQxI3cLa0YOF+aMnC43r60KGrldVmKMKmnkeukJsqqokfvlTpBTZY1c"
                + "MOwaOWEYNnLDzARpRdrIFdMTY1RxI3eMEmRVeSOXzE6QUwWO3DIsHDlmmDhyzbQEaVXkyEGzeR1V5shFsxNjVaEjN81IkFOljlw1"
                + "bB05axg7ctiI11bljlw2KzFGFTxy2/QEWVXyyHVzJ8ipokfuG1aPHDjMHrlwZoK0InzkxumJMar0kStHCbKq+JE7ZyfIqfJHLh32"
                + "j5w6DCC5dVqCtCqB5Nzh35NzpyfGrCpIDh4lyK46SE6e7xD6AorGXzh3EQAA"
        ),
    ]
    /// `zlib.compress(plain, 6)`.
    static let zlib6 =
        "eJxtlztO5VAQBffimOC17/WP7UAyycwCEHufwF2IOnLakkvvyCVcfC1/Ppf35fPfx2t5W/4u76/vt6+fW923cfw+rvfxmL+P4z6W"
        + "Hp/3cerx7T6eeny/j6seP+7jpsfP+3jp8at/p398L9r1fLFJx940DehRhwG9qkzoWZsJves0oYetJvSy3YSedvkV9LQhwtrTDhHW"
        + "3rbr2NOmAT3tNKCnlQk9bTOhp10m9LTVhJ62izBemCTE4LUJMXDRiB536YiMBmCjAb2tTMBHExDShN62ijAxUoTZ01Yde9kwACMN"
        + "wEgTeto0ASNNwEgTetpmAkaKsGGkCFtP20XYetumI0Ya0NMOAzDSBIw0oaedJmCkCRgpwt7TLhF2hBRhR0gTetupI0IagJAGIKQJ"
        + "CGkCQpqAkCIcCCnC0dNKR4Q0ACENQEgTENIEhDQBIU1ASBMQUoQTIUU4EVKEkz//OiKkAQhpAEKagJAmIKQJCGkCQopwIaQIF0L6"
        + "y4iQJvDadERIAxDSAIQ0ASFNQEgTENKfxhdGTp/rqU5eOBkM1gUDKwOClgHBy4AgZkAwMyCoaQhlEr1CmmSwsNJX9AwGfgYDQQOC"
        + "oQFB0YDgaECQ1BAaxeVSRMqIAMPTgIyHeCk6ZQYDVYOBqwFB1oBga0DQ1RBqxQ1T1EpETNErIygIG5T50DFFssxg4GswjqeUKapl"
        + "Cwi+GkK3uGaKcHHOFOmy+jqegqZolyMY+BqQ/alpinw5A4KvAbmesqYoGHdNkTAOm6Jh9oCMh7QpKmYGY3uKm6JjKiD4GpDzqW+K"
        + "lHHgFC3jwilixolT1MwICLoGhP8efEXXYKBrMNA1IOgaEHQ1hKpx6xRZ49gpwqZ8RddgoGsw0DUg6BoQdA0IugYEXQ2hb1w9ReA4"
        + "e4rC2QPCR8RXdA0GugYDXQOCrgFB14CgqyGUjvunSB0HUNE6IyDoGhBepa/oGgx0DQa6BgRdA4Ku9f0foZqavA=="
    /// `zlib.compress(plain[:300], 0)`: stored blocks.
    static let zlib0 =
        "eAEBLAHT/nsiaWQiOiJkb2MwIiwibiI6MH0seyJpZCI6ImRvYzEiLCJuIjozN30seyJpZCI6ImRvYzIiLCJuIjo3NH0seyJpZCI6"
        + "ImRvYzMiLCJuIjoxMH0seyJpZCI6ImRvYzQiLCJuIjo0N30seyJpZCI6ImRvYzUiLCJuIjo4NH0seyJpZCI6ImRvYzYiLCJuIjoy"
        + "MH0seyJpZCI6ImRvYzciLCJuIjo1N30seyJpZCI6ImRvYzgiLCJuIjo5NH0seyJpZCI6ImRvYzkiLCJuIjozMH0seyJpZCI6ImRv"
        + "YzEwIiwibiI6Njd9LHsiaWQiOiJkb2MxMSIsIm4iOjN9LHsiaWQiOiJkb2MxMiIsIm4iOjQwfSx7ImlkIjoiZG9jMTMiLCJuIjo3"
        + "N30seyJpZFffUF0="
    /// Raw DEFLATE, level 9, `wbits=-15`.
    static let raw9 =
        "bZY7bhtREATvwljB9r6/rmMlTuwDCL67BOy0oRpMOsArsMECWZ+v3x+v99fH31/X6+315/V+/Xv7/H/Tc2vr5/F+jqv/PLbnKDzv"
        + "z7Hj+XiOG8/nc7zxfD3Hgef7OR48P/E5+eFj0cR7eROOsakTEKMWAbFKJMSsQULs2iTEsJuEWDZJiGmHX0FMayDcMW2BcMe2iWNM"
        + "6wTEtE1ATBMJMW2QENMOCTHtJiGmTRDaZZOAaP7agGh2kYgYd3C0jATYRgJim0iwjyRYSBJi2w1Ct5Eg9Jh24xjLGgE2kgAbSUJM"
        + "6yTYSBJsJAkxbZBgI0EYNhKEEdMmCCO2DRxtJAExbRFgI0mwkSTEtE2CjSTBRoIwY9oBYVpIEKaFJCG2bRwtJAEWkgALSYKFJMFC"
        + "kmAhQVgWEoQV04SjhSTAQhJgIUmwkCRYSBIsJAkWkgQLCcK2kCBsCwnC9s8/jhaSAAtJgIUkwUKSYCFJsJAkWEgQjoUE4VhI/jNa"
        + "SBL8teFoIQmwkARYSBIsJAkWkgQLyb/Gy0Z2nlXVyXVXfaKrVYWiq1eNomtUlaJrVp2ia1WlomtXraLrVLUil0nqFadJDpa7KhbH"
        + "SUoW10lqFudJihb3SaoWB0rKFhdK6hYnSgoXNwrLRY6UlgLsrtpF7pTJa6/qRQ6VnRiz6hc5VUaC7Kpg5Fhhwsi1woaRayVFjNwr"
        + "LVFalTFyshxeRxUycrPsxFhVysjVMhLkVDEjdwtrRg4X5oycLjevrQoauV1WYowqaeR66QmyqqiR++VOkFNljVww7Bo5YRg2csPM"
        + "BGlF2sgV0xNjVHEjd4wSZFV5I5fMTpBTBY7cMiwcOWaYOHLNtARpVeTIQbN5HVXmyEWzE2NVoSM3zUiQU6WOXDVsHTlrGDty2IjX"
        + "VuWOXDYrMUYVPHLb9ARZVfLIdXMnyKmiR+4bVo8cOMweuXBmgrQifOTG6YkxqvSRK0cJsqr4kTtnJ8ip8kcuHfaPnDoMILl1WoK0"
        + "KoHk3OHfk3OnJ8asKkgOHiXIrjpITp7vEPoC"
    /// `gzip.GzipFile(filename="hello.txt", mtime=1700000000)` of "hello, hello, hello world\n": FNAME, fixed block.
    static let withName = "H4sICADxU2UC/2hlbGxvLnR4dADLSM3JyddRyECiFMrzi3JSuACHXUYrGgAAAA=="
    /// "header fields" with FEXTRA, FCOMMENT and FHCRC in the header (crafted with zlib.crc32).
    static let withFields = "H4sIFgAAAAAAAwQAYWIBAGEgY29tbWVudAABsctITUxJLVJIy0zNSSkGAOqQOFoNAAAA"
}

@Suite(.cpuBound) struct GzipTests {
    static func data(_ base64: String) -> Data { Data(base64Encoded: base64)! }

    /// Seeded pseudo-random bytes.
    static func randomBytes(_ count: Int, seed: UInt64) -> Data {
        var generator = SeededGenerator(seed: seed)
        var bytes = [UInt8](repeating: 0, count: count)
        var i = 0
        while i < count {
            var word = generator.next()
            for _ in 0..<8 where i < count {
                bytes[i] = UInt8(truncatingIfNeeded: word)
                word >>= 8
                i += 1
            }
        }
        return Data(bytes)
    }

    /// JSON-like text resembling a `_bulk_docs` body, about `count` bytes.
    static func jsonLike(_ count: Int) -> Data {
        var generator = SeededGenerator(seed: 99)
        var text = "{\"docs\":["
        var i = 0
        let words = ["alpha", "beta", "gamma", "delta", "épsilon", "zeta", "eta", "theta"]
        while text.utf8.count < count {
            let word = words[Int(generator.next() % 8)]
            let number = generator.next() % 100_000
            text +=
                "{\"_id\":\"doc-\(i)\",\"type\":\"\(word)\",\"n\":\(number),\"tags\":[\"\(word)\",\"x\(number % 97)\"]},"
            i += 1
        }
        return Data((text + "{}]}").utf8)
    }

    /// Feeds `data` to a streaming inflater in chunks of the given sizes (cycled).
    static func inflate(_ data: Data, format: Gzip.Format = .gzip, chunkSizes: [Int]) throws -> Data {
        var inflater = GzipInflater(format: format)
        var output = Data()
        var start = data.startIndex
        var k = 0
        while start < data.endIndex {
            let end = min(start + chunkSizes[k % chunkSizes.count], data.endIndex)
            output += try inflater.feed(data[start..<end])
            start = end
            k += 1
        }
        try inflater.finish()
        #expect(inflater.isComplete)
        return output
    }

    @Test func checksums() {
        #expect(CRC32.update(0, Array("123456789".utf8)) == 0xCBF4_3926)
        #expect(CRC32.update(CRC32.update(0, Array("1234".utf8)), Array("56789".utf8)) == 0xCBF4_3926)
        #expect(CRC32.update(0, [UInt8](repeating: 0x61, count: 1000)) == 0x9A38_DA03)
        let wikipedia = Array("Wikipedia".utf8)
        #expect(wikipedia.withUnsafeBufferPointer { Adler32.update(1, $0) } == 0x11E6_0398)
    }

    /// From 12 KiB on, CRC-32 runs three chains side by side and combines them: checked against zlib's values (Python's
    /// `zlib.crc32`) and against a byte-at-a-time reference on lengths around the threshold and the part boundaries,
    /// from any starting checksum and any alignment.
    @Test func checksumsOfLargeInputsMatchTheReference() {
        #expect(CRC32.update(0, [UInt8](repeating: 0x61, count: 1 << 20)) == 0xD7CD_5672)
        let pattern = (0..<100_003).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        #expect(CRC32.update(0, pattern) == 0x1734_0963)
        func reference(_ crc: UInt32, _ bytes: ArraySlice<UInt8>) -> UInt32 {
            var c = ~crc
            for byte in bytes {
                c ^= UInt32(byte)
                for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
            }
            return ~c
        }
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<70_000).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let lengths =
            [0, 1, 7, 8, 12_287, 12_288, 12_289, 12_295, 12_296, 40_000, 65_537]
            + (0..<20).map { _ in
                Int.random(in: 12_000...69_000, using: &generator)
            }
        for length in lengths {
            let start = Int.random(in: 0...(bytes.count - length), using: &generator)
            let seed = UInt32.random(in: 0...UInt32.max, using: &generator)
            let slice = bytes[start..<(start + length)]
            let fast = slice.withUnsafeBufferPointer { CRC32.update(seed, $0) }
            #expect(fast == reference(seed, slice), "length \(length) from \(start)")
        }
        // Combining: the checksum of A then B from theirs.
        let a = bytes[0..<1000]
        let b = bytes[1000..<31_000]
        #expect(CRC32.combine(reference(0, a), reference(0, b), length: b.count) == reference(0, bytes[0..<31_000]))
        #expect(CRC32.combine(0x1234_5678, 0, length: 0) == 0x1234_5678)
    }

    /// Folding with carry-less multiplication on 16-byte and on 64-byte registers (where the processor has them) and
    /// the tables agree on every length from 0 to 700 (the foldings' 64- and 256-byte minimums and 16-byte steps, the
    /// tail the tables finish), on any alignment and starting checksum, and on 1 MiB chunks; all match zlib's value.
    /// A level the processor lacks is not run (its lengths then go through the tables).
    @Test func foldingAndTablesAgree() {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<(1 << 20) + 64).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let levels = CRC32.foldLevel > 0 ? Array(1...CRC32.foldLevel) : []
        for length in Array(0...700) + [4095, 4096, 12_288, 65_537, 1 << 20] {
            let start = Int.random(in: 0...63, using: &generator)
            let seed = UInt32.random(in: 0...UInt32.max, using: &generator)
            let slice = bytes[start..<(start + length)]
            let tabled = slice.withUnsafeBufferPointer { CRC32.updateByTables(seed, $0) }
            for level in levels {
                let folded = slice.withUnsafeBufferPointer { CRC32.update(seed, $0, foldLevel: level) }
                #expect(folded == tabled, "level \(level), length \(length) from \(start)")
            }
            #expect(slice.withUnsafeBufferPointer { CRC32.update(seed, $0) } == tabled)
        }
        let a = [UInt8](repeating: 0x61, count: 1 << 20)
        #expect(a.withUnsafeBufferPointer { CRC32.updateByTables(0, $0) } == 0xD7CD_5672)
        for level in [0] + levels {
            #expect(a.withUnsafeBufferPointer { CRC32.update(0, $0, foldLevel: level) } == 0xD7CD_5672)
        }
        #if arch(x86_64)
            // Every x86-64 processor made since 2010 has PCLMULQDQ and SSE4.1: folding is what runs there.
            #expect(CRC32.foldLevel >= 1)
        #endif
    }

    @Test func pythonVectorsDecompressExactly() throws {
        #expect(GzipVectors.plain.count == 4471)
        for vector in GzipVectors.gzipLevels {
            let compressed = Self.data(vector.base64)
            #expect(try Gzip.decompress(compressed) == GzipVectors.plain, "level \(vector.level)")
            #expect(try Self.inflate(compressed, chunkSizes: [1]) == GzipVectors.plain, "level \(vector.level)")
            #expect(try Self.inflate(compressed, chunkSizes: [7, 1, 300, 2]) == GzipVectors.plain)
        }
        let zlib6 = Self.data(GzipVectors.zlib6)
        #expect(try Gzip.decompress(zlib6, format: .zlib) == GzipVectors.plain)
        #expect(try Gzip.decompress(zlib6, format: .deflate) == GzipVectors.plain)
        #expect(try Self.inflate(zlib6, format: .zlib, chunkSizes: [1]) == GzipVectors.plain)
        let zlib0 = Self.data(GzipVectors.zlib0)
        #expect(try Gzip.decompress(zlib0, format: .zlib) == GzipVectors.plain.prefix(300))
        #expect(try Self.inflate(zlib0, format: .zlib, chunkSizes: [1]) == GzipVectors.plain.prefix(300))
        let raw9 = Self.data(GzipVectors.raw9)
        #expect(try Gzip.decompress(raw9, format: .rawDeflate) == GzipVectors.plain)
        #expect(try Gzip.decompress(raw9, format: .deflate) == GzipVectors.plain)
        #expect(try Self.inflate(raw9, format: .deflate, chunkSizes: [1]) == GzipVectors.plain)
        let hello = Data("hello, hello, hello world\n".utf8)
        #expect(try Gzip.decompress(Self.data(GzipVectors.withName)) == hello)
        #expect(try Self.inflate(Self.data(GzipVectors.withName), chunkSizes: [1]) == hello)
        #expect(try Gzip.decompress(Self.data(GzipVectors.withFields)) == Data("header fields".utf8))
        #expect(try Self.inflate(Self.data(GzipVectors.withFields), chunkSizes: [1]) == Data("header fields".utf8))
    }

    @Test func concatenatedMembersAndZeroPadding() throws {
        let joined =
            Gzip.compress(Data("hello ".utf8)) + Gzip.compress(Data("world".utf8), level: .best)
            + Data([0, 0, 0])
        #expect(try Gzip.decompress(joined) == Data("hello world".utf8))
        #expect(try Self.inflate(joined, chunkSizes: [1]) == Data("hello world".utf8))
    }

    @Test func roundTrips() throws {
        let inputs: [Data] = [
            Data(), Data([0x41]), Data("hello".utf8), GzipVectors.plain, Data(repeating: 0, count: 100_000),
            Self.randomBytes(70_000, seed: 5), Data((0..<70_000).map { UInt8($0 % 251) }),
        ]
        for input in inputs {
            for level in [0, 1, 2, 4, 6, 9] {
                for format in [Gzip.Format.gzip, .zlib, .rawDeflate] {
                    let compressed = Gzip.compress(input, level: .init(level), format: format)
                    #expect(
                        try Gzip.decompress(compressed, format: format) == input,
                        "\(input.count) bytes, level \(level), \(format)")
                }
            }
        }
        #expect(Gzip.compress(Data()).count == 20)
    }

    @Test func oneMebibyteOfRandomBytes() throws {
        let input = Self.randomBytes(1 << 20, seed: 11)
        let compressed = Gzip.compress(input)
        // Incompressible data goes out as stored blocks: barely larger than the input.
        #expect(compressed.count < input.count + input.count / 1000 + 64)
        #expect(try Gzip.decompress(compressed) == input)
        #expect(try Self.inflate(compressed, chunkSizes: [4096, 1, 65_536]) == input)
    }

    @Test func fiveMebibytesOfJSON() throws {
        let input = Self.jsonLike(5 << 20)
        for level in [Gzip.CompressionLevel.fastest, .default] {
            let compressed = Gzip.compress(input, level: level)
            #expect(compressed.count * 4 < input.count, "\(compressed.count) of \(input.count) at \(level.value)")
            #expect(try Gzip.decompress(compressed) == input)
        }
    }

    @Test func streamingOneByteAtATimeEqualsOneShot() throws {
        let input = Self.jsonLike(200_000) + Self.randomBytes(20_000, seed: 2) + Self.jsonLike(100_000)
        for level in [Gzip.CompressionLevel.none, .fastest, .default, .best] {
            let compressed = Gzip.compress(input, level: level)
            let oneShot = try Gzip.decompress(compressed)
            #expect(oneShot == input)
            #expect(try Self.inflate(compressed, chunkSizes: [1]) == oneShot, "level \(level.value)")
        }
        var generator = SeededGenerator(seed: 8)
        let compressed = Gzip.compress(input, format: .zlib)
        for _ in 0..<5 {
            let sizes = (0..<10).map { _ in Int.random(in: 1...5000, using: &generator) }
            #expect(try Self.inflate(compressed, format: .zlib, chunkSizes: sizes) == input)
        }
    }

    @Test func streamingMemoryStaysBounded() throws {
        let input = Self.jsonLike(3 << 20)
        let compressed = Gzip.compress(input)
        var inflater = GzipInflater()
        var total = 0
        var maximum = 0
        var start = compressed.startIndex
        while start < compressed.endIndex {
            let end = min(start + 4096, compressed.endIndex)
            total += try inflater.feed(compressed[start..<end]).count
            maximum = max(maximum, inflater.bufferedByteCount)
            start = end
        }
        try inflater.finish()
        #expect(total == input.count)
        #expect(maximum <= 256 * 1024, "held up to \(maximum) bytes")
    }

    @Test func truncatedStreamsAreRejected() throws {
        let compressed = Self.data(GzipVectors.gzipLevels[1].base64)
        for length in 0..<compressed.count {
            #expect(throws: GzipError.truncated) { _ = try Gzip.decompress(compressed.prefix(length)) }
        }
        let zlib = Self.data(GzipVectors.zlib6)
        for length in 0..<zlib.count {
            #expect(throws: GzipError.truncated) { _ = try Gzip.decompress(zlib.prefix(length), format: .zlib) }
        }
    }

    @Test func everyFlippedByteIsDetected() throws {
        let compressed = Array(Self.data(GzipVectors.gzipLevels[1].base64))
        // Not checked by design: mtime, XFL and OS (bytes 4...9), the FTEXT hint, and the last data byte,
        // whose high bits are padding after the end-of-block code.
        let lastDataByte = compressed.count - 9
        for position in compressed.indices where !(4...9).contains(position) && position != lastDataByte {
            for flip: UInt8 in [0x01, 0x80, 0xFF] where !(position == 3 && flip == 0x01) {
                var corrupt = compressed
                corrupt[position] ^= flip
                #expect(throws: GzipError.self, "byte \(position) ^ \(flip)") {
                    _ = try Gzip.decompress(Data(corrupt))
                }
            }
        }
    }

    @Test func specificErrors() throws {
        let good = Self.data(GzipVectors.gzipLevels[0].base64)
        var badMagic = good
        badMagic[badMagic.startIndex] = 0x1E
        #expect(throws: GzipError.invalidHeader("not a gzip stream (bad magic bytes)")) {
            _ = try Gzip.decompress(badMagic)
        }
        var badMethod = good
        badMethod[badMethod.startIndex + 2] = 7
        #expect(throws: GzipError.invalidHeader("gzip compression method is not DEFLATE")) {
            _ = try Gzip.decompress(badMethod)
        }
        var badCRC = good
        badCRC[badCRC.endIndex - 8] ^= 1
        let crcError = #expect(throws: GzipError.self) { _ = try Gzip.decompress(badCRC) }
        guard case .checksumMismatch = crcError else {
            Issue.record("expected a checksum mismatch, got \(String(describing: crcError))")
            return
        }
        var badLength = good
        badLength[badLength.endIndex - 1] ^= 1
        let lengthError = #expect(throws: GzipError.self) { _ = try Gzip.decompress(badLength) }
        guard case .lengthMismatch = lengthError else {
            Issue.record("expected a length mismatch, got \(String(describing: lengthError))")
            return
        }
        #expect(throws: GzipError.trailingData) { _ = try Gzip.decompress(good + Data([0x42])) }
        #expect(throws: GzipError.invalidHeader("zlib header check failed")) {
            _ = try Gzip.decompress(Data([0x78, 0x9D, 3, 0]), format: .zlib)
        }
        // A block of type 3, and a stored block whose length and complement disagree.
        #expect(throws: GzipError.invalidData("invalid block type 3")) {
            _ = try Gzip.decompress(Data([0x07]), format: .rawDeflate)
        }
        #expect(throws: GzipError.invalidData("stored block length does not match its complement")) {
            _ = try Gzip.decompress(Data([0x01, 0x05, 0x00, 0xFA, 0xFE]), format: .rawDeflate)
        }
        // A fixed-Huffman match reaching back before the start of the output: length 3, distance 1.
        #expect(throws: GzipError.invalidData("distance reaches before the start of the output")) {
            _ = try Gzip.decompress(Data([0x03, 0x02, 0x00]), format: .rawDeflate)
        }
        #expect(GzipError.truncated.description.contains("truncated"))
        #expect(GzipError.checksumMismatch(expected: 1, actual: 2).description.contains("0x00000001"))
    }

    @Test func gzipBombsStopAtTheLimit() throws {
        let bomb = Gzip.compress(Data(repeating: 0, count: 20 << 20), level: .best)
        #expect(bomb.count < 40_000)
        #expect(throws: GzipError.outputTooLarge(limit: 1 << 20)) {
            _ = try Gzip.decompress(bomb, maximumSize: 1 << 20)
        }
        var inflater = GzipInflater(maximumSize: 100_000)
        #expect(throws: GzipError.outputTooLarge(limit: 100_000)) { _ = try inflater.feed(bomb) }
        #expect(inflater.bufferedByteCount < 1 << 20)
        // Stored blocks count too.
        let stored = Gzip.compress(Data(repeating: 1, count: 200_000), level: .none)
        #expect(throws: GzipError.outputTooLarge(limit: 199_999)) {
            _ = try Gzip.decompress(stored, maximumSize: 199_999)
        }
        #expect(try Gzip.decompress(stored, maximumSize: 200_000).count == 200_000)
    }

    @Test func randomGarbageNeverCrashesOrHangs() {
        var generator = SeededGenerator(seed: 1234)
        let header: [UInt8] = [0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 255]
        var rejected = 0
        for trial in 0..<3000 {
            let count = Int(generator.next() % 200) + 1
            let body = (0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            let format: Gzip.Format = trial % 2 == 0 ? .gzip : .rawDeflate
            do {
                _ = try Gzip.decompress(
                    Data(format == .gzip ? header + body : body), format: format, maximumSize: 1 << 20)
            } catch {
                rejected += 1
            }
        }
        #expect(rejected > 2900)
    }

    @Test func contentEncodingNames() {
        #expect(GzipInflater(contentEncoding: "gzip")?.format == .gzip)
        #expect(GzipInflater(contentEncoding: " X-GZIP ")?.format == .gzip)
        #expect(GzipInflater(contentEncoding: "deflate")?.format == .deflate)
        #expect(GzipInflater(contentEncoding: "br") == nil)
    }
}
