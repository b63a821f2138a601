import CouchTestServer
import Foundation
@testable import SwiftCouch
import SwiftCouchTestSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `SocketTransport` against real sockets on 127.0.0.1: a TestServer with a handler of its own
/// (bodies of any size and framing, echo, back-pressure) or the CouchDB engine (faults).
@Suite("SocketTransport over real sockets")
struct SocketTransportEndToEndTests {
    /// The client's own idle timeout in these tests: far beyond any pause between two requests of a
    /// test. They count connections opened, reused and found stale; in a full parallel run on two
    /// cores, synchronous tests elsewhere can hold both threads of the cooperative pool for more than
    /// the default 30 s, and an idle connection the transport itself closed then would be counted as
    /// a second connection (what they test is reuse and the server's closes, not that timeout).
    static let neverIdle: TimeInterval = 3_600

    // MARK: - Keep-alive

    @Test("Many requests in a row share one kept-alive connection")
    func keepAliveReuse() async throws {
        try await withServer { server, transport in
            for index in 0..<40 {
                let response = try await transport.response(for: server.request("/len/\(index * 10)"))
                #expect(response.statusCode == 200)
                #expect(response.body == TestHandler.bytes(index * 10))
            }
            let statistics = transport.statistics
            #expect(statistics.connectionsOpened == 1)
            #expect(statistics.reusedConnections == 39)
            #expect(statistics.openConnections == 1)
            #expect(server.requestCount(pathPrefix: "/len/") == 40)
        }
    }

    @Test(
        "Requests on a kept-alive connection are written by their callers; a body the socket takes only part of is finished by the connection"
    )
    func callerWrites() async throws {
        try await withServer { server, transport in
            _ = try await transport.response(for: server.request("/len/1"))
            // Bodies up to the limit a caller writes itself (256 KiB).
            for size in [1, 64 << 10, 200 << 10, 256 << 10] {
                let payload = randomData(size)
                var request = server.request("/echo", method: .put)
                request.body = payload
                let response = try await transport.response(for: request)
                #expect(response.statusCode == 200)
                #expect(response.body == payload, "a body of \(size) bytes came back different")
            }
            let statistics = transport.statistics
            #expect(statistics.connectionsOpened == 1)
            #expect(statistics.requestsWrittenByCaller == 4)
            #expect(statistics.reusedConnections == 4)
        }
    }

    @Test("A body the socket takes only part of when its caller writes it is finished by the connection's thread")
    func callerWriteFinishedByConnection() async throws {
        // Loopback's socket buffers take 256 KiB at once, so the caller here writes at most 100 KiB
        // (as a full buffer would stop it), to a server with a 4 KiB receive buffer that reads a
        // body only 0.2 s after its head; the connection's thread writes the rest.
        let server = try SlowReadingServer()
        server.serve(requests: 2)
        let transport = SocketTransport(idleTimeout: Self.neverIdle, callerWriteSlice: 100 << 10)
        defer { transport.shutdown() }
        let first = try await transport.response(
            for: HTTPRequest(method: .get, url: URL(string: "http://127.0.0.1:\(server.port)/a")!, timeout: 30))
        #expect(first.statusCode == 200)
        var request = HTTPRequest(method: .put, url: URL(string: "http://127.0.0.1:\(server.port)/b")!, timeout: 30)
        let payload = randomData(256 << 10)
        request.body = payload
        let response = try await transport.response(for: request)
        #expect(response.statusCode == 200)
        #expect(response.body == payload)
        let statistics = transport.statistics
        #expect(statistics.requestsWrittenByCaller == 1)
        #expect(statistics.callerWritesFinishedByConnection == 1)
        #expect(statistics.connectionsOpened == 1)
    }

