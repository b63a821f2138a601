import CouchQuery
import CouchGzip
import Foundation
import HTTPWire

/// An error CouchDB reports as `{"error": …, "reason": …}` with an HTTP status.
struct CouchError: Error {
    var status: Int
    var error: String
    var reason: String
    var headers: [(String, String)] = []
    /// Extra members after `reason` (CouchDB's numeric `ref` on some 500s and 400s).
    var extra: [(String, JSON)] = []

    init(
        _ status: Int, _ error: String, _ reason: String, headers: [(String, String)] = [], extra: [(String, JSON)] = []
    ) {
        self.status = status
        self.error = error
        self.reason = reason
        self.headers = headers
        self.extra = extra
    }

    static func badRequest(_ reason: String) -> CouchError { CouchError(400, "bad_request", reason) }
    static func notFound(_ reason: String = "missing") -> CouchError { CouchError(404, "not_found", reason) }
    static let conflict = CouchError(409, "conflict", "Document update conflict.")
    static let dbNotFound = CouchError(404, "not_found", "Database does not exist.")
    static let invalidJSON = CouchError(400, "bad_request", "invalid UTF-8 JSON")
    static let notServerAdmin = CouchError(401, "unauthorized", "You are not a server admin.")
    static let shuttingDown = CouchError(503, "service_unavailable", "The TestServer engine is closed.")
    static let badContentType = CouchError(415, "bad_content_type", "Content-Type must be application/json")
    static func methodNotAllowed(_ allowed: String) -> CouchError {
        CouchError(405, "method_not_allowed", "Only \(allowed) allowed", headers: [("Allow", allowed)])
    }
    static func queryParse(_ reason: String) -> CouchError { CouchError(400, "query_parse_error", reason) }
    /// A random-looking `ref` number, as CouchDB adds to some errors.
    static func ref() -> (String, JSON) { ("ref", .int(Int64.random(in: 100_000_000...2_000_000_000))) }
}

/// Helpers to build responses the way CouchDB sends them.
enum Reply {
    static func json(_ status: Int, _ value: JSON, headers: [(String, String)] = [], cache: String = "must-revalidate")
        -> ServerResponse
    {
        var h = HTTPHeaders()
        h.add("Content-Type", "application/json")
        for (name, value) in headers { h.add(name, value) }
        h.add("Cache-Control", cache)
        return ServerResponse(status: status, headers: h, body: .data(Data((value.serialized + "\n").utf8)))
    }

    /// A JSON body already serialised (streamed row formats), with `\n` appended by the caller.
    static func text(_ status: Int, _ text: String, headers: [(String, String)] = [], cache: String = "must-revalidate")
        -> ServerResponse
    {
        var h = HTTPHeaders()
        h.add("Content-Type", "application/json")
        for (name, value) in headers { h.add(name, value) }
        h.add("Cache-Control", cache)
        return ServerResponse(status: status, headers: h, body: .data(Data(text.utf8)))
    }

    static func error(_ e: CouchError) -> ServerResponse {
        var pairs: [(String, JSON)] = [("error", .string(e.error)), ("reason", .string(e.reason))]
        pairs.append(contentsOf: e.extra)
        return json(e.status, .object(pairs), headers: e.headers)
    }

    static let ok: JSON = ["ok": true]
}

// MARK: - Request helpers

/// CouchDB's boolean parameters of views, `_all_docs`, `_design_docs`, `_local_docs`, `_all_dbs` and
/// `_dbs_info` (`couch_mrview_http:parse_boolean`, which `parse_params` applies to the query string
/// and to POST bodies): `true` and `false` in any case (`group=True`, `descending=TRUE`), anything
/// else 400 `query_parse_error` "Invalid boolean parameter: …" with the value as Erlang's `~p` prints
/// it. `_changes` and document reads compare with the literal `true` instead (`chttpd_db`'s
/// `parse_changes_query` and `parse_doc_query`), which is `ServerRequest.flag`.
enum BooleanParameter {
    static func parse(_ value: String) throws(CouchError) -> Bool {
        switch value.lowercased() {
        case "true": return true
        case "false": return false
        default: throw CouchError.queryParse("Invalid boolean parameter: " + erlangString(value))
        }
    }

    /// A member of a POST body: a JSON boolean, or a string read as in a query string; nil for
    /// other values (left at their default).
    static func parse(_ value: JSON) throws(CouchError) -> Bool? {
        switch value {
        case .bool(let b): return b
        case .string(let s): return try parse(s)
        default: return nil
        }
    }

    /// `io_lib:format("~p", [List])` of the characters (bytes) of a query value: `"text"` when every
    /// byte is printable Latin-1, `[]` when empty, else the list of bytes.
    static func erlangString(_ value: String) -> String {
        let bytes = Array(value.utf8)
        if bytes.isEmpty { return "[]" }
        let escapes: [UInt8: String] = [
            0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0B: "\\v", 0x0C: "\\f", 0x0D: "\\r", 0x1B: "\\e",
        ]
        let printable = bytes.allSatisfy { (0x20...0x7E).contains($0) || $0 >= 0xA0 || escapes[$0] != nil }
        guard printable else { return "[" + bytes.map { String($0) }.joined(separator: ",") + "]" }
        var text = Data("\"".utf8)
        for b in bytes {
            if let escaped = escapes[b] {
                text.append(contentsOf: escaped.utf8)
            } else {
                if b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") { text.append(UInt8(ascii: "\\")) }
                text.append(b)
            }
        }
        text.append(UInt8(ascii: "\""))
        return String(decoding: text, as: UTF8.self)
    }
}

extension ServerRequest {
    /// A boolean parameter of a view-like endpoint, read with `BooleanParameter.parse`; nil when absent.
    func booleanQuery(_ name: String) throws(CouchError) -> Bool? {
        guard let v = queryValue(name) else { return nil }
        return try BooleanParameter.parse(v)
    }

