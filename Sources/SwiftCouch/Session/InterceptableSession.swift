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
        var inFlight: (any Cancellable)?
        var timer: DispatchWorkItem?
    }
    private let state = Locked(State())
    private let completion: @Sendable (Result<HTTPResponse, CouchError>) -> Void
    private let cancelledError: CouchError

    init(request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, CouchError>) -> Void) {
        self.completion = completion
        self.cancelledError = .cancelled(method: request.method.rawValue, path: request.path)
    }

    /// Whether `cancel()` was called.
    public var isCancelled: Bool { state.current.cancelled }

    /// Cancels the request: the transport task or the pending retry timer is stopped and the
    /// completion receives a cancelled error, unless it has already been called.
    public func cancel() {
        let (inFlight, timer) = state.withLock { state -> ((any Cancellable)?, DispatchWorkItem?) in
            state.cancelled = true
            defer {
                state.inFlight = nil
                state.timer = nil
            }
            return (state.inFlight, state.timer)
        }
        inFlight?.cancel()
        timer?.cancel()
        finish(.failure(cancelledError))
    }

    /// Calls the completion, the first time only.
    func finish(_ result: Result<HTTPResponse, CouchError>) {
        let first = state.withLock { state -> Bool in
            defer { state.completed = true }
            return !state.completed
        }
        if first { completion(result) }
    }

    /// Records what to cancel; cancels it straight away when the handle is already cancelled.
    func track(inFlight: (any Cancellable)? = nil, timer: DispatchWorkItem? = nil) {
        let cancelled = state.withLock { state -> Bool in
            if !state.cancelled {
                state.inFlight = inFlight
                state.timer = timer
            }
            return state.cancelled
        }
        if cancelled {
            inFlight?.cancel()
            timer?.cancel()
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
    // @unchecked Sendable: `cookieState` and `waiting` are only read and written on `queue`
    // (asserted with dispatchPrecondition); everything else is immutable.

    /// The server URL, without credentials.
    public let baseURL: URL
    private let credentials: Credentials?
    private let configuration: Configuration
    private let transport: any Transport
    private let queue = DispatchQueue(label: "SwiftCouch.InterceptableSession")
    private let transcript: TranscriptLogger?
    private var cookieState = CookieSessionState()
    private var waiting: [Attempt] = []
    /// Injectable clock and randomness, for tests of the timing logic.
    var now: @Sendable () -> Date = { Date() }
    var random: @Sendable () -> Double = { Double.random(in: 0...1) }

    /// One request on its way, with its retry state.
    private final class Attempt: @unchecked Sendable {
        // @unchecked Sendable: mutated only on the session's queue.
        let request: HTTPRequest
        let isIdempotent: Bool
        let handle: RequestHandle
        /// The `POST /_session` of a login (its cookie is taken by `loginFinished`).
        let isLogin: Bool
        var retry: RetryState
        var authReplayed = false

        init(
            request: HTTPRequest, isIdempotent: Bool, policy: RetryPolicy, handle: RequestHandle, isLogin: Bool = false
        ) {
            self.request = request
            self.isLogin = isLogin
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
        self.credentials = credentials
        self.configuration = configuration
        self.transport =
            configuration.transport
            ?? URLSessionTransport(maximumConnectionsPerHost: max(configuration.maximumConcurrentOperations, 1))
        if configuration.logTranscripts, let handler = configuration.logHandler {
            transcript = TranscriptLogger(handler: handler, bodyLimit: configuration.transcriptBodyLimit)
        } else {
            transcript = nil
        }
    }

    /// Sends `request` with authentication and retries, and calls `completion` exactly once: with
    /// the server's response (whatever its status, once retries are over), or with a transport,
    /// authentication or cancellation error.
    /// - Parameter isIdempotent: whether repeating the request is harmless (for 5xx retries).
    @discardableResult
    public func send(
        _ request: HTTPRequest, isIdempotent: Bool,
        completion: @escaping @Sendable (Result<HTTPResponse, CouchError>) -> Void
    ) -> RequestHandle {
        let handle = RequestHandle(request: request, completion: completion)
        let attempt = Attempt(
            request: request, isIdempotent: isIdempotent, policy: configuration.retryPolicy, handle: handle)
        queue.async { self.authorize(attempt) }
        return handle
    }

    /// Forgets the session cookie and any refused login, so the next request logs in again
    /// (for example after the credentials were fixed on the server).
    public func resetAuthentication() {
        queue.async { self.cookieState.reset() }
    }

    /// Stops the transport.
    public func shutdown() {
        transport.shutdown()
    }

    // MARK: - Authentication

    private func authorize(_ attempt: Attempt) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !attempt.handle.isCancelled else { return }
        var request = attempt.request
        guard let credentials else {
            transmit(attempt, request: request, generation: nil)
            return
        }
        switch configuration.authentication {
        case .basic:
            let token = Data("\(credentials.username):\(credentials.password)".utf8).base64EncodedString()
            request.headers["Authorization"] = "Basic \(token)"
            transmit(attempt, request: request, generation: nil)
        case .cookie:
            let (action, startLogin) = cookieState.prepareRequest(now: now())
            switch action {
            case .send(let cookie, let generation):
                request.headers["Cookie"] = "AuthSession=\(cookie)"
                transmit(attempt, request: request, generation: generation)
            case .wait:
                waiting.append(attempt)
            case .fail:
                attempt.handle.finish(.failure(authenticationRefusedError(for: attempt.request)))
            }
            if startLogin { logIn(credentials) }
        }
    }

    private func authenticationRefusedError(for request: HTTPRequest) -> CouchError {
        CouchError(
            kind: .authentication,
            message: "The server refused the credentials for '\(credentials?.username ?? "")'; "
                + "no request is sent until resetAuthentication() is called.",
            method: request.method.rawValue, path: request.path)
    }

    private func logIn(_ credentials: Credentials) {
        dispatchPrecondition(condition: .onQueue(queue))
        var components = URLComponents(url: baseURL, resolvingAgainstBaseURL: false)!
        components.percentEncodedPath = CouchPath("_session").encoded
        components.query = nil
        let body = try? JSONSerialization.data(
            withJSONObject: ["name": credentials.username, "password": credentials.password], options: [.sortedKeys])
        let request = HTTPRequest(
            method: .post, url: components.url!,
            headers: ["Content-Type": "application/json", "Accept": "application/json"],
            body: body, timeout: configuration.requestTimeout)
        configuration.logHandler?(
            LogEvent(level: .info, message: "Logging in to \(baseURL) as \(credentials.username)"))
        let handle = RequestHandle(request: request) { [self] result in
            queue.async { self.loginFinished(result, request: request) }
        }
        let attempt = Attempt(
            request: request, isIdempotent: false, policy: configuration.retryPolicy, handle: handle, isLogin: true)
        transmit(attempt, request: request, generation: nil)
    }

    private func loginFinished(_ result: Result<HTTPResponse, CouchError>, request: HTTPRequest) {
        dispatchPrecondition(condition: .onQueue(queue))
        let failure: CouchError
        switch result {
        case .success(let response) where (200..<300).contains(response.statusCode):
            if let (cookie, maxAge) = authSessionCookie(in: response), !cookie.isEmpty {
                cookieState.loginSucceeded(cookie: cookie, maxAge: maxAge, now: now())
                configuration.logHandler?(LogEvent(level: .info, message: "Logged in to \(baseURL)"))
                let released = waiting
                waiting = []
                released.forEach(authorize)
                return
            }
            failure = CouchError(
                kind: .authentication, message: "POST /_session succeeded but set no AuthSession cookie.",
                statusCode: response.statusCode, method: "POST", path: request.path)
            cookieState.loginFailed(credentialsRejected: false)
        case .success(let response):
            let rejected = response.statusCode == 401 || response.statusCode == 403
            failure = CouchError.http(
                status: response.statusCode, body: response.body, method: "POST", path: request.path,
                kind: rejected ? .authentication : .http)
            cookieState.loginFailed(credentialsRejected: rejected)
        case .failure(let error):
            failure = error
            cookieState.loginFailed(credentialsRejected: false)
        }
        configuration.logHandler?(LogEvent(level: .error, message: "Logging in failed: \(failure)"))
        let failed = waiting
        waiting = []
        for attempt in failed {
            var error = failure
            error.method = attempt.request.method.rawValue
            error.path = attempt.request.path
            if error.kind == .authentication {
                error.message = "Logging in as '\(credentials?.username ?? "")' failed: \(failure.message)"
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
        transcript?.log(request: request)
        let started = Date()
        let inFlight = transport.send(request) { [self] result in
            queue.async {
                self.received(result, attempt: attempt, request: request, generation: generation, started: started)
            }
        }
        attempt.handle.track(inFlight: inFlight)
    }

    private func received(
        _ result: Result<HTTPResponse, any Error>, attempt: Attempt, request: HTTPRequest, generation: Int?,
        started: Date
    ) {
        dispatchPrecondition(condition: .onQueue(queue))
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
            attempt.handle.finish(.failure(transportError(error, request: request)))
        case .success(let response):
            transcript?.log(response: response, for: request, elapsed: Date().timeIntervalSince(started))
            if credentials != nil, configuration.authentication == .cookie, !attempt.isLogin,
                let (cookie, maxAge) = authSessionCookie(in: response), !cookie.isEmpty
            {
                cookieState.cookieRefreshed(cookie: cookie, maxAge: maxAge, now: now())
            }
            if let generation, isSessionRejection(response), !attempt.authReplayed, let credentials {
                attempt.authReplayed = true
                let (action, startLogin) = cookieState.requestRejected(usedGeneration: generation)
                switch action {
                case .resend: authorize(attempt)
                case .wait: waiting.append(attempt)
                }
                if startLogin { logIn(credentials) }
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
            attempt.handle.finish(.success(response))
        }
    }

    private func schedule(_ attempt: Attempt, after delay: TimeInterval, reason: String) {
        configuration.logHandler?(
            LogEvent(
                level: .info,
                message: "Retrying \(attempt.request) after \(reason) in \(String(format: "%.3f", delay)) s "
                    + "(retry \(attempt.retry.retries) of \(attempt.retry.policy.maximumRetries))"))
        let item = DispatchWorkItem { [self] in authorize(attempt) }
        attempt.handle.track(timer: item)
        queue.asyncAfter(deadline: .now() + delay, execute: item)
    }

    /// 401, or Cloudant's 403 `credentials_expired`: the session cookie is no longer good.
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

    private func transportError(_ error: any Error, request: HTTPRequest) -> CouchError {
        if let couchError = error as? CouchError { return couchError }
        let description = Redaction.redact((error as NSError).localizedDescription)
        return CouchError(
            kind: .transport, message: "The request got no response: \(description)",
            method: request.method.rawValue, path: request.path, underlying: error)
    }
}
