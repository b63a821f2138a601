import Foundation

/// Decompresses a gzip, zlib or raw DEFLATE stream chunk by chunk, in constant memory.
///
/// Feed the body as it arrives; each call returns the output it produced. Between calls the inflater
/// keeps only the last 32 KiB of output (the DEFLATE window) and a few bytes of input, so a body of any
/// size is decompressed in constant memory (plus the output of one chunk). Corrupt data throws a
/// ``GzipError``; output beyond `maximumSize` throws ``GzipError/outputTooLarge(limit:)``.
///
/// ```swift
/// var inflater = GzipInflater()
/// for chunk in chunks { consume(try inflater.feed(chunk)) }
/// try inflater.finish()
/// ```
public struct GzipInflater: Sendable {
    /// The expected container format.
    public let format: Gzip.Format
    /// The most bytes of output allowed in total.
    public let maximumSize: Int

    private enum Phase: UInt8 {
        case detect, gzipHeader, zlibHeader
        case blockHeader, storedLength, stored, dynamicCounts, codeLengthCodes, codeLengths, codes
        case trailer, memberEnd, done
    }

    private var phase: Phase
    private var wrapper: Gzip.Format

    // Bit reader: bits not yet used, lowest first; always whole input bytes minus the used low bits.
    private var bitBuffer: UInt64 = 0
    private var bitCount = 0

    // Gzip header progress.
    private var headerBytes: [UInt8] = []
    private var headerStage = 0
    private var headerSkip = 0
    private var headerCRC: UInt32 = 0

    // Blocks.
    private var finalBlock = false
    private var storedRemaining = 0
    private var literalDecoder = HuffmanDecoder()
    private var distanceDecoder = HuffmanDecoder()
    private var codeLengthDecoder = HuffmanDecoder()
    private var literalCount = 0
    private var distanceCount = 0
    private var codeLengthCount = 0
    private var lengthIndex = 0
    private var lengths = [UInt8](repeating: 0, count: 320)

    // Output: the window (up to 32 KiB already returned) followed by this call's output.
    private var window: [UInt8] = []
    private var outCount = 0
    private var returnedCount = 0
    private var checksumFrom = 0
    private var totalOut = 0
    private var checksum: UInt32 = 0
    private var memberSize: UInt32 = 0
    private var trailer: [UInt8] = []
    private var membersDone = 0

    private static let windowSize = 32 * 1024

    /// Creates an inflater.
    /// - Parameters:
    ///   - format: the container (default gzip); use ``Gzip/Format/deflate`` for `Content-Encoding: deflate`.
    ///   - maximumSize: the most bytes of output allowed in total (a guard against gzip bombs).
    public init(format: Gzip.Format = .gzip, maximumSize: Int = Int.max) {
        self.format = format
        self.maximumSize = maximumSize
        self.wrapper = format
        switch format {
        case .gzip: phase = .gzipHeader
        case .zlib: phase = .zlibHeader
        case .rawDeflate: phase = .blockHeader
        case .deflate: phase = .detect
        }
        checksum = format == .gzip ? 0 : 1
    }

    /// An inflater for an HTTP `Content-Encoding` value (`gzip`, `x-gzip`, `deflate`), or nil for any other.
    public init?(contentEncoding: String, maximumSize: Int = Int.max) {
        switch contentEncoding.trimmingCharacters(in: .whitespaces).lowercased() {
        case "gzip", "x-gzip": self.init(format: .gzip, maximumSize: maximumSize)
        case "deflate": self.init(format: .deflate, maximumSize: maximumSize)
        default: return nil
        }
    }

    /// Bytes held between calls (window and buffers); for memory tests.
    var bufferedByteCount: Int { window.capacity + headerBytes.capacity + trailer.capacity }

    /// Feeds the next compressed bytes and returns the output they produced (possibly empty).
    public mutating func feed(_ data: Data) throws(GzipError) -> Data {
        let error = data.withUnsafeBytes { raw in run(raw.bindMemory(to: UInt8.self)) }
        return try collect(error)
    }

    /// Feeds the next compressed bytes and returns the output they produced (possibly empty).
    public mutating func feed(_ bytes: some Sequence<UInt8>) throws(GzipError) -> Data {
        let done: GzipError?? = bytes.withContiguousStorageIfAvailable { run($0) }
        if let error = done { return try collect(error) }
        let copy = Array(bytes)
        return try collect(copy.withUnsafeBufferPointer { run($0) })
    }

