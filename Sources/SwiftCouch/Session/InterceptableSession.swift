import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The only place SwiftCouch talks to the network.
///
/// It adds authentication (the `AuthSession` cookie, or Basic), logs in with `POST /_session` on
/// first use, takes every refreshed cookie from responses, renews the session ahead of expiry and
/// after a 401 (or Cloudant's 403 `credentials_expired`) — once for any number of concurrent
/// requests — and retries `429 Too Many Requests` (and, when enabled, 5xx and dropped
/// connections for safe requests) with backoff on Dispatch timers. No thread ever sleeps.
///
/// Threading: every piece of mutable state (the cookie state machine, the list of requests
/// waiting for a login) is touched only on one private serial queue.
public final class InterceptableSession: @unchecked Sendable {
    // @unchecked Sendable: `sessionState` and `waiting` are only read and written on `queue`
    // (asserted with dispatchPrecondition); everything else is immutable.

    /// The server URL, without credentials.
    public let baseURL: URL
    /// The base URL taken apart once, for building every request's URL.
    let serverBase: ServerBase
    let scheme: Scheme
    /// The client's configuration.
    let configuration: Configuration
    let transport: any Transport
    let queue = DispatchQueue(label: "SwiftCouch.InterceptableSession")
    /// Marks every session's queue, so that a thread already on one never waits for another
    /// (``enterQueue(_:)`` then falls back to `async`: no cycle of sessions waiting for each other).
    static let queueKey = DispatchSpecificKey<Bool>()
    /// While ``enterQueue(_:)`` runs work on the caller's thread: what must not hold the queue
    /// (completions, hand-offs to the transport) is collected here (queue-owned) and run on that
    /// thread after the work has left the queue.
    var deferredWork = DeferredSteps()
    var deferringWork = false
    let transcript: TranscriptLogger?
    var sessionState = AuthSessionState()
    /// The `Cookie` or `Authorization` value made for the current credential, so that every
    /// request sent with it shares one string instead of making its own (queue-owned).
    var credentialHeader: CredentialHeader?
    /// The requests in flight, for `shutdown()`.
    let registry = HandleRegistry()
    var waiting: [Attempt] = []
    /// Rejected requests waiting for the check of their session (see `checkSession`).
    var checking: [Rejected] = []
    /// Injectable clock and randomness, for tests of the timing logic.
    var now: @Sendable () -> Date = { Date() }
    var random: @Sendable () -> Double = { Double.random(in: 0...1) }

    /// One request on its way, with its retry state.
    final class Attempt: @unchecked Sendable {
        // @unchecked Sendable: mutated only on the session's queue.
        let request: HTTPRequest
        let isIdempotent: Bool
        let handle: RequestHandle
        /// The `POST /_session` of a login (its cookie is taken by `loginFinished`).
        let isLogin: Bool
        /// Where a streamed response goes; nil for whole responses.
        let streamReceiver: (any StreamReceiver)?
        var retry: RetryState
        var authReplayed = false
        /// How many times the request has been handed to the transport.
        var transmissions = 0
        /// Counts adapter runs, so that an adapter's late answer after its timeout is ignored.
        var adapterRun = 0
        /// When the latest attempt was handed to the transport (monotonic nanoseconds).
        var startedAt: UInt64 = 0

        /// The monitors' view of the attempt last sent.
        func sentEvent() -> RequestEvent {
            RequestEvent(
                method: request.method, path: request.url.path, attempt: max(transmissions, 1),
                operation: request.operationName, isLogin: isLogin)
        }

        /// The monitors' and adapters' view of the attempt about to be sent.
        func event(isLogin: Bool = false) -> RequestEvent {
            RequestEvent(
                method: request.method, path: request.url.path, attempt: transmissions + 1,
                operation: request.operationName, isLogin: isLogin || self.isLogin)
        }

        init(
            request: HTTPRequest, isIdempotent: Bool, policy: RetryPolicy, handle: RequestHandle, isLogin: Bool = false,
            streamReceiver: (any StreamReceiver)? = nil
        ) {
            self.request = request
            self.isLogin = isLogin
            self.streamReceiver = streamReceiver
            self.isIdempotent = isIdempotent
            self.retry = RetryState(policy: policy)
            self.handle = handle
        }
    }

