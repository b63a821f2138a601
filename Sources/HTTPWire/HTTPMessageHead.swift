/// An HTTP protocol version (`HTTP/1.1`).
public struct HTTPVersion: Sendable, Hashable, CustomStringConvertible {
    public var major: Int
    public var minor: Int

    public init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }

    /// `HTTP/1.0`.
    public static let http1_0 = HTTPVersion(major: 1, minor: 0)
    /// `HTTP/1.1`.
    public static let http1_1 = HTTPVersion(major: 1, minor: 1)

    /// The version as written on the wire: `HTTP/1.1`.
    public var description: String { "HTTP/\(major).\(minor)" }
}

/// The head of an HTTP request: request line and header fields.
public struct HTTPRequestHead: Sendable, Equatable {
    /// The method as sent (`GET`, `COPY`, ...). Methods are case-sensitive.
    public var method: String
    /// The request target exactly as sent (`/db/doc?rev=1-abc`), still percent-encoded.
    public var target: String
    public var version: HTTPVersion
    public var headers: HTTPHeaders

    public init(method: String, target: String, version: HTTPVersion = .http1_1, headers: HTTPHeaders = HTTPHeaders()) {
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers
    }

    /// The path part of the target (before `?`). An absolute-form target (`http://host/p`) gives `/p`.
    public var path: String {
        let t = originFormTarget
        if let q = t.firstIndex(of: "?") { return String(t[..<q]) }
        return t
    }

    /// The query part of the target without the `?`, or nil when there is none.
    public var query: String? {
        let t = originFormTarget
        guard let q = t.firstIndex(of: "?") else { return nil }
        return String(t[t.index(after: q)...])
    }

    /// The target with any `scheme://authority` prefix removed (absolute-form → origin-form), and
    /// any fragment dropped.
    public var originFormTarget: String {
        var t = Substring(target)
        if let hash = t.firstIndex(of: "#") { t = t[..<hash] }
        if let schemeEnd = t.range(of: "://"), !t.hasPrefix("/") {
            let afterAuthority = t[schemeEnd.upperBound...]
            if let slash = afterAuthority.firstIndex(where: { $0 == "/" || $0 == "?" }) {
                let rest = afterAuthority[slash...]
                return rest.hasPrefix("?") ? "/" + rest : String(rest)
            }
            return "/"
        }
        return String(t)
    }

    /// Whether the connection stays open after this message: HTTP/1.1 unless `Connection: close`,
    /// HTTP/1.0 only with `Connection: keep-alive`.
    public var keepAlive: Bool { HTTPHeaders.keepAlive(version: version, headers: headers) }
}

/// The head of an HTTP response: status line and header fields.
public struct HTTPResponseHead: Sendable, Equatable {
    public var version: HTTPVersion
    public var status: Int
    /// The reason phrase as sent (may be empty).
    public var reason: String
    public var headers: HTTPHeaders

    public init(
        version: HTTPVersion = .http1_1, status: Int, reason: String? = nil, headers: HTTPHeaders = HTTPHeaders()
    ) {
        self.version = version
        self.status = status
        self.reason = reason ?? HTTPResponseHead.standardReason(for: status)
        self.headers = headers
    }

    /// Whether the connection stays open after this message (see `HTTPRequestHead.keepAlive`).
    public var keepAlive: Bool { HTTPHeaders.keepAlive(version: version, headers: headers) }

    /// Whether this is an interim (1xx) response that is followed by the final one.
    public var isInformational: Bool { (100..<200).contains(status) }

    /// The reason phrase Apache CouchDB (through Erlang's mochiweb) sends for `status`, e.g.
    /// `Object Not Found` for 404 and `Moved Temporarily` for 302. Unknown codes give a generic phrase.
    public static func standardReason(for status: Int) -> String {
        switch status {
        case 100: return "Continue"
        case 101: return "Switching Protocols"
        case 200: return "OK"
        case 201: return "Created"
        case 202: return "Accepted"
        case 203: return "Non-Authoritative Information"
        case 204: return "No Content"
        case 205: return "Reset Content"
        case 206: return "Partial Content"
        case 300: return "Multiple Choices"
        case 301: return "Moved Permanently"
        case 302: return "Moved Temporarily"
        case 303: return "See Other"
        case 304: return "Not Modified"
        case 307: return "Temporary Redirect"
        case 308: return "Permanent Redirect"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 402: return "Payment Required"
        case 403: return "Forbidden"
        case 404: return "Object Not Found"
        case 405: return "Method Not Allowed"
        case 406: return "Not Acceptable"
        case 407: return "Proxy Authentication Required"
        case 408: return "Request Time-out"
        case 409: return "Conflict"
        case 410: return "Gone"
        case 411: return "Length Required"
        case 412: return "Precondition Failed"
        case 413: return "Request Entity Too Large"
        case 414: return "Request-URI Too Large"
        case 415: return "Unsupported Media Type"
        case 416: return "Requested Range Not Satisfiable"
        case 417: return "Expectation Failed"
        case 429: return "Too Many Requests"
        case 431: return "Request Header Fields Too Large"
        case 500: return "Internal Server Error"
        case 501: return "Not Implemented"
        case 502: return "Bad Gateway"
        case 503: return "Service Unavailable"
        case 504: return "Gateway Time-out"
        case 505: return "HTTP Version not supported"
        default:
            switch status {
            case 100..<200: return "Informational"
            case 200..<300: return "Success"
            case 300..<400: return "Redirection"
            case 400..<500: return "Client Error"
            default: return "Server Error"
            }
        }
    }
}

