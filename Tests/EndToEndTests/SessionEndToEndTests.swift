import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import Testing

@Suite("End to end: authentication, faults, restarts and concurrency")
struct SessionEndToEndTests {
    @Test("Cookie authentication logs in once; Basic authentication works too")
    func authModes() async throws {
        let environment = E2EEnvironment.shared
        let cookie = environment.client()
        for _ in 0..<3 { _ = try await cookie.value(ListDatabasesOperation(limit: 1)) }
        let basic = environment.client { $0.authentication = .basic }
        _ = try await basic.value(ListDatabasesOperation(limit: 1))
        if let server = environment.testServer {
            #expect(server.requestCount(path: "/_session", method: "POST") >= 1)
        }
    }

    @Test("Wrong credentials: every operation fails with an authentication error, one login attempt")
    func wrongPassword() async throws {
        let environment = E2EEnvironment.shared
        // A private TestServer (to count logins) when there is one; otherwise the real CouchDB.
        let server = environment.testServer != nil ? try TestServer.start() : nil
        defer { server?.stop() }
        // A user that does not exist, so no real account is ever locked out.
        let stranger = Credentials(username: "swiftcouch-nobody-\(UUID().uuidString.prefix(8))", password: "wrong")
        var configuration = Configuration()
        configuration.maximumConcurrentOperations = 4
        let client = CouchDBClient(
            url: server?.url ?? environment.url, credentials: stranger, configuration: configuration)
        let errors = await withTaskGroup(of: CouchError?.self) { group in
            for _ in 0..<12 {
                group.addTask {
                    do {
                        _ = try await client.execute(ListDatabasesOperation())
                        return nil
                    } catch {
                        return error as? CouchError
                    }
                }
            }
            return await group.reduce(into: [CouchError?]()) { $0.append($1) }
        }
        #expect(errors.count == 12)
        #expect(errors.allSatisfy { $0?.kind == .authentication })
        #expect(errors.allSatisfy { !String(reflecting: $0 as Any).contains("wrong") })
        if let server {
            #expect(server.requestCount(path: "/_session", method: "POST") == 1)
            #expect(server.requestCount() == 1)
        }
    }

    @Test("Sessions expiring mid-batch: one renewal, every write lands")
    func sessionsExpireMidBatch() async throws {
        try await withPrivateTestServer(for: "sessions expiring mid-batch", concurrency: 8) { server, client in
            let db = "expiry"
            try await client.execute(CreateDatabaseOperation(name: db))
            let logins = server.requestCount(path: "/_session", method: "POST")
            try await writeNotes(client: client, db: db, ids: (0..<40).map { "a\($0)" })
            server.expireAllSessions()
            try await writeNotes(client: client, db: db, ids: (0..<40).map { "b\($0)" })
            #expect(server.requestCount(path: "/_session", method: "POST") - logins == 1)
            let info = try await client.value(GetDatabaseInfoOperation(name: db))
            #expect(info.docCount == 80)
        }
    }

    @Test("429 storm: with half the writes answered 429, every write lands exactly once")
    func tooManyRequestsStorm() async throws {
        let fast = RetryPolicy(maximumRetries: 30, initialDelay: 0.005, maximumDelay: 0.05)
        try await withPrivateTestServer(for: "the 429 storm", concurrency: 8, retryPolicy: fast) { server, client in
            let db = "storm"
            try await client.execute(CreateDatabaseOperation(name: db))
            let rule = server.faults.failFraction(
                0.5, with: .tooManyRequests(retryAfter: nil), matching: .pathPrefix("/\(db)/", method: "PUT"))
            defer { server.faults.remove(rule) }
            let ids = (0..<100).map { "doc\($0)" }
            let revisions = try await writeNotes(client: client, db: db, ids: ids)
            #expect(revisions.allSatisfy { $0.hasPrefix("1-") })
            let fired = server.faults.rules.first { $0.id == rule }?.fired ?? 0
            #expect(fired > 10)
            let info = try await client.value(GetDatabaseInfoOperation(name: db))
            #expect(info.docCount == 100)
            // Each write landed exactly once: one PUT answered by the engine per document.
            #expect(server.requestCount(pathPrefix: "/\(db)/", method: "PUT") == 100 + fired)
        }
    }

    @Test("64 concurrent clients × 200 mixed reads and writes: no lost write, every read sees the last revision")
    func concurrentClients() async throws {
        try await withDatabase("load") { _, db in
            let environment = E2EEnvironment.shared
            let failures = await withTaskGroup(of: String?.self) { group in
                for worker in 0..<64 {
                    group.addTask {
                        let client = environment.client { $0.maximumConcurrentOperations = 2 }
                        defer { client.shutdown() }
                        let id = "worker-\(worker)"
                        var rev: String?
                        var expected = 0
                        for step in 0..<200 {
                            do {
                                if step % 2 == 0 {
                                    expected += 1
                                    let written = try await client.value(
                                        PutDocumentOperation(
                                            database: db, id: id, document: Note(text: id, n: expected), revision: rev))
                                    rev = written.rev
                                } else {
                                    let note = try await client.value(GetDocumentOperation<Note>(database: db, id: id))
                                    if note._rev != rev || note.n != expected {
                                        return
                                            "\(id) step \(step): read \(note._rev ?? "-")/\(note.n), wrote \(rev ?? "-")/\(expected)"
                                    }
                                }
                            } catch {
                                return "\(id) step \(step): \(error)"
                            }
                        }
                        return nil
                    }
                }
                return await group.reduce(into: [String]()) { if let f = $1 { $0.append(f) } }
            }
            #expect(failures.isEmpty, "\(failures.prefix(5))")
            let info = try await environment.client().value(GetDatabaseInfoOperation(name: db))
            #expect(info.docCount == 64)
        }
    }
}

/// Writes one note per id, concurrently on the client's queue; returns the revisions in order.
@discardableResult
func writeNotes(client: CouchDBClient, db: String, ids: [String]) async throws -> [String] {
    try await withThrowingTaskGroup(of: (Int, String).self) { group in
        for (index, id) in ids.enumerated() {
            group.addTask {
                let written = try await client.value(
                    PutDocumentOperation(database: db, id: id, document: Note(text: id, n: index)))
                return (index, written.rev ?? "")
            }
        }
        var revisions = Array(repeating: "", count: ids.count)
        for try await (index, rev) in group { revisions[index] = rev }
        return revisions
    }
}
