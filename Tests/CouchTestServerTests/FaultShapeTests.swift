import CouchQuery
import CouchTestServer
import Foundation
import HTTPWire
import TestScheduling
import Testing

/// The fault shapes real servers and proxies produce: a reply and then a close without notice,
/// idle connections closed, a write done without an answer, a slow head, a redirect elsewhere.
@Suite("Faults: shapes of real servers and proxies", .ownThreads)
struct FaultShapeTests {
    let handler = HTTPTestEchoHandler()

    func start(_ adjust: (inout TestServer.Configuration) -> Void = { _ in }) throws -> TestServer {
        var configuration = TestServer.Configuration(handler: handler)
        adjust(&configuration)
        return try TestServer.start(configuration)
    }

    /// Whether a request on `connection` fails without any response byte.
    static func failsWithoutAnswer(_ connection: RawHTTPConnection, method: String = "GET", target: String) -> Bool {
        do {
            _ = try connection.request(method: method, target: target)
            return false
        } catch let RawHTTPConnection.Failure.closedBeforeResponse(received) {
            return received.isEmpty
        } catch {
            return true  // a reset is reported as a socket error
        }
    }

    @Test func replyThenCloseAnswersAsKeepAliveThenClosesWithoutNotice() throws {
        let server = try start()
        defer { server.stop() }
        server.faults.failNext(with: .replyThenClose(seconds: 0.2))
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let first = try connection.request(method: "PUT", target: "/db/doc", body: Data("{}".utf8))
        #expect(first.status == 201)
        #expect(first.headers["Connection"] == nil)  // no notice that the connection will close
        #expect(handler.calls == 1)  // the request ran
        // The next request on the same connection meets the close.
        #expect(Self.failsWithoutAnswer(connection, target: "/db/other"))
        #expect(handler.calls == 1)
    }

    @Test func tooManyRequestsThenClose() throws {
        let server = try start()
        defer { server.stop() }
        server.faults.failNext(with: .tooManyRequestsThenClose(retryAfter: 1, seconds: 0.2))
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let first = try connection.request(method: "POST", target: "/_session", body: Data("{}".utf8))
        #expect(first.status == 429)
        #expect(first.headers["Retry-After"] == "1")
        #expect(first.headers["Connection"] == nil)
        #expect(Self.failsWithoutAnswer(connection, target: "/db"))
        #expect(handler.calls == 0)
    }

    @Test func dropAfterProcessingRunsTheRequestButNeverAnswers() throws {
        let server = try start()
        defer { server.stop() }
        server.faults.failNext(with: .dropAfterProcessing, matching: .method("PUT"))
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        #expect(Self.failsWithoutAnswer(connection, method: "PUT", target: "/db/doc"))
        #expect(handler.calls == 1)  // the write happened
    }

    @Test func slowHeadArrivesByteByByte() throws {
        let server = try start()
        defer { server.stop() }
        server.faults.failNext(with: .slowHead(seconds: 0.5))
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let started = Date()
        let response = try connection.request(method: "GET", target: "/db/doc")
        #expect(Date().timeIntervalSince(started) >= 0.4)
        #expect(response.status == 200)
        #expect(handler.calls == 1)
        #expect(try connection.request(method: "GET", target: "/db/doc").status == 200)  // still usable
    }

    @Test func trickledBodyArrivesByteByByte() throws {
        let server = try start()
        defer { server.stop() }
        server.faults.failNext(with: .trickleBody(seconds: 0.05))
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        // The whole head at once: the first read, with a short wait, gets it and at most a byte or two.
        let partial = try connection.request(method: "GET", target: "/db/doc", readFor: 0.02)
        #expect(partial.status == 200)
        #expect(partial.stoppedByClient)
        let declared = Int(partial.headers["Content-Length"] ?? "") ?? 0
        #expect(declared > 4)
        #expect(partial.body.count < declared)
        #expect(handler.calls == 1)
        let fresh = try RawHTTPConnection(port: server.port, timeout: 10)
        server.faults.failNext(with: .trickleBody(seconds: 0.01))
        let whole = try fresh.request(method: "GET", target: "/db/doc")
        #expect(whole.body.count == declared)
        #expect(try fresh.request(method: "GET", target: "/db/doc").status == 200)  // still usable
    }

    @Test func interimResponsesBeforeTheAnswer() throws {
        let server = try start()
        defer { server.stop() }
        server.faults.failNext(with: .interim(seconds: 0.02, count: 3))
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let response = try connection.request(method: "GET", target: "/db/doc")
        #expect(response.interim.map(\.status) == [102, 102, 102])
        #expect(response.status == 200)
        #expect(handler.calls == 1)
        // Forever: the request never runs while the client waits.
        server.faults.failNext(with: .interim(seconds: 0.02))
        let forever = try RawHTTPConnection(port: server.port, timeout: 10)
        try forever.send(
            HTTPRequestHead(method: "GET", target: "/db/doc", headers: ["Host": "127.0.0.1:\(server.port)"]).serialized)
        for _ in 0..<10 { #expect(try forever.readInterimResponse().status == 102) }
        forever.close()
        #expect(handler.calls == 1)
    }

    @Test func hostileRetryAfterValuesAreSentAsTheyAre() throws {
        let server = try start()
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        for value in ["nan", "-5", "1e300", "99999999999999999999"] {
            server.faults.failNext(with: .tooManyRequests(retryAfter: .init(value)))
            let response = try connection.request(method: "GET", target: "/db/doc")
            #expect(response.status == 429)
            #expect(response.headers["Retry-After"] == value)
        }
        #expect(handler.calls == 0)
    }

    @Test func redirectToAnotherOrigin() throws {
        let server = try start()
        defer { server.stop() }
        server.faults.failNext(with: .redirect(location: "http://elsewhere.invalid:5984/db/doc"))
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let response = try connection.request(method: "GET", target: "/db/doc")
        #expect(response.status == 302)
        #expect(response.headers["Location"] == "http://elsewhere.invalid:5984/db/doc")
        #expect(handler.calls == 0)
    }

    @Test func idleKeepAliveConnectionsAreClosedAfterTheTimeout() throws {
        let server = try start { $0.keepAliveIdleTimeout = 0.3 }
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        #expect(try connection.request(method: "GET", target: "/db").status == 200)
        #expect(try connection.request(method: "GET", target: "/db").status == 200)  // kept alive while busy
        Thread.sleep(forTimeInterval: 0.8)
        #expect(Self.failsWithoutAnswer(connection, target: "/db"))
    }
}