/// Why bytes could not be read as an HTTP/1.x message.
public enum HTTPWireError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The head (start line and header fields) is longer than the limit.
    case headTooLarge(limit: Int)
    /// More header (or trailer) fields than the limit.
    case tooManyHeaders(limit: Int)
    /// The request line or status line is not well-formed.
    case invalidStartLine(String)
    /// An HTTP version other than 1.x.
    case unsupportedVersion(String)
    /// A header field line is not well-formed.
    case invalidHeader(String)
    /// `Content-Length` is not a non-negative decimal number, or its copies disagree.
    case invalidContentLength(String)
    /// `Transfer-Encoding` and `Content-Length` together in a request.
    case conflictingFraming
    /// A transfer coding other than `chunked` (or `chunked` not last in a request).
    case unsupportedTransferEncoding(String)
    /// The chunked body is not well-formed.
    case invalidChunk(String)
    /// The body is longer than the limit.
    case bodyTooLarge(limit: Int)
    /// The peer closed the connection in the middle of a message.
    case unexpectedEndOfStream

    public var description: String {
        switch self {
        case .headTooLarge(let limit): return "message head larger than \(limit) bytes"
        case .tooManyHeaders(let limit): return "more than \(limit) header fields"
        case .invalidStartLine(let line): return "malformed start line: \(line)"
        case .unsupportedVersion(let v): return "unsupported HTTP version: \(v)"
        case .invalidHeader(let line): return "malformed header field: \(line)"
        case .invalidContentLength(let v): return "invalid Content-Length: \(v)"
        case .conflictingFraming: return "both Transfer-Encoding and Content-Length"
        case .unsupportedTransferEncoding(let v): return "unsupported Transfer-Encoding: \(v)"
        case .invalidChunk(let why): return "malformed chunked body: \(why)"
        case .bodyTooLarge(let limit): return "body larger than \(limit) bytes"
        case .unexpectedEndOfStream: return "connection closed in the middle of a message"
        }
    }
}

/// Bounds the parser enforces, so that a peer cannot make it buffer without end.
public struct HTTPParserLimits: Sendable, Equatable {
    /// Longest head (start line, header fields and the blank line) in bytes. Defaults to 64 KiB.
    public var maxHeadSize: Int = 64 * 1024
    /// Most header fields in a head, and most trailer fields after a chunked body. Defaults to 128.
    public var maxHeaderCount: Int = 128
    /// Longest body (declared by `Content-Length` or added up over chunks). Defaults to unlimited.
    public var maxBodySize: Int = Int.max
    /// Longest chunk-size line (size and extensions). Defaults to 4 KiB.
    public var maxChunkLineSize: Int = 4096

    public init(
        maxHeadSize: Int = 64 * 1024, maxHeaderCount: Int = 128, maxBodySize: Int = Int.max,
        maxChunkLineSize: Int = 4096
    ) {
        self.maxHeadSize = maxHeadSize
        self.maxHeaderCount = maxHeaderCount
        self.maxBodySize = maxBodySize
        self.maxChunkLineSize = maxChunkLineSize
    }
}

extension HTTPHeaders {
    /// The comma-separated tokens of every `Connection` field, lower-cased.
    public var connectionTokens: [String] {
        values("Connection").flatMap { $0.split(separator: ",") }
            .map { $0.trimmingHTTPWhitespace().lowercased() }
            .filter { !$0.isEmpty }
    }

    static func keepAlive(version: HTTPVersion, headers: HTTPHeaders) -> Bool {
        let tokens = headers.connectionTokens
        if tokens.contains("close") { return false }
        if version.major > 1 || (version.major == 1 && version.minor >= 1) { return true }
        return tokens.contains("keep-alive")
    }
}

extension StringProtocol {
    /// The string without leading and trailing spaces and tabs (SP and HTAB octets, RFC 9110's
    /// OWS; read as bytes, not as characters).
    func trimmingHTTPWhitespace() -> String {
        String(decoding: Substring(self).utf8.trimmingHTTPWhitespaceBytes(), as: UTF8.self)
    }
}

extension BidirectionalCollection where Element == UInt8 {
    /// The bytes without leading and trailing SP and HTAB octets (RFC 9110's OWS).
    func trimmingHTTPWhitespaceBytes() -> SubSequence {
        var start = startIndex
        var end = endIndex
        while start < end, self[start] == 0x20 || self[start] == 0x09 { start = index(after: start) }
        while start < end {
            let last = index(before: end)
            guard self[last] == 0x20 || self[last] == 0x09 else { break }
            end = last
        }
        return self[start..<end]
    }
}
