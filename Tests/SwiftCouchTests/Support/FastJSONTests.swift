import Foundation
import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

// MARK: - Types

private struct Album: Codable, Equatable {
    var _id: String
    var n: Int
    var text: String
    var artist: String
    var album: String
    var year: Int
    var tags: [String]
    var rating: Double
    var available: Bool
    var label: String
    var country: String
}

private enum Genre: String, Codable, Equatable {
    case folk, rock
    case jazzFusion = "jazz-fusion"
}

private enum Priority: Int, Codable, Equatable {
    case low = 1
    case high = 10
}

private enum Shape: Codable, Equatable {
    case circle(radius: Double)
    case rectangle(width: Int, height: Int)
    case point
    case labelled(String, Int)
}

private struct Inner: Codable, Equatable {
    var name: String
    var values: [Int]
    var flag: Bool?
}

private struct Outer: Codable, Equatable {
    var id: String
    var inner: Inner
    var inners: [Inner]
    var optionalInner: Inner?
    var map: [String: Inner]
    var intMap: [Int: String]
    var genre: Genre
    var priority: Priority
    var shapes: [Shape]
    var nested: [[Int]]
    var empty: [String]
    var emptyMap: [String: Int]
    var maybe: String?
    var date: Date
    var data: Data
    var url: URL
}

private struct Integers: Codable, Equatable {
    var i: Int
    var i8: Int8
    var i16: Int16
    var i32: Int32
    var i64: Int64
    var u: UInt
    var u8: UInt8
    var u16: UInt16
    var u32: UInt32
    var u64: UInt64

    static let min = Integers(
        i: .min, i8: .min, i16: .min, i32: .min, i64: .min, u: .min, u8: .min, u16: .min, u32: .min, u64: .min)
    static let max = Integers(
        i: .max, i8: .max, i16: .max, i32: .max, i64: .max, u: .max, u8: .max, u16: .max, u32: .max, u64: .max)
}

private struct Floats: Codable, Equatable {
    var d: Double
    var f: Float
}

private struct Optionals: Codable, Equatable {
    var a: Int?
    var b: String?
    var c: [Int]?
    var d: Inner?
}

/// Encodes `nil` explicitly (`encodeNil`) rather than omitting it.
private struct ExplicitNull: Codable, Equatable {
    var value: Int?

    init(value: Int?) { self.value = value }

    enum CodingKeys: String, CodingKey { case value }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        value = try container.decodeNil(forKey: .value) ? nil : try container.decode(Int.self, forKey: .value)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        if let value { try container.encode(value, forKey: .value) } else { try container.encodeNil(forKey: .value) }
    }
}

private class Animal: Codable {
    var name: String
    init(name: String) { self.name = name }
}

/// A subclass encoding through the same encoder as its superclass (one object in Foundation).
private final class Dog: Animal {
    var breed: String

    init(name: String, breed: String) {
        self.breed = breed
        super.init(name: name)
    }

    enum CodingKeys: String, CodingKey { case breed }

    required init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        breed = try container.decode(String.self, forKey: .breed)
        try super.init(from: decoder)
    }

    override func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(breed, forKey: .breed)
        try super.encode(to: encoder)
    }
}

/// A subclass using `superEncoder()` / `superDecoder()` (the fast path refuses; Foundation takes it).
private final class Cat: Animal {
    var lives: Int

    init(name: String, lives: Int) {
        self.lives = lives
        super.init(name: name)
    }

    enum CodingKeys: String, CodingKey { case lives }

    required init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        lives = try container.decode(Int.self, forKey: .lives)
        try super.init(from: try container.superDecoder())
    }

    override func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(lives, forKey: .lives)
        try super.encode(to: container.superEncoder())
    }
}

/// Keeps its decoder's container past `init(from:)` and reads it later (after other decodes).
private final class KeptContainer: Decodable, @unchecked Sendable {
    enum CodingKeys: String, CodingKey { case name, inner }
    let container: KeyedDecodingContainer<CodingKeys>
    /// A decode of its own from inside `init(from:)`, on the same thread.
    let inner: Int

    init(from decoder: any Decoder) throws {
        container = try decoder.container(keyedBy: CodingKeys.self)
        let text = try container.decode(String.self, forKey: .inner)
        inner = try FastJSON.decode(Int.self, from: Data(text.utf8), dateCoding: .iso8601)
    }

    func name() throws -> String { try container.decode(String.self, forKey: .name) }
}

/// Hand-written nested containers, in order.
private struct Manual: Codable, Equatable {
    var a: Int
    var b: [String]
    var c: String

    enum Keys: String, CodingKey { case a, nested, list, c }
    enum NestedKeys: String, CodingKey { case b }

    init(a: Int, b: [String], c: String) {
        self.a = a
        self.b = b
        self.c = c
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Keys.self)
        a = try container.decode(Int.self, forKey: .a)
        let nested = try container.nestedContainer(keyedBy: NestedKeys.self, forKey: .nested)
        var list = try nested.nestedUnkeyedContainer(forKey: .b)
        var b: [String] = []
        while !list.isAtEnd { b.append(try list.decode(String.self)) }
        self.b = b
        c = try container.decode(String.self, forKey: .c)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(a, forKey: .a)
        var nested = container.nestedContainer(keyedBy: NestedKeys.self, forKey: .nested)
        var list = nested.nestedUnkeyedContainer(forKey: .b)
        for item in b { try list.encode(item) }
        var deeper = list.nestedUnkeyedContainer()
        try deeper.encode(a)
        try container.encode(c, forKey: .c)
    }
}

/// Writes a key twice (Foundation keeps the last; the fast path refuses).
private struct RepeatedKey: Encodable {
    enum Keys: String, CodingKey { case a }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(1, forKey: .a)
        try container.encode(2, forKey: .a)
    }
}

/// Writes to a nested container after its parent moved on (out of order for a streaming writer).
private struct OutOfOrder: Encodable {
    enum Keys: String, CodingKey { case a, b, c }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        var nested = container.nestedUnkeyedContainer(forKey: .a)
        try nested.encode(1)
        try container.encode(2, forKey: .b)
        try nested.encode(3)
        try container.encode(4, forKey: .c)
    }
}

/// Encodes nothing at all (Foundation writes `{}` nested, and refuses at the top).
private struct Nothing: Codable, Equatable {
    init() {}
    init(from decoder: any Decoder) throws {}
    func encode(to encoder: any Encoder) throws {}
}

