import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

/// A completion reports success only when the server confirmed it; when the request may have been
/// carried out, the error says so (`isOutcomeUnknown`); a request cancelled before it was sent is
/// never sent.
@Suite("Outcomes: cancelled, lost and conflicting writes say whether they may have happened", .ownThreads)
struct OutcomeTests {
    static let put = PutDocumentOperation(
        database: "db", id: "doc", document: ["a": 1] as [String: Int], revision: "1-abc")

    static func configuration(retryServerErrors: Bool = true) -> Configuration {
        var configuration = Configuration()
        configuration.retryPolicy = RetryPolicy(
            maximumRetries: 3, initialDelay: 0.01, maximumDelay: 0.05, retryServerErrors: retryServerErrors)
        return configuration
    }

    /// Runs `task` on a queue and waits for its completion.
    static func outcome<Op: CouchOperation>(
        _ client: CouchDBClient, _ operation: Op, while action: (CouchOperationTask<Op>) -> Void
    ) -> Result<CouchResponse<Op.Response>, CouchError>? {
        let results = EventLog<Result<CouchResponse<Op.Response>, CouchError>>()
        let done = DispatchSemaphore(value: 0)
        let task = client.task(for: operation) { result in
            results.append(result)
            done.signal()
        }
        action(task)
        guard waitFor(done, seconds: 20) else { return nil }
        Thread.sleep(forTimeInterval: 0.05)  // a second completion would arrive now
        #expect(results.all.count == 1)
        return results.all.first
    }

    @Test("Cancelled while the request is with the transport: cancelled, outcome unknown")
    func cancelInFlight() throws {
        let sent = DispatchSemaphore(value: 0)
        let transport = SimulatedTransport(responder: { _ in
            sent.signal()
            return .json(201, #"{"ok":true,"id":"doc","rev":"2-def"}"#, delay: 30)
        })
        let client = Simulation.client(transport: transport, configuration: Self.configuration())
        let queue = OperationQueue()
        let result = try #require(
            Self.outcome(client, Self.put) { task in
                queue.addOperation(task)
                #expect(sent.wait(timeout: .now() + 10) == .success)
                task.cancel()
            })
        guard case .failure(let error) = result else {
            Issue.record("expected a cancellation, got \(result)")
            return
        }
        #expect(error.kind == .cancelled)
        #expect(error.isOutcomeUnknown)
        #expect(error.message.contains("may have"))
    }

