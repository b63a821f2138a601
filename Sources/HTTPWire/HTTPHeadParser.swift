/// Parsing of HTTP/1.x heads (request line or status line plus header fields).
///
/// Lines may end with CRLF or a bare LF. Obsolete line folding (a field line starting with a space
/// or tab) is joined to the previous field's value with one space. Repeated fields are kept as
/// separate entries in order.
public enum HTTPHeadParser {
    static let cr: UInt8 = 0x0D
    static let lf: UInt8 = 0x0A
    static let space: UInt8 = 0x20
    static let tab: UInt8 = 0x09

    /// Parses a request head. `bytes` holds the whole head, with or without the final empty line.
    public static func parseRequestHead<C: Collection>(_ bytes: C, limits: HTTPParserLimits = HTTPParserLimits()) throws
        -> HTTPRequestHead where C.Element == UInt8
    {
        try withBytes(bytes) { try parseRequestHead(buffer: $0, limits: limits) }
    }

    /// Parses a response head. `bytes` holds the whole head, with or without the final empty line.
    public static func parseResponseHead<C: Collection>(_ bytes: C, limits: HTTPParserLimits = HTTPParserLimits())
        throws
        -> HTTPResponseHead where C.Element == UInt8
    {
        try withBytes(bytes) { try parseResponseHead(buffer: $0, limits: limits) }
    }

    /// Parses header (or trailer) field lines, without a start line.
    public static func parseFieldLines<C: Collection>(_ bytes: C, limits: HTTPParserLimits = HTTPParserLimits()) throws
        -> HTTPHeaders where C.Element == UInt8
    {
        try withBytes(bytes) { buffer in
            var lines = try LineReader(buffer, limits: limits)
            return try parseFields(&lines, limits: limits)
        }
    }

    // MARK: - Pieces

    /// The bytes as one buffer: in place when the collection is contiguous (an array or a slice of
    /// one, as the decoders pass), copied once otherwise.
    static func withBytes<C: Collection, T>(_ bytes: C, _ body: (UnsafeBufferPointer<UInt8>) throws -> T) throws -> T
    where C.Element == UInt8 {
        if let result = try bytes.withContiguousStorageIfAvailable(body) { return result }
        return try Array(bytes).withUnsafeBufferPointer(body)
    }

    /// The lines of a head, read in one pass without copying: each ends at LF, with a CR before it
    /// dropped, and the head ends at the first empty line (or at the end of the bytes). A CR
    /// anywhere else is an error.
    struct LineReader {
        let bytes: UnsafeBufferPointer<UInt8>
        private var position = 0

        init(_ bytes: UnsafeBufferPointer<UInt8>, limits: HTTPParserLimits) throws {
            guard bytes.count <= limits.maxHeadSize else {
                throw HTTPWireError.headTooLarge(limit: limits.maxHeadSize)
            }
            self.bytes = bytes
        }

        /// The next line's bounds, or nil at the empty line that ends the head (or the end).
        mutating func next() throws -> Range<Int>? {
            let start = position
            guard start < bytes.count else { return nil }
            var i = start
            var sawCR = false
            while i < bytes.count, bytes[i] != lf {
                if bytes[i] == cr { sawCR = true }
                i += 1
            }
            position = i + 1
            var end = i
            if end > start, bytes[end - 1] == cr { end -= 1 }
            if end == start {
                position = bytes.count
                return nil
            }
            if sawCR, bytes[start..<end].contains(cr) {
                throw HTTPWireError.invalidHeader(text(bytes, start..<end))
            }
            return start..<end
        }
    }

