import Foundation

/// The status and headers of a response, as an operation's ``CouchOperation/processResponse(data:httpInfo:)``
/// sees them.
public struct HTTPInfo: Sendable {
    /// The HTTP status code.
    public var statusCode: Int
    /// The response headers (case-insensitive look-up).
    public var headers: HTTPFields

    public init(statusCode: Int, headers: HTTPFields) {
        self.statusCode = statusCode
        self.headers = headers
    }

    /// Whether the status is 2xx.
    public var isSuccess: Bool { (200..<300).contains(statusCode) }
}

/// What a successful operation delivers: its decoded response, with the HTTP status and headers.
public struct CouchResponse<Value: Sendable>: Sendable {
    /// The decoded response.
    public var value: Value
    /// The HTTP status code.
    public var statusCode: Int
    /// The response headers (`ETag`, `Location`, `X-Couch-Update-NewRev`, ...).
    public var headers: HTTPFields

    public init(value: Value, statusCode: Int, headers: HTTPFields) {
        self.value = value
        self.statusCode = statusCode
        self.headers = headers
    }
}

/// One CouchDB API call: what to check, what to send and how to read the answer.
///
/// The pipeline (``CouchOperationTask``) drives every operation in this fixed order:
/// 1. ``validate()`` — inputs only, no I/O. A failure reaches the completion handler; nothing is sent.
/// 2. ``serialise()`` — build the body once. May throw; then nothing is sent.
/// 3. ``endpoint``, ``parameters``, ``method``, ``data``, ``contentType``, ``headers`` — read
///    once each, in that order, only after 1 and 2 succeeded.
/// 4. The request goes through the ``InterceptableSession`` (authentication, retries).
/// 5. ``processResponse(data:httpInfo:)`` — turns the response (any status) into the typed result
///    or throws a ``CouchError``.
/// 6. The completion handler — exactly once, on the configured callback queue.
///
/// Operations are values: write one as a `struct` conforming to ``JSONOperation`` or
/// ``DataOperation`` and fill in the properties; everything else has a default.
public protocol CouchOperation: Sendable {
    /// What a successful call delivers.
    associatedtype Response: Sendable

    /// Checks the inputs. Throw ``CouchError/validation(_:)`` with a message that says what is wrong.
    func validate() throws(CouchError)

    /// Builds the request body, once, before ``CouchOperation/data`` is read. Defaults to doing nothing.
    mutating func serialise() throws

    /// The path, as unencoded segments (percent-encoded when the URL is built).
    var endpoint: CouchPath { get }

    /// The query parameters, unencoded (each name and value is percent-encoded when the URL is
    /// built; JSON-valued parameters are JSON text). Defaults to none.
    var parameters: [URLQueryItem] { get }

    /// The HTTP method. Defaults to `GET`.
    var method: HTTPMethod { get }

    /// The request body. Defaults to nil.
    var data: Data? { get }

    /// A body read from a file or an `InputStream` instead of memory, read only when `data` is
    /// nil (large attachments). Defaults to nil.
    var streamedBody: StreamedBody? { get }

    /// The body's content type. Defaults to `application/json` when there is a body.
    var contentType: String? { get }

    /// Extra request headers (`If-Match`, `Destination`, `Accept`, ...). Defaults to none.
    var headers: HTTPFields { get }

    /// Whether sending the request twice is harmless, so 5xx and dropped connections may be
    /// retried. Defaults to nil: the pipeline decides from what it already read — true for `GET`,
    /// `HEAD` and for writes that carry a revision (a `rev` parameter or an `If-Match` header),
    /// false otherwise (never for a `POST` that could create a second document). Read-only `POST`s
    /// such as `_all_docs` with keys or `_find` return true.
    var isIdempotent: Bool? { get }

    /// Reads the response, whatever its status: returns the result or throws a ``CouchError``.
    func processResponse(data: Data, httpInfo: HTTPInfo) throws -> Response
}

extension CouchOperation {
    public func validate() throws(CouchError) {}
    public mutating func serialise() throws {}
    public var parameters: [URLQueryItem] { [] }
    public var method: HTTPMethod { .get }
    public var data: Data? { nil }
    public var streamedBody: StreamedBody? { nil }
    public var contentType: String? { data == nil ? nil : "application/json" }
    public var headers: HTTPFields { HTTPFields() }

    public var isIdempotent: Bool? { nil }

    /// Throws the CouchDB error of a non-2xx response; call it first in a custom `processResponse`.
    public func throwIfError(data: Data, httpInfo: HTTPInfo) throws(CouchError) {
        guard httpInfo.isSuccess else {
            throw CouchError.http(status: httpInfo.statusCode, body: data, method: nil, path: nil)
        }
    }
}

/// An operation that sends another operation's request, changed where it says so: paging
/// (`KeyPageOperation`, `BookmarkPageOperation`), a continuous feed, a generic request with a
/// typed answer. The request's parts come from ``wrapped`` unless the wrapper implements them,
/// so wrappers do not forward each property by hand.
public protocol WrappingOperation: CouchOperation {
    /// The operation whose request this one sends.
    associatedtype Wrapped: CouchOperation
    /// The wrapped operation as it is to be sent (after any changes the wrapper made in
    /// `serialise`).
    var wrapped: Wrapped { get }
}