private struct HoldsNothing: Codable, Equatable {
    var nothing: Nothing
    var after: Int
}

private struct WithDecimal: Codable, Equatable {
    var amount: Decimal
}

private struct Probe: Decodable, Equatable {
    /// What `try?` decoding as each type gave, as user code catching errors sees it.
    var results: [String]

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        func attempt<T: Decodable>(_ type: T.Type) -> String {
            do {
                return "\(try container.decode(type))"
            } catch let error as DecodingError {
                switch error {
                case .typeMismatch: return "typeMismatch"
                case .valueNotFound: return "valueNotFound"
                case .keyNotFound: return "keyNotFound"
                case .dataCorrupted: return "dataCorrupted"
                @unknown default: return "other"
                }
            } catch {
                return "error"
            }
        }
        results = [
            attempt(Bool.self), attempt(Int.self), attempt(Int8.self), attempt(UInt8.self), attempt(Int64.self),
            attempt(UInt64.self), attempt(Double.self), attempt(Float.self), attempt(String.self),
            "\(container.decodeNil())",
        ]
    }
}

private struct KeyProbe: Decodable, Equatable {
    var results: [String]

    struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: AnyKey.self)
        var results: [String] = [container.allKeys.map(\.stringValue).sorted().joined(separator: ",")]
        for name in ["a", "b", "missing", "n", "é", "\u{1F600}", "q\"", ""] {
            let key = AnyKey(stringValue: name)
            results.append("\(container.contains(key))")
            results.append((try? container.decode(String.self, forKey: key)) ?? "-")
            results.append((try? container.decodeIfPresent(Int.self, forKey: key)).map { "\($0 as Any)" } ?? "throws")
            results.append((try? container.decodeNil(forKey: key)).map { "\($0)" } ?? "throws")
        }
        self.results = results
    }
}

// MARK: - Helpers

private func foundationEncoder(_ coding: DateCoding) -> JSONEncoder {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.withoutEscapingSlashes]
    encoder.dateEncodingStrategy = coding.encodingStrategy
    return encoder
}

private func foundationDecoder(_ coding: DateCoding) -> JSONDecoder {
    let decoder = JSONDecoder()
    decoder.dateDecodingStrategy = coding.decodingStrategy
    return decoder
}

/// JSON text with every object's members sorted by their (escaped) key text and everything else byte
/// for byte: Foundation on Linux writes members in `Dictionary` order, which changes from run to run.
private func canonical(_ bytes: [UInt8]) -> String {
    var index = 0
    func skip() { while index < bytes.count, [0x20, 0x0A, 0x0D, 0x09].contains(bytes[index]) { index += 1 } }
    func string() -> String {
        let start = index
        index += 1
        while bytes[index] != UInt8(ascii: "\"") { index += bytes[index] == UInt8(ascii: "\\") ? 2 : 1 }
        index += 1
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }
    func value() -> String {
        skip()
        switch bytes[index] {
        case UInt8(ascii: "\""):
            return string()
        case UInt8(ascii: "["):
            index += 1
            var items: [String] = []
            skip()
            if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return "[]"
            }
            while true {
                items.append(value())
                skip()
                let byte = bytes[index]
                index += 1
                if byte == UInt8(ascii: "]") { break }
            }
            return "[" + items.joined(separator: ",") + "]"
        case UInt8(ascii: "{"):
            index += 1
            var members: [String] = []
            skip()
            if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return "{}"
            }
            while true {
                skip()
                let key = string()
                skip()
                index += 1  // :
                members.append(key + ":" + value())
                skip()
                let byte = bytes[index]
                index += 1
                if byte == UInt8(ascii: "}") { break }
            }
            return "{" + members.sorted().joined(separator: ",") + "}"
        default:
            let start = index
            while index < bytes.count, !",]}".utf8.contains(bytes[index]),
                ![0x20, 0x0A, 0x0D, 0x09].contains(bytes[index])
            {
                index += 1
            }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }
    }
    return value()
}

/// The fast encoder writes what Foundation writes (up to member order), and takes the fast path.
private func expectSameEncoding<T: Encodable>(
    _ value: T, _ coding: DateCoding = .iso8601, fast: Bool = true, sourceLocation: SourceLocation = #_sourceLocation
) throws {
    let foundation = try foundationEncoder(coding).encode(value)
    let (data, usedFast) = try FastJSON.encodeReportingPath(value, dateCoding: coding)
    #expect(usedFast == fast, "fast path", sourceLocation: sourceLocation)
    #expect(
        canonical(Array(data)) == canonical(Array(foundation)),
        "\(String(decoding: data, as: UTF8.self)) vs \(String(decoding: foundation, as: UTF8.self))",
        sourceLocation: sourceLocation)
    #expect(data.count == foundation.count, sourceLocation: sourceLocation)
}

/// Both decoders give equal values, or both throw; and the fast path is taken when `fast`.
func expectSameDecoding<T: Decodable & Equatable>(
    _ type: T.Type, _ json: String, _ coding: DateCoding = .iso8601, fast: Bool? = true,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    let data = Data(json.utf8)
    let foundation = Result { try foundationDecoder(coding).decode(type, from: data) }
    let fastOnly = Result { try FastJSONDecoder.decode(type, from: data, dateCoding: coding) }
    let wrapped = Result { try FastJSON.decode(type, from: data, dateCoding: coding) }
    switch (foundation, wrapped) {
    case (.success(let a), .success(let b)):
        #expect(a == b, "\(json)", sourceLocation: sourceLocation)
    case (.failure(let a), .failure(let b)):
        #expect("\(a)" == "\(b)", "\(json)", sourceLocation: sourceLocation)
    default:
        Issue.record("\(json): Foundation \(foundation) but wrapper \(wrapped)", sourceLocation: sourceLocation)
    }
    if case .success(let value) = fastOnly {
        // Whenever the fast path succeeds, it agrees with Foundation.
        #expect((try? foundation.get()) == value, "\(json)", sourceLocation: sourceLocation)
    }
    if let fast {
        let succeeded = (try? fastOnly.get()) != nil
        #expect(succeeded == fast, "fast path for \(json)", sourceLocation: sourceLocation)
    }
}

private let sampleAlbum = Album(
    _id: "doc0000001", n: 1, text: "small", artist: "Joni Mitchell", album: "Blue", year: 1971,
    tags: ["folk", "singer-songwriter", "1970s"], rating: 4.5, available: true, label: "Reprise Records",
    country: "Canada")

