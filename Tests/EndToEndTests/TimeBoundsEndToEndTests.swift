import CouchTestServer
import Foundation
import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Issue 24's time and memory bounds over real sockets: a response's deadline against peers that
/// trickle bytes or send interim responses forever, `Retry-After` values that are not numbers, and
/// gzip bombs streamed at the socket transport.
///
/// Every call here ends within a bound that follows from its timeouts (3× the deadline + 2 s, far
/// below what the old behaviour took: a trickled body's 38 s, or forever); past the bound the
/// request is cancelled and the test fails, so none of them can hang.
@Suite("Time bounds: deadlines, hostile Retry-After, decompression ratio", .timingSensitive)
struct TimeBoundsEndToEndTests {
    // MARK: - The socket transport's deadline

    @Test("A body trickled one byte at a time fails at the request's deadline, and the connection is not pooled")
    func trickledBodyEndsAtTheDeadline() async throws {
        try await withDeadlineServer { server, transport in
            server.faults.failNext(with: .trickleBody(seconds: 0.2), matching: .path("/len/190"))
            // Idle timeout 1 s: never trips (a byte every 0.2 s). Before the fix this took 38 s.
            let request = server.request("/len/190", timeout: 1, deadline: 1.5)
            let (result, _) = try #require(await send(request, over: transport, bound: 6.5))
            expectDeadlineError(result, deadline: 1.5)
            let opened = transport.statistics.connectionsOpened
            let after = try await transport.response(for: server.request("/len/190", timeout: 5, deadline: 5))
            #expect(after.body == DeadlineHandler.bytes(190))
            #expect(transport.statistics.connectionsOpened == opened + 1)  // the timed-out one was closed
        }
    }

    @Test("A head trickled one byte at a time fails at the request's deadline")
    func trickledHeadEndsAtTheDeadline() async throws {
        try await withDeadlineServer { server, transport in
            // A head of about 130 bytes over 60 s: a byte every 0.5 s or so, under the idle timeout.
            server.faults.failNext(with: .slowHead(seconds: 60), matching: .path("/len/10"))
            let request = server.request("/len/10", timeout: 1.5, deadline: 2)
            let (result, _) = try #require(await send(request, over: transport, bound: 8))
            expectDeadlineError(result, deadline: 2)
        }
    }

    @Test("102 Processing sent forever fails at the deadline; a few of them before the answer are skipped")
    func interimResponses() async throws {
        try await withDeadlineServer { server, transport in
            server.faults.failNext(with: .interim(seconds: 0.2), matching: .path("/len/10"))
            let request = server.request("/len/10", timeout: 1, deadline: 1.5)
            let (result, _) = try #require(await send(request, over: transport, bound: 6.5))
            expectDeadlineError(result, deadline: 1.5)

            server.faults.failNext(with: .interim(seconds: 0.1, count: 3), matching: .path("/len/10"))
            let answered = try await transport.response(for: server.request("/len/10", timeout: 5, deadline: 5))
            #expect(answered.statusCode == 200)
            #expect(answered.body == DeadlineHandler.bytes(10))
        }
    }

    @Test("An answer slower than the deadline fails at the deadline even with a longer idle timeout")
    func deadlineShorterThanTheIdleTimeout() async throws {
        try await withDeadlineServer { server, transport in
            server.faults.failNext(with: .delay(seconds: 4), matching: .path("/len/10"))
            let request = server.request("/len/10", timeout: 10, deadline: 1)
            let (result, _) = try #require(await send(request, over: transport, bound: 5))
            expectDeadlineError(result, deadline: 1)
        }
    }

    @Test("A stream's deadline bounds its head only: a body slower than the deadline arrives, interim forever fails")
    func streamDeadlineCoversTheHead() async throws {
        try await withDeadlineServer { server, transport in
            // 20 bytes, one every 0.1 s: 2 s of body, four times the deadline, under the idle timeout.
            server.faults.failNext(with: .trickleBody(seconds: 0.1), matching: .path("/len/20"))
            let slowBody = StreamOutcome()
            _ = transport.stream(server.request("/len/20", timeout: 1, deadline: 0.5), receiver: slowBody)
            let (ended, _) = try #require(await slowBody.waitForEnd(bound: 8))
            #expect(ended == nil, "\(String(describing: ended))")
            #expect(slowBody.body == DeadlineHandler.bytes(20))

            server.faults.failNext(with: .interim(seconds: 0.2), matching: .path("/len/10"))
            let noHead = StreamOutcome()
            let task = transport.stream(server.request("/len/10", timeout: 1, deadline: 1.5), receiver: noHead)
            guard let (error, _) = await noHead.waitForEnd(bound: 6.5) else {
                task.cancel()
                Issue.record("the stream waited for its head past its deadline")
                return
            }
            expectDeadlineError(.failure(error ?? URLError(.unknown)), deadline: 1.5)
        }
    }

