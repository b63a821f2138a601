import CouchQuery
import CouchTestServer
import Foundation
import HTTPWire
import TestScheduling
import Testing

@Suite("Faults", .ownThreads)
struct FaultTests {
    let handler = HTTPTestEchoHandler()

    func start(seed: UInt64 = 0) throws -> TestServer {
        try TestServer.start(TestServer.Configuration(faultSeed: seed, handler: handler))
    }

    @Test func tooManyRequestsWithAndWithoutRetryAfter() throws {
        let server = try start()
        defer { server.stop() }
        server.faults.failNext(1, with: .tooManyRequests(retryAfter: 3))
        server.faults.failNext(1, with: .tooManyRequests())
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let first = try connection.request(method: "GET", target: "/db/doc")
        #expect(first.status == 429)
        #expect(first.reason == "Too Many Requests")
        #expect(first.headers["Retry-After"] == "3")
        #expect(first.headers["Content-Type"] == "application/json")
        let json = try httpTestJSON(first)
        #expect(
            json == [
                "error": "too_many_requests",
                "reason": "You've exceeded your current limit of x requests per second for x class. Please try later.",
            ])
        let second = try connection.request(method: "GET", target: "/db/doc")
        #expect(second.status == 429)
        #expect(second.headers["Retry-After"] == nil)
        let third = try connection.request(method: "GET", target: "/db/doc")
        #expect(third.status == 200)
        #expect(handler.calls == 1)  // faulted requests never reached the handler
        #expect(server.faults.triggeredCount == 2)
        #expect(server.faults.rules.isEmpty)  // `next` rules go away when used up
        #expect(server.requestCount(path: "/db/doc", method: "GET") == 3)
    }

    @Test(arguments: [
        (TestServerFaults.Fault.internalServerError, 500, "Internal Server Error", "internal_server_error"),
        (TestServerFaults.Fault.serviceUnavailable(retryAfter: 7), 503, "Service Unavailable", "service_unavailable"),
    ])
    func serverErrors(_ fault: TestServerFaults.Fault, status: Int, reason: String, error: String) throws {
        let server = try start()
        defer { server.stop() }
        server.faults.failNext(with: fault)
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let response = try connection.request(method: "POST", target: "/db/_bulk_docs", body: Data("{}".utf8))
        #expect(response.status == status)
        #expect(response.reason == reason)
        let json = try httpTestJSON(response)
        #expect(json["error"]?.stringValue == error)
        #expect(json["reason"]?.stringValue?.isEmpty == false)
        if case .serviceUnavailable = fault { #expect(response.headers["Retry-After"] == "7") }
        #expect(handler.calls == 0)
        // The connection stays usable after a faulted answer.
        #expect(try connection.request(method: "GET", target: "/ok").status == 200)
    }

    @Test func droppedConnection() throws {
        let server = try start()
        defer { server.stop() }
        server.faults.failNext(with: .dropConnection)
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        #expect {
            _ = try connection.request(method: "GET", target: "/db")
        } throws: { error in
            guard
                case RawHTTPConnection.Failure.closedBeforeResponse(let received)? = error as? RawHTTPConnection.Failure
            else { return false }
            return received.isEmpty
        }
        #expect(handler.calls == 0)
        #expect(server.requestCount(path: "/db") == 1)  // it was read before the drop
        #expect(
            try RawHTTPConnection(port: server.port, timeout: 10).request(method: "GET", target: "/db").status == 200)
    }

    @Test func delayRunsTheRequestAfterwards() throws {
        let server = try start()
        defer { server.stop() }
        server.faults.failNext(with: .delay(seconds: 0.3))
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let started = Date()
        let response = try connection.request(method: "PUT", target: "/db/doc", body: Data("{}".utf8))
        #expect(Date().timeIntervalSince(started) >= 0.3)
        #expect(response.status == 201)
        #expect(handler.calls == 1)
    }

    @Test func stopCutsADelayShort() throws {
        let server = try start()
        server.faults.failAlways(with: .delay(seconds: 120))
        let connection = try RawHTTPConnection(port: server.port, timeout: 60)
        try connection.send(Data("GET /slow HTTP/1.1\r\n\r\n".utf8))
        // Make sure the request has arrived before stopping (bounded wait).
        for _ in 0..<500 where server.requestCount(path: "/slow") == 0 { usleep(10_000) }
        #expect(server.requestCount(path: "/slow") == 1)
        server.stop()
        #expect(throws: RawHTTPConnection.Failure.self) { _ = try connection.readResponse(to: "GET") }
        #expect(handler.calls == 0)
    }

    @Test func truncatedBody() throws {
        let server = try start()
        defer { server.stop() }
        server.faults.failNext(with: .truncatedBody, matching: .path("/db/doc"))
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        var declared = 0
        var received = Data()
        #expect {
            _ = try connection.request(method: "GET", target: "/db/doc")
        } throws: { error in
            guard
                case RawHTTPConnection.Failure.closedMidBody(let head, let partial)? = error
                    as? RawHTTPConnection.Failure
            else { return false }
            declared = Int(head.headers["Content-Length"] ?? "") ?? -1
            received = partial
            return head.status == 200
        }
        #expect(declared > 10)
        #expect(received.count == declared / 2)
        #expect(handler.calls == 1)  // the request did run

        // A streamed answer is cut inside its first chunk.
        server.faults.failNext(with: .truncatedBody, matching: .path("/stream"))
        let second = try RawHTTPConnection(port: server.port, timeout: 10)
        #expect(throws: RawHTTPConnection.Failure.self) { _ = try second.request(method: "GET", target: "/stream") }
    }

    @Test func invalidJSONBody() throws {
        let server = try start()
        defer { server.stop() }
        server.faults.failNext(with: .invalidJSON)
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        let response = try connection.request(method: "GET", target: "/db/doc")
        #expect(response.status == 200)
        #expect(response.headers["Content-Type"] == "application/json")
        #expect(throws: JSONParseError.self) { _ = try JSON.parse(response.body) }
        #expect(handler.calls == 0)
    }

    @Test func matchingByPathPrefixAndMethod() throws {
        let server = try start()
        defer { server.stop() }
        server.faults.failAlways(with: .internalServerError, matching: .path("/db/a", method: "PUT"))
        server.faults.failAlways(with: .serviceUnavailable(), matching: .pathPrefix("/other"))
        server.faults.failAlways(with: .tooManyRequests(), matching: .path("/db/q?x=1"))
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        func status(_ method: String, _ target: String) throws -> Int {
            try connection.request(method: method, target: target, body: method == "PUT" ? Data("{}".utf8) : nil).status
        }
        #expect(try status("PUT", "/db/a") == 500)
        #expect(try status("GET", "/db/a") == 200)
        #expect(try status("PUT", "/db/ab") == 201)
        #expect(try status("GET", "/other") == 503)
        #expect(try status("DELETE", "/other/x/y") == 503)
        #expect(try status("GET", "/db/other") == 200)
        #expect(try status("GET", "/db/q?x=1") == 429)
        #expect(try status("GET", "/db/q?x=2") == 200)
        #expect(try status("GET", "/db/q") == 200)
        #expect(server.faults.triggeredCount == 4)

        server.faults.clear()
        #expect(server.faults.rules.isEmpty)
        #expect(server.faults.triggeredCount == 0)
        #expect(try status("PUT", "/db/a") == 201)
    }

    @Test func rulesAreCheckedInOrderAndCanBeRemoved() throws {
        let server = try start()
        defer { server.stop() }
        let first = server.faults.failAlways(with: .internalServerError, matching: .pathPrefix("/db"))
        server.faults.failAlways(with: .serviceUnavailable())
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        #expect(try connection.request(method: "GET", target: "/db").status == 500)
        #expect(try connection.request(method: "GET", target: "/x").status == 503)
        server.faults.remove(first)
        #expect(try connection.request(method: "GET", target: "/db").status == 503)
        #expect(server.faults.rules.count == 1)
        #expect(server.faults.rules.first?.fired == 2)
    }

    /// Which of `count` requests (1-based) a 30% rule faults, with this seed.
    func faultedRequests(seed: UInt64, count: Int) throws -> [Int] {
        let server = try start(seed: seed)
        defer { server.stop() }
        server.faults.failFraction(0.3, with: .serviceUnavailable())
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        var faulted: [Int] = []
        for i in 1...count where try connection.request(method: "GET", target: "/r").status == 503 {
            faulted.append(i)
        }
        return faulted
    }

    @Test func fractionIsDeterministicFromTheSeed() throws {
        let a = try faultedRequests(seed: 42, count: 200)
        let b = try faultedRequests(seed: 42, count: 200)
        let c = try faultedRequests(seed: 7, count: 200)
        #expect(a == b)
        #expect(a != c)
        // Roughly the asked share.
        #expect((30...90).contains(a.count), "\(a.count) of 200")
        #expect((30...90).contains(c.count), "\(c.count) of 200")
    }

    @Test func fractionChoicesDoNotDependOnOtherTraffic() {
        // The same rule sees the same choices whether or not other requests come in between.
        let quiet = TestServerFaults(seed: 99)
        quiet.failFraction(0.5, with: .internalServerError, matching: .path("/a"))
        let busy = TestServerFaults(seed: 99)
        busy.failFraction(0.5, with: .internalServerError, matching: .path("/a"))
        var quietPattern: [Bool] = []
        var busyPattern: [Bool] = []
        for _ in 0..<100 {
            quietPattern.append(quiet.fault(forMethod: "GET", rawPath: "/a", rawQuery: nil) != nil)
            #expect(busy.fault(forMethod: "GET", rawPath: "/b", rawQuery: nil) == nil)
            busyPattern.append(busy.fault(forMethod: "GET", rawPath: "/a", rawQuery: nil) != nil)
        }
        #expect(quietPattern == busyPattern)
        #expect(quietPattern.contains(true) && quietPattern.contains(false))
        // After clear(), a new rule starts the same sequence again.
        quiet.clear()
        quiet.failFraction(0.5, with: .internalServerError, matching: .path("/a"))
        let again = (0..<100).map { _ in quiet.fault(forMethod: "GET", rawPath: "/a", rawQuery: nil) != nil }
        #expect(again == quietPattern)
        // Edge shares.
        let never = TestServerFaults(seed: 1)
        never.failFraction(0, with: .internalServerError)
        let always = TestServerFaults(seed: 1)
        always.failFraction(1, with: .internalServerError)
        for _ in 0..<50 {
            #expect(never.fault(forMethod: "GET", rawPath: "/", rawQuery: nil) == nil)
            #expect(always.fault(forMethod: "GET", rawPath: "/", rawQuery: nil) == .internalServerError)
        }
    }

    @Test func specsAsTheCommandLineTakesThem() throws {
        #expect(try FaultSpec(parsing: "429") == FaultSpec(fault: .tooManyRequests()))
        #expect(
            try FaultSpec(parsing: "429,retry-after=2,next=3,prefix=/db")
                == FaultSpec(fault: .tooManyRequests(retryAfter: 2), frequency: .next(3), match: .pathPrefix("/db")))
        #expect(
            try FaultSpec(parsing: "503,fraction=0.25,path=/db/doc,method=get")
                == FaultSpec(
                    fault: .serviceUnavailable(), frequency: .fraction(0.25), match: .path("/db/doc", method: "GET")))
        #expect(try FaultSpec(parsing: "delay:1.5").fault == .delay(seconds: 1.5))
        #expect(try FaultSpec(parsing: "drop").fault == .dropConnection)
        #expect(try FaultSpec(parsing: "truncate").fault == .truncatedBody)
        #expect(try FaultSpec(parsing: "invalid-json").fault == .invalidJSON)
        #expect(try FaultSpec(parsing: "500").fault == .internalServerError)
        #expect(try FaultSpec(parsing: "reply-then-close:0.5").fault == .replyThenClose(seconds: 0.5))
        #expect(
            try FaultSpec(parsing: "429-then-close:1,retry-after=2").fault
                == .tooManyRequestsThenClose(retryAfter: 2, seconds: 1))
        #expect(try FaultSpec(parsing: "drop-after,method=PUT").fault == .dropAfterProcessing)
        #expect(try FaultSpec(parsing: "slow-head:2").fault == .slowHead(seconds: 2))
        #expect(try FaultSpec(parsing: "trickle-body:0.5").fault == .trickleBody(seconds: 0.5))
        #expect(try FaultSpec(parsing: "interim:1").fault == .interim(seconds: 1))
        #expect(try FaultSpec(parsing: "interim:0.2,count=3").fault == .interim(seconds: 0.2, count: 3))
        // Retry-After as any text, for clients' handling of hostile values; whole seconds as before.
        for value in ["nan", "-5", "1e300", "inf", "soon"] {
            #expect(
                try FaultSpec(parsing: "429,retry-after=\(value)").fault
                    == .tooManyRequests(retryAfter: .init(value)))
            #expect(
                try FaultSpec(parsing: "503,retry-after=\(value)").fault
                    == .serviceUnavailable(retryAfter: .init(value)))
        }
        #expect(
            try FaultSpec(parsing: "429-then-close:1,retry-after=nan").fault
                == .tooManyRequestsThenClose(retryAfter: "nan", seconds: 1))
        #expect(
            try FaultSpec(parsing: "redirect,location=http://elsewhere:5984/x").fault
                == .redirect(location: "http://elsewhere:5984/x"))
        for bad in [
            "", "418", "429,next=0", "429,fraction=2", "500,retry-after=1", "429,path=db", "delay:x", "429,bogus=1",
            "429,next", "redirect", "drop,location=http://x", "reply-then-close", "slow-head:-1",
            "drop-after,retry-after=1", "trickle-body:0", "trickle-body:x", "interim", "interim:0", "500,count=2",
            "interim:1,count=-1", "429,retry-after=",
        ] {
            #expect(throws: FaultSpec.ParseError.self, "\(bad)") { _ = try FaultSpec(parsing: bad) }
        }
        let faults = TestServerFaults()
        try faults.add(spec: "500,next=2,path=/x")
        #expect(faults.fault(forMethod: "GET", rawPath: "/x", rawQuery: nil) == .internalServerError)
        #expect(faults.fault(forMethod: "GET", rawPath: "/y", rawQuery: nil) == nil)
        #expect(faults.fault(forMethod: "GET", rawPath: "/x", rawQuery: nil) == .internalServerError)
        #expect(faults.fault(forMethod: "GET", rawPath: "/x", rawQuery: nil) == nil)
    }

    @Test func faultsAreThreadSafe() async throws {
        let faults = TestServerFaults(seed: 5)
        faults.failNext(500, with: .internalServerError)
        let hits = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    var n = 0
                    for _ in 0..<100 where faults.fault(forMethod: "GET", rawPath: "/", rawQuery: nil) != nil { n += 1 }
                    return n
                }
            }
            return await group.reduce(0, +)
        }
        #expect(hits == 500)
        #expect(faults.triggeredCount == 500)
    }
}
