import Foundation

/// A small gzip compressor (DEFLATE with fixed Huffman codes and zlib-style lazy LZ77 matching), enough to
/// serve compressible attachments gzip-encoded as CouchDB stores them. For short inputs it produces the
/// same bytes as zlib.
enum Gzip {
    static func compress(_ data: Data) -> Data {
        var out = Data([0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03])
        out.append(deflate([UInt8](data)))
        let crc = Crypto.crc32(data)
        let size = UInt32(truncatingIfNeeded: data.count)
        for v in [crc, size] { for i in 0..<4 { out.append(UInt8(truncatingIfNeeded: v >> (8 * UInt32(i)))) } }
        return out
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
    static let compressionLimit = 256 * 1024

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

// MARK: - Decompression

extension Gzip {
    /// Why a body could not be decompressed.
    enum InflateError: Error {
        /// Not gzip, corrupt, truncated, or a checksum that does not match.
        case invalid
        /// The output would be larger than the limit.
        case tooLarge
    }

    /// Decompresses gzip data (one member or several concatenated, as `zlib:gunzip` does), checking each
    /// member's CRC-32 and length. Throws `InflateError` for anything that is not well-formed gzip.
    static func decompress(_ data: Data, limit: Int = 1 << 30) throws(InflateError) -> Data {
        let bytes = [UInt8](data)
        var inflater = Inflater(input: bytes, limit: limit)
        var out = Data()
        repeat {
            try inflater.readHeader()
            let start = inflater.out.count
            try inflater.inflate()
            let crc = try inflater.alignedUInt32()
            let size = try inflater.alignedUInt32()
            let member = Data(inflater.out[start...])
            guard Crypto.crc32(member) == crc, UInt32(truncatingIfNeeded: member.count) == size else {
                throw .invalid
            }
            out.append(member)
            inflater.out.removeAll(keepingCapacity: true)
        } while inflater.position < bytes.count
        return out
    }
}

/// A DEFLATE decoder (RFC 1951) over a gzip stream (RFC 1952), with table-driven Huffman decoding.
private struct Inflater {
    let input: [UInt8]
    let limit: Int
    var out: [UInt8] = []
    /// The next input byte not yet in `bitBuffer`.
    var next = 0
    var bitBuffer: UInt64 = 0
    var bitCount = 0
    /// Zero bytes put into `bitBuffer` past the end of the input (an error once any of them is consumed).
    var padding = 0

    init(input: [UInt8], limit: Int) {
        self.input = input
        self.limit = limit
    }

    /// The first input byte not consumed (whole bytes only; valid when byte-aligned).
    var position: Int { next - (bitCount - padding * 8) / 8 }

    mutating func refill() {
        while bitCount <= 56 {
            if next < input.count {
                bitBuffer |= UInt64(input[next]) &<< UInt64(bitCount)
                next += 1
            } else {
                padding += 1
            }
            bitCount += 8
        }
    }

    mutating func consume(_ n: Int) throws(Gzip.InflateError) {
        bitBuffer = bitBuffer &>> UInt64(n)
        bitCount -= n
        if bitCount < padding * 8 { throw .invalid }
    }

    mutating func bits(_ n: Int) throws(Gzip.InflateError) -> Int {
        if bitCount < n { refill() }
        let value = Int(bitBuffer & ((1 &<< UInt64(n)) &- 1))
        try consume(n)
        return value
    }

    /// Drops the bits up to the next byte boundary and empties the bit buffer back into the input position.
    mutating func align() throws(Gzip.InflateError) {
        try consume(bitCount % 8)
        if padding * 8 > bitCount { throw .invalid }
        next -= bitCount / 8 - padding
        bitBuffer = 0
        bitCount = 0
        padding = 0
    }

    mutating func byte() throws(Gzip.InflateError) -> UInt8 {
        guard next < input.count else { throw .invalid }
        next += 1
        return input[next - 1]
    }

    mutating func alignedUInt32() throws(Gzip.InflateError) -> UInt32 {
        try align()
        var value: UInt32 = 0
        for i in 0..<4 { value |= UInt32(try byte()) &<< UInt32(8 * i) }
        return value
    }

    mutating func readHeader() throws(Gzip.InflateError) {
        try align()
        guard try byte() == 0x1f, try byte() == 0x8b, try byte() == 8 else { throw .invalid }
        let flags = try byte()
        guard flags & 0xe0 == 0 else { throw .invalid }
        for _ in 0..<6 { _ = try byte() }  // mtime, xfl, os
        if flags & 4 != 0 {
            let length = Int(try byte()) | Int(try byte()) << 8
            for _ in 0..<length { _ = try byte() }
        }
        if flags & 8 != 0 { while try byte() != 0 {} }
        if flags & 16 != 0 { while try byte() != 0 {} }
        if flags & 2 != 0 { _ = (try byte(), try byte()) }
    }

    mutating func inflate() throws(Gzip.InflateError) {
        var final = false
        while !final {
            final = try bits(1) == 1
            switch try bits(2) {
            case 0: try storedBlock()
            case 1: try huffmanBlock(Self.fixedLiterals, Self.fixedDistances)
            case 2:
                let (literals, distances) = try dynamicTables()
                try huffmanBlock(literals, distances)
            default: throw .invalid
            }
        }
    }

    mutating func storedBlock() throws(Gzip.InflateError) {
        try align()
        let length = Int(try byte()) | Int(try byte()) << 8
        let complement = Int(try byte()) | Int(try byte()) << 8
        guard length == ~complement & 0xffff, next + length <= input.count else { throw .invalid }
        guard out.count + length <= limit else { throw .tooLarge }
        out.append(contentsOf: input[next..<(next + length)])
        next += length
    }

    private static let lengthBase: [Int] = [
        3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227,
        258,
    ]
    private static let lengthExtra: [Int] = [
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
    ]
    private static let distanceBase: [Int] = [
        1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097,
        6145, 8193, 12289, 16385, 24577,
    ]
    private static let distanceExtra: [Int] = [
        0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13,
    ]
    private static let fixedLiterals = try! Huffman(
        lengths: [UInt8](repeating: 8, count: 144) + [UInt8](repeating: 9, count: 112)
            + [UInt8](repeating: 7, count: 24) + [UInt8](repeating: 8, count: 8))
    private static let fixedDistances = try! Huffman(lengths: [UInt8](repeating: 5, count: 30))

    mutating func decode(_ code: Huffman) throws(Gzip.InflateError) -> Int {
        if bitCount < code.maxBits { refill() }
        let entry = Int(code.table[Int(bitBuffer & UInt64(code.table.count - 1))])
        let length = entry & 15
        guard length > 0 else { throw .invalid }
        try consume(length)
        return entry >> 4
    }

    mutating func huffmanBlock(_ literals: Huffman, _ distances: Huffman) throws(Gzip.InflateError) {
        while true {
            let symbol = try decode(literals)
            if symbol < 256 {
                guard out.count < limit else { throw .tooLarge }
                out.append(UInt8(symbol))
            } else if symbol == 256 {
                return
            } else {
                let index = symbol - 257
                guard index < 29 else { throw .invalid }
                let length = Self.lengthBase[index] + (try bits(Self.lengthExtra[index]))
                let distanceCode = try decode(distances)
                guard distanceCode < 30 else { throw .invalid }
                let distance = Self.distanceBase[distanceCode] + (try bits(Self.distanceExtra[distanceCode]))
                guard distance <= out.count else { throw .invalid }
                guard out.count + length <= limit else { throw .tooLarge }
                var from = out.count - distance
                for _ in 0..<length {
                    out.append(out[from])
                    from += 1
                }
            }
        }
    }

    private static let codeLengthOrder = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15]

    mutating func dynamicTables() throws(Gzip.InflateError) -> (Huffman, Huffman) {
        let literalCount = try bits(5) + 257
        let distanceCount = try bits(5) + 1
        let codeLengthCount = try bits(4) + 4
        guard literalCount <= 286, distanceCount <= 30 else { throw .invalid }
        var codeLengths = [UInt8](repeating: 0, count: 19)
        for i in 0..<codeLengthCount { codeLengths[Self.codeLengthOrder[i]] = UInt8(try bits(3)) }
        let lengthCode = try Huffman(lengths: codeLengths)
        var lengths: [UInt8] = []
        lengths.reserveCapacity(literalCount + distanceCount)
        while lengths.count < literalCount + distanceCount {
            let symbol = try decode(lengthCode)
            switch symbol {
            case 0..<16:
                lengths.append(UInt8(symbol))
            case 16:
                guard let last = lengths.last else { throw .invalid }
                lengths.append(contentsOf: repeatElement(last, count: 3 + (try bits(2))))
            case 17:
                lengths.append(contentsOf: repeatElement(0, count: 3 + (try bits(3))))
            default:
                lengths.append(contentsOf: repeatElement(0, count: 11 + (try bits(7))))
            }
        }
        guard lengths.count == literalCount + distanceCount, lengths[256] > 0 else { throw .invalid }
        return (
            try Huffman(lengths: Array(lengths[..<literalCount])), try Huffman(lengths: Array(lengths[literalCount...]))
        )
    }
}

/// A canonical Huffman code as a lookup table indexed by the next `maxBits` input bits (least significant
/// first); each entry is `symbol << 4 | code length`, 0 where no code matches.
private struct Huffman {
    let table: [UInt16]
    let maxBits: Int

    init(lengths: [UInt8]) throws(Gzip.InflateError) {
        var counts = [Int](repeating: 0, count: 16)
        for length in lengths { counts[Int(length)] += 1 }
        counts[0] = 0
        var left = 1
        for bits in 1...15 {
            left = left * 2 - counts[bits]
            if left < 0 { throw .invalid }  // over-subscribed
        }
        let maxBits = max(1, lengths.max().map(Int.init) ?? 1)
        var nextCode = [Int](repeating: 0, count: 16)
        var code = 0
        for bits in 1...15 {
            code = (code + counts[bits - 1]) << 1
            nextCode[bits] = code
        }
        var table = [UInt16](repeating: 0, count: 1 << maxBits)
        for (symbol, length) in lengths.enumerated() where length > 0 {
            let bits = Int(length)
            let code = nextCode[bits]
            nextCode[bits] += 1
            var reversed = 0
            for i in 0..<bits where code & (1 << i) != 0 { reversed |= 1 << (bits - 1 - i) }
            var slot = reversed
            while slot < table.count {
                table[slot] = UInt16(symbol << 4 | bits)
                slot += 1 << bits
            }
        }
        self.table = table
        self.maxBits = maxBits
    }
}
