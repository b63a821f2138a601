import Foundation

/// The fast JSON path with Foundation behind it: ``FastJSONEncoder`` and ``FastJSONDecoder`` handle the
/// common shapes of documents; whatever they do not handle exactly (they throw, or mark the attempt
/// unsupported) is redone by Foundation's `JSONEncoder` / `JSONDecoder`, configured as the package
/// configures them, so the caller always gets Foundation's value or Foundation's error.
enum FastJSON {
    /// Thrown (and recorded) by the fast encoder and decoder for anything they do not reproduce exactly;
    /// the wrappers below then use Foundation.
    struct Unsupported: Error, CustomStringConvertible {
        let reason: String
        init(_ reason: String) { self.reason = reason }
        var description: String { "FastJSON.Unsupported(\(reason))" }
    }

    /// The JSON text of `value`, byte for byte what `JSONBody`'s Foundation encoder writes for
    /// `dateCoding` (except that members of objects come in the order they were encoded, where
    /// Foundation's order is that of a `Dictionary`).
    static func encode<T: Encodable>(_ value: T, dateCoding: DateCoding) throws -> Data {
        try encodeReportingPath(value, dateCoding: dateCoding).data
    }

    /// ``encode(_:dateCoding:)`` appending to `buffer` (left as it was when an error is thrown).
    static func encode<T: Encodable, Sink: JSONByteSink>(_ value: T, dateCoding: DateCoding, into buffer: inout Sink)
        throws
    {
        _ = try appending(value, dateCoding: dateCoding, to: &buffer) {
            try FastJSONEncoder.encode(value, dateCoding: dateCoding, into: &$0)
        }
    }

    /// ``encode(_:dateCoding:into:)`` for a document, also returning its top-level `_id` and
    /// `_rev` strings as the fast encoder recorded them (see `TopLevelIDAndRev.strings`); nil when
    /// they must be read from the bytes (Foundation wrote them, or the recording cannot tell).
    static func encodeDocument<T: Encodable, Sink: JSONByteSink>(
        _ value: T, dateCoding: DateCoding, into buffer: inout Sink
    ) throws -> DocumentIDAndRev? {
        try appending(value, dateCoding: dateCoding, to: &buffer) {
            try FastJSONEncoder.encodeRecordingIDAndRev(value, dateCoding: dateCoding, into: &$0).strings
        } ?? nil
    }

    /// Appends `value` to `buffer` with `fast`, or, when that throws, Foundation's text of it (the
    /// buffer left as it was when Foundation throws too). What `fast` returned, or nil when
    /// Foundation wrote the value.
    private static func appending<T: Encodable, R, Sink: JSONByteSink>(
        _ value: T, dateCoding: DateCoding, to buffer: inout Sink, fast: (inout Sink) throws -> R
    ) throws -> R? {
        let mark = buffer.count
        do {
            return try fast(&buffer)
        } catch {
            buffer.truncateJSON(to: mark)
            let data = try JSONBody.foundationEncoder(for: dateCoding).encode(value)
            data.withUnsafeBytes { buffer.appendJSON($0.bindMemory(to: UInt8.self)) }
            return nil
        }
    }

