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
        let lines = try splitLines(Array(bytes), limits: limits)
        guard let first = lines.first else { throw HTTPWireError.invalidStartLine("") }
        let parts = first.split(separator: space, omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw HTTPWireError.invalidStartLine(text(first)) }
        let method = parts[0]
        let target = parts[1]
        guard !method.isEmpty, method.allSatisfy(isTokenByte) else { throw HTTPWireError.invalidStartLine(text(first)) }
        guard !target.isEmpty, target.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw HTTPWireError.invalidStartLine(text(first))
        }
        let version = try parseVersion(parts[2], line: first)
        let headers = try parseFields(lines.dropFirst(), limits: limits)
        return HTTPRequestHead(method: text(method), target: text(target), version: version, headers: headers)
    }

    /// Parses a response head. `bytes` holds the whole head, with or without the final empty line.
    public static func parseResponseHead<C: Collection>(_ bytes: C, limits: HTTPParserLimits = HTTPParserLimits())
        throws
        -> HTTPResponseHead where C.Element == UInt8
    {
        let lines = try splitLines(Array(bytes), limits: limits)
        guard let first = lines.first else { throw HTTPWireError.invalidStartLine("") }
        let parts = first.split(separator: space, maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2 else { throw HTTPWireError.invalidStartLine(text(first)) }
        let version = try parseVersion(parts[0], line: first)
        let code = parts[1]
        guard code.count == 3, code.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let status = Int(text(code)),
            status >= 100
        else { throw HTTPWireError.invalidStartLine(text(first)) }
        let reason = parts.count > 2 ? text(parts[2]) : ""
        guard !reason.unicodeScalars.contains(where: { $0.value < 0x20 && $0 != "\t" }) else {
            throw HTTPWireError.invalidStartLine(text(first))
        }
        let headers = try parseFields(lines.dropFirst(), limits: limits)
        return HTTPResponseHead(version: version, status: status, reason: reason, headers: headers)
    }

    /// Parses header (or trailer) field lines, without a start line.
    public static func parseFieldLines<C: Collection>(_ bytes: C, limits: HTTPParserLimits = HTTPParserLimits()) throws
        -> HTTPHeaders where C.Element == UInt8
    {
        try parseFields(try splitLines(Array(bytes), limits: limits)[...], limits: limits)
    }

    // MARK: - Pieces

    /// Splits at LF, dropping a CR before it; stops at the first empty line. A CR anywhere else is an error.
    static func splitLines(_ bytes: [UInt8], limits: HTTPParserLimits) throws -> [ArraySlice<UInt8>] {
        guard bytes.count <= limits.maxHeadSize else { throw HTTPWireError.headTooLarge(limit: limits.maxHeadSize) }
        var lines: [ArraySlice<UInt8>] = []
        var start = 0
        var i = 0
        while i <= bytes.count {
            if i == bytes.count || bytes[i] == lf {
                var end = i
                if end > start, bytes[end - 1] == cr { end -= 1 }
                let line = bytes[start..<end]
                if line.isEmpty { break }
                if line.contains(cr) { throw HTTPWireError.invalidHeader(text(line)) }
                lines.append(line)
                start = i + 1
            }
            i += 1
        }
        return lines
    }

    static func parseVersion(_ bytes: ArraySlice<UInt8>, line: ArraySlice<UInt8>) throws -> HTTPVersion {
        let v = bytes.startIndex
        guard bytes.count == 8, bytes.starts(with: "HTTP/".utf8), bytes[v + 6] == UInt8(ascii: "."),
            (0x30...0x39).contains(bytes[v + 5]), (0x30...0x39).contains(bytes[v + 7])
        else { throw HTTPWireError.invalidStartLine(text(line)) }
        let version = HTTPVersion(major: Int(bytes[v + 5] - 0x30), minor: Int(bytes[v + 7] - 0x30))
        guard version.major == 1 else { throw HTTPWireError.unsupportedVersion(version.description) }
        return version
    }

    static func parseFields(_ lines: ArraySlice<ArraySlice<UInt8>>, limits: HTTPParserLimits) throws -> HTTPHeaders {
        var fields: [(String, String)] = []
        for line in lines {
            if line.first == space || line.first == tab {
                // obs-fold: continues the previous field's value.
                guard let last = fields.popLast() else { throw HTTPWireError.invalidHeader(text(line)) }
                let more = text(line).trimmingHTTPWhitespace()
                fields.append((last.0, more.isEmpty ? last.1 : (last.1.isEmpty ? more : last.1 + " " + more)))
                continue
            }
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else {
                throw HTTPWireError.invalidHeader(text(line))
            }
            let name = line[line.startIndex..<colon]
            guard !name.isEmpty, name.allSatisfy(isTokenByte) else { throw HTTPWireError.invalidHeader(text(line)) }
            let value = line[(colon + 1)...]
            guard !value.contains(where: { $0 == 0 || $0 == 0x7F }) else {
                throw HTTPWireError.invalidHeader(text(line))
            }
            fields.append((text(name), text(value.trimmingHTTPWhitespaceBytes())))
            if fields.count > limits.maxHeaderCount { throw HTTPWireError.tooManyHeaders(limit: limits.maxHeaderCount) }
        }
        return HTTPHeaders(fields)
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

    /// Bytes as text: UTF-8 when valid, otherwise ISO-8859-1 (each byte one character).
    static func text(_ bytes: ArraySlice<UInt8>) -> String {
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
