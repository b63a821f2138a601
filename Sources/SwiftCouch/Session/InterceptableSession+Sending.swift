import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

extension InterceptableSession {
    // MARK: - Sending and retrying

    func transmit(_ attempt: Attempt, request: HTTPRequest, generation: Int?) {
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
    func adapt(_ attempt: Attempt, request: HTTPRequest, generation: Int?) {
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
    func dispatch(_ attempt: Attempt, request: HTTPRequest, generation: Int?) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let transmission = attempt.handle.beginTransmission() else { return }
        if !configuration.monitors.isEmpty {
            let event = attempt.event()
            for monitor in configuration.monitors { monitor.requestStarted(event) }
        }
        attempt.transmissions += 1
        transcript?.log(request: request)
        if reportsAttempts { attempt.startedAt = DispatchTime.now().uptimeNanoseconds }
        // Read only by the transcript (which logs how long the answer took).
        let started = transcript == nil ? Date.distantPast : Date()
        if let receiver = attempt.streamReceiver {
            let relay = StreamRelay(
                session: self, attempt: attempt, request: request, generation: generation, started: started,
                receiver: receiver)
            attempt.handle.track(inFlight: transport.stream(request, receiver: relay), transmission: transmission)
            return
        }
        // The transport is handed the request outside the queue when it can be (the send runs
        // nothing of the session's state; waking a connection's thread is a system call). A
        // cancellation in between is still seen: `track` cancels what it is given then.
        outsideQueue { [self] in
            let inFlight = transport.send(request) { [self] result in
                let work: @Sendable () -> Void = {
                    self.received(
                        result, attempt: attempt, request: request, generation: generation, started: started)
                }
                // On a socket connection's thread (SwiftCouch's own, holding no one else's lock) the
                // session's state is updated right there, and the operation's completion
                // (processResponse) runs there too, outside the queue: no hop. Any other transport's
                // thread (URLSession's delegate queue) only queues the work, as it always did.
                if ThreadRole.isConnectionThread {
                    enterQueue(work)
                } else {
                    queue.async(execute: work)
                }
            }
            attempt.handle.track(inFlight: inFlight, transmission: transmission)
        }
    }

    func received(
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
        report(result, attempt: attempt)
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
            complete(attempt.handle, .failure(failure))
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

    /// Whether attempts are told to monitors or the log handler (else their times are not read).
    var reportsAttempts: Bool { !configuration.monitors.isEmpty || configuration.logHandler != nil }

    /// Tells the monitors and the log how an attempt ended. `arrivedAt`: when the answer arrived
    /// (`DispatchTime`'s uptime nanoseconds); nil: now.
    func report(_ result: Result<HTTPResponse, any Error>, attempt: Attempt, arrivedAt: UInt64? = nil) {
        dispatchPrecondition(condition: .onQueue(queue))
        // Nothing to tell: nothing to build, and no clock read (this runs for every response).
        guard reportsAttempts else { return }
        let duration = elapsedSeconds(
            since: attempt.startedAt, until: arrivedAt ?? DispatchTime.now().uptimeNanoseconds)
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
    func deliver(_ response: HTTPResponse, attempt: Attempt, request: HTTPRequest) {
        dispatchPrecondition(condition: .onQueue(queue))
        if (300...399).contains(response.statusCode), response.statusCode != 304 {
            // Never followed: it could carry credentials to another origin, or replay a write elsewhere.
            complete(
                attempt.handle,
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
        if response.statusCode >= 400, request.method != .get, request.method != .head,
            attempt.handle.hadUncertainAttempt
        {
            // An earlier attempt whose answer was lost may have carried the write out, whatever this
            // one was answered (a 409 with this very write, a 401 or 503 on the resend).
            var failure = CouchError.http(
                status: response.statusCode, body: response.body, method: request.method.rawValue,
                path: request.path)
            failure.isOutcomeUnknown = true
            failure.recordRetryAfter(from: response.headers)
            failure.message +=
                response.statusCode == 409
                ? " An earlier attempt of this request was sent and its answer lost, so the conflict may be"
                    + " with this write itself: read the document to know whether it was carried out."
                : " An earlier attempt of this request was sent and its answer lost, so it may have been"
                    + " carried out: read the document to know."
            complete(attempt.handle, .failure(failure))
            return
        }
        complete(attempt.handle, .success(response))
    }

    /// A request whose rejection (401) waits for the check of its cookie.
    struct Rejected {
        let attempt: Attempt
        let request: HTTPRequest
        let response: HTTPResponse
    }

    /// Asks the server whether the cookie (or token) of `generation` is still alive: `GET /_session`
    /// answers with the user's name while it is. Cheap (no password hashing, no login rate limit),
    /// and sent once however many requests wait for it.
    func checkSession(generation: Int) {
        dispatchPrecondition(condition: .onQueue(queue))
        var request = HTTPRequest(
            method: .get,
            url: sessionURL,
            headers: ["Accept": "application/json"], timeout: configuration.requestTimeout)
        if let credential = sessionState.cookie {
            if case .iam = scheme {
                request.headers["Authorization"] = "Bearer \(credential)"
            } else {
                request.headers["Cookie"] = "AuthSession=\(credential)"
            }
        }
        applyBounds(to: &request)
        let handle = RequestHandle(request: request) { [self] result in
            queue.async { self.sessionChecked(result, generation: generation) }
        }
        // Sent as it is, like a login (not parked behind the session it checks), and retried as one.
        var policy = configuration.retryPolicy
        policy.retryServerErrors = true
        let attempt = Attempt(request: request, isIdempotent: true, policy: policy, handle: handle, isLogin: true)
        transmit(attempt, request: request, generation: nil)
    }

    func sessionChecked(_ result: Result<HTTPResponse, CouchError>, generation: Int) {
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

    func schedule(_ attempt: Attempt, after delay: TimeInterval, reason: String) {
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
    func isSessionRejection(_ response: HTTPResponse) -> Bool {
        if response.statusCode == 401 { return true }
        guard response.statusCode == 403 else { return false }
        let error = CouchError.http(status: 403, body: response.body, method: nil, path: nil)
        return error.error == "credentials_expired"
    }

    func isConnectionLoss(_ error: any Error) -> Bool {
        if let urlError = error as? URLError {
            return [.networkConnectionLost, .cannotConnectToHost, .notConnectedToInternet, .badServerResponse]
                .contains(urlError.code)
        }
        let nsError = error as NSError
        return nsError.domain == NSPOSIXErrorDomain
            && [Int(ECONNRESET), Int(ECONNREFUSED), Int(EPIPE), Int(ECONNABORTED)].contains(nsError.code)
    }

    func transportError(_ error: any Error, request: HTTPRequest) -> CouchError {
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
