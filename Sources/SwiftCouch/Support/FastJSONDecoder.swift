import Foundation

/// A Codable JSON decoder over a flat index of the input: one pass records every value's kind and byte
/// range (containers with their member count and the index after them), then `Decoder` containers read
/// the bytes in place; keys are compared as UTF-8 bytes, never made into strings to look them up.
///
/// It decodes what Foundation's `JSONDecoder` (with `DateCoding`'s date strategy) decodes, to the same
/// values, and throws the same `DecodingError`s inside `init(from:)` (a missing key, a null, a type
/// mismatch). It refuses — throws ``FastJSON/Unsupported`` and remembers it, so a `try?` in user code
/// cannot hide it — whatever it does not reproduce exactly: JSON that is not strict RFC 8259 (Foundation
/// takes trailing commas), invalid UTF-8, lone surrogates, nesting deeper than 500, `superDecoder`,
/// `Decimal`, 128-bit integers, a number with a fraction or exponent read as an integer beyond 2^53 with
/// more than 19 significant digits. ``FastJSON`` then decodes with Foundation. Not thread-safe: one decode
/// at a time per instance.
struct FastJSONDecoder {
    private var impl: FastJSONDecoderImpl

    init(dateCoding: DateCoding) {
        impl = FastJSONDecoderImpl(dateCoding: dateCoding)
    }

    private init(impl: FastJSONDecoderImpl) {
        self.impl = impl
    }

    /// Each thread keeps the decoder its last one-off decode used (a decoder is an object, its index
    /// and its path: a response's decode would otherwise make them anew); released when the thread
    /// ends.
    private static let cache = ThreadSlot(holdingObjects: ())

    /// Largest index kept between decodes (a large answer's index is let go with its decoder).
    private static let keptTokens = 4096

    /// The index capacity of the decoder this thread keeps, if it keeps one (for tests).
    static var threadKeptIndexCapacity: Int? {
        guard let raw = UnsafeMutableRawPointer(bitPattern: cache.value) else { return nil }
        return Unmanaged<FastJSONDecoderImpl>.fromOpaque(raw).takeUnretainedValue().tokens.capacity
    }

    /// Runs `body` with this thread's decoder for `dateCoding`. The decoder is taken out of the
    /// thread's slot while in use, so a decode inside `init(from:)` gets one of its own.
    static func withThreadDecoder<R>(dateCoding: DateCoding, _ body: (inout FastJSONDecoder) throws -> R) rethrows
        -> R
    {
        var inUse: FastJSONDecoder
        if let raw = UnsafeMutableRawPointer(bitPattern: cache.value) {
            cache.value = 0
            // The slot's reference moves into the decoder: it must be the only one (see
            // `withOwnImpl`), so no other variable holds the impl.
            let cached = Unmanaged<FastJSONDecoderImpl>.fromOpaque(raw)
            if cached.takeUnretainedValue().dateCoding == dateCoding {
                inUse = FastJSONDecoder(impl: cached.takeRetainedValue())
            } else {
                cached.release()
                inUse = FastJSONDecoder(dateCoding: dateCoding)
            }
        } else {
            inUse = FastJSONDecoder(dateCoding: dateCoding)
        }
        defer {
            // Kept only when nothing else holds it (`withOwnImpl` swaps out one a value kept) and
            // its index is small: the parser reserves an index in proportion to the input, so the
            // decoder of a large answer (and of any long string it unescaped) is let go.
            if isKnownUniquelyReferenced(&inUse.impl), inUse.impl.tokens.capacity <= keptTokens, cache.value == 0 {
                cache.value = Int(bitPattern: Unmanaged.passRetained(inUse.impl).toOpaque())
            }
        }
        return try body(&inUse)
    }

    /// The value of `type` in `bytes[range]`, reusing this decoder's index and buffers.
    mutating func decode<T: Decodable>(_ type: T.Type, from bytes: UnsafeRawBufferPointer, range: Range<Int>) throws
        -> T
    {
        let slice = UnsafeRawBufferPointer(rebasing: bytes[range])
        return try withOwnImpl { try $0.decodeTopLevel(type, from: slice) }
    }

    /// Runs `body` with an impl no one else holds, and after it makes sure no one else holds it.
    private mutating func withOwnImpl<R>(_ body: (FastJSONDecoderImpl) throws -> R) rethrows -> R {
        if !isKnownUniquelyReferenced(&impl) {
            impl = FastJSONDecoderImpl(dateCoding: impl.dateCoding)
        }
        defer {
            // A decoder or container that escaped from `init(from:)` keeps the impl: give it its own bytes.
            if !isKnownUniquelyReferenced(&impl) {
                impl.takeOwnershipOfBytes()
                impl = FastJSONDecoderImpl(dateCoding: impl.dateCoding)
            }
        }
        return try body(impl)
    }

    /// The one JSON value that `bytes` start with (they may go on past it: a row at the start of
    /// the rest of a chunk), decoded as `type`. `length` is set to the value's length, or to 0
    /// when the bytes do not start with a complete, strict JSON value (it goes on in the next
    /// chunk, or is malformed). Nil when there is no such value, or when the fast path could not
    /// decode it, which Foundation must then decode from those bytes for its exact value or error.
    /// (Shaped for the per-row path: no tuple or enum over `T`, whose generic metadata would be
    /// looked up per row.)
    mutating func decodeLeadingValue<T: Decodable>(
        _ type: T.Type, from bytes: UnsafeRawBufferPointer, length: inout Int
    ) -> T? {
        withOwnImpl { impl in
            guard let end = try? impl.parse(bytes, leadingValueOnly: true) else {
                length = 0
                return nil
            }
            length = end
            return try? impl.decodeParsed(type)
        }
    }

    /// The value of `type` in `bytes`.
    static func decode<T: Decodable>(_ type: T.Type, from bytes: UnsafeRawBufferPointer, dateCoding: DateCoding)
        throws -> T
    {
        try withThreadDecoder(dateCoding: dateCoding) { try $0.decode(type, from: bytes, range: 0..<bytes.count) }
    }

    /// The value of `type` in `data`.
    static func decode<T: Decodable>(_ type: T.Type, from data: Data, dateCoding: DateCoding) throws -> T {
        try data.withUnsafeBytes { try decode(type, from: $0, dateCoding: dateCoding) }
    }