    @Test("A request written by its caller on a kept-alive connection times out at its own timeout, not the idle one")
    func callerWrittenTimeout() async throws {
        try await withServer { server, transport in
            _ = try await transport.response(for: server.request("/len/1"))
            _ = server.faults.failNext(1, with: .delay(seconds: 5), matching: .path("/len/4"))
            var request = server.request("/len/4")
            request.timeout = 0.3
            // The connection's thread waits idle until its idle deadline (an hour here): the caller
            // must wake it to keep the request's own bound, or the answer (after 5 s) arrives first.
            // The time is taken where the transport completes (the connection's own thread), not
            // where the test resumes (a busy cooperative pool may resume it seconds later).
            let started = DispatchTime.now()
            let (result, ended) = await withCheckedContinuation { continuation in
                transport.send(request) { continuation.resume(returning: ($0, DispatchTime.now())) }
            }
            var code: URLError.Code?
            if case .failure(let error) = result { code = (error as? URLError)?.code }
            #expect(code == .timedOut, "\(result)")
            let elapsed = Double(ended.uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
            #expect(elapsed < 4, "the answer (5 s) was waited for: \(elapsed) s")
            #expect(transport.statistics.requestsWrittenByCaller == 1)
        }
    }

    @Test("A whole body past maximumResponseBodySize fails clearly, also when gzip inflates it (a gzip bomb)")
    func responseBodyLimit() async throws {
        try await withServer { server, transport in
            func limited(_ path: String) -> HTTPRequest {
                var request = server.request(path)
                request.maximumResponseBodySize = 1 << 20
                return request
            }
            for path in ["/zeros/8000000", "/len/3000000", "/chunked/3000000/65536"] {
                do {
                    _ = try await transport.response(for: limited(path))
                    Issue.record("\(path): a body past the limit was accepted")
                } catch let error as URLError {
                    #expect(error.code == .dataLengthExceedsMaximum, "\(path)")
                    #expect(error.localizedDescription.contains("maximumResponseBodySize"), "\(path)")
                }
            }
            let small = try await transport.response(for: limited("/len/1000"))
            #expect(small.body == TestHandler.bytes(1000))
        }
    }

    @Test("Content-Length, chunked, HEAD, 204 and 304 responses are framed right and keep the connection")
    func framing() async throws {
        try await withServer { server, transport in
            let fixed = try await transport.response(for: server.request("/len/5000"))
            #expect(fixed.headers["Content-Length"] == "5000")
            #expect(fixed.body == TestHandler.bytes(5000))

            let chunked = try await transport.response(for: server.request("/chunked/100000/777"))
            #expect(chunked.headers["Transfer-Encoding"] == "chunked")
            #expect(chunked.body == TestHandler.bytes(100_000))

            let head = try await transport.response(for: server.request("/len/5000", method: .head))
            #expect(head.statusCode == 200)
            #expect(head.headers["Content-Length"] == "5000")
            #expect(head.body.isEmpty)

            let noContent = try await transport.response(for: server.request("/status/204"))
            #expect(noContent.statusCode == 204)
            #expect(noContent.body.isEmpty)
            let notModified = try await transport.response(for: server.request("/status/304"))
            #expect(notModified.statusCode == 304)
            #expect(notModified.body.isEmpty)

            let after = try await transport.response(for: server.request("/len/3"))
            #expect(after.body == TestHandler.bytes(3))
            #expect(transport.statistics.connectionsOpened == 1)
        }
    }

    @Test("A response with Connection: close is never pooled")
    func connectionClose() async throws {
        try await withServer { server, transport in
            let closing = try await transport.response(for: server.request("/close"))
            #expect(closing.statusCode == 200)
            #expect(closing.body == Data("bye".utf8))
            _ = try await transport.response(for: server.request("/len/10"))
            let statistics = transport.statistics
            #expect(statistics.connectionsOpened == 2)
            #expect(statistics.staleConnectionsDiscarded == 0)
            #expect(statistics.reusedConnections == 0)
        }
    }

    @Test("gzip bodies are decoded as they arrive, unless the request names its own Accept-Encoding")
    func gzipResponses() async throws {
        try await withServer { server, transport in
            let whole = try await transport.response(for: server.request("/gzip/200000"))
            #expect(whole.body == TestHandler.bytes(200_000))
            #expect(whole.headers["Content-Encoding"] == nil)
            #expect(whole.headers["Content-Length"] == nil)

            let collector = Collector()
            _ = transport.stream(server.request("/gzip/300000/chunked"), receiver: collector)
            let streamed = try await collector.result()
            #expect(streamed.body == TestHandler.bytes(300_000))

            var raw = server.request("/gzip/1000")
            raw.headers["Accept-Encoding"] = "gzip"
            let compressed = try await transport.response(for: raw)
            #expect(compressed.headers["Content-Encoding"] == "gzip")
            #expect(try Gzip.decompress(compressed.body) == TestHandler.bytes(1000))

            await expectURLError(.cannotDecodeContentData) {
                _ = try await transport.response(for: server.request("/gzip/0/corrupt"))
            }
        }
    }

    // MARK: - Large bodies

    @Test("A 3 MiB body goes up as Data and comes back whole")
    func largeDataBodies() async throws {
        try await withServer { server, transport in
            let payload = randomData(3 << 20)
            var request = server.request("/echo", method: .put)
            request.body = payload
            let response = try await transport.response(for: request)
            #expect(response.statusCode == 200)
            #expect(response.headers["X-Received-Length"] == String(payload.count))
            #expect(response.body == payload)
        }
    }

    @Test("Streamed bodies: a file with Content-Length and a stream of unknown length chunked, with progress")
    func streamedBodies() async throws {
        try await withServer { server, transport in
            let payload = randomData((2 << 20) + 12_345)
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("socket-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: file) }
            try payload.write(to: file)

            var fromFile = server.request("/echo", method: .put)
            fromFile.streamedBody = try StreamedBody.file(file)
            let fileCollector = Collector()
            _ = transport.stream(fromFile, receiver: fileCollector)
            let fileResult = try await fileCollector.result()
            #expect(fileResult.head.statusCode == 200)
            #expect(fileResult.head.headers["X-Received-Framing"] == "length")
            #expect(fileResult.body == payload)
            #expect(fileCollector.progress.last?.0 == Int64(payload.count))
            #expect(fileCollector.progress.last?.1 == Int64(payload.count))
            #expect(fileCollector.progress.count > 10)

            var fromStream = server.request("/echo", method: .post)
            fromStream.streamedBody = StreamedBody.stream(InputStream(data: payload), length: -1)
            let streamCollector = Collector()
            _ = transport.stream(fromStream, receiver: streamCollector)
            let streamResult = try await streamCollector.result()
            #expect(streamResult.head.headers["X-Received-Framing"] == "chunked")
            #expect(streamResult.body == payload)
            #expect(streamCollector.progress.last?.0 == Int64(payload.count))
            #expect(streamCollector.progress.last?.1 == nil)
        }
    }

    // MARK: - Streaming

    @Test("A paused stream stops reading: the server's writes stall until resume, then everything arrives")
    func pauseAndResume() async throws {
        try await withServer { server, transport in
            // More than the socket buffers can hold (the receive buffer may grow to 32 MiB on Linux).
            let total = 128 << 20
            let collector = Collector(keepBody: false, pauseOnFirstChunk: true)
            let task = transport.stream(server.request("/produce/\(total)"), receiver: collector)
            collector.setTask(task)
            try await eventually { collector.receivedBytes > 0 }
            // Wait until the server can write no more: the socket buffers are full.
            try await eventually(settling: true) { server.handler.produced }
            let stalledAt = server.handler.produced
            let receivedWhilePaused = collector.receivedBytes
            #expect(stalledAt < total)
            try await Task.sleep(for: .milliseconds(200))
            #expect(collector.receivedBytes == receivedWhilePaused)
            #expect(server.handler.produced == stalledAt)
            task.resume()
            let result = try await collector.result()
            #expect(result.head.statusCode == 200)
            #expect(collector.receivedBytes == total)
            #expect(server.handler.produced == total)
        }
    }

    @Test("Cancelling mid-body (reading, or paused) ends with URLError(.cancelled) and closes that connection")
    func cancelMidBody() async throws {
        try await withServer { server, transport in
            // The server sends 1 KB every 10 ms and would go on for ~17 minutes: the connection's
            // thread is blocked reading when cancelled, however loaded the machine is, and only the
            // cancellation can end the transfer. (An earlier 1 MB trickle ended by itself after
            // ~10 s, which a test delayed that long on a loaded machine took for a missed cancel.)
            let reading = Collector(keepBody: false)
            let task = transport.stream(server.request("/trickle/100000000"), receiver: reading)
            try await eventually { reading.receivedBytes > 0 }
            task.cancel()
            await expectURLError(.cancelled) { _ = try await reading.result() }
            #expect(reading.receivedBytes < 100_000_000)
            let next = try await transport.response(for: server.request("/len/10"))
            #expect(next.statusCode == 200)
            let afterReading = transport.statistics.connectionsOpened

            // Paused, then cancelled.
            let paused = Collector(keepBody: false, pauseOnFirstChunk: true)
            let pausedTask = transport.stream(server.request("/produce/\(128 << 20)"), receiver: paused)
            paused.setTask(pausedTask)
            try await eventually { paused.receivedBytes > 0 }
            try await eventually(settling: true) { paused.receivedBytes }
            pausedTask.cancel()
            await expectURLError(.cancelled) { _ = try await paused.result() }
            #expect(paused.receivedBytes < 128 << 20)
            _ = try await transport.response(for: server.request("/len/10"))
            #expect(transport.statistics.connectionsOpened == afterReading + 1)
        }
    }

    /// Issue 8 item 11: paused row streams and feeds never take every connection, and waiting
    /// for a connection ends at the request's timeout with an error that says why.
    @Test("Paused streams leave one connection to other requests; a request that cannot get one fails at its deadline")
    func connectionStarvation() async throws {
        try await withServer(maximumConnectionsPerHost: 3) { server, transport in
            var streams: [(Collector, any StreamingTask)] = []
            for _ in 0..<2 {  // the most streams may hold: all connections but one
                let collector = Collector(keepBody: false, pauseOnFirstChunk: true)
                let task = transport.stream(server.request("/produce/\(128 << 20)"), receiver: collector)
                collector.setTask(task)
                streams.append((collector, task))
            }
            for (collector, _) in streams { try await eventually { collector.receivedBytes > 0 } }
            // Whole requests still get a connection while both streams are paused.
            for index in 0..<5 {
                #expect(try await transport.response(for: server.request("/len/\(index)")).statusCode == 200)
            }
            // A third stream waits for a stream slot, and gives up at its timeout, with nothing sent.
            var request = server.request("/produce/1000")
            request.timeout = 0.5
            let waiting = Collector(keepBody: false)
            _ = transport.stream(request, receiver: waiting)
            do {
                _ = try await waiting.result()
                Issue.record("a stream past the limit got a connection")
            } catch let error as URLError {
                #expect(error.code == .timedOut)
                #expect(error.localizedDescription.contains("No connection to"))
                #expect(error.localizedDescription.contains("streamed responses"))
                #expect(error.localizedDescription.contains("Nothing was sent"))
            }
            #expect(server.requestCount(path: "/produce/1000") == 0)
            for (collector, task) in streams {
                task.cancel()
                await expectURLError(.cancelled) { _ = try await collector.result() }
            }
            // The slots are free again.
            let later = Collector(keepBody: false)
            _ = transport.stream(server.request("/produce/1000"), receiver: later)
            #expect(try await later.result().head.statusCode == 200)
        }
    }

    // MARK: - Failures

    @Test("A pooled connection the server closed while idle is discarded; the request goes out on a fresh one")
    func serverClosedIdleConnection() async throws {
        try await withServer { server, transport in
            _ = try await transport.response(for: server.request("/len/1"))
            try server.restart()  // closes every connection; same port
            let response = try await transport.response(for: server.request("/len/2"))
            #expect(response.body == TestHandler.bytes(2))
            let statistics = transport.statistics
            #expect(statistics.connectionsOpened == 2)
            #expect(statistics.staleConnectionsDiscarded + statistics.staleRetries == 1)
        }
    }

    @Test("A dropped connection fails with URLError(.networkConnectionLost); a POST is not resent")
    func droppedConnection() async throws {
        try await withServer { server, transport in
            _ = server.faults.failNext(1, with: .dropConnection, matching: .path("/len/7"))
            await expectURLError(.networkConnectionLost) {
                _ = try await transport.response(for: server.request("/len/7"))
            }
            #expect(server.requestCount(path: "/len/7") == 1)

            // On a kept-alive connection a POST the server dropped is not sent again.
            _ = try await transport.response(for: server.request("/len/1"))
            _ = server.faults.failNext(1, with: .dropConnection, matching: .path("/echo"))
            var post = server.request("/echo", method: .post)
            post.body = Data("x".utf8)
            await expectURLError(.networkConnectionLost) {
                _ = try await transport.response(for: post)
            }
            #expect(server.requestCount(path: "/echo") == 1)
        }
    }

    @Test("A GET dropped on a kept-alive connection before any answer is sent again once, on a fresh one")
    func staleGetRetried() async throws {
        try await withServer { server, transport in
            _ = try await transport.response(for: server.request("/len/1"))
            _ = server.faults.failNext(1, with: .dropConnection, matching: .path("/len/8"))
            let response = try await transport.response(for: server.request("/len/8"))
            #expect(response.body == TestHandler.bytes(8))
            #expect(server.requestCount(path: "/len/8") == 2)
            #expect(transport.statistics.staleRetries == 1)

            // Twice in a row: the retry is on a fresh connection, so its failure is final.
            _ = server.faults.failNext(2, with: .dropConnection, matching: .path("/len/9"))
            await expectURLError(.networkConnectionLost) {
                _ = try await transport.response(for: server.request("/len/9"))
            }
            #expect(server.requestCount(path: "/len/9") == 2)
        }
    }

    @Test("A truncated body fails with URLError(.networkConnectionLost)")
    func truncatedBody() async throws {
        try await withServer { server, transport in
            _ = server.faults.failNext(1, with: .truncatedBody, matching: .path("/len/1000"))
            await expectURLError(.networkConnectionLost) {
                _ = try await transport.response(for: server.request("/len/1000"))
            }
            let after = try await transport.response(for: server.request("/len/1000"))
            #expect(after.body == TestHandler.bytes(1000))
        }
    }

    @Test("A request slower than its timeout fails with URLError(.timedOut)")
    func timeout() async throws {
        try await withServer { server, transport in
            _ = server.faults.failNext(1, with: .delay(seconds: 3), matching: .path("/len/4"))
            var request = server.request("/len/4")
            request.timeout = 0.3
            await expectURLError(.timedOut) {
                _ = try await transport.response(for: request)
            }
        }
    }

    @Test("Nothing listening: URLError(.cannotConnectToHost)")
    func cannotConnect() async throws {
        let server = try TestServer.start()
        let port = server.port
        server.stop()
        let transport = SocketTransport()
        defer { transport.shutdown() }
        let request = HTTPRequest(method: .get, url: URL(string: "http://127.0.0.1:\(port)/")!)
        await expectURLError(.cannotConnectToHost) {
            _ = try await transport.response(for: request)
        }
    }

    @Test("https is refused with a CouchError that points to URLSessionTransport")
    func httpsRefused() async throws {
        let transport = SocketTransport()
        defer { transport.shutdown() }
        let request = HTTPRequest(method: .get, url: URL(string: "https://127.0.0.1:6984/db")!)
        do {
            _ = try await transport.response(for: request)
            Issue.record("https must be refused")
        } catch let error as CouchError {
            #expect(error.kind == .transport)
            #expect(error.message.contains("URLSessionTransport"))
            #expect(error.message.contains("https"))
        }

        var configuration = Configuration()
        configuration.transport = transport
        configuration.authentication = .basic
        let client = CouchDBClient(
            url: URL(string: "https://127.0.0.1:6984")!, credentials: Credentials(username: "a", password: "b"),
            configuration: configuration)
        do {
            _ = try await client.execute(GetDatabaseInfoOperation(name: "db"))
            Issue.record("https must be refused")
        } catch {
            #expect(error.kind == .transport)
            #expect(error.message.contains("URLSessionTransport"))
        }
    }

    // MARK: - Concurrency

    @Test("64 concurrent requests share at most 6 connections; the rest wait in the queue")
    func concurrency() async throws {
        try await withServer { server, transport in
            let results = try await withThrowingTaskGroup(of: Data.self) { group in
                for index in 0..<64 {
                    group.addTask { try await transport.response(for: server.request("/slow/\(index)")).body }
                }
                return try await group.reduce(into: [Data]()) { $0.append($1) }
            }
            #expect(results.count == 64)
            #expect(Set(results).count == 64)
            let statistics = transport.statistics
            #expect(statistics.connectionsOpened <= 6)
            #expect(statistics.openConnections <= 6)
            #expect(statistics.queuedRequests == 0)
            #expect(server.handler.maximumInFlight <= 6)
            #expect(server.handler.maximumInFlight >= 2)
        }
    }

    @Test("A CouchDB client over SocketTransport: documents, conflicts and a 429 retry")
    func throughTheClient() async throws {
        var serverConfiguration = TestServer.Configuration()
        serverConfiguration.gzipJSONResponses = true
        let server = try TestServer.start(serverConfiguration)
        defer { server.stop() }
        let transport = SocketTransport(maximumConnectionsPerHost: 2, idleTimeout: Self.neverIdle)
        var configuration = Configuration()
        configuration.transport = transport
        configuration.retryPolicy = RetryPolicy(maximumRetries: 3, initialDelay: 0.01, maximumDelay: 0.05)
        let client = server.adminClient(configuration: configuration)
        defer { client.shutdown() }
        try await client.execute(CreateDatabaseOperation(name: "notes"))
        _ = server.faults.failNext(1, with: .tooManyRequests(retryAfter: nil), matching: .path("/notes/a"))
        let written = try await client.value(
            PutDocumentOperation(database: "notes", id: "a", document: Note(text: "a", n: 1)))
        let read = try await client.value(GetDocumentOperation<Note>(database: "notes", id: "a"))
        #expect(read._rev == written.rev)
        do {
            _ = try await client.value(
                PutDocumentOperation(database: "notes", id: "a", document: Note(text: "b", n: 2)))
            Issue.record("expected a conflict")
        } catch {
            #expect(error.statusCode == 409)
        }
        // A large JSON response comes gzip'd (the server is set to compress them) and decodes.
        let long = String(repeating: "long text ", count: 500)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<20 {
                group.addTask {
                    _ = try await client.value(
                        PutDocumentOperation(database: "notes", id: "n\(index)", document: Note(text: long, n: index)))
                }
            }
            try await group.waitForAll()
        }
        var options = KeyRangeOptions()
        options.includeDocs = true
        let page = try await client.value(AllDocsOperation<Note>(database: "notes", options: options))
        #expect(page.rows.count == 21)
        #expect(page.rows.last?.doc?.text == long)
        // The same response asked for raw: it really was compressed.
        var raw = HTTPRequest(method: .get, url: server.url(path: "/notes/_all_docs?include_docs=true"))
        raw.headers["Authorization"] = "Basic " + Data("admin:password".utf8).base64EncodedString()
        raw.headers["Accept-Encoding"] = "gzip"
        let compressed = try await transport.response(for: raw)
        #expect(compressed.statusCode == 200)
        #expect(compressed.headers["Content-Encoding"] == "gzip")
        #expect(transport.statistics.connectionsOpened <= 2)
    }
}

// MARK: - Helpers

/// A TestServer with ``TestHandler``, a transport for it, both stopped afterwards.
private func withServer(
    maximumConnectionsPerHost: Int = 6, _ body: (HandlerServer, SocketTransport) async throws -> Void
) async throws {
    let handler = TestHandler()
    let server = try TestServer.start(handler: handler)
    defer { server.stop() }
    let transport = SocketTransport(
        maximumConnectionsPerHost: maximumConnectionsPerHost, idleTimeout: SocketTransportEndToEndTests.neverIdle)
    defer { transport.shutdown() }
    try await body(HandlerServer(server: server, handler: handler), transport)
}

/// The TestServer and its handler, with request builders.
private struct HandlerServer {
    let server: TestServer
    let handler: TestHandler

