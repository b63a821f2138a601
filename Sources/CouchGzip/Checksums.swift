/// CRC-32 (ISO 3309, the polynomial gzip uses), computed eight bytes at a time. Package-wide: CouchStore's
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

    /// The CRC-32 of `bytes` continuing from `crc` (0 for a new checksum).
    package static func update(_ crc: UInt32, _ bytes: UnsafeBufferPointer<UInt8>) -> UInt32 {
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