    @Test("Cancelled before it starts: nothing is sent, and the outcome is known (not done)")
    func cancelBeforeStart() throws {
        let transport = SimulatedTransport(responder: { _ in .json(201, #"{"ok":true,"id":"doc","rev":"2-def"}"#) })
        let client = Simulation.client(transport: transport, configuration: Self.configuration())
        let queue = OperationQueue()
        let result = try #require(
            Self.outcome(client, Self.put) { task in
                task.cancel()
                queue.addOperation(task)
            })
        guard case .failure(let error) = result else {
            Issue.record("expected a cancellation, got \(result)")
            return
        }
        #expect(error.kind == .cancelled)
        #expect(!error.isOutcomeUnknown)
        #expect(transport.requests.isEmpty)
    }

    @Test("Cancel racing the start, 120 times: a request that reached the transport is never reported as not done")
    func cancelRace() throws {
        for round in 0..<120 {
            let reached = Locked2Flag()
            let transport = SimulatedTransport(responder: { _ in
                reached.set()
                return .json(201, #"{"ok":true,"id":"doc","rev":"2-def"}"#, delay: 0.001)
            })
            let client = Simulation.client(transport: transport, configuration: Self.configuration())
            let queue = OperationQueue()
            let result = try #require(
                Self.outcome(client, Self.put) { task in
                    queue.addOperation(task)
                    if round % 3 == 1 { Thread.sleep(forTimeInterval: 0.0001 * Double(round % 7)) }
                    task.cancel()
                })
            if case .failure(let error) = result, reached.isSet {
                #expect(error.isOutcomeUnknown, "round \(round): sent, then reported as \(error)")
            }
            if case .failure(let error) = result, !error.isOutcomeUnknown {
                #expect(!reached.isSet, "round \(round): a request was sent after a plain cancellation")
            }
        }
    }

    @Test("A lost answer, then 409 on the resent write: the conflict may be the write itself, outcome unknown")
    func conflictAfterLostAnswer() throws {
        let run = Simulation.run(
            Self.put,
            responses: [
                .failure(URLError(.networkConnectionLost)),
                .json(409, #"{"error":"conflict","reason":"Document update conflict."}"#),
            ],
            configuration: Self.configuration())
        #expect(run.requests.count == 2)
        let error = try #require(run.error)
        #expect(error.statusCode == 409)
        #expect(error.isOutcomeUnknown)
    }

    @Test(
        "A lost answer, then an error answer to the resent write: it may have been carried out, outcome unknown",
        arguments: [401, 403, 400, 500, 503])
    func errorAfterLostAnswer(status: Int) throws {
        let body = #"{"error":"some_error","reason":"The resend was refused."}"#
        // A retried status (5xx) is answered until the retries run out; the others end the request at once.
        let answers = status >= 500 ? 3 : 1
        let run = Simulation.run(
            Self.put,
            responses: [.failure(URLError(.networkConnectionLost))]
                + Array(repeating: .json(status, body), count: answers),
            configuration: Self.configuration())
        #expect(run.requests.count == 1 + answers)
        let error = try #require(run.error)
        #expect(error.statusCode == status)
        #expect(error.isOutcomeUnknown, "HTTP \(status) after a lost answer was reported as not done")
        #expect(error.message.contains("may have been carried out"))
    }

    @Test("The same error answers with no lost attempt before them: the write was refused, outcome known")
    func errorWithoutLostAnswer() throws {
        for status in [401, 403, 400] {
            let run = Simulation.run(
                Self.put, responses: [.json(status, #"{"error":"some_error","reason":"Refused."}"#)],
                configuration: Self.configuration())
            let error = try #require(run.error)
            #expect(error.statusCode == status)
            #expect(!error.isOutcomeUnknown, "HTTP \(status) with nothing lost before it")
        }
    }

    @Test("A read after a lost answer that ends in 404 is a plain 404: reading changes nothing")
    func readAfterLostAnswer() throws {
        let run = Simulation.run(
            GetDocumentOperation<[String: Int]>(database: "db", id: "doc"),
            responses: [
                .failure(URLError(.networkConnectionLost)),
                .json(404, #"{"error":"not_found","reason":"missing"}"#),
            ],
            configuration: Self.configuration())
        #expect(run.requests.count == 2)
        let error = try #require(run.error)
        #expect(error.statusCode == 404)
        #expect(!error.isOutcomeUnknown)
    }

    @Test("409 with no lost attempt before it is a plain conflict: the write was refused")
    func plainConflict() throws {
        let run = Simulation.run(
            Self.put, responses: [.json(409, #"{"error":"conflict","reason":"Document update conflict."}"#)],
            configuration: Self.configuration())
        let error = try #require(run.error)
        #expect(error.statusCode == 409)
        #expect(!error.isOutcomeUnknown)
    }

    @Test("Connection lost after sending: outcome unknown; connection refused: nothing was sent")
    func transportFailures() throws {
        let lost = Simulation.run(
            Self.put, responses: [.failure(URLError(.networkConnectionLost))],
            configuration: Self.configuration(retryServerErrors: false))
        #expect(try #require(lost.error).isOutcomeUnknown)
        let refused = Simulation.run(
            Self.put, responses: [.failure(URLError(.cannotConnectToHost))],
            configuration: Self.configuration(retryServerErrors: false))
        #expect(try #require(refused.error).kind == .transport)
        #expect(try #require(refused.error).isOutcomeUnknown == false)
    }
}

/// A flag set once from any thread.
final class Locked2Flag: @unchecked Sendable {
    // @unchecked Sendable: `value` is only touched under `lock`.
    private let lock = NSLock()
    private var value = false
    func set() {
        lock.lock()
        value = true
        lock.unlock()
    }
    var isSet: Bool {
        lock.lock()
        defer { lock.unlock() }
        return value
    }
}