    /// One value of `type` from each of `ranges` of `bytes`, with one decoder.
    static func decode<T: Decodable>(
        _ type: T.Type, from bytes: UnsafeRawBufferPointer, ranges: [Range<Int>], dateCoding: DateCoding
    ) throws -> [T] {
        var decoder = FastJSONDecoder(dateCoding: dateCoding)
        var values: [T] = []
        values.reserveCapacity(ranges.count)
        for range in ranges {
            values.append(try decoder.decode(type, from: bytes, range: range))
        }
        return values
    }
}

/// One value in the index. Offsets are from the start of the input.
struct FastJSONToken {
    enum Kind: UInt8 {
        case null, bool, number, string, array, object
    }

    /// Strings: after the opening quote; others: the first byte.
    var start: Int32
    /// Strings: the closing quote; others: after the last byte.
    var end: Int32
    /// The index of the token after this value (and everything inside it).
    var next: Int32
    /// Arrays and objects: the number of elements or members; keys: a hash of the unescaped UTF-8.
    var aux: UInt32
    var kind: Kind
    /// See the `flag` constants of `FastJSONDecoderImpl`.
    var flags: UInt8
}

/// A number the type asked for cannot hold (what Foundation reports with its internal `JSONError`).
struct FastJSONNumberNotRepresentable: Error {
    let text: String
}

/// The decoder's state: the input, its index, the value being decoded and the coding path.
///
/// The stored properties are `@exclusivity(unchecked)` (dynamic exclusivity checks dominated the profile):
/// no access to them overlaps another; user code (`init(from:)`) runs only between accesses.
final class FastJSONDecoderImpl: Decoder, SingleValueDecodingContainer {
    typealias Token = FastJSONToken

    static let escapedFlag: UInt8 = 1  // a string with escapes
    static let integerFlag: UInt8 = 2  // a number without fraction or exponent
    static let trueFlag: UInt8 = 4  // the Boolean true
    static let checkedFlag: UInt8 = 8  // an object whose keys were checked for repeats
    static let repeatsFlag: UInt8 = 16  // an object with a repeated key
    static let maximumDepth = 500
    static let linearMembers = 16

    let dateCoding: DateCoding
    @exclusivity(unchecked) var base: UnsafePointer<UInt8> = UnsafePointer(bitPattern: 1)!
    @exclusivity(unchecked) var count = 0
    private var ownedBytes: UnsafeMutableRawPointer?
    @exclusivity(unchecked) var tokens: [Token] = []
    /// The token of the value being decoded (the single-value container's value).
    @exclusivity(unchecked) var current = 0
    @exclusivity(unchecked) var path: [any CodingKey] = []
    /// Paths of nested containers, which the stack `path` does not hold (see `PathRef`).
    @exclusivity(unchecked) var detachedPaths: [[any CodingKey]] = []
    /// The object last searched and the member after the one found, where the next search starts.
    @exclusivity(unchecked) var hintObject = -1
    @exclusivity(unchecked) var hintMember = 0
    @exclusivity(unchecked) var largeObjectIndexes: [Int: [UInt64]] = [:]
    @exclusivity(unchecked) var scratch: [UInt8] = []
    @exclusivity(unchecked) var failure: String?

    var codingPath: [any CodingKey] { path }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(dateCoding: DateCoding) {
        self.dateCoding = dateCoding
        path.reserveCapacity(8)
    }

    deinit {
        ownedBytes?.deallocate()
    }

    /// Copies the input, for decoders or containers that outlive the call.
    func takeOwnershipOfBytes() {
        guard ownedBytes == nil || UnsafeRawPointer(base) != UnsafeRawPointer(ownedBytes) else { return }
        let copy = UnsafeMutableRawPointer.allocate(byteCount: max(count, 1), alignment: 1)
        copy.copyMemory(from: base, byteCount: count)
        ownedBytes?.deallocate()
        ownedBytes = copy
        base = UnsafePointer(copy.assumingMemoryBound(to: UInt8.self))
    }

    func unsupported(_ reason: String) -> FastJSON.Unsupported {
        if failure == nil { failure = reason }
        return FastJSON.Unsupported(reason)
    }

    // MARK: Top level

    func decodeTopLevel<T: Decodable>(_ type: T.Type, from bytes: UnsafeRawBufferPointer) throws -> T {
        _ = try parse(bytes, leadingValueOnly: false)
        return try decodeParsed(type)
    }

    /// Indexes `bytes` (the whole of them, or with `leadingValueOnly` the one value they start
    /// with) and returns where the value ends; throws when it is not strict JSON.
    func parse(_ bytes: UnsafeRawBufferPointer, leadingValueOnly: Bool) throws -> Int {
        guard let address = bytes.baseAddress, bytes.count > 0, bytes.count < Int(Int32.max) else {
            throw FastJSON.Unsupported("empty or too large input")
        }
        if let owned = ownedBytes {
            owned.deallocate()
            ownedBytes = nil
        }
        base = address.assumingMemoryBound(to: UInt8.self)
        count = bytes.count
        failure = nil
        hintObject = -1
        largeObjectIndexes.removeAll(keepingCapacity: true)
        detachedPaths.removeAll(keepingCapacity: true)
        path.removeAll(keepingCapacity: true)
        // The parser takes the only reference to the token buffer, so clearing it keeps its
        // storage (a second reference would make `removeAll(keepingCapacity:)` allocate anew).
        var reused: [FastJSONParser.Token] = []
        swap(&reused, &tokens)
        var parser = FastJSONParser(base: base, count: count, tokens: consume reused)
        var end = count
        if leadingValueOnly {
            end = try parser.parseLeadingValue()
            count = end
        } else {
            try parser.parseDocument()
        }
        swap(&tokens, &parser.tokens)
        current = 0
        return end
    }

    /// The value of `type` from the value last indexed by ``parse(_:leadingValueOnly:)``.
    func decodeParsed<T: Decodable>(_ type: T.Type) throws -> T {
        let value: T
        do {
            value = try decodeValue(type, token: 0, ref: 0, key: FastJSONNoKey())
        } catch {
            if let failure { throw FastJSON.Unsupported(failure) }
            throw error
        }
        if let failure { throw FastJSON.Unsupported(failure) }
        return value
    }

    // MARK: Paths

