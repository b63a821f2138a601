import Foundation

/// A second, deliberately simple gzip compressor: DEFLATE with fixed Huffman codes and zlib-style
/// lazy LZ77 matching, for the TestServer.
///
/// It exists beside ``Gzip/compress(_:level:format:)`` because it must reproduce CouchDB's bytes,
/// not just valid gzip: CouchDB stores compressible attachments gzip'd by zlib, and their
/// `encoded_length` and the bytes served with `Content-Encoding: gzip` are part of the recorded
/// transcripts the TestServer is checked against. For inputs up to ``compressionLimit`` this
/// produces the same bytes as zlib does for those attachments; above it, stored blocks (valid gzip,
/// fast even in debug builds). Decompression has one implementation for everyone: ``Gzip`` and
/// ``GzipInflater``.
public enum ZlibCompatibleGzip {
    /// Compresses `data` into one gzip member (no file name, mtime 0, OS 3), as the TestServer
    /// stores and serves compressible attachments.
    public static func compress(_ data: Data) -> Data {
        var out = Data([0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03])
        let input = [UInt8](data)
        out.append(deflate(input))
        let crc = CRC32.update(0, input)
        let size = UInt32(truncatingIfNeeded: data.count)
        for v in [crc, size] { for i in 0..<4 { out.append(UInt8(truncatingIfNeeded: v >> (8 * UInt32(i)))) } }
        return out
    }

    /// Produces ``compress(_:)``'s bytes for an input longer than ``compressionLimit`` (stored blocks) piece by
    /// piece, so that a large input (an attachment read from a file) is never held whole. The input's length is
    /// fixed in advance, which also gives the output's (``encodedLength(ofInput:)``, for `Content-Length`).
    ///
    /// ```swift
    /// var encoder = ZlibCompatibleGzip.StreamEncoder(inputLength: total)
    /// send(encoder.header)
    /// for piece in pieces { send(encoder.encode(piece)) }  // the last piece's output ends with the trailer
    /// ```
    public struct StreamEncoder: Sendable {
        /// The length of the whole input.
        public let inputLength: Int
        private var encoded = 0
        private var carry: [UInt8] = []
        private var crc: UInt32 = 0
        private var finished = false

        /// An encoder for an input of `inputLength` bytes (more than ``compressionLimit`` for the output to be
        /// ``compress(_:)``'s; a negative length counts as 0).
        public init(inputLength: Int) {
            self.inputLength = max(inputLength, 0)
        }

        /// The length of the gzip member for an input of `length` bytes longer than ``compressionLimit``: the
        /// header, the stored blocks (5 bytes each before at most 65535 bytes of input), the trailer.
        public static func encodedLength(ofInput length: Int) -> Int {
            // At most Int.max / 2 (no real input comes near), so the sum cannot overflow.
            let n = min(max(length, 0), Int.max / 2)
            return 10 + n + 5 * max(1, (n + 65534) / 65535) + 8
        }

        /// The gzip header (what ``compress(_:)``'s output begins with).
        public var header: Data { Data([0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03]) }

        /// The output for the next `piece` of input: every stored block it completes (a partial block waits for
        /// the next piece), and the trailer once the whole input was given. Input past ``inputLength`` is ignored.
        public mutating func encode(_ piece: Data) -> Data {
            let room = inputLength - encoded - carry.count
            var input = carry
            input.append(contentsOf: piece.prefix(max(room, 0)))
            crc = input.withUnsafeBufferPointer { all in
                CRC32.update(crc, UnsafeBufferPointer(rebasing: all[carry.count...]))
            }
            var out = Data()
            var start = 0
            while !finished {
                let length = min(65535, inputLength - encoded)
                guard input.count - start >= length else { break }
                let final = encoded + length == inputLength
                out.append(final ? 1 : 0)
                out.append(UInt8(length & 0xff))
                out.append(UInt8(length >> 8))
                out.append(UInt8(~length & 0xff))
                out.append(UInt8((~length >> 8) & 0xff))
                out.append(contentsOf: input[start..<(start + length)])
                start += length
                encoded += length
                if final {
                    let size = UInt32(truncatingIfNeeded: inputLength)
                    for v in [crc, size] {
                        for i in 0..<4 { out.append(UInt8(truncatingIfNeeded: v >> (8 * UInt32(i)))) }
                    }
                    finished = true
                }
            }
            carry = Array(input[start...])
            return out
        }
    }

    /// DEFLATE "stored" blocks: the bytes as they are, in chunks of at most 65535.
    private static func stored(_ input: [UInt8]) -> Data {
        var out = Data(capacity: input.count + input.count / 65535 * 5 + 5)
        var offset = 0
        repeat {
            let length = min(65535, input.count - offset)
            let final: UInt8 = offset + length >= input.count ? 1 : 0
            out.append(final)
            out.append(UInt8(length & 0xff))
            out.append(UInt8(length >> 8))
            out.append(UInt8(~length & 0xff))
            out.append(UInt8((~length >> 8) & 0xff))
            out.append(contentsOf: input[offset..<(offset + length)])
            offset += length
        } while offset < input.count
        return out
    }