    @Test("A 503 to a stream whose body trickles (read whole by the session) ends at the deadline")
    func streamedErrorBodyEndsAtTheDeadline() async throws {
        let server = try TestServer.start(handler: DeadlineHandler())
        defer { server.stop() }
        var configuration = Configuration()
        configuration.requestTimeout = 1.5
        configuration.transport = SocketTransport()
        let client = CouchDBClient(url: server.url, configuration: configuration)
        defer { client.shutdown() }
        // 190 bytes of a 503's body at 0.2 s a byte: 38 s, which the session would wait for whole.
        server.faults.failNext(with: .trickleBody(seconds: 0.2), matching: .path("/unavailable/190"))
        let outcome = StreamOutcome()
        let request = HTTPRequest(method: .get, url: server.url(path: "/unavailable/190"), timeout: 1.5)
        let handle = client.session.stream(request, isIdempotent: true, receiver: outcome)
        guard let (error, _) = await outcome.waitForEnd(bound: 6.5) else {
            handle.cancel()
            Issue.record("the trickled 503 was read past its deadline")
            return
        }
        let couchError = error as? CouchError
        #expect(couchError?.kind == .transport, "\(String(describing: error))")
        #expect(couchError?.message.contains("deadline of 1.5 s") == true, "\(String(describing: error))")
        #expect(outcome.body.isEmpty)
    }

    // MARK: - The socket transport's decompression ratio

    @Test("A gzip bomb (a whole body) fails once it inflates past maximumDecompressionRatio")
    func gzipBombWhole() async throws {
        try await withDeadlineServer { server, transport in
            // 64 gzip members of a mebibyte of zeros each: about 64 KiB that inflate to 64 MiB.
            var request = server.request("/bomb/64", timeout: 30, deadline: nil)
            request.maximumResponseBodySize = nil
            request.maximumDecompressionRatio = 200
            do {
                _ = try await transport.response(for: request)
                Issue.record("a gzip bomb was inflated whole")
            } catch let error as URLError {
                #expect(error.code == .dataLengthExceedsMaximum, "\(error)")
                #expect(error.localizedDescription.contains("maximumDecompressionRatio"), "\(error)")
                #expect(error.localizedDescription.contains("200"), "\(error)")
            }
            // No ratio: the same body inflates whole.
            var unlimited = server.request("/bomb/4", timeout: 30, deadline: nil)
            unlimited.maximumDecompressionRatio = nil
            #expect(try await transport.response(for: unlimited).body.count == 4 << 20)
            // Ordinary gzip (a few times smaller than its text) passes the default ratio.
            var text = server.request("/text/3000000", timeout: 30, deadline: nil)
            text.maximumDecompressionRatio = Configuration().maximumDecompressionRatio
            #expect(try await transport.response(for: text).body.count == 3_000_000)
        }
    }

    @Test("A gzip bomb streamed (1 MiB that inflates to 1 GiB) ends early with the ratio error, memory small")
    func gzipBombStreamed() async throws {
        try await withDeadlineServer { server, transport in
            var request = server.request("/bomb/1024/chunked", timeout: 30, deadline: nil)
            request.maximumDecompressionRatio = 200
            let outcome = StreamOutcome(keepBody: false)
            let task = transport.stream(request, receiver: outcome)
            guard let (error, _) = await outcome.waitForEnd(bound: 60) else {
                task.cancel()
                Issue.record("the bomb was not stopped")
                return
            }
            let urlError = error as? URLError
            #expect(urlError?.code == .dataLengthExceedsMaximum, "\(String(describing: error))")
            #expect(urlError?.localizedDescription.contains("maximumDecompressionRatio") == true)
            // It stopped soon after the first mebibyte: far from the gigabyte it would have made.
            #expect(outcome.receivedBytes < 64 << 20, "\(outcome.receivedBytes) bytes inflated")
        }
    }

    // MARK: - Through the client: the session's deadline and hostile Retry-After

