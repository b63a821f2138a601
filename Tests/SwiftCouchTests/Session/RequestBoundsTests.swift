import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

/// The bounds the session puts on every request it hands a transport (issue 24): the response's
/// deadline and the decompression ratio.
@Suite("Session: each request's deadline and decompression ratio", .ownThreads)
struct RequestBoundsTests {
    /// The requests a transport was handed, whole.
    final class Captured: @unchecked Sendable {
        // @unchecked Sendable: `all` is only touched under `lock`.
        private let lock = NSLock()
        private var all: [HTTPRequest] = []

        func append(_ request: HTTPRequest) {
            lock.lock()
            all.append(request)
            lock.unlock()
        }

        var requests: [HTTPRequest] {
            lock.lock()
            defer { lock.unlock() }
            return all
        }
    }

    @Test("requestTimeout is each request's deadline (the login's too), a call's timeout its own; ratio from config")
    func deadlineAndRatio() async throws {
        let server = FakeCookieServer()
        let captured = Captured()
        let transport = SimulatedTransport(responder: { request in
            captured.append(request)
            return server.respond(request)
        })
        var configuration = Configuration()
        configuration.requestTimeout = 7
        configuration.maximumDecompressionRatio = 50
        let client = Simulation.client(
            transport: transport, credentials: Credentials(username: "admin", password: "secret"),
            configuration: configuration)
        defer { client.shutdown() }
        _ = try await client.value(GetServerInfoOperation())
        _ = try await client.value(GetServerInfoOperation(), options: CallOptions(timeout: 2))
        let requests = captured.requests
        let login = try #require(requests.first { $0.path == "/_session" && $0.method == .post })
        #expect(login.deadline == 7)
        #expect(login.maximumDecompressionRatio == 50)
        let reads = requests.filter { $0.path == "/" }
        #expect(reads.map(\.deadline) == [7, 2])
        #expect(reads.map(\.timeout) == [7, 2])
        #expect(reads.allSatisfy { $0.maximumDecompressionRatio == 50 })
    }

    @Test("No ratio configured: none on the request; an upload (a streamed body) has no deadline")
    func noRatioAndUploads() throws {
        let captured = Captured()
        let transport = SimulatedTransport(responder: { request in
            captured.append(request)
            return .json(201, #"{"ok":true,"id":"d","rev":"2-a"}"#)
        })
        var configuration = Configuration()
        configuration.maximumDecompressionRatio = nil
        let client = Simulation.client(transport: transport, configuration: configuration)
        defer { client.shutdown() }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("bounds-\(UUID().uuidString).bin")
        try Data(repeating: 7, count: 1_000).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        var upload = HTTPRequest(method: .put, url: Simulation.serverURL.appendingPathComponent("db/d/a"), timeout: 5)
        upload.streamedBody = try StreamedBody.file(file)
        let done = DispatchSemaphore(value: 0)
        client.session.send(upload, isIdempotent: false) { _ in done.signal() }
        #expect(done.wait(timeout: .now() + 10) == .success)
        var plain = HTTPRequest(method: .get, url: Simulation.serverURL.appendingPathComponent("db"), timeout: 5)
        plain.body = nil
        client.session.send(plain, isIdempotent: true) { _ in done.signal() }
        #expect(done.wait(timeout: .now() + 10) == .success)
        let requests = captured.requests
        #expect(requests.count == 2)
        #expect(requests.first?.deadline == nil)
        #expect(requests.last?.deadline == 5)
        #expect(requests.allSatisfy { $0.maximumDecompressionRatio == nil })
    }
}
