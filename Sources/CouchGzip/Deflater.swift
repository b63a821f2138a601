/// Writes bits least-significant first, as DEFLATE orders them.
struct BitWriter {
    private(set) var bytes: [UInt8] = []
    private var buffer: UInt64 = 0
    private var count = 0

    init(capacity: Int) { bytes.reserveCapacity(capacity) }

    /// Appends the low `n` bits of `value` (n <= 32).
    @inline(__always)
    mutating func write(_ value: UInt32, _ n: Int) {
        buffer |= UInt64(value) << UInt64(count)
        count += n
        if count >= 32 {
            let word = UInt32(truncatingIfNeeded: buffer)
            bytes.append(UInt8(truncatingIfNeeded: word))
            bytes.append(UInt8(truncatingIfNeeded: word >> 8))
            bytes.append(UInt8(truncatingIfNeeded: word >> 16))
            bytes.append(UInt8(truncatingIfNeeded: word >> 24))
            buffer >>= 32
            count -= 32
        }
    }

    /// Pads with zero bits to a byte boundary and moves every whole byte to `bytes`.
    mutating func flush() {
        while count > 0 {
            bytes.append(UInt8(truncatingIfNeeded: buffer))
            buffer >>= 8
            count = max(count - 8, 0)
        }
        buffer = 0
    }

    /// Appends whole bytes (the writer must be byte-aligned: call ``flush()`` first).
    mutating func appendBytes(_ data: some Sequence<UInt8>) {
        flush()
        bytes.append(contentsOf: data)
    }
}

/// A DEFLATE (RFC 1951) compressor: LZ77 with hash chains over a 32 KiB window and lazy matching, then
/// per block the cheapest of dynamic Huffman, fixed Huffman or stored.
enum Deflater {
    private struct Config {
        let good: Int
        let lazy: Int
        let nice: Int
        let chain: Int
        let lazyMatching: Bool
    }

    /// zlib's parameters per level.
    private static let configs: [Config] = [
        Config(good: 0, lazy: 0, nice: 0, chain: 0, lazyMatching: false),
        Config(good: 4, lazy: 4, nice: 8, chain: 4, lazyMatching: false),
        Config(good: 4, lazy: 5, nice: 16, chain: 8, lazyMatching: false),
        Config(good: 4, lazy: 6, nice: 32, chain: 32, lazyMatching: false),
        Config(good: 4, lazy: 4, nice: 16, chain: 16, lazyMatching: true),
        Config(good: 8, lazy: 16, nice: 32, chain: 32, lazyMatching: true),
        Config(good: 8, lazy: 16, nice: 128, chain: 128, lazyMatching: true),
        Config(good: 8, lazy: 32, nice: 128, chain: 256, lazyMatching: true),
        Config(good: 32, lazy: 128, nice: 258, chain: 1024, lazyMatching: true),
        Config(good: 32, lazy: 258, nice: 258, chain: 4096, lazyMatching: true),
    ]

    static let windowSize = 32 * 1024
    static let windowMask = windowSize - 1
    static let hashBits = 15
    static let minMatch = 3
    static let maxMatch = 258
    static let maxDistance = windowSize - 1
    static let blockSymbols = 16 * 1024

    /// Length code (0...28) per match length - 3.
    static let lengthCodes: [UInt8] = {
        var codes = [UInt8](repeating: 0, count: 256)
        for code in 0..<29 {
            let info = HuffmanDecoder.lengthInfo[code]
            let base = Int(info >> 4)
            let extra = Int(info & 0xF)
            let end = code == 28 ? 259 : base + (1 << extra)
            for length in base..<end where length - 3 < 256 { codes[length - 3] = UInt8(code) }
        }
        codes[255] = 28
        return codes
    }()

