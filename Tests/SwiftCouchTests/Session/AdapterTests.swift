import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

/// Adds a header and records the contexts it saw.
final class RecordingAdapter: RequestAdapter, @unchecked Sendable {
    // @unchecked Sendable: `seen` is only touched under `lock`.
    private let lock = NSLock()
    private var seen: [RequestAdapterContext] = []
    let name: String
    let value: @Sendable (RequestAdapterContext) -> String

    init(name: String = "X-Correlation-ID", value: @escaping @Sendable (RequestAdapterContext) -> String) {
        self.name = name
        self.value = value
    }

    var contexts: [RequestAdapterContext] { lock.withLock { seen } }

    func adapt(_ headers: inout HTTPFields, context: RequestAdapterContext) async throws {
        lock.withLock { seen.append(context) }
        headers[name] = value(context)
    }
}

/// Counts events, for the monitor tests.
final class CountingMonitor: EventMonitor, @unchecked Sendable {
    // @unchecked Sendable: all state is behind `lock`.
    private let lock = NSLock()
    private(set) var started: [RequestEvent] = []
    private(set) var responses: [(RequestEvent, Int, TimeInterval)] = []
    private(set) var failures: [(RequestEvent, CouchError)] = []
    private(set) var retries: [(RequestEvent, String, TimeInterval)] = []

    func requestStarted(_ event: RequestEvent) { lock.withLock { started.append(event) } }
    func responseReceived(_ event: RequestEvent, status: Int, duration: TimeInterval) {
        lock.withLock { responses.append((event, status, duration)) }
    }
    func requestFailed(_ event: RequestEvent, error: CouchError, duration: TimeInterval) {
        lock.withLock { failures.append((event, error)) }
    }
    func requestRetried(_ event: RequestEvent, reason: String, delay: TimeInterval) {
        lock.withLock { retries.append((event, reason, delay)) }
    }
    func snapshot<T>(_ read: (CountingMonitor) -> T) -> T { lock.withLock { read(self) } }
}

private let dbInfo =
    #"{"db_name":"db","doc_count":0,"doc_del_count":0,"update_seq":"0-x","purge_seq":"0-x","#
    + #""compact_running":false,"sizes":{"active":0,"external":0,"file":0},"instance_start_time":"0","#
    + #""props":{},"disk_format_version":8,"cluster":{"q":2,"n":1,"w":1,"r":1}}"#

private let fastRetries = RetryPolicy(maximumRetries: 3, initialDelay: 0.01, maximumDelay: 0.02)

