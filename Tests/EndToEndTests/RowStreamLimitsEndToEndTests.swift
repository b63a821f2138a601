import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import Testing

/// A server that answers every request with `head`, then `piece` over and over (up to `cap`
/// bytes, or until the client goes away), then `tail`: an element of a streamed answer that
/// never ends, as a broken or hostile peer sends it.
final class EndlessElementHandler: RequestHandler, @unchecked Sendable {
    // @unchecked Sendable: `sent` and `requests` are behind `lock`.
    private let lock = NSLock()
    private var sentBytes = 0
    private var requestCount = 0
    let head: Data
    let piece: Data
    let tail: Data
    let cap: Int

    init(head: String, piece: String = String(repeating: "x", count: 64 << 10), tail: String = "", cap: Int = 96 << 20)
    {
        self.head = Data(head.utf8)
        self.piece = Data(piece.utf8)
        self.tail = Data(tail.utf8)
        self.cap = cap
    }

    /// Body bytes written to the connection so far (all requests).
    var sent: Int {
        lock.lock()
        defer { lock.unlock() }
        return sentBytes
    }

    var requests: Int {
        lock.lock()
        defer { lock.unlock() }
        return requestCount
    }

    private func count(_ bytes: Int) {
        lock.lock()
        sentBytes += bytes
        lock.unlock()
    }

    func handle(_ request: ServerRequest) -> ServerResponse {
        lock.lock()
        requestCount += 1
        lock.unlock()
        return ServerResponse(
            status: 200, headers: ["Content-Type": "application/json"],
            body: .stream { [self] writer in
                guard writer.write(head) else { return }
                var written = 0
                while written < cap {
                    guard writer.write(piece) else { return }
                    written += piece.count
                    count(piece.count)
                }
                if !tail.isEmpty { writer.write(tail) }
            })
    }
}

/// Whether the transport under test stops reading when a stream is cancelled, so that what the
/// server could send is bounded too: not `URLSessionTransport` on Linux, where libcurl reads a
/// response ahead of its delegate (README, Limitations). The client's own memory is bounded either way.
var transportStopsReading: Bool {
    #if canImport(FoundationNetworking)
        return E2EEnvironment.transportChoice != "urlsession"
    #else
        return true
    #endif
}

/// Runs `body` with a TestServer answering through `handler` and a client of the configured
/// transport whose `maximumStreamedElementSize` is `limit`.
func withEndlessServer(
    _ handler: EndlessElementHandler, limit: Int? = 1 << 20, _ body: (CouchDBClient) async throws -> Void
) async throws {
    let server = try TestServer.start(handler: handler)
    defer { server.stop() }
    var configuration = Configuration()
    configuration.maximumStreamedElementSize = limit
    configuration.retryPolicy = RetryPolicy(maximumRetries: 1, initialDelay: 0.01, maximumDelay: 0.05)
    E2EEnvironment.selectTransport(&configuration)
    let client = CouchDBClient(url: server.url, configuration: configuration)
    defer { client.shutdown() }
    try await body(client)
}

@Suite("End to end: one endless row, member or feed line ends at maximumStreamedElementSize")
struct RowStreamLimitsEndToEndTests {
    /// The error of a stream that should fail, taken within 60 s (the old behaviour read until the
    /// server's 96 MiB cap, and would have read forever from a server without one).
    func failure<S: AsyncSequence & Sendable>(of sequence: S) async -> CouchError? where S.Element: Sendable {
        let (_, error) = await drain(sequence, within: 60)
        return error as? CouchError
    }

