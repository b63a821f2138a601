import Foundation

/// Any CouchDB (or Cloudant, or proxy) request, for endpoints SwiftCouch has no operation for
/// yet: method, path segments, query, headers and body as you give them; the response as raw
/// bytes (``DataResponse``). ``GenericJSONOperation`` decodes the response instead.
///
/// It runs through the same pipeline (authentication, retries, errors) as every operation:
/// ```swift
/// let op = GenericOperation(method: .post, path: CouchPath("db", "_design", "app", "_nouveau", "idx"),
///                           jsonBody: ["q": "title:blue"])
/// let bytes = try await client.execute(op).value.data
/// ```
/// Paths are segments, percent-encoded one by one (a `/` inside a segment becomes `%2F`).
public struct GenericOperation: DataOperation {
    /// The HTTP method.
    public var method: HTTPMethod
    /// The path, as unencoded segments.
    public var path: CouchPath
    /// The query parameters, unencoded. Defaults to none.
    public var query: [URLQueryItem]
    /// Extra request headers. Defaults to none (the pipeline adds `Accept: application/json`
    /// unless you set `Accept`).
    public var headers: HTTPFields
    /// The body. Defaults to nil.
    public var body: Data?
    /// The body's content type. Defaults to `application/json` when there is a body.
    public var contentType: String?
    /// Whether the request is safe to repeat after a dropped connection or a 5xx; nil lets the
    /// pipeline judge from the method (`GET`/`HEAD`) and a `rev`/`If-Match`. Defaults to nil.
    public var isIdempotent: Bool?

    public init(
        method: HTTPMethod = .get, path: CouchPath, query: [URLQueryItem] = [], headers: HTTPFields = HTTPFields(),
        body: Data? = nil, contentType: String? = nil, isIdempotent: Bool? = nil
    ) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.contentType = contentType ?? (body == nil ? nil : "application/json")
        self.isIdempotent = isIdempotent
    }

    /// A request whose body is the JSON encoding of `jsonBody`.
    public init<Body: Encodable>(
        method: HTTPMethod = .post, path: CouchPath, query: [URLQueryItem] = [], headers: HTTPFields = HTTPFields(),
        jsonBody: Body, isIdempotent: Bool? = nil
    ) throws {
        self.init(
            method: method, path: path, query: query, headers: headers, body: try JSONBody.encode(jsonBody),
            contentType: "application/json", isIdempotent: isIdempotent)
    }

    public func validate() throws(CouchError) {
        guard !method.rawValue.isEmpty, method.rawValue.allSatisfy({ $0.isLetter }) else {
            throw CouchError.validation("HTTP method '\(method)' is not a token of letters.")
        }
        if path.segments.contains(where: \.isEmpty) {
            throw CouchError.validation("Path \(path.segments) has an empty segment.")
        }
    }

    public var endpoint: CouchPath { path }
    public var parameters: [URLQueryItem] { query }
    public var data: Data? { body }
}

/// ``GenericOperation`` whose response is decoded as `Response` (``JSONValue`` for any JSON).
public struct GenericJSONOperation<Response: Decodable & Sendable>: JSONOperation, WrappingOperation {
    /// The request.
    public var request: GenericOperation

    public init(_ request: GenericOperation) { self.request = request }

    /// The request, sent as it is.
    public var wrapped: GenericOperation { request }
    public func validate() throws(CouchError) { try request.validate() }
    public var isIdempotent: Bool? { request.isIdempotent }
}
