import Foundation

/// The few hash functions the engine needs (no crypto library is available on Linux):
/// MD5 for revision ids and attachment digests, SHA-256 for cookie signatures and PBKDF2 password hashes,
/// CRC-32 for gzip and shard placement.
enum Crypto {
    // MARK: MD5

    private static let md5Shifts: [UInt32] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
        5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20,
        4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
        6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ]
    private static let md5K: [UInt32] = (0..<64).map { UInt32(truncatingIfNeeded: Int64(abs(sin(Double($0 + 1))) * 4294967296.0)) }

    static func md5(_ data: Data) -> Data {
        var state: (UInt32, UInt32, UInt32, UInt32) = (0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476)
        let fullBlocks = data.count / 64
        md5K.withUnsafeBufferPointer { kp in
            md5Shifts.withUnsafeBufferPointer { sp in
                data.withUnsafeBytes { raw in
                    var block = 0
                    while block < fullBlocks {
                        md5Block(&state, raw.baseAddress!.advanced(by: block * 64), kp.baseAddress!, sp.baseAddress!)
                        block += 1
                    }
                }
                var tail = [UInt8](data.suffix(from: data.startIndex + fullBlocks * 64))
                let bitLength = UInt64(data.count) &* 8
                tail.append(0x80)
                while tail.count % 64 != 56 { tail.append(0) }
                for i in 0..<8 { tail.append(UInt8(truncatingIfNeeded: bitLength >> (8 * UInt64(i)))) }
                tail.withUnsafeBytes { raw in
                    var offset = 0
                    while offset < tail.count {
                        md5Block(&state, raw.baseAddress!.advanced(by: offset), kp.baseAddress!, sp.baseAddress!)
                        offset += 64
                    }
                }
            }
        }
        var out = Data(capacity: 16)
        for v in [state.0, state.1, state.2, state.3] {
            for i in 0..<4 { out.append(UInt8(truncatingIfNeeded: v >> (8 * UInt32(i)))) }
        }
        return out
    }

    private static func md5Block(
        _ state: inout (UInt32, UInt32, UInt32, UInt32), _ p: UnsafeRawPointer, _ k: UnsafePointer<UInt32>,
        _ shifts: UnsafePointer<UInt32>
    ) {
        var m = (UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0),
                 UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0))
        withUnsafeMutableBytes(of: &m) { mp in
            mp.copyMemory(from: UnsafeRawBufferPointer(start: p, count: 64))
        }
        withUnsafeBytes(of: &m) { mp in
            let w = mp.bindMemory(to: UInt32.self).baseAddress!
            var a = state.0, b = state.1, c = state.2, d = state.3
            var i = 0
            while i < 64 {
                var f: UInt32
                let g: Int
                if i < 16 {
                    f = (b & c) | (~b & d); g = i
                } else if i < 32 {
                    f = (d & b) | (~d & c); g = (5 &* i &+ 1) & 15
                } else if i < 48 {
                    f = b ^ c ^ d; g = (3 &* i &+ 5) & 15
                } else {
                    f = c ^ (b | ~d); g = (7 &* i) & 15
                }
                f = f &+ a &+ k[i] &+ UInt32(littleEndian: w[g])
                a = d
                d = c
                c = b
                let s = shifts[i]
                b = b &+ ((f << s) | (f >> (32 &- s)))
                i += 1
            }
            state.0 = state.0 &+ a
            state.1 = state.1 &+ b
            state.2 = state.2 &+ c
            state.3 = state.3 &+ d
        }
    }

    // MARK: SHA-256

    private static let sha256K: [UInt32] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    ]
    static let sha256Initial: [UInt32] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
    ]

    /// Runs the SHA-256 compression function over one 64-byte block (16 big-endian words in `w[0..<16]`).
    /// `w` must have room for 64 words.
    static func sha256Compress(
        _ state: UnsafeMutablePointer<UInt32>, _ w: UnsafeMutablePointer<UInt32>, _ k: UnsafePointer<UInt32>
    ) {
        var i = 16
        while i < 64 {
            let x = w[i - 15], y = w[i - 2]
            let s0 = ((x >> 7) | (x << 25)) ^ ((x >> 18) | (x << 14)) ^ (x >> 3)
            let s1 = ((y >> 17) | (y << 15)) ^ ((y >> 19) | (y << 13)) ^ (y >> 10)
            w[i] = w[i - 16] &+ s0 &+ w[i - 7] &+ s1
            i += 1
        }
        var a = state[0], b = state[1], c = state[2], d = state[3]
        var e = state[4], f = state[5], g = state[6], h = state[7]
        i = 0
        while i < 64 {
            let s1 = ((e >> 6) | (e << 26)) ^ ((e >> 11) | (e << 21)) ^ ((e >> 25) | (e << 7))
            let ch = (e & f) ^ (~e & g)
            let t1 = h &+ s1 &+ ch &+ k[i] &+ w[i]
            let s0 = ((a >> 2) | (a << 30)) ^ ((a >> 13) | (a << 19)) ^ ((a >> 22) | (a << 10))
            let maj = (a & b) ^ (a & c) ^ (b & c)
            let t2 = s0 &+ maj
            h = g; g = f; f = e; e = d &+ t1
            d = c; c = b; b = a; a = t1 &+ t2
            i += 1
        }
        state[0] = state[0] &+ a; state[1] = state[1] &+ b; state[2] = state[2] &+ c; state[3] = state[3] &+ d
        state[4] = state[4] &+ e; state[5] = state[5] &+ f; state[6] = state[6] &+ g; state[7] = state[7] &+ h
    }

    static func sha256(_ data: Data) -> Data {
        var message = [UInt8](data)
        let bitLength = UInt64(message.count) &* 8
        message.append(0x80)
        while message.count % 64 != 56 { message.append(0) }
        for i in (0..<8).reversed() { message.append(UInt8(truncatingIfNeeded: bitLength >> (8 * UInt64(i)))) }
        var state = sha256Initial
        var w = [UInt32](repeating: 0, count: 64)
        sha256K.withUnsafeBufferPointer { k in
            state.withUnsafeMutableBufferPointer { st in
                w.withUnsafeMutableBufferPointer { wp in
                    for chunk in stride(from: 0, to: message.count, by: 64) {
                        for i in 0..<16 {
                            let j = chunk + i * 4
                            wp[i] = UInt32(message[j]) << 24 | UInt32(message[j + 1]) << 16
                                | UInt32(message[j + 2]) << 8 | UInt32(message[j + 3])
                        }
                        sha256Compress(st.baseAddress!, wp.baseAddress!, k.baseAddress!)
                    }
                }
            }
        }
        var out = Data(capacity: 32)
        for v in state { for i in (0..<4).reversed() { out.append(UInt8(truncatingIfNeeded: v >> (8 * UInt32(i)))) } }
        return out
    }

    static func hmacSHA256(key: Data, message: Data) -> Data {
        var k = key.count > 64 ? sha256(key) : key
        k.append(Data(repeating: 0, count: 64 - k.count))
        let ipad = Data(k.map { $0 ^ 0x36 })
        let opad = Data(k.map { $0 ^ 0x5c })
        return sha256(opad + sha256(ipad + message))
    }

    /// PBKDF2 with HMAC-SHA256, one 32-byte block (what CouchDB stores as `derived_key`).
    static func pbkdf2SHA256(password: Data, salt: Data, iterations: Int) -> Data {
        // Precompute the inner and outer HMAC states so that each iteration costs two compressions.
        var key = password.count > 64 ? sha256(password) : password
        key.append(Data(repeating: 0, count: 64 - key.count))
        func state(after block: Data) -> [UInt32] {
            var st = sha256Initial
            var w = [UInt32](repeating: 0, count: 64)
            let bytes = [UInt8](block)
            for i in 0..<16 {
                w[i] = UInt32(bytes[i * 4]) << 24 | UInt32(bytes[i * 4 + 1]) << 16 | UInt32(bytes[i * 4 + 2]) << 8
                    | UInt32(bytes[i * 4 + 3])
            }
            sha256K.withUnsafeBufferPointer { k in
                st.withUnsafeMutableBufferPointer { s in
                    w.withUnsafeMutableBufferPointer { wp in sha256Compress(s.baseAddress!, wp.baseAddress!, k.baseAddress!) }
                }
            }
            return st
        }
        let innerState = state(after: Data(key.map { $0 ^ 0x36 }))
        let outerState = state(after: Data(key.map { $0 ^ 0x5c }))
        // U1 = HMAC(password, salt || INT(1))
        var u = [UInt8](hmacSHA256(key: password, message: salt + Data([0, 0, 0, 1])))
        var result = [UInt32](repeating: 0, count: 8)
        var uWords = [UInt32](repeating: 0, count: 8)
        for i in 0..<8 {
            uWords[i] = UInt32(u[i * 4]) << 24 | UInt32(u[i * 4 + 1]) << 16 | UInt32(u[i * 4 + 2]) << 8 | UInt32(u[i * 4 + 3])
            result[i] = uWords[i]
        }
        u.removeAll()
        var w = [UInt32](repeating: 0, count: 64)
        var st = [UInt32](repeating: 0, count: 8)
        sha256K.withUnsafeBufferPointer { kp in
            w.withUnsafeMutableBufferPointer { wb in
                st.withUnsafeMutableBufferPointer { sb in
                    uWords.withUnsafeMutableBufferPointer { ub in
                        result.withUnsafeMutableBufferPointer { rb in
                            let wp = wb.baseAddress!, sp = sb.baseAddress!, up = ub.baseAddress!, rp = rb.baseAddress!
                            let k = kp.baseAddress!
                            var n = 1
                            while n < iterations {
                                // inner: state after ipad block, then block = U (32 bytes) + padding (length 96 bytes).
                                for i in 0..<8 { sp[i] = innerState[i]; wp[i] = up[i] }
                                wp[8] = 0x8000_0000
                                for i in 9..<15 { wp[i] = 0 }
                                wp[15] = (64 + 32) * 8
                                sha256Compress(sp, wp, k)
                                for i in 0..<8 { wp[i] = sp[i]; sp[i] = outerState[i] }
                                wp[8] = 0x8000_0000
                                for i in 9..<15 { wp[i] = 0 }
                                wp[15] = (64 + 32) * 8
                                sha256Compress(sp, wp, k)
                                for i in 0..<8 {
                                    up[i] = sp[i]
                                    rp[i] ^= sp[i]
                                }
                                n += 1
                            }
                        }
                    }
                }
            }
        }
        var out = Data(capacity: 32)
        for v in result { for i in (0..<4).reversed() { out.append(UInt8(truncatingIfNeeded: v >> (8 * UInt32(i)))) } }
        return out
    }

    // MARK: CRC-32

    private static let crcTable: [UInt32] = (0..<256).map { n -> UInt32 in
        var c = UInt32(n)
        for _ in 0..<8 { c = (c & 1) != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    static func crc32(_ data: Data) -> UInt32 {
        var c: UInt32 = 0xFFFF_FFFF
        for byte in data { c = crcTable[Int((c ^ UInt32(byte)) & 0xFF)] ^ (c >> 8) }
        return c ^ 0xFFFF_FFFF
    }

    // MARK: Encodings

    static func hex(_ data: Data) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(data.count * 2)
        for b in data {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func fromHex(_ text: String) -> Data? {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0 else { return nil }
        var out = Data(capacity: chars.count / 2)
        func v(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: return c - 48
            case 97...102: return c - 87
            case 65...70: return c - 55
            default: return nil
            }
        }
        var i = 0
        while i < chars.count {
            guard let h = v(chars[i]), let l = v(chars[i + 1]) else { return nil }
            out.append(h << 4 | l)
            i += 2
        }
        return out
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func fromBase64URL(_ text: String) -> Data? {
        var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        guard s.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "+" || $0 == "/" || $0 == "=") }) else {
            return nil
        }
        s = s.replacingOccurrences(of: "=", with: "")
        while s.count % 4 != 0 { s += "=" }
        return Data(base64Encoded: s)
    }

    static func randomBytes(_ count: Int) -> Data {
        var g = SystemRandomNumberGenerator()
        return Data((0..<count).map { _ in UInt8.random(in: 0...255, using: &g) })
    }

    /// An opaque, upper-case base-36 token (25 characters) as CouchDB uses for ETags it does not derive from a rev.
    static func opaqueToken(_ text: String) -> String {
        let digest = [UInt8](md5(Data(text.utf8)))
        let alphabet = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")
        var value = digest
        var out: [Character] = []
        // Repeated division of the 128-bit big-endian number by 36.
        for _ in 0..<25 {
            var remainder = 0
            for i in 0..<value.count {
                let acc = remainder * 256 + Int(value[i])
                value[i] = UInt8(acc / 36)
                remainder = acc % 36
            }
            out.append(alphabet[remainder])
        }
        return String(out.reversed())
    }
}