    static func parseRequestHead(buffer: UnsafeBufferPointer<UInt8>, limits: HTTPParserLimits) throws
        -> HTTPRequestHead
    {
        var lines = try LineReader(buffer, limits: limits)
        guard let first = try lines.next() else { throw HTTPWireError.invalidStartLine("") }
        // Exactly three parts, split at single spaces.
        guard let afterMethod = buffer[first].firstIndex(of: space),
            let afterTarget = buffer[(afterMethod + 1)..<first.upperBound].firstIndex(of: space),
            !buffer[(afterTarget + 1)..<first.upperBound].contains(space)
        else { throw HTTPWireError.invalidStartLine(text(buffer, first)) }
        let method = first.lowerBound..<afterMethod
        let target = (afterMethod + 1)..<afterTarget
        guard !method.isEmpty, buffer[method].allSatisfy(isTokenByte) else {
            throw HTTPWireError.invalidStartLine(text(buffer, first))
        }
        guard !target.isEmpty, buffer[target].allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw HTTPWireError.invalidStartLine(text(buffer, first))
        }
        let version = try parseVersion(buffer, (afterTarget + 1)..<first.upperBound, line: first)
        let headers = try parseFields(&lines, limits: limits)
        return HTTPRequestHead(
            method: text(buffer, method), target: text(buffer, target), version: version, headers: headers)
    }

    /// A response head. `previous`: the fields of the response before it on the same connection,
    /// whose strings are reused for the same bytes (a server repeats most of its fields, byte for
    /// byte, from one response to the next: no new string, allocation or UTF-8 check for them).
    static func parseResponseHead(
        buffer: UnsafeBufferPointer<UInt8>, limits: HTTPParserLimits, reusing previous: [HTTPHeaders.Pair] = []
    ) throws -> HTTPResponseHead {
        var lines = try LineReader(buffer, limits: limits)
        guard let first = try lines.next() else { throw HTTPWireError.invalidStartLine("") }
        // The version, the code, and the rest (the reason, which may hold spaces) when present.
        guard let afterVersion = buffer[first].firstIndex(of: space) else {
            throw HTTPWireError.invalidStartLine(text(buffer, first))
        }
        let version = try parseVersion(buffer, first.lowerBound..<afterVersion, line: first)
        let afterCode = buffer[(afterVersion + 1)..<first.upperBound].firstIndex(of: space)
        let code = (afterVersion + 1)..<(afterCode ?? first.upperBound)
        guard code.count == 3, buffer[code].allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
            throw HTTPWireError.invalidStartLine(text(buffer, first))
        }
        let status = code.reduce(0) { $0 * 10 + Int(buffer[$1] - 0x30) }
        guard status >= 100 else { throw HTTPWireError.invalidStartLine(text(buffer, first)) }
        let reasonBytes = afterCode.map { ($0 + 1)..<first.upperBound } ?? first.upperBound..<first.upperBound
        // No control characters but tab (bytes of 0x80 and above are text, in either reading).
        guard buffer[reasonBytes].allSatisfy({ $0 >= 0x20 || $0 == tab }) else {
            throw HTTPWireError.invalidStartLine(text(buffer, first))
        }
        let headers = try parseFields(&lines, limits: limits, reusing: previous)
        return HTTPResponseHead(
            version: version, status: status, reason: text(buffer, reasonBytes), headers: headers)
    }

    static func parseVersion(_ buffer: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, line: Range<Int>) throws
        -> HTTPVersion
    {
        let v = range.lowerBound
        guard range.count == 8, buffer[v] == UInt8(ascii: "H"), buffer[v + 1] == UInt8(ascii: "T"),
            buffer[v + 2] == UInt8(ascii: "T"), buffer[v + 3] == UInt8(ascii: "P"),
            buffer[v + 4] == UInt8(ascii: "/"), buffer[v + 6] == UInt8(ascii: "."),
            (0x30...0x39).contains(buffer[v + 5]), (0x30...0x39).contains(buffer[v + 7])
        else { throw HTTPWireError.invalidStartLine(text(buffer, line)) }
        let version = HTTPVersion(major: Int(buffer[v + 5] - 0x30), minor: Int(buffer[v + 7] - 0x30))
        guard version.major == 1 else { throw HTTPWireError.unsupportedVersion(version.description) }
        return version
    }

    /// The field lines left in `lines`, in order; an obsolete folded line continues the previous
    /// field's value.
    static func parseFields(
        _ lines: inout LineReader, limits: HTTPParserLimits, reusing previous: [HTTPHeaders.Pair] = []
    ) throws -> HTTPHeaders {
        let buffer = lines.bytes
        var fields: [HTTPHeaders.Pair] = []
        fields.reserveCapacity(12)
        while let line = try lines.next() {
            if buffer[line.lowerBound] == space || buffer[line.lowerBound] == tab {
                // obs-fold: continues the previous field's value.
                guard let last = fields.popLast() else { throw HTTPWireError.invalidHeader(text(buffer, line)) }
                let more = text(buffer, trimmed(buffer[line]))
                let value = more.isEmpty ? last.value : (last.value.isEmpty ? more : last.value + " " + more)
                fields.append(HTTPHeaders.Pair(name: last.name, value: value))
                continue
            }
            guard let colon = buffer[line].firstIndex(of: UInt8(ascii: ":")) else {
                throw HTTPWireError.invalidHeader(text(buffer, line))
            }
            let name = line.lowerBound..<colon
            guard !name.isEmpty, buffer[name].allSatisfy(isTokenByte) else {
                throw HTTPWireError.invalidHeader(text(buffer, line))
            }
            let value = (colon + 1)..<line.upperBound
            guard !buffer[value].contains(where: { $0 == 0 || $0 == 0x7F }) else {
                throw HTTPWireError.invalidHeader(text(buffer, line))
            }
            let valueBytes = trimmed(buffer[value])
            if let earlier = sameField(in: previous, at: fields.count, name: name, of: buffer) {
                let valueText = same(earlier.value, buffer, valueBytes) ? earlier.value : text(buffer, valueBytes)
                fields.append(HTTPHeaders.Pair(name: earlier.name, value: valueText))
            } else {
                fields.append(HTTPHeaders.Pair(name: text(buffer, name), value: text(buffer, valueBytes)))
            }
            if fields.count > limits.maxHeaderCount { throw HTTPWireError.tooManyHeaders(limit: limits.maxHeaderCount) }
        }
        return HTTPHeaders(pairs: fields)
    }

    /// The field of `previous` whose name is the bytes `name`: the one at `position` when it is
    /// (a server sends its fields in the same order), else the first such one.
    static func sameField(
        in previous: [HTTPHeaders.Pair], at position: Int, name: Range<Int>, of buffer: UnsafeBufferPointer<UInt8>
    ) -> HTTPHeaders.Pair? {
        guard !previous.isEmpty else { return nil }
        if position < previous.count, same(previous[position].name, buffer, name) { return previous[position] }
        return previous.first { same($0.name, buffer, name) }
    }

    /// Whether `string`'s UTF-8 is exactly the bytes `range` of `buffer` (so that `text` would
    /// make an equal string of them).
    static func same(_ string: String, _ buffer: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Bool {
        let count = range.count
        guard string.utf8.count == count else { return false }
        guard count > 0, let base = buffer.baseAddress else { return true }
        let other = base + range.lowerBound
        // A byte loop over the string's own storage (a small string's is copied to the stack):
        // no iterator pair, no copy of the string.
        if let equal = string.utf8.withContiguousStorageIfAvailable({ utf8 -> Bool in
            for index in 0..<count where utf8[index] != other[index] { return false }
            return true
        }) {
            return equal
        }
        return string.utf8.elementsEqual(UnsafeBufferPointer(start: other, count: count))
    }

    /// The bounds of `bytes` without leading and trailing SP and HTAB (RFC 9110's OWS).
    static func trimmed(_ bytes: Slice<UnsafeBufferPointer<UInt8>>) -> Range<Int> {
        let kept = bytes.trimmingHTTPWhitespaceBytes()
        return kept.startIndex..<kept.endIndex
    }

    static func isTokenByte(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
            UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."),
            UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }

    /// Bytes as text (see the other `text`).
    static func text(_ bytes: ArraySlice<UInt8>) -> String {
        bytes.withUnsafeBufferPointer { text($0, 0..<$0.count) }
    }

    /// Bytes as text: UTF-8 when valid, otherwise ISO-8859-1 (each byte one character).
    static func text(_ buffer: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> String {
        let bytes = UnsafeBufferPointer(rebasing: buffer[range])
        // Nearly every head is ASCII, which is valid UTF-8: no validating pass of its own.
        if bytes.allSatisfy({ $0 < 0x80 }) { return String(decoding: bytes, as: UTF8.self) }
        if let s = String(validating: bytes, as: UTF8.self) { return s }
        var s = ""
        s.unicodeScalars.append(contentsOf: bytes.map { Unicode.Scalar($0) })
        return s
    }
}

/// Finds where a head ends in a buffer that grows, without rescanning what it has seen.
struct HeadScanner: Sendable {
    private var scanned = 0
    private var lineStart = 0

    mutating func reset() {
        scanned = 0
        lineStart = 0
    }

    /// The length of the head including its final empty line, or nil when it is not complete yet.
    mutating func scan(_ buffer: ByteBuffer, limit: Int) throws -> Int? {
        var i = scanned
        let count = buffer.readableCount
        while i < count {
            if buffer[i] == HTTPHeadParser.lf {
                var end = i
                if end > lineStart, buffer[end - 1] == HTTPHeadParser.cr { end -= 1 }
                if end == lineStart {
                    guard i + 1 <= limit else { throw HTTPWireError.headTooLarge(limit: limit) }
                    reset()
                    return i + 1
                }
                lineStart = i + 1
            }
            i += 1
            if i > limit { throw HTTPWireError.headTooLarge(limit: limit) }
        }
        scanned = i
        return nil
    }
}