    /// Creates a session.
    /// - Parameters:
    ///   - baseURL: the server, e.g. `http://127.0.0.1:5984`; any user information is ignored.
    ///   - credentials: who to log in as, or nil for anonymous requests.
    ///   - configuration: timeouts, retry policy, authentication mode, logging, transport.
    public init(baseURL: URL, credentials: Credentials?, configuration: Configuration) {
        self.baseURL = baseURL
        self.serverBase = ServerBase(baseURL)
        self.scheme = Scheme(mode: configuration.authentication, credentials: credentials)
        self.configuration = configuration
        self.transport =
            configuration.transport
            ?? AutomaticTransport(maximumConnectionsPerHost: max(configuration.maximumConcurrentOperations, 1))
        if configuration.logTranscripts, let handler = configuration.logHandler {
            transcript = TranscriptLogger(handler: handler, bodyLimit: configuration.transcriptBodyLimit)
        } else {
            transcript = nil
        }
        queue.setSpecific(key: Self.queueKey, value: true)
    }

    /// Runs `work` on the session's queue from the calling thread, as under a lock — no hand-off
    /// to another thread and back — then runs, on this thread and outside the queue, what `work`
    /// deferred through ``outsideQueue(_:)``: the completions of ``complete(_:_:)`` (decoding a
    /// response never holds the session queue) and the hand-offs to the transport (waking a
    /// connection's thread never holds it either, so concurrent callers rarely wait for the
    /// queue). On a session queue already (a monitor or log handler sending a request), the work
    /// is queued with `async` instead, as it always may be.
    func enterQueue(_ work: @escaping @Sendable () -> Void) {
        if DispatchQueue.getSpecific(key: Self.queueKey) != nil {
            queue.async(execute: work)
            return
        }
        // `sync` without a result: the generic one boxes its result (one allocation more a call).
        var ready = DeferredSteps()
        queue.sync {
            deferringWork = true
            work()
            deferringWork = false
            swap(&ready, &deferredWork)
        }
        ready.run()
    }

    /// Runs `step` — which touches no session state — at once on the session queue, or, inside
    /// ``enterQueue(_:)``, on the same thread once the work has left the queue.
    func outsideQueue(_ step: @escaping () -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        if deferringWork {
            deferredWork.add(step)
        } else {
            step()
        }
    }

    /// Ends a request from the session queue: at once, or — inside ``enterQueue(_:)`` — once the
    /// work has left the queue.
    func complete(_ handle: RequestHandle, _ result: Result<HTTPResponse, CouchError>) {
        outsideQueue { handle.finish(result) }
    }

    /// Sends `request` with authentication and retries, and calls `completion` exactly once: with
    /// the server's response (whatever its status, once retries are over), or with a transport,
    /// authentication or cancellation error.
    /// - Parameters:
    ///   - request: the request; the session adds authentication, the `User-Agent` and adapters' headers.
    ///   - isIdempotent: whether repeating the request is harmless (for 5xx retries).
    ///   - completion: called exactly once with the final response or error.
    @discardableResult
    public func send(
        _ request: HTTPRequest, isIdempotent: Bool,
        completion: @escaping @Sendable (Result<HTTPResponse, CouchError>) -> Void
    ) -> RequestHandle {
        send(request, isIdempotent: isIdempotent, fromPipeline: false, completion: completion)
    }

    /// ``send(_:isIdempotent:completion:)``; `fromPipeline` when the caller is SwiftCouch's own
    /// pipeline (a task's thread, holding no lock of anyone else's), which then runs the session's
    /// part on its own thread instead of handing it to the session queue's thread.
    func send(
        _ request: consuming HTTPRequest, isIdempotent: Bool, fromPipeline: Bool,
        completion: @escaping @Sendable (Result<HTTPResponse, CouchError>) -> Void
    ) -> RequestHandle {
        // Consumed: a caller that gives its request up leaves its header storage to this one, which
        // then adds the `User-Agent` in place instead of copying the fields.
        if request.maximumResponseBodySize == nil {
            request.maximumResponseBodySize = configuration.maximumResponseBodySize
        }
        applyBounds(to: &request)
        addUserAgent(to: &request)
        let handle = RequestHandle(request: copy request, registry: registry, completion: completion)
        guard registry.add(handle) else {
            handle.finish(.failure(Self.shutDownError(request)))
            return handle
        }
        let policy = request.retryPolicy ?? configuration.retryPolicy
        let attempt = Attempt(request: request, isIdempotent: isIdempotent, policy: policy, handle: handle)
        if fromPipeline {
            enterQueue { self.authorize(attempt) }
        } else {
            queue.async { self.authorize(attempt) }
        }
        return handle
    }

    /// Sets the request's ``HTTPRequest/deadline`` (when it has none) to its timeout — the call's
    /// own, or ``Configuration/requestTimeout`` — and its ``HTTPRequest/maximumDecompressionRatio``
    /// (when it has none) from the configuration. An upload (a ``StreamedBody``: a file or a
    /// stream, as large as it is) gets no deadline: its response follows the whole upload, which
    /// the idle timeout bounds byte by byte.
    func applyBounds(to request: inout HTTPRequest) {
        if request.deadline == nil, request.streamedBody == nil { request.deadline = request.timeout }
        if request.maximumDecompressionRatio == nil {
            request.maximumDecompressionRatio = configuration.maximumDecompressionRatio
        }
    }

