import Foundation
@_exported import struct HTTPWire.HTTPHeaders

/// An HTTP method, including CouchDB's `COPY`.
public struct HTTPMethod: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue.uppercased() }

    public static let get = HTTPMethod(rawValue: "GET")
    public static let head = HTTPMethod(rawValue: "HEAD")
    public static let put = HTTPMethod(rawValue: "PUT")
    public static let post = HTTPMethod(rawValue: "POST")
    public static let delete = HTTPMethod(rawValue: "DELETE")
    public static let copy = HTTPMethod(rawValue: "COPY")

    public var description: String { rawValue }
}

/// The request and response header fields: an ordered list with case-insensitive look-up, whose
/// description and mirror hide the values of `Authorization`, `Cookie`, `Set-Cookie` and
/// `Proxy-Authorization`. The one header type of the package: the client, its transports and the
/// TestServer all use it (it is `HTTPWire`'s `HTTPHeaders`).
public typealias HTTPFields = HTTPHeaders

/// A fully built request, as the session hands it to a ``Transport``.
public struct HTTPRequest: Sendable, CustomStringConvertible {
    public var method: HTTPMethod
    /// The absolute URL, with the percent-encoded path and query. Never carries user information.
    ///
    /// A request the pipeline prepared keeps its server and encoded target instead, and makes
    /// the `URL` only when it is asked for (the socket transport never asks: parsing a `URL` cost
    /// more than the rest of preparing a request).
    public var url: URL {
        get {
            switch location {
            case .url(let url):
                return url
            case .prepared(let server, let path, let query):
                // Every piece is percent-encoded already, so the text is a valid URL as it stands.
                return URL(string: server.origin + path + (query.map { "?" + $0 } ?? "")) ?? server.url
            }
        }
        set { location = .url(newValue) }
    }

    /// Where the request goes: a URL as given, or — a request the pipeline prepared — the client's
    /// server and the percent-encoded path and query.
    private enum Location: Sendable {
        case url(URL)
        case prepared(ServerOrigin, path: String, query: String?)
    }
    private var location: Location

    /// The server of a prepared request (scheme, host and port taken apart once per client).
    var server: ServerOrigin? {
        if case .prepared(let server, _, _) = location { return server }
        return nil
    }

    /// The percent-encoded path and query of a prepared request: read for every request by the
    /// transport, errors and monitors, so not parsed back out of a URL each time. Nil once `url`
    /// is set.
    var encodedTarget: (path: String, query: String?)? {
        if case .prepared(_, let path, let query) = location { return (path, query) }
        return nil
    }

    /// The URL's scheme, lowercased.
    var scheme: String { server?.scheme ?? url.scheme?.lowercased() ?? "" }
    public var headers: HTTPFields
    /// The body, sent again unchanged on every retry.
    public var body: Data?
    /// A body read from a file or stream instead (`body` is nil then).
    public var streamedBody: StreamedBody?
    /// The idle timeout: the longest wait for any one piece of the exchange (connecting, writing,
    /// the next byte of the head or body). A peer that keeps sending one byte at a time never
    /// trips it: ``deadline`` bounds that.
    public var timeout: TimeInterval
    /// The longest the response may take as a whole, counted from when the request is handed to
    /// the transport: the head, any interim `1xx` responses, and, for a whole response
    /// (`send`), every byte of its body, however slowly they trickle. For a streamed response
    /// (`stream`) only the head counts; its body is bounded by ``timeout`` between bytes. A
    /// transport fails the request with `URLError(.timedOut)` when it passes. Nil (or NaN, infinite,
    /// zero or less): no deadline beyond ``timeout``. Set by the session from ``Configuration/requestTimeout``.
    public var deadline: TimeInterval?
    /// The largest ratio of decoded to received bytes a compressed body (`Content-Encoding: gzip`
    /// or `deflate`) may inflate by, checked as it inflates once at least a mebibyte was decoded
    /// (a small body cannot be a bomb); past it the transport fails the request with
    /// `URLError(.dataLengthExceedsMaximum)` saying so. Nil for no limit. Set by the session from
    /// ``Configuration/maximumDecompressionRatio``; applies to streamed responses too.
    public var maximumDecompressionRatio: Double?
    /// The largest whole response body to accept, in bytes after decoding (gzip inflated); nil for
    /// no limit. A transport fails the request with `URLError(.dataLengthExceedsMaximum)` when the
    /// body grows past it (a streamed response, which the receiver consumes as it arrives, is not
    /// limited). Set from ``Configuration/maximumResponseBodySize``.
    public var maximumResponseBodySize: Int?
    /// This call's retry policy (``CallOptions/retryPolicy``); nil: the configuration's.
    var retryPolicy: RetryPolicy?
    /// The operation's type, for adapters, monitors and log metadata (named only when asked:
    /// making a generic type's name costs more than the rest of preparing a request).
    var operationType: Any.Type?
    /// The operation's type name, for adapters, monitors and log metadata.
    var operationName: String? { operationType.map { String(describing: $0) } }