    private struct BitWriter {
        var bytes: [UInt8] = []
        var current: UInt32 = 0
        var count: UInt32 = 0

        mutating func write(_ value: UInt32, _ bits: UInt32) {
            current |= value << count
            count += bits
            while count >= 8 {
                bytes.append(UInt8(truncatingIfNeeded: current))
                current >>= 8
                count -= 8
            }
        }

        /// Writes a Huffman code (most significant bit first).
        mutating func writeCode(_ code: UInt32, _ bits: UInt32) {
            var reversed: UInt32 = 0
            var c = code
            for _ in 0..<bits {
                reversed = (reversed << 1) | (c & 1)
                c >>= 1
            }
            write(reversed, bits)
        }

        mutating func flush() {
            if count > 0 { bytes.append(UInt8(truncatingIfNeeded: current)) }
            current = 0
            count = 0
        }
    }

    private static let lengthBase: [Int] = [
        3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227,
        258,
    ]
    private static let lengthExtra: [UInt32] = [
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
    ]
    private static let distBase: [Int] = [
        1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097,
        6145, 8193, 12289, 16385, 24577,
    ]
    private static let distExtra: [UInt32] = [
        0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13,
    ]

    private static func writeLiteral(_ w: inout BitWriter, _ v: Int) {
        switch v {
        case 0...143: w.writeCode(UInt32(0x30 + v), 8)
        case 144...255: w.writeCode(UInt32(0x190 + v - 144), 9)
        case 256...279: w.writeCode(UInt32(v - 256), 7)
        default: w.writeCode(UInt32(0xC0 + v - 280), 8)
        }
    }

    private static func writeMatch(_ w: inout BitWriter, length: Int, distance: Int) {
        var li = lengthBase.count - 1
        while lengthBase[li] > length { li -= 1 }
        writeLiteral(&w, 257 + li)
        if lengthExtra[li] > 0 { w.write(UInt32(length - lengthBase[li]), lengthExtra[li]) }
        var di = distBase.count - 1
        while distBase[di] > distance { di -= 1 }
        w.writeCode(UInt32(di), 5)
        if distExtra[di] > 0 { w.write(UInt32(distance - distBase[di]), distExtra[di]) }
    }

    /// Inputs above this size are stored uncompressed (valid gzip, fast even in debug builds).
    public static let compressionLimit = 256 * 1024

    private static func deflate(_ input: [UInt8]) -> Data {
        if input.count > compressionLimit { return stored(input) }
        var w = BitWriter()
        w.write(1, 1)  // BFINAL
        w.write(1, 2)  // fixed Huffman
        let n = input.count
        let windowSize = 32768
        let maxChain = 1024
        let niceLength = 128
        var head = [Int](repeating: -1, count: 1 << 15)
        var prev = [Int](repeating: -1, count: max(n, 1))
        func hash(_ i: Int) -> Int {
            (Int(input[i]) << 10 ^ Int(input[i + 1]) << 5 ^ Int(input[i + 2])) & 0x7FFF
        }
        func insert(_ i: Int) {
            guard i + 2 < n else { return }
            let h = hash(i)
            prev[i] = head[h]
            head[h] = i
        }
        func longestMatch(_ i: Int, atLeast: Int) -> (Int, Int) {
            guard i + 2 < n else { return (0, 0) }
            var best = atLeast
            var bestDist = 0
            var candidate = head[hash(i)]
            var chain = maxChain
            let maxLen = min(258, n - i)
            // Like zlib, position 0 doubles as the empty-chain marker, so it is never matched against.
            while candidate > 0, i - candidate <= windowSize - 262, chain > 0 {
                if candidate < i {
                    var len = 0
                    while len < maxLen, input[candidate + len] == input[i + len] { len += 1 }
                    if len > best {
                        best = len
                        bestDist = i - candidate
                        if len >= niceLength { break }
                    }
                }
                candidate = prev[candidate]
                chain -= 1
            }
            return bestDist == 0 ? (0, 0) : (best, bestDist)
        }
        var i = 0
        var prevLength = 2
        var prevDist = 0
        var matchAvailable = false
        while i < n {
            var (matchLength, matchDist) = longestMatch(i, atLeast: 2)
            if matchLength == 3, matchDist > 4096 { matchLength = 0 }
            insert(i)
            if prevLength >= 3, matchLength <= prevLength {
                writeMatch(&w, length: prevLength, distance: prevDist)
                let end = i - 1 + prevLength
                var j = i + 1
                while j < end {
                    insert(j)
                    j += 1
                }
                i = end
                prevLength = 2
                matchAvailable = false
                continue
            }
            if matchAvailable { writeLiteral(&w, Int(input[i - 1])) }
            matchAvailable = true
            prevLength = matchLength >= 3 ? matchLength : 2
            prevDist = matchDist
            i += 1
        }
        if matchAvailable { writeLiteral(&w, Int(input[n - 1])) }
        writeLiteral(&w, 256)
        w.flush()
        return Data(w.bytes)
    }
}
