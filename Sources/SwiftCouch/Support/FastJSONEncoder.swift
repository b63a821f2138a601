import Foundation

/// A Codable JSON encoder writing bytes straight into one growing buffer, as Foundation's `JSONEncoder`
/// with `outputFormatting = [.withoutEscapingSlashes]` and `DateCoding`'s date strategy writes them
/// (the same text for every value; object members in the order encoded).
///
/// Whatever it cannot write exactly as Foundation would (`Decimal`, NaN and infinities, `superEncoder`,
/// a key encoded twice, containers used out of order, a value that encodes nothing at the top, nesting
/// deeper than 500, 128-bit integers) makes it throw ``FastJSON/Unsupported``; ``FastJSON`` then uses
/// Foundation. Not thread-safe: one encode at a time per instance.
struct FastJSONEncoder {
    private let impl: FastJSONEncoderImpl

    init(dateCoding: DateCoding) {
        impl = FastJSONEncoderImpl(dateCoding: dateCoding)
    }

    /// Appends the JSON text of `value` to `buffer`; on an error `buffer` is left as it was.
    func encode<T: Encodable, Sink: JSONByteSink>(_ value: T, into buffer: inout Sink) throws {
        let written: Void? = try buffer.withFastBytes { bytes in
            // Straight into the sink's storage: it is lent to the encoder for the value.
            swap(&impl.bytes, &bytes)
            defer { swap(&impl.bytes, &bytes) }
            try encodeInPlace(value)
        }
        if written != nil { return }
        defer { impl.bytes.truncate(to: 0) }
        try encodeInPlace(value)
        buffer.appendJSON(impl.bytes.buffer)
    }

    /// The JSON text of `value`.
    func encode<T: Encodable>(_ value: T) throws -> Data {
        defer { impl.bytes.truncate(to: 0) }
        try encodeInPlace(value)
        return Data(buffer: impl.bytes.buffer)
    }

    /// Appends `value` to the encoder's bytes; on an error the encoder is reset and its bytes are
    /// as they were.
    private func encodeInPlace<T: Encodable>(_ value: T) throws {
        let mark = impl.bytes.count
        do {
            try impl.encodeTopLevel(value)
        } catch {
            impl.reset()
            impl.bytes.truncate(to: mark)
            throw error
        }
    }

    private init(impl: FastJSONEncoderImpl) { self.impl = impl }

    /// The JSON text of `value`, with this thread's encoder.
    static func encode<T: Encodable>(_ value: T, dateCoding: DateCoding) throws -> Data {
        try withThreadEncoder(dateCoding: dateCoding) { try $0.encode(value) }
    }

    /// Appends the JSON text of `value` to `buffer`, with this thread's encoder.
    static func encode<T: Encodable, Sink: JSONByteSink>(_ value: T, dateCoding: DateCoding, into buffer: inout Sink)
        throws
    {
        try withThreadEncoder(dateCoding: dateCoding) { try $0.encode(value, into: &buffer) }
    }

    /// ``encode(_:dateCoding:into:)``, also returning what the value wrote as its top-level `_id`
    /// and `_rev` members (a bulk batch's documents: no second pass over the bytes to find them).
    static func encodeRecordingIDAndRev<T: Encodable, Sink: JSONByteSink>(
        _ value: T, dateCoding: DateCoding, into buffer: inout Sink
    ) throws -> TopLevelIDAndRev {
        try withThreadEncoder(dateCoding: dateCoding) { encoder in
            encoder.impl.recordsIDAndRev = true
            defer { encoder.impl.recordsIDAndRev = false }
            try encoder.encode(value, into: &buffer)
            return encoder.impl.idAndRev
        }
    }

    /// Each thread keeps the encoder it last used (making one costs an object and four buffers,
    /// per document of a bulk batch); released when the thread ends.
    private static let cache = ThreadSlot(holdingObjects: ())

    /// Largest output buffer kept between encodes (a large document's buffer is let go).
    private static let keptCapacity = 64 * 1024

    /// Runs `body` with this thread's encoder for `dateCoding`. The encoder is taken out of the
    /// thread's slot while in use, so an `encode(to:)` that encodes JSON again gets one of its own.
    private static func withThreadEncoder<R>(dateCoding: DateCoding, _ body: (FastJSONEncoder) throws -> R) rethrows
        -> R
    {
        var impl: FastJSONEncoderImpl?
        if let raw = UnsafeMutableRawPointer(bitPattern: cache.value) {
            cache.value = 0
            let cached = Unmanaged<FastJSONEncoderImpl>.fromOpaque(raw).takeRetainedValue()
            if cached.dateCoding == dateCoding { impl = cached }
        }
        let encoder = impl ?? FastJSONEncoderImpl(dateCoding: dateCoding)
        defer {
            if encoder.bytes.capacity <= keptCapacity, cache.value == 0 {
                encoder.reset()
                cache.value = Int(bitPattern: Unmanaged.passRetained(encoder).toOpaque())
            }
        }
        return try body(FastJSONEncoder(impl: encoder))
    }
}