    @Test("The client's requestTimeout is a deadline: a trickled document read fails within it, outcome unknown")
    func clientRequestTimeoutIsADeadline() async throws {
        guard E2EEnvironment.shared.testServer != nil else { return }
        let server = try TestServer.start()
        defer { server.stop() }
        var configuration = Configuration()
        configuration.requestTimeout = 1.5
        configuration.transport = SocketTransport()
        let client = server.adminClient(configuration: configuration)
        defer { client.shutdown() }
        _ = try await client.execute(CreateDatabaseOperation(name: "slow"))
        _ = try await client.value(PutDocumentOperation(database: "slow", id: "d", document: Note(text: "x", n: 1)))
        server.faults.failNext(with: .trickleBody(seconds: 0.5), matching: .path("/slow/d", method: "GET"))
        let started = DispatchTime.now()
        let outcome = try await bounded(seconds: 6.5) {
            try await client.value(GetDocumentOperation<Note>(database: "slow", id: "d"))
        }
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        switch outcome {
        case .success(let note):
            Issue.record("a trickled read succeeded after \(elapsed) s: \(note)")
        case .failure(let error as CouchError):
            #expect(error.kind == .transport, "\(error)")
            #expect(error.message.contains("deadline"), "\(error)")
            #expect(error.isOutcomeUnknown)
        case .failure(let error):
            Issue.record("\(error)")
        }
        // A call's own timeout is its deadline too.
        server.faults.failNext(with: .trickleBody(seconds: 0.5), matching: .path("/slow/d", method: "GET"))
        let options = CallOptions(timeout: 0.8)
        let own = try await bounded(seconds: 4.5) {
            try await client.value(GetDocumentOperation<Note>(database: "slow", id: "d"), options: options)
        }
        if case .failure(let error as CouchError) = own {
            #expect(error.message.contains("0.8"), "\(error)")
        } else {
            Issue.record("\(own)")
        }
    }

    @Test("A continuous feed kept alive by heartbeats outlives requestTimeout; one without heartbeats stalls and ends")
    func feedsLiveByHeartbeatsAndStallWithout() async throws {
        guard E2EEnvironment.shared.testServer != nil else { return }
        let server = try TestServer.start()
        defer { server.stop() }
        var configuration = Configuration()
        configuration.requestTimeout = 1
        configuration.transport = SocketTransport()
        let client = server.adminClient(configuration: configuration)
        defer { client.shutdown() }
        _ = try await client.execute(CreateDatabaseOperation(name: "feed"))

        // Heartbeats every 0.2 s: the feed stays open for 2.5 s (2.5 × the deadline), no reconnect.
        var options = ChangesFollower<JSONValue>.Options(mode: .listen)
        options.continuous = true
        options.heartbeat = 200
        options.initialBackoff = 0.01
        let retries = Locked<[String]>([])
        let follower = ChangesFollower<JSONValue>(
            client: client, database: "feed", options: options,
            onRetry: { error, _ in retries.withLock { $0.append(error.message) } })
        let writer = Task {
            for index in 0..<5 {
                try await Task.sleep(for: .milliseconds(500))
                _ = try await client.value(
                    PutDocumentOperation(database: "feed", id: "d\(index)", document: Note(text: "x", n: index)))
            }
        }
        let delivered = try await bounded(seconds: 15) {
            var ids: Set<String> = []
            for try await change in follower {
                ids.insert(change.id)
                if ids.count == 5 { break }
            }
            return ids
        }
        try await writer.value
        #expect((try? delivered.get())?.count == 5, "\(delivered)")
        #expect(retries.current.isEmpty, "the heartbeat-kept feed was cut: \(retries.current)")

        // No heartbeat: nothing arrives after the head, and the idle timeout (1 s) ends the response.
        var silent = ChangesFollower<JSONValue>.Options(mode: .listen, since: "now")
        silent.continuous = true
        silent.initialBackoff = 5
        let stalls = Locked<[String]>([])
        let stalled = ChangesFollower<JSONValue>(
            client: client, database: "feed", options: silent,
            onRetry: { error, _ in stalls.withLock { $0.append(error.message) } })
        let listening = Task {
            for try await _ in stalled {}
        }
        defer { listening.cancel() }
        _ = await becomesTrue(within: .seconds(5)) { !stalls.current.isEmpty }
        #expect(stalls.current.first?.contains("timed out") == true, "\(stalls.current)")
    }

