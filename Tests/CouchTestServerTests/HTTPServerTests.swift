import CouchQuery
import CouchTestServer
import Foundation
import HTTPWire
import TestScheduling
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A handler for HTTP-layer tests: echoes what it got as JSON, counts calls, and serves a few
/// special paths (streams, HEAD with an explicit length, custom statuses).
final class HTTPTestEchoHandler: RequestHandler, @unchecked Sendable {
    // @unchecked Sendable: `calls` and `streamSawClosedPeer` are guarded by `lock`.
    private let lock = NSLock()
    private var _calls = 0
    private var _streamSawClosedPeer = false

    var calls: Int {
        lock.lock()
        defer { lock.unlock() }
        return _calls
    }

    var streamSawClosedPeer: Bool {
        lock.lock()
        defer { lock.unlock() }
        return _streamSawClosedPeer
    }

    func handle(_ request: ServerRequest) -> ServerResponse {
        lock.lock()
        _calls += 1
        lock.unlock()
        switch request.rawPath {
        case "/status/404":
            return ServerResponse(
                status: 404, headers: ["Content-Type": "application/json"],
                body: .data(Data("{\"error\":\"not_found\",\"reason\":\"missing\"}\n".utf8)))
        case "/custom-reason":
            return ServerResponse(status: 200, reason: "Fine Thanks", body: .data(Data("ok".utf8)))
        case "/head-length":
            return ServerResponse(
                status: 200, headers: ["Content-Type": "application/json", "Content-Length": "469"],
                body: .empty)
        case "/not-modified":
            return ServerResponse(status: 304, headers: ["ETag": "\"1-x\""], body: .empty)
        case "/stream":
            return ServerResponse(
                status: 200, headers: ["Content-Type": "application/json"],
                body: .stream { writer in
                    for i in 0..<3 { writer.write(Data("{\"row\":\(i)}\n".utf8)) }
                })
        case "/sized-stream", "/short-stream", "/long-stream":
            // A streamed body of known length (as a stored attachment is sent): 30 bytes declared; the short one
            // writes 10 of them, the long one 40.
            let rows = request.rawPath == "/sized-stream" ? 3 : request.rawPath == "/short-stream" ? 1 : 4
            return ServerResponse(
                status: 200, headers: ["Content-Type": "application/json", "Content-Length": "30"],
                body: .stream { writer in
                    for i in 0..<rows { writer.write(Data("{\"row\":\(i)}\n".utf8)) }
                })
        case "/gathered-stream", "/gathered-long":
            // Pieces written at once (as an attachment's gathered chunks are): 200 of them (more than one
            // `sendmsg` takes), empty ones and slices among them, 4 MiB in all (more than the socket holds, so
            // `sendmsg` takes part of them and the rest follows); the long one declares one byte less.
            let pieces = Self.gatheredPieces
            let total = pieces.reduce(0) { $0 + $1.count }
            let declared = request.rawPath == "/gathered-stream" ? total : total - 1
            return ServerResponse(
                status: 200, headers: ["Content-Type": "application/octet-stream", "Content-Length": String(declared)],
                body: .stream { writer in
                    #expect(writer.preferredWriteSize == 16 << 20)
                    writer.write(contentsOf: pieces)
                })
        case "/aborted-stream":
            // A chunked body whose producer fails after two rows (a stored document it could not read).
            return ServerResponse(
                status: 200, headers: ["Content-Type": "application/json"],
                body: .stream { writer in
                    for i in 0..<2 { writer.write(Data("{\"row\":\(i)}\n".utf8)) }
                    writer.abort()
                    writer.write(Data("not sent".utf8))
                })
        case "/endless":
            // Writes until the client has gone away (or the server stops), at most ~60 s.
            return ServerResponse(
                status: 200, headers: ["Content-Type": "application/json"],
                body: .stream { [self] writer in
                    for _ in 0..<6000 {
                        if !writer.write(Data("\n".utf8)) {
                            lock.lock()
                            _streamSawClosedPeer = true
                            lock.unlock()
                            return
                        }
                        usleep(10_000)
                    }
                })
        case "/size":
            return ServerResponse(
                status: 200, headers: ["Content-Type": "text/plain"],
                body: .data(Data(String(request.body.count).utf8)))
        default:
            var headers: [(String, JSON)] = []
            for field in request.headers { headers.append((field.name, .string(field.value))) }
            let json = JSON.object([
                ("method", .string(request.method)), ("path", .string(request.rawPath)),
                ("query", request.rawQuery.map { .string($0) } ?? .null),
                ("segments", .array(request.pathSegments.map { .string($0) })),
                ("headers", .object(headers)),
                ("body", .string(String(decoding: request.body, as: UTF8.self))),
            ])
            return ServerResponse(
                status: request.method == "PUT" ? 201 : 200, headers: ["Content-Type": "application/json"],
                body: .data(json.data + Data("\n".utf8)))
        }
    }
}