/// The encoder's state: the output, the open containers (a stack, closed as soon as an outer one is
/// written to again), the keys of the open objects (to refuse a key written twice) and the coding path.
///
/// The stored properties are `@exclusivity(unchecked)`: dynamic exclusivity checks were ~40% of the time, and
/// no access to them overlaps another (no user code runs while one is open; `encode(to:)` is called between).
final class FastJSONEncoderImpl: Encoder {
    /// Whether to record the top-level `_id` and `_rev` members in ``idAndRev``.
    @exclusivity(unchecked) var recordsIDAndRev = false
    @exclusivity(unchecked) var idAndRev = TopLevelIDAndRev()

    /// An open object or array.
    struct Frame {
        var id: Int
        var isObject: Bool
        var count: Int
        /// Where this object's keys start in `keys`.
        var keysStart: Int
        /// Hashes of the keys, once the object has more than `linearKeys` of them.
        var keyHashes: Set<UInt32>?
        /// One bit per key written (bit `hash % 64`): a key whose bit is clear is new, with no
        /// look at the keys before it (the usual case, where every key is new).
        var keyBits: UInt64 = 0
    }

    /// A key written in an open object: where its escaped text is in `bytes`.
    struct WrittenKey {
        var start: Int
        var count: Int
        var hash: UInt32
    }

    /// What the value being encoded has asked for.
    enum ValueState: Equatable {
        case empty
        case keyed(Int)
        case unkeyed(Int)
        case single
    }

