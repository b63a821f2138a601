import Foundation

/// The few hash functions the engine needs (no crypto library is available on Linux):
/// MD5 for revision ids and attachment digests, SHA-256 for cookie signatures and PBKDF2 password hashes,
/// CRC-32 for gzip and shard placement.
package enum Crypto {
    // MARK: MD5

    private static let md5Shifts: [UInt32] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
        5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20,
        4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
        6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ]
    private static let md5K: [UInt32] = (0..<64).map {
        UInt32(truncatingIfNeeded: Int64(abs(sin(Double($0 + 1))) * 4294967296.0))
    }

    package static func md5(_ data: Data) -> Data {
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

    /// MD5 computed piece by piece, for bytes that are never whole in memory (a streamed attachment).
    package struct MD5 {
        private var state: (UInt32, UInt32, UInt32, UInt32) = (0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476)
        private var partial: [UInt8] = []
        private var total: UInt64 = 0

        package init() {}

        /// Adds the next bytes.
        package mutating func update(_ data: Data) {
            data.withUnsafeBytes { update($0) }
        }

        /// Adds the next bytes.
        package mutating func update(_ bytes: UnsafeRawBufferPointer) {
            guard bytes.count > 0, let base = bytes.baseAddress else { return }
            total &+= UInt64(bytes.count)
            var offset = 0
            md5K.withUnsafeBufferPointer { kp in
                md5Shifts.withUnsafeBufferPointer { sp in
                    if !partial.isEmpty {
                        let take = min(64 - partial.count, bytes.count)
                        partial.append(contentsOf: UnsafeRawBufferPointer(start: base, count: take))
                        offset = take
                        if partial.count == 64 {
                            partial.withUnsafeBytes {
                                Crypto.md5Block(&state, $0.baseAddress!, kp.baseAddress!, sp.baseAddress!)
                            }
                            partial.removeAll(keepingCapacity: true)
                        }
                    }
                    while bytes.count - offset >= 64 {
                        Crypto.md5Block(&state, base.advanced(by: offset), kp.baseAddress!, sp.baseAddress!)
                        offset += 64
                    }
                }
            }
            if offset < bytes.count {
                partial.append(contentsOf: UnsafeRawBufferPointer(start: base + offset, count: bytes.count - offset))
            }
        }

        /// The digest of every byte added (16 bytes).
        package func finish() -> Data {
            var copy = self
            var tail = copy.partial
            let bitLength = total &* 8
            tail.append(0x80)
            while tail.count % 64 != 56 { tail.append(0) }
            for i in 0..<8 { tail.append(UInt8(truncatingIfNeeded: bitLength >> (8 * UInt64(i)))) }
            md5K.withUnsafeBufferPointer { kp in
                md5Shifts.withUnsafeBufferPointer { sp in
                    tail.withUnsafeBytes { raw in
                        var offset = 0
                        while offset < tail.count {
                            Crypto.md5Block(
                                &copy.state, raw.baseAddress!.advanced(by: offset), kp.baseAddress!, sp.baseAddress!)
                            offset += 64
                        }
                    }
                }
            }
            var out = Data(capacity: 16)
            for v in [copy.state.0, copy.state.1, copy.state.2, copy.state.3] {
                for i in 0..<4 { out.append(UInt8(truncatingIfNeeded: v >> (8 * UInt32(i)))) }
            }
            return out
        }
    }

    /// One MD5 compression (RFC 1321) with its 64 steps written out: constants, shifts and message words are
    /// literals, where a generic step looked up its function, word, constant and shift every time (about 1.7 times
    /// as fast; every attachment byte uploaded or written goes through here). `k` and `shifts` are RFC 1321's
    /// tables, which the steps hold as literals.
    private static func md5Block(
        _ state: inout (UInt32, UInt32, UInt32, UInt32), _ p: UnsafeRawPointer, _ k: UnsafePointer<UInt32>,
        _ shifts: UnsafePointer<UInt32>
    ) {
        let w0 = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 0, as: UInt32.self))
        let w1 = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 4, as: UInt32.self))
        let w2 = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 8, as: UInt32.self))
        let w3 = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 12, as: UInt32.self))
        let w4 = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 16, as: UInt32.self))
        let w5 = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 20, as: UInt32.self))
        let w6 = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 24, as: UInt32.self))
        let w7 = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 28, as: UInt32.self))
        let w8 = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 32, as: UInt32.self))
        let w9 = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 36, as: UInt32.self))
        let w10 = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 40, as: UInt32.self))
        let w11 = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 44, as: UInt32.self))
        let w12 = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 48, as: UInt32.self))
        let w13 = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 52, as: UInt32.self))
        let w14 = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 56, as: UInt32.self))
        let w15 = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 60, as: UInt32.self))
        @inline(__always) func rotl(_ v: UInt32, _ s: UInt32) -> UInt32 { (v &<< s) | (v &>> (32 &- s)) }
        var a = state.0
        var b = state.1
        var c = state.2
        var d = state.3
        a = b &+ rotl(a &+ ((b & c) | (~b & d)) &+ 0xd76a_a478 &+ w0, 7)
        d = a &+ rotl(d &+ ((a & b) | (~a & c)) &+ 0xe8c7_b756 &+ w1, 12)
        c = d &+ rotl(c &+ ((d & a) | (~d & b)) &+ 0x2420_70db &+ w2, 17)
        b = c &+ rotl(b &+ ((c & d) | (~c & a)) &+ 0xc1bd_ceee &+ w3, 22)
        a = b &+ rotl(a &+ ((b & c) | (~b & d)) &+ 0xf57c_0faf &+ w4, 7)
        d = a &+ rotl(d &+ ((a & b) | (~a & c)) &+ 0x4787_c62a &+ w5, 12)
        c = d &+ rotl(c &+ ((d & a) | (~d & b)) &+ 0xa830_4613 &+ w6, 17)
        b = c &+ rotl(b &+ ((c & d) | (~c & a)) &+ 0xfd46_9501 &+ w7, 22)
        a = b &+ rotl(a &+ ((b & c) | (~b & d)) &+ 0x6980_98d8 &+ w8, 7)
        d = a &+ rotl(d &+ ((a & b) | (~a & c)) &+ 0x8b44_f7af &+ w9, 12)
        c = d &+ rotl(c &+ ((d & a) | (~d & b)) &+ 0xffff_5bb1 &+ w10, 17)
        b = c &+ rotl(b &+ ((c & d) | (~c & a)) &+ 0x895c_d7be &+ w11, 22)
        a = b &+ rotl(a &+ ((b & c) | (~b & d)) &+ 0x6b90_1122 &+ w12, 7)
        d = a &+ rotl(d &+ ((a & b) | (~a & c)) &+ 0xfd98_7193 &+ w13, 12)
        c = d &+ rotl(c &+ ((d & a) | (~d & b)) &+ 0xa679_438e &+ w14, 17)
        b = c &+ rotl(b &+ ((c & d) | (~c & a)) &+ 0x49b4_0821 &+ w15, 22)
        a = b &+ rotl(a &+ ((b & d) | (c & ~d)) &+ 0xf61e_2562 &+ w1, 5)
        d = a &+ rotl(d &+ ((a & c) | (b & ~c)) &+ 0xc040_b340 &+ w6, 9)
        c = d &+ rotl(c &+ ((d & b) | (a & ~b)) &+ 0x265e_5a51 &+ w11, 14)
        b = c &+ rotl(b &+ ((c & a) | (d & ~a)) &+ 0xe9b6_c7aa &+ w0, 20)
        a = b &+ rotl(a &+ ((b & d) | (c & ~d)) &+ 0xd62f_105d &+ w5, 5)
        d = a &+ rotl(d &+ ((a & c) | (b & ~c)) &+ 0x0244_1453 &+ w10, 9)
        c = d &+ rotl(c &+ ((d & b) | (a & ~b)) &+ 0xd8a1_e681 &+ w15, 14)
        b = c &+ rotl(b &+ ((c & a) | (d & ~a)) &+ 0xe7d3_fbc8 &+ w4, 20)
        a = b &+ rotl(a &+ ((b & d) | (c & ~d)) &+ 0x21e1_cde6 &+ w9, 5)
        d = a &+ rotl(d &+ ((a & c) | (b & ~c)) &+ 0xc337_07d6 &+ w14, 9)
        c = d &+ rotl(c &+ ((d & b) | (a & ~b)) &+ 0xf4d5_0d87 &+ w3, 14)
        b = c &+ rotl(b &+ ((c & a) | (d & ~a)) &+ 0x455a_14ed &+ w8, 20)
        a = b &+ rotl(a &+ ((b & d) | (c & ~d)) &+ 0xa9e3_e905 &+ w13, 5)
        d = a &+ rotl(d &+ ((a & c) | (b & ~c)) &+ 0xfcef_a3f8 &+ w2, 9)
        c = d &+ rotl(c &+ ((d & b) | (a & ~b)) &+ 0x676f_02d9 &+ w7, 14)
        b = c &+ rotl(b &+ ((c & a) | (d & ~a)) &+ 0x8d2a_4c8a &+ w12, 20)
        a = b &+ rotl(a &+ (b ^ c ^ d) &+ 0xfffa_3942 &+ w5, 4)
        d = a &+ rotl(d &+ (a ^ b ^ c) &+ 0x8771_f681 &+ w8, 11)
        c = d &+ rotl(c &+ (d ^ a ^ b) &+ 0x6d9d_6122 &+ w11, 16)
        b = c &+ rotl(b &+ (c ^ d ^ a) &+ 0xfde5_380c &+ w14, 23)
        a = b &+ rotl(a &+ (b ^ c ^ d) &+ 0xa4be_ea44 &+ w1, 4)
        d = a &+ rotl(d &+ (a ^ b ^ c) &+ 0x4bde_cfa9 &+ w4, 11)
        c = d &+ rotl(c &+ (d ^ a ^ b) &+ 0xf6bb_4b60 &+ w7, 16)
        b = c &+ rotl(b &+ (c ^ d ^ a) &+ 0xbebf_bc70 &+ w10, 23)
        a = b &+ rotl(a &+ (b ^ c ^ d) &+ 0x289b_7ec6 &+ w13, 4)
        d = a &+ rotl(d &+ (a ^ b ^ c) &+ 0xeaa1_27fa &+ w0, 11)
        c = d &+ rotl(c &+ (d ^ a ^ b) &+ 0xd4ef_3085 &+ w3, 16)
        b = c &+ rotl(b &+ (c ^ d ^ a) &+ 0x0488_1d05 &+ w6, 23)
        a = b &+ rotl(a &+ (b ^ c ^ d) &+ 0xd9d4_d039 &+ w9, 4)
        d = a &+ rotl(d &+ (a ^ b ^ c) &+ 0xe6db_99e5 &+ w12, 11)
        c = d &+ rotl(c &+ (d ^ a ^ b) &+ 0x1fa2_7cf8 &+ w15, 16)
        b = c &+ rotl(b &+ (c ^ d ^ a) &+ 0xc4ac_5665 &+ w2, 23)
        a = b &+ rotl(a &+ (c ^ (b | ~d)) &+ 0xf429_2244 &+ w0, 6)
        d = a &+ rotl(d &+ (b ^ (a | ~c)) &+ 0x432a_ff97 &+ w7, 10)
        c = d &+ rotl(c &+ (a ^ (d | ~b)) &+ 0xab94_23a7 &+ w14, 15)
        b = c &+ rotl(b &+ (d ^ (c | ~a)) &+ 0xfc93_a039 &+ w5, 21)
        a = b &+ rotl(a &+ (c ^ (b | ~d)) &+ 0x655b_59c3 &+ w12, 6)
        d = a &+ rotl(d &+ (b ^ (a | ~c)) &+ 0x8f0c_cc92 &+ w3, 10)
        c = d &+ rotl(c &+ (a ^ (d | ~b)) &+ 0xffef_f47d &+ w10, 15)
        b = c &+ rotl(b &+ (d ^ (c | ~a)) &+ 0x8584_5dd1 &+ w1, 21)
        a = b &+ rotl(a &+ (c ^ (b | ~d)) &+ 0x6fa8_7e4f &+ w8, 6)
        d = a &+ rotl(d &+ (b ^ (a | ~c)) &+ 0xfe2c_e6e0 &+ w15, 10)
        c = d &+ rotl(c &+ (a ^ (d | ~b)) &+ 0xa301_4314 &+ w6, 15)
        b = c &+ rotl(b &+ (d ^ (c | ~a)) &+ 0x4e08_11a1 &+ w13, 21)
        a = b &+ rotl(a &+ (c ^ (b | ~d)) &+ 0xf753_7e82 &+ w4, 6)
        d = a &+ rotl(d &+ (b ^ (a | ~c)) &+ 0xbd3a_f235 &+ w11, 10)
        c = d &+ rotl(c &+ (a ^ (d | ~b)) &+ 0x2ad7_d2bb &+ w2, 15)
        b = c &+ rotl(b &+ (d ^ (c | ~a)) &+ 0xeb86_d391 &+ w9, 21)
        state.0 = state.0 &+ a
        state.1 = state.1 &+ b
        state.2 = state.2 &+ c
        state.3 = state.3 &+ d
    }

    // MARK: SHA-256
    //
    // Written for speed in debug builds too (PBKDF2 runs 1.2 million compressions per password): the hot loops
    // work on raw pointers, use only masking shifts and wrapping arithmetic (which the compiler inlines even
    // without optimisation), allocate nothing, and run eight rounds per loop step, written out, with the working
    // variables renamed from round to round instead of shuffled.

    private static let sha256K: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]

    /// The round constants in memory that is never freed, so the compression function reads them through a
    /// plain pointer (no array access, no closure).
    nonisolated(unsafe) private static let sha256KTable: UnsafePointer<UInt32> = {
        // nonisolated(unsafe): written once here, then only read.
        let table = UnsafeMutablePointer<UInt32>.allocate(capacity: 64)
        sha256K.withUnsafeBufferPointer { table.initialize(from: $0.baseAddress!, count: 64) }
        return UnsafePointer(table)
    }()

    /// A SHA-256 chaining state: eight words.
    struct SHA256State: Sendable {
        var h0: UInt32 = 0x6a09_e667
        var h1: UInt32 = 0xbb67_ae85
        var h2: UInt32 = 0x3c6e_f372
        var h3: UInt32 = 0xa54f_f53a
        var h4: UInt32 = 0x510e_527f
        var h5: UInt32 = 0x9b05_688c
        var h6: UInt32 = 0x1f83_d9ab
        var h7: UInt32 = 0x5be0_cd19

        /// The initial state of SHA-256.
        static let initial = SHA256State()

        func store(_ p: UnsafeMutablePointer<UInt32>) {
            p[0] = h0
            p[1] = h1
            p[2] = h2
            p[3] = h3
            p[4] = h4
            p[5] = h5
            p[6] = h6
            p[7] = h7
        }

        init() {}

        init(_ p: UnsafePointer<UInt32>) {
            h0 = p[0]
            h1 = p[1]
            h2 = p[2]
            h3 = p[3]
            h4 = p[4]
            h5 = p[5]
            h6 = p[6]
            h7 = p[7]
        }

        /// The state as a big-endian digest.
        var digest: Data {
            var out = Data(count: 32)
            out.withUnsafeMutableBytes { raw in
                for (i, v) in [h0, h1, h2, h3, h4, h5, h6, h7].enumerated() {
                    raw.storeBytes(of: v.bigEndian, toByteOffset: i &* 4, as: UInt32.self)
                }
            }
            return out
        }
    }

    /// Runs the SHA-256 compression function over one block: the block's 16 big-endian words are in
    /// `w[0..<16]`, which must have room for 64 words (`w[16..<64]` is overwritten, `w[0..<16]` is kept).
    static func sha256Compress(_ state: UnsafeMutablePointer<UInt32>, _ w: UnsafeMutablePointer<UInt32>) {
        var i = 16
        while i < 64 {
            let x = w[i &- 15]
            let y = w[i &- 2]
            let s0 = (x &>> 7 | x &<< 25) ^ (x &>> 18 | x &<< 14) ^ (x &>> 3)
            let s1 = (y &>> 17 | y &<< 15) ^ (y &>> 19 | y &<< 13) ^ (y &>> 10)
            w[i] = w[i &- 16] &+ s0 &+ w[i &- 7] &+ s1
            i &+= 1
        }
        let k = sha256KTable
        var a = state[0]
        var b = state[1]
        var c = state[2]
        var d = state[3]
        var e = state[4]
        var f = state[5]
        var g = state[6]
        var h = state[7]
        var t1: UInt32 = 0
        var t2: UInt32 = 0
        i = 0
        while i < 64 {
            t1 = h &+ ((e &>> 6 | e &<< 26) ^ (e &>> 11 | e &<< 21) ^ (e &>> 25 | e &<< 7))
            t1 = t1 &+ ((e & f) ^ (~e & g)) &+ k[i] &+ w[i]
            t2 = (a &>> 2 | a &<< 30) ^ (a &>> 13 | a &<< 19) ^ (a &>> 22 | a &<< 10)
            d = d &+ t1
            h = t1 &+ t2 &+ ((a & b) ^ (a & c) ^ (b & c))
            t1 = g &+ ((d &>> 6 | d &<< 26) ^ (d &>> 11 | d &<< 21) ^ (d &>> 25 | d &<< 7))
            t1 = t1 &+ ((d & e) ^ (~d & f)) &+ k[i &+ 1] &+ w[i &+ 1]
            t2 = (h &>> 2 | h &<< 30) ^ (h &>> 13 | h &<< 19) ^ (h &>> 22 | h &<< 10)
            c = c &+ t1
            g = t1 &+ t2 &+ ((h & a) ^ (h & b) ^ (a & b))
            t1 = f &+ ((c &>> 6 | c &<< 26) ^ (c &>> 11 | c &<< 21) ^ (c &>> 25 | c &<< 7))
            t1 = t1 &+ ((c & d) ^ (~c & e)) &+ k[i &+ 2] &+ w[i &+ 2]
            t2 = (g &>> 2 | g &<< 30) ^ (g &>> 13 | g &<< 19) ^ (g &>> 22 | g &<< 10)
            b = b &+ t1
            f = t1 &+ t2 &+ ((g & h) ^ (g & a) ^ (h & a))
            t1 = e &+ ((b &>> 6 | b &<< 26) ^ (b &>> 11 | b &<< 21) ^ (b &>> 25 | b &<< 7))
            t1 = t1 &+ ((b & c) ^ (~b & d)) &+ k[i &+ 3] &+ w[i &+ 3]
            t2 = (f &>> 2 | f &<< 30) ^ (f &>> 13 | f &<< 19) ^ (f &>> 22 | f &<< 10)
            a = a &+ t1
            e = t1 &+ t2 &+ ((f & g) ^ (f & h) ^ (g & h))
            t1 = d &+ ((a &>> 6 | a &<< 26) ^ (a &>> 11 | a &<< 21) ^ (a &>> 25 | a &<< 7))
            t1 = t1 &+ ((a & b) ^ (~a & c)) &+ k[i &+ 4] &+ w[i &+ 4]
            t2 = (e &>> 2 | e &<< 30) ^ (e &>> 13 | e &<< 19) ^ (e &>> 22 | e &<< 10)
            h = h &+ t1
            d = t1 &+ t2 &+ ((e & f) ^ (e & g) ^ (f & g))
            t1 = c &+ ((h &>> 6 | h &<< 26) ^ (h &>> 11 | h &<< 21) ^ (h &>> 25 | h &<< 7))
            t1 = t1 &+ ((h & a) ^ (~h & b)) &+ k[i &+ 5] &+ w[i &+ 5]
            t2 = (d &>> 2 | d &<< 30) ^ (d &>> 13 | d &<< 19) ^ (d &>> 22 | d &<< 10)
            g = g &+ t1
            c = t1 &+ t2 &+ ((d & e) ^ (d & f) ^ (e & f))
            t1 = b &+ ((g &>> 6 | g &<< 26) ^ (g &>> 11 | g &<< 21) ^ (g &>> 25 | g &<< 7))
            t1 = t1 &+ ((g & h) ^ (~g & a)) &+ k[i &+ 6] &+ w[i &+ 6]
            t2 = (c &>> 2 | c &<< 30) ^ (c &>> 13 | c &<< 19) ^ (c &>> 22 | c &<< 10)
            f = f &+ t1
            b = t1 &+ t2 &+ ((c & d) ^ (c & e) ^ (d & e))
            t1 = a &+ ((f &>> 6 | f &<< 26) ^ (f &>> 11 | f &<< 21) ^ (f &>> 25 | f &<< 7))
            t1 = t1 &+ ((f & g) ^ (~f & h)) &+ k[i &+ 7] &+ w[i &+ 7]
            t2 = (b &>> 2 | b &<< 30) ^ (b &>> 13 | b &<< 19) ^ (b &>> 22 | b &<< 10)
            e = e &+ t1
            a = t1 &+ t2 &+ ((b & c) ^ (b & d) ^ (c & d))
            i &+= 8
        }
        state[0] = state[0] &+ a
        state[1] = state[1] &+ b
        state[2] = state[2] &+ c
        state[3] = state[3] &+ d
        state[4] = state[4] &+ e
        state[5] = state[5] &+ f
        state[6] = state[6] &+ g
        state[7] = state[7] &+ h
    }

    /// Loads one 64-byte block as 16 big-endian words into `w`.
    @inline(__always)
    private static func sha256LoadBlock(_ w: UnsafeMutablePointer<UInt32>, _ p: UnsafeRawPointer) {
        var j = 0
        while j < 16 {
            w[j] = UInt32(bigEndian: p.loadUnaligned(fromByteOffset: j &* 4, as: UInt32.self))
            j &+= 1
        }
    }

    /// Hashes `message` onward from `start`, the state after `absorbed` bytes (a multiple of 64) were hashed
    /// already, and pads for a total length of `absorbed + message.count`.
    static func sha256(from start: SHA256State, absorbed: Int, _ message: UnsafeRawBufferPointer) -> SHA256State {
        // 8 state words, 64 schedule words, then 128 bytes for the padded tail.
        let scratch = UnsafeMutableRawPointer.allocate(byteCount: 72 * 4 + 128, alignment: 8)
        defer { scratch.deallocate() }
        let state = scratch.bindMemory(to: UInt32.self, capacity: 72)
        let w = state + 8
        start.store(state)
        let count = message.count
        var offset = 0
        if let base = message.baseAddress {
            while count &- offset >= 64 {
                sha256LoadBlock(w, base + offset)
                sha256Compress(state, w)
                offset &+= 64
            }
        }
        let tail = (scratch + 72 * 4).bindMemory(to: UInt8.self, capacity: 128)
        tail.initialize(repeating: 0, count: 128)
        let rest = count &- offset
        if rest > 0, let base = message.baseAddress {
            tail.initialize(from: base.assumingMemoryBound(to: UInt8.self) + offset, count: rest)
        }
        tail[rest] = 0x80
        let tailLength = rest < 56 ? 64 : 128
        let bits = UInt64(absorbed &+ count) &* 8
        UnsafeMutableRawPointer(tail).storeBytes(of: bits.bigEndian, toByteOffset: tailLength &- 8, as: UInt64.self)
        var blockStart = 0
        while blockStart < tailLength {
            sha256LoadBlock(w, UnsafeRawPointer(tail + blockStart))
            sha256Compress(state, w)
            blockStart &+= 64
        }
        return SHA256State(state)
    }

    package static func sha256(_ data: Data) -> Data {
        data.withUnsafeBytes { sha256(from: .initial, absorbed: 0, $0) }.digest
    }

    /// HMAC-SHA256 with the key's inner and outer states computed once: each message then costs the
    /// compressions of the message itself plus one for the outer hash (instead of two more for the key pads).
    struct HMACSHA256: Sendable {
        /// The SHA-256 state after the `key XOR ipad` block.
        let inner: SHA256State
        /// The SHA-256 state after the `key XOR opad` block.
        let outer: SHA256State

        init(key: Data) {
            var block = [UInt8](repeating: 0, count: 64)
            let k = key.count > 64 ? Crypto.sha256(key) : key
            for (i, byte) in k.enumerated() { block[i] = byte }
            func state(xor pad: UInt8) -> SHA256State {
                let scratch = UnsafeMutablePointer<UInt32>.allocate(capacity: 72)
                defer { scratch.deallocate() }
                SHA256State.initial.store(scratch)
                block.withUnsafeBytes { raw in
                    for j in 0..<16 {
                        let word = UInt32(bigEndian: raw.loadUnaligned(fromByteOffset: j * 4, as: UInt32.self))
                        scratch[8 + j] = word ^ (UInt32(pad) &* 0x0101_0101)
                    }
                }
                Crypto.sha256Compress(scratch, scratch + 8)
                return SHA256State(scratch)
            }
            inner = state(xor: 0x36)
            outer = state(xor: 0x5c)
        }

        /// The MAC of `message` (32 bytes).
        func authenticate(_ message: Data) -> Data {
            let innerHash = message.withUnsafeBytes { Crypto.sha256(from: inner, absorbed: 64, $0) }.digest
            return innerHash.withUnsafeBytes { Crypto.sha256(from: outer, absorbed: 64, $0) }.digest
        }
    }

    package static func hmacSHA256(key: Data, message: Data) -> Data {
        HMACSHA256(key: key).authenticate(message)
    }

    /// PBKDF2 with HMAC-SHA256, one 32-byte block (what CouchDB stores as `derived_key`).
    ///
    /// Each iteration is exactly two compressions: the HMAC's key-pad states are computed once, and the
    /// 32-byte U value with its fixed padding (total length 64 + 32 bytes) forms one block that is set up
    /// once, so the loop only copies eight words in and out.
    package static func pbkdf2SHA256(password: Data, salt: Data, iterations: Int) -> Data {
        let mac = HMACSHA256(key: password)
        // U1 = HMAC(password, salt || INT(1))
        let u1 = mac.authenticate(salt + Data([0, 0, 0, 1]))
        // inner, outer, state, u, result: 8 words each; then the 64-word schedule.
        let scratch = UnsafeMutablePointer<UInt32>.allocate(capacity: 5 * 8 + 64)
        defer { scratch.deallocate() }
        let innerState = scratch
        let outerState = scratch + 8
        let state = scratch + 16
        let u = scratch + 24
        let result = scratch + 32
        let w = scratch + 40
        mac.inner.store(innerState)
        mac.outer.store(outerState)
        u1.withUnsafeBytes { raw in
            for j in 0..<8 {
                u[j] = UInt32(bigEndian: raw.loadUnaligned(fromByteOffset: j * 4, as: UInt32.self))
                result[j] = u[j]
            }
        }
        // The padding of a 32-byte message after a 64-byte key block: it never changes (the compression
        // function keeps w[0..<16]).
        w[8] = 0x8000_0000
        for j in 9..<15 { w[j] = 0 }
        w[15] = (64 + 32) * 8
        var n = 1
        while n < iterations {
            var j = 0
            while j < 8 {
                state[j] = innerState[j]
                w[j] = u[j]
                j &+= 1
            }
            sha256Compress(state, w)
            j = 0
            while j < 8 {
                w[j] = state[j]
                state[j] = outerState[j]
                j &+= 1
            }
            sha256Compress(state, w)
            j = 0
            while j < 8 {
                u[j] = state[j]
                result[j] ^= state[j]
                j &+= 1
            }
            n &+= 1
        }
        return SHA256State(UnsafePointer(result)).digest
    }

    // MARK: CRC-32

    static let crcTable: [UInt32] = (0..<256).map { n -> UInt32 in
        var c = UInt32(n)
        for _ in 0..<8 { c = (c & 1) != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    static func crc32(_ data: Data) -> UInt32 {
        var c: UInt32 = 0xFFFF_FFFF
        crcTable.withUnsafeBufferPointer { table in
            data.withUnsafeBytes { raw in
                for byte in raw { c = table[Int((c ^ UInt32(byte)) & 0xFF)] ^ (c &>> 8) }
            }
        }
        return c ^ 0xFFFF_FFFF
    }

    // MARK: Encodings

    package static func hex(_ data: Data) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(data.count * 2)
        for b in data {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    package static func fromHex(_ text: String) -> Data? {
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

    /// `data` in unpadded base64url (RFC 4648 §5: `-` and `_` for `+` and `/`, no `=`). Written out rather than
    /// made from Foundation's base64 with three string replacements: every `_changes` row's sequence is one.
    package static func base64URL(_ data: Data) -> String {
        let alphabet = base64URLAlphabet
        var out: [UInt8] = []
        out.reserveCapacity((data.count * 4 + 2) / 3)
        data.withUnsafeBytes { raw in
            let bytes = raw.bindMemory(to: UInt8.self)
            var i = 0
            while i + 3 <= bytes.count {
                let v = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
                out.append(alphabet[Int(v >> 18)])
                out.append(alphabet[Int((v >> 12) & 63)])
                out.append(alphabet[Int((v >> 6) & 63)])
                out.append(alphabet[Int(v & 63)])
                i += 3
            }
            let rest = bytes.count - i
            if rest > 0 {
                let v = UInt32(bytes[i]) << 16 | (rest == 2 ? UInt32(bytes[i + 1]) << 8 : 0)
                out.append(alphabet[Int(v >> 18)])
                out.append(alphabet[Int((v >> 12) & 63)])
                if rest == 2 { out.append(alphabet[Int((v >> 6) & 63)]) }
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static let base64URLAlphabet: [UInt8] = Array(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    package static func fromBase64URL(_ text: String) -> Data? {
        var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        guard s.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "+" || $0 == "/" || $0 == "=") }) else {
            return nil
        }
        s = s.replacingOccurrences(of: "=", with: "")
        while s.count % 4 != 0 { s += "=" }
        return Data(base64Encoded: s)
    }

    package static func randomBytes(_ count: Int) -> Data {
        var g = SystemRandomNumberGenerator()
        return Data((0..<count).map { _ in UInt8.random(in: 0...255, using: &g) })
    }

    /// An opaque, upper-case base-36 token (25 characters) as CouchDB uses for ETags it does not derive from a rev.
    package static func opaqueToken(_ text: String) -> String {
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
