import Foundation
import Testing

@testable import SwiftCouch

/// `GET /` that records whether its response is read on a socket connection's thread.
private struct ThreadNamingOperation: JSONOperation {
    typealias Response = JSONValue
    let names: ThreadNames
    var endpoint: CouchPath { .root }

    func processResponse(data: Data, httpInfo: HTTPInfo) throws -> JSONValue {
        names.add(ThreadRole.isConnectionThread ? "connection" : Thread.current.name ?? "another thread")
        return try JSONDecoder().decode(JSONValue.self, from: data)
    }
}

private final class ThreadNames: @unchecked Sendable {
    // @unchecked Sendable: `names` is only touched under `lock`.
    private let lock = NSLock()
    private var names: [String] = []
    func add(_ name: String) {
        lock.lock()
        names.append(name)
        lock.unlock()
    }
    var all: [String] {
        lock.lock()
        defer { lock.unlock() }
        return names
    }
}

@Suite("End to end: thread hand-offs over the socket transport")
struct HandOffEndToEndTests {
    @Test("A response is read and decoded on the connection's thread that received it (no hop to the session queue)")
    func responsesAreDecodedWhereTheyArrive() async throws {
        guard E2EEnvironment.shared.url.scheme == "http" else {
            print("Skipping: the socket transport speaks plain http only.")
            return
        }
        let client = E2EEnvironment.shared.client { $0.transport = SocketTransport() }
        defer { client.shutdown() }
        let names = ThreadNames()
        for _ in 0..<10 {
            _ = try await client.value(ThreadNamingOperation(names: names))
        }
        #expect(names.all.count == 10)
        #expect(names.all.allSatisfy { $0 == "connection" }, "\(names.all)")
    }
}