    /// The hash of a key's bytes (equal bytes, equal hashes), eight bytes a step: what the parser
    /// gives each key and the decoder looks members up by, and what the encoder refuses repeated
    /// keys by.
    @inline(__always)
    static func keyHash(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt32 {
        let count = bytes.count
        var hash = 0x9E37_79B9_7F4A_7C15 ^ UInt64(truncatingIfNeeded: count)
        if let start = bytes.baseAddress {
            var offset = 0
            while offset &+ 8 <= count {
                hash =
                    (hash ^ UnsafeRawPointer(start + offset).loadUnaligned(as: UInt64.self)) &* 0xBF58_476D_1CE4_E5B9
                hash ^= hash >> 31
                offset &+= 8
            }
            if offset < count {
                var tail: UInt64 = 0
                while offset < count {
                    tail = tail << 8 | UInt64(start[offset])
                    offset &+= 1
                }
                hash = (hash ^ tail) &* 0xBF58_476D_1CE4_E5B9
                hash ^= hash >> 31
            }
        }
        return UInt32(truncatingIfNeeded: hash ^ hash >> 32)
    }

    /// ``encode(_:dateCoding:)``, saying whether the fast path wrote it (for tests).
    static func encodeReportingPath<T: Encodable>(_ value: T, dateCoding: DateCoding) throws -> (
        data: Data, fast: Bool
    ) {
        do {
            return (try FastJSONEncoder.encode(value, dateCoding: dateCoding), true)
        } catch {
            return (try JSONBody.foundationEncoder(for: dateCoding).encode(value), false)
        }
    }

    /// The value of `type` in `data`: the fast decoder's, or Foundation's value or error.
    static func decode<T: Decodable>(_ type: T.Type, from data: Data, dateCoding: DateCoding) throws -> T {
        var fast = false
        return try decode(type, from: data, dateCoding: dateCoding, usedFast: &fast)
    }

    /// ``decode(_:from:dateCoding:)`` over bytes.
    static func decode<T: Decodable>(
        _ type: T.Type, from bytes: UnsafeRawBufferPointer, dateCoding: DateCoding
    ) throws -> T {
        let fallback = foundationDecoder(for: dateCoding)
        var fast = false
        return try FastJSONDecoder.withThreadDecoder(dateCoding: dateCoding) {
            try decode(type, from: bytes, reusing: &$0, fallback: fallback, usedFast: &fast)
        }
    }

    /// ``decode(_:from:dateCoding:)``, saying whether the fast path produced the value (for tests).
    static func decodeReportingPath<T: Decodable>(
        _ type: T.Type, from data: Data, dateCoding: DateCoding
    ) throws -> (value: T, fast: Bool) {
        var fast = false
        let value = try decode(type, from: data, dateCoding: dateCoding, usedFast: &fast)
        return (value, fast)
    }

    /// ``decode(_:from:dateCoding:)``, setting `usedFast` when the fast path produced the value.
    /// (Not a tuple result: unspecialised, a tuple of a generic type is a metadata look-up per call.)
    private static func decode<T: Decodable>(
        _ type: T.Type, from data: Data, dateCoding: DateCoding, usedFast: inout Bool
    ) throws -> T {
        let fallback = foundationDecoder(for: dateCoding)
        return try FastJSONDecoder.withThreadDecoder(dateCoding: dateCoding) { decoder in
            try data.withUnsafeBytes {
                try decode(type, from: $0, reusing: &decoder, fallback: fallback, usedFast: &usedFast)
            }
        }
    }

    /// One value of `type` from each of `ranges` of `bytes` (rows of a streamed response), decoded with one
    /// decoder; a slice the fast path cannot take is decoded by Foundation, whose error is thrown.
    static func decode<T: Decodable>(
        _ type: T.Type, from bytes: UnsafeRawBufferPointer, ranges: [Range<Int>], dateCoding: DateCoding
    ) throws -> [T] {
        var results: [T] = []
        results.reserveCapacity(ranges.count)
        var decoder = FastJSONDecoder(dateCoding: dateCoding)
        let fallback = foundationDecoder(for: dateCoding)
        var fast = false
        for range in ranges {
            let slice = UnsafeRawBufferPointer(rebasing: bytes[range])
            results.append(try decode(type, from: slice, reusing: &decoder, fallback: fallback, usedFast: &fast))
        }
        return results
    }

    /// The one place the fast path falls back: the value of `type` in `bytes` from `decoder` (kept
    /// by the caller across values, e.g. a stream's rows), or else `fallback`'s value or error.
    /// `usedFast` is set to whether the fast path produced it.
    static func decode<T: Decodable>(
        _ type: T.Type, from bytes: UnsafeRawBufferPointer, reusing decoder: inout FastJSONDecoder,
        fallback: JSONDecoder, usedFast: inout Bool
    ) throws -> T {
        usedFast = true
        if ObjectIdentifier(T.self) == FastJSONSpecialTypes.bulkWriteResults,
            let rows = BulkAnswerScanner.successes(in: bytes)
        {
            return unsafeBitCast(rows, to: T.self)
        }
        if let value = try? decoder.decode(type, from: bytes, range: 0..<bytes.count) { return value }
        usedFast = false
        return try fallback.decode(type, from: Data(bytes))
    }

    /// A Foundation decoder configured like `JSONDecoder.couch` for `coding` (the same shared one).
    static func foundationDecoder(for coding: DateCoding) -> JSONDecoder {
        JSONDecoder.couch(for: coding)
    }
}

/// The generic types the fast encoder and decoder special-case, looked up once: `T.self ==
/// [String].self` in unspecialised code asks the runtime for `Array<String>`'s metadata (a
/// hash-table look-up) at every call, for every value that is not one of the types tested before.
enum FastJSONSpecialTypes {
    static let stringArray = ObjectIdentifier([String].self)
    static let bulkWriteResults = ObjectIdentifier([BulkWriteResult].self)
}

/// Where the encoders append JSON text: a `[UInt8]`, or a `Data` that is a request body being
/// written in place (a `_bulk_docs` batch), offsets counted from its start.
protocol JSONByteSink {
    var count: Int { get }
    /// Appends `bytes`.
    mutating func appendJSON(_ bytes: UnsafeBufferPointer<UInt8>)
    /// Drops the bytes from offset `mark` on.
    mutating func truncateJSON(to mark: Int)
    /// The byte at `offset`.
    func jsonByte(at offset: Int) -> UInt8
    /// Runs `body` with this sink's own storage, for the encoder to write into in place (no copy
    /// from its buffer); nil when the sink has no such storage, and the encoder copies.
    mutating func withFastBytes<R>(_ body: (inout FastJSONBytes) throws -> R) rethrows -> R?
}

extension JSONByteSink {
    mutating func withFastBytes<R>(_ body: (inout FastJSONBytes) throws -> R) rethrows -> R? { nil }
}

/// A request body written in place: bytes the JSON encoder appends to directly, handed to the
/// transport as `Data` without a copy (``data``).
///
/// `@unchecked Sendable`: it is written by one owner at a time (a `BulkWriter` filling its next
/// batch, on the actor), and only read once ``data`` has been taken; nothing writes to it after.
final class JSONBuffer: JSONByteSink, @unchecked Sendable {
    /// `@exclusivity(unchecked)`: its one writer never overlaps two accesses (the dynamic checks
    /// were most of the cost of `count` and of lending the storage).
    @exclusivity(unchecked) private var bytes: FastJSONBytes