    public init(
        method: HTTPMethod, url: URL, headers: HTTPFields = HTTPFields(), body: Data? = nil,
        streamedBody: StreamedBody? = nil, timeout: TimeInterval = 60, maximumResponseBodySize: Int? = nil
    ) {
        self.method = method
        self.location = .url(url)
        self.headers = headers
        self.body = body
        self.streamedBody = streamedBody
        self.timeout = timeout
        self.maximumResponseBodySize = maximumResponseBodySize
    }

    /// A request to `server`'s origin with the percent-encoded `target` (`url` is made from them
    /// when it is asked for).
    init(
        method: HTTPMethod, server: ServerOrigin, target: (path: String, query: String?), headers: HTTPFields,
        body: Data?, streamedBody: StreamedBody?, timeout: TimeInterval
    ) {
        self.method = method
        self.location = .prepared(server, path: target.path, query: target.query)
        self.headers = headers
        self.body = body
        self.streamedBody = streamedBody
        self.timeout = timeout
    }

    /// The error for a body past ``maximumResponseBodySize``.
    func bodyTooLarge(_ size: Int? = nil) -> URLError {
        let limit = maximumResponseBodySize ?? 0
        var message = "The response body"
        if let size { message += " (\(size) bytes)" }
        message +=
            " exceeds the limit of \(limit) bytes (Configuration.maximumResponseBodySize); it was not read."
            + " Stream large results (rows(), pages(), downloads to a file) or raise the limit."
        return URLError(.dataLengthExceedsMaximum, userInfo: [NSLocalizedDescriptionKey: message])
    }

    /// The percent-encoded path, without the query.
    public var path: String {
        if let encodedTarget { return encodedTarget.path }
        return URLComponents(url: url, resolvingAgainstBaseURL: false)?.percentEncodedPath ?? url.path
    }

    /// The percent-encoded query, without `?`, or nil.
    public var query: String? {
        if let encodedTarget { return encodedTarget.query }
        return URLComponents(url: url, resolvingAgainstBaseURL: false)?.percentEncodedQuery
    }

    /// Method and path only: safe to log.
    public var description: String { "\(method) \(path)" }
}

/// A response as a ``Transport`` returns it: status, headers and the whole body.
public struct HTTPResponse: Sendable {
    public var statusCode: Int
    public var headers: HTTPFields
    public var body: Data

    public init(statusCode: Int, headers: HTTPFields = HTTPFields(), body: Data = Data()) {
        self.statusCode = statusCode
        self.headers = headers
        self.body = body
    }
}

/// Something that can cancel a request in flight.
public protocol Cancellable: Sendable {
    func cancel()
}

/// The one seam between SwiftCouch and the network.
///
/// ``URLSessionTransport`` is the default. Tests (and SwiftCouchTesting's simulated responses)
/// supply their own transport, so the whole pipeline runs unchanged with no network.
public protocol Transport: Sendable {
    /// Sends `request` and calls `completion` exactly once with the response or the transport error.
    /// The completion may run on any thread.
    @discardableResult
    func send(_ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void)
        -> any Cancellable

    /// Sends `request` and delivers the response to `receiver` as it arrives, head first, then the
    /// body in chunks. The returned task can pause and resume the transfer (back-pressure) or
    /// cancel it. Defaults to ``send(_:completion:)`` with the whole body as one chunk.
    func stream(_ request: HTTPRequest, receiver: any StreamReceiver) -> any StreamingTask

    /// Releases the transport's resources. Requests in flight may be cancelled.
    func shutdown()
}

extension Transport {
    public func shutdown() {}
}