    /// Declares the end of the input: throws ``GzipError/truncated`` unless the stream was complete.
    public mutating func finish() throws(GzipError) {
        switch phase {
        case .done, .memberEnd: return
        default: throw .truncated
        }
    }

    /// Whether the stream (for gzip: at least one member) is complete.
    public var isComplete: Bool { phase == .done || phase == .memberEnd }

    /// Feeds `bytes` and hands the output they produced to `sink` (nothing on an error, which is returned). The
    /// output is not copied on the way: `sink` sees the inflater's own buffer.
    mutating func feed(
        _ bytes: UnsafeBufferPointer<UInt8>, into sink: (UnsafeBufferPointer<UInt8>) -> Void
    ) -> GzipError? {
        do {
            try collect(run(bytes), into: sink)
            return nil
        } catch {
            return error
        }
    }

    /// The largest output buffer (window and one call's output) this inflater has held; for memory tests.
    private(set) var largestWindowCount = 0

    private mutating func collect(_ error: GzipError?) throws(GzipError) -> Data {
        var output = Data()
        try collect(error) { output = Data($0) }
        return output
    }

    private mutating func collect(
        _ error: GzipError?, into sink: (UnsafeBufferPointer<UInt8>) -> Void
    ) throws(GzipError) {
        updateChecksum()
        if let error {
            // No copy of output that is thrown away (a bomb stopped at the limit holds the limit, not twice it).
            phase = .done
            throw error
        }
        window.withUnsafeBufferPointer { sink(UnsafeBufferPointer(rebasing: $0[returnedCount..<outCount])) }
        // Keep the last 32 KiB as the window for later back-references.
        if outCount > Self.windowSize {
            let keep = Self.windowSize
            if window.count > 8 * Self.windowSize {
                window = Array(window[(outCount - keep)..<outCount]) + [UInt8](repeating: 0, count: keep)
            } else {
                window.withUnsafeMutableBufferPointer { w in
                    w.baseAddress!.update(from: w.baseAddress! + (outCount - keep), count: keep)
                }
            }
            outCount = keep
        }
        returnedCount = outCount
        checksumFrom = outCount
    }

    private mutating func updateChecksum() {
        guard checksumFrom < outCount else { return }
        let count = outCount - checksumFrom
        if wrapper == .gzip {
            checksum = window.withUnsafeBufferPointer {
                CRC32.update(checksum, UnsafeBufferPointer(rebasing: $0[checksumFrom..<outCount]))
            }
        } else if wrapper == .zlib {
            checksum = window.withUnsafeBufferPointer {
                Adler32.update(checksum, UnsafeBufferPointer(rebasing: $0[checksumFrom..<outCount]))
            }
        }
        memberSize &+= UInt32(truncatingIfNeeded: count)
        checksumFrom = outCount
    }

    // MARK: - Input helpers

    @inline(__always)
    private mutating func refill(_ p: UnsafeBufferPointer<UInt8>, _ pos: inout Int) {
        while bitCount <= 56 && pos < p.count {
            bitBuffer |= UInt64(p[pos]) << UInt64(bitCount)
            pos += 1
            bitCount += 8
        }
    }

    @inline(__always)
    private mutating func drop(_ n: Int) {
        bitBuffer >>= UInt64(n)
        bitCount -= n
    }

    /// The next whole byte: first from the bit buffer (byte-aligned), then from the input.
    private mutating func nextByte(_ p: UnsafeBufferPointer<UInt8>, _ pos: inout Int) -> UInt8? {
        if bitCount >= 8 {
            let byte = UInt8(truncatingIfNeeded: bitBuffer)
            drop(8)
            return byte
        }
        guard pos < p.count else { return nil }
        pos += 1
        return p[pos - 1]
    }

