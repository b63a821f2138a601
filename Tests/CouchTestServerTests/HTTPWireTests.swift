import Foundation
import HTTPWire
import TestScheduling
import Testing

/// A flattened, comparable view of decoded parts: heads as text, bodies concatenated per message.
private struct DecodedMessage: Equatable, CustomStringConvertible {
    var head: String
    var body: Data
    var trailers: [String]

    var description: String { "\(head) body=\(String(decoding: body, as: UTF8.self)) trailers=\(trailers)" }
}

private func describe(_ head: HTTPRequestHead) -> String {
    "\(head.method) \(head.target) \(head.version) "
        + head.headers.map { "\($0.name)=\($0.value)" }.joined(separator: "|")
}

private func describe(_ head: HTTPResponseHead) -> String {
    "\(head.version) \(head.status) \(head.reason) "
        + head.headers.map { "\($0.name)=\($0.value)" }.joined(separator: "|")
}

/// Feeds `pieces` one after another into a request decoder and collects every complete message.
private func decodeRequests(_ pieces: [Data], limits: HTTPParserLimits = HTTPParserLimits(), finish: Bool = false)
    throws
    -> [DecodedMessage]
{
    var decoder = HTTPRequestDecoder(limits: limits)
    var messages: [DecodedMessage] = []
    var current: DecodedMessage?
    func drain() throws {
        while let part = try decoder.next() {
            switch part {
            case .head(let h): current = DecodedMessage(head: describe(h), body: Data(), trailers: [])
            case .body(let d): current?.body.append(d)
            case .end(let t):
                current?.trailers = t.map { "\($0.name)=\($0.value)" }
                messages.append(current!)
                current = nil
            }
        }
    }
    for piece in pieces {
        decoder.feed(piece)
        try drain()
    }
    if finish {
        decoder.finish()
        try drain()
    }
    return messages
}

private func decodeResponses(_ pieces: [Data], methods: [String], finish: Bool = false) throws -> [DecodedMessage] {
    var decoder = HTTPResponseDecoder()
    for m in methods { decoder.expectResponse(to: m) }
    var messages: [DecodedMessage] = []
    var current: DecodedMessage?
    func drain() throws {
        while let part = try decoder.next() {
            switch part {
            case .head(let h): current = DecodedMessage(head: describe(h), body: Data(), trailers: [])
            case .body(let d): current?.body.append(d)
            case .end(let t):
                current?.trailers = t.map { "\($0.name)=\($0.value)" }
                messages.append(current!)
                current = nil
            }
        }
    }
    for piece in pieces {
        decoder.feed(piece)
        try drain()
    }
    if finish {
        decoder.finish()
        try drain()
    }
    return messages
}

private func bytes(_ s: String) -> Data { Data(s.utf8) }

/// Every way of cutting `data` in two, plus one byte at a time.
private func splits(_ data: Data) -> [[Data]] {
    var all: [[Data]] = [[data], data.map { Data([$0]) }]
    for i in 1..<data.count {
        all.append([data.prefix(i), data.suffix(from: data.startIndex + i)])
    }
    return all
}

@Suite("HTTPWire", .ownThreads)
struct HTTPWireTests {
    static let pipelinedRequests = bytes(
        "PUT /db/doc?batch=ok HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\nContent-Type: application/json\r\n\r\n{\"a\":\"bcd\"}"
            + "POST /db/_bulk_docs HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            + "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Checksum: abc\r\n\r\n"
            + "\r\nGET / HTTP/1.0\r\nX-Folded: first\r\n  second\r\nAccept: a\r\nAccept: b\r\n\r\n")

    fileprivate static let expectedRequests = [
        DecodedMessage(
            head: "PUT /db/doc?batch=ok HTTP/1.1 Host=x|Content-Length=11|Content-Type=application/json",
            body: bytes("{\"a\":\"bcd\"}"), trailers: []),
        DecodedMessage(
            head: "POST /db/_bulk_docs HTTP/1.1 Transfer-Encoding=chunked", body: bytes("hello world"),
            trailers: ["X-Checksum=abc"]),
        DecodedMessage(head: "GET / HTTP/1.0 X-Folded=first second|Accept=a|Accept=b", body: Data(), trailers: []),
    ]