    /// A boolean query parameter of `_changes` and document reads: `true` only for the literal `true`
    /// (`chttpd_db` ignores other values there; views use `booleanQuery`).
    func flag(_ name: String) -> Bool {
        guard let v = queryValue(name) else { return false }
        return v == "true"
    }

    /// A query parameter holding JSON; throws CouchDB's "invalid UTF-8 JSON" when it does not parse.
    func jsonQuery(_ name: String) throws(CouchError) -> JSON? {
        guard let v = queryValue(name) else { return nil }
        do {
            return try JSON.parse(v)
        } catch {
            throw CouchError.invalidJSON
        }
    }

    /// A non-negative integer query parameter.
    func intQuery(_ name: String) throws(CouchError) -> Int? {
        guard let v = queryValue(name) else { return nil }
        guard let i = Int(v) else {
            throw CouchError.queryParse("Invalid value for integer: \"\(v)\"")
        }
        return i
    }

    var contentTypeIsJSON: Bool {
        guard let ct = headers["Content-Type"] else { return false }
        return ct.lowercased().split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces) }
            == "application/json"
    }

    /// The body parsed as JSON, or CouchDB's 400 when it is not JSON. A `Content-Encoding: gzip` body is
    /// decompressed first (see `decodedBody()`).
    func jsonBody() throws(CouchError) -> JSON {
        let data = try decodedBody()
        do {
            return try JSON.parse(data)
        } catch {
            throw CouchError.invalidJSON
        }
    }

    /// The body as CouchDB's `maybe_decompress` sees it: gunzipped for `Content-Encoding: gzip` (400
    /// `bad_request` when it is not proper gzip, 413 `too_large` as soon as it inflates past the server's body
    /// limit), as it is for `identity` or no header, and 415 `bad_content_type` for any other encoding.
    func decodedBody() throws(CouchError) -> Data {
        let encoding = (headers["Content-Encoding"] ?? "identity").trimmingCharacters(in: .whitespaces).lowercased()
        switch encoding {
        case "identity", "":
            return body
        case "gzip":
            do {
                return try Gzip.decompress(body, maximumSize: maximumBodySize)
            } catch {
                if case .outputTooLarge = error {
                    throw CouchError(413, "too_large", "the request entity is too large")
                }
                throw CouchError.badRequest("Request body is not properly gzipped.")
            }
        default:
            throw CouchError(415, "bad_content_type", "\(encoding) is not a supported content encoding.")
        }
    }

    /// The body parsed as a JSON object, with CouchDB's errors.
    func jsonObjectBody(_ notObjectReason: String = "Request body must be a JSON object") throws(CouchError) -> JSON {
        let value = try jsonBody()
        guard case .object = value else { throw CouchError.badRequest(notObjectReason) }
        return value
    }

    /// The absolute base URL of this server as the client sees it, from the Host header.
    var baseURL: String {
        let host = headers["Host"] ?? "127.0.0.1:5984"
        return "http://\(host)"
    }
}

/// Percent-encodes a path segment the way CouchDB builds `Location` headers (`/` becomes `%2F`).
func encodePathSegment(_ s: String) -> String {
    var allowed = CharacterSet.alphanumerics.intersection(
        CharacterSet(charactersIn: Unicode.Scalar(0)...Unicode.Scalar(127)))
    allowed.insert(charactersIn: "-._~:@!$&'()*,;=")
    return s.addingPercentEncoding(withAllowedCharacters: allowed) ?? s
}

/// Encodes a document id for a `Location` header: `_design/x` and `_local/x` keep their prefix encoded as CouchDB does.
func encodeDocIDForLocation(_ id: String) -> String {
    encodePathSegment(id)
}

// MARK: - JSON helpers

extension JSON {
    /// The members of an object, or an empty list.
    var members: [(String, JSON)] { objectValue ?? [] }

    /// An object built from pairs.
    static func obj(_ pairs: [(String, JSON)]) -> JSON { .object(pairs) }

    /// True for an object.
    var isObject: Bool {
        if case .object = self { return true }
        return false
    }
}

/// The wall clock in seconds (a seam for tests of cookie expiry).
final class Clock: @unchecked Sendable {
    // Safe: `offset` is only read and written under `lock`.
    private let lock = NSLock()
    private var offset: TimeInterval = 0

    var now: TimeInterval {
        lock.lock()
        defer { lock.unlock() }
        return Date().timeIntervalSince1970 + offset
    }

    func advance(by seconds: TimeInterval) {
        lock.lock()
        offset += seconds
        lock.unlock()
    }
}

/// Formats dates as CouchDB's cookies do: `Sun, 22-Nov-2026 07:15:00 GMT`.
func cookieDate(_ time: TimeInterval) -> String {
    let f = DateFormatter()
    f.locale = Locale(identifier: "en_US_POSIX")
    f.timeZone = TimeZone(identifier: "GMT")
    f.dateFormat = "EEE, dd-MMM-yyyy HH:mm:ss 'GMT'"
    return f.string(from: Date(timeIntervalSince1970: time))
}

/// Formats dates as HTTP does: `Sun, 22 Nov 2026 07:05:00 GMT`.
func httpDate(_ time: TimeInterval) -> String {
    let f = DateFormatter()
    f.locale = Locale(identifier: "en_US_POSIX")
    f.timeZone = TimeZone(identifier: "GMT")
    f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
    return f.string(from: Date(timeIntervalSince1970: time))
}

/// Compares document ids by raw Unicode code points, as `_all_docs` orders them.
func idLess(_ a: String, _ b: String) -> Bool {
    Collation.compareRaw(a, b) < 0
}