    static let maximumDepth = 500
    static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)
    static let linearKeys = 24

    let dateCoding: DateCoding
    @exclusivity(unchecked) var bytes = FastJSONBytes(capacity: 256)
    @exclusivity(unchecked) var frames = EncoderStack<Frame>(capacity: 8)
    @exclusivity(unchecked) var keys = EncoderStack<WrittenKey>(capacity: 32)
    @exclusivity(unchecked) var nextID = 1
    /// The frames below this index belong to values around the one being encoded.
    @exclusivity(unchecked) var valueBase = 0
    @exclusivity(unchecked) var valueState = ValueState.empty
    /// Identifies the value being encoded, so a stale single-value container is noticed.
    @exclusivity(unchecked) var valueID = 0
    @exclusivity(unchecked) var path: [any CodingKey] = []
    /// Set by anything unsupported, including in calls that cannot throw; checked at the end.
    @exclusivity(unchecked) var failure: String?

    var codingPath: [any CodingKey] { path }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(dateCoding: DateCoding) {
        self.dateCoding = dateCoding
        path.reserveCapacity(8)
    }

    deinit {
        bytes.deallocate()
        frames.deallocate()
        keys.deallocate()
    }

    func reset() {
        frames.removeAll()
        keys.removeAll()
        if !path.isEmpty { path.removeAll(keepingCapacity: true) }
        valueBase = 0
        valueState = .empty
        failure = nil
        idAndRev = TopLevelIDAndRev()
    }

    // MARK: Failure

    func unsupported(_ reason: String) -> FastJSON.Unsupported {
        if failure == nil { failure = reason }
        return FastJSON.Unsupported(reason)
    }

    // MARK: Top level and values

    func encodeTopLevel<T: Encodable>(_ value: T) throws {
        reset()
        nextID += 1
        valueID = nextID
        if try !encodeSpecial(value) {
            try value.encode(to: self)
            closeFrames(downTo: 0)
            if valueState == .empty { throw unsupported("top-level value encoded nothing") }
        }
        if let failure { throw FastJSON.Unsupported(failure) }
    }

    /// Writes `value` at the current position (after a key or comma), as Foundation's `wrapGeneric`.
    @inline(__always)
    func encodeValue<T: Encodable>(_ value: T, key: some CodingKey, extra: [any CodingKey]) throws {
        if try encodeSpecial(value) { return }
        let savedBase = valueBase
        let savedState = valueState
        let savedID = valueID
        nextID += 1
        valueID = nextID
        valueBase = frames.count
        valueState = .empty
        if !extra.isEmpty { path.append(contentsOf: extra) }
        path.append(key)
        defer {
            path.removeLast(extra.count + 1)
            valueBase = savedBase
            valueState = savedState
            valueID = savedID
        }
        try value.encode(to: self)
        closeFrames(downTo: valueBase)
        if valueState == .empty {
            bytes.append(UInt8(ascii: "{"), UInt8(ascii: "}"))
        }
    }

    /// Writes the values Foundation special-cases, and the primitives, without calling `encode(to:)`.
    @inline(__always)
    func encodeSpecial<T: Encodable>(_ value: T) throws -> Bool {
        if T.self == String.self {
            writeString(unsafeBitCast(value, to: String.self))
        } else if T.self == Int.self {
            writeInteger(unsafeBitCast(value, to: Int.self))
        } else if T.self == Bool.self {
            writeBool(unsafeBitCast(value, to: Bool.self))
        } else if T.self == Double.self {
            try writeDouble(unsafeBitCast(value, to: Double.self))
        } else if T.self == Date.self {
            try writeDate(unsafeBitCast(value, to: Date.self))
        } else if T.self == Data.self {
            writeString(unsafeBitCast(value, to: Data.self).base64EncodedString())
        } else if T.self == URL.self {
            writeString(unsafeBitCast(value, to: URL.self).absoluteString)
        } else if T.self == Decimal.self {
            throw unsupported("Decimal")
        } else if T.self == Int64.self {
            writeInteger(unsafeBitCast(value, to: Int64.self))
        } else if T.self == Float.self {
            try writeFloat(unsafeBitCast(value, to: Float.self))
        } else if ObjectIdentifier(T.self) == FastJSONSpecialTypes.stringArray, frames.count < Self.maximumDepth {
            // Common in documents (tags, roles, names): without `Array`'s generic `encode(to:)`.
            bytes.append(UInt8(ascii: "["))
            for (index, string) in unsafeBitCast(value, to: [String].self).enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                writeString(string)
            }
            bytes.append(UInt8(ascii: "]"))
        } else {
            return false
        }
        return true
    }

    // MARK: Writing

    @inline(__always)
    func writeBool(_ value: Bool) {
        bytes.append(value ? "true" : "false")
    }

    @inline(__always)
    func writeNull() {
        bytes.append("null")
    }

    /// Decimal digits, as `description` writes them.
    func writeInteger<I: FixedWidthInteger>(_ value: I) {
        if I.bitWidth > 64 {
            var text = value.description
            text.withUTF8 { bytes.append($0) }
            return
        }
        var magnitude: UInt64
        if value < 0 {
            bytes.append(UInt8(ascii: "-"))
            magnitude = 0 &- UInt64(truncatingIfNeeded: Int64(value))
        } else {
            magnitude = UInt64(truncatingIfNeeded: value)
        }
        if magnitude < 10 {
            bytes.append(UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude))
            return
        }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var index = 20
            while magnitude > 0 {
                let (quotient, remainder) = magnitude.quotientAndRemainder(dividingBy: 10)
                index -= 1
                digits[index] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: remainder)
                magnitude = quotient
            }
            bytes.append(UnsafeBufferPointer(rebasing: digits[index..<20]))
        }
    }

    /// `description` without a trailing `.0`, as Foundation writes floating-point numbers.
    func writeDouble(_ value: Double) throws {
        guard value.isFinite else { throw unsupported("non-finite Double") }
        if value == value.rounded(.towardZero), value.magnitude < 1e15 {
            // An integral value below 10^15 is written by `description` as its digits and `.0`.
            if value == 0 {
                if value.sign == .minus { bytes.append(UInt8(ascii: "-")) }
                bytes.append(UInt8(ascii: "0"))
            } else {
                writeInteger(Int64(value))
            }
            return
        }
        if writeShortDecimal(value) { return }
        writeFloatingDescription(value.description)
    }

    static let powersOfTen: [Double] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000]

    /// Writes `value` as `description` would when it is a decimal with at most six digits after
    /// the point (4.5, 19.99, 0.125) and between 10^-4 and 10^15 (where `description` uses no
    /// exponent), without making the `String`; false for anything else.
    ///
    /// The fewest digits after the point whose decimal reads back as `value` are `description`'s
    /// own (its shortest round-trip digits): below 2^50 at that scale, no other decimal with as
    /// many digits lies within half a unit in the last place of `value`.
    @inline(__always)
    private func writeShortDecimal(_ value: Double) -> Bool {
        let magnitude = value.magnitude
        guard magnitude >= 1e-4, magnitude < 1e15 else { return false }
        for digits in 1...6 {
            let scale = Self.powersOfTen[digits]
            let scaled = (magnitude * scale).rounded()
            guard scaled < 0x1p50 else { return false }
            guard scaled / scale == magnitude else { continue }
            let (whole, remainder) = UInt64(scaled).quotientAndRemainder(dividingBy: UInt64(scale))
            var fraction = remainder
            if value < 0 { bytes.append(UInt8(ascii: "-")) }
            writeInteger(whole)
            bytes.reserve(digits + 1)
            bytes.append(UInt8(ascii: "."))
            let end = bytes.base + bytes.count + digits
            for position in 1...digits {
                end[-position] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: fraction % 10)
                fraction /= 10
            }
            bytes.advance(by: digits)
            return true
        }
        return false
    }

    func writeFloat(_ value: Float) throws {
        guard value.isFinite else { throw unsupported("non-finite Float") }
        writeFloatingDescription(value.description)
    }

    private func writeFloatingDescription(_ description: String) {
        var text = description
        text.withUTF8 { utf8 in
            var count = utf8.count
            if count >= 2, utf8[count - 2] == UInt8(ascii: "."), utf8[count - 1] == UInt8(ascii: "0") {
                count -= 2
            }
            bytes.append(UnsafeBufferPointer(rebasing: utf8[0..<count]))
        }
    }

    func writeDate(_ date: Date) throws {
        switch dateCoding {
        case .iso8601:
            // Straight into the buffer (the text needs no escaping); the formatter's outside 1600–9999.
            if ISO8601.withText(date, { writeStringBytes($0) }) == nil {
                writeString(DateCoding.formatterISO8601Text(date))
            }
        case .secondsSince1970: try writeDouble(date.timeIntervalSince1970)
        case .millisecondsSince1970: try writeDouble(1000.0 * date.timeIntervalSince1970)
        case .foundationDefault: try writeDouble(date.timeIntervalSinceReferenceDate)
        }
    }

    /// A JSON string: `"` and `\` escaped, `\b \f \n \r \t`, other control characters as `\u00xx`
    /// (lowercase hex), `/` and everything else (DEL, non-ASCII) as is.
    func writeString(_ string: String) {
        // Native strings lend their bytes without a copy of the string (`withUTF8` is mutating).
        if string.utf8.withContiguousStorageIfAvailable({ writeStringBytes($0) }) != nil { return }
        var string = string
        string.withUTF8 { writeStringBytes($0) }
    }

    func writeStringBytes(_ utf8: UnsafeBufferPointer<UInt8>) {
        bytes.append(UInt8(ascii: "\""))
        if let base = utf8.baseAddress {
            var start = 0
            while start < utf8.count {
                let count = min(utf8.count - start, Self.escapingChunk)
                writeEscaped(base + start, count: count)
                start += count
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// Strings are escaped this many bytes at a time, with room for the chunk's worst case
    /// reserved first: a long string's buffer grows with its text, not with six times it.
    static let escapingChunk = 4096

    /// `count` bytes at `source`, escaped, written straight into the buffer: room for the worst
    /// case (every byte as `\u00xx`) is reserved first, then eight plain bytes are stored at a
    /// time and escapes inline, with no copy call per run of plain bytes.
    @inline(__always)
    private func writeEscaped(_ source: UnsafePointer<UInt8>, count: Int) {
        bytes.reserve(max(count &* 6, 8))
        let start = bytes.base + bytes.count
        if count < 8 {
            // A short string (most keys and many values): its bytes in one word, padded with
            // spaces, checked at once and stored whole (the room is reserved); only the string's
            // own bytes are counted.
            let word = Self.shortWord(source, count: count)
            if FastJSONParser.isPlainOrUTF8(word) {
                UnsafeMutableRawPointer(start).storeBytes(of: word.littleEndian, as: UInt64.self)
                bytes.advance(by: count)
                return
            }
        }
        var out = start
        var index = 0
        while index &+ 8 <= count {
            let word = UnsafeRawPointer(source + index).loadUnaligned(as: UInt64.self)
            guard FastJSONParser.isPlainOrUTF8(word) else { break }
            UnsafeMutableRawPointer(out).storeBytes(of: word, as: UInt64.self)
            out += 8
            index &+= 8
        }
        if index < count, count >= 8, index &+ 8 > count {
            // The last few bytes of a string of eight or more, all plain so far (`out` is `start
            // + index`): the last eight bytes, overlapping what is written, checked and stored at
            // once instead of one by one.
            let last = count &- 8
            let word = UnsafeRawPointer(source + last).loadUnaligned(as: UInt64.self)
            if FastJSONParser.isPlainOrUTF8(word) {
                UnsafeMutableRawPointer(start + last).storeBytes(of: word, as: UInt64.self)
                out = start + count
                index = count
            }
        }
        while index < count {
            let byte = source[index]
            index &+= 1
            if byte >= 0x20 && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\") {
                out.pointee = byte
                out += 1
                continue
            }
            out.pointee = UInt8(ascii: "\\")
            if let letter = Self.shortEscape(byte) {
                out[1] = letter
            } else {
                out[1] = UInt8(ascii: "u")
                out[2] = UInt8(ascii: "0")
                out[3] = UInt8(ascii: "0")
                out[4] = Self.hexDigits[Int(byte >> 4)]
                out[5] = Self.hexDigits[Int(byte & 0xF)]
                out += 4
            }
            out += 2
        }
        bytes.advance(by: out - start)
    }

    /// The `count` (< 8) bytes at `source` as a word, first byte lowest, the rest spaces: read as
    /// two overlapping loads (no call, no loop), never past the last byte.
    @inline(__always)
    static func shortWord(_ source: UnsafePointer<UInt8>, count: Int) -> UInt64 {
        let raw = UnsafeRawPointer(source)
        let word: UInt64
        switch count {
        case 0: return 0x2020_2020_2020_2020
        case 1: word = UInt64(source[0])
        case 2, 3:
            let low = UInt64(UInt16(littleEndian: raw.loadUnaligned(as: UInt16.self)))
            let high = UInt64(UInt16(littleEndian: raw.loadUnaligned(fromByteOffset: count - 2, as: UInt16.self)))
            word = low | high << UInt64(8 * (count - 2))
        default:
            let low = UInt64(UInt32(littleEndian: raw.loadUnaligned(as: UInt32.self)))
            let high = UInt64(UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)))
            word = low | high << UInt64(8 * (count - 4))
        }
        let used = (UInt64(1) << UInt64(8 * count)) &- 1
        return word | (0x2020_2020_2020_2020 & ~used)
    }

    /// The letter after `\` for the characters JSON escapes in two bytes (`\"`, `\\`, `\b`,
    /// `\f`, `\n`, `\r`, `\t`); nil for the other control characters (`\u00xx`).
    @inline(__always)
    static func shortEscape(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "\""): UInt8(ascii: "\"")
        case UInt8(ascii: "\\"): UInt8(ascii: "\\")
        case 0x08: UInt8(ascii: "b")
        case 0x0C: UInt8(ascii: "f")
        case 0x0A: UInt8(ascii: "n")
        case 0x0D: UInt8(ascii: "r")
        case 0x09: UInt8(ascii: "t")
        default: nil
        }
    }

    // MARK: Containers

    /// Closes the open containers above `level` (writing their `}` / `]`).
    @inline(__always)
    func closeFrames(downTo level: Int) {
        while frames.count > level {
            let frame = frames.removeLast()
            if frame.isObject {
                keys.truncate(to: frame.keysStart)
                bytes.append(UInt8(ascii: "}"))
            } else {
                bytes.append(UInt8(ascii: "]"))
            }
        }
    }

    /// Opens an object or array at the current position.
    func openFrame(isObject: Bool) -> (id: Int, index: Int) {
        nextID += 1
        if frames.count >= Self.maximumDepth {
            _ = unsupported("nesting deeper than \(Self.maximumDepth)")
        }
        frames.append(Frame(id: nextID, isObject: isObject, count: 0, keysStart: keys.count, keyHashes: nil))
        bytes.append(isObject ? UInt8(ascii: "{") : UInt8(ascii: "["))
        return (nextID, frames.count - 1)
    }

    /// Makes the container `id` at `index` the innermost open one (closing those opened inside it since),
    /// or throws when it was closed or belongs to a value around the one being encoded.
    @inline(__always)
    func activate(id: Int32, index: Int) throws {
        if index == frames.count - 1, Int32(truncatingIfNeeded: frames[index].id) == id, index >= valueBase { return }
        guard index < frames.count, Int32(truncatingIfNeeded: frames[index].id) == id, index >= valueBase else {
            throw unsupported("a container used after it was closed, or out of order")
        }
        closeFrames(downTo: index + 1)
    }

    /// Writes `,` if needed and the key of a member of the object at `index`, refusing a repeated key.
    func writeKey(_ key: String, frameIndex index: Int) throws {
        if frames[index].count > 0 { bytes.append(UInt8(ascii: ",")) }
        frames[index].count += 1
        let start = bytes.count
        writeString(key)
        let count = bytes.count - start
        if recordsIDAndRev, index == 0 {
            idAndRev.keyWritten(UnsafeBufferPointer(start: bytes.base + start, count: count))
        }
        let hash = FastJSON.keyHash(UnsafeBufferPointer(start: bytes.base + start, count: count))
        let keysStart = frames[index].keysStart
        let existing = keys.count - keysStart
        let bit = UInt64(1) << UInt64(hash & 63)
        let bitSeen = frames[index].keyBits & bit != 0
        frames[index].keyBits |= bit
        if existing < Self.linearKeys {
            // A key whose bit no earlier key has is new: only the others are looked for.
            if bitSeen {
                for position in keysStart..<keys.count where keys[position].hash == hash {
                    if sameBytes(keys[position], start: start, count: count) {
                        throw unsupported("key '\(key)' encoded twice")
                    }
                }
            }
        } else {
            if frames[index].keyHashes == nil {
                var hashes = Set<UInt32>()
                for position in keysStart..<keys.count { hashes.insert(keys[position].hash) }
                frames[index].keyHashes = hashes
            }
            if !frames[index].keyHashes!.insert(hash).inserted {
                for position in keysStart..<keys.count where keys[position].hash == hash {
                    if sameBytes(keys[position], start: start, count: count) {
                        throw unsupported("key '\(key)' encoded twice")
                    }
                }
            }
        }
        keys.append(WrittenKey(start: start, count: count, hash: hash))
        bytes.append(UInt8(ascii: ":"))
    }

    private func sameBytes(_ key: WrittenKey, start: Int, count: Int) -> Bool {
        guard key.count == count else { return false }
        return memcmp(bytes.base + key.start, bytes.base + start, count) == 0
    }

    /// Writes `,` if needed before the next element of the array at `index`.
    @inline(__always)
    func nextElement(frameIndex index: Int) {
        if frames[index].count > 0 { bytes.append(UInt8(ascii: ",")) }
        frames[index].count += 1
    }

    // MARK: Encoder

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        switch valueState {
        case .keyed(let id):
            if valueBase < frames.count, frames[valueBase].id == id {
                return KeyedEncodingContainer(
                    FastKeyedEncodingContainer(impl: self, id: id, index: valueBase, extra: []))
            }
            _ = unsupported("keyed container requested again after it was closed")
        case .empty:
            let (id, index) = openFrame(isObject: true)
            valueState = .keyed(id)
            return KeyedEncodingContainer(FastKeyedEncodingContainer(impl: self, id: id, index: index, extra: []))
        case .unkeyed, .single:
            _ = unsupported("keyed container requested after another kind")
        }
        return KeyedEncodingContainer(FastKeyedEncodingContainer(impl: self, id: 0, index: 0, extra: []))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        switch valueState {
        case .unkeyed(let id):
            if valueBase < frames.count, frames[valueBase].id == id {
                return FastUnkeyedEncodingContainer(impl: self, id: id, index: valueBase, extra: [])
            }
            _ = unsupported("unkeyed container requested again after it was closed")
        case .empty:
            let (id, index) = openFrame(isObject: false)
            valueState = .unkeyed(id)
            return FastUnkeyedEncodingContainer(impl: self, id: id, index: index, extra: [])
        case .keyed, .single:
            _ = unsupported("unkeyed container requested after another kind")
        }
        return FastUnkeyedEncodingContainer(impl: self, id: 0, index: 0, extra: [])
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        FastSingleValueEncodingContainer(impl: self, valueID: valueID)
    }
}

