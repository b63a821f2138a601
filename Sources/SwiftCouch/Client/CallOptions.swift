import Foundation

/// Options for one call, on top of the client's ``Configuration``: pass them to
/// ``CouchDBClient/execute(_:options:)``, ``CouchDBClient/value(_:options:)``,
/// ``CouchDBClient/add(operation:options:completion:)``, ``CouchDBClient/task(for:options:completion:)``
/// or ``CouchDBClient/rows(_:bufferSize:options:)``. The client is not copied; nothing else changes.
///
/// ```swift
/// var options = CallOptions()
/// options.timeout = 5
/// options.retryPolicy = .disabled
/// options.headers["X-Request-ID"] = "checkout-42"
/// let doc = try await client.value(GetDocumentOperation<JSONValue>(database: "albums", id: "blue"), options: options)
/// ```
public struct CallOptions: Sendable {
    /// How long each attempt may take — its response's deadline and its idle timeout, as
    /// ``Configuration/requestTimeout`` describes; nil: ``Configuration/requestTimeout``.
    public var timeout: TimeInterval?
    /// How this call is retried; nil: ``Configuration/retryPolicy``.
    public var retryPolicy: RetryPolicy?
    /// Headers added to the request (after the operation's own, which they replace when the names
    /// match). Checked in `validate` like every header: a CR, LF or NUL fails the call before
    /// anything is sent.
    public var headers: HTTPFields

    public init(timeout: TimeInterval? = nil, retryPolicy: RetryPolicy? = nil, headers: HTTPFields = HTTPFields()) {
        self.timeout = timeout
        self.retryPolicy = retryPolicy
        self.headers = headers
    }
}
