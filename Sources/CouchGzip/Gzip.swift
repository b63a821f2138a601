import Foundation

/// Gzip (RFC 1952), zlib (RFC 1950) and raw DEFLATE (RFC 1951) compression in pure Swift.
///
/// Used for `Content-Encoding: gzip`/`deflate` bodies and gzip-compressed attachments. For bodies that
/// arrive in chunks, use ``GzipInflater``, which decompresses in constant memory (a 32 KiB window).
public enum Gzip {
    /// The container around the DEFLATE data.
    public enum Format: Sendable, Equatable {
        /// Gzip (RFC 1952): a header, the data, then CRC-32 and length. Concatenated members are accepted
        /// when decompressing, as is zero padding after the last one.
        case gzip
        /// Zlib (RFC 1950): a two-byte header, the data, then an Adler-32 checksum.
        case zlib
        /// Raw DEFLATE (RFC 1951) with no header or checksum.
        case rawDeflate
        /// What `Content-Encoding: deflate` means in practice: zlib-wrapped, or raw DEFLATE when the body
        /// does not start with a zlib header (some servers send that). Compresses as ``zlib``.
        case deflate
    }

    /// How hard the compressor looks for repeated strings: 0 (store only) to 9 (smallest output).
    public struct CompressionLevel: Sendable, Hashable {
        /// 0...9, as in zlib.
        public let value: Int

        /// A level from 0 (store only) to 9 (smallest output); values outside are clamped.
        public init(_ value: Int) { self.value = min(max(value, 0), 9) }

        /// No compression: stored blocks only.
        public static let none = CompressionLevel(0)
        /// Fastest compression (level 1).
        public static let fastest = CompressionLevel(1)
        /// A balance of speed and size (level 6, zlib's default).
        public static let `default` = CompressionLevel(6)
        /// Smallest output, slowest (level 9).
        public static let best = CompressionLevel(9)
    }

    /// The default limit on decompressed size: 1 GiB.
    public static let defaultMaximumSize = 1 << 30

    /// Compresses `data` into a gzip (or zlib, or raw DEFLATE) stream.
    public static func compress(_ data: Data, level: CompressionLevel = .default, format: Format = .gzip) -> Data {
        data.withUnsafeBytes { raw in
            compress(raw.bindMemory(to: UInt8.self), level: level, format: format)
        }
    }

    /// Compresses bytes into a gzip (or zlib, or raw DEFLATE) stream.
    public static func compress(
        _ bytes: UnsafeBufferPointer<UInt8>, level: CompressionLevel = .default, format: Format = .gzip
    ) -> Data {
        var writer = BitWriter(capacity: bytes.count / 3 + 64)
        switch format {
        case .gzip:
            let extraFlags: UInt8 = level.value >= 9 ? 2 : (level.value == 1 ? 4 : 0)
            writer.appendBytes([0x1F, 0x8B, 8, 0, 0, 0, 0, 0, extraFlags, 255])
        case .zlib, .deflate:
            let levelFlags: UInt16 = level.value < 2 ? 0 : (level.value < 6 ? 1 : (level.value == 6 ? 2 : 3))
            var header: UInt16 = 0x7800 | levelFlags << 6
            header += 31 - header % 31
            writer.appendBytes([UInt8(header >> 8), UInt8(header & 0xFF)])
        case .rawDeflate:
            break
        }
        Deflater.deflate(bytes, level: level.value, into: &writer)
        writer.flush()
        switch format {
        case .gzip:
            let crc = CRC32.update(0, bytes)
            let size = UInt32(truncatingIfNeeded: bytes.count)
            writer.appendBytes([
                UInt8(crc & 0xFF), UInt8((crc >> 8) & 0xFF), UInt8((crc >> 16) & 0xFF), UInt8(crc >> 24),
                UInt8(size & 0xFF), UInt8((size >> 8) & 0xFF), UInt8((size >> 16) & 0xFF), UInt8(size >> 24),
            ])
        case .zlib, .deflate:
            let adler = Adler32.update(1, bytes)
            writer.appendBytes([
                UInt8(adler >> 24), UInt8((adler >> 16) & 0xFF), UInt8((adler >> 8) & 0xFF), UInt8(adler & 0xFF),
            ])
        case .rawDeflate:
            break
        }
        return Data(writer.bytes)
    }

    /// Decompresses a complete gzip (or zlib, or raw DEFLATE) stream.
    ///
    /// The input is inflated a slice at a time into one buffer that grows as the output does, so a stream
    /// that inflates past `maximumSize` (a "gzip bomb") stops there, holding at most `maximumSize` plus the
    /// inflater's buffer for one slice's output (``decompressionSliceSize`` bytes of input) and its window.
    /// - Parameter maximumSize: the most bytes the output may have; larger output throws
    ///   ``GzipError/outputTooLarge(limit:)`` before that much memory is used.
    public static func decompress(
        _ data: Data, format: Format = .gzip, maximumSize: Int = defaultMaximumSize
    ) throws(GzipError) -> Data {
        var peak = 0
        return try decompress(data, format: format, maximumSize: maximumSize, peakHeldBytes: &peak)
    }