private let sampleOuter = Outer(
    id: "o/1", inner: Inner(name: "in", values: [1, 2, 3], flag: true),
    inners: [Inner(name: "a", values: [], flag: nil), Inner(name: "b\"\\", values: [-1], flag: false)],
    optionalInner: nil,
    map: ["x": Inner(name: "x", values: [0], flag: nil), "y/z": Inner(name: "", values: [], flag: true)],
    intMap: [1: "one", -20: "minus twenty", 300: "three hundred"], genre: .jazzFusion, priority: .high,
    shapes: [.circle(radius: 1.5), .rectangle(width: 2, height: 3), .point, .labelled("l", 7)],
    nested: [[1], [], [2, 3]],
    empty: [], emptyMap: [:], maybe: "present", date: Date(timeIntervalSince1970: 1_764_066_600.25),
    data: Data([0, 1, 2, 250, 255]), url: URL(string: "https://example.com/a/b?c=d&e=%20f")!)

private let edgeStrings: [String] = [
    "", "plain", "quote \" backslash \\ slash /", "\u{08}\u{0C}\n\r\t", "\u{00}\u{01}\u{1F}\u{7F}\u{0B}\u{1E}",
    "é ü ß 中文", "emoji 😀 👩‍👩‍👧 🇨🇭", "\u{2028}\u{2029}", "a\u{0}b", "</script>", "\u{FFFF}\u{10FFFF}",
]

private let edgeDoubles: [Double] = [
    0, -0.0, 1, -1, 1.0, 4.5, 0.1, 0.2, 0.3, 1e-7, 1e21, 1e20, 1e16, 1e15, 999_999_999_999_999, 1e22, 1e-5, 0.0001,
    1.2345678901234568e20, .leastNonzeroMagnitude, 2.2250738585072014e-308, .greatestFiniteMagnitude,
    -.greatestFiniteMagnitude,
    Double(Int64.max), 9_007_199_254_740_992, 9_007_199_254_740_994, 12345.678, 3.141592653589793, -2.5e-10,
    1.7976931348623157e308, 100,
]

private let edgeFloats: [Float] = [
    0, -0.0, 1, 0.1, 4.5, 1e-7, 3.4028235e38, .leastNonzeroMagnitude, 16_777_216, 0.3, 1e10, -7.25,
]

// MARK: - Tests

