import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A request in flight through the session; cancelling it ends it with a cancelled error at once.
public final class RequestHandle: Cancellable, @unchecked Sendable {
    // @unchecked Sendable: all mutable state is inside `state`, a `Locked`.
    private struct State {
        var cancelled = false
        var completed = false
        /// Set by `pause()`: applied to the transfer in flight, and to any tracked later (a retry,
        /// or the first attempt when `pause()` came before the transport had started).
        var paused = false
        var inFlight: (any Cancellable)?
        var timer: DispatchWorkItem?
        /// An attempt has been handed to the transport and has not ended with a response.
        var transmitting = false
        /// An earlier attempt ended without a response after it was sent: it may have been carried out.
        var uncertain = false
        /// A response arrived (the server acted on the request, whatever it answered); a
        /// cancellation racing its delivery must not say the request was not carried out.
        var responded = false
    }
    private let state = Locked(State())
    private let completion: @Sendable (Result<HTTPResponse, CouchError>) -> Void
    private let method: String
    private let path: String
    /// The session's register of live requests (for `shutdown()`), if it is one of its requests.
    private let registry: HandleRegistry?

    init(
        request: HTTPRequest, registry: HandleRegistry? = nil,
        completion: @escaping @Sendable (Result<HTTPResponse, CouchError>) -> Void
    ) {
        self.completion = completion
        self.method = request.method.rawValue
        self.path = request.path
        self.registry = registry
    }

    /// Whether `cancel()` was called.
    public var isCancelled: Bool { state.current.cancelled }

    /// Cancels the request: the transport task or the pending retry timer is stopped and the
    /// completion receives a cancelled error, unless it has already been called.
    ///
    /// The error says whether the server may have carried the request out
    /// (``CouchError/isOutcomeUnknown``): true once an attempt was handed to the transport and has
    /// not been answered, or when an earlier attempt was lost after it was sent.
    public func cancel() { cancel(shutDown: false) }

    /// Cancels as ``cancel()``; `shutDown` when the session is shutting down, which the error says.
    func cancel(shutDown: Bool) {
        let (inFlight, timer, unknown) = state.withLock { state -> ((any Cancellable)?, DispatchWorkItem?, Bool) in
            state.cancelled = true
            defer {
                state.inFlight = nil
                state.timer = nil
            }
            return (state.inFlight, state.timer, state.transmitting || state.uncertain || state.responded)
        }
        inFlight?.cancel()
        timer?.cancel()
        var error = CouchError.cancelled(method: method, path: path, outcomeUnknown: unknown)
        if shutDown { error.message = "The client was shut down while the operation was in flight. " + error.message }
        finish(.failure(error))
    }

    /// Called just before an attempt is handed to the transport: false (send nothing) when the
    /// request is already cancelled, so a cancelled request is never sent.
    func beginTransmission() -> Bool {
        state.withLock { state -> Bool in
            guard !state.cancelled else { return false }
            state.transmitting = true
            return true
        }
    }

    /// Called when an attempt ended: `answered` when it provably did nothing or got a response,
    /// `responded` when a response arrived; otherwise it was lost after it was sent.
    func endTransmission(answered: Bool, responded: Bool = false) {
        state.withLock { state in
            state.transmitting = false
            if !answered { state.uncertain = true }
            if responded { state.responded = true }
        }
    }

    /// Whether an attempt was lost after it was sent (so the server may have carried it out).
    var hadUncertainAttempt: Bool { state.current.uncertain }

    /// Calls the completion, the first time only.
    func finish(_ result: Result<HTTPResponse, CouchError>) {
        if claimCompletion() { completion(result) }
    }

    /// Marks the request completed without calling the completion (a streamed response that
    /// was delivered straight to its receiver). True the first time only.
    func claimCompletion() -> Bool {
        let first = state.withLock { state -> Bool in
            defer { state.completed = true }
            return !state.completed
        }
        if first { registry?.remove(self) }
        return first
    }

    /// Pauses a streamed transfer (back-pressure), now or as soon as it starts.
    public func pause() {
        state.withLock { $0.paused = true }
        applyPause()
    }

    /// Resumes a paused streamed transfer.
    public func resume() {
        state.withLock { $0.paused = false }
        applyPause()
    }