/// A keyed container: the object `id`, at `index` in the stack of open containers.
struct FastKeyedEncodingContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let impl: FastJSONEncoderImpl
    private let id: Int32
    private let index: Int32
    /// The keys of the nested containers between the value that owns this container and it.
    private let extra: [any CodingKey]

    init(impl: FastJSONEncoderImpl, id: Int, index: Int, extra: [any CodingKey]) {
        self.impl = impl
        self.id = Int32(truncatingIfNeeded: id)
        self.index = Int32(truncatingIfNeeded: index)
        self.extra = extra
    }

    var codingPath: [any CodingKey] { impl.path + extra }

    @inline(__always)
    private func key(_ key: Key) throws {
        try impl.activate(id: id, index: Int(index))
        try impl.writeKey(key.stringValue, frameIndex: Int(index))
    }

    mutating func encodeNil(forKey key: Key) throws {
        try self.key(key)
        impl.writeNull()
    }

    mutating func encode(_ value: Bool, forKey key: Key) throws {
        try self.key(key)
        impl.writeBool(value)
    }

    mutating func encode(_ value: String, forKey key: Key) throws {
        try self.key(key)
        impl.writeString(value)
        if impl.recordsIDAndRev, index == 0 { impl.idAndRev.stringWritten(value) }
    }

    mutating func encode(_ value: Double, forKey key: Key) throws {
        try self.key(key)
        try impl.writeDouble(value)
    }

    mutating func encode(_ value: Float, forKey key: Key) throws {
        try self.key(key)
        try impl.writeFloat(value)
    }

    mutating func encode(_ value: Int, forKey key: Key) throws {
        try self.key(key)
        impl.writeInteger(value)
    }

    mutating func encode(_ value: Int8, forKey key: Key) throws {
        try self.key(key)
        impl.writeInteger(value)
    }

    mutating func encode(_ value: Int16, forKey key: Key) throws {
        try self.key(key)
        impl.writeInteger(value)
    }

    mutating func encode(_ value: Int32, forKey key: Key) throws {
        try self.key(key)
        impl.writeInteger(value)
    }

    mutating func encode(_ value: Int64, forKey key: Key) throws {
        try self.key(key)
        impl.writeInteger(value)
    }

    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    mutating func encode(_ value: Int128, forKey key: Key) throws {
        throw impl.unsupported("Int128")
    }

    mutating func encode(_ value: UInt, forKey key: Key) throws {
        try self.key(key)
        impl.writeInteger(value)
    }

    mutating func encode(_ value: UInt8, forKey key: Key) throws {
        try self.key(key)
        impl.writeInteger(value)
    }

    mutating func encode(_ value: UInt16, forKey key: Key) throws {
        try self.key(key)
        impl.writeInteger(value)
    }

    mutating func encode(_ value: UInt32, forKey key: Key) throws {
        try self.key(key)
        impl.writeInteger(value)
    }

    mutating func encode(_ value: UInt64, forKey key: Key) throws {
        try self.key(key)
        impl.writeInteger(value)
    }

    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    mutating func encode(_ value: UInt128, forKey key: Key) throws {
        throw impl.unsupported("UInt128")
    }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try self.key(key)
        try impl.encodeValue(value, key: key, extra: extra)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type, forKey key: Key
    ) -> KeyedEncodingContainer<NestedKey> {
        do {
            try self.key(key)
        } catch {
            return KeyedEncodingContainer(FastKeyedEncodingContainer<NestedKey>(impl: impl, id: 0, index: 0, extra: []))
        }
        let (id, index) = impl.openFrame(isObject: true)
        return KeyedEncodingContainer(
            FastKeyedEncodingContainer<NestedKey>(impl: impl, id: id, index: index, extra: extra + [key]))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        do {
            try self.key(key)
        } catch {
            return FastUnkeyedEncodingContainer(impl: impl, id: 0, index: 0, extra: [])
        }
        let (id, index) = impl.openFrame(isObject: false)
        return FastUnkeyedEncodingContainer(impl: impl, id: id, index: index, extra: extra + [key])
    }

    mutating func superEncoder() -> any Encoder {
        _ = impl.unsupported("superEncoder")
        return impl
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        _ = impl.unsupported("superEncoder")
        return impl
    }
}