extension WrappingOperation {
    public var endpoint: CouchPath { wrapped.endpoint }
    public var parameters: [URLQueryItem] { wrapped.parameters }
    public var method: HTTPMethod { wrapped.method }
    public var data: Data? { wrapped.data }
    public var streamedBody: StreamedBody? { wrapped.streamedBody }
    public var contentType: String? { wrapped.contentType }
    public var headers: HTTPFields { wrapped.headers }
}

/// An operation whose repetition is harmless whatever its method: reads sent as `POST`
/// (`_find`, `_all_docs` with keys, view queries), deletes of whole resources, replication
/// commands. The session may retry it after a 5xx or a dropped connection (when the retry policy
/// allows). Conforming is the whole job: ``CouchOperation/isIdempotent`` is `true`.
public protocol IdempotentOperation: CouchOperation {}

extension IdempotentOperation {
    public var isIdempotent: Bool? { true }
}

/// Whether a request is safe to send twice, judged from its method, parameters and headers.
enum RequestSafety {
    static func isSafeToRepeat(method: HTTPMethod, parameters: [URLQueryItem], headers: HTTPFields) -> Bool {
        if method == .get || method == .head { return true }
        if method == .post { return false }
        return parameters.contains { $0.name == "rev" } || headers["If-Match"] != nil
    }
}

/// An operation whose response is JSON, decoded into a `Decodable` type.
///
/// For free-form JSON use ``JSONValue`` as the `Response` (for example
/// `GetDocumentOperation<JSONValue>`).
public protocol JSONOperation: CouchOperation where Response: Decodable {
    /// The decoder used for the response. Defaults to a `JSONDecoder` reading dates as the
    /// client's ``Configuration/dateCoding`` says (ISO-8601 text by default).
    var decoder: JSONDecoder { get }
}

extension JSONOperation {
    public var decoder: JSONDecoder { JSONDecoder.couch }

    /// Throws the CouchDB error of a non-2xx status, otherwise decodes `Response`.
    public func processResponse(data: Data, httpInfo: HTTPInfo) throws -> Response {
        try throwIfError(data: data, httpInfo: httpInfo)
        let value = try decodeResponse(data, httpInfo: httpInfo)
        // Asked of the type, not the value: casting the value to the existential would box it.
        if let recordingType = Response.self as? any HTTPStatusRecording.Type {
            return Self.recording(httpInfo.statusCode, in: value, as: recordingType)
        }
        return value
    }

    /// `value` (whose type is `R`) with `status` recorded.
    private static func recording<R: HTTPStatusRecording>(_ status: Int, in value: Response, as _: R.Type) -> Response {
        guard var recording = value as? R else { return value }
        recording.record(status: status)
        return recording as? Response ?? value
    }

    /// Decodes `data` as `Response`, turning a failure into a ``CouchError`` of kind `.decoding`
    /// that keeps the status and the body.
    public func decodeResponse(_ data: Data, httpInfo: HTTPInfo) throws(CouchError) -> Response {
        do {
            let decoder = self.decoder
            guard JSONDecoder.isCouchDefault(decoder) else { return try decoder.decode(Response.self, from: data) }
            // The default decoder: FastJSON decodes the same values (Foundation's value or error
            // for anything it does not cover), several times faster.
            return try FastJSON.decode(Response.self, from: data, dateCoding: DateCoding.current)
        } catch {
            var couchError = CouchError.http(
                status: httpInfo.statusCode, body: data, method: nil, path: nil, kind: .decoding)
            couchError.message = "The response (HTTP \(httpInfo.statusCode)) is not a valid \(Response.self): \(error)"
            if couchError.bodyText == nil, couchError.error == nil {
                couchError.bodyText = String(decoding: data.prefix(2_000), as: UTF8.self)
            }
            couchError.underlying = error
            throw couchError
        }
    }
}

/// Raw response bytes and their content type, as a ``DataOperation`` delivers them.
public struct DataResponse: Sendable, Equatable {
    /// The body, exactly as received.
    public var data: Data
    /// The `Content-Type` of the body, if the server sent one.
    public var contentType: String?

    public init(data: Data, contentType: String?) {
        self.data = data
        self.contentType = contentType
    }
}

/// An operation whose response is raw bytes (attachments, show/list handler output).
public protocol DataOperation: CouchOperation where Response == DataResponse {}

extension DataOperation {
    /// Throws the CouchDB error of a non-2xx status, otherwise returns the bytes and content type.
    public func processResponse(data: Data, httpInfo: HTTPInfo) throws -> DataResponse {
        try throwIfError(data: data, httpInfo: httpInfo)
        return DataResponse(data: data, contentType: httpInfo.headers["Content-Type"])
    }
}

/// The body of many write responses: `{"ok":true}`.
public struct OKResponse: Codable, Sendable, Equatable {
    public var ok: Bool
    public init(ok: Bool) { self.ok = ok }
}

extension URLQueryItem {
    /// A query item whose value is the JSON text of `value` (`key="a"`, `startkey=["a",1]`).
    public static func json<T: Encodable>(_ name: String, _ value: T) throws -> URLQueryItem {
        let data = try JSONBody.encode(value)
        return URLQueryItem(name: name, value: String(decoding: data, as: UTF8.self))
    }
}