    /// Distance code per distance - 1 for distances up to 256, then per (distance - 1) >> 7.
    static let distanceCodes: [UInt8] = {
        var codes = [UInt8](repeating: 0, count: 512)
        for code in 0..<30 {
            let info = HuffmanDecoder.distanceInfo[code]
            let base = Int(info >> 4)
            let extra = Int(info & 0xF)
            for distance in base..<(base + (1 << extra)) {
                if distance <= 256 { codes[distance - 1] = UInt8(code) }
                if distance > 256 { codes[256 + ((distance - 1) >> 7)] = UInt8(code) }
            }
        }
        return codes
    }()

    @inline(__always)
    static func distanceCode(_ distance: Int) -> Int {
        distance <= 256 ? Int(distanceCodes[distance - 1]) : Int(distanceCodes[256 + ((distance - 1) >> 7)])
    }

    /// Compresses `input` as a sequence of DEFLATE blocks, the last one final.
    static func deflate(_ input: UnsafeBufferPointer<UInt8>, level: Int, into writer: inout BitWriter) {
        if input.isEmpty {
            writer.write(0b011, 3)  // final, fixed Huffman, then end-of-block (seven zero bits)
            writer.write(0, 7)
            return
        }
        if level == 0 {
            writeStored(input, 0..<input.count, final: true, into: &writer)
            return
        }
        var encoder = BlockEncoder()
        matchAll(input, config: configs[level], encoder: &encoder, writer: &writer)
        encoder.flush(input, final: true, writer: &writer)
    }

    /// Writes `range` of `input` as stored blocks of at most 65,535 bytes.
    static func writeStored(
        _ input: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, final: Bool, into writer: inout BitWriter
    ) {
        var start = range.lowerBound
        repeat {
            let count = min(65_535, range.upperBound - start)
            let last = start + count == range.upperBound
            writer.write(final && last ? 1 : 0, 3)
            writer.flush()
            writer.appendBytes([
                UInt8(count & 0xFF), UInt8(count >> 8), UInt8(~count & 0xFF), UInt8((~count >> 8) & 0xFF),
            ])
            writer.appendBytes(UnsafeBufferPointer(rebasing: input[start..<(start + count)]))
            start += count
        } while start < range.upperBound
    }

    @inline(__always)
    private static func hash(_ p: UnsafePointer<UInt8>, _ i: Int) -> Int {
        let value = UInt32(p[i]) << 16 | UInt32(p[i + 1]) << 8 | UInt32(p[i + 2])
        return Int((value &* 0x9E37_79B1) >> UInt32(32 - hashBits))
    }