extension HTTPTestEchoHandler {
    /// What `/gathered-stream` writes with one `write(contentsOf:)`.
    static let gatheredPieces: [Data] = {
        var generator = SystemRandomNumberGenerator()
        let bytes = Data((0..<(4 << 20)).map { _ in UInt8.random(in: 0...255, using: &generator) })
        var pieces: [Data] = []
        var start = bytes.startIndex
        for index in 0..<200 {
            let size = index % 7 == 3 ? 0 : (index == 199 ? bytes.endIndex - start : Int.random(in: 1...40_000))
            pieces.append(bytes[start..<(start + size)])
            start += size
        }
        return pieces
    }()
}

func httpTestJSON(_ response: RawHTTPConnection.Response) throws -> JSON {
    try JSON.parse(response.body)
}

@Suite("HTTP server", .ownThreads)
struct HTTPServerTests {
    let handler = HTTPTestEchoHandler()

    func start(_ configure: (inout TestServer.Configuration) -> Void = { _ in }) throws -> TestServer {
        var configuration = TestServer.Configuration(handler: handler)
        configure(&configuration)
        return try TestServer.start(configuration)
    }

    @Test func answersWithCouchDBHeadersAndReasonPhrases() throws {
        let server = try start()
        defer { server.stop() }
        #expect(server.port > 0)
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let notFound = try connection.request(method: "GET", target: "/status/404")
        #expect(notFound.status == 404)
        #expect(notFound.reason == "Object Not Found")
        #expect(notFound.headers["Server"] == "CouchDB/3.5.0 (Erlang OTP/26)")
        #expect(notFound.headers["Date"]?.hasSuffix(" GMT") == true)
        #expect(notFound.headers["Content-Length"] == String(notFound.body.count))
        #expect(notFound.framing == .contentLength(notFound.body.count))

        let created = try connection.request(method: "PUT", target: "/db/doc", body: Data("{}".utf8))
        #expect(created.status == 201)
        #expect(created.reason == "Created")
        let custom = try connection.request(method: "GET", target: "/custom-reason")
        #expect(custom.reason == "Fine Thanks")
        #expect(handler.calls == 3)
    }

    @Test func requestPartsReachTheHandlerAsSent() throws {
        let server = try start()
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let response = try connection.request(
            method: "COPY", target: "/db/a%2Fb/with+plus?key=%22x%22&rev=1-a", headers: ["Destination": "copy"])
        let json = try httpTestJSON(response)
        #expect(json["method"] == "COPY")
        #expect(json["path"] == "/db/a%2Fb/with+plus")
        #expect(json["query"] == "key=%22x%22&rev=1-a")
        #expect(json["segments"] == ["db", "a/b", "with plus"])
        #expect(json["headers"]?["Destination"] == "copy")
    }

