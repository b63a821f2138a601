import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

/// A tiny fake of CouchDB's cookie authentication, for driving the session without a network.
final class FakeCookieServer: @unchecked Sendable {
    // @unchecked Sendable: all state is behind `lock`.
    private let lock = NSLock()
    private var validCookie: String?
    private var cookieNumber = 0
    private(set) var logins = 0
    private(set) var rejected = 0
    private(set) var checks = 0
    /// Paths that answer 401 even with a valid cookie (as CouchDB's admin-only endpoints do for a
    /// user who is not an admin).
    private var forbiddenPaths: Set<String> = []
    let password: String
    let maxAge: Int

    init(password: String = "secret", maxAge: Int = 600) {
        self.password = password
        self.maxAge = maxAge
    }

    /// Makes every cookie issued so far invalid.
    func expireSessions() {
        lock.lock()
        validCookie = nil
        lock.unlock()
    }

    var loginCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return logins
    }

    var checkCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return checks
    }

    func forbid(_ path: String) {
        lock.lock()
        forbiddenPaths.insert(path)
        lock.unlock()
    }

    func respond(_ request: HTTPRequest) -> SimulatedResponse {
        lock.lock()
        defer { lock.unlock() }
        if request.path == "/_session", request.method == .post {
            logins += 1
            let body = request.body.flatMap { try? JSONDecoder().decode([String: String].self, from: $0) }
            guard body?["password"] == password else {
                return .json(
                    401, #"{"error":"unauthorized","reason":"Name or password is incorrect."}"#,
                    headers: ["Set-Cookie": "AuthSession=; Version=1; Max-Age=600; Path=/; HttpOnly"])
            }
            cookieNumber += 1
            validCookie = "cookie\(cookieNumber)"
            return .json(
                200, #"{"ok":true,"name":"admin","roles":["_admin"]}"#,
                headers: ["Set-Cookie": "AuthSession=\(validCookie!); Version=1; Max-Age=\(maxAge); Path=/; HttpOnly"])
        }
        let authenticated = validCookie.map { request.headers["Cookie"] == "AuthSession=\($0)" } ?? false
        if request.path == "/_session", request.method == .get {
            checks += 1
            return .json(
                200,
                authenticated
                    ? #"{"ok":true,"userCtx":{"name":"admin","roles":[]}}"#
                    : #"{"ok":true,"userCtx":{"name":null,"roles":[]}}"#)
        }
        if authenticated, forbiddenPaths.contains(request.path) {
            return .json(401, #"{"error":"unauthorized","reason":"You are not a server admin."}"#)
        }
        guard let validCookie, request.headers["Cookie"] == "AuthSession=\(validCookie)" else {
            rejected += 1
            return .json(401, #"{"error":"unauthorized","reason":"You are not authorized to access this db."}"#)
        }
        return .json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#)
    }
}

@Suite("InterceptableSession: 429 backoff, cookie sessions, redaction", .ownThreads)
struct SessionTests {
    static let admin = Credentials(username: "admin", password: "secret")

    static func fastRetries(_ retries: Int = 4) -> Configuration {
        var configuration = Configuration()
        configuration.retryPolicy = RetryPolicy(maximumRetries: retries, initialDelay: 0.01, maximumDelay: 0.2)
        return configuration
    }

    @Test("429 is retried with growing delays, Retry-After honoured, then succeeds; the body is sent again unchanged")
    func retry429ThenSuccess() throws {
        let delays = EventLog<Double>()
        var configuration = Self.fastRetries()
        configuration.logHandler = { event in
            // "Retrying PUT /db/doc after HTTP 429 in 0.012 s (retry 1 of 4)"
            if let range = event.message.range(of: #"in [0-9.]+ s"#, options: .regularExpression) {
                delays.append(Double(event.message[range].dropFirst(3).dropLast(2))!)
            }
        }
        let tooMany = SimulatedResponse.json(429, #"{"error":"too_many_requests","reason":"slow down"}"#)
        let withRetryAfter = SimulatedResponse.json(
            429, #"{"error":"too_many_requests","reason":"slow down"}"#, headers: ["Retry-After": "0.15"])
        let run = Simulation.run(
            PutDocumentOperation(database: "db", id: "doc", document: ["a": 1] as [String: Int]),
            responses: [
                tooMany, tooMany, tooMany, withRetryAfter, .json(201, #"{"ok":true,"id":"doc","rev":"1-abc"}"#),
            ],
            configuration: configuration)
        #expect(try run.result.get().value.rev == "1-abc")
        #expect(run.requests.count == 5)
        #expect(Set(run.requests.map { $0.body }).count == 1)
        let recorded = delays.all
        #expect(recorded.count == 4)
        // Exponential with equal jitter: retry n waits in [base/2, base] with base = 0.01 * 2^(n-1).
        for (n, delay) in recorded.prefix(3).enumerated() {
            let base = 0.01 * pow(2, Double(n))
            #expect(delay >= base / 2 - 0.001 && delay <= base + 0.001)
        }
        #expect(recorded[3] == 0.15)  // Retry-After, under the 0.2 s cap
    }

    @Test("When retries run out the operation fails with the 429 as a CouchError")
    func retriesExhausted() {
        let tooMany = SimulatedResponse.json(429, #"{"error":"too_many_requests","reason":"slow down"}"#)
        let run = Simulation.run(
            GetServerInfoOperation(), responses: Array(repeating: tooMany, count: 3), configuration: Self.fastRetries(2)
        )
        #expect(run.requests.count == 3)
        #expect(run.error?.kind == .http)
        #expect(run.error?.statusCode == 429)
        #expect(run.error?.error == "too_many_requests")
    }

    @Test("503 is retried for a GET when enabled, never for a POST that creates a document")
    func serverErrorsOnlyForSafeRequests() {
        var configuration = Self.fastRetries()
        configuration.retryPolicy.retryServerErrors = true
        let unavailable = SimulatedResponse.json(503, #"{"error":"service_unavailable","reason":"later"}"#)
        let get = Simulation.run(
            GetServerInfoOperation(),
            responses: [
                unavailable, .failure(URLError(.networkConnectionLost)),
                .json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#),
            ],
            configuration: configuration)
        #expect(get.value?.version == "3.5.0")
        #expect(get.requests.count == 3)

        struct PostDocument: JSONOperation {
            typealias Response = DocumentWriteResponse
            var endpoint: CouchPath { CouchPath("db") }
            var method: HTTPMethod { .post }
            var data: Data? { Data(#"{"a":1}"#.utf8) }
        }
        let post = Simulation.run(
            PostDocument(), responses: [unavailable, .json(201, #"{"ok":true,"id":"x","rev":"1-a"}"#)],
            configuration: configuration)
        #expect(post.requests.count == 1)
        #expect(post.error?.statusCode == 503)
    }

    @Test("Cookie auth: one login on first use, the cookie sent on every request")
    func firstUseLogin() {
        let server = FakeCookieServer()
        let transport = SimulatedTransport(responder: server.respond)
        let client = Simulation.client(transport: transport, credentials: Self.admin)
        for _ in 0..<3 {
            #expect(client.executeAndWait(GetServerInfoOperation()).map(\.statusCode) == .success(200))
        }
        #expect(server.loginCount == 1)
        let requests = transport.requests
        #expect(requests.first?.path == "/_session")
        #expect(requests.first?.bodyJSON == ["name": "admin", "password": "secret"])
        #expect(requests.dropFirst().allSatisfy { $0.headers["Cookie"] == "AuthSession=cookie1" })
    }

    @Test("Expired cookie: N concurrent operations share ONE renewal and all succeed")
    func sharedRenewal() throws {
        let server = FakeCookieServer()
        let transport = SimulatedTransport(responder: server.respond)
        var configuration = Configuration()
        configuration.maximumConcurrentOperations = 16
        let client = Simulation.client(transport: transport, credentials: Self.admin, configuration: configuration)
        #expect(client.executeAndWait(GetServerInfoOperation()).map(\.statusCode) == .success(200))
        #expect(server.loginCount == 1)

        server.expireSessions()
        let count = 40
        let results = EventLog<Result<CouchResponse<ServerInfo>, CouchError>>()
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<count {
            client.add(operation: GetServerInfoOperation()) { result in
                results.append(result)
                done.signal()
            }
        }
        #expect(waitFor(done, count: count))
        #expect(results.count == count)
        #expect(results.all.allSatisfy { (try? $0.get().statusCode) == 200 })
        #expect(server.loginCount == 2)
    }

    @Test("Wrong password: every waiting operation fails with an authentication error, one login, no loop")
    func wrongPassword() {
        let server = FakeCookieServer(password: "right")
        let transport = SimulatedTransport(responder: server.respond)
        var configuration = Configuration()
        configuration.maximumConcurrentOperations = 8
        let client = Simulation.client(transport: transport, credentials: Self.admin, configuration: configuration)
        let results = EventLog<Result<CouchResponse<ServerInfo>, CouchError>>()
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<20 {
            client.add(operation: GetServerInfoOperation()) { result in
                results.append(result)
                done.signal()
            }
        }
        #expect(waitFor(done, count: 20))
        let errors = results.all.compactMap { if case .failure(let e) = $0 { e } else { nil } }
        #expect(errors.count == 20)
        #expect(errors.allSatisfy { $0.kind == .authentication })
        #expect(server.loginCount == 1)
        #expect(
            errors.allSatisfy {
                !String(describing: $0).contains("secret") && !String(reflecting: $0).contains("secret")
            })
        #expect(transport.requests.count == 1)
    }

    @Test("Cloudant's 403 credentials_expired renews the session once and replays the request")
    func credentialsExpired403() {
        let login = SimulatedResponse.json(
            200, #"{"ok":true}"#, headers: ["Set-Cookie": "AuthSession=first; Max-Age=600; Path=/"])
        let relogin = SimulatedResponse.json(
            200, #"{"ok":true}"#, headers: ["Set-Cookie": "AuthSession=second; Max-Age=600; Path=/"])
        let expired = SimulatedResponse.json(403, #"{"error":"credentials_expired","reason":"Session expired"}"#)
        let run = Simulation.run(
            GetServerInfoOperation(),
            responses: [login, expired, relogin, .json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#)],
            credentials: Self.admin)
        #expect(run.value?.version == "3.5.0")
        #expect(run.requests.map(\.path) == ["/_session", "/", "/_session", "/"])
        #expect(run.requests.last?.headers["Cookie"] == "AuthSession=second")
    }

    @Test("A request rejected again after the replay fails instead of looping")
    func replayOnlyOnce() {
        let login = SimulatedResponse.json(200, #"{"ok":true}"#, headers: ["Set-Cookie": "AuthSession=a; Path=/"])
        let denied = SimulatedResponse.json(401, #"{"error":"unauthorized","reason":"no"}"#)
        let run = Simulation.run(
            GetServerInfoOperation(), responses: [login, denied, login, denied], credentials: Self.admin)
        #expect(run.requests.count == 4)
        #expect(run.error?.statusCode == 401)
    }

    @Test("A refreshed AuthSession cookie from any response is used from then on")
    func refreshedCookie() {
        let refreshed = SimulatedResponse.json(
            200, #"{"couchdb":"Welcome","version":"3.5.0"}"#,
            headers: ["Set-Cookie": "AuthSession=fresh; Version=1; Max-Age=600; Path=/; HttpOnly"])
        let script = Locked2([
            SimulatedResponse.json(200, #"{"ok":true}"#, headers: ["Set-Cookie": "AuthSession=old; Max-Age=600"]),
            refreshed,
            .json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#),
        ])
        let transport = SimulatedTransport(responder: { _ in script.next() })
        let client = Simulation.client(transport: transport, credentials: Self.admin)
        _ = client.executeAndWait(GetServerInfoOperation())
        _ = client.executeAndWait(GetServerInfoOperation())
        #expect(transport.requests.map { $0.headers["Cookie"] } == [nil, "AuthSession=old", "AuthSession=fresh"])
    }

    @Test("Basic authentication sends the Authorization header and never logs in")
    func basicAuth() {
        var configuration = Configuration()
        configuration.authentication = .basic
        let run = Simulation.run(
            GetServerInfoOperation(), response: .json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#),
            credentials: Self.admin, configuration: configuration)
        #expect(run.requests.count == 1)
        #expect(run.request?.headers["Authorization"] == "Basic " + Data("admin:secret".utf8).base64EncodedString())
    }

    @Test("The transcript logger shows requests and responses with every secret redacted")
    func transcriptRedaction() {
        let lines = EventLog<String>()
        var configuration = Configuration()
        configuration.logTranscripts = true
        configuration.logHandler = { lines.append($0.message) }
        let server = FakeCookieServer()
        let transport = SimulatedTransport(responder: server.respond)
        let client = Simulation.client(transport: transport, credentials: Self.admin, configuration: configuration)
        _ = client.executeAndWait(
            PutDocumentOperation(
                database: "_users", id: "org.couchdb.user:bob",
                document: ["name": "bob", "password": "hunter2", "type": "user"] as [String: String]))
        let text = lines.all.joined(separator: "\n")
        #expect(text.contains("--> POST http://couchdb.invalid:5984/_session"))
        #expect(text.contains("--> PUT http://couchdb.invalid:5984/_users/org.couchdb.user%3Abob"))
        #expect(text.contains("<-- 200 POST /_session"))
        #expect(text.contains("<redacted>"))
        for secret in ["secret", "hunter2", "cookie1"] {
            #expect(!text.contains(secret), "transcript leaks \(secret)")
        }
        var basic = configuration
        basic.authentication = .basic
        let basicLines = EventLog<String>()
        basic.logHandler = { basicLines.append($0.message) }
        _ = Simulation.run(
            GetServerInfoOperation(), response: .json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#),
            credentials: Self.admin, configuration: basic)
        let basicText = basicLines.all.joined(separator: "\n")
        #expect(basicText.contains("Authorization: <redacted>"))
        #expect(!basicText.contains(Data("admin:secret".utf8).base64EncodedString()))
    }

    @Test("Logging in as someone else through CreateSessionOperation does not replace the client's cookie")
    func explicitSessionKeepsClientCookie() {
        let transport = SimulatedTransport(responses: [
            .json(200, #"{"ok":true}"#, headers: ["Set-Cookie": "AuthSession=mine; Max-Age=600; Path=/"]),
            .json(
                200, #"{"ok":true,"name":"bob","roles":[]}"#,
                headers: ["Set-Cookie": "AuthSession=bobs; Max-Age=600; Path=/"]),
            .json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#),
        ])
        let client = Simulation.client(transport: transport, credentials: Self.admin)
        _ = client.executeAndWait(CreateSessionOperation(credentials: Credentials(username: "bob", password: "pw")))
        _ = client.executeAndWait(GetServerInfoOperation())
        #expect(transport.requests.map(\.path) == ["/_session", "/_session", "/"])
        #expect(transport.requests.last?.headers["Cookie"] == "AuthSession=mine")
    }

    @Test("A client used after shutdown() fails with a clear error instead of crashing")
    func afterShutdown() async {
        let client = CouchDBClient(url: URL(string: "http://127.0.0.1:1")!)
        client.shutdown()
        client.shutdown()
        do {
            _ = try await client.execute(GetServerInfoOperation())
            Issue.record("expected an error")
        } catch {
            #expect(error.kind == .cancelled)  // so that loops which resume after failures end
            #expect(error.message.contains("shut down"))
            #expect(!error.isOutcomeUnknown)
        }
    }

    @Test("Descriptions of credentials, clients' URLs and errors never contain the password")
    func noSecretsInDescriptions() {
        #expect(!String(describing: Self.admin).contains("secret"))
        #expect(!String(reflecting: Self.admin).contains("secret"))
        let client = CouchDBClient(url: URL(string: "http://admin:secret@127.0.0.1:1")!)
        #expect(!client.url.absoluteString.contains("secret"))
        var configuration = Configuration()
        configuration.retryPolicy = .disabled
        let failing = CouchDBClient(url: URL(string: "http://admin:secret@127.0.0.1:1")!, configuration: configuration)
        let result = failing.executeAndWait(GetServerInfoOperation())
        guard case .failure(let error) = result else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.kind == .transport || error.kind == .authentication)
        #expect(!String(describing: error).contains("secret"))
        #expect(!String(reflecting: error).contains("secret"))
    }
}

/// A thread-safe script of responses for a responder closure.
final class Locked2: @unchecked Sendable {
    // @unchecked Sendable: `items` is only touched under `lock`.
    private let lock = NSLock()
    private var items: [SimulatedResponse]
    init(_ items: [SimulatedResponse]) { self.items = items }
    func next() -> SimulatedResponse {
        lock.lock()
        defer { lock.unlock() }
        return items.isEmpty ? .failure(SimulationError("script exhausted")) : items.removeFirst()
    }
    /// The next scripted response, or nil when the script is exhausted.
    func nextIfAny() -> SimulatedResponse? {
        lock.lock()
        defer { lock.unlock() }
        return items.isEmpty ? nil : items.removeFirst()
    }
}