    @Test("a field's CR, LF and NUL become spaces; every other byte is written as it is")
    func fieldsAreSanitized() {
        var out: [UInt8] = Array("GET / HTTP/1.1\r\n".utf8)
        HTTPSerializer.appendField(name: "X-A", value: "plain café ☕", to: &out)
        HTTPSerializer.appendField(name: "X-B\r\n", value: "one\r\nInjected: yes\u{0}two", to: &out)
        HTTPSerializer.appendField(name: "X-C", value: String(repeating: "v", count: 300) + "\n", to: &out)
        #expect(
            String(decoding: out, as: UTF8.self)
                == "GET / HTTP/1.1\r\nX-A: plain café ☕\r\nX-B  : one  Injected: yes two\r\nX-C: "
                + String(repeating: "v", count: 300) + " \r\n")
    }

    @Test func pipelinedRequestsSplitAnywhere() throws {
        for pieces in splits(Self.pipelinedRequests) {
            let decoded = try decodeRequests(pieces)
            #expect(decoded == Self.expectedRequests, "split into \(pieces.map(\.count))")
        }
    }

    @Test func requestHeadAccessors() throws {
        let head = try HTTPHeadParser.parseRequestHead(
            bytes("GET http://h:1/db/a%2Fb?x=1&y=%22z%22 HTTP/1.1\r\nConnection: Keep-Alive, Close\r\n\r\n"))
        #expect(head.path == "/db/a%2Fb")
        #expect(head.query == "x=1&y=%22z%22")
        #expect(head.keepAlive == false)
        let h10 = try HTTPHeadParser.parseRequestHead(bytes("GET /x HTTP/1.0\nConnection: keep-alive\n\n"))
        #expect(h10.keepAlive)
        #expect(h10.version == .http1_0)
        #expect(h10.query == nil)
        let h11 = try HTTPHeadParser.parseRequestHead(bytes("COPY /db/doc HTTP/1.1\r\nDestination: x\r\n\r\n"))
        #expect(h11.keepAlive)
        #expect(h11.method == "COPY")
    }

    @Test func responsesSplitAnywhere() throws {
        let stream = bytes(
            "HTTP/1.1 100 Continue\r\n\r\n"
                + "HTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\nabcd"
                + "HTTP/1.1 200 OK\r\nContent-Length: 85\r\nETag: \"1-x\"\r\n\r\n"  // answer to HEAD: no body
                + "HTTP/1.1 304 Not Modified\r\nContent-Length: 0\r\n\r\n"
                + "HTTP/1.1 404 Object Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nT: 1\r\n\r\n"
                + "HTTP/1.1 204 No Content\r\n\r\n"
                + "HTTP/1.0 200 OK\r\n\r\nrest of stream")
        let expected = [
            DecodedMessage(head: "HTTP/1.1 100 Continue ", body: Data(), trailers: []),
            DecodedMessage(head: "HTTP/1.1 201 Created Content-Length=4", body: bytes("abcd"), trailers: []),
            DecodedMessage(head: "HTTP/1.1 200 OK Content-Length=85|ETag=\"1-x\"", body: Data(), trailers: []),
            DecodedMessage(head: "HTTP/1.1 304 Not Modified Content-Length=0", body: Data(), trailers: []),
            DecodedMessage(
                head: "HTTP/1.1 404 Object Not Found Transfer-Encoding=chunked", body: bytes("abc"), trailers: ["T=1"]),
            DecodedMessage(head: "HTTP/1.1 204 No Content ", body: Data(), trailers: []),
            DecodedMessage(head: "HTTP/1.0 200 OK ", body: bytes("rest of stream"), trailers: []),
        ]
        for pieces in splits(stream) {
            let decoded = try decodeResponses(
                pieces, methods: ["PUT", "HEAD", "GET", "GET", "DELETE", "GET"], finish: true)
            #expect(decoded == expected, "split into \(pieces.map(\.count))")
        }
    }

    @Test("a head reuses the previous head's strings only for the very same bytes")
    func fieldsOfTheLastHeadReused() throws {
        let heads = [
            "HTTP/1.1 201 Created\r\nServer: CouchDB/3.5.0 (Erlang OTP/26)\r\nETag: \"1-aaaaaaaaaaaaaaaaaaaa\"\r\n"
                + "X-Couch-Request-ID: 0123456789\r\nContent-Length: 0\r\n\r\n",
            // Same names, one value of the same length with other bytes, one name in another case.
            "HTTP/1.1 200 OK\r\nServer: CouchDB/3.5.0 (Erlang OTP/26)\r\nETag: \"1-aaaaaaaaaaaaaaaaaaab\"\r\n"
                + "x-couch-request-id: 0123456789\r\nContent-Length: 0\r\n\r\n",
            // Another order, a field fewer, one more, a value emptied; then one without fields.
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nLocation: /db/a\r\nServer:\r\n"
                + "ETag: \"1-aaaaaaaaaaaaaaaaaaab\"\r\n\r\n",
            "HTTP/1.1 204 No Content\r\n\r\n",
            "HTTP/1.1 200 OK\r\nServer: CouchDB/3.5.0 (Erlang OTP/26)\r\nServer: other\r\nContent-Length: 0\r\n\r\n",
        ]
        var decoder = HTTPResponseDecoder()
        var seen: [[String]] = []
        for head in heads {
            decoder.expectResponse(to: "GET")
            decoder.feed(bytes(head))
            while let part = try decoder.next() {
                if case .head(let parsed) = part { seen.append(parsed.headers.map { "\($0.name)=\($0.value)" }) }
            }
        }
        #expect(
            seen == [
                [
                    "Server=CouchDB/3.5.0 (Erlang OTP/26)", "ETag=\"1-aaaaaaaaaaaaaaaaaaaa\"",
                    "X-Couch-Request-ID=0123456789", "Content-Length=0",
                ],
                [
                    "Server=CouchDB/3.5.0 (Erlang OTP/26)", "ETag=\"1-aaaaaaaaaaaaaaaaaaab\"",
                    "x-couch-request-id=0123456789", "Content-Length=0",
                ],
                ["Content-Length=0", "Location=/db/a", "Server=", "ETag=\"1-aaaaaaaaaaaaaaaaaaab\""],
                [],
                ["Server=CouchDB/3.5.0 (Erlang OTP/26)", "Server=other", "Content-Length=0"],
            ])
    }

    @Test func untilCloseBodyEndsOnlyAtClose() throws {
        let pieces = [bytes("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\npart one, "), bytes("part two")]
        #expect(try decodeResponses(pieces, methods: ["GET"]).isEmpty)
        let done = try decodeResponses(pieces, methods: ["GET"], finish: true)
        #expect(done.count == 1)
        #expect(done.first?.body == bytes("part one, part two"))
    }

    @Test func chunkedDecoderIncremental() throws {
        let wire = bytes("4\r\nWiki\r\n5\r\npedia\r\nE ; name=value\r\n in\r\n\r\nchunks.\r\n0\r\n\r\n")
        for pieces in splits(wire) {
            var decoder = HTTPChunkedDecoder()
            var body = Data()
            var ended = false
            for piece in pieces {
                decoder.feed(piece)
                while let event = try decoder.next() {
                    switch event {
                    case .data(let d): body.append(d)
                    case .end(let trailers):
                        #expect(trailers.count == 0)
                        ended = true
                    }
                }
            }
            #expect(ended)
            #expect(decoder.isComplete)
            #expect(String(decoding: body, as: UTF8.self) == "Wikipedia in\r\n\r\nchunks.")
        }
    }

    @Test func chunkedBareLineFeedsAndUppercaseHex() throws {
        var decoder = HTTPChunkedDecoder()
        decoder.feed(bytes("A\nabcdefghij\n0\nX-T: 1\n\n"))
        var events: [HTTPChunkedDecoder.Event] = []
        while let e = try decoder.next() { events.append(e) }
        #expect(events == [.data(bytes("abcdefghij")), .end(trailers: ["X-T": "1"])])
    }

    @Test(arguments: [
        "zz\r\nabc\r\n0\r\n\r\n",  // not hex
        "\r\n",  // empty size
        "3\r\nabcX0\r\n\r\n",  // no CRLF after data
        "fffffffffffffffff\r\n",  // absurd size
    ])
    func malformedChunks(_ wire: String) {
        var decoder = HTTPChunkedDecoder()
        decoder.feed(bytes(wire))
        #expect(throws: HTTPWireError.self) {
            while try decoder.next() != nil {}
        }
    }

    @Test func chunkedBodyLimit() {
        var decoder = HTTPChunkedDecoder(limits: HTTPParserLimits(maxBodySize: 8))
        decoder.feed(bytes("5\r\nabcde\r\n5\r\nfghij\r\n0\r\n\r\n"))
        #expect(throws: HTTPWireError.bodyTooLarge(limit: 8)) {
            while try decoder.next() != nil {}
        }
    }

    static let malformedRequests: [(String, HTTPWireError)] = [
        ("GET /\r\n\r\n", .invalidStartLine("GET /")),
        ("GET / HTTP/1.1 extra\r\n\r\n", .invalidStartLine("GET / HTTP/1.1 extra")),
        ("GET  / HTTP/1.1\r\n\r\n", .invalidStartLine("GET  / HTTP/1.1")),
        ("GET / HTTP/2.0\r\n\r\n", .unsupportedVersion("HTTP/2.0")),
        ("GET / HTTX/1.1\r\n\r\n", .invalidStartLine("GET / HTTX/1.1")),
        ("G(T / HTTP/1.1\r\n\r\n", .invalidStartLine("G(T / HTTP/1.1")),
        ("GET / HTTP/1.1\r\nNoColon\r\n\r\n", .invalidHeader("NoColon")),
        ("GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", .invalidHeader("Bad Name: x")),
        ("GET / HTTP/1.1\r\nName : x\r\n\r\n", .invalidHeader("Name : x")),
        ("GET / HTTP/1.1\r\n folded-first: x\r\n\r\n", .invalidHeader(" folded-first: x")),
        ("GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", .invalidHeader("A: b\rc")),
        ("PUT / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", .invalidContentLength("-1")),
        ("PUT / HTTP/1.1\r\nContent-Length: 12abc\r\n\r\n", .invalidContentLength("12abc")),
        ("PUT / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", .invalidContentLength("3, 4")),
        ("PUT / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", .conflictingFraming),
        ("PUT / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", .unsupportedTransferEncoding("gzip, chunked")),
    ]

    @Test func malformedRequestsThrowPreciseErrors() {
        for (wire, expected) in Self.malformedRequests {
            #expect(throws: expected, "\(wire.debugDescription)") {
                _ = try decodeRequests([bytes(wire)])
            }
        }
    }

    @Test func duplicateEqualContentLengthsAreAccepted() throws {
        let decoded = try decodeRequests([
            bytes("PUT / HTTP/1.1\r\nContent-Length: 3, 3\r\nContent-Length: 3\r\n\r\nabc")
        ])
        #expect(decoded.first?.body == bytes("abc"))
    }

    @Test func headAndHeaderCountLimits() {
        let limits = HTTPParserLimits(maxHeadSize: 200, maxHeaderCount: 3)
        let long = "GET /" + String(repeating: "a", count: 300) + " HTTP/1.1\r\n\r\n"
        #expect(throws: HTTPWireError.headTooLarge(limit: 200)) {
            _ = try decodeRequests([bytes(long)], limits: limits)
        }
        // Also when the head never ends (no empty line yet): the limit applies while buffering.
        #expect(throws: HTTPWireError.headTooLarge(limit: 200)) {
            _ = try decodeRequests(
                [bytes("GET / HTTP/1.1\r\n"), bytes(String(repeating: "X-A: b\r\n", count: 40))], limits: limits)
        }
        let many = "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n"
        #expect(throws: HTTPWireError.tooManyHeaders(limit: 3)) {
            _ = try decodeRequests([bytes(many)], limits: limits)
        }
        let big = "PUT / HTTP/1.1\r\nContent-Length: 1000\r\n\r\n"
        #expect(throws: HTTPWireError.bodyTooLarge(limit: 100)) {
            _ = try decodeRequests([bytes(big)], limits: HTTPParserLimits(maxBodySize: 100))
        }
    }

    @Test func endOfStreamInTheMiddle() throws {
        #expect(throws: HTTPWireError.unexpectedEndOfStream) {
            _ = try decodeRequests([bytes("PUT / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")], finish: true)
        }
        #expect(throws: HTTPWireError.unexpectedEndOfStream) {
            _ = try decodeRequests([bytes("GET / HTTP/1.1\r\nHost: x\r\n")], finish: true)
        }
        #expect(throws: HTTPWireError.unexpectedEndOfStream) {
            _ = try decodeResponses(
                [bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")], methods: ["GET"], finish: true)
        }
        // A clean close between messages is not an error.
        #expect(try decodeRequests([bytes("GET / HTTP/1.1\r\n\r\n")], finish: true).count == 1)
    }

    @Test func malformedStatusLines() {
        for wire in ["HTTP/1.1 20 OK\r\n\r\n", "HTTP/1.1\r\n\r\n", "ICY 200 OK\r\n\r\n", "HTTP/1.1 abc OK\r\n\r\n"] {
            #expect(throws: HTTPWireError.self, "\(wire.debugDescription)") {
                _ = try decodeResponses([bytes(wire)], methods: ["GET"])
            }
        }
        #expect(throws: HTTPWireError.self) {
            _ = try decodeResponses([bytes("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")], methods: ["GET"])
        }
    }

    @Test func serialiseAndParseBack() throws {
        var headers = HTTPHeaders()
        headers.add("Host", "127.0.0.1:5984")
        headers.add("Transfer-Encoding", "chunked")
        headers.add("X-Evil", "a\r\nInjected: yes")
        var wire = HTTPRequestHead(method: "PUT", target: "/db/a%2Fb?rev=1-x", headers: headers).serialized
        wire.append(HTTPSerializer.chunk(bytes("hello ")))
        wire.append(HTTPSerializer.chunk(Data()))  // writes nothing
        wire.append(HTTPSerializer.chunk(Data(repeating: 0x41, count: 300)))
        wire.append(HTTPSerializer.lastChunk(trailers: ["Content-MD5": "abc"]))
        let decoded = try decodeRequests(splits(wire)[1])
        #expect(decoded.count == 1)
        #expect(
            decoded.first?.head
                == "PUT /db/a%2Fb?rev=1-x HTTP/1.1 Host=127.0.0.1:5984|Transfer-Encoding=chunked|X-Evil=a  Injected: yes"
        )
        #expect(decoded.first?.body == bytes("hello ") + Data(repeating: 0x41, count: 300))
        #expect(decoded.first?.trailers == ["Content-MD5=abc"])

        let response = HTTPResponseHead(status: 404, headers: ["Content-Length": "2"])
        #expect(
            String(decoding: response.serialized, as: UTF8.self)
                == "HTTP/1.1 404 Object Not Found\r\nContent-Length: 2\r\n\r\n")
        let back = try HTTPHeadParser.parseResponseHead(response.serialized)
        #expect(back == response)
    }

    @Test func couchDBReasonPhrases() {
        #expect(HTTPResponseHead.standardReason(for: 404) == "Object Not Found")
        #expect(HTTPResponseHead.standardReason(for: 201) == "Created")
        #expect(HTTPResponseHead.standardReason(for: 202) == "Accepted")
        #expect(HTTPResponseHead.standardReason(for: 302) == "Moved Temporarily")
        #expect(HTTPResponseHead.standardReason(for: 412) == "Precondition Failed")
        #expect(HTTPResponseHead.standardReason(for: 417) == "Expectation Failed")
        #expect(HTTPResponseHead.standardReason(for: 429) == "Too Many Requests")
    }

    /// Heads at the edges of the grammar, each with what the parser must make of it: the start
    /// line's parts, line endings, folding, white space, and every error it reports.
    fileprivate static let responseHeadEdges: [(wire: String, expected: Result<String, HTTPWireError>)] = [
        ("HTTP/1.1 200 OK\r\nA: 1\r\n\r\n", .success("200 OK|A=1")),
        ("HTTP/1.1 200\r\n\r\n", .success("200 |")),
        ("HTTP/1.1 200 \r\n\r\n", .success("200 |")),
        ("HTTP/1.0 404 Object Not Found\nA: 1\n", .success("404 Object Not Found|A=1")),
        ("HTTP/1.1 200 OK\r\nA: 1", .success("200 OK|A=1")),
        ("HTTP/1.1 200 a\tb  c\r\n\r\n", .success("200 a\tb  c|")),
        ("HTTP/1.1 200 OK\r\nA: 1\r\n  folded \r\n\tmore\r\nB:\r\n\r\n", .success("200 OK|A=1 folded more,B=")),
        ("HTTP/1.1 200 OK\r\nB:\r\n \r\n x\r\n\r\n", .success("200 OK|B=x")),
        ("HTTP/1.1 200 OK\r\nX:\t v w \t\r\nx: 2\r\n\r\nNot: read", .success("200 OK|X=v w,x=2")),
        ("HTTP/1.1 200 OK\r\n\r\n", .success("200 OK|")),
        ("HTTP/1.1 200 O\rK\r\n\r\n", .failure(.invalidHeader("HTTP/1.1 200 O\rK"))),
        ("HTTP/1.1 200 OK\r\nA: \r1\r\n\r\n", .failure(.invalidHeader("A: \r1"))),
        ("HTTP/1.1 200 O\u{1}K\r\n\r\n", .failure(.invalidStartLine("HTTP/1.1 200 O\u{1}K"))),
        ("HTTP/1.1 099 Low\r\n\r\n", .failure(.invalidStartLine("HTTP/1.1 099 Low"))),
        ("HTTP/1.1 2000 OK\r\n\r\n", .failure(.invalidStartLine("HTTP/1.1 2000 OK"))),
        ("HTTP/1.1  200 OK\r\n\r\n", .failure(.invalidStartLine("HTTP/1.1  200 OK"))),
        ("HTTP/1.1\r\n\r\n", .failure(.invalidStartLine("HTTP/1.1"))),
        ("HTTP/2.0 200 OK\r\n\r\n", .failure(.unsupportedVersion("HTTP/2.0"))),
        ("HTTPS1.1 200 OK\r\n\r\n", .failure(.invalidStartLine("HTTPS1.1 200 OK"))),
        ("\r\nHTTP/1.1 200 OK\r\n\r\n", .failure(.invalidStartLine(""))),
        ("HTTP/1.1 200 OK\r\n folded first\r\n\r\n", .failure(.invalidHeader(" folded first"))),
        ("HTTP/1.1 200 OK\r\nNo-Colon\r\n\r\n", .failure(.invalidHeader("No-Colon"))),
        ("HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", .failure(.invalidHeader("Bad Name: x"))),
        ("HTTP/1.1 200 OK\r\n: x\r\n\r\n", .failure(.invalidHeader(": x"))),
        ("HTTP/1.1 200 OK\r\nX: a\u{0}b\r\n\r\n", .failure(.invalidHeader("X: a\u{0}b"))),
        ("HTTP/1.1 200 OK\r\nX: a\u{7F}b\r\n\r\n", .failure(.invalidHeader("X: a\u{7F}b"))),
    ]

    @Test func responseHeadEdges() {
        for (wire, expected) in Self.responseHeadEdges {
            let parsed = Result { () throws(HTTPWireError) -> String in
                do {
                    let head = try HTTPHeadParser.parseResponseHead(bytes(wire))
                    return "\(head.status) \(head.reason)|"
                        + head.headers.fields.map { "\($0.name)=\($0.value)" }.joined(separator: ",")
                } catch let error as HTTPWireError {
                    throw error
                } catch {
                    throw .invalidStartLine("unexpected \(error)")
                }
            }
            #expect(parsed == expected, "\(wire.debugDescription)")
        }
    }

    @Test func requestLineEdges() throws {
        let head = try HTTPHeadParser.parseRequestHead(bytes("DELETE /db/a%2Fb?rev=1-x HTTP/1.1\r\nA: 1\r\n\r\n"))
        #expect(head.method == "DELETE" && head.target == "/db/a%2Fb?rev=1-x" && head.headers["a"] == "1")
        for line in [
            "GET  / HTTP/1.1", "GET / HTTP/1.1 extra", "GET /a b HTTP/1.1", " GET / HTTP/1.1", "GET / ",
            "G(T / HTTP/1.1", "GET /\u{7F} HTTP/1.1", "GET / HTTP/1.1 ", "GET",
        ] {
            #expect(throws: HTTPWireError.invalidStartLine(line), "\(line.debugDescription)") {
                _ = try HTTPHeadParser.parseRequestHead(bytes(line + "\r\n\r\n"))
            }
        }
        #expect(throws: HTTPWireError.unsupportedVersion("HTTP/0.9")) {
            _ = try HTTPHeadParser.parseRequestHead(bytes("GET / HTTP/0.9\r\n\r\n"))
        }
        // A head handed over as a non-contiguous collection is read the same.
        let lazy = bytes("GET /x HTTP/1.1\r\nB: 2\r\n\r\n").lazy.map { $0 }
        #expect(try HTTPHeadParser.parseRequestHead(lazy).headers["b"] == "2")
    }

    @Test func settingAFieldReplacesEveryCopyInThePlaceOfTheFirst() {
        var headers: HTTPHeaders = ["A": "1", "b": "2", "a": "3", "C": "4", "A": "5"]
        headers["a"] = "x"
        #expect(headers.fields.map { "\($0.name)=\($0.value)" } == ["A=x", "b=2", "C=4"])
        headers["C"] = "y"
        headers["D"] = "z"
        #expect(headers.fields.map { "\($0.name)=\($0.value)" } == ["A=x", "b=2", "C=y", "D=z"])
        headers["B"] = nil
        #expect(headers.fields.map { "\($0.name)=\($0.value)" } == ["A=x", "C=y", "D=z"])
    }

    @Test func nonUTF8HeaderValuesAreReadAsLatin1() throws {
        var wire = bytes("GET / HTTP/1.1\r\nX-Name: caf")
        wire.append(0xE9)
        wire.append(bytes("\r\n\r\n"))
        let head = try HTTPHeadParser.parseRequestHead(wire)
        #expect(head.headers["x-name"] == "café")
    }
}