    private mutating func ensureOutputSpace(_ count: Int) throws(GzipError) {
        guard outCount + count > window.count else { return }
        let needed = outCount + count
        var newCount = max(window.count * 2, needed, 64 * 1024)
        // Do not allocate far beyond what the size limit allows.
        let allowed = outCount - returnedCount + (maximumSize - totalOut)
        if newCount - returnedCount > allowed { newCount = max(needed, returnedCount + allowed + 258) }
        var grown = [UInt8](repeating: 0, count: newCount)
        largestWindowCount = max(largestWindowCount, newCount)
        let used = outCount
        grown.withUnsafeMutableBufferPointer { target in
            window.withUnsafeBufferPointer { source in
                if used > 0 { target.baseAddress!.update(from: source.baseAddress!, count: used) }
            }
        }
        window = grown
    }

    // MARK: - The state machine

    private mutating func run(_ p: UnsafeBufferPointer<UInt8>) -> GzipError? {
        do {
            try runThrowing(p)
            return nil
        } catch {
            return error
        }
    }

    private mutating func runThrowing(_ p: UnsafeBufferPointer<UInt8>) throws(GzipError) {
        var pos = 0
        while true {
            switch phase {
            case .detect:
                refill(p, &pos)
                guard bitCount >= 16 else { return }
                let cmf = UInt16(bitBuffer & 0xFF)
                let flg = UInt16((bitBuffer >> 8) & 0xFF)
                if cmf & 0x0F == 8 && cmf >> 4 <= 7 && (cmf << 8 | flg) % 31 == 0 && flg & 0x20 == 0 {
                    wrapper = .zlib
                    checksum = 1
                    phase = .zlibHeader
                } else {
                    wrapper = .rawDeflate
                    phase = .blockHeader
                }

            case .zlibHeader:
                refill(p, &pos)
                guard bitCount >= 16 else { return }
                let cmf = UInt16(bitBuffer & 0xFF)
                let flg = UInt16((bitBuffer >> 8) & 0xFF)
                guard cmf & 0x0F == 8 else { throw .invalidHeader("zlib compression method is not DEFLATE") }
                guard cmf >> 4 <= 7 else { throw .invalidHeader("zlib window size is too large") }
                guard (cmf << 8 | flg) % 31 == 0 else { throw .invalidHeader("zlib header check failed") }
                guard flg & 0x20 == 0 else { throw .invalidHeader("zlib preset dictionaries are not supported") }
                drop(16)
                phase = .blockHeader

            case .gzipHeader:
                guard let byte = nextByte(p, &pos) else { return }
                try gzipHeaderByte(byte)

            case .blockHeader:
                refill(p, &pos)
                guard bitCount >= 3 else { return }
                finalBlock = bitBuffer & 1 == 1
                let type = (bitBuffer >> 1) & 3
                drop(3)
                switch type {
                case 0:
                    drop(bitCount & 7)
                    phase = .storedLength
                case 1:
                    literalDecoder = HuffmanDecoder.fixedLiterals
                    distanceDecoder = HuffmanDecoder.fixedDistances
                    phase = .codes
                case 2: phase = .dynamicCounts
                default: throw .invalidData("invalid block type 3")
                }

            case .storedLength:
                refill(p, &pos)
                guard bitCount >= 32 else { return }
                let length = Int(bitBuffer & 0xFFFF)
                let complement = Int((bitBuffer >> 16) & 0xFFFF)
                guard length == complement ^ 0xFFFF else {
                    throw .invalidData("stored block length does not match its complement")
                }
                drop(32)
                storedRemaining = length
                phase = .stored

            case .stored:
                if storedRemaining == 0 {
                    endBlock()
                    continue
                }
                let available = bitCount / 8 + (p.count - pos)
                guard available > 0 else { return }
                let count = min(storedRemaining, available)
                guard totalOut + count <= maximumSize else { throw .outputTooLarge(limit: maximumSize) }
                try ensureOutputSpace(count)
                var copied = 0
                while bitCount >= 8 && copied < count {
                    window[outCount] = UInt8(truncatingIfNeeded: bitBuffer)
                    outCount += 1
                    drop(8)
                    copied += 1
                }
                let direct = count - copied
                if direct > 0 {
                    let start = outCount
                    window.withUnsafeMutableBufferPointer { w in
                        (w.baseAddress! + start).update(from: p.baseAddress! + pos, count: direct)
                    }
                    pos += direct
                    outCount += direct
                }
                totalOut += count
                storedRemaining -= count

            case .dynamicCounts:
                refill(p, &pos)
                guard bitCount >= 14 else { return }
                literalCount = Int(bitBuffer & 0x1F) + 257
                distanceCount = Int((bitBuffer >> 5) & 0x1F) + 1
                codeLengthCount = Int((bitBuffer >> 10) & 0xF) + 4
                drop(14)
                guard literalCount <= 286 else { throw .invalidData("too many literal/length codes") }
                guard distanceCount <= 30 else { throw .invalidData("too many distance codes") }
                lengthIndex = 0
                for i in 0..<19 { lengths[i] = 0 }
                phase = .codeLengthCodes

            case .codeLengthCodes:
                while lengthIndex < codeLengthCount {
                    refill(p, &pos)
                    guard bitCount >= 3 else { return }
                    lengths[Self.codeLengthOrder[lengthIndex]] = UInt8(bitBuffer & 7)
                    drop(3)
                    lengthIndex += 1
                }
                switch codeLengthDecoder.build(lengths[0..<19]) {
                case .complete: break
                default: throw .invalidData("invalid code length code")
                }
                lengthIndex = 0
                phase = .codeLengths

            case .codeLengths:
                try readCodeLengths(p, &pos)
                if phase == .codeLengths { return }

            case .codes:
                let status = decodeCodes(p, &pos)
                switch status {
                case .needInput: return
                case .needOutput: try ensureOutputSpace(258)
                case .endOfBlock: endBlock()
                case .tooLarge: throw .outputTooLarge(limit: maximumSize)
                case .invalidLiteral: throw .invalidData("invalid literal/length code")
                case .invalidDistance: throw .invalidData("invalid distance code")
                case .distanceTooFar: throw .invalidData("distance reaches before the start of the output")
                }

            case .trailer:
                let size = wrapper == .gzip ? 8 : 4
                while trailer.count < size {
                    guard let byte = nextByte(p, &pos) else { return }
                    trailer.append(byte)
                }
                updateChecksum()
                if wrapper == .gzip {
                    let crc =
                        UInt32(trailer[0]) | UInt32(trailer[1]) << 8 | UInt32(trailer[2]) << 16
                        | UInt32(trailer[3]) << 24
                    let length =
                        UInt32(trailer[4]) | UInt32(trailer[5]) << 8 | UInt32(trailer[6]) << 16
                        | UInt32(trailer[7]) << 24
                    guard crc == checksum else { throw .checksumMismatch(expected: crc, actual: checksum) }
                    guard length == memberSize else { throw .lengthMismatch(expected: length, actual: memberSize) }
                    membersDone += 1
                    phase = .memberEnd
                } else {
                    let adler =
                        UInt32(trailer[0]) << 24 | UInt32(trailer[1]) << 16 | UInt32(trailer[2]) << 8
                        | UInt32(trailer[3])
                    guard adler == checksum else { throw .checksumMismatch(expected: adler, actual: checksum) }
                    phase = .done
                }
                trailer.removeAll()

            case .memberEnd:
                // Gzip: zero padding, or another member.
                guard let byte = nextByte(p, &pos) else { return }
                if byte == 0 { continue }
                guard byte == 0x1F else { throw .trailingData }
                headerBytes = [byte]
                headerStage = 0
                headerCRC = CRC32.update(0, [byte])
                checksum = 0
                memberSize = 0
                phase = .gzipHeader

            case .done:
                guard nextByte(p, &pos) == nil else { throw .trailingData }
                return
            }
        }
    }

