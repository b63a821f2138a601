import Foundation
@testable import SwiftCouch
import SwiftCouchTestSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Issue 24 over ``URLSessionTransport``: peers that trickle, stall in interim responses, send
/// without end, or send a compressed body cut short. Each answer is scripted byte by byte by a
/// ``RawResponder``; every call must end within its bounds with an error that says what happened.
@Suite("URLSessionTransport: deadlines, memory bounds, compressed and truncated bodies", .timingSensitive)
struct URLSessionTransportBoundsTests {
    // MARK: Deadline

    @Test("A body trickled one byte per 0.1 s ends at the 1 s deadline with timedOut, not after 19 s")
    func deadlineBoundsATrickledBody() async throws {
        let responder = try RawResponder { peer in
            peer.write("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 190\r\n\r\n")
            peer.trickle(Data(repeating: 0x20, count: 190), pause: 0.1)
        }
        defer { responder.stop() }
        let transport = URLSessionTransport()
        defer { transport.shutdown() }
        var request = HTTPRequest(method: .get, url: responder.url("/slow"), timeout: 5)
        request.deadline = 1
        let (result, elapsed) = await transport.timedResult(for: request)
        #expect(elapsed < .seconds(10), "ended after \(elapsed); the body takes 19 s")
        expectURLError(result, .timedOut, mentioning: "deadline of 1 s")
    }

    @Test("102 Processing every 0.2 s, without end, fails at the 1 s deadline instead of waiting for ever")
    func deadlineBoundsInterimResponses() async throws {
        let responder = try RawResponder { peer in
            // Stops after 12 s (so a transport without a deadline ends too), then answers.
            for _ in 0..<60 {
                guard peer.write("HTTP/1.1 102 Processing\r\n\r\n") else { return }
                Thread.sleep(forTimeInterval: 0.2)
            }
            peer.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        }
        defer { responder.stop() }
        let transport = URLSessionTransport()
        defer { transport.shutdown() }
        var request = HTTPRequest(method: .get, url: responder.url("/interim"), timeout: 5)
        request.deadline = 1
        let whole = await transport.timedResult(for: request)
        #expect(whole.elapsed < .seconds(10), "the interim responses (12 s) were waited through")
        expectURLError(whole.result, .timedOut, mentioning: "deadline of 1 s")

        let streamed = await transport.streamed(request)
        #expect(streamed.elapsed < .seconds(10), "the interim responses (12 s) were waited through")
        expectURLError(streamed.result, .timedOut, mentioning: "head did not arrive")
    }

    @Test("A stream's deadline covers its head (trickled: timedOut), not its body (trickled: every byte)")
    func streamDeadlineCoversOnlyTheHead() async throws {
        let slowHead = try RawResponder { peer in
            peer.trickle(Data("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}".utf8), pause: 0.1)
        }
        defer { slowHead.stop() }
        let slowBody = try RawResponder { peer in
            peer.write("HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n")
            peer.trickle(Data(repeating: 0x41, count: 15), pause: 0.3)
        }
        defer { slowBody.stop() }
        let transport = URLSessionTransport()
        defer { transport.shutdown() }
        var headRequest = HTTPRequest(method: .get, url: slowHead.url("/head"), timeout: 5)
        headRequest.deadline = 1
        let head = await transport.streamed(headRequest)
        #expect(head.elapsed < .seconds(10))
        expectURLError(head.result, .timedOut, mentioning: "deadline of 1 s")
        #expect(head.bytes == 0)

        var bodyRequest = HTTPRequest(method: .get, url: slowBody.url("/body"), timeout: 5)
        // The body takes 4.5 s, well past the deadline; the deadline leaves the head 2 s to arrive even
        // on a loaded machine (0.5 s was once too little in a whole-suite run).
        bodyRequest.deadline = 2
        let body = await transport.streamed(bodyRequest)
        #expect(body.error == nil, "\(String(describing: body.error))")
        #expect(body.bytes == 15)
    }

    /// A racing request's deadline: mostly 0–0.25 s, racing answers that take 0–0.2 s; every sixth
    /// (never one that is cancelled) 3 s, so that some answers arrive in time however loaded the
    /// machine is (in CI's cluster step, all 120 of a group once missed a deadline of at most 0.25 s).
    static func raceDeadline(_ index: Int) -> Double {
        index % 6 == 1 ? 3 : Double.random(in: 0...0.25)
    }