/// An unkeyed container: the array `id`, at `index` in the stack of open containers.
struct FastUnkeyedEncodingContainer: UnkeyedEncodingContainer {
    let impl: FastJSONEncoderImpl
    private let id: Int32
    private let index: Int32
    /// The keys of the nested containers between the value that owns this container and it.
    private let extra: [any CodingKey]

    init(impl: FastJSONEncoderImpl, id: Int, index: Int, extra: [any CodingKey]) {
        self.impl = impl
        self.id = Int32(truncatingIfNeeded: id)
        self.index = Int32(truncatingIfNeeded: index)
        self.extra = extra
    }

    var codingPath: [any CodingKey] { impl.path + extra }

    var count: Int {
        let index = Int(index)
        guard index < impl.frames.count, Int32(truncatingIfNeeded: impl.frames[index].id) == id else { return 0 }
        return impl.frames[index].count
    }

    @inline(__always)
    private func next() throws {
        try impl.activate(id: id, index: Int(index))
        impl.nextElement(frameIndex: Int(index))
    }

    mutating func encodeNil() throws {
        try next()
        impl.writeNull()
    }

    mutating func encode(_ value: Bool) throws {
        try next()
        impl.writeBool(value)
    }

    mutating func encode(_ value: String) throws {
        try next()
        impl.writeString(value)
    }