    init(capacity: Int) {
        bytes = FastJSONBytes(capacity: capacity)
    }

    deinit { bytes.deallocate() }

    var count: Int { bytes.count }

    func append(_ byte: UInt8) { bytes.append(byte) }

    func appendJSON(_ other: UnsafeBufferPointer<UInt8>) { bytes.append(other) }

    func truncateJSON(to mark: Int) { bytes.truncate(to: mark) }

    func jsonByte(at offset: Int) -> UInt8 {
        precondition(offset >= 0 && offset < bytes.count)
        return bytes.base[offset]
    }

    func withFastBytes<R>(_ body: (inout FastJSONBytes) throws -> R) rethrows -> R? {
        try body(&bytes)
    }

    /// Inserts `inserted` at `offset`, moving the bytes after it.
    func insert(_ inserted: [UInt8], at offset: Int) {
        precondition(offset >= 0 && offset <= bytes.count)
        bytes.reserve(inserted.count)
        let at = bytes.base + offset
        (at + inserted.count).update(from: at, count: bytes.count - offset)
        inserted.withUnsafeBufferPointer { at.update(from: $0.baseAddress!, count: $0.count) }
        bytes.advance(by: inserted.count)
    }

    /// The bytes in `range`.
    func bytes(in range: Range<Int>) -> UnsafeBufferPointer<UInt8> {
        precondition(range.lowerBound >= 0 && range.upperBound <= bytes.count)
        return UnsafeBufferPointer(start: bytes.base + range.lowerBound, count: range.count)
    }

