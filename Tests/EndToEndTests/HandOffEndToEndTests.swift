import Foundation
import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

/// `GET /` that records whether its response is read on a socket connection's thread.
private struct ThreadNamingOperation: JSONOperation {
    typealias Response = JSONValue
    let names: Locked<[String]>
    var endpoint: CouchPath { .root }

    func processResponse(data: Data, httpInfo: HTTPInfo) throws -> JSONValue {
        let name = ThreadRole.isConnectionThread ? "connection" : Thread.current.name ?? "another thread"
        names.withLock { $0.append(name) }
        return try JSONDecoder().decode(JSONValue.self, from: data)
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
        let names = Locked<[String]>([])
        for _ in 0..<10 {
            _ = try await client.value(ThreadNamingOperation(names: names))
        }
        let all = names.withLock { $0 }
        #expect(all.count == 10)
        #expect(all.allSatisfy { $0 == "connection" }, "\(all)")
    }
}

@Suite("End to end: faults on the login, answered on the connection's thread")
struct LoginFaultHandOffEndToEndTests {
    static let policy = RetryPolicy(maximumRetries: 3, initialDelay: 0.01, maximumDelay: 0.05)

    @Test("429 on the login over sockets: the login is retried, then 30 async calls waiting for it all succeed")
    func loginTooManyRequestsThenSuccess() async throws {
        try await withPrivateTestServer(for: "429 on the login", concurrency: 8, retryPolicy: Self.policy) {
            server, client in
            _ = server.faults.failNext(3, with: .tooManyRequests(), matching: .path("/_session", method: "POST"))
            let versions = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<30 { group.addTask { try await client.value(GetServerInfoOperation()).version } }
                var versions: [String] = []
                for try await version in group { versions.append(version) }
                return versions
            }
            #expect(versions.count == 30)
            #expect(server.requestCount(path: "/_session", method: "POST") == 4, "three refused logins, one good")
        }
    }

    @Test("429 on every login over sockets: every async call ends with the 429 once the retries run out")
    func loginTooManyRequestsForever() async throws {
        // As many turns as calls: all of them wait for the same login (a call that starts after the
        // login and its retries have failed rightly starts another). So the calls must all start
        // while it runs: they run on Dispatch threads, not the cooperative pool, which synchronous
        // tests elsewhere can hold for tens of seconds in a full run (CI once saw the calls start
        // across five logins), and the retries are slow enough (0.1 + 0.2 + 0.3 s) for that.
        let policy = RetryPolicy(maximumRetries: 3, initialDelay: 0.1, maximumDelay: 0.3)
        try await withPrivateTestServer(for: "429 on every login", concurrency: 32, retryPolicy: policy) {
            server, client in
            _ = server.faults.failNext(1_000, with: .tooManyRequests(), matching: .path("/_session", method: "POST"))
            let statuses = await offCooperativePool {
                await withTaskGroup(of: Int?.self) { group in
                    for _ in 0..<20 {
                        group.addTask {
                            do throws(CouchError) {
                                _ = try await client.value(GetServerInfoOperation())
                                return nil
                            } catch {
                                return error.statusCode
                            }
                        }
                    }
                    var statuses: [Int?] = []
                    for await status in group { statuses.append(status) }
                    return statuses
                }
            }
            #expect(statuses.count == 20)
            #expect(statuses.allSatisfy { $0 == 429 })
            #expect(server.requestCount(path: "/_session", method: "POST") == 4, "one login and its three retries")
            #expect(server.requestCount(path: "/", method: "GET") == 0, "nothing is sent without a session")
        }
    }
}

/// Runs `body` with its child tasks on Dispatch threads (the library's own task executor) rather
/// than the cooperative pool, for tests whose calls must start together: in a full parallel run
/// synchronous tests can hold every cooperative thread for tens of seconds.
private func offCooperativePool<T>(_ body: () async throws -> T) async rethrows -> T {
    if #available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, *) {
        return try await withTaskExecutorPreference(AdapterExecutor.shared) { try await body() }
    }
    return try await body()
}
