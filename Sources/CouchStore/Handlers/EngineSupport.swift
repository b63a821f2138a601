import CouchQuery
import CouchGzip
import Foundation
import HTTPWire

/// An error CouchDB reports as `{"error": …, "reason": …}` with an HTTP status. The engine's code (and the
/// TestServer's) calls it `CouchError`, an internal alias; its own name never clashes with SwiftCouch's public
/// `CouchError` in code that imports both.
package struct EngineError: Error {
    package var status: Int
    package var error: String
    package var reason: String
    package var headers: [(String, String)] = []
    /// Extra members after `reason` (CouchDB's numeric `ref` on some 500s and 400s).
    package var extra: [(String, JSON)] = []

    package init(
        _ status: Int, _ error: String, _ reason: String, headers: [(String, String)] = [], extra: [(String, JSON)] = []
    ) {
        self.status = status
        self.error = error
        self.reason = reason
        self.headers = headers
        self.extra = extra
    }

    package static func badRequest(_ reason: String) -> EngineError { EngineError(400, "bad_request", reason) }
    package static func notFound(_ reason: String = "missing") -> EngineError { EngineError(404, "not_found", reason) }
    package static let conflict = EngineError(409, "conflict", "Document update conflict.")
    package static let dbNotFound = EngineError(404, "not_found", "Database does not exist.")
    package static let invalidJSON = EngineError(400, "bad_request", "invalid UTF-8 JSON")
    package static let notServerAdmin = EngineError(401, "unauthorized", "You are not a server admin.")
    package static let shuttingDown = EngineError(503, "service_unavailable", "The engine is closed.")
    package static let badContentType = EngineError(415, "bad_content_type", "Content-Type must be application/json")
    package static func methodNotAllowed(_ allowed: String) -> EngineError {
        EngineError(405, "method_not_allowed", "Only \(allowed) allowed", headers: [("Allow", allowed)])
    }
    package static func queryParse(_ reason: String) -> EngineError { EngineError(400, "query_parse_error", reason) }
    /// A random-looking `ref` number, as CouchDB adds to some errors.
    package static func ref() -> (String, JSON) { ("ref", .int(Int64.random(in: 100_000_000...2_000_000_000))) }
}

/// The engine's error, by the name its code uses.
typealias CouchError = EngineError

/// Helpers to build responses the way CouchDB sends them.
package enum Reply {
    package static func json(
        _ status: Int, _ value: JSON, headers: [(String, String)] = [], cache: String = "must-revalidate"
    )
        -> ServerResponse
    {
        var h = HTTPHeaders()
        h.add("Content-Type", "application/json")
        for (name, value) in headers { h.add(name, value) }
        h.add("Cache-Control", cache)
        return ServerResponse(status: status, headers: h, body: .data(Data((value.serialized + "\n").utf8)))
    }

    /// A JSON body already serialised (streamed row formats), with `\n` appended by the caller.
    package static func text(
        _ status: Int, _ text: String, headers: [(String, String)] = [], cache: String = "must-revalidate"
    )
        -> ServerResponse
    {
        var h = HTTPHeaders()
        h.add("Content-Type", "application/json")
        for (name, value) in headers { h.add(name, value) }
        h.add("Cache-Control", cache)
        return ServerResponse(status: status, headers: h, body: .data(Data(text.utf8)))
    }

    package static func error(_ e: EngineError) -> ServerResponse {
        var pairs: [(String, JSON)] = [("error", .string(e.error)), ("reason", .string(e.reason))]
        pairs.append(contentsOf: e.extra)
        return json(e.status, .object(pairs), headers: e.headers)
    }

    package static let ok: JSON = ["ok": true]
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

    package var contentTypeIsJSON: Bool {
        guard let ct = headers["Content-Type"] else { return false }
        return ct.lowercased().split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces) }
            == "application/json"
    }

    /// The body parsed as JSON, or CouchDB's 400 when it is not JSON. A `Content-Encoding: gzip` body is
    /// decompressed first (see `decodedBody()`).
    package func jsonBody() throws(EngineError) -> JSON {
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
    package func jsonObjectBody(_ notObjectReason: String = "Request body must be a JSON object") throws(EngineError)
        -> JSON
    {
        let value = try jsonBody()
        guard case .object = value else { throw CouchError.badRequest(notObjectReason) }
        return value
    }

    /// The absolute base URL of this server as the client sees it, from the Host header.
    package var baseURL: String {
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
    package var members: [(String, JSON)] { objectValue ?? [] }

    /// An object built from pairs.
    static func obj(_ pairs: [(String, JSON)]) -> JSON { .object(pairs) }

    /// True for an object.
    package var isObject: Bool {
        if case .object = self { return true }
        return false
    }
}

/// Compares document ids by raw Unicode code points, as `_all_docs` orders them.
func idLess(_ a: String, _ b: String) -> Bool {
    Collation.compareRaw(a, b) < 0
}