    /// Hands the transfer in flight the pause state wanted *now*, one call at a time: a `pause()`
    /// and a `resume()` racing on two threads can reach the transport in either order, and the
    /// later one re-reads the state, so the transport never stays paused after the last call was
    /// a resume (which would stall the stream for good).
    private func applyPause() {
        applying.lock()
        defer { applying.unlock() }
        let (paused, inFlight) = state.withLock { ($0.paused, $0.inFlight as? any StreamingTask) }
        if paused { inFlight?.pause() } else { inFlight?.resume() }
    }
    private let applying = NSLock()

    /// Called by a stream's relay after each chunk: while the consumer has paused the transfer
    /// but the transport's task is not tracked yet (the transport started delivering before
    /// `stream` returned), the delivering thread waits a moment, so the pause reaches the task
    /// before more is read instead of being applied only once it is tracked.
    func holdWhilePausedBeforeTracking() {
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            let waiting = state.withLock { state in state.paused && state.inFlight == nil && !state.cancelled }
            guard waiting else { return }
            usleep(1_000)
        }
    }

    /// Records what to cancel; cancels it straight away when the handle is already cancelled.
    func track(inFlight: (any Cancellable)? = nil, timer: DispatchWorkItem? = nil) {
        let (cancelled, paused) = state.withLock { state -> (Bool, Bool) in
            if !state.cancelled {
                state.inFlight = inFlight
                state.timer = timer
            }
            return (state.cancelled, state.paused)
        }
        if cancelled {
            inFlight?.cancel()
            timer?.cancel()
        } else if paused {
            applyPause()
        }
    }
}

/// The requests of a session still in flight, so that `shutdown()` reaches every one of them
/// (streams, downloads and feeds included), and none starts after it.
final class HandleRegistry: @unchecked Sendable {
    // @unchecked Sendable: all state is behind `state`.
    private struct State {
        var live: [ObjectIdentifier: RequestHandle] = [:]
        var shutDown = false
    }
    private let state = Locked(State())

    /// Registers `handle`; false once the session is shut down (it must not start).
    func add(_ handle: RequestHandle) -> Bool {
        state.withLock { state -> Bool in
            guard !state.shutDown else { return false }
            state.live[ObjectIdentifier(handle)] = handle
            return true
        }
    }

    func remove(_ handle: RequestHandle) {
        state.withLock { _ = $0.live.removeValue(forKey: ObjectIdentifier(handle)) }
    }