    private mutating func endBlock() {
        guard finalBlock else {
            phase = .blockHeader
            return
        }
        updateChecksum()
        drop(bitCount & 7)
        phase = wrapper == .rawDeflate ? .done : .trailer
    }

    /// One byte of a gzip member header (RFC 1952 section 2.3). Stages: 0 the fixed ten bytes, 1 FEXTRA
    /// length, 2 FEXTRA data, 3 FNAME, 4 FCOMMENT, 5 FHCRC.
    private mutating func gzipHeaderByte(_ byte: UInt8) throws(GzipError) {
        if headerStage < 5 { headerCRC = CRC32.update(headerCRC, [byte]) }
        switch headerStage {
        case 0:
            headerBytes.append(byte)
            switch headerBytes.count {
            case 1: guard byte == 0x1F else { throw .invalidHeader("not a gzip stream (bad magic bytes)") }
            case 2: guard byte == 0x8B else { throw .invalidHeader("not a gzip stream (bad magic bytes)") }
            case 3: guard byte == 8 else { throw .invalidHeader("gzip compression method is not DEFLATE") }
            case 4: guard byte & 0xE0 == 0 else { throw .invalidHeader("reserved gzip flags are set") }
            case 10: advanceHeader(from: 1)
            default: break
            }
        case 1:
            headerBytes.append(byte)
            if headerBytes.count == 12 {
                headerSkip = Int(headerBytes[10]) | Int(headerBytes[11]) << 8
                if headerSkip > 0 { headerStage = 2 } else { advanceHeader(from: 3) }
            }
        case 2:
            headerSkip -= 1
            if headerSkip == 0 { advanceHeader(from: 3) }
        case 3, 4:
            if byte == 0 { advanceHeader(from: headerStage + 1) }
        default:
            trailer.append(byte)
            if trailer.count == 2 {
                let stored = UInt16(trailer[0]) | UInt16(trailer[1]) << 8
                trailer.removeAll()
                guard stored == UInt16(truncatingIfNeeded: headerCRC) else {
                    throw .invalidHeader("gzip header checksum mismatch")
                }
                advanceHeader(from: 6)
            }
        }
    }