    @Test("Deadlines, answers and cancellations racing: every request and stream completes exactly once")
    func exactlyOneCompletion() async throws {
        let responder = try RawResponder { peer in
            Thread.sleep(forTimeInterval: Double.random(in: 0...0.2))
            peer.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        }
        defer { responder.stop() }
        let transport = URLSessionTransport(maximumConnectionsPerHost: 16)
        defer { transport.shutdown() }
        let counters = (0..<120).map { _ in CompletionCounter() }
        await withTaskGroup(of: Void.self) { group in
            for (index, counter) in counters.enumerated() {
                group.addTask {
                    var request = HTTPRequest(method: .get, url: responder.url("/race/\(index)"), timeout: 5)
                    request.deadline = Self.raceDeadline(index)
                    await withCheckedContinuation { continuation in
                        counter.onFirst = { continuation.resume() }
                        let cancellable = transport.send(request) { counter.record($0) }
                        if index % 3 == 0 {
                            let delay = DispatchTime.now() + .milliseconds(Int.random(in: 0...200))
                            DispatchQueue.global().asyncAfter(deadline: delay) { cancellable.cancel() }
                        }
                    }
                }
            }
        }
        let streamCounters = (0..<120).map { _ in CompletionCounter() }
        await withTaskGroup(of: Void.self) { group in
            for (index, counter) in streamCounters.enumerated() {
                group.addTask {
                    var request = HTTPRequest(method: .get, url: responder.url("/stream-race/\(index)"), timeout: 5)
                    request.deadline = Self.raceDeadline(index)
                    await withCheckedContinuation { continuation in
                        counter.onFirst = { continuation.resume() }
                        let receiver = CountingReceiver(counter)
                        let task = transport.stream(request, receiver: receiver)
                        if index % 3 == 0 {
                            let delay = DispatchTime.now() + .milliseconds(Int.random(in: 0...200))
                            DispatchQueue.global().asyncAfter(deadline: delay) { task.cancel() }
                        }
                    }
                }
            }
        }
        try await Task.sleep(for: .milliseconds(500))
        for (index, counter) in counters.enumerated() {
            #expect(counter.count == 1, "request \(index) completed \(counter.count) times")
        }
        for (index, counter) in streamCounters.enumerated() {
            #expect(counter.count == 1, "stream \(index) completed \(counter.count) times")
        }
        for all in [counters, streamCounters] {
            #expect(all.contains { $0.succeeded }, "none succeeded")
            #expect(all.contains { $0.timedOut }, "none timed out")
        }
    }

    // MARK: Memory

    @Test("A whole body without end stops at maximumResponseBodySize as it arrives, not after it was read")
    func wholeBodyLimitStopsAnEndlessBody() async throws {
        let sent = SentCounter()
        let responder = try RawResponder.endlessChunkedBody(of: 0x20, contentType: "application/json", counting: sent)
        defer { responder.stop() }
        let transport = URLSessionTransport()
        defer { transport.shutdown() }
        var request = HTTPRequest(method: .get, url: responder.url("/endless"), timeout: 10)
        request.maximumResponseBodySize = 1 << 20
        let result = await transport.result(for: request)
        let sentAtEnd = sent.bytes
        expectURLError(result, .dataLengthExceedsMaximum, mentioning: "maximumResponseBodySize")
        // The size in the error is what was collected: just past the limit, not the whole body.
        if case .failure(let error) = result, let size = collectedSize(error) {
            #expect(size < 2 << 20, "\(size) bytes were collected before the 1 MiB limit stopped the body")
        }
        try await Task.sleep(for: .milliseconds(300))
        // Not asserted: on Linux libcurl reads ahead of URLSession's delegate queue (by hundreds of
        // MiB over loopback when that queue waits for a CPU), and after the cancellation until
        // FoundationNetworking removes the transfer; the transport discards what comes after the limit.
        print(
            "URLSession endless body: \(sentAtEnd >> 20) MiB sent when the call ended, \(sent.bytes >> 20) MiB in all")
    }

    // Its own test, transport and responder. It was part of the test above, on the same session,
    // while that test's endless responder kept sending and libcurl may still have been reading it:
    // in cluster-mode CI runs the refusal took 5.5 s and 8.5 s against this bound of 5 s.
    @Test("A declared Content-Length past maximumResponseBodySize is refused at the head")
    func declaredLengthPastTheLimitIsRefusedAtTheHead() async throws {
        let transport = URLSessionTransport()
        defer { transport.shutdown() }
        let declared = try RawResponder { peer in
            peer.write("HTTP/1.1 200 OK\r\nContent-Length: 104857600\r\n\r\n")
            peer.trickle(Data(repeating: 0x20, count: 100), pause: 0.1)
        }
        defer { declared.stop() }
        var declaredRequest = HTTPRequest(method: .get, url: declared.url("/declared"), timeout: 10)
        declaredRequest.maximumResponseBodySize = 1 << 20
        let early = await transport.timedResult(for: declaredRequest)
        #expect(early.elapsed < .seconds(5), "a declared length past the limit was not refused at the head")
        expectURLError(early.result, .dataLengthExceedsMaximum, mentioning: "104857600 bytes")
    }