    /// Length of the common prefix of `p[a...]` and `p[b...]`, at most `limit`.
    @inline(__always)
    private static func matchLength(_ p: UnsafePointer<UInt8>, _ a: Int, _ b: Int, _ limit: Int) -> Int {
        var length = 0
        let raw = UnsafeRawPointer(p)
        while length + 8 <= limit {
            let x = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: a + length, as: UInt64.self))
            let y = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: b + length, as: UInt64.self))
            let difference = x ^ y
            if difference != 0 { return length + difference.trailingZeroBitCount >> 3 }
            length += 8
        }
        while length < limit && p[a + length] == p[b + length] { length += 1 }
        return length
    }

    /// Runs LZ77 over the whole input, handing literals and matches to `encoder`, which writes a block
    /// whenever its buffer fills.
    private static func matchAll(
        _ input: UnsafeBufferPointer<UInt8>, config: Config, encoder: inout BlockEncoder, writer: inout BitWriter
    ) {
        let n = input.count
        let p = input.baseAddress!
        var head = [Int32](repeating: -1, count: 1 << hashBits)
        var prev = [Int32](repeating: -1, count: windowSize)
        head.withUnsafeMutableBufferPointer { head in
            prev.withUnsafeMutableBufferPointer { prev in
                /// Inserts position `i` (needs three bytes) and returns the previous chain head.
                @inline(__always)
                func insert(_ i: Int) -> Int {
                    let h = hash(p, i)
                    let previous = head[h]
                    prev[i & windowMask] = previous
                    head[h] = Int32(truncatingIfNeeded: i)
                    return Int(previous)
                }

                /// The longest match for position `i` along the chain from `start`, if longer than `best`.
                @inline(__always)
                func longestMatch(_ i: Int, _ start: Int, _ best: Int) -> (length: Int, position: Int) {
                    let limit = min(maxMatch, n - i)
                    var bestLength = best
                    var bestPosition = -1
                    guard limit >= minMatch else { return (0, -1) }
                    var chain = best >= config.good ? config.chain >> 2 : config.chain
                    let lowest = i - maxDistance
                    var candidate = start
                    while candidate >= 0 && candidate >= lowest && candidate < i {
                        if bestLength < limit && p[candidate + bestLength] == p[i + bestLength]
                            && p[candidate] == p[i]
                        {
                            let length = matchLength(p, candidate, i, limit)
                            if length > bestLength {
                                bestLength = length
                                bestPosition = candidate
                                if length >= config.nice || length == limit { break }
                            }
                        }
                        chain -= 1
                        if chain <= 0 { break }
                        let next = Int(prev[candidate & windowMask])
                        if next >= candidate { break }
                        candidate = next
                    }
                    return bestPosition < 0 ? (0, -1) : (bestLength, bestPosition)
                }

                var i = 0
                if !config.lazyMatching {
                    while i < n {
                        var length = 0
                        var position = -1
                        if i + minMatch <= n {
                            let start = insert(i)
                            if start >= 0 { (length, position) = longestMatch(i, start, minMatch - 1) }
                        }
                        if length >= minMatch {
                            encoder.addMatch(length: length, distance: i - position, input: input, writer: &writer)
                            if length <= config.lazy {
                                for j in (i + 1)..<(i + length) where j + minMatch <= n { _ = insert(j) }
                            }
                            i += length
                        } else {
                            encoder.addLiteral(p[i], input: input, writer: &writer)
                            i += 1
                        }
                    }
                    return
                }

                var previousLength = 0
                var previousPosition = -1
                var literalPending = false
                while i < n {
                    var length = 0
                    var position = -1
                    if i + minMatch <= n {
                        let start = insert(i)
                        if start >= 0 && previousLength < config.lazy {
                            (length, position) = longestMatch(i, start, max(previousLength, minMatch - 1))
                            if length == minMatch && i - position > 4096 { length = 0 }
                        }
                    }
                    if previousLength >= minMatch && length <= previousLength {
                        encoder.addMatch(
                            length: previousLength, distance: i - 1 - previousPosition, input: input, writer: &writer)
                        let end = i - 1 + previousLength
                        var j = i + 1
                        while j < end {
                            if j + minMatch <= n { _ = insert(j) }
                            j += 1
                        }
                        i = end
                        previousLength = 0
                        literalPending = false
                        continue
                    }
                    if literalPending { encoder.addLiteral(p[i - 1], input: input, writer: &writer) }
                    literalPending = true
                    previousLength = length
                    previousPosition = position
                    i += 1
                }
                if literalPending { encoder.addLiteral(p[n - 1], input: input, writer: &writer) }
            }
        }
    }
}

/// Collects one block's literals and matches, then writes it with the cheapest encoding.
struct BlockEncoder {
    /// Per symbol: a literal byte, or a match length (3...258) when the distance is not 0.
    private var values = [UInt16](repeating: 0, count: Deflater.blockSymbols)
    private var distances = [UInt16](repeating: 0, count: Deflater.blockSymbols)
    private var symbolCount = 0
    private var literalFrequencies = [Int](repeating: 0, count: 286)
    private var distanceFrequencies = [Int](repeating: 0, count: 30)
    /// Input range the buffered symbols cover.
    private var blockStart = 0
    private var blockEnd = 0