    /// Moves to the first optional header field at or after `stage` that the flags announce, or to the data.
    private mutating func advanceHeader(from stage: Int) {
        let flags = headerBytes[3]
        let flagPerStage: [UInt8] = [0, 0x04, 0, 0x08, 0x10, 0x02]
        var next = stage
        while next <= 5 && (next == 2 || flags & flagPerStage[next] == 0) { next += 1 }
        if next > 5 {
            headerStage = 0
            headerBytes.removeAll()
            phase = .blockHeader
        } else {
            headerStage = next
        }
    }

    private mutating func readCodeLengths(_ p: UnsafeBufferPointer<UInt8>, _ pos: inout Int) throws(GzipError) {
        let total = literalCount + distanceCount
        while lengthIndex < total {
            refill(p, &pos)
            let decoded = codeLengthDecoder.decode(bitBuffer, available: bitCount)
            if decoded == HuffmanDecoder.needMore { return }
            if decoded == HuffmanDecoder.invalid { throw .invalidData("invalid code length code") }
            let symbol = decoded >> 4
            let used = decoded & 15
            if symbol < 16 {
                drop(used)
                lengths[lengthIndex] = UInt8(symbol)
                lengthIndex += 1
                continue
            }
            let extraBits = symbol == 16 ? 2 : (symbol == 17 ? 3 : 7)
            guard used + extraBits <= bitCount else { return }
            let extra = Int((bitBuffer >> UInt64(used)) & ((1 << UInt64(extraBits)) - 1))
            drop(used + extraBits)
            let repeatCount: Int
            let value: UInt8
            switch symbol {
            case 16:
                guard lengthIndex > 0 else { throw .invalidData("repeated code length with nothing before it") }
                value = lengths[lengthIndex - 1]
                repeatCount = 3 + extra
            case 17:
                value = 0
                repeatCount = 3 + extra
            default:
                value = 0
                repeatCount = 11 + extra
            }
            guard lengthIndex + repeatCount <= total else { throw .invalidData("too many code lengths") }
            for i in lengthIndex..<(lengthIndex + repeatCount) { lengths[i] = value }
            lengthIndex += repeatCount
        }
        guard lengths[256] != 0 else { throw .invalidData("the end-of-block code has no length") }
        switch literalDecoder.build(lengths[0..<literalCount]) {
        case .complete: break
        case .incompleteSingle where literalCount > 0: break
        default: throw .invalidData("invalid literal/length code lengths")
        }
        switch distanceDecoder.build(lengths[literalCount..<total]) {
        case .complete, .incompleteSingle, .empty: break
        default: throw .invalidData("invalid distance code lengths")
        }
        phase = .codes
    }

    private enum CodesStatus {
        case needInput, needOutput, endOfBlock, tooLarge, invalidLiteral, invalidDistance, distanceTooFar
    }