    @Test("A paused stream of an endless body fails at the read-ahead limit; nothing is delivered while paused")
    func streamReadAheadIsBounded() async throws {
        let sent = SentCounter()
        let responder = try RawResponder.endlessChunkedBody(of: 0x0A, counting: sent)
        defer { responder.stop() }
        let transport = URLSessionTransport()
        defer { transport.shutdown() }
        let outcome = await transport.streamed(
            HTTPRequest(method: .get, url: responder.url("/feed"), timeout: 10), pauseOnFirstChunk: true)
        let sentAtEnd = sent.bytes
        expectURLError(outcome.result, .dataLengthExceedsMaximum, mentioning: "maximumStreamReadAhead")
        #expect(outcome.chunksWhilePaused == 0, "\(outcome.chunksWhilePaused) chunks reached a paused receiver")
        if case .failure(let error) = outcome.result, let waiting = collectedSize(error) {
            #expect(waiting <= (32 << 20) + (1 << 20), "\(waiting) bytes were held for a paused receiver")
        }
        print("URLSession paused endless stream: \(sentAtEnd >> 20) MiB sent when it ended")
    }

    // MARK: Compressed and truncated bodies

    @Test("A gzip body cut at 60 % (its framing intact) is an error, whole or streamed, never a short success")
    func truncatedGzipIsAnError() async throws {
        let plain = Data((0..<58_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 5) })
        let compressed = Gzip.compress(plain)
        let cut = compressed.prefix(compressed.count * 6 / 10)
        let responder = try RawResponder { peer in
            peer.write(
                "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Encoding: gzip\r\n"
                    + "Content-Length: \(cut.count)\r\n\r\n")
            peer.write(cut)
        }
        defer { responder.stop() }
        let transport = URLSessionTransport()
        defer { transport.shutdown() }
        let whole = await transport.result(for: HTTPRequest(method: .get, url: responder.url("/att")))
        expectURLError(whole, .cannotDecodeContentData, mentioning: "Content-Encoding: gzip")
        let streamed = await transport.streamed(HTTPRequest(method: .get, url: responder.url("/att")))
        expectURLError(streamed.result, .cannotDecodeContentData, mentioning: "Content-Encoding: gzip")
        #expect(streamed.bytes == 0, "\(streamed.bytes) inflated bytes were handed over")
        #expect(responder.requestHeads.allSatisfy { $0.contains("accept-encoding: identity") })
    }

    @Test("A gzip bomb is refused at its head: no inflated byte reaches the receiver")
    func gzipBombIsRefused() async throws {
        let bomb = Gzip.compress(Data(count: 4 << 20))
        let responder = try RawResponder { peer in
            peer.write("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: \(bomb.count)\r\n\r\n")
            peer.write(bomb)
        }
        defer { responder.stop() }
        let transport = URLSessionTransport()
        defer { transport.shutdown() }
        let streamed = await transport.streamed(HTTPRequest(method: .get, url: responder.url("/bomb")))
        expectURLError(streamed.result, .cannotDecodeContentData, mentioning: "compressed")
        #expect(streamed.bytes == 0, "\(streamed.bytes >> 20) MiB inflated from \(bomb.count) bytes")
    }

    @Test("A plain body that ends before its Content-Length, or a chunked one without its last chunk, fails")
    func truncatedPlainBodiesFail() async throws {
        let short = try RawResponder { peer in
            peer.write("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
            peer.write(Data(repeating: 0x41, count: 600))
        }
        defer { short.stop() }
        let unterminated = try RawResponder { peer in
            peer.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            peer.write("258\r\n" + String(repeating: "A", count: 600) + "\r\n")
        }
        defer { unterminated.stop() }
        let transport = URLSessionTransport()
        defer { transport.shutdown() }
        let whole = await transport.result(for: HTTPRequest(method: .get, url: short.url("/short")))
        expectURLError(whole, .networkConnectionLost, mentioning: "600 of 1000 bytes")
        let streamed = await transport.streamed(HTTPRequest(method: .get, url: short.url("/short")))
        expectURLError(streamed.result, .networkConnectionLost, mentioning: "600 of 1000 bytes")
        if case .success(let response) = await transport.result(
            for: HTTPRequest(method: .get, url: unterminated.url("/chunked")))
        {
            Issue.record("a chunked body without its last chunk succeeded with \(response.body.count) bytes")
        }
        if await transport.streamed(HTTPRequest(method: .get, url: unterminated.url("/chunked"))).error == nil {
            Issue.record("a streamed chunked body without its last chunk succeeded")
        }
    }

    @Test("Through the client: a download of a gzip attachment cut short throws instead of reporting success")
    func truncatedGzipDownloadThrows() async throws {
        let plain = Data((0..<58_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 7) })
        let compressed = Gzip.compress(plain)
        let cut = compressed.prefix(compressed.count * 6 / 10)
        let responder = try RawResponder { peer in
            peer.write(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\nETag: \"1-a\"\r\n"
                    + "Content-Length: \(cut.count)\r\n\r\n")
            peer.write(cut)
        }
        defer { responder.stop() }
        var configuration = Configuration()
        configuration.transport = URLSessionTransport()
        configuration.requestTimeout = 5
        configuration.retryPolicy = RetryPolicy(maximumRetries: 0)
        let client = CouchDBClient(url: responder.url("/"), configuration: configuration)
        defer { client.shutdown() }
        let target = FileManager.default.temporaryDirectory.appendingPathComponent(
            "swiftcouch-cut-\(UUID().uuidString).txt")
        defer { try? FileManager.default.removeItem(at: target) }
        do {
            let download = try await client.download(
                GetAttachmentOperation(database: "db", documentID: "doc", name: "a.txt"), to: target
            ).value
            Issue.record("a download cut at 60 % succeeded with \(download.length) of \(plain.count) bytes")
        } catch {
            #expect("\(error)".contains("Content-Encoding: gzip"), "\(error)")
        }
    }
}

