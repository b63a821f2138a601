import Foundation

/// Watches the requests a session sends, for metrics and tracing: each attempt starting, each
/// response, each failure, each retry, with timings from a monotonic clock.
///
/// Every method has an empty default; implement those you need. They are called on the
/// session's serial queue, in the order things happen: return quickly and do not block (hand the
/// event to your own queue or actor for anything slow). Monitors see no secrets: events carry the
/// method, the percent-encoded path (no query, no user information), statuses, durations and
/// ``CouchError``s, never headers or bodies.
///
/// ```swift
/// final class RetryCounter: EventMonitor, @unchecked Sendable {
///     private let lock = NSLock()
///     private var retries = 0
///     func requestRetried(_ event: RequestEvent, reason: String, delay: TimeInterval) {
///         lock.withLock { retries += 1 }
///     }
/// }
/// ```
public protocol EventMonitor: Sendable {
    /// An attempt was handed to the transport.
    func requestStarted(_ event: RequestEvent)
    /// A response arrived for an attempt (its head, for a streamed response), whatever its status.
    func responseReceived(_ event: RequestEvent, status: Int, duration: TimeInterval)
    /// An attempt ended without a response (refused, dropped, timed out, cancelled).
    func requestFailed(_ event: RequestEvent, error: CouchError, duration: TimeInterval)
    /// The request will be sent again after `delay` seconds (a 429, a 5xx or a dropped connection
    /// that the retry policy retries).
    func requestRetried(_ event: RequestEvent, reason: String, delay: TimeInterval)
}

extension EventMonitor {
    public func requestStarted(_ event: RequestEvent) {}
    public func responseReceived(_ event: RequestEvent, status: Int, duration: TimeInterval) {}
    public func requestFailed(_ event: RequestEvent, error: CouchError, duration: TimeInterval) {}
    public func requestRetried(_ event: RequestEvent, reason: String, delay: TimeInterval) {}
}

/// Which attempt of which request an ``EventMonitor`` event is about.
public struct RequestEvent: Sendable, CustomStringConvertible {
    /// The HTTP method.
    public var method: HTTPMethod
    /// The percent-encoded path, without the query.
    public var path: String
    /// 1 for the first attempt, then one more for each retry.
    public var attempt: Int
    /// The operation's type name, nil for requests made without an operation (a login).
    public var operation: String?
    /// Whether this is the session's own login (`POST /_session`, or the IAM token request).
    public var isLogin: Bool

    public init(method: HTTPMethod, path: String, attempt: Int, operation: String? = nil, isLogin: Bool = false) {
        self.method = method
        self.path = path
        self.attempt = attempt
        self.operation = operation
        self.isLogin = isLogin
    }

    public var description: String {
        "\(method.rawValue) \(path) (attempt \(attempt)\(operation.map { ", \($0)" } ?? ""))"
    }

    /// The log metadata of this event.
    var metadata: [String: String] {
        var metadata = ["method": method.rawValue, "path": path, "attempt": String(attempt)]
        if let operation { metadata["operation"] = operation }
        return metadata
    }
}

/// Seconds elapsed on the monotonic clock from `start` to `end` (both
/// `DispatchTime.now().uptimeNanoseconds`).
func elapsedSeconds(since start: UInt64, until end: UInt64) -> TimeInterval {
    end >= start ? TimeInterval(end - start) / 1e9 : 0
}
