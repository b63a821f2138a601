import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

@Suite("The pipeline: fixed call order, exactly-once completion", .ownThreads)
struct PipelineTests {
    /// Runs `operation` on a client over `transport`, returning every result the completion saw.
    func runCounting<Op: CouchOperation>(
        _ operation: Op, transport: SimulatedTransport, cancelAfter: Double? = nil
    ) -> [Result<CouchResponse<Op.Response>, CouchError>] {
        let client = Simulation.client(transport: transport)
        let results = EventLog<Result<CouchResponse<Op.Response>, CouchError>>()
        let done = DispatchSemaphore(value: 0)
        let task = client.add(operation: operation) { result in
            results.append(result)
            done.signal()
        }
        if let cancelAfter {
            Thread.sleep(forTimeInterval: cancelAfter)
            task.cancel()
        }
        #expect(waitFor(done))
        task.waitUntilFinished()
        // Give a wrongly repeated completion the chance to show up.
        Thread.sleep(forTimeInterval: 0.05)
        return results.all
    }

    @Test("validate → serialise → endpoint, parameters, method, data, content type → processResponse → completion")
    func callOrder() {
        let log = EventLog<String>()
        let transport = SimulatedTransport(responses: [.json(201, #"{"ok":true}"#)])
        let client = Simulation.client(transport: transport)
        let done = DispatchSemaphore(value: 0)
        client.add(operation: RecordingOperation(log: log)) { _ in
            log.append("completion")
            done.signal()
        }
        #expect(waitFor(done))
        #expect(
            log.all == [
                "validate", "serialise", "endpoint", "parameters", "method", "data", "contentType",
                "processResponse", "completion",
            ])
        let request = transport.requests.first
        #expect(request?.method == "PUT")
        #expect(request?.path == "/db/doc")
        #expect(request?.query == "rev=1-a")
        #expect(request?.headers["Content-Type"] == "application/json")
        #expect(request?.body == Data(#"{"x":1}"#.utf8))
    }

    @Test("the async API drives the same order, without a Foundation.Operation")
    func callOrderAsync() async throws {
        let log = EventLog<String>()
        let transport = SimulatedTransport(responses: [.json(201, #"{"ok":true}"#)])
        let client = Simulation.client(transport: transport)
        let response = try await client.execute(RecordingOperation(log: log))
        log.append("returned")
        #expect(response.value == OKResponse(ok: true))
        #expect(
            log.all == [
                "validate", "serialise", "endpoint", "parameters", "method", "data", "contentType",
                "processResponse", "returned",
            ])
        #expect(transport.requests.first?.path == "/db/doc")
    }

    @Test("completion exactly once on success")
    func success() throws {
        let results = runCounting(
            RecordingOperation(log: EventLog()), transport: SimulatedTransport(responses: [.json(201, #"{"ok":true}"#)])
        )
        #expect(results.count == 1)
        #expect(try results.first?.get().value == OKResponse(ok: true))
        #expect(try results.first?.get().statusCode == 201)
    }

    @Test("validation failure: completion once, nothing sent, later steps not run")
    func validationFailure() {
        let log = EventLog<String>()
        let transport = SimulatedTransport(responses: [])
        let results = runCounting(RecordingOperation(log: log, failValidation: true), transport: transport)
        #expect(results.count == 1)
        guard case .failure(let error)? = results.first else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.kind == .validation)
        #expect(transport.requests.isEmpty)
        #expect(log.all == ["validate"])
    }

    @Test("serialisation failure: completion once, nothing sent")
    func serialisationFailure() {
        let log = EventLog<String>()
        let transport = SimulatedTransport(responses: [])
        let results = runCounting(RecordingOperation(log: log, failSerialisation: true), transport: transport)
        #expect(results.count == 1)
        guard case .failure(let error)? = results.first else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.kind == .serialisation)
        #expect(transport.requests.isEmpty)
        #expect(log.all == ["validate", "serialise"])
    }

    @Test("HTTP error: completion once with CouchDB's error, reason, status, method and path")
    func httpError() {
        let transport = SimulatedTransport(responses: [
            .json(409, #"{"error":"conflict","reason":"Document update conflict."}"#)
        ])
        let results = runCounting(RecordingOperation(log: EventLog()), transport: transport)
        #expect(results.count == 1)
        guard case .failure(let error)? = results.first else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.kind == .http)
        #expect(error.statusCode == 409)
        #expect(error.error == "conflict")
        #expect(error.reason == "Document update conflict.")
        #expect(error.method == "PUT")
        #expect(error.path == "/db/doc")
    }

    @Test("transport error: completion once with a transport error")
    func transportError() {
        let transport = SimulatedTransport(responses: [.failure(URLError(.cannotConnectToHost))])
        let results = runCounting(RecordingOperation(log: EventLog()), transport: transport)
        #expect(results.count == 1)
        guard case .failure(let error)? = results.first else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.kind == .transport)
        #expect(error.underlying is URLError)
    }

    @Test("cancellation in flight: completion once with cancelled, the request is cancelled")
    func cancellationInFlight() {
        let transport = SimulatedTransport(responses: [.json(201, #"{"ok":true}"#, delay: 5)])
        let results = runCounting(RecordingOperation(log: EventLog()), transport: transport, cancelAfter: 0.2)
        #expect(results.count == 1)
        guard case .failure(let error)? = results.first else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.kind == .cancelled)
    }

    @Test("cancellation before start: completion once, nothing sent")
    func cancellationBeforeStart() {
        let transport = SimulatedTransport(responses: [])
        let client = Simulation.client(transport: transport)
        let results = EventLog<Result<CouchResponse<OKResponse>, CouchError>>()
        let task = client.task(for: RecordingOperation(log: EventLog())) { results.append($0) }
        task.cancel()
        let queue = OperationQueue()
        queue.addOperation(task)
        queue.waitUntilAllOperationsAreFinished()
        Thread.sleep(forTimeInterval: 0.05)
        #expect(results.count == 1)
        #expect(results.all.first.map { if case .failure(let e) = $0 { e.kind == .cancelled } else { false } } == true)
        #expect(transport.requests.isEmpty)
        #expect(task.isFinished)
    }

    @Test("a malformed success body becomes a decoding CouchError with the status and body")
    func malformedBody() {
        let run = Simulation.run(GetServerInfoOperation(), response: .json(200, "<html>oops</html>"))
        #expect(run.error?.kind == .decoding)
        #expect(run.error?.statusCode == 200)
        #expect(run.error?.bodyText?.contains("oops") == true)
    }

    @Test("a non-JSON error body is kept as text")
    func nonJSONError() {
        let run = Simulation.run(
            GetServerInfoOperation(),
            response: SimulatedResponse(
                status: 502, headers: ["Content-Type": "text/html"], body: Data("Bad Gateway".utf8)))
        #expect(run.error?.kind == .http)
        #expect(run.error?.statusCode == 502)
        #expect(run.error?.bodyText == "Bad Gateway")
    }

    @Test("the simulation honours the status it is given")
    func honoursStatus() {
        for status in [200, 201, 202, 400, 404, 500] {
            let run = Simulation.run(
                GetServerInfoOperation(),
                response: .json(status, #"{"couchdb":"Welcome","version":"3.5.0","error":"e","reason":"r"}"#))
            if status < 300 {
                #expect(run.result.map(\.statusCode) == .success(status))
            } else {
                #expect(run.error?.statusCode == status)
            }
        }
    }
}

extension Result where Success == Int, Failure == CouchError {
    static func == (lhs: Self, rhs: Self) -> Bool {
        switch (lhs, rhs) {
        case (.success(let a), .success(let b)): return a == b
        default: return false
        }
    }
}