    /// Marks the session shut down and returns the requests in flight.
    func shutDown() -> [RequestHandle] {
        state.withLock { state -> [RequestHandle] in
            state.shutDown = true
            defer { state.live = [:] }
            return Array(state.live.values)
        }
    }
}

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
    private let scheme: Scheme
    /// The client's configuration.
    let configuration: Configuration
    private let transport: any Transport
    fileprivate let queue = DispatchQueue(label: "SwiftCouch.InterceptableSession")
    fileprivate let transcript: TranscriptLogger?
    private var sessionState = AuthSessionState()
    /// The requests in flight, for `shutdown()`.
    private let registry = HandleRegistry()
    private var waiting: [Attempt] = []
    /// Rejected requests waiting for the check of their session (see `checkSession`).
    private var checking: [Rejected] = []
    /// Injectable clock and randomness, for tests of the timing logic.
    var now: @Sendable () -> Date = { Date() }
    var random: @Sendable () -> Double = { Double.random(in: 0...1) }

    /// One request on its way, with its retry state.
    fileprivate final class Attempt: @unchecked Sendable {
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
        var request = request
        if request.maximumResponseBodySize == nil {
            request.maximumResponseBodySize = configuration.maximumResponseBodySize
        }
        addUserAgent(to: &request)
        let handle = RequestHandle(request: request, registry: registry, completion: completion)
        guard registry.add(handle) else {
            handle.finish(.failure(Self.shutDownError(request)))
            return handle
        }
        let attempt = Attempt(
            request: request, isIdempotent: isIdempotent, policy: request.retryPolicy ?? configuration.retryPolicy,
            handle: handle)
        queue.async { self.authorize(attempt) }
        return handle
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
    private func addUserAgent(to request: inout HTTPRequest) {
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

    // MARK: - Authentication

    /// How requests are authenticated, decided once from the configuration and credentials.
    /// Its mirror shows the principal only: never a password, key or token.
    enum Scheme: CustomReflectable {
        /// Anonymous.
        case none
        /// A fixed `Authorization` header (Basic, or a static bearer token).
        case fixedHeader(String)
        /// `POST /_session` and the `AuthSession` cookie.
        case cookie(Credentials)
        /// An IBM Cloud IAM bearer token obtained with an API key.
        case iam(apiKey: String, tokenURL: URL)

        init(mode: AuthenticationMode, credentials: Credentials?) {
            switch (mode.kind, credentials) {
            case (.iam(let apiKey, let tokenURL), _): self = .iam(apiKey: apiKey, tokenURL: tokenURL)
            case (.bearer(let token), _): self = .fixedHeader("Bearer \(token)")
            case (_, nil): self = .none
            case (.basic, let credentials?):
                let token = Data("\(credentials.username):\(credentials.password)".utf8).base64EncodedString()
                self = .fixedHeader("Basic \(token)")
            case (.cookie, let credentials?): self = .cookie(credentials)
            }
        }

        var customMirror: Mirror { Mirror(self, children: ["principal": principal], displayStyle: .enum) }

        /// Who is logging in, for messages (never a secret).
        var principal: String {
            switch self {
            case .cookie(let credentials): return "'\(credentials.username)'"
            case .iam: return "the IAM API key"
            case .none, .fixedHeader: return "the configured credentials"
            }
        }
    }

    private func authorize(_ attempt: Attempt) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !attempt.handle.isCancelled else { return }
        var request = attempt.request
        switch scheme {
        case .none:
            transmit(attempt, request: request, generation: nil)
        case .fixedHeader(let value):
            request.headers["Authorization"] = value
            transmit(attempt, request: request, generation: nil)
        case .cookie, .iam:
            let (action, startLogin) = sessionState.prepareRequest(now: now())
            switch action {
            case .send(let credential, let generation):
                if case .iam = scheme {
                    request.headers["Authorization"] = "Bearer \(credential)"
                } else {
                    request.headers["Cookie"] = "AuthSession=\(credential)"
                }
                transmit(attempt, request: request, generation: generation)
            case .wait:
                waiting.append(attempt)
            case .fail:
                attempt.handle.finish(.failure(authenticationRefusedError(for: attempt.request)))
            }
            if startLogin { logIn() }
        }
    }

    private func authenticationRefusedError(for request: HTTPRequest) -> CouchError {
        CouchError(
            kind: .authentication,
            message: "The server refused \(scheme.principal); "
                + "no request is sent until resetAuthentication() is called.",
            method: request.method.rawValue, path: request.path)
    }

    /// Starts the one login (cookie) or token request (IAM) in flight.
    private func logIn() {
        dispatchPrecondition(condition: .onQueue(queue))
        var request: HTTPRequest
        switch scheme {
        case .cookie(let credentials):
            // Under the base URL's path, as every request is (`https://host/couchdb/_session`).
            let url = (try? PreparedRequest.url(base: baseURL, path: CouchPath("_session"), parameters: [])) ?? baseURL
            let body = try? JSONSerialization.data(
                withJSONObject: ["name": credentials.username, "password": credentials.password],
                options: [.sortedKeys])
            request = HTTPRequest(
                method: .post, url: url,
                headers: ["Content-Type": "application/json", "Accept": "application/json"],
                body: body, timeout: configuration.requestTimeout)
        case .iam(let apiKey, let tokenURL):
            let form =
                "grant_type=" + PercentEncoding.encode("urn:ibm:params:oauth:grant-type:apikey")
                + "&apikey=" + PercentEncoding.encode(apiKey)
            request = HTTPRequest(
                method: .post, url: tokenURL,
                headers: ["Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"],
                body: Data(form.utf8), timeout: configuration.requestTimeout)
        case .none, .fixedHeader:
            return
        }
        addUserAgent(to: &request)
        configuration.logHandler?(
            LogEvent(level: .info, message: "Authenticating \(scheme.principal) at \(request.url.host ?? "")"))
        let handle = RequestHandle(request: request) { [self, request] result in
            queue.async { self.loginFinished(result, request: request) }
        }
        // Repeating a login is harmless (it only issues another cookie or token), so it is retried
        // after a 429, a 5xx or a dropped connection, within the client's retry policy.
        var policy = configuration.retryPolicy
        policy.retryServerErrors = true
        let attempt = Attempt(request: request, isIdempotent: true, policy: policy, handle: handle, isLogin: true)
        transmit(attempt, request: request, generation: nil)
    }

    /// Reads the credential out of a successful login or token response.
    private func credential(fromLogin response: HTTPResponse) -> (String, TimeInterval?)? {
        if case .iam = scheme {
            struct Token: Decodable {
                var access_token: String
                var expires_in: Double?
                var expiration: Double?
            }
            guard let token = try? JSONDecoder().decode(Token.self, from: response.body), !token.access_token.isEmpty
            else { return nil }
            let lifetime = token.expires_in ?? token.expiration.map { $0 - now().timeIntervalSince1970 }
            return (token.access_token, lifetime)
        }
        return authSessionCookie(in: response).flatMap { $0.0.isEmpty ? nil : $0 }
    }

    private func loginFinished(_ result: Result<HTTPResponse, CouchError>, request: HTTPRequest) {
        dispatchPrecondition(condition: .onQueue(queue))
        let failure: CouchError
        switch result {
        case .success(let response) where (200..<300).contains(response.statusCode):
            if let (credential, lifetime) = credential(fromLogin: response) {
                sessionState.loginSucceeded(cookie: credential, maxAge: lifetime, now: now())
                configuration.logHandler?(LogEvent(level: .info, message: "Authenticated \(scheme.principal)"))
                let released = waiting
                waiting = []
                released.forEach(authorize)
                return
            }
            let expected = { if case .iam = scheme { "an access_token" } else { "an AuthSession cookie" } }()
            failure = CouchError(
                kind: .authentication,
                message: "\(request.method) \(request.path) succeeded but returned no \(expected).",
                statusCode: response.statusCode, method: request.method.rawValue, path: request.path)
            sessionState.loginFailed(credentialsRejected: false)
        case .success(let response):
            let rejected = [400, 401, 403].contains(response.statusCode)
            failure = CouchError.http(
                status: response.statusCode, body: response.body, method: request.method.rawValue, path: request.path,
                kind: rejected ? .authentication : .http)
            sessionState.loginFailed(credentialsRejected: rejected)
        case .failure(let error):
            failure = error
            sessionState.loginFailed(credentialsRejected: false)
        }
        configuration.logHandler?(LogEvent(level: .error, message: "Authentication failed: \(failure)"))
        let failed = waiting
        waiting = []
        for attempt in failed {
            var error = failure
            error.method = attempt.request.method.rawValue
            error.path = attempt.request.path
            if error.kind == .authentication {
                error.message = "Authenticating \(scheme.principal) failed: \(failure.message)"
            }
            attempt.handle.finish(.failure(error))
        }
    }

    private func authSessionCookie(in response: HTTPResponse) -> (String, TimeInterval?)? {
        for value in response.headers.values("Set-Cookie") {
            if let parsed = SetCookieParser.authSession(in: value) { return (parsed.value, parsed.maxAge) }
        }
        return nil
    }

    // MARK: - Sending and retrying

    private func transmit(_ attempt: Attempt, request: HTTPRequest, generation: Int?) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !attempt.handle.isCancelled else { return }
        if attempt.transmissions > 0, let body = request.streamedBody, !body.isRepeatable {
            attempt.handle.finish(
                .failure(
                    CouchError(
                        kind: .transport,
                        message: "The request must be sent again (after a 429, a renewed session or a dropped "
                            + "connection) but its body is an InputStream that can be read only once; nothing was "
                            + "resent. Upload from a file URL to let SwiftCouch resend the body.",
                        method: request.method.rawValue, path: request.path)))
            return
        }
        if attempt.isLogin || configuration.adapters.isEmpty {
            dispatch(attempt, request: request, generation: generation)
        } else {
            adapt(attempt, request: request, generation: generation)
        }
    }

    /// Runs the configured adapters over the attempt off the queue (never blocking it), within the
    /// request's timeout, then sends what they made.
    private func adapt(_ attempt: Attempt, request: HTTPRequest, generation: Int?) {
        dispatchPrecondition(condition: .onQueue(queue))
        attempt.adapterRun += 1
        let run = attempt.adapterRun
        let event = attempt.event()
        let context = RequestAdapterContext(
            attempt: event.attempt, isIdempotent: attempt.isIdempotent, method: request.method,
            path: event.path, operation: request.operationName)
        let protected: [String]
        switch scheme {
        case .none: protected = []
        case .fixedHeader, .iam: protected = ["Authorization"]
        case .cookie: protected = ["Cookie"]
        }
        let timeout = DispatchWorkItem {
            guard attempt.adapterRun == run else { return }
            attempt.adapterRun += 1
            var error = AdapterChain.failure(
                "The request adapters did not finish within the request's timeout "
                    + "(\(String(format: "%.3g", request.timeout)) s).", context)
            error.isOutcomeUnknown = attempt.handle.hadUncertainAttempt
            attempt.handle.finish(.failure(error))
        }
        attempt.handle.track(timer: timeout)
        queue.asyncAfter(deadline: .now() + request.timeout, execute: timeout)
        let adapters = configuration.adapters
        AdapterChain.start { [self] in
            let result: Result<HTTPFields, CouchError>
            do throws(CouchError) {
                result = .success(
                    try await AdapterChain.adapt(
                        request.headers, adapters: adapters, context: context, protected: protected))
            } catch {
                result = .failure(error)
            }
            queue.async { [self] in
                guard attempt.adapterRun == run, !attempt.handle.isCancelled else { return }
                attempt.adapterRun += 1  // the timeout's work item now does nothing
                switch result {
                case .success(let headers):
                    var adapted = request
                    adapted.headers = headers
                    dispatch(attempt, request: adapted, generation: generation)
                case .failure(var error):
                    error.isOutcomeUnknown = attempt.handle.hadUncertainAttempt
                    attempt.handle.finish(.failure(error))
                }
            }
        }
    }

    /// Hands one attempt to the transport.
    private func dispatch(_ attempt: Attempt, request: HTTPRequest, generation: Int?) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard attempt.handle.beginTransmission() else { return }
        let event = attempt.event()
        attempt.transmissions += 1
        transcript?.log(request: request)
        for monitor in configuration.monitors { monitor.requestStarted(event) }
        attempt.startedAt = DispatchTime.now().uptimeNanoseconds
        let started = Date()
        if let receiver = attempt.streamReceiver {
            let relay = StreamRelay(
                session: self, attempt: attempt, request: request, generation: generation, started: started,
                receiver: receiver)
            attempt.handle.track(inFlight: transport.stream(request, receiver: relay))
            return
        }
        let inFlight = transport.send(request) { [self] result in
            queue.async {
                self.received(result, attempt: attempt, request: request, generation: generation, started: started)
            }
        }
        attempt.handle.track(inFlight: inFlight)
    }

    fileprivate func received(
        _ result: Result<HTTPResponse, any Error>, attempt: Attempt, request: HTTPRequest, generation: Int?,
        started: Date
    ) {
        dispatchPrecondition(condition: .onQueue(queue))
        if case .failure(let error) = result {
            attempt.handle.endTransmission(answered: Self.provablyNotSent(error))
        } else if case .success(let response) = result {
            // A 429 means the server did nothing; any other answer, that it acted on the request.
            attempt.handle.endTransmission(answered: true, responded: response.statusCode != 429)
        }
        let duration = elapsedSeconds(since: attempt.startedAt)
        report(result, attempt: attempt, duration: duration)
        guard !attempt.handle.isCancelled else { return }
        switch result {
        case .failure(let error):
            transcript?.log(error: error, for: request)
            if isConnectionLoss(error),
                case .retry(let delay) = attempt.retry.decide(
                    after: .connectionLost, isIdempotent: attempt.isIdempotent, now: now(), random: random)
            {
                schedule(attempt, after: delay, reason: "connection lost")
                return
            }
            var failure = transportError(error, request: request)
            failure.isOutcomeUnknown = attempt.handle.hadUncertainAttempt
            attempt.handle.finish(.failure(failure))
        case .success(let response):
            transcript?.log(response: response, for: request, elapsed: Date().timeIntervalSince(started))
            // A `_session` call made by an operation (logging in as someone else, logging out)
            // must not replace the client's own session cookie.
            if case .cookie = scheme, !attempt.isLogin, !request.path.hasSuffix("/_session"),
                let (cookie, maxAge) = authSessionCookie(in: response), !cookie.isEmpty
            {
                sessionState.cookieRefreshed(cookie: cookie, maxAge: maxAge, now: now())
            }
            if let generation, isSessionRejection(response), !attempt.authReplayed {
                attempt.authReplayed = true
                let (action, startLogin) = sessionState.requestRejected(
                    usedGeneration: generation, expired: response.statusCode == 403)
                switch action {
                case .resend: authorize(attempt)
                case .wait: waiting.append(attempt)
                case .check(let startCheck):
                    checking.append(Rejected(attempt: attempt, request: request, response: response))
                    if startCheck { checkSession(generation: generation) }
                }
                if startLogin { logIn() }
                return
            }
            deliver(response, attempt: attempt, request: request)
        }
    }

    /// Tells the monitors and the log how an attempt ended.
    fileprivate func report(_ result: Result<HTTPResponse, any Error>, attempt: Attempt, duration: TimeInterval) {
        dispatchPrecondition(condition: .onQueue(queue))
        let event = attempt.sentEvent()
        var metadata = event.metadata
        metadata["duration"] = String(format: "%.6f", duration)
        switch result {
        case .success(let response):
            for monitor in configuration.monitors {
                monitor.responseReceived(event, status: response.statusCode, duration: duration)
            }
            metadata["status"] = String(response.statusCode)
            configuration.logHandler?(
                LogEvent(
                    level: .debug,
                    message: "\(event.method.rawValue) \(event.path) → \(response.statusCode) in "
                        + "\(String(format: "%.1f", duration * 1000)) ms (attempt \(event.attempt))",
                    metadata: metadata))
        case .failure(let error):
            let couchError = transportError(error, request: attempt.request)
            for monitor in configuration.monitors {
                monitor.requestFailed(event, error: couchError, duration: duration)
            }
            configuration.logHandler?(
                LogEvent(
                    level: .warning,
                    message: "\(event.method.rawValue) \(event.path) failed after "
                        + "\(String(format: "%.1f", duration * 1000)) ms (attempt \(event.attempt)): "
                        + couchError.message,
                    metadata: metadata))
        }
    }

    /// The end of a response's way through the session: a redirect becomes an error, a status the
    /// retry policy retries is sent again later, a conflict after a lost attempt says the outcome
    /// is unknown, anything else is the answer.
    private func deliver(_ response: HTTPResponse, attempt: Attempt, request: HTTPRequest) {
        dispatchPrecondition(condition: .onQueue(queue))
        if (300...399).contains(response.statusCode), response.statusCode != 304 {
            // Never followed: it could carry credentials to another origin, or replay a write elsewhere.
            attempt.handle.finish(
                .failure(
                    .redirect(
                        status: response.statusCode, location: response.headers["Location"],
                        method: request.method.rawValue, path: request.path)))
            return
        }
        let outcome = AttemptOutcome.response(
            status: response.statusCode, retryAfter: response.headers["Retry-After"])
        if case .retry(let delay) = attempt.retry.decide(
            after: outcome, isIdempotent: attempt.isIdempotent, now: now(), random: random)
        {
            schedule(attempt, after: delay, reason: "HTTP \(response.statusCode)")
            return
        }
        if response.statusCode == 409, request.method != .get, request.method != .head,
            attempt.handle.hadUncertainAttempt
        {
            // The conflict may be with this very write, carried out by an attempt whose answer was lost.
            var conflict = CouchError.http(
                status: 409, body: response.body, method: request.method.rawValue, path: request.path)
            conflict.isOutcomeUnknown = true
            conflict.message +=
                " An earlier attempt of this request was sent and its answer lost, so the conflict may be"
                + " with this write itself: read the document to know whether it was carried out."
            attempt.handle.finish(.failure(conflict))
            return
        }
        attempt.handle.finish(.success(response))
    }

    /// A request whose rejection (401) waits for the check of its cookie.
    private struct Rejected {
        let attempt: Attempt
        let request: HTTPRequest
        let response: HTTPResponse
    }

    /// Asks the server whether the cookie (or token) of `generation` is still alive: `GET /_session`
    /// answers with the user's name while it is. Cheap (no password hashing, no login rate limit),
    /// and sent once however many requests wait for it.
    private func checkSession(generation: Int) {
        dispatchPrecondition(condition: .onQueue(queue))
        var request = HTTPRequest(
            method: .get,
            url: (try? PreparedRequest.url(base: baseURL, path: CouchPath("_session"), parameters: [])) ?? baseURL,
            headers: ["Accept": "application/json"], timeout: configuration.requestTimeout)
        if let credential = sessionState.cookie {
            if case .iam = scheme {
                request.headers["Authorization"] = "Bearer \(credential)"
            } else {
                request.headers["Cookie"] = "AuthSession=\(credential)"
            }
        }
        let handle = RequestHandle(request: request) { [self] result in
            queue.async { self.sessionChecked(result, generation: generation) }
        }
        // Sent as it is, like a login (not parked behind the session it checks), and retried as one.
        var policy = configuration.retryPolicy
        policy.retryServerErrors = true
        let attempt = Attempt(request: request, isIdempotent: true, policy: policy, handle: handle, isLogin: true)
        transmit(attempt, request: request, generation: nil)
    }

    private func sessionChecked(_ result: Result<HTTPResponse, CouchError>, generation: Int) {
        dispatchPrecondition(condition: .onQueue(queue))
        struct SessionInfo: Decodable {
            struct UserContext: Decodable { var name: String? }
            var userCtx: UserContext
        }
        var alive = false
        if case .success(let response) = result, response.statusCode == 200,
            let info = try? JSONDecoder().decode(SessionInfo.self, from: response.body)
        {
            alive = info.userCtx.name != nil
        }
        let parked = checking
        checking = []
        switch sessionState.sessionChecked(generation: generation, alive: alive) {
        case .report:
            configuration.logHandler?(
                LogEvent(
                    level: .info,
                    message: "The session of \(scheme.principal) is alive: \(parked.count) rejected request(s) "
                        + "reported as answered, without logging in again"))
            for rejected in parked { deliver(rejected.response, attempt: rejected.attempt, request: rejected.request) }
        case .resend:
            parked.forEach { authorize($0.attempt) }
        case .wait(let startLogin):
            waiting += parked.map(\.attempt)
            if startLogin { logIn() }
        }
    }

    /// Errors that say the request never reached the server (the connection was not made).
    static func provablyNotSent(_ error: any Error) -> Bool {
        if let urlError = error as? URLError {
            if (urlError as NSError).userInfo[ClientSocket.neverSentKey] as? Bool == true { return true }
            return [.cannotConnectToHost, .cannotFindHost, .dnsLookupFailed, .notConnectedToInternet]
                .contains(urlError.code)
        }
        if let couchError = error as? CouchError, let underlying = couchError.underlying {
            return provablyNotSent(underlying)
        }
        let nsError = error as NSError
        return nsError.domain == NSPOSIXErrorDomain && nsError.code == Int(ECONNREFUSED)
    }

    private func schedule(_ attempt: Attempt, after delay: TimeInterval, reason: String) {
        let event = attempt.sentEvent()
        for monitor in configuration.monitors { monitor.requestRetried(event, reason: reason, delay: delay) }
        var metadata = event.metadata
        metadata["delay"] = String(format: "%.3f", delay)
        configuration.logHandler?(
            LogEvent(
                level: .info,
                message: "Retrying \(attempt.request) after \(reason) in \(String(format: "%.3f", delay)) s "
                    + "(retry \(attempt.retry.retries) of \(attempt.retry.policy.maximumRetries))",
                metadata: metadata))
        // A login is sent again as it is: going through `authorize` would park it behind the login
        // in flight, which is itself.
        let item = DispatchWorkItem { [self] in
            if attempt.isLogin {
                transmit(attempt, request: attempt.request, generation: nil)
            } else {
                authorize(attempt)
            }
        }
        attempt.handle.track(timer: item)
        queue.asyncAfter(deadline: .now() + delay, execute: item)
    }

    /// 401, or Cloudant's 403 `credentials_expired`: the session cookie (or IAM token) is no longer good.
    private func isSessionRejection(_ response: HTTPResponse) -> Bool {
        if response.statusCode == 401 { return true }
        guard response.statusCode == 403 else { return false }
        let error = CouchError.http(status: 403, body: response.body, method: nil, path: nil)
        return error.error == "credentials_expired"
    }

    private func isConnectionLoss(_ error: any Error) -> Bool {
        if let urlError = error as? URLError {
            return [.networkConnectionLost, .cannotConnectToHost, .notConnectedToInternet, .badServerResponse]
                .contains(urlError.code)
        }
        let nsError = error as NSError
        return nsError.domain == NSPOSIXErrorDomain
            && [Int(ECONNRESET), Int(ECONNREFUSED), Int(EPIPE), Int(ECONNABORTED)].contains(nsError.code)
    }

    fileprivate func transportError(_ error: any Error, request: HTTPRequest) -> CouchError {
        if let couchError = error as? CouchError { return couchError }
        let description = Redaction.redact((error as NSError).localizedDescription)
        if (error as? URLError)?.code == .dataLengthExceedsMaximum {
            return CouchError(
                kind: .transport, message: description, method: request.method.rawValue, path: request.path,
                underlying: error)
        }
        return CouchError(
            kind: .transport, message: "The request got no response: \(description)",
            method: request.method.rawValue, path: request.path, underlying: error)
    }
}

