import Foundation

/// Every failure SwiftCouch reports: one type, saying what went wrong and where.
///
/// A `CouchError` carries its ``kind``, the HTTP ``statusCode`` when a response arrived, CouchDB's
/// own ``error`` and ``reason`` strings when the body had them (or the body as text when it was
/// not JSON), the ``method`` and ``path`` of the request, the server's ``retryAfter`` when it
/// said how long to wait, and the ``underlying`` error.
///
/// Its `description` never contains a password, an `Authorization` header or a session cookie:
/// the path is recorded without the query string or any user information.
public struct CouchError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// What kind of failure this is. New kinds may be added; switch with a `default`.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        private enum Code: String {
            case validation, serialisation, transport, http, decoding, cancelled, authentication, adapter
        }
        private let code: Code
        private init(_ code: Code) { self.code = code }

        /// The operation's inputs were rejected before anything was sent.
        public static let validation = Kind(.validation)
        /// The request body could not be built.
        public static let serialisation = Kind(.serialisation)
        /// The request did not get a response: connection refused or dropped, timeout, DNS.
        public static let transport = Kind(.transport)
        /// The server answered with an error status (see ``CouchError/statusCode``).
        public static let http = Kind(.http)
        /// The response arrived but could not be read as the expected type.
        public static let decoding = Kind(.decoding)
        /// The operation was cancelled before it completed.
        public static let cancelled = Kind(.cancelled)
        /// Logging in failed: wrong credentials, or a session that could not be renewed.
        public static let authentication = Kind(.authentication)
        /// A ``RequestAdapter`` failed or set a header it may not; that attempt was not sent.
        public static let adapter = Kind(.adapter)

        public var description: String { code.rawValue }
    }

    /// What kind of failure this is.
    public var kind: Kind
    /// A human-readable summary written by SwiftCouch (never containing secrets).
    public var message: String
    /// The HTTP status of the response, when one arrived.
    public var statusCode: Int?
    /// CouchDB's `error` string from the response body (`"conflict"`, `"not_found"`, ...).
    public var error: String?
    /// CouchDB's `reason` string from the response body (`"Document update conflict."`, ...).
    public var reason: String?
    /// The response body as text when it was not a CouchDB JSON error (truncated to 2,000 characters).
    public var bodyText: String?
    /// The HTTP method of the request, when one was made.
    public var method: String?
    /// The percent-encoded path of the request, without query string or credentials.
    public var path: String?
    /// The error that caused this one, if any (a `URLError`, a `DecodingError`, ...).
    public var underlying: (any Error)?
    /// Whether the server may have carried out the request although this error was reported: the
    /// request was sent (or may have been) and then the connection was lost, the answer was cut
    /// off or timed out, or the operation was cancelled while it was on its way; or a resent write
    /// was answered `409 conflict` after an earlier attempt's outcome was unknown. Read the
    /// document back before writing it again. False means the request was not carried out: it was
    /// never sent, or the server answered that it refused it.
    public var isOutcomeUnknown: Bool
    /// How long the server asked to wait before the next try, in seconds: its `Retry-After` header
    /// (delta-seconds or an HTTP date), when the response this error was made from had one — a
    /// `429 Too Many Requests` or `503 Service Unavailable` after SwiftCouch's own retries ran out,
    /// typically. Nil when there was no response, no header, or a header that is not a time to wait
    /// (`nan`, `-5`, text that is neither a number nor a date); a date already past is 0; anything
    /// longer than ``maximumRetryAfter`` is cut to it. Never a secret: it is a number, and
    /// ``description`` ends with it ("the server asked to wait 30 s before trying again").
    public var retryAfter: TimeInterval?

    /// The longest ``retryAfter`` kept from a response (a day): a server asking for more is
    /// answered with this.
    public static let maximumRetryAfter: TimeInterval = 86_400

    /// The server answered `409 Conflict`: the revision given is not the current one (or none was given
    /// for an existing document).
    public var isConflict: Bool { statusCode == 409 }
    /// The server answered `404 Not Found`: no such database, document, attachment or view.
    public var isNotFound: Bool { statusCode == 404 }
    /// The server answered `401 Unauthorized`: the credentials were refused or none were given.
    public var isUnauthorized: Bool { statusCode == 401 }
    /// The server answered `403 Forbidden`: the user may not do this (or a validation function refused
    /// the document).
    public var isForbidden: Bool { statusCode == 403 }
    /// The server answered `429 Too Many Requests` (after SwiftCouch's own retries ran out).
    public var isTooManyRequests: Bool { statusCode == 429 }

    /// `error` as a ``CouchError``: itself when it is one, a cancellation for Swift's
    /// `CancellationError`, otherwise a transport error carrying it.
    static func wrapping(_ error: any Error) -> CouchError {
        if let couchError = error as? CouchError { return couchError }
        if error is CancellationError { return .cancelled() }
        return CouchError(kind: .transport, message: "\(error)", underlying: error)
    }

    /// Creates an error. Prefer the static factories.
    public init(
        kind: Kind, message: String, statusCode: Int? = nil, error: String? = nil, reason: String? = nil,
        bodyText: String? = nil, method: String? = nil, path: String? = nil, underlying: (any Error)? = nil,
        isOutcomeUnknown: Bool = false
    ) {
        self.isOutcomeUnknown = isOutcomeUnknown
        self.kind = kind
        self.message = message
        self.statusCode = statusCode
        self.error = error
        self.reason = reason
        self.bodyText = bodyText
        self.method = method
        self.path = path
        self.underlying = underlying
    }

    /// An input rejected in `validate`.
    public static func validation(_ message: String) -> CouchError {
        CouchError(kind: .validation, message: message)
    }

    /// A body that could not be built.
    public static func serialisation(_ message: String, underlying: (any Error)? = nil) -> CouchError {
        CouchError(kind: .serialisation, message: message, underlying: underlying)
    }

    /// A cancelled operation; `outcomeUnknown` when the request was already on its way.
    public static func cancelled(method: String? = nil, path: String? = nil, outcomeUnknown: Bool = false)
        -> CouchError
    {
        CouchError(
            kind: .cancelled,
            message: outcomeUnknown
                ? "The operation was cancelled after its request was sent: the server may have carried it out."
                : "The operation was cancelled.",
            method: method, path: path, isOutcomeUnknown: outcomeUnknown)
    }

    /// The error for a redirect (any 3xx but `304 Not Modified`), which SwiftCouch never follows:
    /// following it could carry the `Cookie` or `Authorization` header to another origin, or replay
    /// a write somewhere else. The message names where it pointed, without user information,
    /// query or fragment (which may hold tokens).
    public static func redirect(status: Int, location: String?, method: String?, path: String?) -> CouchError {
        var message = "HTTP \(status): the server answered with a redirect"
        if let location, let shown = Redaction.location(location) { message += " to \(shown)" }
        message +=
            ", which SwiftCouch does not follow (it could carry credentials to another origin). Give the client"
            + " the URL the server redirects to."
        return CouchError(kind: .http, message: message, statusCode: status, method: method, path: path)
    }

    /// An error from an HTTP response: reads CouchDB's `{"error":..,"reason":..}` body, or keeps
    /// the body as text when it is not that.
    public static func http(
        status: Int, body: Data?, method: String?, path: String?, kind: Kind = .http
    ) -> CouchError {
        var error: String?
        var reason: String?
        var bodyText: String?
        if let body, !body.isEmpty {
            if let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
                object["error"] != nil || object["reason"] != nil
            {
                error = object["error"].map { "\($0)" }
                reason = object["reason"].map { "\($0)" }
            } else {
                bodyText = String(decoding: body.prefix(2_000), as: UTF8.self)
            }
        }
        var message = "HTTP \(status)"
        if let error { message += " \(error)" }
        if let reason { message += ": \(reason)" }
        return CouchError(
            kind: kind, message: message, statusCode: status, error: error, reason: reason,
            bodyText: bodyText, method: method, path: path)
    }

    /// The server's wait from a `Retry-After` header value, as ``retryAfter`` holds it: parsed by
    /// the one parser the retry policy uses, then kept within `0...maximumRetryAfter` (nil when
    /// the value is not a time to wait).
    static func retryAfterSeconds(_ header: String?, now: Date = Date()) -> TimeInterval? {
        guard let header, let seconds = RetryState.parseRetryAfter(header, now: now), !seconds.isNaN else {
            return nil
        }
        return min(max(seconds, 0), maximumRetryAfter)
    }

    /// Records the response's `Retry-After` in ``retryAfter``, unless it holds one already.
    mutating func recordRetryAfter(from headers: HTTPFields, now: Date = Date()) {
        if retryAfter == nil { retryAfter = Self.retryAfterSeconds(headers["Retry-After"], now: now) }
    }

    /// A short, secret-free description: kind, status, CouchDB's error and reason, method and path.
    public var description: String {
        var text = "CouchError.\(kind): \(message)"
        if let method, let path { text += " (\(method) \(path))" }
        if let retryAfter {
            // The property is public and settable: any Double, so only a whole one in range becomes an Int.
            let whole = retryAfter.isFinite && retryAfter.rounded() == retryAfter && abs(retryAfter) < 1e15
            let seconds = whole ? String(Int(retryAfter)) : String(format: "%.1f", retryAfter)
            text += "; the server asked to wait \(seconds) s before trying again"
        }
        return text
    }

    /// The description plus the body text and the underlying error, for debugging. Still secret-free.
    public var debugDescription: String {
        var text = description
        if let bodyText { text += " body: \(Redaction.redact(bodyText))" }
        if let underlying { text += " underlying: \(Redaction.redact(String(describing: underlying)))" }
        return text
    }
}

extension CouchError: LocalizedError {
    public var errorDescription: String? { description }
}