    /// A container's coding path: the first `ref` keys of `path` when `ref >= 0`, else the detached path
    /// `-ref - 1`.
    func codingPath(_ ref: Int32) -> [any CodingKey] {
        if ref >= 0 { return Array(path.prefix(Int(ref))) }
        return detachedPaths[Int(-ref - 1)]
    }

    func codingPath<K: CodingKey>(_ ref: Int32, appending key: K) -> [any CodingKey] {
        var result = codingPath(ref)
        if K.self != FastJSONNoKey.self { result.append(key) }
        return result
    }

    /// A detached path for a nested container.
    func detach(_ path: [any CodingKey]) -> Int32 {
        detachedPaths.append(path)
        return Int32(-detachedPaths.count)
    }

    /// Runs `body` with `token` as the value being decoded and the path of the container `ref` plus `key`.
    @inline(__always)
    func with<K: CodingKey, R>(token: Int, ref: Int32, key: K, _ body: () throws -> R) throws -> R {
        let savedCurrent = current
        current = token
        defer { current = savedCurrent }
        guard K.self != FastJSONNoKey.self else { return try body() }
        if ref >= 0, Int(ref) == path.count {
            path.append(key)
            defer { path.removeLast() }
            return try body()
        }
        let savedPath = path
        path = codingPath(ref) + [key]
        defer { path = savedPath }
        return try body()
    }

    // MARK: Errors

    func describe(_ token: Int) -> String {
        switch tokens[token].kind {
        case .string: return "a string"
        case .number: return "number"
        case .bool: return "bool"
        case .null: return "null"
        case .object: return "a dictionary"
        case .array: return "an array"
        }
    }

    /// `"\(type)"`, without the runtime's type-name lookup for the types `JSONValue` tries in turn.
    func name(_ type: Any.Type) -> String {
        if type == Bool.self { return "Bool" }
        if type == Int64.self { return "Int64" }
        if type == Double.self { return "Double" }
        if type == String.self { return "String" }
        if type == Int.self { return "Int" }
        return "\(type)"
    }

    func mismatch<K: CodingKey>(_ type: Any.Type, token: Int, ref: Int32, key: K) -> DecodingError {
        DecodingError.typeMismatch(
            type,
            DecodingError.Context(
                codingPath: codingPath(ref, appending: key),
                debugDescription: "Expected to decode " + name(type) + " but found " + describe(token) + " instead."))
    }

    func null<K: CodingKey>(_ type: Any.Type, ref: Int32, key: K) -> DecodingError {
        DecodingError.valueNotFound(
            type,
            DecodingError.Context(
                codingPath: codingPath(ref, appending: key),
                debugDescription: "Cannot get value of type " + name(type) + " -- found null value instead"))
    }

    @inline(__always)
    func checkNotNull<K: CodingKey>(_ type: Any.Type, token: Int, ref: Int32, key: K) throws {
        if tokens[token].kind == .null { throw null(type, ref: ref, key: key) }
    }

    // MARK: Values

    /// The value of `type` at `token`, as Foundation's `unwrap`: the special types, then `init(from:)`.
    @inline(__always)
    func decodeValue<T: Decodable, K: CodingKey>(_ type: T.Type, token: Int, ref: Int32, key: K) throws -> T {
        if T.self == String.self {
            return unsafeBitCast(try string(token: token, ref: ref, key: key), to: T.self)
        } else if T.self == Int.self {
            return unsafeBitCast(try integer(Int.self, token: token, ref: ref, key: key), to: T.self)
        } else if T.self == Double.self {
            return unsafeBitCast(try double(token: token, ref: ref, key: key), to: T.self)
        } else if T.self == Bool.self {
            return unsafeBitCast(try bool(token: token, ref: ref, key: key), to: T.self)
        } else if T.self == Int64.self {
            return unsafeBitCast(try integer(Int64.self, token: token, ref: ref, key: key), to: T.self)
        } else if T.self == Date.self {
            return unsafeBitCast(try date(token: token, ref: ref, key: key), to: T.self)
        } else if T.self == Data.self {
            return unsafeBitCast(try data(token: token, ref: ref, key: key), to: T.self)
        } else if T.self == URL.self {
            return unsafeBitCast(try url(token: token, ref: ref, key: key), to: T.self)
        } else if T.self == Decimal.self {
            throw unsupported("Decimal")
        } else if ObjectIdentifier(T.self) == FastJSONSpecialTypes.stringArray, let strings = stringArray(token: token)
        {
            return unsafeBitCast(strings, to: T.self)
        } else if ObjectIdentifier(T.self) == FastJSONSpecialTypes.bulkWriteResults,
            let results = bulkWriteResults(token: token)
        {
            return unsafeBitCast(results, to: T.self)
        }
        return try with(token: token, ref: ref, key: key) { try T(from: self) }
    }

    /// The strings of the array at `token` (common in documents: tags, roles, names), without
    /// `Array`'s generic `init(from:)`; nil when it is not an array of strings only, which `Array`
    /// then decodes, with Foundation's errors.
    func stringArray(token: Int) -> [String]? {
        elements(ofArray: token) { element in
            tokens[element].kind == .string ? stringValue(tokens[element]) : nil
        }
    }

    /// A `_bulk_docs` answer (one result per document, a thousand or more per batch) without
    /// `Array`'s generic `init(from:)` and a decoder per element: each element read as
    /// ``BulkWriteResult/read(_:)`` reads it. Nil when one is not a plain success (an error row, an
    /// odd shape), and `Array` then decodes the whole answer, with Foundation's values and errors.
    func bulkWriteResults(token: Int) -> [BulkWriteResult]? {
        elements(ofArray: token) { element in
            guard tokens[element].kind == .object else { return nil }
            return BulkWriteResult.read(FastJSONObjectReader(impl: self, object: element))
        }
    }

    /// Every element of the array at `token` as `read` gives it from the element's token; nil when
    /// the value is not an array or `read` gives nil for one of them.
    @inline(__always)
    private func elements<Element>(ofArray token: Int, _ read: (Int) -> Element?) -> [Element]? {
        guard tokens[token].kind == .array else { return nil }
        var values: [Element] = []
        values.reserveCapacity(Int(tokens[token].aux))
        var element = token + 1
        let end = Int(tokens[token].next)
        while element < end {
            guard let value = read(element) else { return nil }
            values.append(value)
            element = Int(tokens[element].next)
        }
        return values
    }