    var faults: TestServerFaults { server.faults }

    func request(_ path: String, method: SwiftCouch.HTTPMethod = .get) -> HTTPRequest {
        HTTPRequest(method: method, url: server.url(path: path), timeout: 30)
    }

    func requestCount(path: String? = nil, pathPrefix: String? = nil) -> Int {
        if let pathPrefix { return server.requestCount(pathPrefix: pathPrefix) }
        return server.requestCount(path: path)
    }

    func restart() throws { try server.restart() }
}

/// Answers the paths the tests use:
/// `/len/N` (N bytes, Content-Length), `/chunked/N/S` (N bytes in chunks of S), `/gzip/N[/chunked|/corrupt]`
/// (N bytes gzip'd), `/status/C` (no body), `/close` (`Connection: close`), `/echo` (the request body back), `/produce/N` (N bytes
/// streamed, with a 0.2 s pause after the first 256 KiB, counting what the socket accepted), `/slow/I` (a short wait, counting requests in flight).
private final class TestHandler: RequestHandler, @unchecked Sendable {
    // @unchecked Sendable: the counters are only touched under `lock`.
    private let lock = NSLock()
    private var producedBytes = 0
    private var inFlight = 0
    private var maxInFlight = 0

    static func bytes(_ count: Int) -> Data {
        Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
    }