    @Test(
        "An _all_docs row or a top-level member that never ends: a CouchError naming the limit, far before the end",
        arguments: [
            #"{"total_rows":1,"offset":0,"rows":[{"id":"a","key":"a","value":{"rev":"1-a"},"doc":{"text":""#,
            #"{"total_rows":1,"offset":0,"warning":""#,
        ])
    func endlessRowOrMember(head: String) async throws {
        let handler = EndlessElementHandler(head: head)
        try await withEndlessServer(handler) { client in
            let error = await failure(of: client.rows(AllDocsOperation<JSONValue>(database: "db")))
            #expect(error?.kind == .decoding, "\(String(describing: error))")
            #expect(error?.message.contains("maximumStreamedElementSize") == true, "\(String(describing: error))")
            #expect(error?.message.contains("\(1 << 20)") == true)
            // Stopped as the limit was passed: what was read ahead is a fraction of the 96 MiB.
            if transportStopsReading { #expect(handler.sent < 48 << 20, "the server sent \(handler.sent) bytes") }
        }
    }

    @Test("A continuous _changes line that never ends ends the follower with that error, without retrying it")
    func endlessFeedLine() async throws {
        let handler = EndlessElementHandler(
            head: "\n\n" + #"{"seq":"1-a","id":"a","changes":[{"rev":"1-a"}],"doc":{"text":""#)
        try await withEndlessServer(handler) { client in
            var options = ChangesFollower<JSONValue>.Options(mode: .listen)
            options.continuous = true
            options.initialBackoff = 0.01
            let follower = ChangesFollower<JSONValue>(client: client, database: "db", options: options)
            let error = await failure(of: follower)
            #expect(error?.kind == .decoding, "\(String(describing: error))")
            #expect(error?.message.contains("maximumStreamedElementSize") == true, "\(String(describing: error))")
            #expect(handler.requests == 1)
            if transportStopsReading { #expect(handler.sent < 48 << 20, "the server sent \(handler.sent) bytes") }
        }
    }

    @Test(
        "A flood of heartbeat newlines (16 MiB of them, past the limit) is not an element: the change after it arrives")
    func heartbeatFlood() async throws {
        let handler = EndlessElementHandler(
            head: "\n", piece: String(repeating: "\n", count: 64 << 10),
            tail: #"{"seq":"1-a","id":"a","changes":[{"rev":"1-a"}]}"# + "\n" + #"{"last_seq":"1-a","pending":0}"#
                + "\n",
            cap: 16 << 20)
        try await withEndlessServer(handler, limit: 1 << 20) { client in
            var ids: [String] = []
            for try await change in client.rows(ContinuousChangesOperation(ChangesOperation<JSONValue>(database: "db")))
            {
                ids.append(change.id)
            }
            #expect(ids == ["a"])
        }
    }
}

/// Answers a continuous `_changes` request: the first with a blank line and then nothing until
/// released (a stalled feed, which never ends by itself while the test runs), every later one with
/// one change.
final class StallingFeedHandler: RequestHandler, @unchecked Sendable {
    // @unchecked Sendable: `count` and `released` are behind `lock`.
    private let lock = NSLock()
    private var count = 0
    private var released = false

    /// Ends the stalled response (at most 60 s after it began in any case).
    func release() {
        lock.lock()
        released = true
        lock.unlock()
    }

    private var isReleased: Bool {
        lock.lock()
        defer { lock.unlock() }
        return released
    }

    var requests: Int {
        lock.lock()
        defer { lock.unlock() }
        return count
    }

    func handle(_ request: ServerRequest) -> ServerResponse {
        lock.lock()
        count += 1
        let first = count == 1
        lock.unlock()
        return ServerResponse(
            status: 200, headers: ["Content-Type": "application/json"],
            body: .stream { writer in
                if first {
                    writer.write(Data("\n".utf8))
                    var waited = 0.0
                    while !self.isReleased, waited < 60 {
                        Thread.sleep(forTimeInterval: 0.05)
                        waited += 0.05
                    }
                    return
                }
                writer.write(Data((#"{"seq":"1-a","id":"a","changes":[{"rev":"1-a"}]}"# + "\n").utf8))
            })
    }
}

@Suite("End to end: a continuous feed that stalls ends and is reopened")
struct StalledFeedEndToEndTests {
    @Test(
        "A stalled continuous feed (no byte, not even a heartbeat) ends at the request's timeout between bytes and is reopened"
    )
    func stalledFeedReopened() async throws {
        let handler = StallingFeedHandler()
        let server = try TestServer.start(handler: handler)
        defer { server.stop() }
        defer { handler.release() }
        var configuration = Configuration()
        configuration.requestTimeout = 0.5
        configuration.retryPolicy = RetryPolicy(maximumRetries: 0)
        E2EEnvironment.selectTransport(&configuration)
        let client = CouchDBClient(url: server.url, configuration: configuration)
        defer { client.shutdown() }
        var options = ChangesFollower<JSONValue>.Options(mode: .listen)
        options.continuous = true
        options.initialBackoff = 0.01
        let follower = ChangesFollower<JSONValue>(client: client, database: "db", options: options)
        let first = Task {
            var iterator = follower.makeAsyncIterator()
            return try await iterator.next()?.id
        }
        // The stalled response never ends by itself while the test runs: the change (sent only on
        // a second request) arrives only if the first was given up. 60 s bounds the old behaviour.
        let watchdog = Task {
            try await Task.sleep(for: .seconds(60))
            first.cancel()
        }
        defer { watchdog.cancel() }
        let id = try? await first.value
        #expect(id == "a")
        #expect(handler.requests >= 2)
    }
}
