import Foundation

/// One pass over strict RFC 8259 JSON, building `FastJSONDecoder`'s index. It validates everything the
/// decoder later relies on (number syntax, escapes and surrogate pairs, UTF-8, control characters) and
/// throws ``FastJSON/Unsupported`` on anything else, trailing commas and nesting deeper than 500 included.
struct FastJSONParser {
    typealias Token = FastJSONToken

    let base: UnsafePointer<UInt8>
    let count: Int
    var tokens: [Token]
    var index = 0
    var scratch: [UInt8] = []

    init(base: UnsafePointer<UInt8>, count: Int, tokens: [Token]) {
        self.base = base
        self.count = count
        self.tokens = tokens
        self.tokens.removeAll(keepingCapacity: true)
        if self.tokens.capacity < count / 6 { self.tokens.reserveCapacity(count / 6 + 4) }
    }

    private func invalid(_ reason: String = "invalid JSON") -> FastJSON.Unsupported {
        FastJSON.Unsupported("\(reason) at byte \(index)")
    }

    mutating func parseDocument() throws {
        try parseValue(depth: 0)
        skipWhitespace()
        guard index == count else { throw invalid("trailing characters") }
    }

    /// Parses the one value at the start of the bytes, which may go on past it (a row inside a
    /// chunk of a stream), and returns where it ends.
    mutating func parseLeadingValue() throws -> Int {
        try parseValue(depth: 0)
        return index
    }

    @inline(__always)
    private mutating func skipWhitespace() {
        while index < count {
            switch base[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    private mutating func parseValue(depth: Int) throws {
        skipWhitespace()
        guard index < count else { throw invalid("unexpected end") }
        switch base[index] {
        case UInt8(ascii: "\""):
            try parseString(isKey: false)
        case UInt8(ascii: "{"):
            try parseObject(depth: depth + 1)
        case UInt8(ascii: "["):
            try parseArray(depth: depth + 1)
        case UInt8(ascii: "t"):
            try literal("true", kind: .bool, flags: FastJSONDecoderImpl.trueFlag)
        case UInt8(ascii: "f"):
            try literal("false", kind: .bool, flags: 0)
        case UInt8(ascii: "n"):
            try literal("null", kind: .null, flags: 0)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            try parseNumber()
        default:
            throw invalid()
        }
    }

    private mutating func literal(_ text: StaticString, kind: Token.Kind, flags: UInt8) throws {
        let length = text.utf8CodeUnitCount
        guard count - index >= length, memcmp(base + index, text.utf8Start, length) == 0 else { throw invalid() }
        let start = index
        index += length
        tokens.append(
            Token(
                start: Int32(start), end: Int32(index), next: Int32(tokens.count + 1), aux: 0, kind: kind, flags: flags
            ))
    }

    private mutating func parseNumber() throws {
        let start = index
        var isInteger = true
        if base[index] == UInt8(ascii: "-") { index += 1 }
        guard index < count else { throw invalid() }
        if base[index] == UInt8(ascii: "0") {
            index += 1
        } else if base[index] >= UInt8(ascii: "1") && base[index] <= UInt8(ascii: "9") {
            while index < count && base[index] >= UInt8(ascii: "0") && base[index] <= UInt8(ascii: "9") { index += 1 }
        } else {
            throw invalid()
        }
        if index < count && base[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let digits = index
            while index < count && base[index] >= UInt8(ascii: "0") && base[index] <= UInt8(ascii: "9") { index += 1 }
            guard index > digits else { throw invalid() }
        }
        if index < count && (base[index] == UInt8(ascii: "e") || base[index] == UInt8(ascii: "E")) {
            isInteger = false
            index += 1
            if index < count && (base[index] == UInt8(ascii: "+") || base[index] == UInt8(ascii: "-")) { index += 1 }
            let digits = index
            while index < count && base[index] >= UInt8(ascii: "0") && base[index] <= UInt8(ascii: "9") { index += 1 }
            guard index > digits else { throw invalid() }
        }
        tokens.append(
            Token(
                start: Int32(start), end: Int32(index), next: Int32(tokens.count + 1), aux: 0, kind: .number,
                flags: isInteger ? FastJSONDecoderImpl.integerFlag : 0))
    }

    private mutating func parseString(isKey: Bool) throws {
        index += 1  // the opening quote
        let start = index
        var escaped = false
        while true {
            // Eight plain bytes at a time (no quote, backslash, control character or non-ASCII byte).
            while index + 8 <= count, Self.isPlain(UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)) {
                index += 8
            }
            guard index < count else { throw invalid("unterminated string") }
            let byte = base[index]
            if byte == UInt8(ascii: "\"") { break }
            if byte == UInt8(ascii: "\\") {
                escaped = true
                try skipEscape()
            } else if byte < 0x20 {
                throw invalid("control character in string")
            } else if byte < 0x80 {
                index += 1
            } else {
                try skipUTF8Sequence()
            }
        }
        let end = index
        index += 1  // the closing quote
        var hash: UInt32 = 0
        if isKey {
            let bytes = UnsafeBufferPointer(start: base + start, count: end - start)
            if escaped {
                Self.unescape(bytes, into: &scratch)
                hash = scratch.withUnsafeBufferPointer { FastJSON.keyHash($0) }
            } else {
                hash = FastJSON.keyHash(bytes)
            }
        }
        tokens.append(
            Token(
                start: Int32(start), end: Int32(end), next: Int32(tokens.count + 1), aux: hash, kind: .string,
                flags: escaped ? FastJSONDecoderImpl.escapedFlag : 0))
    }

    /// Whether none of the eight bytes in `word` is `"`, `\`, below 0x20 or above 0x7F (SWAR; a false
    /// "no" only sends the bytes through the exact byte-by-byte loop).
    @inline(__always)
    static func isPlain(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        let quote = word ^ (ones &* 0x22)
        let backslash = word ^ (ones &* 0x5C)
        let special =
            ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash) | ((word &- ones &* 0x20) & ~word) | word
        return special & highs == 0
    }

    /// Whether none of the eight bytes in `word` is `"`, `\` or below 0x20 (bytes above 0x7F allowed).
    @inline(__always)
    static func isPlainOrUTF8(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        let quote = word ^ (ones &* 0x22)
        let backslash = word ^ (ones &* 0x5C)
        // Bytes at or above 0x80 are masked out of the below-0x20 test by `~word`.
        let special = ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash) | ((word &- ones &* 0x20) & ~word)
        return special & highs == 0
    }