    var produced: Int {
        lock.lock()
        defer { lock.unlock() }
        return producedBytes
    }

    var maximumInFlight: Int {
        lock.lock()
        defer { lock.unlock() }
        return maxInFlight
    }

    func handle(_ request: ServerRequest) -> ServerResponse {
        let segments = request.pathSegments
        switch (segments.first ?? "", segments.count) {
        case ("len", 2):
            return ServerResponse(status: 200, body: .data(Self.bytes(Int(segments[1]) ?? 0)))
        case ("chunked", 3):
            let data = Self.bytes(Int(segments[1]) ?? 0)
            let size = max(1, Int(segments[2]) ?? 1)
            return ServerResponse(
                status: 200,
                body: .stream { writer in
                    var offset = 0
                    while offset < data.count {
                        let end = min(data.count, offset + size)
                        guard writer.write(data.subdata(in: offset..<end)) else { return }
                        offset = end
                    }
                })
        case ("gzip", 2), ("gzip", 3):
            let compressed = Gzip.compress(Self.bytes(Int(segments[1]) ?? 0))
            func gzipped(_ body: ResponseBody) -> ServerResponse {
                ServerResponse(status: 200, headers: ["Content-Encoding": "gzip"], body: body)
            }
            switch segments.count == 3 ? segments[2] : "" {
            case "chunked":
                return gzipped(
                    .stream { writer in
                        var offset = 0
                        while offset < compressed.count {
                            let end = min(compressed.count, offset + 1_000)
                            guard writer.write(compressed.subdata(in: offset..<end)) else { return }
                            offset = end
                        }
                    })
            case "corrupt":
                return gzipped(.data(Data("not gzip at all".utf8)))
            default:
                return gzipped(.data(compressed))
            }
        case ("zeros", 2):  // a gzip bomb: megabytes of zeros in a few kilobytes
            let compressed = Gzip.compress(Data(count: Int(segments[1]) ?? 0))
            return ServerResponse(status: 200, headers: ["Content-Encoding": "gzip"], body: .data(compressed))
        case ("status", 2):
            return ServerResponse(status: Int(segments[1]) ?? 200)
        case ("close", 1):
            return ServerResponse(status: 200, headers: ["Connection": "close"], body: .data(Data("bye".utf8)))
        case ("echo", 1):
            let framing = request.headers["Transfer-Encoding"] == nil ? "length" : "chunked"
            return ServerResponse(
                status: 200,
                headers: ["X-Received-Length": String(request.body.count), "X-Received-Framing": framing],
                body: .data(request.body))
        case ("produce", 2):
            let total = Int(segments[1]) ?? 0
            return ServerResponse(
                status: 200,
                body: .stream { [self] writer in
                    let piece = Data(repeating: 0x5A, count: 256 * 1024)
                    var sent = 0
                    while sent < total {
                        let data = piece.prefix(total - sent)
                        guard writer.write(data) else { return }
                        sent += data.count
                        // A pause after the first piece, so the client can act before the rest comes.
                        if sent == data.count { usleep(200_000) }
                        lock.lock()
                        producedBytes = sent
                        lock.unlock()
                    }
                })
        case ("trickle", 2):
            let total = Int(segments[1]) ?? 0
            return ServerResponse(
                status: 200,
                body: .stream { writer in
                    var sent = 0
                    while sent < total {
                        guard writer.write(Data(repeating: 0x41, count: min(1_000, total - sent))) else { return }
                        sent += 1_000
                        usleep(10_000)
                    }
                })
        case ("slow", 2):
            lock.lock()
            inFlight += 1
            maxInFlight = max(maxInFlight, inFlight)
            lock.unlock()
            usleep(5_000)
            lock.lock()
            inFlight -= 1
            lock.unlock()
            return ServerResponse(status: 200, body: .data(Data(segments[1].utf8)))
        default:
            return ServerResponse(status: 404, body: .data(Data("not found".utf8)))
        }
    }
}

/// Collects a streamed response.
private final class Collector: StreamReceiver, @unchecked Sendable {
    // @unchecked Sendable: every property is only touched under `lock`.
    struct Result {
        var head: HTTPResponse
        var body: Data
    }