    /// All the bytes, as `Data` that keeps this buffer alive instead of copying it. Nothing may
    /// be written to the buffer once this is taken.
    var data: Data {
        guard bytes.count > 0 else { return Data() }
        return Data(bytesNoCopy: bytes.base, count: bytes.count, deallocator: .custom { _, _ in _ = self })
    }
}

extension Array: JSONByteSink where Element == UInt8 {
    mutating func appendJSON(_ bytes: UnsafeBufferPointer<UInt8>) { append(contentsOf: bytes) }
    mutating func truncateJSON(to mark: Int) { removeSubrange(mark...) }
    func jsonByte(at offset: Int) -> UInt8 { self[offset] }
}

extension Data: JSONByteSink {
    mutating func appendJSON(_ bytes: UnsafeBufferPointer<UInt8>) { append(bytes) }
    mutating func truncateJSON(to mark: Int) { removeSubrange(index(startIndex, offsetBy: mark)...) }
    func jsonByte(at offset: Int) -> UInt8 { self[index(startIndex, offsetBy: offset)] }
}

/// A growable byte buffer over manually managed memory, for the encoder's output: appending is a store
/// and an increment (no uniqueness check or copy-on-write as with an array held by a class). The owner
/// calls `deallocate()`.
struct FastJSONBytes {
    private(set) var base: UnsafeMutablePointer<UInt8>
    private(set) var count = 0
    private(set) var capacity: Int

    init(capacity: Int) {
        self.capacity = max(capacity, 16)
        base = UnsafeMutablePointer<UInt8>.allocate(capacity: self.capacity)
    }

    func deallocate() { base.deallocate() }

    var buffer: UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(start: base, count: count) }

    @inline(__always)
    mutating func reserve(_ extra: Int) {
        if count + extra > capacity { grow(extra) }
    }

    @inline(never)
    private mutating func grow(_ extra: Int) {
        let newCapacity = max(capacity * 2, count + extra)
        let newBase = UnsafeMutablePointer<UInt8>.allocate(capacity: newCapacity)
        newBase.update(from: base, count: count)
        base.deallocate()
        base = newBase
        capacity = newCapacity
    }

    /// Back to `count` bytes (and to a small allocation when a huge document made it grow).
    mutating func truncate(to count: Int) {
        self.count = count
        if count == 0 && capacity > 1 << 22 {
            base.deallocate()
            capacity = 1024
            base = UnsafeMutablePointer<UInt8>.allocate(capacity: capacity)
        }
    }

    /// Counts `count` more bytes, written past the end after a ``reserve(_:)``.
    @inline(__always)
    mutating func advance(by count: Int) {
        self.count += count
    }

    @inline(__always)
    mutating func append(_ byte: UInt8) {
        reserve(1)
        base[count] = byte
        count += 1
    }

    @inline(__always)
    mutating func append(_ a: UInt8, _ b: UInt8) {
        reserve(2)
        base[count] = a
        base[count + 1] = b
        count += 2
    }

    @inline(__always)
    mutating func append(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let source = bytes.baseAddress, bytes.count > 0 else { return }
        reserve(bytes.count)
        (base + count).update(from: source, count: bytes.count)
        count += bytes.count
    }

    @inline(__always)
    mutating func append(_ text: StaticString) {
        append(UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }
}

/// The key of an element of an unkeyed container, as Foundation names it ("Index 3"), made only when read.
struct FastJSONIndexKey: CodingKey {
    let index: Int
    init(index: Int) { self.index = index }
    init?(intValue: Int) { index = intValue }
    init?(stringValue: String) { nil }
    var stringValue: String { "Index \(index)" }
    var intValue: Int? { index }
}

/// "No key": a value decoded in place (single-value containers, the top level) adds nothing to the path.
struct FastJSONNoKey: CodingKey {
    init() {}
    init?(intValue: Int) { nil }
    init?(stringValue: String) { nil }
    var stringValue: String { "" }
    var intValue: Int? { nil }
}