    @inline(__always)
    private static func hexValue(_ byte: UInt8) -> UInt32? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return UInt32(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return UInt32(byte - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return UInt32(byte - UInt8(ascii: "A") + 10)
        default: return nil
        }
    }

    /// Four hex digits at `offset`, or nil.
    private static func hex4(_ base: UnsafePointer<UInt8>, _ offset: Int) -> UInt32? {
        guard let a = hexValue(base[offset]), let b = hexValue(base[offset + 1]), let c = hexValue(base[offset + 2]),
            let d = hexValue(base[offset + 3])
        else { return nil }
        return a << 12 | b << 8 | c << 4 | d
    }

    /// Validates the escape at `index` (a backslash), a surrogate pair as one.
    private mutating func skipEscape() throws {
        guard index + 1 < count else { throw invalid("unterminated escape") }
        switch base[index + 1] {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
            UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
            index += 2
        case UInt8(ascii: "u"):
            guard index + 6 <= count, let unit = Self.hex4(base, index + 2) else { throw invalid("bad \\u escape") }
            index += 6
            if unit >= 0xD800 && unit <= 0xDBFF {
                guard index + 6 <= count, base[index] == UInt8(ascii: "\\"), base[index + 1] == UInt8(ascii: "u"),
                    let low = Self.hex4(base, index + 2), low >= 0xDC00 && low <= 0xDFFF
                else { throw invalid("lone high surrogate") }
                index += 6
            } else if unit >= 0xDC00 && unit <= 0xDFFF {
                throw invalid("lone low surrogate")
            }
        default:
            throw invalid("bad escape")
        }
    }

    /// Validates one multi-byte UTF-8 sequence at `index` (no overlong forms, surrogates or values past U+10FFFF).
    private mutating func skipUTF8Sequence() throws {
        let lead = base[index]
        @inline(__always) func continuation(_ offset: Int, _ low: UInt8 = 0x80, _ high: UInt8 = 0xBF) -> Bool {
            index + offset < count && base[index + offset] >= low && base[index + offset] <= high
        }
        switch lead {
        case 0xC2...0xDF:
            guard continuation(1) else { throw invalid("invalid UTF-8") }
            index += 2
        case 0xE0:
            guard continuation(1, 0xA0), continuation(2) else { throw invalid("invalid UTF-8") }
            index += 3
        case 0xE1...0xEC, 0xEE...0xEF:
            guard continuation(1), continuation(2) else { throw invalid("invalid UTF-8") }
            index += 3
        case 0xED:
            guard continuation(1, 0x80, 0x9F), continuation(2) else { throw invalid("invalid UTF-8") }
            index += 3
        case 0xF0:
            guard continuation(1, 0x90), continuation(2), continuation(3) else { throw invalid("invalid UTF-8") }
            index += 4
        case 0xF1...0xF3:
            guard continuation(1), continuation(2), continuation(3) else { throw invalid("invalid UTF-8") }
            index += 4
        case 0xF4:
            guard continuation(1, 0x80, 0x8F), continuation(2), continuation(3) else { throw invalid("invalid UTF-8") }
            index += 4
        default:
            throw invalid("invalid UTF-8")
        }
    }