/// Relays one streamed attempt: decides from the head whether the session must see the whole
/// response (a status it may retry or renew on), or whether the body can go straight to the
/// caller's receiver as it arrives.
///
/// `@unchecked Sendable`: `mode` is a `Locked`; the rest is immutable.
private final class StreamRelay: StreamReceiver, @unchecked Sendable {
    private enum Mode {
        case awaitingHead
        case buffering(HTTPResponse)
        case forwarding
    }

    /// Statuses the session may act on, so their bodies are read whole first.
    static let sessionStatuses: Set<Int> = [401, 403, 429, 500, 502, 503, 504]
    /// The most of a buffered (error) body kept.
    static let bufferLimit = 1 << 20

    private let session: InterceptableSession
    private let attempt: InterceptableSession.Attempt
    private let request: HTTPRequest
    private let generation: Int?
    private let started: Date
    private let receiver: any StreamReceiver
    private let mode = Locked(Mode.awaitingHead)

    init(
        session: InterceptableSession, attempt: InterceptableSession.Attempt, request: HTTPRequest, generation: Int?,
        started: Date, receiver: any StreamReceiver
    ) {
        self.session = session
        self.attempt = attempt
        self.request = request
        self.generation = generation
        self.started = started
        self.receiver = receiver
    }

    func receive(head: HTTPResponse) {
        if Self.sessionStatuses.contains(head.statusCode) {
            mode.withLock { $0 = .buffering(head) }
            return
        }
        mode.withLock { $0 = .forwarding }
        let arrived = DispatchTime.now().uptimeNanoseconds
        session.queue.async { [self] in
            let duration = arrived >= attempt.startedAt ? TimeInterval(arrived - attempt.startedAt) / 1e9 : 0
            session.report(.success(head), attempt: attempt, duration: duration)
        }
        guard !attempt.handle.isCancelled else { return }
        session.transcript?.log(response: head, for: request, elapsed: Date().timeIntervalSince(started))
        receiver.receive(head: head)
    }