    func bool<K: CodingKey>(token: Int, ref: Int32, key: K) throws -> Bool {
        let value = tokens[token]
        guard value.kind == .bool else { throw mismatch(Bool.self, token: token, ref: ref, key: key) }
        return value.flags & Self.trueFlag != 0
    }

    func string<K: CodingKey>(token: Int, ref: Int32, key: K) throws -> String {
        let value = tokens[token]
        guard value.kind == .string else {
            if value.kind == .null { throw null(String.self, ref: ref, key: key) }
            throw mismatch(String.self, token: token, ref: ref, key: key)
        }
        return stringValue(value)
    }

    /// The text of a string token (validated UTF-8 by the parser).
    func stringValue(_ value: Token) -> String {
        let bytes = UnsafeBufferPointer(start: base + Int(value.start), count: Int(value.end - value.start))
        if value.flags & Self.escapedFlag == 0 {
            return String(decoding: bytes, as: UTF8.self)
        }
        FastJSONParser.unescape(bytes, into: &scratch)
        return String(decoding: scratch, as: UTF8.self)
    }

    /// An integer as Foundation reads one: the digits exactly, else through a `Double` when that is exact.
    @inline(__always)
    func integer<T: FixedWidthInteger, K: CodingKey>(_ type: T.Type, token: Int, ref: Int32, key: K) throws -> T {
        let value = tokens[token]
        guard value.kind == .number else {
            if value.kind == .null { throw null(T.self, ref: ref, key: key) }
            throw mismatch(T.self, token: token, ref: ref, key: key)
        }
        let start = Int(value.start)
        let end = Int(value.end)
        if value.flags & Self.integerFlag != 0, T.bitWidth <= 64 {
            let negative = base[start] == UInt8(ascii: "-")
            var index = negative ? start + 1 : start
            var magnitude: UInt64 = 0
            var overflow = false
            if end - index <= 19 {
                while index < end {
                    magnitude = magnitude &* 10 &+ UInt64(base[index] &- UInt8(ascii: "0"))
                    index += 1
                }
            } else {
                while index < end {
                    let (times, o1) = magnitude.multipliedReportingOverflow(by: 10)
                    let (sum, o2) = times.addingReportingOverflow(UInt64(base[index] &- UInt8(ascii: "0")))
                    if o1 || o2 { overflow = true }
                    magnitude = sum
                    index += 1
                }
            }
            if !overflow {
                if !negative {
                    if let result = T(exactly: magnitude) { return result }
                } else if magnitude == 0 {
                    return 0
                } else if T.isSigned, magnitude <= UInt64(1) << 63 {
                    if let result = T(exactly: Int64(bitPattern: 0 &- magnitude)) { return result }
                }
            }
        } else if T.bitWidth > 64 {
            throw unsupported("128-bit integer")
        }
        return try integerSlowPath(T.self, start: start, end: end)
    }

    /// Foundation's slow path for integers: through a Double when that is exact below 2^53, else a Decimal.
    @inline(never)
    func integerSlowPath<T: FixedWidthInteger>(_ type: T.Type, start: Int, end: Int) throws -> T {
        let text = String(decoding: UnsafeBufferPointer(start: base + start, count: end - start), as: UTF8.self)
        guard let double = Double(text) else { throw unsupported("number '\(text)'") }
        guard let result = T(exactly: double) else { throw FastJSONNumberNotRepresentable(text: text) }
        if double.magnitude < 9_007_199_254_740_992 { return result }
        // Beyond 2^53 Foundation reads the text as a Decimal and truncates it to an integer.
        let (negative, mantissa, digits, power) = decimalParts(start: start, end: end)
        guard digits <= 19 else { throw unsupported("integer '\(text)' with more than 19 digits") }
        var magnitude = mantissa
        if power >= 0 {
            for _ in 0..<power {
                let (product, overflow) = magnitude.multipliedReportingOverflow(by: 10)
                if overflow { throw FastJSONNumberNotRepresentable(text: text) }
                magnitude = product
            }
        } else {
            var divisions = -power
            while divisions > 0 && magnitude > 0 {
                magnitude /= 10
                divisions -= 1
            }
        }
        guard let exact = T(exactly: magnitude) else { throw FastJSONNumberNotRepresentable(text: text) }
        if negative {
            guard T.isSigned else { throw FastJSONNumberNotRepresentable(text: text) }
            return exact * -1
        }
        return exact
    }