    /// Sends `request` like ``send(_:isIdempotent:completion:)`` — same authentication, renewal and
    /// retries — but delivers a successful response to `receiver` as it arrives, chunk by chunk.
    ///
    /// Statuses the session may act on (401, 403, 429, 5xx) are read whole first, so a retried
    /// attempt never reaches the receiver; every other response is forwarded as it streams. The
    /// receiver sees exactly one head and one `complete` (with a ``CouchError`` on failure).
    /// Use the returned handle to pause and resume the transfer (back-pressure) or cancel it.
    @discardableResult
    public func stream(_ request: HTTPRequest, isIdempotent: Bool, receiver: any StreamReceiver) -> RequestHandle {
        stream(request, isIdempotent: isIdempotent, receiver: receiver, beforeStart: { _ in })
    }

    /// ``stream(_:isIdempotent:receiver:)``, handing the handle to `beforeStart` before the transfer
    /// can begin: a receiver that pauses from its first chunk (back-pressure) then always has the
    /// handle to pause, however the threads are scheduled.
    @discardableResult
    func stream(
        _ request: HTTPRequest, isIdempotent: Bool, receiver: any StreamReceiver,
        beforeStart: (RequestHandle) -> Void
    ) -> RequestHandle {
        // The transport's thread delivers chunks while `cancel()` may complete the receiver on
        // another: one at a time, and nothing after `complete`.
        let receiver = SerialReceiver(receiver)
        var request = request
        applyBounds(to: &request)
        addUserAgent(to: &request)
        let handle = RequestHandle(request: request, registry: registry) { result in
            switch result {
            case .success(let response):
                receiver.receive(head: HTTPResponse(statusCode: response.statusCode, headers: response.headers))
                if !response.body.isEmpty { receiver.receive(chunk: response.body) }
                receiver.complete(error: nil)
            case .failure(let error):
                receiver.complete(error: error)
            }
        }
        guard registry.add(handle) else {
            handle.finish(.failure(Self.shutDownError(request)))
            return handle
        }
        let attempt = Attempt(
            request: request, isIdempotent: isIdempotent, policy: request.retryPolicy ?? configuration.retryPolicy,
            handle: handle,
            streamReceiver: receiver)
        beforeStart(handle)
        queue.async { self.authorize(attempt) }
        return handle
    }

    /// Adds the configured `User-Agent` unless the request has one.
    func addUserAgent(to request: inout HTTPRequest) {
        if request.headers["User-Agent"] == nil, let userAgent = configuration.userAgent {
            request.headers["User-Agent"] = userAgent
        }
    }

    /// The error of a request made after `shutdown()`: cancelled, so that loops that resume after
    /// failures (a ``ChangesFollower``) end instead of retrying.
    static func shutDownError(_ request: HTTPRequest) -> CouchError {
        var error = CouchError.cancelled(method: request.method.rawValue, path: request.path)
        error.message = "The client was shut down; make a new CouchDBClient to send more requests. Nothing was sent."
        return error
    }

    /// Forgets the session cookie and any refused login, so the next request logs in again
    /// (for example after the credentials were fixed on the server).
    public func resetAuthentication() {
        queue.async { self.sessionState.reset() }
    }

    /// Shuts the session down: every request in flight — whole responses, streams, downloads,
    /// feeds, retries waiting on a timer — is cancelled (its completion or receiver gets a
    /// ``CouchError`` of kind `.cancelled` saying the client was shut down, and whether the
    /// server may have carried it out), every later request fails the same way at once, and the
    /// transport is stopped.
    public func shutdown() {
        for handle in registry.shutDown() { handle.cancel(shutDown: true) }
        transport.shutdown()
    }
}

/// A header value made from a session credential (a cookie, a bearer token), kept to be reused
/// while the credential lasts. Secret: it shows nothing of itself to `dump`, mirrors or
/// descriptions.
struct CredentialHeader: CustomReflectable, CustomStringConvertible, CustomDebugStringConvertible {
    let credential: String
    let value: String

    var customMirror: Mirror { Mirror(self, children: [], displayStyle: .struct) }
    var description: String { "CredentialHeader(redacted)" }
    var debugDescription: String { description }
}

/// The steps ``InterceptableSession/enterQueue(_:)`` runs after leaving the queue, in order: the
/// first (nearly always the only one) held apart, so the usual case makes no array.
struct DeferredSteps {
    private var first: (() -> Void)?
    private var more: [() -> Void] = []

    mutating func add(_ step: @escaping () -> Void) {
        if first == nil { first = step } else { more.append(step) }
    }

    func run() {
        first?()
        for step in more { step() }
    }
}