@Suite("FastJSON", .cpuBound)
struct FastJSONTests {
    /// A value whose `encode(to:)` encodes JSON of its own with the library's encoder (as a
    /// document embedding a pre-encoded string might).
    private struct EncodesInside: Encodable {
        var inner: [String: Date]
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: DynamicCodingKey.self)
            let text = String(decoding: try FastJSON.encode(inner, dateCoding: .secondsSince1970), as: UTF8.self)
            try container.encode(text, forKey: DynamicCodingKey("text"))
            try container.encode(inner, forKey: DynamicCodingKey("inner"))
        }
    }

    @Test("Each thread reuses its encoder: the date coding asked for, and an encode inside an encode, still hold")
    func threadEncoderReuse() throws {
        let date = Date(timeIntervalSince1970: 1_000)
        for coding in [DateCoding.iso8601, .secondsSince1970, .iso8601, .millisecondsSince1970, .iso8601] {
            let fast = try FastJSON.encode(["d": date], dateCoding: coding)
            let foundation = try JSONBody.foundationEncoder(for: coding).encode(["d": date])
            #expect(fast == foundation, "\(coding)")
        }
        let value = EncodesInside(inner: ["d": date])
        for _ in 0..<3 {
            let fast = try FastJSON.encode(value, dateCoding: .iso8601)
            let object = try #require(try JSONSerialization.jsonObject(with: fast) as? [String: Any])
            #expect(object["text"] as? String == #"{"d":1000}"#)
            #expect((object["inner"] as? [String: String])?["d"] == "1970-01-01T00:16:40Z")
        }
        var buffer: [UInt8] = []
        try FastJSON.encode(value, dateCoding: .iso8601, into: &buffer)
        try FastJSON.encode(["n": 1], dateCoding: .iso8601, into: &buffer)
        #expect(String(decoding: buffer, as: UTF8.self).hasSuffix(#"}{"n":1}"#))
    }
    @Test("The benchmark document: same bytes as Foundation up to member order, members in encoding order")
    func album() throws {
        try expectSameEncoding(sampleAlbum)
        let data = try FastJSONEncoder.encode(sampleAlbum, dateCoding: .iso8601)
        #expect(
            String(decoding: data, as: UTF8.self)
                == #"{"_id":"doc0000001","n":1,"text":"small","artist":"Joni Mitchell","album":"Blue","year":1971,"#
                + #""tags":["folk","singer-songwriter","1970s"],"rating":4.5,"available":true,"label":"Reprise Records","#
                + #""country":"Canada"}"#)
        expectSameDecoding(Album.self, String(decoding: data, as: UTF8.self))
    }

    @Test("The fast path is taken for typical documents, both ways")
    func fastPathTaken() throws {
        #expect(try FastJSON.encodeReportingPath(sampleAlbum, dateCoding: .iso8601).fast)
        #expect(try FastJSON.encodeReportingPath(sampleOuter, dateCoding: .iso8601).fast)
        let data = try JSONEncoder().encode(sampleAlbum)
        let decoded = try FastJSON.decodeReportingPath(Album.self, from: data, dateCoding: .iso8601)
        #expect(decoded.fast)
        #expect(decoded.value == sampleAlbum)
        // Foundation takes a trailing comma; the fast path refuses it.
        #expect(try !FastJSON.decodeReportingPath([Int].self, from: Data("[1,]".utf8), dateCoding: .iso8601).fast)
    }

    @Test("Nested structs, optionals, arrays, dictionaries, enums, Date, Data and URL, under every DateCoding")
    func richDocument() throws {
        for coding in [DateCoding.iso8601, .secondsSince1970, .millisecondsSince1970, .foundationDefault] {
            try expectSameEncoding(sampleOuter, coding)
            let json = String(decoding: try foundationEncoder(coding).encode(sampleOuter), as: UTF8.self)
            expectSameDecoding(Outer.self, json, coding)
            #expect(try FastJSON.decode(Outer.self, from: Data(json.utf8), dateCoding: coding) == sampleOuter)
        }
        var changed = sampleOuter
        changed.optionalInner = Inner(name: "here", values: [7], flag: nil)
        changed.maybe = nil
        try expectSameEncoding(changed)
        expectSameDecoding(Outer.self, String(decoding: try foundationEncoder(.iso8601).encode(changed), as: UTF8.self))
    }

    @Test("Integers of every width at their limits, as members, elements and top-level values")
    func integers() throws {
        for value in [
            Integers.min, Integers.max,
            Integers(i: 0, i8: -1, i16: 1, i32: -10, i64: 99, u: 7, u8: 8, u16: 9, u32: 10, u64: 11),
        ] {
            try expectSameEncoding(value)
            expectSameDecoding(Integers.self, String(decoding: try JSONEncoder().encode(value), as: UTF8.self))
        }
        try expectSameEncoding([Int64.min, Int64.max, 0])
        try expectSameEncoding([UInt64.max])
        try expectSameEncoding(Int8.min)
        try expectSameEncoding(UInt16.max)
        expectSameDecoding([Int64].self, "[-9223372036854775808,9223372036854775807,0,-0]")
        expectSameDecoding([UInt64].self, "[18446744073709551615,0]")
    }

    @Test("The decoder a thread keeps between decodes: a kept container, a nested decode, other types after")
    func threadKeptDecoder() throws {
        let kept = try FastJSON.decodeReportingPath(
            KeptContainer.self, from: Data(#"{"name":"first","inner":"42"}"#.utf8), dateCoding: .iso8601)
        #expect(kept.fast)
        #expect(kept.value.inner == 42)
        // Decodes after it, of other shapes and sizes, reuse the thread's decoder...
        for n in 0..<50 {
            let json = "[" + (0...n).map { #"{"value":\#($0)}"# }.joined(separator: ",") + "]"
            let values = try FastJSON.decode([ExplicitNull].self, from: Data(json.utf8), dateCoding: .iso8601)
            #expect(values.map(\.value) == (0...n).map { Optional($0) })
            #expect(try FastJSON.decode(String.self, from: Data(#""s\#(n)""#.utf8), dateCoding: .iso8601) == "s\(n)")
        }
        // ...and never the bytes the kept container reads.
        #expect(try kept.value.name() == "first")
        // A failed decode leaves nothing behind for the next one.
        #expect(throws: DecodingError.self) {
            _ = try FastJSON.decode(ExplicitNull.self, from: Data(#"{"value":"x"}"#.utf8), dateCoding: .iso8601)
        }
        let seven = try FastJSON.decode(ExplicitNull.self, from: Data(#"{"value":7}"#.utf8), dateCoding: .iso8601)
        #expect(seven.value == 7)
        // A decoder left with large buffers is not kept: a long escaped string, then many tokens.
        // A decoder left with a large index is not kept: many tokens, or a long string (whose
        // unescaped copy it would keep too); a small decode after them is.
        let many = "[" + Array(repeating: "1", count: 10_000).joined(separator: ",") + "]"
        #expect(try FastJSON.decode([Int].self, from: Data(many.utf8), dateCoding: .iso8601).count == 10_000)
        #expect(FastJSONDecoder.threadKeptIndexCapacity == nil)
        let long = String(repeating: #"a\n"#, count: 100_000)
        let decodedLong = try FastJSON.decodeReportingPath(
            [String: String].self, from: Data(#"{"k":"\#(long)"}"#.utf8), dateCoding: .iso8601)
        #expect(decodedLong.fast && decodedLong.value["k"]?.count == 200_000)
        #expect(FastJSONDecoder.threadKeptIndexCapacity == nil)
        #expect(try FastJSON.decode(Int.self, from: Data("5".utf8), dateCoding: .iso8601) == 5)
        #expect((FastJSONDecoder.threadKeptIndexCapacity ?? .max) <= 4096)
        // Another date coding gets a decoder of its own.
        let date = try FastJSON.decode(
            Date.self, from: Data("1000".utf8), dateCoding: .secondsSince1970)
        #expect(date == Date(timeIntervalSince1970: 1000))
    }

    @Test("Strings shorter than eight bytes (checked as one word) match Foundation's, whatever they hold where")
    func shortStrings() throws {
        #expect(FastJSONEncoderImpl.shortWord("abcdefg", count: 0) == 0x2020_2020_2020_2020)
        let letters = Array("abcdefg".utf8)
        for count in 1...7 {
            var expected: UInt64 = 0x2020_2020_2020_2020
            for index in 0..<count {
                expected &= ~(UInt64(0xFF) << UInt64(8 * index))
                expected |= UInt64(letters[index]) << UInt64(8 * index)
            }
            #expect(FastJSONEncoderImpl.shortWord(letters, count: count) == expected, "count \(count)")
        }
        for length in 1...7 {
            for position in 0..<length {
                for special in ["\"", "\\", "\n", "\u{01}", "\u{1F}", "\u{7F}", "/", "é", " ", "\u{0}"] {
                    var characters = Array(repeating: "a", count: length)
                    characters[position] = special
                    let string = characters.joined()
                    try expectSameEncoding(string)
                    try expectSameEncoding(["k\(special)": string])
                }
            }
        }
    }

    @Test("Decimals with few digits after the point (written without a String) match Foundation's")
    func shortDecimals() throws {
        // Deterministic: the same 40,000 values each run.
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state >> 11
        }
        var values: [Double] = [
            0.0001, 0.00011, 0.00009999, 0.00005, -0.000012, 0.000001, 0.001, -0.5, 19.99, 2.675, 0.125,
            999_999_999_999_999.9,
            123_456_789_012_345.6, 1e15 - 0.5, 1.000001, 1.0000001, 0.1 + 0.2, 1 / 3, -1e-4,
        ]
        let scales: [Double] = [10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000]
        for index in 0..<40_000 {
            let scale = scales[Int(next() % UInt64(scales.count))]
            switch index % 3 {
            case 0: values.append(Double(Int64(next() % 20_000_001) - 10_000_000) / scale)
            case 1: values.append(Double(Int64(next() % (1 << 51)) - (1 << 50)) / scale)
            default: values.append(Double(bitPattern: next() << 11 | next() % 2048))
            }
        }
        let finite = values.filter(\.isFinite)
        var failures = 0
        for chunk in stride(from: 0, to: finite.count, by: 1_000) {
            let slice = Array(finite[chunk..<min(chunk + 1_000, finite.count)])
            let fast = String(decoding: try FastJSON.encode(slice, dateCoding: .iso8601), as: UTF8.self)
            let foundation = String(decoding: try foundationEncoder(.iso8601).encode(slice), as: UTF8.self)
            if fast != foundation {
                let pairs = zip(
                    fast.dropFirst().dropLast().split(separator: ","),
                    foundation.dropFirst().dropLast().split(separator: ","))
                for (mine, theirs) in pairs where mine != theirs && failures < 10 {
                    failures += 1
                    Issue.record("wrote \(mine) where Foundation writes \(theirs)")
                }
            }
        }
    }

    @Test("Double and Float formatting matches Foundation's")
    func floatingPoint() throws {
        for value in edgeDoubles {
            try expectSameEncoding(value)
            try expectSameEncoding([value])
            try expectSameEncoding(Floats(d: value, f: 1))
            let json = String(decoding: try JSONEncoder().encode(value), as: UTF8.self)
            expectSameDecoding(Double.self, json)
        }
        for value in edgeFloats {
            try expectSameEncoding(value)
            try expectSameEncoding(Floats(d: 0, f: value))
            let json = String(decoding: try JSONEncoder().encode(value), as: UTF8.self)
            expectSameDecoding(Float.self, json)
        }
        // Non-finite numbers: Foundation throws, and so does the wrapper (the fast path refuses them).
        for value in [Double.nan, .infinity, -.infinity] {
            #expect(throws: (any Error).self) { try foundationEncoder(.iso8601).encode(value) }
            #expect(throws: FastJSON.Unsupported.self) { try FastJSONEncoder.encode([value], dateCoding: .iso8601) }
            #expect(throws: EncodingError.self) { try FastJSON.encode(Floats(d: value, f: 0), dateCoding: .iso8601) }
        }
        #expect(throws: EncodingError.self) { try FastJSON.encode(Float.infinity, dateCoding: .iso8601) }
    }

    @Test("Strings: every escape, control characters, slash, non-ASCII, emoji; keys with escapes")
    func strings() throws {
        for string in edgeStrings {
            try expectSameEncoding(string)
            try expectSameEncoding([string: string])
            let json = String(decoding: try JSONEncoder().encode([string: [string]]), as: UTF8.self)
            expectSameDecoding([String: [String]].self, json)
        }
        let escaped = #"["\u0041\u00e9\u4e2d\ud83d\ude00\"\\\/\b\f\n\r\t", "caf\u00E9"]"#
        expectSameDecoding([String].self, escaped)
        #expect(
            try FastJSONDecoder.decode([String].self, from: Data(escaped.utf8), dateCoding: .iso8601)[0]
                == "Aé中😀\"\\/\u{08}\u{0C}\n\r\t")
        expectSameDecoding([String: Int].self, #"{"\u0061":1,"b\"":2,"\ud83d\ude00":3}"#)
    }

    @Test("Strings around the length escaped in one chunk, and several chunks: same bytes as Foundation")
    func longStrings() throws {
        let limit = FastJSONEncoderImpl.escapingChunk
        let specials: [Character] = ["\"", "\\", "\n", "\u{01}", "\u{1F}", "é", "😀", "/"]
        var generator = SeededGenerator(seed: 11)
        for length in [limit - 9, limit - 1, limit, limit + 1, limit + 8, 3 * limit + 5] {
            for special in specials {
                // Plain text, the special character at the start, in the middle, near and at the end.
                var characters = Array(repeating: Character("a"), count: length)
                for position in [0, length / 2, length - 8, length - 1] { characters[position] = special }
                try expectSameEncoding(String(characters))
                try expectSameEncoding(["k": String(characters)])
            }
            // Every byte an escape: the worst case the reserved room is for.
            try expectSameEncoding(String(repeating: "\u{02}", count: length))
            let random = String((0..<length).map { _ in specials.randomElement(using: &generator)! })
            try expectSameEncoding([random: random])
        }
    }

    @Test("Short strings (0–24 bytes) with one special character at each position: same bytes as Foundation")
    func shortStringsEveryPosition() throws {
        // Covers the one-word path (under 8 bytes), the eight-byte steps, and the overlapping last
        // word of strings of 8 bytes or more, whose tail is checked and stored at once.
        let specials: [Character] = ["\"", "\\", "\n", "\u{01}", "\u{1F}", "é", "😀"]
        for length in 0...24 {
            let plain = String((0..<length).map { Character(UnicodeScalar(UInt8(ascii: "a") + UInt8($0 % 26))) })
            try expectSameEncoding(plain)
            try expectSameEncoding([plain: plain])
            for position in 0..<length {
                for special in specials {
                    var characters = Array(plain)
                    characters[position] = special
                    let text = String(characters)
                    try expectSameEncoding(text)
                    try expectSameEncoding([text: length])
                }
            }
        }
    }

    @Test("Keys that share long prefixes or lengths are not taken for repeats (the hash's eight-byte steps)")
    func keysSharingPrefixes() throws {
        var object: [String: Int] = [:]
        for index in 0..<60 {
            object["abcdefgh" + String(index)] = index
            object["abcdefghijklmnop" + String(index)] = index
            object[String(repeating: "k", count: index + 1)] = index
        }
        try expectSameEncoding(object)
    }

    @Test("Arrays of strings (taken in one step): same bytes, values and errors as Foundation")
    func stringArrays() throws {
        struct Tagged: Codable, Equatable {
            var tags: [String]
            var more: [String]?
            var nested: [[String]]
        }
        try expectSameEncoding(edgeStrings)
        try expectSameEncoding([String]())
        try expectSameEncoding(Tagged(tags: edgeStrings, more: nil, nested: [[], ["a"], edgeStrings]))
        try expectSameEncoding(Tagged(tags: [], more: ["x"], nested: []))
        let json = String(
            decoding: try JSONEncoder().encode(Tagged(tags: edgeStrings, more: [], nested: [["b"]])), as: UTF8.self)
        expectSameDecoding(Tagged.self, json)
        expectSameDecoding([String].self, "[]")
        // Anything but strings only: Array's own decoding, with Foundation's error and coding path.
        expectSameDecoding([String].self, #"["a",1]"#, fast: false)
        expectSameDecoding([String].self, #"["a",null]"#, fast: false)
        expectSameDecoding([String].self, #"{"a":"b"}"#, fast: false)
        expectSameDecoding(Tagged.self, #"{"tags":["a",["b"]],"nested":[]}"#, fast: false)
        expectSameDecoding(Tagged.self, #"{"tags":"a","nested":[]}"#, fast: false)
        expectSameDecoding(Tagged.self, #"{"tags":null,"nested":[]}"#, fast: false)
        expectSameDecoding(Tagged.self, #"{"tags":[],"more":[true],"nested":[]}"#, fast: false)
    }

    @Test("nil: encodeNil, members left out by encodeIfPresent, null and missing keys when decoding")
    func optionals() throws {
        try expectSameEncoding(Optionals(a: nil, b: nil, c: nil, d: nil))
        try expectSameEncoding(Optionals(a: 1, b: "b", c: [], d: Inner(name: "", values: [], flag: nil)))
        try expectSameEncoding(ExplicitNull(value: nil))
        try expectSameEncoding(ExplicitNull(value: 3))
        try expectSameEncoding([Int?.none, 1, nil])
        try expectSameEncoding(Int?.none)
        expectSameDecoding(Optionals.self, #"{}"#)
        expectSameDecoding(Optionals.self, #"{"a":null,"b":null,"c":null,"d":null}"#)
        expectSameDecoding(Optionals.self, #"{"a":1,"b":"x","c":[1,2],"d":{"name":"n","values":[]}}"#)
        expectSameDecoding(Optionals.self, #"{"a":"wrong"}"#, fast: false)
        expectSameDecoding(ExplicitNull.self, #"{"value":null}"#)
        expectSameDecoding(ExplicitNull.self, #"{"value":5}"#)
        expectSameDecoding(ExplicitNull.self, #"{}"#, fast: false)
        expectSameDecoding([Int?].self, "[1,null,3]")
        expectSameDecoding(Int?.self, "null")
    }

    @Test("Classes: super.encode(to:) with the same encoder is one object; superEncoder falls back")
    func classes() throws {
        try expectSameEncoding(Dog(name: "Rex", breed: "collie"))
        try expectSameEncoding(Cat(name: "Tom", lives: 9), fast: false)
        let dog = try FastJSONDecoder.decode(
            Dog.self, from: Data(#"{"breed":"collie","name":"Rex"}"#.utf8), dateCoding: .iso8601)
        #expect(dog.name == "Rex" && dog.breed == "collie")
        let catJSON = Data(try JSONEncoder().encode(Cat(name: "Tom", lives: 9)))
        #expect(throws: (any Error).self) { try FastJSONDecoder.decode(Cat.self, from: catJSON, dateCoding: .iso8601) }
        let cat = try FastJSON.decode(Cat.self, from: catJSON, dateCoding: .iso8601)
        #expect(cat.name == "Tom" && cat.lives == 9)
    }

    @Test("Nested containers by hand; out-of-order use, repeated keys, Decimal and empty values fall back")
    func containers() throws {
        try expectSameEncoding(Manual(a: 1, b: ["x", "y"], c: "z"))
        expectSameDecoding(Manual.self, #"{"a":1,"nested":{"b":["x","y",[1]]},"c":"z"}"#, fast: false)
        expectSameDecoding(Manual.self, #"{"a":1,"nested":{"b":["x","y"]},"c":"z"}"#)
        try expectSameEncoding(RepeatedKey(), fast: false)
        try expectSameEncoding(OutOfOrder(), fast: false)
        try expectSameEncoding(HoldsNothing(nothing: Nothing(), after: 1))
        #expect(throws: (any Error).self) { try FastJSON.encode(Nothing(), dateCoding: .iso8601) }
        try expectSameEncoding(WithDecimal(amount: Decimal(string: "12.50")!), fast: false)
        expectSameDecoding(WithDecimal.self, #"{"amount":12.5}"#, fast: false)
        try expectSameEncoding([String: Int]())
        try expectSameEncoding([[String]]())
        try expectSameEncoding([[Int]()])
    }

    @Test("Top-level scalars (fragments)")
    func fragments() throws {
        try expectSameEncoding("text")
        try expectSameEncoding(42)
        try expectSameEncoding(true)
        try expectSameEncoding(Date(timeIntervalSince1970: 0), .secondsSince1970)
        try expectSameEncoding(URL(string: "http://x.org/a b")!)
        try expectSameEncoding(Data("hello".utf8))
        expectSameDecoding(String.self, #""text""#)
        expectSameDecoding(Int.self, " 42 ")
        expectSameDecoding(Bool.self, "true")
        expectSameDecoding(Data.self, #""aGVsbG8=""#)
        expectSameDecoding(URL.self, #""http://x.org/a%20b""#)
    }

    @Test("Appending many documents to one buffer")
    func appending() throws {
        var buffer: [UInt8] = []
        let encoder = FastJSONEncoder(dateCoding: .iso8601)
        var expected: [UInt8] = []
        for n in 0..<50 {
            var album = sampleAlbum
            album.n = n
            try encoder.encode(album, into: &buffer)
            buffer.append(UInt8(ascii: "\n"))
            expected += try FastJSONEncoder.encode(album, dateCoding: .iso8601) + [UInt8(ascii: "\n")]
        }
        #expect(buffer == expected)
        let before = buffer
        #expect(throws: (any Error).self) { try encoder.encode(RepeatedKey(), into: &buffer) }
        #expect(buffer == before)
        var fallback = buffer
        try FastJSON.encode(RepeatedKey(), dateCoding: .iso8601, into: &fallback)
        #expect(fallback == before + Array(#"{"a":2}"#.utf8))
    }

    @Test("Batch decoding: rows from slices of one buffer")
    func batch() throws {
        var buffer: [UInt8] = []
        var ranges: [Range<Int>] = []
        for n in 0..<100 {
            var album = sampleAlbum
            album.n = n
            let start = buffer.count
            buffer += try JSONEncoder().encode(album)
            ranges.append(start..<buffer.count)
            buffer += Array(",\n".utf8)
        }
        // One malformed row, which Foundation reads (a trailing comma).
        let start = buffer.count
        buffer += Array(#"{"_id":"x","n":100,"text":"","artist":"","album":"","year":1,"tags":["a",],"#.utf8)
        buffer += Array(#""rating":1,"available":false,"label":"","country":""}"#.utf8)
        ranges.append(start..<buffer.count)
        let albums = try buffer.withUnsafeBytes {
            try FastJSON.decode(Album.self, from: $0, ranges: ranges, dateCoding: .iso8601)
        }
        #expect(albums.count == 101)
        #expect(albums.map(\.n) == Array(0...100))
        #expect(albums[100].tags == ["a"])
        let fastOnly = try buffer.withUnsafeBytes {
            try FastJSONDecoder.decode(Album.self, from: $0, ranges: Array(ranges.dropLast()), dateCoding: .iso8601)
        }
        #expect(fastOnly == Array(albums.dropLast()))
    }

    @Test("Numbers into each type: exactly Foundation's choices (1.0 and 1e2 as Int, too large, fractions)")
    func numberSemantics() {
        let inputs = [
            "0", "-0", "1", "-1", "21", "21.5", "1.0", "1e2", "1E2", "1e+2", "-1e2", "1.5e1", "1e-2", "100e-2", "255",
            "256", "-128", "-129", "127", "128", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
            "-9223372036854775809", "18446744073709551615", "18446744073709551616", "12345678901234567890",
            "9007199254740993", "9007199254740993.0", "1e18", "1e19", "1e300", "1e400", "-1e400", "1e-400",
            "0.000000000000000000000000000001", "1.0000000000000001", "1.2345e+17", "-1.2345e17", "9.2e18", "-9.2e18",
            "9.3e18", "1.8e19", "1.9e19", "1.5e16", "1.25e16", "-9223372036854775808.0", "9007199254740993.9",
            "123456789012345678901e-3", "1e15", "1e16", "4.9e-324", "2.4e-324", "3.4028235e38",
            "3.5e38", "1e-46", "0.1", "123456789012345678901234567890", "0e0", "-0.0", "0.0e-5",
            "true", "false", "null", #""21""#, "[]", "{}",
        ]
        for input in inputs {
            expectSameDecoding(Probe.self, input, fast: nil)
            expectSameDecoding(JSONValue.self, input, fast: nil)
            expectSameDecoding([JSONValue].self, "[\(input)]", fast: nil)
        }
        // The everyday cases stay on the fast path.
        for input in ["21", "21.5", "1e2", "-0", "true", "null", #""s""#, "1e300", "12345678901234567890"] {
            expectSameDecoding(JSONValue.self, input)
        }
    }

    @Test("Keys: lookups, contains, decodeNil, allKeys, escapes, repeated keys (first wins), large objects")
    func keys() throws {
        let inputs = [
            #"{"a":"1","b":2,"n":null}"#, #"{"a":"first","a":"second"}"#, #"{"b":1,"a":"x","b":2}"#,
            #"{"\u00e9":"e","\ud83d\ude00":"smile","q\"":"quote","":"empty"}"#, #"{}"#,
            #"{"a":null,"a":"later"}"#,
        ]
        for input in inputs {
            expectSameDecoding(KeyProbe.self, input)
            expectSameDecoding([String: JSONValue].self, input)
            expectSameDecoding(JSONValue.self, input)
        }
        // Large objects, with a repeated key at the end.
        var members = (0..<3000).map { #""key\#($0)":\#($0)"# }
        members.append(#""key17":-1"#)
        let large = "{" + members.joined(separator: ",") + "}"
        expectSameDecoding([String: Int].self, large)
        expectSameDecoding(JSONValue.self, large)
        let decoded = try FastJSONDecoder.decode([String: Int].self, from: Data(large.utf8), dateCoding: .iso8601)
        #expect(decoded.count == 3000 && decoded["key17"] == 17)
        var dictionary: [String: Int] = [:]
        for n in 0..<3000 { dictionary["k\(n)"] = n }
        try expectSameEncoding(dictionary)
        expectSameDecoding([Int: String].self, #"{"1":"a","-2":"b"}"#)
        expectSameDecoding([Int: String].self, #"{"1":"a","x":"b"}"#, fast: false)
    }

    @Test("Errors inside init(from:) are Foundation's kinds where Foundation throws them")
    func errorsInsideInit() {
        let cases: [(String, String)] = [
            (#"{"_id":"x"}"#, "keyNotFound"), (#"{"_id":null,"n":1}"#, "valueNotFound"), (#"[1]"#, "typeMismatch"),
            ("null", "valueNotFound"),
        ]
        for (json, kind) in cases {
            let result = Result { try FastJSONDecoder.decode(Album.self, from: Data(json.utf8), dateCoding: .iso8601) }
            var got = "success"
            if case .failure(let error) = result {
                switch error as? DecodingError {
                case .keyNotFound: got = "keyNotFound"
                case .valueNotFound: got = "valueNotFound"
                case .typeMismatch: got = "typeMismatch"
                default: got = "\(error)"
                }
            }
            #expect(got == kind, "\(json)")
            expectSameDecoding(Album.self, json, fast: false)
        }
    }

    @Test("Errors from the fast path carry Foundation's coding path (keys, \"Index n\")")
    func errorPaths() throws {
        let inputs = [
            #"[{"name":"a","values":[]},{"name":"b","values":[1,"x"]}]"#,
            #"[{"name":"a","values":[]},{"values":[1]}]"#, #"[{"name":"a","values":null}]"#,
            #"[{"name":"a","values":[1,2,null]}]"#,
        ]
        func path(_ error: any Error) -> [String] {
            let context: DecodingError.Context?
            switch error as? DecodingError {
            case .typeMismatch(_, let c), .valueNotFound(_, let c), .keyNotFound(_, let c), .dataCorrupted(let c):
                context = c
            default: context = nil
            }
            return context?.codingPath.map { "\($0.stringValue)/\($0.intValue.map(String.init) ?? "-")" } ?? ["?"]
        }
        for json in inputs {
            let data = Data(json.utf8)
            let foundation = #expect(throws: DecodingError.self) { try JSONDecoder().decode([Inner].self, from: data) }
            let fast = #expect(throws: DecodingError.self) {
                try FastJSONDecoder.decode([Inner].self, from: data, dateCoding: .iso8601)
            }
            if let foundation, let fast {
                #expect(path(fast) == path(foundation), "\(json)")
                #expect("\(fast)".prefix(12) == "\(foundation)".prefix(12), "\(json)")
            }
        }
    }

    @Test("Deep nesting when encoding: fast up to 500 levels, Foundation's error beyond 512")
    func deepEncoding() throws {
        func nested(_ depth: Int) -> JSONValue {
            var value = JSONValue.int(1)
            for _ in 0..<depth { value = .array([value]) }
            return value
        }
        try expectSameEncoding(nested(300))
        try expectSameEncoding(nested(505), fast: false)
        #expect(throws: (any Error).self) { try foundationEncoder(.iso8601).encode(nested(600)) }
        #expect(throws: (any Error).self) { try FastJSON.encode(nested(600), dateCoding: .iso8601) }
    }

    @Test("Malformed and unusual input: both throw, or both give the same value")
    func malformed() {
        let inputs = [
            "", " ", "{", "}", "[", "[1,]", "[1 2]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "01", "-", "1.", ".5", "+1",
            "1e", "1e+", "--1", "0x10", "tru", "truex", "nul", "[1]]", "{} {}", "\"abc", #""\x""#, #""\u12""#,
            #""\ud800""#, #""\udc00""#, #""\ud800\u0041""#, "\"a\u{01}b\"", "\u{FEFF}[1]", "[1] x", "NaN", "Infinity",
            "[\"\\u0000\"]", "  [ 1 , 2 ]  ", "\n{\"a\"\n:\n1}\n", "[1e5]", "[-0.0]",
        ]
        for input in inputs {
            expectSameDecoding(JSONValue.self, input, fast: nil)
            expectSameDecoding([Int].self, input, fast: nil)
        }
        let invalidUTF8: [[UInt8]] = [
            [0x22, 0xFF, 0x22], [0x22, 0xC0, 0xAF, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22], [0x22, 0xE2, 0x82, 0x22],
        ]
        for bytes in invalidUTF8 {
            let data = Data(bytes)
            let foundation = try? JSONDecoder().decode(String.self, from: data)
            let wrapped = try? FastJSON.decode(String.self, from: data, dateCoding: .iso8601)
            #expect(foundation == wrapped)
            #expect(throws: (any Error).self) {
                try FastJSONDecoder.decode(String.self, from: data, dateCoding: .iso8601)
            }
        }
        // Nesting: fine at 400 levels, refused by the fast path at 600 (Foundation's limit is 512).
        for depth in [300, 500, 501, 512, 513] {
            let json = String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
            expectSameDecoding(JSONValue.self, json, fast: depth <= 500)
        }
    }

    @Test("Dates under each DateCoding, including fractions and bad text")
    func dates() throws {
        let dates = [
            Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: 1_764_066_600),
            Date(timeIntervalSince1970: 1_764_066_600.25), Date(timeIntervalSinceReferenceDate: -1.5),
        ]
        for coding in [DateCoding.iso8601, .secondsSince1970, .millisecondsSince1970, .foundationDefault] {
            for date in dates {
                try expectSameEncoding(date, coding)
                try expectSameEncoding(["at": date], coding)
                let json = String(decoding: try foundationEncoder(coding).encode(["at": date]), as: UTF8.self)
                expectSameDecoding([String: Date].self, json, coding)
            }
        }
        expectSameDecoding([String: Date].self, #"{"at":"2025-11-25T10:30:00.250Z"}"#)
        expectSameDecoding([String: Date].self, #"{"at":"yesterday"}"#, fast: false)
        expectSameDecoding([String: Date].self, #"{"at":1}"#, fast: false)
        expectSameDecoding([String: Date].self, #"{"at":null}"#, fast: false)
        expectSameDecoding([String: Date].self, #"{"at":"1"}"#, .secondsSince1970, fast: false)
    }

    @Test("Random JSONValue trees: Foundation's text decodes to the same value both ways (fixed seed)")
    func randomTrees() throws {
        var generator = SeededGenerator(seed: 0x5EED_2026)
        let encoder = JSONEncoder()
        var fastCount = 0
        for _ in 0..<2000 {
            let value = randomValue(depth: 0, using: &generator)
            let data = try encoder.encode(value)
            let foundation = try JSONDecoder().decode(JSONValue.self, from: data)
            let (fast, usedFast) = try FastJSON.decodeReportingPath(JSONValue.self, from: data, dateCoding: .iso8601)
            #expect(fast == foundation, "\(String(decoding: data, as: UTF8.self))")
            if usedFast { fastCount += 1 }
            // And the fast encoder writes what Foundation writes for it.
            let fastBytes = try FastJSONEncoder.encode(value, dateCoding: .iso8601)
            #expect(canonical(Array(fastBytes)) == canonical(Array(try foundationEncoder(.iso8601).encode(value))))
        }
        #expect(fastCount == 2000)
    }
}

private func randomString(using generator: inout SeededGenerator) -> String {
    let pieces = [
        "a", "Z", "0", " ", "\"", "\\", "/", "\n", "\t", "\u{01}", "\u{1F}", "é", "中", "😀", "\u{7F}", "key", "_id",
    ]
    return (0..<Int.random(in: 0...6, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }.joined()
}

private func randomValue(depth: Int, using generator: inout SeededGenerator) -> JSONValue {
    let choice = Int.random(in: 0..<(depth > 4 ? 6 : 8), using: &generator)
    switch choice {
    case 0: return .null
    case 1: return .bool(Bool.random(using: &generator))
    case 2:
        switch Int.random(in: 0..<3, using: &generator) {
        case 0: return .int(Int64.random(in: -1000...1000, using: &generator))
        case 1: return .int(Int64.random(in: .min ... .max, using: &generator))
        default: return .int(Int64(Int32.random(in: .min ... .max, using: &generator)))
        }
    case 3:
        switch Int.random(in: 0..<4, using: &generator) {
        case 0: return .double(Double(Int.random(in: -100...100, using: &generator)) / 8)
        case 1: return .double(Double.random(in: -1e6...1e6, using: &generator))
        case 2: return .double(Double(bitPattern: UInt64.random(in: 0...0x7FEF_FFFF_FFFF_FFFF, using: &generator)))
        default: return .double(Double.random(in: -1...1, using: &generator) * 1e-300)
        }
    case 4, 5: return .string(randomString(using: &generator))
    case 6:
        return .array(
            (0..<Int.random(in: 0...5, using: &generator)).map { _ in randomValue(depth: depth + 1, using: &generator) }
        )
    default:
        var object: [String: JSONValue] = [:]
        for _ in 0..<Int.random(in: 0...6, using: &generator) {
            object[randomString(using: &generator)] = randomValue(depth: depth + 1, using: &generator)
        }
        return .object(object)
    }
}