    mutating func encode(_ value: Double) throws {
        try next()
        try impl.writeDouble(value)
    }

    mutating func encode(_ value: Float) throws {
        try next()
        try impl.writeFloat(value)
    }

    mutating func encode(_ value: Int) throws {
        try next()
        impl.writeInteger(value)
    }

    mutating func encode(_ value: Int8) throws {
        try next()
        impl.writeInteger(value)
    }

    mutating func encode(_ value: Int16) throws {
        try next()
        impl.writeInteger(value)
    }

    mutating func encode(_ value: Int32) throws {
        try next()
        impl.writeInteger(value)
    }

    mutating func encode(_ value: Int64) throws {
        try next()
        impl.writeInteger(value)
    }

    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    mutating func encode(_ value: Int128) throws {
        throw impl.unsupported("Int128")
    }

    mutating func encode(_ value: UInt) throws {
        try next()
        impl.writeInteger(value)
    }

    mutating func encode(_ value: UInt8) throws {
        try next()
        impl.writeInteger(value)
    }

    mutating func encode(_ value: UInt16) throws {
        try next()
        impl.writeInteger(value)
    }

    mutating func encode(_ value: UInt32) throws {
        try next()
        impl.writeInteger(value)
    }

    mutating func encode(_ value: UInt64) throws {
        try next()
        impl.writeInteger(value)
    }

    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    mutating func encode(_ value: UInt128) throws {
        throw impl.unsupported("UInt128")
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try next()
        try impl.encodeValue(value, key: FastJSONIndexKey(index: impl.frames[Int(index)].count - 1), extra: extra)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<
        NestedKey
    > {
        do {
            try next()
        } catch {
            return KeyedEncodingContainer(FastKeyedEncodingContainer<NestedKey>(impl: impl, id: 0, index: 0, extra: []))
        }
        let elementKey = FastJSONIndexKey(index: impl.frames[Int(index)].count - 1)
        let (id, index) = impl.openFrame(isObject: true)
        return KeyedEncodingContainer(
            FastKeyedEncodingContainer<NestedKey>(impl: impl, id: id, index: index, extra: extra + [elementKey]))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        do {
            try next()
        } catch {
            return FastUnkeyedEncodingContainer(impl: impl, id: 0, index: 0, extra: [])
        }
        let elementKey = FastJSONIndexKey(index: impl.frames[Int(index)].count - 1)
        let (id, index) = impl.openFrame(isObject: false)
        return FastUnkeyedEncodingContainer(impl: impl, id: id, index: index, extra: extra + [elementKey])
    }

    mutating func superEncoder() -> any Encoder {
        _ = impl.unsupported("superEncoder")
        return impl
    }
}

/// The single-value container of the value `valueID`: one value, written where that value goes.
struct FastSingleValueEncodingContainer: SingleValueEncodingContainer {
    let impl: FastJSONEncoderImpl
    let valueID: Int