    @inline(__always)
    mutating func addLiteral(_ byte: UInt8, input: UnsafeBufferPointer<UInt8>, writer: inout BitWriter) {
        values[symbolCount] = UInt16(byte)
        distances[symbolCount] = 0
        symbolCount += 1
        literalFrequencies[Int(byte)] += 1
        blockEnd += 1
        if symbolCount == Deflater.blockSymbols { flush(input, final: false, writer: &writer) }
    }

    @inline(__always)
    mutating func addMatch(length: Int, distance: Int, input: UnsafeBufferPointer<UInt8>, writer: inout BitWriter) {
        values[symbolCount] = UInt16(length)
        distances[symbolCount] = UInt16(distance)
        symbolCount += 1
        literalFrequencies[257 + Int(Deflater.lengthCodes[length - 3])] += 1
        distanceFrequencies[Deflater.distanceCode(distance)] += 1
        blockEnd += length
        if symbolCount == Deflater.blockSymbols { flush(input, final: false, writer: &writer) }
    }

    /// Writes the buffered symbols as one block (or stored blocks) and starts a new block.
    mutating func flush(_ input: UnsafeBufferPointer<UInt8>, final: Bool, writer: inout BitWriter) {
        literalFrequencies[256] = 1
        let literalLengths = Huffman.lengths(literalFrequencies, limit: 15)
        let distanceLengths = Huffman.lengths(distanceFrequencies, limit: 15)

        var extraBits = 0
        for code in 0..<29 { extraBits += literalFrequencies[257 + code] * Int(HuffmanDecoder.lengthInfo[code] & 0xF) }
        for code in 0..<30 { extraBits += distanceFrequencies[code] * Int(HuffmanDecoder.distanceInfo[code] & 0xF) }

        // Dynamic header: counts, then code lengths run-length coded with the code-length code.
        var literalCount = 286
        while literalCount > 257 && literalLengths[literalCount - 1] == 0 { literalCount -= 1 }
        var distanceCount = 30
        while distanceCount > 1 && distanceLengths[distanceCount - 1] == 0 { distanceCount -= 1 }
        let runs = Huffman.runLengths(Array(literalLengths[0..<literalCount]) + distanceLengths[0..<distanceCount])
        var codeLengthFrequencies = [Int](repeating: 0, count: 19)
        for run in runs { codeLengthFrequencies[Int(run.symbol)] += 1 }
        let codeLengthLengths = Huffman.lengths(codeLengthFrequencies, limit: 7)
        let order = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15]
        var codeLengthCount = 19
        while codeLengthCount > 4 && codeLengthLengths[order[codeLengthCount - 1]] == 0 { codeLengthCount -= 1 }

        var dynamicBits = 3 + 14 + 3 * codeLengthCount + extraBits
        for symbol in 0..<19 {
            dynamicBits += codeLengthFrequencies[symbol] * Int(codeLengthLengths[symbol])
        }
        for run in runs { dynamicBits += Int(run.extraBits) }
        var fixedBits = 3 + extraBits
        for symbol in 0..<286 {
            dynamicBits += literalFrequencies[symbol] * Int(literalLengths[symbol])
            fixedBits += literalFrequencies[symbol] * Huffman.fixedLiteralLength(symbol)
        }
        for symbol in 0..<30 {
            dynamicBits += distanceFrequencies[symbol] * Int(distanceLengths[symbol])
            fixedBits += distanceFrequencies[symbol] * 5
        }
        let storedBlocks = max(1, (blockEnd - blockStart + 65_534) / 65_535)
        let storedBits = (blockEnd - blockStart) * 8 + storedBlocks * (3 + 7 + 32)