    private let lock = NSLock()
    private let keepBody: Bool
    private var head: HTTPResponse?
    private var body = Data()
    private var count = 0
    private var sentEvents: [(Int64, Int64?)] = []
    private var outcome: Swift.Result<Void, any Error>?

    private let pauseOnFirstChunk: Bool
    private var task: (any StreamingTask)?
    private var pauseRequested = false

    init(keepBody: Bool = true, pauseOnFirstChunk: Bool = false) {
        self.keepBody = keepBody
        self.pauseOnFirstChunk = pauseOnFirstChunk
    }

    /// The transfer's handle; pauses it at once if the first chunk came before it was set.
    func setTask(_ task: any StreamingTask) {
        lock.lock()
        self.task = task
        let pauseNow = pauseRequested
        lock.unlock()
        if pauseNow { task.pause() }
    }

    func receive(head: HTTPResponse) {
        lock.lock()
        self.head = head
        lock.unlock()
    }

    func receive(chunk: Data) {
        lock.lock()
        let first = count == 0
        count += chunk.count
        if keepBody { body.append(chunk) }
        var pauseNow: (any StreamingTask)?
        if first, pauseOnFirstChunk {
            pauseNow = task
            pauseRequested = task == nil
        }
        lock.unlock()
        // Pausing from inside the receiver: no further chunk is read until `resume()`.
        pauseNow?.pause()
    }