    @Test("429 with Retry-After nan, inf, -5, 1e300 or garbage: retried within the policy, the call succeeds")
    func hostileRetryAfterOnAnOrdinaryRequest() async throws {
        try await withPrivateTestServer(for: "hostile Retry-After") { server, client in
            let db = E2EEnvironment.uniqueDatabaseName("retry-after")
            _ = try await client.execute(CreateDatabaseOperation(name: db))
            _ = try await client.value(PutDocumentOperation(database: db, id: "d", document: Note(text: "x", n: 1)))
            for value in ["nan", "inf", "-5", "1e300", "99999999999999999999999", "soon"] {
                server.faults.failNext(
                    2, with: .tooManyRequests(retryAfter: .init(value)), matching: .path("/\(db)/d", method: "GET"))
                let read = try await bounded(seconds: 10) {
                    try await client.value(GetDocumentOperation<Note>(database: db, id: "d"))
                }
                #expect((try? read.get())?.text == "x", "Retry-After: \(value): \(read)")
            }
            _ = try await client.execute(DeleteDatabaseOperation(name: db))
        }
    }

    @Test("429 with Retry-After nan on the login: the login is retried, the operations queued behind it succeed")
    func hostileRetryAfterOnTheLogin() async throws {
        try await withPrivateTestServer(for: "hostile Retry-After on the login") { server, client in
            server.faults.failNext(
                2, with: .tooManyRequests(retryAfter: "nan"), matching: .path("/_session", method: "POST"))
            let all = try await bounded(seconds: 10) {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<8 {
                        group.addTask { _ = try await client.value(GetServerInfoOperation()) }
                    }
                    try await group.waitForAll()
                }
            }
            #expect((try? all.get()) != nil, "\(all)")
            #expect(server.requestCount(path: "/_session", method: "POST") == 3)
        }
    }
}

// MARK: - Helpers