    /// The hot loop: literals and matches until the block ends, input runs out or the output is full.
    private mutating func decodeCodes(_ p: UnsafeBufferPointer<UInt8>, _ pos: inout Int) -> CodesStatus {
        var buffer = bitBuffer
        var count = bitCount
        var position = pos
        var out = outCount
        let sizeLimit = outCount + (maximumSize - totalOut)
        let startOut = outCount
        let literal = literalDecoder
        let distance = distanceDecoder
        var output = window
        window = []
        let inputCount = p.count
        let status: CodesStatus = output.withUnsafeMutableBufferPointer { w in
            let capacity = w.count
            return literal.table.withUnsafeBufferPointer { litTable in
                distance.table.withUnsafeBufferPointer { distTable in
                    while true {
                        while count <= 56 && position < inputCount {
                            buffer |= UInt64(p[position]) << UInt64(count)
                            position += 1
                            count += 8
                        }
                        if out + 258 > capacity { return .needOutput }
                        var entry = Int(litTable[Int(buffer & HuffmanDecoder.primaryMask)])
                        if entry == 0 {
                            entry = literal.decodeSlow(buffer, available: count)
                            if entry == HuffmanDecoder.needMore { return .needInput }
                            if entry == HuffmanDecoder.invalid { return .invalidLiteral }
                        }
                        let length = entry & 15
                        if length > count { return .needInput }
                        let symbol = entry >> 4
                        if symbol < 256 {
                            if out >= sizeLimit { return .tooLarge }
                            w[out] = UInt8(truncatingIfNeeded: symbol)
                            out += 1
                            buffer >>= UInt64(length)
                            count -= length
                            continue
                        }
                        if symbol == 256 {
                            buffer >>= UInt64(length)
                            count -= length
                            return .endOfBlock
                        }
                        if symbol > 285 { return .invalidLiteral }
                        var used = length
                        let lengthInfo = HuffmanDecoder.lengthInfo[symbol - 257]
                        let lengthExtra = Int(lengthInfo & 0xF)
                        if used + lengthExtra > count { return .needInput }
                        let matchLength =
                            Int(lengthInfo >> 4) + Int((buffer >> UInt64(used)) & ((1 << UInt64(lengthExtra)) - 1))
                        used += lengthExtra
                        let distanceBits = buffer >> UInt64(used)
                        var distanceEntry = Int(distTable[Int(distanceBits & HuffmanDecoder.primaryMask)])
                        if distanceEntry == 0 {
                            distanceEntry = distance.decodeSlow(distanceBits, available: count - used)
                            if distanceEntry == HuffmanDecoder.needMore { return .needInput }
                            if distanceEntry == HuffmanDecoder.invalid { return .invalidDistance }
                        }
                        used += distanceEntry & 15
                        if used > count { return .needInput }
                        let distanceSymbol = distanceEntry >> 4
                        if distanceSymbol >= 30 { return .invalidDistance }
                        let distanceInfo = HuffmanDecoder.distanceInfo[distanceSymbol]
                        let distanceExtra = Int(distanceInfo & 0xF)
                        if used + distanceExtra > count { return .needInput }
                        let matchDistance =
                            Int(distanceInfo >> 4) + Int((buffer >> UInt64(used)) & ((1 << UInt64(distanceExtra)) - 1))
                        used += distanceExtra
                        if matchDistance > out { return .distanceTooFar }
                        if out + matchLength > sizeLimit { return .tooLarge }
                        buffer >>= UInt64(used)
                        count -= used
                        let base = w.baseAddress!
                        let source = base + (out - matchDistance)
                        let target = base + out
                        if matchDistance >= matchLength {
                            target.update(from: source, count: matchLength)
                        } else {
                            for k in 0..<matchLength { target[k] = source[k] }
                        }
                        out += matchLength
                    }
                }
            }
        }
        window = output
        bitBuffer = buffer
        bitCount = count
        pos = position
        totalOut += out - startOut
        outCount = out
        return status
    }

    private static let codeLengthOrder = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15]
}

/// A canonical Huffman code for inflating: a lookup table for codes up to ``primaryBits`` long and a
/// bit-by-bit canonical decoder for longer ones.
struct HuffmanDecoder: Sendable {
    static let primaryBits = 10
    static let primaryMask: UInt64 = (1 << 10) - 1
    /// Results of ``decode(_:available:)`` that are not `symbol << 4 | length`.
    static let needMore = -1
    static let invalid = -2

