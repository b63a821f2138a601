import Foundation

/// A user name and password for a CouchDB server. Its description never shows the password.
///
/// Its description, debug description and mirror (what `dump`, `Mirror` and debuggers show)
/// never contain the password.
public struct Credentials: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    public var username: String
    public var password: String

    public init(username: String, password: String) {
        self.username = username
        self.password = password
    }

    public var description: String { "Credentials(username: \(username), password: <redacted>)" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["username": username, "password": "<redacted>"]) }
}

/// How a client proves who it is. Its description never shows a key or token.
public struct AuthenticationMode: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    enum Kind: Hashable {
        case cookie
        case basic
        case iam(apiKey: String, tokenURL: URL)
        case bearer(token: String)
    }

    let kind: Kind

    /// Log in once with `POST /_session` using the client's credentials and send the
    /// `AuthSession` cookie, renewing it ahead of expiry and after a 401 (the default, and what
    /// CouchDB recommends).
    public static let cookie = AuthenticationMode(kind: .cookie)

    /// Send `Authorization: Basic …` built from the client's credentials with every request.
    public static let basic = AuthenticationMode(kind: .basic)

    /// IBM Cloud IAM: exchange `apiKey` for a bearer token at `tokenURL`
    /// (`POST`, form `grant_type=urn:ibm:params:oauth:grant-type:apikey&apikey=…`), send
    /// `Authorization: Bearer …`, refresh the token at 80% of its lifetime and after a 401 — one
    /// refresh at a time. The client's username/password credentials are not used.
    /// - Parameters:
    ///   - apiKey: the IBM Cloud API key (never logged).
    ///   - tokenURL: defaults to `https://iam.cloud.ibm.com/identity/token`.
    public static func iam(
        apiKey: String, tokenURL: URL = URL(string: "https://iam.cloud.ibm.com/identity/token")!
    ) -> AuthenticationMode {
        AuthenticationMode(kind: .iam(apiKey: apiKey, tokenURL: tokenURL))
    }

    /// A fixed bearer token (for example a JWT from your identity provider), sent as
    /// `Authorization: Bearer …` with every request; never renewed.
    public static func bearerToken(_ token: String) -> AuthenticationMode {
        AuthenticationMode(kind: .bearer(token: token))
    }

    public var description: String {
        switch kind {
        case .cookie: return "cookie"
        case .basic: return "basic"
        case .iam(_, let tokenURL): return "iam(apiKey: <redacted>, tokenURL: \(tokenURL.absoluteString))"
        case .bearer: return "bearerToken(<redacted>)"
        }
    }

    public var debugDescription: String { description }

    public var customMirror: Mirror { Mirror(self, children: [:], displayStyle: .enum) }
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
    /// Structured details, when the message is about a request: `operation`, `method`, `path`
    /// (percent-encoded, no query), `status`, `attempt`, `duration` (seconds). Never secrets.
    public var metadata: [String: String]

    public init(level: Level, message: String, metadata: [String: String] = [:]) {
        self.level = level
        self.message = message
        self.metadata = metadata
    }

    public var description: String {
        guard !metadata.isEmpty else { return "[\(level)] \(message)" }
        let details = metadata.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        return "[\(level)] \(message) {\(details)}"
    }
}

/// The library's version, as the default `User-Agent` shows it.
public enum SwiftCouchVersion {
    /// The version of this SwiftCouch.
    public static let current = "0.9.0"
}