    @Test func keepAliveAndConnectionClose() throws {
        let server = try start()
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        for i in 0..<5 {
            let r = try connection.request(method: "GET", target: "/n/\(i)")
            #expect(r.status == 200)
            #expect(r.headers["Connection"] == nil)
        }
        let last = try connection.request(method: "GET", target: "/last", headers: ["Connection": "close"])
        #expect(last.headers["Connection"] == "close")
        // The server closed: the next request finds no answer.
        #expect(throws: RawHTTPConnection.Failure.self) {
            _ = try connection.request(method: "GET", target: "/after-close")
        }
        #expect(handler.calls == 6)
    }

    @Test func http10ClosesUnlessKeepAlive() throws {
        let server = try start()
        defer { server.stop() }
        let c1 = try RawHTTPConnection(port: server.port, timeout: 10)
        try c1.send(Data("GET /one HTTP/1.0\r\n\r\n".utf8))
        let r1 = try c1.readResponse(to: "GET")
        #expect(r1.head.version == .http1_0)
        #expect(r1.headers["Connection"] == "close")
        #expect(throws: RawHTTPConnection.Failure.self) { _ = try c1.readResponse(to: "GET") }

        let c2 = try RawHTTPConnection(port: server.port, timeout: 10)
        for _ in 0..<2 {
            try c2.send(Data("GET /two HTTP/1.0\r\nConnection: keep-alive\r\n\r\n".utf8))
            let r = try c2.readResponse(to: "GET")
            #expect(r.headers["Connection"] == "keep-alive")
            #expect(r.status == 200)
        }
    }

    @Test func pipelinedRequestsAreAnsweredInOrder() throws {
        let server = try start()
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        try connection.send(
            Data(
                ("GET /a HTTP/1.1\r\n\r\nPUT /b HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyz"
                    + "HEAD /c HTTP/1.1\r\n\r\nGET /d HTTP/1.1\r\n\r\n").utf8))
        let a = try connection.readResponse(to: "GET")
        let b = try connection.readResponse(to: "PUT")
        let c = try connection.readResponse(to: "HEAD")
        let d = try connection.readResponse(to: "GET")
        #expect(try httpTestJSON(a)["path"] == "/a")
        #expect(try httpTestJSON(b)["body"] == "xyz")
        #expect(c.body.isEmpty)
        #expect(Int(c.headers["Content-Length"] ?? "") ?? 0 > 0)
        #expect(try httpTestJSON(d)["path"] == "/d")
    }

    @Test func expectContinueGetsAnInterimResponse() throws {
        let server = try start()
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        try connection.send(Data("PUT /db/doc HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 7\r\n\r\n".utf8))
        // The interim answer comes before the body is sent, as a client that waits for it needs.
        let interim = try connection.readInterimResponse()
        #expect(interim.status == 100)
        try connection.send(Data("{\"a\":1}".utf8))
        let response = try connection.readResponse(to: "PUT")
        #expect(response.status == 201)
        #expect(try httpTestJSON(response)["body"] == "{\"a\":1}")

        // When the body is sent at once anyway, no interim answer is needed and none confuses the client.
        var head = HTTPRequestHead(
            method: "PUT", target: "/db/doc2", headers: ["Expect": "100-continue", "Content-Length": "2"]
        ).serialized
        head.append(Data("{}".utf8))
        try connection.send(head)
        let direct = try connection.readResponse(to: "PUT")
        #expect(direct.status == 201)

        let refused = try connection.request(
            method: "PUT", target: "/x", headers: ["Expect": "something-else"], body: Data())
        #expect(refused.status == 417)
        #expect(refused.reason == "Expectation Failed")
    }

    @Test func chunkedRequestBody() throws {
        let server = try start()
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        var wire = HTTPRequestHead(method: "POST", target: "/db/_bulk_docs", headers: ["Transfer-Encoding": "chunked"])
            .serialized
        wire.append(HTTPSerializer.chunk(Data("{\"docs\":".utf8)))
        wire.append(HTTPSerializer.chunk(Data("[]}".utf8)))
        wire.append(HTTPSerializer.lastChunk(trailers: ["X-Trailer": "1"]))
        try connection.send(wire)
        let response = try connection.readResponse(to: "POST")
        #expect(try httpTestJSON(response)["body"] == "{\"docs\":[]}")
    }

    @Test func largeBodies() throws {
        let server = try start()
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 60)
        let size = 64 * 1024 * 1024 + 3
        let response = try connection.request(method: "PUT", target: "/size", body: Data(repeating: 0x61, count: size))
        #expect(response.text == String(size))
    }

    @Test func tooLargeBodiesGet413() throws {
        let server = try start { $0.maxRequestBodySize = 1000 }
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let response = try connection.request(method: "PUT", target: "/size", body: Data(repeating: 0x61, count: 1001))
        #expect(response.status == 413)
        #expect(try httpTestJSON(response)["error"] == "too_large")
        #expect(handler.calls == 0)
    }

    static let malformed: [String] = [
        "GET / HTTP/1.1\r\nNoColon\r\n\r\n",
        "GARBAGE\r\n\r\n",
        "GET / HTTP/9.9\r\n\r\n",
        "PUT / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        "PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "GET nopath HTTP/1.1\r\n\r\n",
        "PUT / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
    ]

    @Test(arguments: malformed)
    func malformedRequestsGet400AndClose(_ wire: String) throws {
        let server = try start()
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        try connection.send(Data(wire.utf8))
        let response = try connection.readResponse(to: "GET")
        #expect(response.status == 400)
        #expect(response.headers["Content-Type"] == "application/json")
        #expect(response.headers["Connection"] == "close")
        let json = try httpTestJSON(response)
        #expect(json["error"] == "bad_request")
        #expect(json["reason"]?.stringValue?.isEmpty == false)
        #expect(throws: RawHTTPConnection.Failure.self) { _ = try connection.readResponse(to: "GET") }
        #expect(handler.calls == 0)
        // The server is still fine.
        let again = try RawHTTPConnection(port: server.port, timeout: 10).request(method: "GET", target: "/ok")
        #expect(again.status == 200)
    }

    @Test func hugeHeadGets400() throws {
        let server = try start()
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let response = try connection.request(
            method: "GET", target: "/", headers: ["X-Big": String(repeating: "b", count: 70 * 1024)])
        #expect(response.status == 400)
    }

    @Test func headResponsesHaveHeadersButNoBody() throws {
        let server = try start()
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let explicit = try connection.request(method: "HEAD", target: "/head-length")
        #expect(explicit.headers["Content-Length"] == "469")
        #expect(explicit.body.isEmpty)
        let fromData = try connection.request(method: "HEAD", target: "/db/doc")
        let get = try connection.request(method: "GET", target: "/db/doc")
        #expect(fromData.body.isEmpty)
        #expect(fromData.headers["Content-Length"] != nil)
        #expect(Int(fromData.headers["Content-Length"] ?? "") == get.body.count + 1)  // "HEAD" vs "GET" in the echo
        let stream = try connection.request(method: "HEAD", target: "/stream")
        #expect(stream.body.isEmpty)
        let notModified = try connection.request(method: "GET", target: "/not-modified")
        #expect(notModified.status == 304)
        #expect(notModified.headers["Content-Length"] == "0")
        #expect(notModified.body.isEmpty)
        // Still in sync after all of those.
        #expect(try connection.request(method: "GET", target: "/final").status == 200)
    }

    @Test func streamedResponsesAreChunked() throws {
        let server = try start()
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let response = try connection.request(method: "GET", target: "/stream")
        #expect(response.framing == .chunked)
        #expect(response.headers["Transfer-Encoding"] == "chunked")
        #expect(response.text == "{\"row\":0}\n{\"row\":1}\n{\"row\":2}\n")
        #expect(try connection.request(method: "GET", target: "/after").status == 200)

        // HTTP/1.0 cannot take chunks: the body ends with the connection.
        let old = try RawHTTPConnection(port: server.port, timeout: 10)
        try old.send(Data("GET /stream HTTP/1.0\r\n\r\n".utf8))
        let oldResponse = try old.readResponse(to: "GET")
        #expect(oldResponse.framing == .untilClose)
        #expect(oldResponse.text == "{\"row\":0}\n{\"row\":1}\n{\"row\":2}\n")
    }

    @Test func aStreamOfKnownLengthIsSentWithItsContentLength() throws {
        let server = try start()
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let response = try connection.request(method: "GET", target: "/sized-stream")
        #expect(response.framing == .contentLength(30))
        #expect(response.headers["Transfer-Encoding"] == nil)
        #expect(response.text == "{\"row\":0}\n{\"row\":1}\n{\"row\":2}\n")
        let head = try connection.request(method: "HEAD", target: "/sized-stream")
        #expect(head.headers["Content-Length"] == "30")
        #expect(head.body.isEmpty)
        // Kept alive: the next request on the connection is answered.
        #expect(try connection.request(method: "GET", target: "/after").status == 200)

        // A body that ends short of its length (a read failed after the head was sent) is cut off by closing.
        let short = try RawHTTPConnection(port: server.port, timeout: 10)
        #expect {
            _ = try short.request(method: "GET", target: "/short-stream")
        } throws: { error in
            guard case RawHTTPConnection.Failure.closedMidBody(_, let partial) = error else { return false }
            return partial == Data("{\"row\":0}\n".utf8)
        }
        // One that would run past it sends no byte beyond, and closes too.
        let long = try RawHTTPConnection(port: server.port, timeout: 10)
        let cut = try long.request(method: "GET", target: "/long-stream")
        #expect(cut.body.count == 30)
        #expect(throws: (any Error).self) { _ = try long.request(method: "GET", target: "/after") }
    }

    /// Pieces written at once go out with `sendmsg`, partly taken and resumed, empty ones and slices among them:
    /// the body is their bytes in order; past the declared length nothing is sent.
    @Test func gatheredPiecesAreSentInOrder() throws {
        let server = try start()
        defer { server.stop() }
        let expected = HTTPTestEchoHandler.gatheredPieces.reduce(Data(), +)
        let connection = try RawHTTPConnection(port: server.port, timeout: 20)
        let response = try connection.request(method: "GET", target: "/gathered-stream")
        #expect(response.body.count == expected.count)
        #expect(response.body == expected)
        #expect(try connection.request(method: "GET", target: "/after").status == 200)
        // Pieces that would run past the declared length are not sent: the body ends short and the connection closes.
        let long = try RawHTTPConnection(port: server.port, timeout: 20)
        #expect(throws: (any Error).self) { _ = try long.request(method: "GET", target: "/gathered-long") }
    }

    @Test func anAbortedChunkedBodyEndsWithoutItsLastChunk() throws {
        let server = try start()
        defer { server.stop() }
        // As CouchDB aborts a response whose read fails once it has begun: the connection closes mid-body, so the
        // client sees the body cut short, never a complete one.
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        #expect {
            _ = try connection.request(method: "GET", target: "/aborted-stream")
        } throws: { error in
            guard case RawHTTPConnection.Failure.closedMidBody(_, let partial) = error else { return false }
            return partial == Data("{\"row\":0}\n{\"row\":1}\n".utf8)
        }
    }

    @Test func streamWriterReportsAClosedPeer() throws {
        let server = try start()
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let response = try connection.request(method: "GET", target: "/endless", readFor: 0.2)
        #expect(response.stoppedByClient)
        #expect(response.body.count > 0)
        // The producer notices within a few writes; wait for it (bounded).
        var noticed = false
        for _ in 0..<500 where !noticed {
            noticed = handler.streamSawClosedPeer
            if !noticed { usleep(10_000) }
        }
        #expect(noticed)
    }

    @Test func stopEndsBlockedStreamsAndIdleConnections() throws {
        let server = try start()
        let idle = try RawHTTPConnection(port: server.port, timeout: 10)
        _ = try idle.request(method: "GET", target: "/warm-up")
        let streaming = try RawHTTPConnection(port: server.port, timeout: 10)
        try streaming.send(Data("GET /endless HTTP/1.1\r\n\r\n".utf8))
        // Let the stream start.
        let started = try streaming.readResponse(to: "GET", readFor: 0.1)
        #expect(started.status == 200)
        server.stop()
        #expect(!server.isRunning)
        #expect(handler.streamSawClosedPeer)
        #expect(throws: RawHTTPConnection.Failure.self) { _ = try idle.request(method: "GET", target: "/x") }
        #expect(throws: (any Error).self) {
            _ = try RawHTTPConnection(port: server.port, timeout: 2).request(method: "GET", target: "/")
        }
        server.stop()  // idempotent
    }

    @Test func worksWithURLSession() async throws {
        let server = try start()
        defer { server.stop() }
        var request = URLRequest(url: server.url(path: "/db/doc?x=1"))
        request.httpMethod = "PUT"
        request.httpBody = Data("{\"hello\":\"world\"}".utf8)
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let (data, response) = try await session.data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == 201)
        let json = try JSON.parse(data)
        #expect(json["body"] == "{\"hello\":\"world\"}")
        #expect(json["query"] == "x=1")
    }

    /// CouchDB (mochiweb) reads a request line of at most 8,192 bytes, CRLF included; a longer one is answered
    /// `400 Bad Request` with no body and the connection closed, before CouchDB sees the request (measured on
    /// CouchDB 3.5.0: `GET /_up?x=` and 8,170 characters passes, 8,171 does not). A client must keep its URLs
    /// under it (CouchDB's replicator caps `open_revs` URLs at 7,000 characters).
    @Test func aRequestLineLongerThanCouchDBsLimitIs400() throws {
        let server = try start()
        defer { server.stop() }
        func target(lineLength: Int) -> String {
            let fixed = "GET ".utf8.count + "/x?q=".utf8.count + " HTTP/1.1\r\n".utf8.count
            return "/x?q=" + String(repeating: "a", count: lineLength - fixed)
        }
        let fits = try RawHTTPConnection(port: server.port, timeout: 10).request(
            method: "GET", target: target(lineLength: 8_192))
        #expect(fits.status == 200)
        let tooLong = try RawHTTPConnection(port: server.port, timeout: 10).request(
            method: "GET", target: target(lineLength: 8_193))
        #expect(tooLong.status == 400)
        #expect(tooLong.body.isEmpty)
        #expect(tooLong.headers["Connection"]?.lowercased() == "close")
    }
}