    /// The sign, the significant digits as an integer, how many there are and the power of ten to apply,
    /// of the number token from `start` to `end` (the digits and power are exact up to 19 digits).
    @inline(__always)
    func decimalParts(start: Int, end: Int) -> (negative: Bool, mantissa: UInt64, digits: Int, power: Int) {
        let negative = base[start] == UInt8(ascii: "-")
        var index = negative ? start + 1 : start
        var mantissa: UInt64 = 0
        var digits = 0
        var fractionDigits = 0
        var exponent = 0
        var inFraction = false
        while index < end {
            let byte = base[index]
            if byte == UInt8(ascii: ".") {
                inFraction = true
            } else if byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") {
                index += 1
                var exponentNegative = false
                if base[index] == UInt8(ascii: "-") {
                    exponentNegative = true
                    index += 1
                } else if base[index] == UInt8(ascii: "+") {
                    index += 1
                }
                while index < end {
                    if exponent < 100_000 { exponent = exponent * 10 + Int(base[index] &- UInt8(ascii: "0")) }
                    index += 1
                }
                if exponentNegative { exponent = -exponent }
                break
            } else {
                if mantissa != 0 || byte != UInt8(ascii: "0") { digits += 1 }
                // Past 19 digits the parts are not used (callers check `digits`).
                if digits <= 19 {
                    mantissa = mantissa &* 10 &+ UInt64(byte &- UInt8(ascii: "0"))
                    if inFraction { fractionDigits += 1 }
                }
            }
            index += 1
        }
        return (negative, mantissa, digits, exponent - fractionDigits)
    }

    private static let powersOfTen: [Double] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18,
        1e19, 1e20, 1e21, 1e22,
    ]

    /// A Double as `strtod` reads it; an overflow to infinity or an underflow to zero throws, as in Foundation.
    func double<K: CodingKey>(token: Int, ref: Int32, key: K) throws -> Double {
        let value = tokens[token]
        guard value.kind == .number else {
            if value.kind == .null { throw null(Double.self, ref: ref, key: key) }
            throw mismatch(Double.self, token: token, ref: ref, key: key)
        }
        let start = Int(value.start)
        let end = Int(value.end)
        // Clinger's fast path: at most 19 significant digits making at most 2^53, times or divided by an
        // exact power of ten up to 10^22, is one correctly rounded operation.
        let (negative, mantissa, digits, power) = decimalParts(start: start, end: end)
        if digits <= 19, mantissa <= 1 << 53, power >= -22, power <= 22 {
            var result = Double(mantissa)
            result = power < 0 ? result / Self.powersOfTen[-power] : result * Self.powersOfTen[power]
            return negative ? -result : result
        }
        let text = String(decoding: UnsafeBufferPointer(start: base + start, count: end - start), as: UTF8.self)
        guard let result = Double(text) else { throw unsupported("number '\(text)'") }
        guard result.isFinite, result != 0 else { throw FastJSONNumberNotRepresentable(text: text) }
        return result
    }

    func float<K: CodingKey>(token: Int, ref: Int32, key: K) throws -> Float {
        let value = tokens[token]
        guard value.kind == .number else {
            if value.kind == .null { throw null(Float.self, ref: ref, key: key) }
            throw mismatch(Float.self, token: token, ref: ref, key: key)
        }
        let bytes = UnsafeBufferPointer(start: base + Int(value.start), count: Int(value.end - value.start))
        let text = String(decoding: bytes, as: UTF8.self)
        guard let result = Float(text) else { throw unsupported("number '\(text)'") }
        guard result.isFinite else { throw FastJSONNumberNotRepresentable(text: text) }
        if result == 0 {
            // Zero only when every digit before the exponent is zero.
            for byte in bytes {
                if byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") { break }
                if byte >= UInt8(ascii: "1") && byte <= UInt8(ascii: "9") {
                    throw FastJSONNumberNotRepresentable(text: text)
                }
            }
        }
        return result
    }

    func date<K: CodingKey>(token: Int, ref: Int32, key: K) throws -> Date {
        try checkNotNull(Date.self, token: token, ref: ref, key: key)
        switch dateCoding {
        case .iso8601:
            // The usual shapes straight from the bytes, without making a `String` first.
            let value = tokens[token]
            if value.kind == .string, value.flags & Self.escapedFlag == 0,
                let date = ISO8601.date(
                    utf8: UnsafeBufferPointer(start: base + Int(value.start), count: Int(value.end - value.start)))
            {
                return date
            }
            let text = try string(token: token, ref: ref, key: key)
            guard let date = DateCoding.date(fromISO8601: text) else {
                throw DecodingError.dataCorrupted(
                    DecodingError.Context(
                        codingPath: codingPath(ref, appending: key),
                        debugDescription: "'\(text)' is not an ISO-8601 date"))
            }
            return date
        case .secondsSince1970:
            return Date(timeIntervalSince1970: try double(token: token, ref: ref, key: key))
        case .millisecondsSince1970:
            return Date(timeIntervalSince1970: try double(token: token, ref: ref, key: key) / 1000.0)
        case .foundationDefault:
            return Date(timeIntervalSinceReferenceDate: try double(token: token, ref: ref, key: key))
        }
    }

    func data<K: CodingKey>(token: Int, ref: Int32, key: K) throws -> Data {
        try checkNotNull(Data.self, token: token, ref: ref, key: key)
        let text = try string(token: token, ref: ref, key: key)
        guard let data = Data(base64Encoded: text) else { throw unsupported("Data that is not base64") }
        return data
    }

    func url<K: CodingKey>(token: Int, ref: Int32, key: K) throws -> URL {
        try checkNotNull(URL.self, token: token, ref: ref, key: key)
        let text = try string(token: token, ref: ref, key: key)
        guard let url = URL(string: text) else {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(
                    codingPath: codingPath(ref, appending: key), debugDescription: "Invalid URL string."))
        }
        return url
    }

    // MARK: Objects

    /// Whether the key token `key` is `bytes`.
    @inline(__always)
    func keyEquals(_ key: Int, _ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let token = tokens[key]
        let length = Int(token.end - token.start)
        if token.flags & Self.escapedFlag == 0 {
            guard length == bytes.count else { return false }
            return length == 0 || memcmp(base + Int(token.start), bytes.baseAddress!, length) == 0
        }
        FastJSONParser.unescape(UnsafeBufferPointer(start: base + Int(token.start), count: length), into: &scratch)
        return scratch.elementsEqual(bytes)
    }

    func keysEqual(_ a: Int, _ b: Int) -> Bool {
        let token = tokens[b]
        if token.flags & Self.escapedFlag == 0 {
            return keyEquals(
                a, UnsafeBufferPointer(start: base + Int(token.start), count: Int(token.end - token.start)))
        }
        var unescaped: [UInt8] = []
        FastJSONParser.unescape(
            UnsafeBufferPointer(start: base + Int(token.start), count: Int(token.end - token.start)), into: &unescaped)
        return unescaped.withUnsafeBufferPointer { keyEquals(a, $0) }
    }

    /// Marks whether the small object `object` repeats a key (Foundation keeps the first).
    func checkRepeats(_ object: Int) {
        var flags = Self.checkedFlag
        var key = object + 1
        let end = Int(tokens[object].next)
        // First one pass over the keys' hashes into 256 bins: equal keys have equal hashes, so
        // when no two keys share a bin none repeats, and the pairwise comparison is not needed.
        var bins: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        var shared = false
        while key < end {
            let hash = tokens[key].aux
            let bit: UInt64 = 1 << UInt64(hash & 63)
            let seen: Bool
            switch (hash >> 6) & 3 {
            case 0: (seen, bins.0) = (bins.0 & bit != 0, bins.0 | bit)
            case 1: (seen, bins.1) = (bins.1 & bit != 0, bins.1 | bit)
            case 2: (seen, bins.2) = (bins.2 & bit != 0, bins.2 | bit)
            default: (seen, bins.3) = (bins.3 & bit != 0, bins.3 | bit)
            }
            if seen {
                shared = true
                break
            }
            key = Int(tokens[key + 1].next)
        }
        key = object + 1
        outer: while shared, key < end {
            var other = Int(tokens[key + 1].next)
            while other < end {
                if tokens[other].aux == tokens[key].aux, keysEqual(key, other) {
                    flags |= Self.repeatsFlag
                    break outer
                }
                other = Int(tokens[other + 1].next)
            }
            key = Int(tokens[key + 1].next)
        }
        tokens[object].flags |= flags
    }

    /// The value token of the first member of `object` named `name`, or nil.
    func member(_ object: Int, named name: String) -> Int? {
        let memberCount = Int(tokens[object].aux)
        if memberCount == 0 { return nil }
        var name = name
        return name.withUTF8 { bytes -> Int? in
            let hash = FastJSON.keyHash(bytes)
            if memberCount > Self.linearMembers {
                return largeMember(object, bytes, hash)
            }
            if tokens[object].flags & Self.checkedFlag == 0 { checkRepeats(object) }
            let end = Int(tokens[object].next)
            var key = object + 1
            if hintObject == object, tokens[object].flags & Self.repeatsFlag == 0, hintMember < end {
                key = hintMember
            }
            for _ in 0..<memberCount {
                let next = Int(tokens[key + 1].next)
                if tokens[key].aux == hash, keyEquals(key, bytes) {
                    hintObject = object
                    hintMember = next
                    return key + 1
                }
                key = next < end ? next : object + 1
            }
            return nil
        }
    }

    /// The value token of the first member of `object` named `name`, or nil when there is none or it is
    /// null (what `decodeIfPresent` reads).
    @inline(__always)
    func memberIfPresent(_ object: Int, named name: String) -> Int? {
        guard let token = member(object, named: name), tokens[token].kind != .null else { return nil }
        return token
    }

    private func largeMember(_ object: Int, _ bytes: UnsafeBufferPointer<UInt8>, _ hash: UInt32) -> Int? {
        let index: [UInt64]
        if let existing = largeObjectIndexes[object] {
            index = existing
        } else {
            var built: [UInt64] = []
            built.reserveCapacity(Int(tokens[object].aux))
            var key = object + 1
            let end = Int(tokens[object].next)
            while key < end {
                built.append(UInt64(tokens[key].aux) << 32 | UInt64(key))
                key = Int(tokens[key + 1].next)
            }
            built.sort()
            largeObjectIndexes[object] = built
            index = built
        }
        var low = 0
        var high = index.count
        let target = UInt64(hash) << 32
        while low < high {
            let middle = (low + high) / 2
            if index[middle] < target { low = middle + 1 } else { high = middle }
        }
        while low < index.count, index[low] >> 32 == UInt64(hash) {
            let key = Int(index[low] & 0xFFFF_FFFF)
            if keyEquals(key, bytes) { return key + 1 }
            low += 1
        }
        return nil
    }

    /// The keys of `object`, each once (first occurrence), in document order.
    func keys(_ object: Int) -> [String] {
        var result: [String] = []
        result.reserveCapacity(Int(tokens[object].aux))
        var key = object + 1
        let end = Int(tokens[object].next)
        while key < end {
            result.append(stringValue(tokens[key]))
            key = Int(tokens[key + 1].next)
        }
        if tokens[object].aux > 1 {
            if Int(tokens[object].aux) <= Self.linearMembers {
                if tokens[object].flags & Self.checkedFlag == 0 { checkRepeats(object) }
                if tokens[object].flags & Self.repeatsFlag == 0 { return result }
            }
            var seen = Set<String>()
            result = result.filter { seen.insert($0).inserted }
        }
        return result
    }

    // MARK: Decoder

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(try keyedContainer(Key.self, token: current, ref: Int32(path.count)))
    }

    func keyedContainer<Key: CodingKey>(_ type: Key.Type, token: Int, ref: Int32) throws
        -> FastKeyedDecodingContainer<Key>
    {
        switch tokens[token].kind {
        case .object:
            return FastKeyedDecodingContainer(impl: self, object: Int32(token), ref: ref)
        case .null:
            throw DecodingError.valueNotFound(
                [String: Any].self,
                DecodingError.Context(
                    codingPath: codingPath(ref),
                    debugDescription: "Cannot get keyed decoding container -- found null value instead"))
        default:
            throw DecodingError.typeMismatch(
                [String: Any].self,
                DecodingError.Context(
                    codingPath: codingPath(ref),
                    debugDescription: "Expected to decode \([String: Any].self) but found \(describe(token)) instead."))
        }
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try unkeyedContainer(token: current, ref: Int32(path.count))
    }

    func unkeyedContainer(token: Int, ref: Int32) throws -> FastUnkeyedDecodingContainer {
        switch tokens[token].kind {
        case .array:
            return FastUnkeyedDecodingContainer(impl: self, array: Int32(token), ref: ref)
        case .null:
            throw DecodingError.valueNotFound(
                [Any].self,
                DecodingError.Context(
                    codingPath: codingPath(ref),
                    debugDescription: "Cannot get unkeyed decoding container -- found null value instead"))
        default:
            throw DecodingError.typeMismatch(
                [Any].self,
                DecodingError.Context(
                    codingPath: codingPath(ref),
                    debugDescription: "Expected to decode \([Any].self) but found \(describe(token)) instead."))
        }
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    // MARK: SingleValueDecodingContainer

    private var ref: Int32 { Int32(path.count) }
    private var noKey: FastJSONNoKey { FastJSONNoKey() }

    func decodeNil() -> Bool { tokens[current].kind == .null }
    func decode(_ type: Bool.Type) throws -> Bool { try bool(token: current, ref: ref, key: noKey) }
    func decode(_ type: String.Type) throws -> String { try string(token: current, ref: ref, key: noKey) }
    func decode(_ type: Double.Type) throws -> Double { try double(token: current, ref: ref, key: noKey) }
    func decode(_ type: Float.Type) throws -> Float { try float(token: current, ref: ref, key: noKey) }
    func decode(_ type: Int.Type) throws -> Int { try integer(type, token: current, ref: ref, key: noKey) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(type, token: current, ref: ref, key: noKey) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(type, token: current, ref: ref, key: noKey) }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer(type, token: current, ref: ref, key: noKey) }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer(type, token: current, ref: ref, key: noKey) }
    func decode(_ type: UInt.Type) throws -> UInt { try integer(type, token: current, ref: ref, key: noKey) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(type, token: current, ref: ref, key: noKey) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(type, token: current, ref: ref, key: noKey) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(type, token: current, ref: ref, key: noKey) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(type, token: current, ref: ref, key: noKey) }

    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    func decode(_ type: Int128.Type) throws -> Int128 { throw unsupported("Int128") }

    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    func decode(_ type: UInt128.Type) throws -> UInt128 { throw unsupported("UInt128") }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        // Foundation decodes the value in place, with no key added to the path.
        try decodeValue(type, token: current, ref: ref, key: noKey)
    }
}

