import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

extension InterceptableSession {
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

        /// Whether requests carry an IAM bearer token (`Authorization`) rather than a cookie.
        var isIAM: Bool {
            if case .iam = self { return true }
            return false
        }

        /// Who is logging in, for messages (never a secret).
        var principal: String {
            switch self {
            case .cookie(let credentials): return "'\(credentials.username)'"
            case .iam: return "the IAM API key"
            case .none, .fixedHeader: return "the configured credentials"
            }
        }
    }

    func authorize(_ attempt: Attempt) {
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
                let (name, prefix) = scheme.isIAM ? ("Authorization", "Bearer ") : ("Cookie", "AuthSession=")
                if credentialHeader?.credential != credential {
                    credentialHeader = CredentialHeader(credential: credential, value: prefix + credential)
                }
                request.headers[name] = credentialHeader?.value
                transmit(attempt, request: request, generation: generation)
            case .wait:
                waiting.append(attempt)
            case .fail:
                attempt.handle.finish(.failure(authenticationRefusedError(for: attempt.request)))
            }
            if startLogin { logIn() }
        }
    }

    func authenticationRefusedError(for request: HTTPRequest) -> CouchError {
        CouchError(
            kind: .authentication,
            message: "The server refused \(scheme.principal); "
                + "no request is sent until resetAuthentication() is called.",
            method: request.method.rawValue, path: request.path)
    }

    /// `_session` under the base URL's path (`https://host/couchdb/_session`): the login and the
    /// session check go there.
    var sessionURL: URL {
        (try? PreparedRequest.url(base: serverBase, path: CouchPath("_session"), parameters: []).url) ?? baseURL
    }

    /// Starts the one login (cookie) or token request (IAM) in flight.
    func logIn() {
        dispatchPrecondition(condition: .onQueue(queue))
        var request: HTTPRequest
        switch scheme {
        case .cookie(let credentials):
            // Under the base URL's path, as every request is (`https://host/couchdb/_session`).
            let url = sessionURL
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
        applyBounds(to: &request)
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
    func credential(fromLogin response: HTTPResponse) -> (String, TimeInterval?)? {
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

    func loginFinished(_ result: Result<HTTPResponse, CouchError>, request: HTTPRequest) {
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
            let expected = { if case .iam = scheme { "access_token" } else { "AuthSession cookie" } }()
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

    func authSessionCookie(in response: HTTPResponse) -> (String, TimeInterval?)? {
        for value in response.headers.values("Set-Cookie") {
            if let parsed = SetCookieParser.authSession(in: value) { return (parsed.value, parsed.maxAge) }
        }
        return nil
    }
}