    /// Length/distance base value << 4 | extra bits, per symbol (RFC 1951 section 3.2.5).
    static let lengthInfo: [UInt16] = {
        let base = [
            3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163,
            195, 227, 258,
        ]
        let extra = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0]
        return (0..<29).map { UInt16(base[$0] << 4 | extra[$0]) }
    }()
    static let distanceInfo: [UInt32] = {
        (0..<30).map { code in
            let extra = code < 4 ? 0 : code / 2 - 1
            let base = code < 4 ? code + 1 : (2 + code % 2) << extra + 1
            return UInt32(base << 4 | extra)
        }
    }()

    static let fixedLiterals: HuffmanDecoder = {
        var lengths = [UInt8](repeating: 8, count: 288)
        for i in 144..<256 { lengths[i] = 9 }
        for i in 256..<280 { lengths[i] = 7 }
        var decoder = HuffmanDecoder()
        _ = decoder.build(lengths[...])
        return decoder
    }()
    static let fixedDistances: HuffmanDecoder = {
        var decoder = HuffmanDecoder()
        _ = decoder.build([UInt8](repeating: 5, count: 32)[...])
        return decoder
    }()

    enum BuildResult { case complete, incompleteSingle, empty, invalid }

    /// `symbol << 4 | length` per `primaryBits`-bit prefix (bits in stream order); 0 when longer or unused.
    var table: [UInt16] = []
    var counts = [Int](repeating: 0, count: 16)
    var symbols: [UInt16] = []

    /// Builds the code from code lengths per symbol (0 = unused).
    mutating func build(_ lengths: ArraySlice<UInt8>) -> BuildResult {
        counts = [Int](repeating: 0, count: 16)
        for length in lengths { counts[Int(length)] += 1 }
        let used = lengths.count - counts[0]
        table = [UInt16](repeating: 0, count: 1 << Self.primaryBits)
        symbols = []
        counts[0] = 0
        if used == 0 { return .empty }
        var left = 1
        for length in 1...15 {
            left <<= 1
            left -= counts[length]
            if left < 0 { return .invalid }
        }
        var offsets = [Int](repeating: 0, count: 16)
        for length in 1..<15 { offsets[length + 1] = offsets[length] + counts[length] }
        symbols = [UInt16](repeating: 0, count: used)
        var nextCode = [Int](repeating: 0, count: 16)
        var code = 0
        for length in 1...15 {
            code = (code + counts[length - 1]) << 1
            nextCode[length] = code
        }
        for (symbol, length) in lengths.enumerated() where length != 0 {
            let len = Int(length)
            symbols[offsets[len]] = UInt16(symbol)
            offsets[len] += 1
            let canonical = nextCode[len]
            nextCode[len] += 1
            guard len <= Self.primaryBits else { continue }
            var reversed = 0
            for bit in 0..<len where canonical & (1 << bit) != 0 { reversed |= 1 << (len - 1 - bit) }
            let entry = UInt16(symbol << 4 | len)
            var index = reversed
            while index < (1 << Self.primaryBits) {
                table[index] = entry
                index += 1 << len
            }
        }
        if left > 0 { return used == 1 && counts[1] == 1 ? .incompleteSingle : .invalid }
        return .complete
    }

    /// Decodes one symbol from `bits` (stream order, lowest first) of which `available` are real.
    @inline(__always)
    func decode(_ bits: UInt64, available: Int) -> Int {
        let entry = Int(table[Int(bits & Self.primaryMask)])
        if entry != 0 { return entry & 15 <= available ? entry : Self.needMore }
        return decodeSlow(bits, available: available)
    }

    /// Canonical decoding one bit at a time, for codes longer than the table (or unused codes).
    func decodeSlow(_ bits: UInt64, available: Int) -> Int {
        var code = 0
        var first = 0
        var index = 0
        for length in 1...15 {
            if length > available { return Self.needMore }
            code |= Int((bits >> UInt64(length - 1)) & 1)
            let count = counts[length]
            if code - first < count { return Int(symbols[index + code - first]) << 4 | length }
            index += count
            first += count
            first <<= 1
            code <<= 1
        }
        return Self.invalid
    }
}