/// A keyed container over the object token `object`; `ref` names its coding path (see `codingPath(_:)`).
struct FastKeyedDecodingContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let impl: FastJSONDecoderImpl
    let object: Int32
    let ref: Int32

    var codingPath: [any CodingKey] { impl.codingPath(ref) }

    var allKeys: [Key] { impl.keys(Int(object)).compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { impl.member(Int(object), named: key.stringValue) != nil }

    @inline(__always)
    private func value(_ key: Key) throws -> Int {
        guard let token = impl.member(Int(object), named: key.stringValue) else {
            throw DecodingError.keyNotFound(
                key,
                DecodingError.Context(
                    codingPath: impl.codingPath(ref),
                    debugDescription: "No value associated with key \(key) (\"\(key.stringValue)\")."))
        }
        return token
    }

    /// The value token for `key`, or nil when the key is missing or null.
    @inline(__always)
    private func valueIfPresent(_ key: Key) -> Int? {
        impl.memberIfPresent(Int(object), named: key.stringValue)
    }

    func decodeNil(forKey key: Key) throws -> Bool { impl.tokens[try value(key)].kind == .null }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool {
        try impl.bool(token: try value(key), ref: ref, key: key)
    }

    func decode(_ type: String.Type, forKey key: Key) throws -> String {
        try impl.string(token: try value(key), ref: ref, key: key)
    }

    func decode(_ type: Double.Type, forKey key: Key) throws -> Double {
        try impl.double(token: try value(key), ref: ref, key: key)
    }

    func decode(_ type: Float.Type, forKey key: Key) throws -> Float {
        try impl.float(token: try value(key), ref: ref, key: key)
    }

    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try integer(key) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try integer(key) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try integer(key) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try integer(key) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try integer(key) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try integer(key) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try integer(key) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try integer(key) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try integer(key) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try integer(key) }

    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    func decode(_ type: Int128.Type, forKey key: Key) throws -> Int128 { throw impl.unsupported("Int128") }

    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    func decode(_ type: UInt128.Type, forKey key: Key) throws -> UInt128 { throw impl.unsupported("UInt128") }

    @inline(__always)
    private func integer<T: FixedWidthInteger>(_ key: Key) throws -> T {
        try impl.integer(T.self, token: try value(key), ref: ref, key: key)
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try impl.decodeValue(type, token: try value(key), ref: ref, key: key)
    }

    func decodeIfPresent(_ type: Bool.Type, forKey key: Key) throws -> Bool? {
        guard let token = valueIfPresent(key) else { return nil }
        return try impl.bool(token: token, ref: ref, key: key)
    }

    func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? {
        guard let token = valueIfPresent(key) else { return nil }
        return try impl.string(token: token, ref: ref, key: key)
    }

    func decodeIfPresent(_ type: Double.Type, forKey key: Key) throws -> Double? {
        guard let token = valueIfPresent(key) else { return nil }
        return try impl.double(token: token, ref: ref, key: key)
    }

    func decodeIfPresent(_ type: Float.Type, forKey key: Key) throws -> Float? {
        guard let token = valueIfPresent(key) else { return nil }
        return try impl.float(token: token, ref: ref, key: key)
    }

    func decodeIfPresent(_ type: Int.Type, forKey key: Key) throws -> Int? { try integerIfPresent(key) }
    func decodeIfPresent(_ type: Int8.Type, forKey key: Key) throws -> Int8? { try integerIfPresent(key) }
    func decodeIfPresent(_ type: Int16.Type, forKey key: Key) throws -> Int16? { try integerIfPresent(key) }
    func decodeIfPresent(_ type: Int32.Type, forKey key: Key) throws -> Int32? { try integerIfPresent(key) }
    func decodeIfPresent(_ type: Int64.Type, forKey key: Key) throws -> Int64? { try integerIfPresent(key) }
    func decodeIfPresent(_ type: UInt.Type, forKey key: Key) throws -> UInt? { try integerIfPresent(key) }
    func decodeIfPresent(_ type: UInt8.Type, forKey key: Key) throws -> UInt8? { try integerIfPresent(key) }
    func decodeIfPresent(_ type: UInt16.Type, forKey key: Key) throws -> UInt16? { try integerIfPresent(key) }
    func decodeIfPresent(_ type: UInt32.Type, forKey key: Key) throws -> UInt32? { try integerIfPresent(key) }
    func decodeIfPresent(_ type: UInt64.Type, forKey key: Key) throws -> UInt64? { try integerIfPresent(key) }

    @inline(__always)
    private func integerIfPresent<T: FixedWidthInteger>(_ key: Key) throws -> T? {
        guard let token = valueIfPresent(key) else { return nil }
        return try impl.integer(T.self, token: token, ref: ref, key: key)
    }

    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        guard let token = valueIfPresent(key) else { return nil }
        return try impl.decodeValue(type, token: token, ref: ref, key: key)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        let token = try value(key)
        let nested = impl.detach(impl.codingPath(ref) + [key])
        return KeyedDecodingContainer(try impl.keyedContainer(NestedKey.self, token: token, ref: nested))
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        let token = try value(key)
        return try impl.unkeyedContainer(token: token, ref: impl.detach(impl.codingPath(ref) + [key]))
    }

    func superDecoder() throws -> any Decoder { throw impl.unsupported("superDecoder") }

    func superDecoder(forKey key: Key) throws -> any Decoder { throw impl.unsupported("superDecoder") }
}