    var codingPath: [any CodingKey] { impl.path }

    @inline(__always)
    private func claim() throws {
        guard impl.valueID == valueID, impl.valueState == .empty else {
            throw impl.unsupported("single value container used twice or out of order")
        }
        impl.valueState = .single
    }

    mutating func encodeNil() throws {
        try claim()
        impl.writeNull()
    }

    mutating func encode(_ value: Bool) throws {
        try claim()
        impl.writeBool(value)
    }

    mutating func encode(_ value: String) throws {
        try claim()
        impl.writeString(value)
    }

    mutating func encode(_ value: Double) throws {
        try claim()
        try impl.writeDouble(value)
    }

    mutating func encode(_ value: Float) throws {
        try claim()
        try impl.writeFloat(value)
    }

    mutating func encode(_ value: Int) throws {
        try claim()
        impl.writeInteger(value)
    }

    mutating func encode(_ value: Int8) throws {
        try claim()
        impl.writeInteger(value)
    }

    mutating func encode(_ value: Int16) throws {
        try claim()
        impl.writeInteger(value)
    }

    mutating func encode(_ value: Int32) throws {
        try claim()
        impl.writeInteger(value)
    }

    mutating func encode(_ value: Int64) throws {
        try claim()
        impl.writeInteger(value)
    }

    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    mutating func encode(_ value: Int128) throws {
        throw impl.unsupported("Int128")
    }

    mutating func encode(_ value: UInt) throws {
        try claim()
        impl.writeInteger(value)
    }

