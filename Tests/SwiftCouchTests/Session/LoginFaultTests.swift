import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

/// Faults on the login itself (`POST /_session`): the login is retried within the retry policy,
/// and when it gives up every operation waiting for it fails — none waits forever.
@Suite("Session: faults on the login", .ownThreads)
struct LoginFaultTests {
    static let admin = Credentials(username: "admin", password: "secret")

    /// A `FakeCookieServer` whose first `failures` logins get `fault` instead of an answer.
    static func client(
        server: FakeCookieServer, failures: Int, fault: SimulatedResponse, retries: Int = 4, concurrency: Int = 16
    ) -> (CouchDBClient, SimulatedTransport) {
        let remaining = Locked2(Array(repeating: fault, count: failures))
        let transport = SimulatedTransport(responder: { request in
            if request.path == "/_session", request.method == .post, let next = remaining.nextIfAny() {
                return next
            }
            return server.respond(request)
        })
        var configuration = Configuration()
        configuration.maximumConcurrentOperations = concurrency
        configuration.retryPolicy = RetryPolicy(maximumRetries: retries, initialDelay: 0.01, maximumDelay: 0.05)
        return (Simulation.client(transport: transport, credentials: admin, configuration: configuration), transport)
    }

    /// Runs `count` operations at once and waits for every completion (at most `seconds`).
    static func runMany(_ client: CouchDBClient, count: Int, seconds: Double = 20)
        -> [Result<CouchResponse<ServerInfo>, CouchError>]?
    {
        let results = EventLog<Result<CouchResponse<ServerInfo>, CouchError>>()
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<count {
            client.add(operation: GetServerInfoOperation()) { result in
                results.append(result)
                done.signal()
            }
        }
        return waitFor(done, count: count, seconds: seconds) ? results.all : nil
    }

    static let tooMany = SimulatedResponse.json(429, #"{"error":"too_many_requests","reason":"slow down"}"#)

    @Test("429 on the login: the login is retried and 50 queued operations then succeed, with one good login")
    func loginTooManyRequestsThenSuccess() throws {
        let server = FakeCookieServer()
        let (client, transport) = Self.client(server: server, failures: 3, fault: Self.tooMany)
        let results = try #require(Self.runMany(client, count: 50), "operations waited forever after a 429 on login")
        #expect(results.allSatisfy { (try? $0.get()) != nil })
        #expect(server.loginCount == 1)
        #expect(transport.requests.filter { $0.path == "/_session" }.count == 4)
    }

    @Test("429 on every login: every queued operation fails with the 429 once the retries run out")
    func loginTooManyRequestsForever() throws {
        let server = FakeCookieServer()
        let (client, transport) = Self.client(
            server: server, failures: 1_000, fault: Self.tooMany, retries: 3, concurrency: 64)
        let results = try #require(Self.runMany(client, count: 50), "operations waited forever after a 429 on login")
        let errors = results.compactMap { if case .failure(let error) = $0 { error } else { nil } }
        #expect(errors.count == 50)
        #expect(errors.allSatisfy { $0.statusCode == 429 })
        // All 50 wait for one login: it and its three retries, then nothing else is sent.
        #expect(transport.requests.filter { $0.path == "/_session" }.count == 4)
        #expect(transport.requests.filter { $0.path != "/_session" }.isEmpty)
    }

    @Test("A dropped connection and a 503 on the login are retried (repeating a login is harmless)")
    func loginConnectionLostAndUnavailable() throws {
        let server = FakeCookieServer()
        let dropped = SimulatedResponse.failure(URLError(.networkConnectionLost))
        let (client, _) = Self.client(server: server, failures: 2, fault: dropped)
        let results = try #require(Self.runMany(client, count: 10))
        #expect(results.allSatisfy { (try? $0.get()) != nil })

        let unavailable = SimulatedResponse.json(503, #"{"error":"service_unavailable","reason":"later"}"#)
        let (other, _) = Self.client(server: FakeCookieServer(), failures: 2, fault: unavailable)
        let more = try #require(Self.runMany(other, count: 10))
        #expect(more.allSatisfy { (try? $0.get()) != nil })
    }

    @Test(
        "429 with Retry-After nan, -5 or 1e300 on the login: retried on the backoff (or the cap), queued operations end"
    )
    func loginHostileRetryAfter() throws {
        for value in ["nan", "-5", "inf", "1e300"] {
            let server = FakeCookieServer()
            let fault = SimulatedResponse.json(
                429, #"{"error":"too_many_requests","reason":"slow down"}"#, headers: ["Retry-After": value])
            let (client, transport) = Self.client(server: server, failures: 2, fault: fault)
            // Before the fix, NaN survived the clamp and the retry's timer never fired: every
            // operation waited behind the login forever (bounded here at 10 s).
            let results = try #require(
                Self.runMany(client, count: 20, seconds: 10), "Retry-After: \(value): operations waited forever")
            #expect(results.allSatisfy { (try? $0.get()) != nil }, "Retry-After: \(value)")
            #expect(transport.requests.filter { $0.path == "/_session" }.count == 3, "Retry-After: \(value)")
            client.shutdown()
        }
    }
}