// MARK: - Helpers

extension URLSessionTransport {
    /// Sends `request` and waits for its result.
    fileprivate func result(for request: HTTPRequest) async -> Result<HTTPResponse, any Error> {
        await timedResult(for: request).result
    }

    /// Sends `request` and waits for its result and the time its completion ran (not when the
    /// waiting task resumed: a busy test run may take long to schedule it).
    fileprivate func timedResult(
        for request: HTTPRequest
    ) async -> (result: Result<HTTPResponse, any Error>, elapsed: Duration) {
        let started = ContinuousClock.now
        return await withCheckedContinuation { continuation in
            _ = send(request) { continuation.resume(returning: ($0, ContinuousClock.now - started)) }
        }
    }

    /// Streams `request` into a ``StreamOutcomeReceiver`` and waits for its end.
    fileprivate func streamed(_ request: HTTPRequest, pauseOnFirstChunk: Bool = false) async -> StreamOutcome {
        let started = ContinuousClock.now
        var outcome = await withCheckedContinuation { continuation in
            let receiver = StreamOutcomeReceiver(pauseOnFirstChunk: pauseOnFirstChunk) {
                continuation.resume(returning: $0)
            }
            receiver.attach(stream(request, receiver: receiver))
        }
        outcome.elapsed = outcome.ended - started
        return outcome
    }
}

/// How a stream ended.
private struct StreamOutcome: Sendable {
    var bytes = 0
    var chunksWhilePaused = 0
    var error: (any Error)?
    /// When the receiver was completed, and how long after the stream was started.
    var ended = ContinuousClock.now
    var elapsed = Duration.zero
    var result: Result<HTTPResponse, any Error> {
        if let error { return .failure(error) }
        return .success(HTTPResponse(statusCode: 200))
    }
}

/// Counts a stream's bytes; optionally pauses its task on the first chunk and never resumes it.
private final class StreamOutcomeReceiver: StreamReceiver, @unchecked Sendable {
    // @unchecked Sendable: mutable state is behind `lock`.
    private let lock = NSLock()
    private var outcome = StreamOutcome()
    private var task: (any StreamingTask)?
    private var paused = false
    /// Whether `pause()` was called on the task (the first chunk may come before the task is known).
    private var pauseApplied = false
    private var done: (@Sendable (StreamOutcome) -> Void)?
    private let pauseOnFirstChunk: Bool

    init(pauseOnFirstChunk: Bool, done: @escaping @Sendable (StreamOutcome) -> Void) {
        self.pauseOnFirstChunk = pauseOnFirstChunk
        self.done = done
    }

    /// The first chunk can arrive before `stream` has returned the task: the pause is then made here.
    func attach(_ task: any StreamingTask) {
        let pauseNow = lock.withLock { () -> Bool in
            self.task = task
            guard paused, !pauseApplied else { return false }
            pauseApplied = true
            return true
        }
        if pauseNow { task.pause() }
    }

