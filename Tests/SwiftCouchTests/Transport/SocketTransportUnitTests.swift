import Foundation
import Testing

@testable import SwiftCouch

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite("SocketTransport: request serialisation, URLs and pool bookkeeping")
struct SocketTransportUnitTests {
    private func text(_ request: HTTPRequest, acceptEncoding: String = SocketTransport.acceptEncoding) throws -> String
    {
        let key = try SocketTransport.hostKey(for: request)
        let bytes = RequestHead.bytes(
            for: request, target: RequestHead.target(of: request.url),
            host: RequestHead.hostValue(host: key.host, port: key.port), framing: RequestBodyFraming.of(request),
            acceptEncoding: acceptEncoding)
        return String(decoding: bytes, as: UTF8.self)
    }

    @Test("A GET: request line, Host, the request's fields in order, Accept-Encoding, no body framing")
    func getHead() throws {
        var headers = HTTPFields()
        headers["Accept"] = "application/json"
        headers.append("X-Two", "a")
        headers.append("X-Two", "b")
        let request = HTTPRequest(
            method: .get, url: URL(string: "http://127.0.0.1:5984/db/a%2Fb?rev=1-x&keys=%5B%5D")!, headers: headers)
        #expect(
            try text(request)
                == "GET /db/a%2Fb?rev=1-x&keys=%5B%5D HTTP/1.1\r\nHost: 127.0.0.1:5984\r\nAccept: application/json\r\n"
                + "X-Two: a\r\nX-Two: b\r\nAccept-Encoding: gzip, deflate\r\n\r\n")
    }

    @Test("Bodies: Content-Length for Data, files and declared streams; chunked for unknown length; 0 for an empty PUT")
    func framing() throws {
        let url = URL(string: "http://localhost/db/doc")!
        #expect(RequestBodyFraming.of(HTTPRequest(method: .put, url: url, body: Data("{}".utf8))) == .contentLength(2))
        #expect(RequestBodyFraming.of(HTTPRequest(method: .post, url: url)) == .contentLength(0))
        #expect(RequestBodyFraming.of(HTTPRequest(method: .delete, url: url)) == .none)
        #expect(RequestBodyFraming.of(HTTPRequest(method: .head, url: url)) == .none)
        let declared = StreamedBody.stream(InputStream(data: Data(count: 10)), length: 10)
        #expect(
            RequestBodyFraming.of(HTTPRequest(method: .put, url: url, streamedBody: declared)) == .contentLength(10))
        let unknown = StreamedBody.stream(InputStream(data: Data(count: 10)), length: -1)
        #expect(RequestBodyFraming.of(HTTPRequest(method: .put, url: url, streamedBody: unknown)) == .chunked)

        var headers = HTTPFields()
        headers["Content-Length"] = "999"
        headers["Transfer-Encoding"] = "gzip"
        headers["Accept-Encoding"] = "gzip"
        let put = HTTPRequest(method: .put, url: url, headers: headers, body: Data("{}".utf8))
        // The transport's own framing replaces the request's; its Accept-Encoding is kept. Port 80 is implied.
        #expect(
            try text(put)
                == "PUT /db/doc HTTP/1.1\r\nHost: localhost\r\nAccept-Encoding: gzip\r\nContent-Length: 2\r\n\r\n")
        #expect(
            try text(HTTPRequest(method: .put, url: url, streamedBody: unknown)).contains(
                "Transfer-Encoding: chunked\r\n"))
    }

    @Test("CR, LF and NUL in names and values become spaces: no header injection")
    func sanitised() throws {
        var headers = HTTPFields()
        headers["X-Evil"] = "a\r\nInjected: yes\u{0}"
        let head = try text(HTTPRequest(method: .get, url: URL(string: "http://h:1/")!, headers: headers))
        #expect(head.contains("X-Evil: a  Injected: yes \r\n"))
        #expect(!head.contains("\r\nInjected"))
    }

    @Test("Targets: path and query kept encoded, fragment dropped, / for an empty path; Host for IPv6 and ports")
    func targets() {
        #expect(RequestHead.target(of: URL(string: "http://h:5984")!) == "/")
        #expect(RequestHead.target(of: URL(string: "http://h:5984/")!) == "/")
        #expect(RequestHead.target(of: URL(string: "http://h/_all_dbs?limit=2#frag")!) == "/_all_dbs?limit=2")
        #expect(RequestHead.target(of: URL(string: "http://h?x=1")!) == "/?x=1")
        #expect(RequestHead.target(of: URL(string: "http://u:p@h:1/a%20b/c")!) == "/a%20b/c")
        #expect(RequestHead.hostValue(host: "::1", port: 5984) == "[::1]:5984")
        #expect(RequestHead.hostValue(host: "couch.local", port: 80) == "couch.local")
    }

    @Test("https and other schemes are refused with a transport CouchError naming URLSessionTransport")
    func schemes() throws {
        let https = HTTPRequest(method: .get, url: URL(string: "https://example.com/db")!)
        #expect(throws: CouchError.self) { try SocketTransport.hostKey(for: https) }
        do {
            _ = try SocketTransport.hostKey(for: https)
        } catch {
            #expect(error.kind == .transport)
            #expect(error.message.contains("URLSessionTransport"))
            #expect(error.path == "/db")
        }
        let ftp = HTTPRequest(method: .get, url: URL(string: "ftp://example.com/x")!)
        #expect(throws: CouchError.self) { try SocketTransport.hostKey(for: ftp) }
        let key = try SocketTransport.hostKey(for: HTTPRequest(method: .get, url: URL(string: "http://[::1]:7/")!))
        #expect(key == HostKey(host: "::1", port: 7))
        #expect(try SocketTransport.hostKey(for: HTTPRequest(method: .get, url: URL(string: "http://a/")!)).port == 80)
    }

    @Test(
        "Pool: one connection per host, later requests queue; a queued request cancels alone; shutdown fails the rest")
    func queueing() async throws {
        // A listener that never accepts: connections complete in the backlog, requests never get an answer.
        let (listener, port) = try silentListener()
        defer { close(listener) }
        let transport = SocketTransport(maximumConnectionsPerHost: 1)
        let url = URL(string: "http://127.0.0.1:\(port)/")!
        let results = ResultBox()
        // No request times out within the test, however slowly a loaded machine runs it: in a full
        // parallel run, synchronous tests can hold every cooperative thread for longer than 30 s
        // between two lines of this one, and a queued request's timeout counts while it waits.
        // Each ends only by what the test does to it below.
        let first = transport.send(HTTPRequest(method: .get, url: url, timeout: 3_600)) { results.put("first", $0) }
        let second = transport.send(HTTPRequest(method: .get, url: url, timeout: 3_600)) { results.put("second", $0) }
        _ = transport.send(HTTPRequest(method: .get, url: url, timeout: 3_600)) { results.put("third", $0) }
        #expect(transport.statistics.queuedRequests == 2)
        #expect(transport.statistics.openConnections == 1)

        second.cancel()
        #expect(try await results.code("second") == .cancelled)
        #expect(transport.statistics.queuedRequests == 1)

        // Shutdown fails the queued request at once; the running one goes on until it ends (here:
        // cancelled), and its connection closes then.
        transport.shutdown()
        #expect(try await results.code("third") == .cancelled)
        #expect(results.isEmpty("first"))
        #expect(transport.statistics.openConnections == 1)
        first.cancel()
        #expect(try await results.code("first") == .cancelled)
        #expect(transport.statistics.openConnections == 0)

        let late = ResultBox()
        _ = transport.send(HTTPRequest(method: .get, url: url)) { late.put("late", $0) }
        #expect(try await late.code("late") == .cancelled)
    }

    private func silentListener() throws -> (Int32, Int) {
        #if canImport(Darwin)
            let fd = socket(AF_INET, SOCK_STREAM, 0)
        #else
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #endif
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        try #require(bound == 0)
        try #require(listen(fd, 16) == 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }
}

/// Completion results by name.
private final class ResultBox: @unchecked Sendable {
    // @unchecked Sendable: `results` is only touched under `lock`.
    private let lock = NSLock()
    private var results: [String: Result<HTTPResponse, any Error>] = [:]

    func put(_ name: String, _ result: Result<HTTPResponse, any Error>) {
        lock.lock()
        results[name] = result
        lock.unlock()
    }

    private func get(_ name: String) -> Result<HTTPResponse, any Error>? {
        lock.lock()
        defer { lock.unlock() }
        return results[name]
    }

    func isEmpty(_ name: String) -> Bool { get(name) == nil }

    /// Waits (at most 20 s) for `name`'s result and returns its URLError code (nil on success).
    func code(_ name: String) async throws -> URLError.Code? {
        for _ in 0..<2_000 {
            if let result = get(name) {
                switch result {
                case .success: return nil
                case .failure(let error): return (error as? URLError)?.code ?? URLError.Code(rawValue: -1)
                }
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("\(name) did not complete")
        return nil
    }
}