/// Runs `body`, and fails the test (cancelling it) when it has not ended after `seconds` of
/// ``SchedulerClock`` time: a stall of the whole test process's thread pool moves the bound.
private func bounded<T: Sendable>(
    seconds: TimeInterval, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> Result<T, any Error> {
    let outcome = await withSchedulerBound(.seconds(seconds), body)
    if outcome.exceeded {
        Issue.record(
            "the call did not end within \(seconds) s (\(outcome.forgiven) of stalls not counted)",
            sourceLocation: sourceLocation)
    }
    return outcome.result
}

/// Sends `request`, waits for its end at most `bound` seconds (then cancels it and records that
/// it did not end); the result and how long it took.
private func send(
    _ request: HTTPRequest, over transport: SocketTransport, bound: TimeInterval,
    sourceLocation: SourceLocation = #_sourceLocation
) async -> (Result<HTTPResponse, any Error>, TimeInterval)? {
    let outcome = Locked<Result<HTTPResponse, any Error>?>(nil)
    let started = DispatchTime.now()
    let task = transport.send(request) { result in outcome.withLock { $0 = result } }
    while true {
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        if let result = outcome.current { return (result, elapsed) }
        if elapsed > bound { break }
        try? await Task.sleep(for: .milliseconds(10))
    }
    task.cancel()
    Issue.record("\(request.path) did not end within \(bound) s", sourceLocation: sourceLocation)
    return nil
}

/// Expects `URLError(.timedOut)` saying that the response missed its deadline of `deadline` s.
private func expectDeadlineError(
    _ result: Result<HTTPResponse, any Error>, deadline: TimeInterval, sourceLocation: SourceLocation = #_sourceLocation
) {
    guard case .failure(let error) = result else {
        Issue.record("expected a timeout, got \(result)", sourceLocation: sourceLocation)
        return
    }
    let urlError = error as? URLError
    #expect(urlError?.code == .timedOut, "\(error)", sourceLocation: sourceLocation)
    let text = urlError?.localizedDescription ?? ""
    #expect(text.contains("deadline of \(deadline.formatted()) s"), "\(text)", sourceLocation: sourceLocation)
}

extension TimeInterval {
    fileprivate func formatted() -> String { String(format: "%g", self) }
}

extension SocketTransport {
    fileprivate func response(for request: HTTPRequest) async throws -> HTTPResponse {
        try await withCheckedThrowingContinuation { continuation in
            send(request) { continuation.resume(with: $0) }
        }
    }
}

/// A TestServer with ``DeadlineHandler`` and a socket transport, both stopped afterwards.
private func withDeadlineServer(_ body: (DeadlineServer, SocketTransport) async throws -> Void) async throws {
    let server = try TestServer.start(handler: DeadlineHandler())
    defer { server.stop() }
    let transport = SocketTransport(idleTimeout: 3_600)
    defer { transport.shutdown() }
    try await body(DeadlineServer(server: server), transport)
}

private struct DeadlineServer {
    let server: TestServer

    var faults: TestServerFaults { server.faults }

    func request(_ path: String, timeout: TimeInterval, deadline: TimeInterval?) -> HTTPRequest {
        var request = HTTPRequest(method: .get, url: server.url(path: path), timeout: timeout)
        request.deadline = deadline
        return request
    }
}

/// `/len/N`: N bytes. `/unavailable/N`: a 503 with N bytes. `/bomb/M[/chunked]`: M gzip members of a mebibyte of zeros each (about
/// 1 KiB each), whole or in chunks of 16 KiB. `/text/N`: N bytes of JSON-like text, gzip'd.
private struct DeadlineHandler: RequestHandler {
    static let member = Gzip.compress(Data(count: 1 << 20))

    static func bytes(_ count: Int) -> Data {
        Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
    }

    func handle(_ request: ServerRequest) -> ServerResponse {
        let segments = request.pathSegments
        switch (segments.first ?? "", segments.count) {
        case ("len", 2):
            return ServerResponse(status: 200, body: .data(Self.bytes(Int(segments[1]) ?? 0)))
        case ("unavailable", 2):
            return ServerResponse(status: 503, body: .data(Self.bytes(Int(segments[1]) ?? 0)))
        case ("bomb", 2), ("bomb", 3):
            let members = Int(segments[1]) ?? 0
            let headers: HTTPHeaders = ["Content-Encoding": "gzip"]
            guard segments.count == 3 else {
                var body = Data()
                for _ in 0..<members { body.append(Self.member) }
                return ServerResponse(status: 200, headers: headers, body: .data(body))
            }
            return ServerResponse(
                status: 200, headers: headers,
                body: .stream { writer in
                    var pending = Data()
                    for _ in 0..<members {
                        pending.append(Self.member)
                        if pending.count >= 16 << 10 {
                            guard writer.write(pending) else { return }
                            pending = Data()
                        }
                    }
                    writer.write(pending)
                })
        case ("text", 2):
            let count = Int(segments[1]) ?? 0
            var text = Data()
            var n = 0
            while text.count < count {
                text.append(Data(#"{"id":"doc-\#(n)","key":\#(n * 7919 % 1000),"value":{"rev":"1-\#(n)"}},"#.utf8))
                n += 1
            }
            return ServerResponse(
                status: 200, headers: ["Content-Encoding": "gzip"],
                body: .data(Gzip.compress(text.prefix(count))))
        default:
            return ServerResponse(status: 404, body: .data(Data("not found".utf8)))
        }
    }
}

/// Collects a streamed response: its body (or only its size) and how it ended.
private final class StreamOutcome: StreamReceiver, @unchecked Sendable {
    // @unchecked Sendable: every property is only touched under `lock`.
    private let lock = NSLock()
    private let keepBody: Bool
    private var collected = Data()
    private var count = 0
    private var ended: (any Error)??

    init(keepBody: Bool = true) { self.keepBody = keepBody }

    func receive(head: HTTPResponse) {}

    func receive(chunk: Data) {
        lock.lock()
        count += chunk.count
        if keepBody { collected.append(chunk) }
        lock.unlock()
    }

    func complete(error: (any Error)?) {
        lock.lock()
        ended = .some(error)
        lock.unlock()
    }

    var body: Data {
        lock.lock()
        defer { lock.unlock() }
        return collected
    }

    private var endedSoFar: (any Error)?? {
        lock.lock()
        defer { lock.unlock() }
        return ended
    }

    var receivedBytes: Int {
        lock.lock()
        defer { lock.unlock() }
        return count
    }

    /// How the stream ended (nil error: completely) and when, or nil when it has not ended after `bound` s.
    func waitForEnd(bound: TimeInterval) async -> ((any Error)?, TimeInterval)? {
        let started = DispatchTime.now()
        while true {
            let elapsed = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
            if let end = endedSoFar { return (end, elapsed) }
            if elapsed > bound { return nil }
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
}