    func receive(chunk: Data) {
        let forward = mode.withLock { mode -> Bool in
            switch mode {
            case .forwarding: return true
            case .buffering(var response):
                if response.body.count < Self.bufferLimit { response.body.append(chunk) }
                mode = .buffering(response)
                return false
            case .awaitingHead: return false
            }
        }
        if forward, !attempt.handle.isCancelled {
            receiver.receive(chunk: chunk)
            attempt.handle.holdWhilePausedBeforeTracking()
        }
    }

    func complete(error: (any Error)?) {
        let current = mode.current
        switch current {
        case .forwarding:
            // A cancelled request is completed by its handle, with the cancellation (and whether
            // the outcome is unknown), not with the transport's report of the closed connection.
            guard !attempt.handle.isCancelled, attempt.handle.claimCompletion() else { return }
            receiver.complete(error: error.map { session.transportError($0, request: request) })
        case .buffering(let response):
            let result: Result<HTTPResponse, any Error> = error.map { .failure($0) } ?? .success(response)
            session.queue.async { [self] in
                session.received(result, attempt: attempt, request: request, generation: generation, started: started)
            }
        case .awaitingHead:
            let result: Result<HTTPResponse, any Error> = .failure(error ?? URLError(.badServerResponse))
            session.queue.async { [self] in
                session.received(result, attempt: attempt, request: request, generation: generation, started: started)
            }
        }
    }
}