    func complete(error: (any Error)?) {
        lock.lock()
        outcome = error.map { .failure($0) } ?? .success(())
        lock.unlock()
    }

    func sent(bytes sent: Int64, of total: Int64?) {
        lock.lock()
        sentEvents.append((sent, total))
        lock.unlock()
    }

    var receivedBytes: Int {
        lock.lock()
        defer { lock.unlock() }
        return count
    }

    var progress: [(Int64, Int64?)] {
        lock.lock()
        defer { lock.unlock() }
        return sentEvents
    }

    private func snapshot() -> (Swift.Result<Void, any Error>?, HTTPResponse?, Data) {
        lock.lock()
        defer { lock.unlock() }
        return (outcome, head, body)
    }

    /// Waits (at most 60 s) for the end of the stream.
    func result() async throws -> Result {
        for _ in 0..<6_000 {
            let (outcome, head, body) = snapshot()
            switch outcome {
            case .success?:
                guard let head else { throw URLError(.badServerResponse) }
                return Result(head: head, body: body)
            case .failure(let error)?:
                throw error
            case nil:
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        throw URLError(.timedOut)
    }
}

/// Expects `body` to throw a `URLError` with `code`.
private func expectURLError(
    _ code: URLError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> Void
) async {
    do {
        try await body()
        Issue.record("expected URLError \(code.rawValue)", sourceLocation: sourceLocation)
    } catch let error as URLError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected URLError \(code.rawValue), got \(error)", sourceLocation: sourceLocation)
    }
}

/// Waits (at most 30 s) until `condition` holds.
private func eventually(_ condition: () -> Bool) async throws {
    for _ in 0..<3_000 {
        if condition() { return }
        try await Task.sleep(for: .milliseconds(10))
    }
    Issue.record("condition not met within 30 s")
}

/// Waits (at most 30 s) until `value` stops changing for a second.
private func eventually(settling: Bool, _ value: () -> Int) async throws {
    var last = value()
    var stableSince = Date()
    for _ in 0..<3_000 {
        try await Task.sleep(for: .milliseconds(10))
        let now = value()
        if now != last {
            last = now
            stableSince = Date()
        } else if Date().timeIntervalSince(stableSince) >= 1 {
            return
        }
    }
    Issue.record("value did not settle within 30 s")
}

private func randomData(_ count: Int) -> Data {
    var generator = SystemRandomNumberGenerator()
    var words = [UInt64](repeating: 0, count: (count + 7) / 8)
    for index in words.indices { words[index] = generator.next() }
    return words.withUnsafeBytes { Data($0.prefix(count)) }
}

extension SocketTransport {
    /// Sends `request` and waits for the whole response.
    fileprivate func response(for request: HTTPRequest) async throws -> HTTPResponse {
        try await withCheckedThrowingContinuation { continuation in
            send(request) { continuation.resume(with: $0) }
        }
    }
}

/// A one-connection HTTP/1.1 server on raw sockets whose accepted socket has a 4 KiB receive
/// buffer and which reads each request body only 0.2 s after its head, answering with the body
/// (so a client's large body cannot be taken by the socket buffers at once).
private final class SlowReadingServer: @unchecked Sendable {
    // @unchecked Sendable: `listener` and `port` are immutable; the serving thread owns the rest.
    let port: Int
    private let listener: Int32

