import CCouchChecksum

/// CRC-32 (ISO 3309, the polynomial gzip uses), folded with carry-less multiplication or computed eight bytes
/// at a time. Package-wide: CouchStore's
/// record checksums are the same CRC-32.
package enum CRC32 {
    /// Eight 256-entry tables for slicing-by-8; table 0 is the classic byte-at-a-time table.
    static let tables: [UInt32] = {
        var tables = [UInt32](repeating: 0, count: 8 * 256)
        for n in 0..<256 {
            var c = UInt32(n)
            for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
            tables[n] = c
        }
        for k in 1..<8 {
            for n in 0..<256 {
                let previous = tables[(k - 1) * 256 + n]
                tables[k * 256 + n] = (previous >> 8) ^ tables[Int(previous & 0xFF)]
            }
        }
        return tables
    }()

    /// How the processor folds CRC-32 with carry-less multiplication: 0 not at all, 1 on 16-byte registers
    /// (x86-64 with PCLMULQDQ), 2 on 64-byte ones too (AVX-512 with VPCLMULQDQ).
    static let foldLevel = Int(couch_crc32_fold_level())

    /// The CRC-32 of `bytes` continuing from `crc` (0 for a new checksum). Where the processor has carry-less
    /// multiplication, the bytes are folded 64 or 256 at a time (about 15 GiB/s on 16-byte registers, 60 GiB/s on
    /// 64-byte ones, against 6 for the tables below; the last bytes that do not make 16 go through the tables).
    /// Elsewhere, from 12 KiB on, the bytes are taken as three runs checksummed side by side (three independent
    /// chains of table look-ups, which the processor overlaps) and the three checksums combined
    /// (``combine(_:_:length:)``): about three times as fast as one chain on the 1 MiB attachment chunks a database
    /// file holds.
    package static func update(_ crc: UInt32, _ bytes: UnsafeBufferPointer<UInt8>) -> UInt32 {
        update(crc, bytes, foldLevel: foldLevel)
    }

    /// ``update(_:_:)`` folding at most at `foldLevel` (tests compare the levels with one another).
    static func update(_ crc: UInt32, _ bytes: UnsafeBufferPointer<UInt8>, foldLevel: Int) -> UInt32 {
        let n = bytes.count
        if foldLevel > 0, n >= 64, let p = bytes.baseAddress {
            let folded = n & ~15
            let state = couch_crc32_fold(Int32(foldLevel), ~crc, p, folded)
            return updateSerially(~state, UnsafeBufferPointer(rebasing: bytes[folded...]))
        }
        return updateByTables(crc, bytes)
    }

    /// ``update(_:_:)`` without carry-less multiplication (the fallback, and what tests compare the folding with).
    static func updateByTables(_ crc: UInt32, _ bytes: UnsafeBufferPointer<UInt8>) -> UInt32 {
        let n = bytes.count
        guard n >= 3 * 4096, let p = bytes.baseAddress else { return updateSerially(crc, bytes) }
        let part = (n / 3) & ~7
        var a = ~crc
        var b: UInt32 = ~0
        var c: UInt32 = ~0
        tables.withUnsafeBufferPointer { table in
            let t = table.baseAddress!
            var i = 0
            while i < part {
                a = step8(a, p + i, t)
                b = step8(b, p + part + i, t)
                c = step8(c, p + 2 * part + i, t)
                i += 8
            }
        }
        let joined = combine(combine(~a, ~b, length: part), ~c, length: part)
        return updateSerially(joined, UnsafeBufferPointer(rebasing: bytes[(3 * part)...]))
    }

    /// Eight bytes at `p` into the running (inverted) checksum `c`.
    @inline(__always)
    private static func step8(_ c: UInt32, _ p: UnsafePointer<UInt8>, _ t: UnsafePointer<UInt32>) -> UInt32 {
        let one = (UInt32(p[0]) | UInt32(p[1]) << 8 | UInt32(p[2]) << 16 | UInt32(p[3]) << 24) ^ c
        let two = UInt32(p[4]) | UInt32(p[5]) << 8 | UInt32(p[6]) << 16 | UInt32(p[7]) << 24
        return t[7 * 256 + Int(one & 0xFF)] ^ t[6 * 256 + Int((one >> 8) & 0xFF)]
            ^ t[5 * 256 + Int((one >> 16) & 0xFF)] ^ t[4 * 256 + Int(one >> 24)]
            ^ t[3 * 256 + Int(two & 0xFF)] ^ t[2 * 256 + Int((two >> 8) & 0xFF)]
            ^ t[256 + Int((two >> 16) & 0xFF)] ^ t[Int(two >> 24)]
    }

    /// The CRC-32 of the bytes A then B, from the CRC-32 of A (`first`), that of B (`second`) and B's length: zlib's
    /// `crc32_combine`, `first` multiplied by x^(8·length) modulo the polynomial, plus `second`.
    package static func combine(_ first: UInt32, _ second: UInt32, length: Int) -> UInt32 {
        var n = max(length, 0)
        var k = 3
        var power: UInt32 = 1 << 31  // x^0
        while n > 0 {
            if n & 1 != 0 { power = multiply(powersOfX[k & 31], power) }
            n >>= 1
            k += 1
        }
        return multiply(power, first) ^ second
    }

    /// x^(2^k) modulo the polynomial, k = 0..<32 (bit-reflected, as the checksum is).
    private static let powersOfX: [UInt32] = {
        var table = [UInt32](repeating: 0, count: 32)
        var p: UInt32 = 1 << 30  // x^1
        for k in 0..<32 {
            table[k] = p
            p = multiply(p, p)
        }
        return table
    }()

    /// `a` times `b` modulo the polynomial (bit-reflected).
    private static func multiply(_ a: UInt32, _ b: UInt32) -> UInt32 {
        guard a != 0 else { return 0 }
        var m: UInt32 = 1 << 31
        var product: UInt32 = 0
        var b = b
        while true {
            if a & m != 0 {
                product ^= b
                if a & (m &- 1) == 0 { break }
            }
            m >>= 1
            b = b & 1 != 0 ? (b >> 1) ^ 0xEDB8_8320 : b >> 1
        }
        return product
    }

    /// The CRC-32 of `bytes` continuing from `crc`, in one chain of look-ups, eight bytes at a time.
    static func updateSerially(_ crc: UInt32, _ bytes: UnsafeBufferPointer<UInt8>) -> UInt32 {
        var c = ~crc
        let n = bytes.count
        guard n > 0, let p = bytes.baseAddress else { return crc }
        tables.withUnsafeBufferPointer { t in
            var i = 0
            while i + 8 <= n {
                let one = (UInt32(p[i]) | UInt32(p[i + 1]) << 8 | UInt32(p[i + 2]) << 16 | UInt32(p[i + 3]) << 24) ^ c
                let two = UInt32(p[i + 4]) | UInt32(p[i + 5]) << 8 | UInt32(p[i + 6]) << 16 | UInt32(p[i + 7]) << 24
                c =
                    t[7 * 256 + Int(one & 0xFF)] ^ t[6 * 256 + Int((one >> 8) & 0xFF)]
                    ^ t[5 * 256 + Int((one >> 16) & 0xFF)] ^ t[4 * 256 + Int(one >> 24)]
                    ^ t[3 * 256 + Int(two & 0xFF)] ^ t[2 * 256 + Int((two >> 8) & 0xFF)]
                    ^ t[256 + Int((two >> 16) & 0xFF)] ^ t[Int(two >> 24)]
                i += 8
            }
            while i < n {
                c = t[Int((c ^ UInt32(p[i])) & 0xFF)] ^ (c >> 8)
                i += 1
            }
        }
        return ~c
    }

    /// The CRC-32 of `bytes` continuing from `crc`.
    static func update(_ crc: UInt32, _ bytes: [UInt8]) -> UInt32 {
        bytes.withUnsafeBufferPointer { update(crc, $0) }
    }
}

/// Adler-32 (RFC 1950), the checksum of zlib streams.
enum Adler32 {
    /// The Adler-32 of `bytes` continuing from `adler` (1 for a new checksum).
    static func update(_ adler: UInt32, _ bytes: UnsafeBufferPointer<UInt8>) -> UInt32 {
        var a = adler & 0xFFFF
        var b = adler >> 16
        var i = 0
        let n = bytes.count
        while i < n {
            let end = min(n, i + 5552)  // the most bytes before the sums can overflow 32 bits
            while i < end {
                a &+= UInt32(bytes[i])
                b &+= a
                i += 1
            }
            a %= 65521
            b %= 65521
        }
        return b << 16 | a
    }
}
