import Foundation

/// A user name and password for a CouchDB server. Its description never shows the password.
public struct Credentials: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    public var username: String
    public var password: String

    public init(username: String, password: String) {
        self.username = username
        self.password = password
    }

    public var description: String { "Credentials(username: \(username), password: <redacted>)" }
    public var debugDescription: String { description }
}

/// How a client proves who it is.
public enum AuthenticationMode: Sendable, Hashable {
    /// Log in once with `POST /_session` and send the `AuthSession` cookie, renewing it ahead of
    /// expiry and after a 401 (the default, and what CouchDB recommends).
    case cookie
    /// Send `Authorization: Basic …` with every request.
    case basic
}

/// One message from SwiftCouch's logging hook.
public struct LogEvent: Sendable, CustomStringConvertible {
    /// How much the message matters.
    public enum Level: Int, Sendable, Comparable {
        case debug, info, warning, error
        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }
    }
    public var level: Level
    /// The message; already free of passwords and cookies.
    public var message: String

    public init(level: Level, message: String) {
        self.level = level
        self.message = message
    }

    public var description: String { "[\(level)] \(message)" }
}

/// Everything configurable about a ``CouchDBClient``. Every property has a default, stated on it.
public struct Configuration: Sendable {
    /// How long one HTTP request may take before it fails with a transport error. Defaults to 60 seconds.
    public var requestTimeout: TimeInterval = 60
    /// When requests are retried (429, optionally 5xx). Defaults to ``RetryPolicy/default``.
    public var retryPolicy: RetryPolicy = .default
    /// How many operations the client's own queue runs at once. Defaults to 6.
    public var maximumConcurrentOperations: Int = 6
    /// How the client authenticates when it has credentials. Defaults to ``AuthenticationMode/cookie``.
    public var authentication: AuthenticationMode = .cookie
    /// The queue completion handlers run on. Defaults to nil: a private serial queue of the client's.
    /// Use `.main` for UI code.
    public var callbackQueue: DispatchQueue? = nil
    /// Receives SwiftCouch's log messages. Defaults to nil: nothing is logged.
    public var logHandler: (@Sendable (LogEvent) -> Void)? = nil
    /// Whether every request and response is written to ``logHandler`` (method, URL, status,
    /// headers, body up to ``transcriptBodyLimit``), with `Authorization`, `Cookie`, `Set-Cookie`
    /// and `password` values replaced by `<redacted>`. Defaults to false.
    public var logTranscripts: Bool = false
    /// How many bytes of each body a transcript shows. Defaults to 4,096.
    public var transcriptBodyLimit: Int = 4_096
    /// The network seam. Defaults to nil: a ``URLSessionTransport`` of the client's own.
    public var transport: (any Transport)? = nil

    /// The default configuration.
    public init() {}
}