        if storedBits < dynamicBits && storedBits < fixedBits {
            Deflater.writeStored(input, blockStart..<blockEnd, final: final, into: &writer)
        } else if fixedBits <= dynamicBits {
            writer.write(final ? 0b011 : 0b010, 3)
            writeSymbols(
                Huffman.fixedLiteralCodes, Huffman.fixedLiteralLengthTable, Huffman.fixedDistanceCodes,
                Huffman.fixedDistanceLengthTable, writer: &writer)
        } else {
            writer.write(final ? 0b101 : 0b100, 3)
            writer.write(UInt32(literalCount - 257), 5)
            writer.write(UInt32(distanceCount - 1), 5)
            writer.write(UInt32(codeLengthCount - 4), 4)
            for k in 0..<codeLengthCount { writer.write(UInt32(codeLengthLengths[order[k]]), 3) }
            let codeLengthCodes = Huffman.codes(codeLengthLengths)
            for run in runs {
                let symbol = Int(run.symbol)
                writer.write(codeLengthCodes[symbol], Int(codeLengthLengths[symbol]))
                switch symbol {
                case 16: writer.write(UInt32(run.extra), 2)
                case 17: writer.write(UInt32(run.extra), 3)
                case 18: writer.write(UInt32(run.extra), 7)
                default: break
                }
            }
            writeSymbols(
                Huffman.codes(literalLengths), literalLengths, Huffman.codes(distanceLengths),
                distanceLengths, writer: &writer)
        }

        symbolCount = 0
        for k in 0..<286 { literalFrequencies[k] = 0 }
        for k in 0..<30 { distanceFrequencies[k] = 0 }
        blockStart = blockEnd
    }

    private func writeSymbols(
        _ literalCodes: [UInt32], _ literalLengths: [UInt8], _ distanceCodes: [UInt32], _ distanceLengths: [UInt8],
        writer: inout BitWriter
    ) {
        for k in 0..<symbolCount {
            let value = Int(values[k])
            let distance = Int(distances[k])
            if distance == 0 {
                writer.write(literalCodes[value], Int(literalLengths[value]))
                continue
            }
            let lengthCode = Int(Deflater.lengthCodes[value - 3])
            writer.write(literalCodes[257 + lengthCode], Int(literalLengths[257 + lengthCode]))
            let lengthInfo = HuffmanDecoder.lengthInfo[lengthCode]
            let lengthExtra = Int(lengthInfo & 0xF)
            if lengthExtra > 0 { writer.write(UInt32(value - Int(lengthInfo >> 4)), lengthExtra) }
            let distanceCode = Deflater.distanceCode(distance)
            writer.write(distanceCodes[distanceCode], Int(distanceLengths[distanceCode]))
            let distanceInfo = HuffmanDecoder.distanceInfo[distanceCode]
            let distanceExtra = Int(distanceInfo & 0xF)
            if distanceExtra > 0 { writer.write(UInt32(distance - Int(distanceInfo >> 4)), distanceExtra) }
        }
        writer.write(literalCodes[256], Int(literalLengths[256]))
    }
}

/// Building Huffman codes for the compressor.
enum Huffman {
    /// Code lengths (at most `limit` bits) for the given symbol frequencies; unused symbols get 0. At least
    /// two symbols get a code, as zlib does, so every code is complete.
    static func lengths(_ frequencies: [Int], limit: Int) -> [UInt8] {
        var weights = frequencies
        var used = weights.indices.filter { weights[$0] > 0 }
        var filler = 0
        while used.count < 2 {
            if weights[filler] == 0 {
                weights[filler] = 1
                used.append(filler)
            }
            filler += 1
        }
        while true {
            let result = unlimitedLengths(weights, used)
            if result.max()! <= limit { return result }
            // Too deep: flatten the distribution and try again.
            for symbol in used { weights[symbol] = (weights[symbol] + 1) / 2 }
        }
    }