    func receive(head: HTTPResponse) {}

    func receive(chunk: Data) {
        let pause = lock.withLock { () -> (any StreamingTask)? in
            if pauseApplied { outcome.chunksWhilePaused += 1 }
            outcome.bytes += chunk.count
            guard pauseOnFirstChunk, !paused else { return nil }
            paused = true
            guard let task else { return nil }
            pauseApplied = true
            return task
        }
        pause?.pause()
    }

    func complete(error: (any Error)?) {
        let (done, ended) = lock.withLock { () -> ((@Sendable (StreamOutcome) -> Void)?, StreamOutcome) in
            outcome.error = error
            outcome.ended = ContinuousClock.now
            defer { self.done = nil }
            return (self.done, outcome)
        }
        done?(ended)
    }
}

/// Counts the completions of one request.
private final class CompletionCounter: @unchecked Sendable {
    // @unchecked Sendable: mutable state is behind `lock`.
    private let lock = NSLock()
    private var completions = 0
    private(set) var succeeded = false
    private(set) var timedOut = false
    var onFirst: (@Sendable () -> Void)?

    var count: Int { lock.withLock { completions } }

    /// A callback after the completion counts as one more completion.
    func lateCallback() { lock.withLock { completions += 1 } }

    func record(_ result: Result<HTTPResponse, any Error>) {
        let first = lock.withLock { () -> (@Sendable () -> Void)? in
            completions += 1
            if case .success = result { succeeded = true }
            if case .failure(let error) = result, (error as? URLError)?.code == .timedOut { timedOut = true }
            defer { onFirst = nil }
            return onFirst
        }
        first?()
    }
}

/// Records a stream's completions (and any callback after one) in a ``CompletionCounter``.
private final class CountingReceiver: StreamReceiver, @unchecked Sendable {
    // @unchecked Sendable: `counter` is thread-safe.
    private let counter: CompletionCounter
    init(_ counter: CompletionCounter) { self.counter = counter }
    func receive(head: HTTPResponse) { if counter.count > 0 { counter.lateCallback() } }
    func receive(chunk: Data) { if counter.count > 0 { counter.lateCallback() } }
    func complete(error: (any Error)?) {
        counter.record(error.map { .failure($0) } ?? .success(HTTPResponse(statusCode: 200)))
    }
}

/// Bytes a responder managed to write.
private final class SentCounter: @unchecked Sendable {
    // @unchecked Sendable: `total` is behind `lock`.
    private let lock = NSLock()
    private var total = 0
    func add(_ count: Int) { lock.withLock { total += count } }
    var bytes: Int { lock.withLock { total } }
}

/// The byte count an error's description gives in parentheses ("(1059707 bytes)"), if any.
private func collectedSize(_ error: any Error) -> Int? {
    let text = error.localizedDescription
    guard let open = text.firstIndex(of: "(") else { return nil }
    let digits = text[text.index(after: open)...].prefix { $0.isNumber }
    return Int(digits)
}

/// Expects `result` to be a `URLError` with `code` whose description mentions `text`.
private func expectURLError(
    _ result: Result<HTTPResponse, any Error>, _ code: URLError.Code, mentioning text: String,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    switch result {
    case .success(let response):
        Issue.record(
            "expected URLError \(code.rawValue), got success: \(response.statusCode), \(response.body.count) bytes",
            sourceLocation: sourceLocation)
    case .failure(let error):
        #expect((error as? URLError)?.code == code, "\(error)", sourceLocation: sourceLocation)
        #expect(
            error.localizedDescription.contains(text), "\(error.localizedDescription)", sourceLocation: sourceLocation)
    }
}

extension RawResponder {
    /// Answers with a chunked body of `byte`s in 64 KiB chunks, counted in `sent` as the socket
    /// takes them: at most 256 MiB, so that a transport reading it all ends too.
    fileprivate static func endlessChunkedBody(of byte: UInt8, contentType: String? = nil, counting sent: SentCounter)
        throws
        -> RawResponder
    {
        try RawResponder { peer in
            let type = contentType.map { "Content-Type: \($0)\r\n" } ?? ""
            peer.write("HTTP/1.1 200 OK\r\n\(type)Transfer-Encoding: chunked\r\n\r\n")
            let chunk = Data("10000\r\n".utf8) + Data(repeating: byte, count: 0x10000) + Data("\r\n".utf8)
            for _ in 0..<4_096 {
                guard peer.write(chunk) else { return }
                sent.add(0x10000)
            }
            peer.write("0\r\n\r\n")
        }
    }
}