@Suite("Request adapters, event monitors, per-call options, User-Agent", .timingSensitive)
struct AdapterTests {
    @Test("An adapter adds a header to every attempt, seeing the attempt number and whether it may repeat")
    func adapterRunsOnEveryAttempt() async throws {
        let adapter = RecordingAdapter { "id-\($0.attempt)" }
        var configuration = Configuration()
        configuration.adapters = [adapter]
        configuration.retryPolicy = fastRetries
        let transport = SimulatedTransport(responses: [
            .json(429, #"{"error":"too_many_requests","reason":"slow down"}"#),
            .json(200, #"{"_id":"a","_rev":"1-x"}"#),
        ])
        let client = Simulation.client(transport: transport, configuration: configuration)
        defer { client.shutdown() }
        _ = try await client.value(GetDocumentOperation<JSONValue>(database: "db", id: "a"))
        #expect(transport.requests.map { $0.headers["X-Correlation-ID"] } == ["id-1", "id-2"])
        #expect(adapter.contexts.map(\.attempt) == [1, 2])
        #expect(adapter.contexts.allSatisfy { $0.isIdempotent && $0.method == .get && $0.path == "/db/a" })
        #expect(adapter.contexts.first?.operation?.hasPrefix("GetDocumentOperation") == true)
    }

    @Test("A POST that may create a document is still never resent: the adapter cannot change that")
    func adapterKeepsNoResend() async throws {
        let adapter = RecordingAdapter { _ in "x" }
        var configuration = Configuration()
        configuration.adapters = [adapter]
        configuration.retryPolicy = RetryPolicy(
            maximumRetries: 3, initialDelay: 0.01, maximumDelay: 0.02, retryServerErrors: true)
        let transport = SimulatedTransport(responses: [
            .failure(URLError(.networkConnectionLost)), .json(201, #"{"ok":true,"id":"x","rev":"1-a"}"#),
        ])
        let client = Simulation.client(transport: transport, configuration: configuration)
        defer { client.shutdown() }
        do {
            _ = try await client.value(CreateDocumentOperation(database: "db", document: ["a": 1] as JSONValue))
            Issue.record("a lost POST must not be resent")
        } catch {
            #expect(error.isOutcomeUnknown)
        }
        #expect(transport.requests.count == 1)
        #expect(adapter.contexts.map(\.isIdempotent) == [false])
    }

    @Test("Cookie authentication stays: one login for concurrent requests, the cookie cannot be replaced")
    func adapterKeepsSingleFlightLoginAndCookie() async throws {
        let adapter = RecordingAdapter(name: "Cookie") { _ in "AuthSession=forged" }
        var configuration = Configuration()
        configuration.adapters = [adapter]
        var responses: [SimulatedResponse] = [
            .json(200, #"{"ok":true,"name":"bob","roles":[]}"#, headers: ["Set-Cookie": "AuthSession=real; Path=/"])
        ]
        for _ in 0..<10 { responses.append(.json(200, dbInfo)) }
        let transport = SimulatedTransport(responses: responses)
        let client = Simulation.client(
            transport: transport, credentials: Credentials(username: "bob", password: "secret"),
            configuration: configuration)
        defer { client.shutdown() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<10 { group.addTask { _ = try await client.value(GetDatabaseInfoOperation(name: "db")) } }
            try await group.waitForAll()
        }
        let logins = transport.requests.filter { $0.path == "/_session" }
        #expect(logins.count == 1)
        #expect(logins.first?.headers["Cookie"] == nil, "the login is not adapted")
        let others = transport.requests.filter { $0.path != "/_session" }
        #expect(others.count == 10)
        #expect(others.allSatisfy { $0.headers["Cookie"] == "AuthSession=real" })
        #expect(adapter.contexts.count == 10)
    }

    @Test("With no credentials an adapter may authenticate: a token from the app's own source")
    func customAuthentication() async throws {
        struct TokenAdapter: RequestAdapter {
            func adapt(_ headers: inout HTTPFields, context: RequestAdapterContext) async throws {
                try await Task.sleep(nanoseconds: 1_000_000)  // the app's own async token source
                headers["Authorization"] = "Bearer app-token-\(context.attempt)"
            }
        }
        var configuration = Configuration()
        configuration.adapters = [TokenAdapter()]
        let transport = SimulatedTransport(responses: [.json(200, dbInfo)])
        let client = Simulation.client(transport: transport, configuration: configuration)
        defer { client.shutdown() }
        _ = try await client.value(GetDatabaseInfoOperation(name: "db"))
        #expect(transport.requests.first?.headers["Authorization"] == "Bearer app-token-1")
    }

    @Test("Callers blocking every pool thread (executeAndWait) do not starve the adapters they wait for")
    func adaptersRunOffTheCooperativePool() async throws {
        struct Awaiting: RequestAdapter {
            func adapt(_ headers: inout HTTPFields, context: RequestAdapterContext) async throws {
                try await Task.sleep(nanoseconds: 1_000_000)
                headers["X-Adapted"] = "yes"
            }
        }
        var configuration = Configuration()
        configuration.adapters = [Awaiting()]
        configuration.requestTimeout = 20
        let transport = SimulatedTransport(responses: Array(repeating: .json(200, dbInfo), count: 16))
        let client = Simulation.client(transport: transport, configuration: configuration)
        defer { client.shutdown() }
        let started = Date()
        let results = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<16 {
                group.addTask {
                    // Blocks its pool thread until the request is done.
                    (try? client.executeAndWait(GetDatabaseInfoOperation(name: "db")).get()) != nil
                }
            }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(results.count == 16 && results.allSatisfy { $0 })
        #expect(Date().timeIntervalSince(started) < 120, "no adapter waited for a pool thread")
        #expect(transport.requests.allSatisfy { $0.headers["X-Adapted"] == "yes" })
    }

    @Test("An adapter that throws, sets a framing header or an invalid value fails the call; nothing is sent")
    func adapterFailures() async throws {
        struct Failing: RequestAdapter {
            struct Broken: Error {}
            func adapt(_ headers: inout HTTPFields, context: RequestAdapterContext) async throws { throw Broken() }
        }
        for adapter in [
            Failing() as any RequestAdapter, RecordingAdapter(name: "Content-Length") { _ in "0" },
            RecordingAdapter { _ in "a\r\nInjected: yes" },
        ] {
            var configuration = Configuration()
            configuration.adapters = [adapter]
            let transport = SimulatedTransport(responses: [.json(200, dbInfo)])
            let client = Simulation.client(transport: transport, configuration: configuration)
            do {
                _ = try await client.value(GetDatabaseInfoOperation(name: "db"))
                Issue.record("\(type(of: adapter)) should fail the call")
            } catch {
                #expect(error.kind == .adapter)
                #expect(error.message.contains("not sent"))
                #expect(!error.isOutcomeUnknown)
            }
            #expect(transport.requests.isEmpty)
            client.shutdown()
        }
    }

    @Test("An adapter that never returns fails the call at its timeout; cancelling it completes it at once")
    func hangingAdapter() async throws {
        struct Hanging: RequestAdapter {
            func adapt(_ headers: inout HTTPFields, context: RequestAdapterContext) async throws {
                try? await Task.sleep(nanoseconds: 600_000_000_000)  // "never"
            }
        }
        var options = CallOptions()
        options.timeout = 0.2
        var configuration = Configuration()
        configuration.adapters = [Hanging()]
        let transport = SimulatedTransport(responses: [.json(200, dbInfo)])
        let client = Simulation.client(transport: transport, configuration: configuration)
        defer { client.shutdown() }
        let started = Date()
        do {
            _ = try await client.value(GetDatabaseInfoOperation(name: "db"), options: options)
            Issue.record("the call should time out")
        } catch {
            #expect(error.kind == .adapter)
            #expect(error.message.contains("timeout"))
        }
        // Bounded by the timeout, not by the adapter (a generous margin for a loaded machine).
        #expect(Date().timeIntervalSince(started) < 120)
        #expect(transport.requests.isEmpty)

        let task = Task { try await client.value(GetDatabaseInfoOperation(name: "db")) }
        try await Task.sleep(nanoseconds: 50_000_000)
        task.cancel()
        let cancelled = Date()
        do {
            _ = try await task.value
            Issue.record("the cancelled call should fail")
        } catch let error as CouchError {
            #expect(error.kind == .cancelled)
        }
        #expect(Date().timeIntervalSince(cancelled) < 120)
    }

    @Test("A monitor sees each attempt start, the 429 and its retry, the response and its duration")
    func monitorCountsRetries() async throws {
        let monitor = CountingMonitor()
        var configuration = Configuration()
        configuration.monitors = [monitor]
        configuration.retryPolicy = fastRetries
        let transport = SimulatedTransport(responses: [
            .json(429, #"{"error":"too_many_requests","reason":"slow down"}"#),
            .json(200, dbInfo, delay: 0.05),
        ])
        let client = Simulation.client(transport: transport, configuration: configuration)
        defer { client.shutdown() }
        _ = try await client.value(GetDatabaseInfoOperation(name: "db"))
        let (started, responses, retries) = monitor.snapshot { ($0.started, $0.responses, $0.retries) }
        #expect(started.map(\.attempt) == [1, 2])
        #expect(responses.map(\.1) == [429, 200])
        #expect((responses.last?.2 ?? 0) >= 0.04, "the duration covers the response's delay")
        #expect(retries.count == 1)
        #expect(retries.first?.1 == "HTTP 429")
        #expect(started.allSatisfy { $0.path == "/db" && $0.operation == "GetDatabaseInfoOperation" })
    }

    @Test("A monitor sees a failed attempt; logs carry metadata and no secrets; silent without a handler")
    func monitorFailuresAndLogMetadata() async throws {
        let monitor = CountingMonitor()
        let logs = LogBox()
        var configuration = Configuration()
        configuration.monitors = [monitor]
        configuration.authentication = .basic
        configuration.retryPolicy = .disabled
        configuration.logHandler = { event in logs.append(event) }
        let transport = SimulatedTransport(responses: [
            .json(200, dbInfo), .failure(URLError(.timedOut)),
        ])
        let client = Simulation.client(
            transport: transport, credentials: Credentials(username: "bob", password: "hunter2"),
            configuration: configuration)
        defer { client.shutdown() }
        _ = try await client.value(GetDatabaseInfoOperation(name: "db"))
        _ = try? await client.value(GetDatabaseInfoOperation(name: "db"))
        #expect(monitor.snapshot { $0.failures.count } == 1)
        let events = logs.events
        let response = try #require(events.first { $0.metadata["status"] == "200" })
        #expect(response.level == .debug)
        #expect(response.metadata["method"] == "GET")
        #expect(response.metadata["path"] == "/db")
        #expect(response.metadata["attempt"] == "1")
        #expect(response.metadata["operation"] == "GetDatabaseInfoOperation")
        #expect(Double(response.metadata["duration"] ?? "") != nil)
        #expect(events.contains { $0.level == .warning && $0.metadata["path"] == "/db" })
        let everything = events.map(\.description).joined(separator: "\n")
        #expect(!everything.contains("hunter2"))
        #expect(!everything.contains(Data("bob:hunter2".utf8).base64EncodedString()))
    }

    @Test("Per-call options: a shorter timeout, no retries and extra headers, without touching the client")
    func callOptions() async throws {
        var configuration = Configuration()
        configuration.retryPolicy = fastRetries
        let transport = SimulatedTransport(responses: [
            .json(429, #"{"error":"too_many_requests","reason":"slow down"}"#),
            .json(200, dbInfo),
            .json(200, dbInfo),
        ])
        let client = Simulation.client(transport: transport, configuration: configuration)
        defer { client.shutdown() }
        var options = CallOptions()
        options.retryPolicy = .disabled
        options.timeout = 7
        options.headers["X-Request-ID"] = "call-1"
        do {
            _ = try await client.value(GetDatabaseInfoOperation(name: "db"), options: options)
            Issue.record("without retries the 429 is the answer")
        } catch {
            #expect(error.isTooManyRequests)
        }
        #expect(transport.requests.count == 1)
        #expect(transport.requests[0].request.timeout == 7)
        #expect(transport.requests[0].headers["X-Request-ID"] == "call-1")
        // The client itself is unchanged: the next call retries and has no extra header.
        _ = try await client.value(GetDatabaseInfoOperation(name: "db"))
        #expect(transport.requests.count == 2)
        #expect(transport.requests[1].headers["X-Request-ID"] == nil)
        #expect(transport.requests[1].request.timeout == configuration.requestTimeout)

        // The same options through the OperationQueue API and row streams.
        let queued = SimulatedTransport(responses: [.json(200, #"{"total_rows":0,"offset":0,"rows":[]}"#)])
        let queuedClient = Simulation.client(transport: queued)
        defer { queuedClient.shutdown() }
        for try await _ in queuedClient.rows(AllDocsOperation<JSONValue>(database: "db"), options: options) {}
        #expect(queued.requests.first?.headers["X-Request-ID"] == "call-1")
        await withCheckedContinuation { continuation in
            let more = SimulatedTransport(responses: [.json(200, dbInfo)])
            let moreClient = Simulation.client(transport: more)
            moreClient.add(operation: GetDatabaseInfoOperation(name: "db"), options: options) { _ in
                #expect(more.requests.first?.headers["X-Request-ID"] == "call-1")
                moreClient.shutdown()
                continuation.resume()
            }
        }
    }

    @Test("A hostile per-call header is refused in validate; a bad timeout too")
    func hostileCallOptions() async throws {
        var options = CallOptions()
        options.headers["X-Bad"] = "a\r\nInjected: 1"
        let transport = SimulatedTransport(responses: [.json(200, dbInfo)])
        let client = Simulation.client(transport: transport)
        defer { client.shutdown() }
        do {
            _ = try await client.value(GetDatabaseInfoOperation(name: "db"), options: options)
            Issue.record("CR/LF in a header must be refused")
        } catch {
            #expect(error.kind == .validation)
        }
        do {
            _ = try await client.value(GetDatabaseInfoOperation(name: "db"), options: CallOptions(timeout: 0))
            Issue.record("a zero timeout must be refused")
        } catch {
            #expect(error.kind == .validation)
        }
        #expect(transport.requests.isEmpty)
    }

    @Test("A User-Agent is sent by default, also on the login; configurable and removable")
    func userAgent() async throws {
        let transport = SimulatedTransport(responses: [
            .json(200, #"{"ok":true}"#, headers: ["Set-Cookie": "AuthSession=c; Path=/"]),
            .json(200, dbInfo),
        ])
        let client = Simulation.client(transport: transport, credentials: Credentials(username: "u", password: "p"))
        _ = try await client.value(GetDatabaseInfoOperation(name: "db"))
        client.shutdown()
        #expect(transport.requests.count == 2)
        #expect(transport.requests.allSatisfy { $0.headers["User-Agent"] == Configuration.defaultUserAgent })
        #expect(Configuration.defaultUserAgent.hasPrefix("SwiftCouch/"))

        var configuration = Configuration()
        configuration.userAgent = "MyApp/2.0"
        let custom = Simulation.run(
            GetDatabaseInfoOperation(name: "db"), response: .json(200, dbInfo),
            configuration: configuration)
        #expect(custom.request?.headers["User-Agent"] == "MyApp/2.0")
        configuration.userAgent = nil
        let none = Simulation.run(
            GetDatabaseInfoOperation(name: "db"), response: .json(200, dbInfo),
            configuration: configuration)
        #expect(none.request?.headers["User-Agent"] == nil)
    }

    @Test("CouchError's status helpers")
    func statusHelpers() {
        func error(_ status: Int) -> CouchError { CouchError(kind: .http, message: "", statusCode: status) }
        #expect(error(409).isConflict && !error(409).isNotFound)
        #expect(error(404).isNotFound)
        #expect(error(401).isUnauthorized && !error(401).isForbidden)
        #expect(error(403).isForbidden)
        #expect(error(429).isTooManyRequests)
        #expect(!CouchError.validation("x").isConflict)
    }
}

/// Collects log events.
final class LogBox: @unchecked Sendable {
    // @unchecked Sendable: `stored` is only touched under `lock`.
    private let lock = NSLock()
    private var stored: [LogEvent] = []
    func append(_ event: LogEvent) { lock.withLock { stored.append(event) } }
    var events: [LogEvent] { lock.withLock { stored } }
}
