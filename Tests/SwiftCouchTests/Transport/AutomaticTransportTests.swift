import Foundation
import Testing

@testable import SwiftCouch

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

@Suite("AutomaticTransport: which transport carries each request")
struct AutomaticTransportTests {
    let http = URL(string: "http://127.0.0.1:5984/db")!
    let https = URL(string: "https://account.cloudant.com/db")!

    @Test("Linux: http over sockets, https over URLSession; Apple platforms: URLSession for both")
    func routing() {
        let transport = AutomaticTransport(maximumConnectionsPerHost: 2, environment: [:])
        defer { transport.shutdown() }
        #if canImport(FoundationNetworking)
            #expect(transport.transportName(for: http) == "socket")
        #else
            #expect(transport.transportName(for: http) == "urlsession")
        #endif
        #expect(transport.transportName(for: https) == "urlsession")
        #expect(transport.transportName(for: URL(string: "HTTPS://HOST/")!) == "urlsession")
    }

    @Test(
        "An HTTP proxy in the environment sends everything through URLSession, which honours it",
        arguments: ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"])
    func proxy(variable: String) {
        let transport = AutomaticTransport(
            maximumConnectionsPerHost: 2, environment: [variable: "http://proxy.internal:3128"])
        defer { transport.shutdown() }
        #expect(transport.transportName(for: http) == "urlsession")
        let empty = AutomaticTransport(maximumConnectionsPerHost: 2, environment: [variable: ""])
        defer { empty.shutdown() }
        #if canImport(FoundationNetworking)
            #expect(empty.transportName(for: http) == "socket")
        #endif
    }

    @Test("After shutdown, requests and streams fail at once with an error that says so")
    func afterShutdown() async {
        let transport = AutomaticTransport(maximumConnectionsPerHost: 2, environment: [:])
        transport.shutdown()
        for url in [http, https] {
            let result = await withCheckedContinuation { continuation in
                transport.send(HTTPRequest(method: .get, url: url)) { continuation.resume(returning: $0) }
            }
            guard case .failure(let error) = result else {
                Issue.record("a request after shutdown succeeded")
                continue
            }
            #expect((error as? CouchError)?.message.contains("shut down") == true)
            let receiver = CompletionRecorder()
            _ = transport.stream(HTTPRequest(method: .get, url: url), receiver: receiver)
            #expect(receiver.completedWithError)
        }
    }
}

private final class CompletionRecorder: StreamReceiver, @unchecked Sendable {
    // @unchecked Sendable: `error` is only touched under `lock`.
    private let lock = NSLock()
    private var error: (any Error)?
    var completedWithError: Bool { lock.withLock { error != nil } }
    func receive(head: HTTPResponse) {}
    func receive(chunk: Data) {}
    func complete(error: (any Error)?) { lock.withLock { self.error = error } }
}