    private mutating func parseArray(depth: Int) throws {
        guard depth <= FastJSONDecoderImpl.maximumDepth else { throw invalid("nesting too deep") }
        let start = index
        let token = tokens.count
        tokens.append(Token(start: Int32(start), end: 0, next: 0, aux: 0, kind: .array, flags: 0))
        index += 1
        var elements: UInt32 = 0
        skipWhitespace()
        if index < count && base[index] == UInt8(ascii: "]") {
            index += 1
        } else {
            while true {
                try parseValue(depth: depth)
                elements += 1
                skipWhitespace()
                guard index < count else { throw invalid("unterminated array") }
                if base[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                guard base[index] == UInt8(ascii: "]") else { throw invalid() }
                index += 1
                break
            }
        }
        tokens[token].end = Int32(index)
        tokens[token].next = Int32(tokens.count)
        tokens[token].aux = elements
    }

    private mutating func parseObject(depth: Int) throws {
        guard depth <= FastJSONDecoderImpl.maximumDepth else { throw invalid("nesting too deep") }
        let start = index
        let token = tokens.count
        tokens.append(Token(start: Int32(start), end: 0, next: 0, aux: 0, kind: .object, flags: 0))
        index += 1
        var members: UInt32 = 0
        skipWhitespace()
        if index < count && base[index] == UInt8(ascii: "}") {
            index += 1
        } else {
            while true {
                skipWhitespace()
                guard index < count, base[index] == UInt8(ascii: "\"") else { throw invalid("expected a key") }
                try parseString(isKey: true)
                skipWhitespace()
                guard index < count, base[index] == UInt8(ascii: ":") else { throw invalid("expected ':'") }
                index += 1
                try parseValue(depth: depth)
                members += 1
                skipWhitespace()
                guard index < count else { throw invalid("unterminated object") }
                if base[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                guard base[index] == UInt8(ascii: "}") else { throw invalid() }
                index += 1
                break
            }
        }
        tokens[token].end = Int32(index)
        tokens[token].next = Int32(tokens.count)
        tokens[token].aux = members
    }

    /// The UTF-8 of a validated string's contents with its escapes resolved.
    static func unescape(_ bytes: UnsafeBufferPointer<UInt8>, into result: inout [UInt8]) {
        result.removeAll(keepingCapacity: true)
        guard let base = bytes.baseAddress else { return }
        let count = bytes.count
        var index = 0
        var mark = 0
        while index < count {
            guard base[index] == UInt8(ascii: "\\") else {
                index += 1
                continue
            }
            result.append(contentsOf: UnsafeBufferPointer(start: base + mark, count: index - mark))
            let code = base[index + 1]
            index += 2
            switch code {
            case UInt8(ascii: "b"): result.append(0x08)
            case UInt8(ascii: "f"): result.append(0x0C)
            case UInt8(ascii: "n"): result.append(0x0A)
            case UInt8(ascii: "r"): result.append(0x0D)
            case UInt8(ascii: "t"): result.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = hex4(base, index)!
                index += 4
                if scalar >= 0xD800 && scalar <= 0xDBFF {
                    let low = hex4(base, index + 2)!
                    index += 6
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                appendUTF8(scalar, to: &result)
            default: result.append(code)  // " \ /
            }
            mark = index
        }
        result.append(contentsOf: UnsafeBufferPointer(start: base + mark, count: count - mark))
    }

    private static func appendUTF8(_ scalar: UInt32, to result: inout [UInt8]) {
        switch scalar {
        case 0..<0x80:
            result.append(UInt8(scalar))
        case 0x80..<0x800:
            result.append(UInt8(0xC0 | scalar >> 6))
            result.append(UInt8(0x80 | scalar & 0x3F))
        case 0x800..<0x10000:
            result.append(UInt8(0xE0 | scalar >> 12))
            result.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            result.append(UInt8(0x80 | scalar & 0x3F))
        default:
            result.append(UInt8(0xF0 | scalar >> 18))
            result.append(UInt8(0x80 | scalar >> 12 & 0x3F))
            result.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            result.append(UInt8(0x80 | scalar & 0x3F))
        }
    }
}