/// Everything configurable about a ``CouchDBClient``. Every property has a default, stated on it.
public struct Configuration: Sendable {
    /// How long one HTTP request may take before it fails with a transport error (a call's
    /// ``CallOptions/timeout`` replaces it for that call). Defaults to 60 seconds.
    ///
    /// It is two bounds, each attempt's own (a retry starts both again):
    /// - the **deadline** for the whole response (``HTTPRequest/deadline``), counted from when the
    ///   request is handed to the transport: for a whole response its head and every byte of its
    ///   body, for a stream (row streams, feeds, downloads) its head. Interim `1xx` responses and
    ///   bytes trickled one at a time count against it: a peer cannot stretch a call past it.
    /// - the **idle timeout** (``HTTPRequest/timeout``): the longest wait for the next byte. A
    ///   stream's body is bounded by this alone, so a continuous feed kept alive by heartbeats
    ///   (sent more often than this) may live forever, and a stalled one ends after this long.
    ///
    /// Uploads (a file or stream body) have no deadline: the idle timeout bounds them byte by
    /// byte. A call that moves a great deal over a slow link (a large `_bulk_docs` body, a long
    /// `_all_docs` read whole) needs a timeout that covers all of it, or a stream.
    public var requestTimeout: TimeInterval = 60
    /// When requests are retried (429, optionally 5xx). Defaults to ``RetryPolicy/default``.
    public var retryPolicy: RetryPolicy = .default
    /// How many operations the client's own queue runs at once, and (counted apart) how many
    /// async calls (`execute`, `value`, the database handle) run at once; more wait their turn.
    /// Defaults to 6.
    public var maximumConcurrentOperations: Int = 6
    /// How the client authenticates. Cookie and Basic use the client's credentials (and do
    /// nothing without them); IAM and bearer tokens carry their own secret. Defaults to
    /// ``AuthenticationMode/cookie``.
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
    /// Send JSON request bodies of at least this many bytes gzip'd (`Content-Encoding: gzip`),
    /// which CouchDB decompresses: for large `_bulk_docs` writes over slow links. Responses are
    /// always accepted gzip'd. Defaults to nil: bodies are sent as they are.
    public var gzipRequestBodiesOfAtLeast: Int? = nil
    /// The largest whole response body a request accepts, in bytes after gzip inflation: past it
    /// the request fails with a transport error that says so, instead of exhausting memory (a
    /// huge result, a gzip bomb). Streamed results (`rows()`, `pages()`, downloads to files) are
    /// read piece by piece and not limited by it (see ``maximumStreamedElementSize`` and
    /// ``DownloadOptions/maximumSize``). Nil for no limit. Defaults to 256 MiB.
    ///
    /// The socket transport stops reading as soon as the limit is passed; `URLSession` collects
    /// (and inflates) a whole body itself, so ``URLSessionTransport`` can only refuse it once it
    /// has arrived.
    public var maximumResponseBodySize: Int? = 256 << 20
    /// The largest single element of a streamed answer, in bytes: one row of
    /// ``CouchDBClient/rows(_:bufferSize:options:)`` (`_all_docs`, views, `_find`, `_changes`, and
    /// the followers and pagers built on them), one line of a continuous feed, one top-level member
    /// of a streamed body (`total_rows`, `bookmark`, …; all of them together). It is checked as the
    /// bytes arrive, so an element that never ends is never held whole: past the limit the stream
    /// ends with a `.decoding` ``CouchError`` naming it. CouchDB refuses documents larger than its
    /// `max_document_size` (8,000,000 bytes by default), so the default leaves room for such a
    /// document in its row. Nil for no limit. Defaults to 16 MiB.
    public var maximumStreamedElementSize: Int? = 16 << 20
    /// The largest ratio of decoded to received bytes a compressed response body (gzip or
    /// deflate) may inflate by, checked as it inflates once a mebibyte was decoded: a gzip bomb
    /// ends with a transport error that says so, streamed responses and downloads included.
    /// Ordinary JSON and text compress 3–20×; DEFLATE cannot exceed about 1,032×. Nil for no
    /// limit. Defaults to 200.
    public var maximumDecompressionRatio: Double? = 200
    /// The network seam. Defaults to nil: an ``AutomaticTransport`` of the client's own (on Linux,
    /// ``SocketTransport`` for `http` and ``URLSessionTransport`` for `https`; on Apple platforms,
    /// ``URLSessionTransport``).
    public var transport: (any Transport)? = nil
    /// Take part in every request: each adapter may change the headers of each attempt, in this
    /// order (see ``RequestAdapter`` for where they run and what they cannot change). Defaults to none.
    public var adapters: [any RequestAdapter] = []
    /// Watch every attempt, response, failure and retry, for metrics and tracing (see
    /// ``EventMonitor``). Defaults to none.
    public var monitors: [any EventMonitor] = []
    /// The `User-Agent` header of every request (an operation's own header or a call's
    /// ``CallOptions/headers`` win). Nil sends none. Defaults to ``Configuration/defaultUserAgent``.
    public var userAgent: String? = Configuration.defaultUserAgent
    /// How `Date` values in documents are written and read. Defaults to ``DateCoding/iso8601``
    /// (text such as `2026-11-25T10:30:00Z`, which views, Mango and other clients read naturally).
    public var dateCoding: DateCoding = .iso8601

    /// `SwiftCouch/<version> (Swift; <platform>)`.
    public static let defaultUserAgent: String = {
        #if os(Linux)
            let platform = "Linux"
        #elseif os(macOS)
            let platform = "macOS"
        #elseif os(iOS)
            let platform = "iOS"
        #else
            let platform = "Apple"
        #endif
        return "SwiftCouch/\(SwiftCouchVersion.current) (Swift; \(platform))"
    }()

    /// The default configuration.
    public init() {}
}
