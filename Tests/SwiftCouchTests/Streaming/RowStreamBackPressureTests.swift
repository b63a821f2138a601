import Foundation
import SwiftCouch
import SwiftCouchTesting
import Testing

/// A transport that streams a large `_all_docs` body row by row and really stops while paused.
final class PausingTransport: Transport, @unchecked Sendable {
    // @unchecked Sendable: all mutable state is behind `condition`.
    private let condition = NSCondition()
    private var paused = false
    private var cancelled = false
    private(set) var pauses = 0
    private(set) var delivered = 0
    let rows: Int
    /// How long the transfer takes to act on its first `pause()` (standing in for the thread that
    /// applies it being descheduled).
    let pauseDelay: TimeInterval
    private var pauseDelayed = false
    /// `stream` returns only once this many rows were delivered (so they arrive before the session
    /// has tracked the transfer), or after 50 ms when the delivering thread stops short of them.
    let deliveredBeforeReturn: Int
    private var deliveringStopped = false

    init(rows: Int, pauseDelay: TimeInterval = 0, deliveredBeforeReturn: Int = 0) {
        self.rows = rows
        self.pauseDelay = pauseDelay
        self.deliveredBeforeReturn = deliveredBeforeReturn
    }

    var deliveredCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return delivered
    }

    var pauseCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return pauses
    }

    func send(_ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void)
        -> any Cancellable
    {
        completion(.failure(SimulationError("stream only")))
        return Control(transport: self)
    }

    func stream(_ request: HTTPRequest, receiver: any StreamReceiver) -> any StreamingTask {
        let total = rows
        Thread.detachNewThread { [self] in
            receiver.receive(head: HTTPResponse(statusCode: 200, headers: ["Content-Type": "application/json"]))
            receiver.receive(chunk: Data(#"{"total_rows":\#(total),"offset":0,"rows":["#.utf8))
            for index in 0..<total {
                condition.lock()
                while paused && !cancelled { condition.wait() }
                let stop = cancelled
                if !stop { delivered += 1 }
                if delivered == deliveredBeforeReturn { condition.broadcast() }
                condition.unlock()
                if stop { return }
                let comma = index == 0 ? "" : ",\r\n"
                receiver.receive(
                    chunk: Data(#"\#(comma){"id":"d\#(index)","key":"d\#(index)","value":{"rev":"1-a"}}"#.utf8))
            }
            receiver.receive(chunk: Data("\r\n]}\n".utf8))
            receiver.complete(error: nil)
            condition.lock()
            deliveringStopped = true
            condition.broadcast()
            condition.unlock()
        }
        condition.lock()
        let limit = Date().addingTimeInterval(0.05)
        while delivered < deliveredBeforeReturn && !deliveringStopped && condition.wait(until: limit) {}
        condition.unlock()
        return Control(transport: self)
    }

    fileprivate func set(paused: Bool) {
        condition.lock()
        if paused && !self.paused { pauses += 1 }
        self.paused = paused
        condition.broadcast()
        condition.unlock()
    }

    fileprivate func delayFirstPause() {
        condition.lock()
        let delay = pauseDelayed ? 0 : pauseDelay
        pauseDelayed = true
        condition.unlock()
        if delay > 0 { Thread.sleep(forTimeInterval: delay) }
    }

    fileprivate func cancel() {
        condition.lock()
        cancelled = true
        condition.broadcast()
        condition.unlock()
    }

    private struct Control: StreamingTask {
        let transport: PausingTransport
        func pause() {
            transport.delayFirstPause()
            transport.set(paused: true)
        }
        func resume() { transport.set(paused: false) }
        func cancel() { transport.cancel() }
    }
}

@Suite("Row streams: back-pressure and cancellation")
struct RowStreamBackPressureTests {
    @Test("A slow consumer pauses the transfer: rows read ahead never exceed the buffer")
    func backPressure() async throws {
        let transport = PausingTransport(rows: 2_000)
        var configuration = Configuration()
        configuration.transport = transport
        let client = CouchDBClient(url: URL(string: "http://couch.invalid")!, configuration: configuration)
        var consumed = 0
        var maximumAhead = 0
        for try await row in client.rows(AllDocsOperation<JSONValue>(database: "db"), bufferSize: 32) {
            #expect(row.id == "d\(consumed)")
            consumed += 1
            if consumed < 200 { try await Task.sleep(for: .milliseconds(1)) }
            maximumAhead = max(maximumAhead, transport.deliveredCount - consumed)
        }
        #expect(consumed == 2_000)
        #expect(transport.pauseCount > 0)
        #expect(maximumAhead <= 32 + 2)
    }

    @Test("Many streams started at once under load: each pauses as soon as its buffer is full")
    func backPressureFromTheFirstChunk() async throws {
        // Rows that fill the buffer before `next()` has returned from starting the transfer must
        // pause it too (the handle is known before the transport can deliver anything).
        let worst = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<24 {
                group.addTask {
                    let transport = PausingTransport(rows: 400)
                    var configuration = Configuration()
                    configuration.transport = transport
                    let client = CouchDBClient(url: URL(string: "http://couch.invalid")!, configuration: configuration)
                    var iterator = client.rows(AllDocsOperation<JSONValue>(database: "db"), bufferSize: 4)
                        .makeAsyncIterator()
                    _ = try await iterator.next()
                    try await Task.sleep(for: .milliseconds(50))
                    let ahead = transport.deliveredCount - 1
                    while try await iterator.next() != nil {}
                    return ahead
                }
            }
            var worst = 0
            for try await ahead in group { worst = max(worst, ahead) }
            return worst
        }
        #expect(worst <= 4 + 2)
    }

    @Test("Rows before the transfer is tracked, and a pause slow to reach it: nothing more is read until it has")
    func pauseSlowToReachTheTransfer() async throws {
        // The transport delivers a full buffer before `stream` returns (so the pause is decided
        // before the session tracks the transfer; `stream` waits for a fifth row, which must not
        // come), then takes 100 ms to act on the pause. The delivering thread must wait until the
        // transfer was told, not only until it was tracked.
        let transport = PausingTransport(rows: 400, pauseDelay: 0.1, deliveredBeforeReturn: 5)
        var configuration = Configuration()
        configuration.transport = transport
        let client = CouchDBClient(url: URL(string: "http://couch.invalid")!, configuration: configuration)
        var iterator = client.rows(AllDocsOperation<JSONValue>(database: "db"), bufferSize: 4).makeAsyncIterator()
        _ = try await iterator.next()
        try await Task.sleep(for: .milliseconds(300))
        let ahead = transport.deliveredCount - 1
        var rest = 0
        while try await iterator.next() != nil { rest += 1 }
        #expect(rest == 399)
        #expect(transport.pauseCount > 0)
        #expect(ahead <= 4 + 2, "rows read ahead while the pause was on its way: \(ahead)")
    }

    @Test("Leaving the loop cancels the transfer")
    func cancellation() async throws {
        let transport = PausingTransport(rows: 100_000)
        var configuration = Configuration()
        configuration.transport = transport
        let client = CouchDBClient(url: URL(string: "http://couch.invalid")!, configuration: configuration)
        var consumed = 0
        for try await _ in client.rows(AllDocsOperation<JSONValue>(database: "db"), bufferSize: 8) {
            consumed += 1
            if consumed == 50 { break }
        }
        try await Task.sleep(for: .milliseconds(100))
        let after = transport.deliveredCount
        try await Task.sleep(for: .milliseconds(100))
        #expect(transport.deliveredCount == after, "nothing more is read once the loop has ended")
        #expect(after < 1_000)
    }
}

@Suite("Row streams: decoding errors")
struct RowDecodingErrorTests {

    @Test("A row that does not decode is quoted in the error with its secrets redacted")
    func rowDecodingErrorIsRedacted() async throws {
        let body =
            #"{"total_rows":1,"offset":0,"rows":[{"id":"org.couchdb.user:bob","key":"k","value":{"password":"hunter2","derived_key":"abc123","note":"visible"}}]}"#
        let transport = SimulatedTransport(responses: [.json(200, body)])
        let client = Simulation.client(transport: transport)
        defer { client.shutdown() }
        do {
            for try await _ in client.rows(
                QueryViewOperation<String, Int, JSONValue>(database: "_users", design: "d", view: "v"))
            {}
            Issue.record("a row that does not decode was accepted")
        } catch let error as CouchError {
            #expect(error.kind == .decoding)
            #expect(error.message.contains("visible"))  // the row is quoted
            #expect(!error.message.contains("hunter2"))
            #expect(!error.message.contains("abc123"))
            #expect(!String(reflecting: error).contains("hunter2"))
        }
    }
}

@Suite("Streams and pages throw CouchError")
struct StreamErrorTypeTests {
    @Test("pages() and rows(): an error status and a cancellation arrive as CouchError")
    func everyErrorIsACouchError() async throws {
        let transport = SimulatedTransport(responses: [
            .json(404, #"{"error":"not_found","reason":"Database does not exist."}"#),
            .json(200, #"{"total_rows":0,"offset":0,"rows":[]}"#, delay: 5),
        ])
        let client = Simulation.client(transport: transport)
        defer { client.shutdown() }
        do {
            for try await _ in client.pages(AllDocsOperation<JSONValue>(database: "db"), pageSize: 5) {}
            Issue.record("a 404 should fail the paging")
        } catch {
            #expect((error as? CouchError)?.isNotFound == true, "\(error)")
        }
        let task = Task { () -> (any Error)? in
            do {
                for try await _ in client.pages(AllDocsOperation<JSONValue>(database: "db"), pageSize: 5) {}
                return nil
            } catch {
                return error
            }
        }
        try await Task.sleep(nanoseconds: 100_000_000)
        task.cancel()
        let error = await task.value
        #expect((error as? CouchError)?.kind == .cancelled, "\(String(describing: error))")
    }
}
