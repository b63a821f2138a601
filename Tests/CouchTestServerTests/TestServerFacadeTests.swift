import CouchQuery
import Foundation
import HTTPWire
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

@Suite("TestServer facade", .ownThreads)
struct TestServerFacadeTests {
    @Test func startsOnAnEphemeralPortWithDefaults() throws {
        let server = try TestServer.start()
        defer { server.stop() }
        #expect(server.isRunning)
        #expect(server.port > 0)
        #expect(server.urlString == "http://127.0.0.1:\(server.port)")
        #expect(server.url.absoluteString == "http://127.0.0.1:\(server.port)")
        #expect(server.url(path: "db/doc").absoluteString == "http://127.0.0.1:\(server.port)/db/doc")
        #expect(server.url(path: "/db/a%2Fb").absoluteString == "http://127.0.0.1:\(server.port)/db/a%2Fb")
        #expect(server.adminName == "admin")
        #expect(server.adminPassword == "password")
        #expect(server.engine.options.adminName == "admin")
        server.expireAllSessions()
        // The engine answers (whatever it implements so far) with a well-formed response.
        let response = try RawHTTPConnection(port: server.port, timeout: 10).request(method: "GET", target: "/")
        #expect(response.headers["Server"] == "CouchDB/3.5.0 (Erlang OTP/26)")
    }

    @Test func configurationReachesTheEngine() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ts-facade-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try TestServer.start(
            TestServer.Configuration(
                adminName: "root", adminPassword: "s3cret", sessionTimeout: 30, dataDirectory: directory, faultSeed: 9))
        defer { server.stop() }
        #expect(server.adminName == "root")
        #expect(server.engine.options.adminPassword == "s3cret")
        #expect(server.engine.options.sessionTimeout == 30)
        #expect(server.engine.options.dataDirectory == directory)
        #expect(server.faults.seed == 9)
    }

    @Test func twoServersAtOnce() throws {
        let a = try TestServer.start(handler: HTTPTestEchoHandler())
        let b = try TestServer.start(handler: HTTPTestEchoHandler())
        defer {
            a.stop()
            b.stop()
        }
        #expect(a.port != b.port)
    }

    @Test func countsRequestsByPathPrefixAndMethod() throws {
        let server = try TestServer.start(handler: HTTPTestEchoHandler())
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        for target in ["/db/doc", "/db/doc?rev=1-a", "/db/a%2Fb", "/db", "/other"] {
            _ = try connection.request(method: "GET", target: target)
        }
        _ = try connection.request(method: "PUT", target: "/db/doc", body: Data("{}".utf8))
        #expect(server.requestCount(path: "/db/doc") == 3)
        #expect(server.requestCount(path: "/db/doc", method: "GET") == 2)
        #expect(server.requestCount(path: "/db/doc", method: "put") == 1)
        #expect(server.requestCount(path: "/db/doc?rev=1-a") == 1)
        #expect(server.requestCount(path: "/db/a%2Fb") == 1)
        #expect(server.requestCount(path: "/db/a/b") == 0)
        #expect(server.requestCount(pathPrefix: "/db") == 5)
        #expect(server.requestCount(pathPrefix: "/db/", method: "GET") == 3)
        #expect(server.requestCount() == 6)
        #expect(server.requestCount(method: "PUT") == 1)
        #expect(server.requestLog.count == 6)
        #expect(server.requestLog[1].path == "/db/doc")
        #expect(server.requestLog[1].query == "rev=1-a")
        server.resetRequestCounts()
        #expect(server.requestCount() == 0)
        #expect(server.requestLog.isEmpty)
    }

    /// A long-running server keeps at most 10,000 distinct (method, path, query) counts and the
    /// last 10,000 requests in `requestLog`; totals stay exact, and so do the counts of paths
    /// requested recently.
    @Test func requestCountsStayBoundedOverManyDistinctPaths() throws {
        let server = try TestServer.start(handler: HTTPTestEchoHandler())
        defer { server.stop() }
        for i in 0..<200_000 { server.counter.record(method: "GET", rawPath: "/many/\(i)", rawQuery: nil) }
        server.counter.record(method: "PUT", rawPath: "/many/199999", rawQuery: "rev=1-a")
        let bound =
            RequestCounter.keyLimit + RequestCounter.segmentLimit + RequestCounter.methodLimit
            + RequestCounter.logLimit
        #expect(RequestCounter.keyLimit == 10_000 && RequestCounter.logLimit == 10_000)
        #expect(server.counter.storedEntryCount <= bound)
        #expect(server.requestCount() == 200_001)
        #expect(server.requestCount(method: "GET") == 200_000)
        #expect(server.requestCount(method: "put") == 1)
        #expect(server.requestCount(path: "/many/199999") == 2)
        #expect(server.requestCount(path: "/many/199999?rev=1-a", method: "PUT") == 1)
        // /many/199990 … /many/199999 and the PUT; /many/19999 itself was requested 180,000
        // requests ago, and is no longer counted by path.
        #expect(server.requestCount(pathPrefix: "/many/19999") == 11)
        // A prefix within the first segment stays exact.
        #expect(server.requestCount(pathPrefix: "/many/") == 200_001)
        #expect(server.requestCount(pathPrefix: "/man", method: "GET") == 200_000)
        #expect(server.requestLog.count <= 10_000)
        #expect(server.requestLog.last?.query == "rev=1-a")
        #expect(server.requestLog.first?.path == "/many/\(200_001 - server.requestLog.count)")
        // Real requests are still counted once the log is full.
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        _ = try connection.request(method: "GET", target: "/fresh")
        #expect(server.requestCount(path: "/fresh") == 1)
        #expect(server.requestCount() == 200_002)
        #expect(server.counter.storedEntryCount <= bound)
    }

    @Test func restartKeepsThePortCountsAndFaults() throws {
        let server = try TestServer.start(handler: HTTPTestEchoHandler())
        defer { server.stop() }
        let port = server.port
        _ = try RawHTTPConnection(port: port, timeout: 10).request(method: "GET", target: "/before")
        server.faults.failAlways(with: .serviceUnavailable(), matching: .path("/faulted"))
        let oldEngine = server.engine
        try server.restart()
        #expect(server.isRunning)
        #expect(server.port == port)
        #expect(server.engine !== oldEngine)
        let connection = try RawHTTPConnection(port: port, timeout: 10)
        #expect(try connection.request(method: "GET", target: "/after").status == 200)
        #expect(try connection.request(method: "GET", target: "/faulted").status == 503)
        #expect(server.requestCount(path: "/before") == 1)
        #expect(server.requestCount(path: "/after") == 1)
    }

    @Test func startingAgainOnTheSamePortAfterStop() throws {
        let first = try TestServer.start(handler: HTTPTestEchoHandler())
        let port = first.port
        // Leave a connection open while stopping, as a client with keep-alive would.
        let connection = try RawHTTPConnection(port: port, timeout: 10)
        _ = try connection.request(method: "GET", target: "/x")
        first.stop()
        let second = try TestServer.start(TestServer.Configuration(port: port, handler: HTTPTestEchoHandler()))
        defer { second.stop() }
        #expect(second.port == port)
        #expect(try RawHTTPConnection(port: port, timeout: 10).request(method: "GET", target: "/y").status == 200)
    }

    @Test func aPortInUseIsAnError() throws {
        let server = try TestServer.start(handler: HTTPTestEchoHandler())
        defer { server.stop() }
        #expect(throws: SocketError.self) {
            _ = try TestServer.start(TestServer.Configuration(port: server.port, handler: HTTPTestEchoHandler()))
        }
    }
}