    init() throws {
        (listener, port) = try openLoopbackListener(backlog: 4, receiveBufferSize: 4096)
    }

    /// Serves `requests` requests on the first connection, then closes it and the listener.
    func serve(requests: Int) {
        Thread.detachNewThread { [self] in
            defer { _ = close(listener) }
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return }
            defer { _ = close(connection) }
            var pending: [UInt8] = []
            for _ in 0..<requests {
                var headEnd: Int?
                while headEnd == nil {
                    guard read(connection, into: &pending) else { return }
                    headEnd = pending.indices.dropLast(3).first {
                        pending[$0..<$0 + 4].elementsEqual([13, 10, 13, 10])
                    }
                }
                let head = String(decoding: pending[..<headEnd!], as: UTF8.self).lowercased()
                pending.removeFirst(headEnd! + 4)
                let length =
                    head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                    .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
                if length > 0 { Thread.sleep(forTimeInterval: 0.2) }
                while pending.count < length {
                    guard read(connection, into: &pending) else { return }
                }
                let body = Array(pending.prefix(length))
                pending.removeFirst(length)
                let answer = Array("HTTP/1.1 200 OK\r\nContent-Length: \(body.count)\r\n\r\n".utf8) + body
                var sent = 0
                while sent < answer.count {
                    let count = answer[sent...].withUnsafeBytes { send(connection, $0.baseAddress, $0.count, 0) }
                    guard count > 0 else { return }
                    sent += count
                }
            }
        }
    }

    private func read(_ connection: Int32, into pending: inout [UInt8]) -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let count = chunk.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return false }
        pending += chunk[..<count]
        return true
    }
}