/// An unkeyed container over the array token `array`, at the element `cursor` (index `currentIndex`).
struct FastUnkeyedDecodingContainer: UnkeyedDecodingContainer {
    let impl: FastJSONDecoderImpl
    private let array: Int32
    private var cursor: Int32
    private var index: Int32
    private let ref: Int32

    init(impl: FastJSONDecoderImpl, array: Int32, ref: Int32) {
        self.impl = impl
        self.array = array
        self.cursor = array + 1
        self.index = 0
        self.ref = ref
    }

    var codingPath: [any CodingKey] { impl.codingPath(ref) }
    var count: Int? { Int(impl.tokens[Int(array)].aux) }
    var isAtEnd: Bool { index >= impl.tokens[Int(array)].aux }
    var currentIndex: Int { Int(index) }
    private var indexKey: FastJSONIndexKey { FastJSONIndexKey(index: Int(index)) }

    /// The next element's token, or Foundation's error at the end.
    @inline(__always)
    private func next(_ type: Any.Type, _ message: String = "Unkeyed container is at end.") throws -> Int {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                type,
                DecodingError.Context(
                    codingPath: impl.codingPath(ref) + [FastJSONIndexKey(index: Int(index))], debugDescription: message)
            )
        }
        return Int(cursor)
    }

    /// The next element's token, or nil at the end.
    @inline(__always)
    private func nextIfPresent() -> Int? { isAtEnd ? nil : Int(cursor) }

    @inline(__always)
    private mutating func advance() {
        if !isAtEnd { cursor = impl.tokens[Int(cursor)].next }
        index += 1
    }

    mutating func decodeNil() throws -> Bool {
        let token = try next(Never.self)
        guard impl.tokens[token].kind == .null else { return false }
        advance()
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool {
        let result = try impl.bool(token: try next(type), ref: ref, key: indexKey)
        advance()
        return result
    }

    mutating func decode(_ type: String.Type) throws -> String {
        let result = try impl.string(token: try next(type), ref: ref, key: indexKey)
        advance()
        return result
    }

    mutating func decode(_ type: Double.Type) throws -> Double {
        let result = try impl.double(token: try next(type), ref: ref, key: indexKey)
        advance()
        return result
    }

    mutating func decode(_ type: Float.Type) throws -> Float {
        let result = try impl.float(token: try next(type), ref: ref, key: indexKey)
        advance()
        return result
    }

    mutating func decode(_ type: Int.Type) throws -> Int { try integer() }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try integer() }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try integer() }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try integer() }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try integer() }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try integer() }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try integer() }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try integer() }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try integer() }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try integer() }

    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    mutating func decode(_ type: Int128.Type) throws -> Int128 { throw impl.unsupported("Int128") }

    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    mutating func decode(_ type: UInt128.Type) throws -> UInt128 { throw impl.unsupported("UInt128") }

    @inline(__always)
    private mutating func integer<T: FixedWidthInteger>() throws -> T {
        let result = try impl.integer(T.self, token: try next(T.self), ref: ref, key: indexKey)
        advance()
        return result
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let result = try impl.decodeValue(type, token: try next(type), ref: ref, key: indexKey)
        advance()
        return result
    }

    mutating func decodeIfPresent(_ type: Bool.Type) throws -> Bool? {
        try ifPresent { try $0.bool(token: $1, ref: $2, key: $3) }
    }

    mutating func decodeIfPresent(_ type: String.Type) throws -> String? {
        try ifPresent { try $0.string(token: $1, ref: $2, key: $3) }
    }

    mutating func decodeIfPresent(_ type: Double.Type) throws -> Double? {
        try ifPresent { try $0.double(token: $1, ref: $2, key: $3) }
    }

    mutating func decodeIfPresent(_ type: Float.Type) throws -> Float? {
        try ifPresent { try $0.float(token: $1, ref: $2, key: $3) }
    }

    mutating func decodeIfPresent(_ type: Int.Type) throws -> Int? { try integerIfPresent() }
    mutating func decodeIfPresent(_ type: Int8.Type) throws -> Int8? { try integerIfPresent() }
    mutating func decodeIfPresent(_ type: Int16.Type) throws -> Int16? { try integerIfPresent() }
    mutating func decodeIfPresent(_ type: Int32.Type) throws -> Int32? { try integerIfPresent() }
    mutating func decodeIfPresent(_ type: Int64.Type) throws -> Int64? { try integerIfPresent() }
    mutating func decodeIfPresent(_ type: UInt.Type) throws -> UInt? { try integerIfPresent() }
    mutating func decodeIfPresent(_ type: UInt8.Type) throws -> UInt8? { try integerIfPresent() }
    mutating func decodeIfPresent(_ type: UInt16.Type) throws -> UInt16? { try integerIfPresent() }
    mutating func decodeIfPresent(_ type: UInt32.Type) throws -> UInt32? { try integerIfPresent() }
    mutating func decodeIfPresent(_ type: UInt64.Type) throws -> UInt64? { try integerIfPresent() }

    private mutating func integerIfPresent<T: FixedWidthInteger>() throws -> T? {
        try ifPresent { try $0.integer(T.self, token: $1, ref: $2, key: $3) }
    }

    mutating func decodeIfPresent<T: Decodable>(_ type: T.Type) throws -> T? {
        try ifPresent { try $0.decodeValue(type, token: $1, ref: $2, key: $3) }
    }

    /// Foundation's `decodeIfPresent`: nil at the end or for null, and the index moves on either way.
    @inline(__always)
    private mutating func ifPresent<T>(
        _ body: (FastJSONDecoderImpl, Int, Int32, FastJSONIndexKey) throws -> T
    ) throws -> T? {
        var result: T?
        if let token = nextIfPresent(), impl.tokens[token].kind != .null {
            result = try body(impl, token, ref, indexKey)
        }
        advance()
        return result
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        let token = try next(KeyedDecodingContainer<NestedKey>.self)
        let nested = impl.detach(impl.codingPath(ref) + [FastJSONIndexKey(index: Int(index))])
        let container = try impl.keyedContainer(NestedKey.self, token: token, ref: nested)
        advance()
        return KeyedDecodingContainer(container)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let token = try next(
            (any UnkeyedDecodingContainer).self, "Cannot get nested unkeyed container -- unkeyed container is at end.")
        let nested = impl.detach(impl.codingPath(ref) + [FastJSONIndexKey(index: Int(index))])
        let container = try impl.unkeyedContainer(token: token, ref: nested)
        advance()
        return container
    }

    mutating func superDecoder() throws -> any Decoder { throw impl.unsupported("superDecoder") }
}