    private static func unlimitedLengths(_ weights: [Int], _ used: [Int]) -> [UInt8] {
        let leaves = used.sorted { weights[$0] < weights[$1] || (weights[$0] == weights[$1] && $0 < $1) }
        let m = leaves.count
        var weight = [Int](repeating: 0, count: 2 * m - 1)
        var parent = [Int](repeating: 0, count: 2 * m - 1)
        for k in 0..<m { weight[k] = weights[leaves[k]] }
        var nextLeaf = 0
        var nextInner = m
        for node in m..<(2 * m - 1) {
            var children = (0, 0)
            for c in 0..<2 {
                let child: Int
                if nextLeaf < m && (nextInner >= node || weight[nextLeaf] <= weight[nextInner]) {
                    child = nextLeaf
                    nextLeaf += 1
                } else {
                    child = nextInner
                    nextInner += 1
                }
                if c == 0 { children.0 = child } else { children.1 = child }
            }
            weight[node] = weight[children.0] + weight[children.1]
            parent[children.0] = node
            parent[children.1] = node
        }
        var depth = [Int](repeating: 0, count: 2 * m - 1)
        var k = 2 * m - 3
        while k >= 0 {
            depth[k] = depth[parent[k]] + 1
            k -= 1
        }
        var lengths = [UInt8](repeating: 0, count: weights.count)
        for k in 0..<m { lengths[leaves[k]] = UInt8(depth[k]) }
        return lengths
    }

    /// Canonical codes for the lengths, bit-reversed for writing least-significant bit first.
    static func codes(_ lengths: [UInt8]) -> [UInt32] {
        var counts = [Int](repeating: 0, count: 16)
        for length in lengths { counts[Int(length)] += 1 }
        counts[0] = 0
        var next = [Int](repeating: 0, count: 16)
        var code = 0
        for length in 1...15 {
            code = (code + counts[length - 1]) << 1
            next[length] = code
        }
        var codes = [UInt32](repeating: 0, count: lengths.count)
        for (symbol, length) in lengths.enumerated() where length > 0 {
            let len = Int(length)
            let canonical = next[len]
            next[len] += 1
            var reversed = 0
            for bit in 0..<len where canonical & (1 << bit) != 0 { reversed |= 1 << (len - 1 - bit) }
            codes[symbol] = UInt32(reversed)
        }
        return codes
    }

    struct Run {
        let symbol: UInt8
        let extra: UInt8
        var extraBits: UInt8 { symbol == 16 ? 2 : (symbol == 17 ? 3 : (symbol == 18 ? 7 : 0)) }
    }

    /// The code-length sequence as code-length-code symbols: 0...15 literal, 16 repeat, 17/18 zero runs.
    static func runLengths(_ lengths: [UInt8]) -> [Run] {
        var runs: [Run] = []
        var i = 0
        while i < lengths.count {
            let length = lengths[i]
            var run = 1
            while i + run < lengths.count && lengths[i + run] == length { run += 1 }
            i += run
            if length == 0 {
                while run >= 11 {
                    let k = min(run, 138)
                    runs.append(Run(symbol: 18, extra: UInt8(k - 11)))
                    run -= k
                }
                if run >= 3 {
                    runs.append(Run(symbol: 17, extra: UInt8(run - 3)))
                    run = 0
                }
            } else {
                runs.append(Run(symbol: length, extra: 0))
                run -= 1
                while run >= 3 {
                    let k = min(run, 6)
                    runs.append(Run(symbol: 16, extra: UInt8(k - 3)))
                    run -= k
                }
            }
            while run > 0 {
                runs.append(Run(symbol: length, extra: 0))
                run -= 1
            }
        }
        return runs
    }

    static func fixedLiteralLength(_ symbol: Int) -> Int {
        symbol < 144 ? 8 : (symbol < 256 ? 9 : (symbol < 280 ? 7 : 8))
    }

    static let fixedLiteralLengthTable: [UInt8] = (0..<288).map { UInt8(fixedLiteralLength($0)) }
    static let fixedLiteralCodes: [UInt32] = codes(fixedLiteralLengthTable)
    static let fixedDistanceLengthTable = [UInt8](repeating: 5, count: 30)
    static let fixedDistanceCodes: [UInt32] = codes([UInt8](repeating: 5, count: 32))
}