    /// How many bytes of input ``decompress(_:format:maximumSize:)`` inflates at a time. DEFLATE expands a
    /// byte at most 1032 times, so one slice's output is at most about 2 MiB (the inflater's buffer for it,
    /// grown by doubling, at most twice that).
    public static let decompressionSliceSize = 2 * 1024

    /// ``decompress(_:format:maximumSize:)``, also reporting in `peakHeldBytes` an upper bound of the bytes it
    /// held at once (the output buffer's capacity plus the inflater's largest buffer); for memory tests.
    package static func decompress(
        _ data: Data, format: Format, maximumSize: Int, peakHeldBytes: inout Int
    ) throws(GzipError) -> Data {
        let limit = max(0, maximumSize)
        var inflater = GzipInflater(format: format, maximumSize: limit)
        let output = GrowingBuffer(capacity: min(limit, max(data.count, 256) * 4), limit: limit)
        let failure: GzipError? = data.withUnsafeBytes { raw in
            let bytes = raw.bindMemory(to: UInt8.self)
            var start = 0
            repeat {
                let end = min(bytes.count, start + decompressionSliceSize)
                if let error = inflater.feed(UnsafeBufferPointer(rebasing: bytes[start..<end]), into: output.append) {
                    return error
                }
                if output.failed { return .outputTooLarge(limit: limit) }
                start = end
            } while start < bytes.count
            return nil
        }
        peakHeldBytes = output.largestCapacity + inflater.largestWindowCount
        if let failure { throw failure }
        try inflater.finish()
        return output.take()
    }
}

/// Bytes appended to one `malloc` block grown with `realloc` (in place for large blocks, where the C library
/// remaps pages instead of copying), handed over as `Data` without a copy.
private final class GrowingBuffer {
    private var base: UnsafeMutableRawPointer?
    private var count = 0
    private var capacity = 0
    /// The largest capacity held; for memory tests.
    private(set) var largestCapacity = 0
    /// The C library could not allocate the memory (reported as output too large: it could not be held).
    private(set) var failed = false

    /// The most bytes that will be appended (the decompression limit): growth stops there.
    private let limit: Int

    init(capacity: Int, limit: Int) {
        self.limit = limit
        grow(to: capacity)
    }

    deinit { free(base) }

    func append(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let source = bytes.baseAddress, !bytes.isEmpty, !failed else { return }
        let needed = count + bytes.count
        if needed > capacity { grow(to: max(needed, min(capacity * 2, limit))) }
        guard let base, !failed else { return }
        (base + count).copyMemory(from: source, byteCount: bytes.count)
        count = needed
    }

    private func grow(to newCapacity: Int) {
        guard newCapacity > capacity else { return }
        guard let grown = realloc(base, newCapacity) else {
            failed = true
            return
        }
        base = grown
        capacity = newCapacity
        largestCapacity = max(largestCapacity, capacity)
    }

    /// The bytes appended, as `Data` owning the block.
    func take() -> Data {
        guard let block = base, count > 0 else { return Data() }
        base = nil
        let shrunk = count < capacity ? realloc(block, count) ?? block : block
        return Data(bytesNoCopy: shrunk, count: count, deallocator: .free)
    }
}

/// Why a compressed stream could not be decompressed.
public enum GzipError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The gzip or zlib header is wrong (magic bytes, method, flags, header check).
    case invalidHeader(String)
    /// The DEFLATE data is corrupt (block type, Huffman codes, lengths, distances).
    case invalidData(String)
    /// The CRC-32 (gzip) or Adler-32 (zlib) of the output does not match the trailer.
    case checksumMismatch(expected: UInt32, actual: UInt32)
    /// The gzip trailer's length does not match the output.
    case lengthMismatch(expected: UInt32, actual: UInt32)
    /// The stream ended before it was complete.
    case truncated
    /// Bytes other than padding follow the end of the stream.
    case trailingData
    /// The output would exceed the allowed size.
    case outputTooLarge(limit: Int)

    public var description: String {
        switch self {
        case .invalidHeader(let message): return "Invalid compressed stream header: \(message)"
        case .invalidData(let message): return "Corrupt compressed data: \(message)"
        case .checksumMismatch(let expected, let actual):
            return "Checksum mismatch: trailer says \(hex(expected)), data gives \(hex(actual))"
        case .lengthMismatch(let expected, let actual):
            return "Length mismatch: trailer says \(expected) bytes, data has \(actual)"
        case .truncated: return "The compressed stream is truncated"
        case .trailingData: return "Unexpected data after the end of the compressed stream"
        case .outputTooLarge(let limit): return "Decompressed data exceeds the limit of \(limit) bytes"
        }
    }

    private func hex(_ value: UInt32) -> String {
        let digits = String(value, radix: 16)
        return "0x" + String(repeating: "0", count: 8 - digits.count) + digits
    }
}
