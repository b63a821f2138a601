import Foundation
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

@testable import SwiftCouch

@Suite("Operations on OperationQueues: dependencies, lazy builders, blocking and async use")
struct QueueTests {
    static let created = SimulatedResponse.json(201, #"{"ok":true,"id":"doc","rev":"1-aaa"}"#)
    static let updated = SimulatedResponse.json(201, #"{"ok":true,"id":"doc","rev":"2-bbb"}"#)

    @Test("addDependency on a user's OperationQueue: the dependent starts only after the first finished", .ownThreads)
    func dependencies() {
        let transport = SimulatedTransport(responses: [
            .json(201, #"{"ok":true}"#, delay: 0.2), .json(201, #"{"ok":true,"id":"doc","rev":"1-aaa"}"#),
        ])
        let client = Simulation.client(transport: transport)
        let events = EventLog<String>()
        let create = client.task(for: CreateDatabaseOperation(name: "db")) { _ in events.append("created") }
        let put = client.task(for: PutDocumentOperation(database: "db", id: "doc", document: ["a": 1])) { _ in
            events.append("put")
        }
        put.addDependency(create)
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 4
        queue.addOperations([put, create], waitUntilFinished: true)
        #expect(events.all == ["created", "put"])
        #expect(transport.requests.map(\.method) == ["PUT", "PUT"])
        #expect(transport.requests.map(\.path) == ["/db", "/db/doc"])
    }

    @Test("A lazy builder runs after its dependency and uses that operation's result (the new revision)", .ownThreads)
    func lazyBuilder() throws {
        let transport = SimulatedTransport(responses: [Self.created, Self.updated])
        let client = Simulation.client(transport: transport)
        let first = client.task(for: PutDocumentOperation(database: "db", id: "doc", document: ["v": 1]))
        let second = client.task(building: {
            let rev = try first.result!.get().value.rev!
            return PutDocumentOperation(database: "db", id: "doc", document: ["v": 2], revision: rev)
        })
        second.addDependency(first)
        client.operationQueue.addOperations([second, first], waitUntilFinished: true)
        #expect(transport.requests.last?.queryValue("rev") == "1-aaa")
        #expect(try second.result?.get().value.rev == "2-bbb")
    }

    @Test("A builder that throws fails its task and sends nothing", .ownThreads)
    func failingBuilder() {
        let transport = SimulatedTransport(responses: [])
        let client = Simulation.client(transport: transport)
        let task = client.task(building: { () throws -> GetServerInfoOperation in throw SimulationError("no rev yet") })
        client.operationQueue.addOperations([task], waitUntilFinished: true)
        #expect(transport.requests.isEmpty)
        guard case .failure(let error)? = task.result else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.message.contains("no rev yet"))
    }

    /// A client allowing `limit` operations at once, over a transport that records how many
    /// requests it holds as each one arrives, and holds each for `hold` seconds.
    static func countingClient(limit: Int, hold: Double) -> (CouchDBClient, inFlight: EventLog<Int>) {
        let inFlight = EventLog<Int>()
        let counter = Counter()
        let transport = SimulatedTransport(responder: { _ in
            inFlight.append(counter.increment())
            Thread.sleep(forTimeInterval: hold)
            counter.decrement()
            return .json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#)
        })
        var configuration = Configuration()
        configuration.maximumConcurrentOperations = limit
        return (Simulation.client(transport: transport, configuration: configuration), inFlight)
    }

    @Test("The client's queue runs at most maximumConcurrentOperations at once", .ownThreads)
    func concurrencyLimit() {
        let (client, inFlight) = Self.countingClient(limit: 3, hold: 0.02)
        #expect(client.operationQueue.maxConcurrentOperationCount == 3)
        let tasks = (0..<12).map { _ in client.task(for: GetServerInfoOperation()) }
        client.operationQueue.addOperations(tasks, waitUntilFinished: true)
        #expect(inFlight.count == 12)
        #expect(inFlight.all.max()! <= 3)
    }

    @Test("Async calls run at most maximumConcurrentOperations at once; the others wait their turn and all complete")
    func asyncConcurrencyLimit() async throws {
        let (client, inFlight) = Self.countingClient(limit: 3, hold: 0.01)
        defer { client.shutdown() }
        let versions = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<24 { group.addTask { try await client.value(GetServerInfoOperation()).version } }
            var versions: [String] = []
            for try await version in group { versions.append(version) }
            return versions
        }
        #expect(versions.count == 24)
        #expect(inFlight.count == 24)
        #expect(inFlight.all.max()! <= 3)
        #expect(client.asyncSlots.counts == (0, 0), "every slot given back")
    }

    @Test("An async call cancelled while waiting for its turn ends at once, sends nothing and gives its turn back")
    func asyncCancelledWhileWaiting() async throws {
        // The slow call holds the only turn until it is cancelled (its answer would take 60 s).
        let transport = SimulatedTransport(responder: { request in
            .json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#, delay: request.url.path == "/slow" ? 60 : 0)
        })
        struct Slow: JSONOperation {
            typealias Response = ServerInfo
            var endpoint: CouchPath { CouchPath("slow") }
        }
        var configuration = Configuration()
        configuration.maximumConcurrentOperations = 1
        let client = Simulation.client(transport: transport, configuration: configuration)
        defer { client.shutdown() }
        let slow = Task { try await client.value(Slow()) }
        for _ in 0..<1_000 where transport.requests.isEmpty { try await Task.sleep(for: .milliseconds(10)) }
        let waiting = Task { try await client.value(GetServerInfoOperation()) }
        for _ in 0..<1_000 where client.asyncSlots.counts.waiting == 0 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(client.asyncSlots.counts == (1, 1))
        waiting.cancel()
        let cancelled = await waiting.result
        guard case .failure(let error as CouchError) = cancelled else {
            Issue.record("expected a cancellation, got \(cancelled)")
            return
        }
        #expect(error.kind == .cancelled)
        #expect(!error.isOutcomeUnknown, "it was never sent")
        slow.cancel()
        _ = await slow.result
        // The cancelled call's turn came and went: the slot is free again and the next call runs.
        #expect(try await client.value(GetServerInfoOperation()).version == "3.5.0")
        #expect(transport.requests.map(\.path) == ["/slow", "/"])
        #expect(client.asyncSlots.counts == (0, 0))
    }

    @Test("executeAndWait from a background thread does not deadlock while the client's queue is full", .ownThreads)
    func blockingWhileBusy() {
        let transport = SimulatedTransport(responder: { request in
            request.url.path == "/slow"
                ? .json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#, delay: 1)
                : .json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#)
        })
        var configuration = Configuration()
        configuration.maximumConcurrentOperations = 1
        let client = Simulation.client(transport: transport, configuration: configuration)
        struct Slow: JSONOperation {
            typealias Response = ServerInfo
            var endpoint: CouchPath { CouchPath("slow") }
        }
        client.add(operation: Slow())
        client.add(operation: Slow())
        let done = DispatchSemaphore(value: 0)
        let outcome = EventLog<Int>()
        DispatchQueue.global().async {
            // Called from inside a completion handler on the (serial) callback queue, too.
            if case .success(let response) = client.executeAndWait(GetServerInfoOperation()) {
                outcome.append(response.statusCode)
            }
            client.add(operation: GetServerInfoOperation()) { _ in
                if case .success(let r) = client.executeAndWait(GetServerInfoOperation()) {
                    outcome.append(r.statusCode)
                }
                done.signal()
            }
        }
        #expect(waitFor(done, seconds: 20))
        #expect(outcome.all == [200, 200])
    }

    @Test("async execute returns the response and throws CouchError")
    func asyncExecute() async throws {
        let transport = SimulatedTransport(responses: [
            .json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#),
            .json(404, #"{"error":"not_found","reason":"missing"}"#),
        ])
        let client = Simulation.client(transport: transport)
        let info = try await client.execute(GetServerInfoOperation())
        #expect(info.value.version == "3.5.0")
        do {
            _ = try await client.value(GetDocumentOperation<JSONValue>(database: "db", id: "nope"))
            Issue.record("expected a 404")
        } catch {
            #expect(error.statusCode == 404)
            #expect(error.reason == "missing")
        }
    }

    @Test("Cancelling the Swift task cancels the request in flight")
    func asyncCancellation() async {
        // The answer is an hour away: only the cancellation can end the call within the test.
        let transport = SimulatedTransport(responses: [
            .json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#, delay: 3_600)
        ])
        let client = Simulation.client(transport: transport)
        let task = Task { try await client.execute(GetServerInfoOperation()) }
        for _ in 0..<500 where transport.requests.isEmpty {  // until the request is in flight (bounded)
            try? await Task.sleep(for: .milliseconds(10))
        }
        task.cancel()
        // A deadlock guard, not a performance assertion: far above any pause a loaded parallel run
        // gives a task (CI has seen 48 s), far below the answer's hour. The wait itself is bounded,
        // so a broken cancellation fails the test instead of hanging it.
        typealias Outcome = Result<CouchResponse<GetServerInfoOperation.Response>, any Error>
        let outcome = await withTaskGroup(of: Outcome?.self) { group in
            group.addTask { await task.result }
            group.addTask {
                try? await Task.sleep(for: .seconds(300))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        guard let result = outcome else {
            Issue.record("Cancelling did not end the call within 300 s (its answer was 3,600 s away)")
            return
        }
        guard case .failure(let error as CouchError) = result else {
            Issue.record("expected a CouchError")
            return
        }
        #expect(error.kind == .cancelled)
        #expect(transport.requests.count == 1)
    }

    @Test("Completion handlers run on the configured callback queue", .ownThreads)
    func callbackQueue() {
        let queue = DispatchQueue(label: "user.callbacks")
        let key = DispatchSpecificKey<String>()
        queue.setSpecific(key: key, value: "user")
        var configuration = Configuration()
        configuration.callbackQueue = queue
        let transport = SimulatedTransport(responses: [.json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#)])
        let client = Simulation.client(transport: transport, configuration: configuration)
        let seen = EventLog<String?>()
        let done = DispatchSemaphore(value: 0)
        client.add(operation: GetServerInfoOperation()) { _ in
            seen.append(DispatchQueue.getSpecific(key: key))
            done.signal()
        }
        #expect(waitFor(done))
        #expect(seen.all == ["user"])
    }
}

/// A thread-safe counter.
final class Counter: @unchecked Sendable {
    // @unchecked Sendable: `value` is only touched under `lock`.
    private let lock = NSLock()
    private var value = 0
    func increment() -> Int {
        lock.lock()
        defer { lock.unlock() }
        value += 1
        return value
    }
    func decrement() {
        lock.lock()
        value -= 1
        lock.unlock()
    }
}