    mutating func encode(_ value: UInt8) throws {
        try claim()
        impl.writeInteger(value)
    }

    mutating func encode(_ value: UInt16) throws {
        try claim()
        impl.writeInteger(value)
    }

    mutating func encode(_ value: UInt32) throws {
        try claim()
        impl.writeInteger(value)
    }

    mutating func encode(_ value: UInt64) throws {
        try claim()
        impl.writeInteger(value)
    }

    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    mutating func encode(_ value: UInt128) throws {
        throw impl.unsupported("UInt128")
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try claim()
        if try impl.encodeSpecial(value) { return }
        // The value takes this value's place: encode it as a nested value without a key of its own.
        let savedState = impl.valueState
        let savedBase = impl.valueBase
        let savedID = impl.valueID
        impl.nextID += 1
        impl.valueID = impl.nextID
        impl.valueBase = impl.frames.count
        impl.valueState = .empty
        defer {
            impl.valueBase = savedBase
            impl.valueState = savedState
            impl.valueID = savedID
        }
        try value.encode(to: impl)
        impl.closeFrames(downTo: impl.valueBase)
        if impl.valueState == .empty {
            impl.bytes.append(UInt8(ascii: "{"), UInt8(ascii: "}"))
        }
    }
}

/// What a document wrote as its top-level `_id` and `_rev` members, recorded while it is encoded:
/// how many times each key was written, and the string written right after it.
struct TopLevelIDAndRev {
    private var idKeys = 0
    private var revKeys = 0
    private var id: String?
    private var rev: String?
    /// The member whose key was written last at the top level, waiting for its value.
    private var open: Member?

    private enum Member { case id, rev }

    /// A top-level key was written: its text as written, quotes included (`"_id"` and `"_rev"` have
    /// no other way to be written, and no other key is written so).
    mutating func keyWritten(_ written: UnsafeBufferPointer<UInt8>) {
        open = nil
        guard written.count == 5 || written.count == 6, written[1] == UInt8(ascii: "_") else { return }
        if written.count == 5, written[2] == UInt8(ascii: "i"), written[3] == UInt8(ascii: "d") {
            idKeys += 1
            open = .id
        } else if written.count == 6, written[2] == UInt8(ascii: "r"), written[3] == UInt8(ascii: "e"),
            written[4] == UInt8(ascii: "v")
        {
            revKeys += 1
            open = .rev
        }
    }

    mutating func stringWritten(_ value: String) {
        switch open {
        case .id?: id = value
        case .rev?: rev = value
        case nil: break
        }
        open = nil
    }

    /// The `_id` and `_rev` strings (nil when absent), as `TopLevelStrings.find` reads them from
    /// the bytes; nil when the recording cannot tell (a member written as `null`, a number or an
    /// object, or through another path than a keyed container's `encode(String)`), and the bytes
    /// must be read.
    var strings: DocumentIDAndRev? {
        guard idKeys == 0 || (idKeys == 1 && id != nil), revKeys == 0 || (revKeys == 1 && rev != nil) else {
            return nil
        }
        return DocumentIDAndRev(id: id, rev: rev)
    }
}

/// A document's top-level `_id` and `_rev` strings (nil when absent).
struct DocumentIDAndRev {
    var id: String?
    var rev: String?
}

/// The encoder's stacks (open containers, keys of open objects): an array without copy-on-write,
/// uniqueness checks or reference counting, owned by one encoder and freed by it
/// (``deallocate()``). Indices are checked.
struct EncoderStack<Element> {
    private var base: UnsafeMutablePointer<Element>
    private(set) var count = 0
    private var capacity: Int

    init(capacity: Int) {
        self.capacity = max(capacity, 4)
        base = UnsafeMutablePointer<Element>.allocate(capacity: self.capacity)
    }

    /// Frees the storage (the elements first); the stack is not used again.
    func deallocate() {
        base.deinitialize(count: count)
        base.deallocate()
    }

    subscript(index: Int) -> Element {
        @inline(__always) unsafeAddress {
            precondition(index >= 0 && index < count, "EncoderStack index out of range")
            return UnsafePointer(base + index)
        }
        @inline(__always) unsafeMutableAddress {
            precondition(index >= 0 && index < count, "EncoderStack index out of range")
            return base + index
        }
    }

    @inline(__always)
    mutating func append(_ element: Element) {
        if count == capacity { grow() }
        (base + count).initialize(to: element)
        count += 1
    }

    @inline(never)
    private mutating func grow() {
        let newBase = UnsafeMutablePointer<Element>.allocate(capacity: capacity * 2)
        newBase.moveInitialize(from: base, count: count)
        base.deallocate()
        base = newBase
        capacity *= 2
    }

    @inline(__always)
    mutating func removeLast() -> Element {
        precondition(count > 0, "EncoderStack is empty")
        count -= 1
        return (base + count).move()
    }

    /// Drops the elements from `newCount` on.
    @inline(__always)
    mutating func truncate(to newCount: Int) {
        guard newCount < count else { return }
        (base + newCount).deinitialize(count: count - newCount)
        count = newCount
    }

    mutating func removeAll() { truncate(to: 0) }
}
