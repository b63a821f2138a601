import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import Testing

/// The rows of the README's "Failure semantics" table that need a server's fault shapes: what is
/// resent, what is never resent, and what an unknown outcome looks like.
@Suite("Failure semantics under the faults real servers and proxies produce")
struct FailureSemanticsEndToEndTests {
    /// A server answers as if it kept the connection open, then closes it without notice: the
    /// next request on that pooled connection meets a reset before any answer. Nothing of it
    /// reached the server, so it is resent on a fresh connection: PUTs and POSTs alike, once each.
    @Test("Reply, then close without notice: the next PUT and POST on that connection are resent, once")
    func replyThenCloseResendsTheNextRequest() async throws {
        try await withPrivateTestServer(for: "reply-then-close resends", concurrency: 1) { server, client in
            let db = E2EEnvironment.uniqueDatabaseName("reply-then-close")
            _ = try await client.execute(CreateDatabaseOperation(name: db))
            for round in 0..<4 {
                server.faults.failNext(with: .replyThenClose(seconds: 0.4), matching: .path("/\(db)", method: "GET"))
                _ = try await client.execute(GetDatabaseInfoOperation(name: db))
                _ = try await client.execute(
                    PutDocumentOperation(
                        database: db, id: "put-\(round)", document: Note(_id: nil, _rev: nil, text: "put", n: round)))
                server.faults.failNext(with: .replyThenClose(seconds: 0.4), matching: .path("/\(db)", method: "GET"))
                _ = try await client.execute(GetDatabaseInfoOperation(name: db))
                _ = try await client.execute(
                    CreateDocumentOperation(database: db, document: Note(_id: nil, _rev: nil, text: "post", n: round)))
            }
            let info = try await client.value(GetDatabaseInfoOperation(name: db))
            #expect(info.docCount == 8)  // every write once: nothing lost, nothing duplicated
            #expect(server.requestCount(path: "/\(db)", method: "POST") == 4)  // the lost sends never arrived
            _ = try await client.execute(DeleteDatabaseOperation(name: db))
        }
    }

    /// The 429 storm of issue 8: a 429 and a close without `Connection: close`; the retry goes
    /// out on the dead connection, meets the reset, and is resent on a fresh one.
    @Test("429, then close without notice: the retried write is resent on a fresh connection and succeeds")
    func tooManyRequestsThenClose() async throws {
        try await withPrivateTestServer(for: "429-then-close resends", concurrency: 1) { server, client in
            let db = E2EEnvironment.uniqueDatabaseName("429-then-close")
            _ = try await client.execute(CreateDatabaseOperation(name: db))
            for round in 0..<4 {
                server.faults.failNext(
                    with: .tooManyRequestsThenClose(retryAfter: nil, seconds: 0.4), matching: .pathPrefix("/\(db)/"))
                _ = try await client.execute(
                    PutDocumentOperation(
                        database: db, id: "doc-\(round)", document: Note(_id: nil, _rev: nil, text: "x", n: round)))
                server.faults.failNext(
                    with: .tooManyRequestsThenClose(retryAfter: nil, seconds: 0.4),
                    matching: .path("/\(db)", method: "POST"))
                _ = try await client.execute(
                    CreateDocumentOperation(database: db, document: Note(_id: nil, _rev: nil, text: "y", n: round)))
            }
            #expect(try await client.value(GetDatabaseInfoOperation(name: db)).docCount == 8)
            _ = try await client.execute(DeleteDatabaseOperation(name: db))
        }
    }
}

/// Malformed answers become errors with what arrived, never a success.
@Suite("Malformed answers")
struct MalformedAnswerEndToEndTests {
    @Test("A body cut off is a transport error; a 200 that is not JSON is a decoding error with the status and body")
    func cutOffAndNotJSON() async throws {
        try await withPrivateTestServer(for: "malformed answers") { server, client in
            let db = E2EEnvironment.uniqueDatabaseName("malformed")
            _ = try await client.execute(CreateDatabaseOperation(name: db))
            _ = try await client.value(PutDocumentOperation(database: db, id: "d", document: Note(text: "x", n: 1)))
            let read = GetDocumentOperation<Note>(database: db, id: "d")
            server.faults.failNext(50, with: .truncatedBody, matching: .path("/\(db)/d", method: "GET"))
            do {
                _ = try await client.value(read)
                Issue.record("a cut-off body was reported as success")
            } catch let error as CouchError {
                #expect(error.kind == .transport)
            }
            server.faults.clear()
            server.faults.failNext(50, with: .invalidJSON, matching: .path("/\(db)/d", method: "GET"))
            do {
                _ = try await client.value(read)
                Issue.record("a body that is not JSON was reported as success")
            } catch let error as CouchError {
                #expect(error.kind == .decoding)
                #expect(error.statusCode == 200)
                #expect(error.bodyText?.contains("502 Bad Gateway") == true)
            }
            server.faults.clear()
            _ = try await client.execute(DeleteDatabaseOperation(name: db))
        }
    }
}

/// Issue 8 item 10: whole bodies are bounded.
@Suite("Response bodies past the configured limit")
struct ResponseLimitEndToEndTests {
    @Test("A document larger than maximumResponseBodySize is a clear transport error, not memory exhaustion")
    func documentPastTheLimit() async throws {
        try await withDatabase("bodylimit") { client, db in
            let big = String(repeating: "x", count: 50_000)
            _ = try await client.value(PutDocumentOperation(database: db, id: "big", document: Note(text: big, n: 1)))
            let limited = E2EEnvironment.shared.client { $0.maximumResponseBodySize = 10_000 }
            defer { limited.shutdown() }
            do {
                _ = try await limited.value(GetDocumentOperation<Note>(database: db, id: "big"))
                Issue.record("a body past the limit was accepted")
            } catch let error as CouchError {
                #expect(error.kind == .transport)
                #expect(error.message.contains("maximumResponseBodySize"))
            }
            #expect(try await client.value(GetDocumentOperation<Note>(database: db, id: "big")).text == big)
        }
    }
}

/// Redirects are never followed: a `Cookie` or `Authorization` header must not reach another
/// origin, and a write must not be silently replayed elsewhere.
@Suite("Redirects are reported, never followed")
struct RedirectEndToEndTests {
    @Test("A 302 to another origin is a clear error; the other origin receives nothing", arguments: ["GET", "PUT"])
    func redirectToAnotherOrigin(method: String) async throws {
        let elsewhere = try TestServer.start()
        defer { elsewhere.stop() }
        try await withPrivateTestServer(for: "redirects") { server, client in
            let db = E2EEnvironment.uniqueDatabaseName("redirect")
            _ = try await client.execute(CreateDatabaseOperation(name: db))
            let target = elsewhere.url.absoluteString + "/\(db)/doc?token=secret"
            server.faults.failNext(with: .redirect(location: target), matching: .path("/\(db)/doc", method: method))
            do {
                if method == "GET" {
                    _ = try await client.execute(GetDocumentOperation<Note>(database: db, id: "doc"))
                } else {
                    _ = try await client.execute(
                        PutDocumentOperation(
                            database: db, id: "doc", document: Note(_id: nil, _rev: nil, text: "x", n: 1)))
                }
                Issue.record("a redirect was reported as success")
            } catch let error as CouchError {
                #expect(error.statusCode == 302)
                #expect(error.message.contains("redirect"))
                #expect(error.message.contains("\(elsewhere.port)/\(db)/doc"))  // where it pointed
                #expect(!error.message.contains("secret"))  // but not its query
                #expect(!String(describing: error).contains(server.adminPassword))
            }
            #expect(elsewhere.requestCount() == 0)
            _ = try await client.execute(DeleteDatabaseOperation(name: db))
        }
    }
}

/// `shutdown()` reaches streams, feeds and transfers too, not only queued operations.
@Suite("Shutdown reaches every request in flight")
struct ShutdownEndToEndTests {
    /// Waits for `task` at most `seconds`; nil when it did not finish in time.
    static func result<T: Sendable>(of task: Task<T, Never>, within seconds: Double) async -> T? {
        await withTaskGroup(of: T?.self) { group in
            group.addTask { await task.value }
            group.addTask {
                try? await Task.sleep(nanoseconds: UInt64(seconds * 1_000_000_000))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    @Test("shutdown() ends a continuous feed, a long-poll follower and a paused row stream, each with a clear error")
    func shutdownReachesStreams() async throws {
        try await withDatabase("shutdown") { setup, db in
            // Enough rows that the paused stream cannot have read its whole body in a few reads
            // (then it would have completed before the shutdown).
            _ = try await setup.value(
                BulkDocsOperation(database: db, documents: (0..<5_000).map { Note(_id: "s\($0)", text: "", n: $0) }))
            try await settle(setup, db)  // the row stream reads one copy of each shard
            let client = E2EEnvironment.shared.client()
            var continuousOptions = ChangesFollower<JSONValue>.Options(mode: .listen)
            continuousOptions.continuous = true
            continuousOptions.heartbeat = 1_000
            let followers = [
                ChangesFollower<JSONValue>(client: client, database: db, options: continuousOptions),
                ChangesFollower<JSONValue>(client: client, database: db, options: .init(mode: .listen)),
            ]
            let tasks = followers.map { follower in
                Task { () -> CouchError? in
                    do {
                        for try await _ in follower {}
                        return nil
                    } catch {
                        return error as? CouchError
                    }
                }
            }
            // On a cluster a request may reach copies that lag: take a stream whose copies have every row.
            var rows = client.rows(AllDocsOperation<JSONValue>(database: db), bufferSize: 8).makeAsyncIterator()
            var patience = Patience()
            while true {
                let stream = client.rows(AllDocsOperation<JSONValue>(database: db), bufferSize: 8)
                rows = stream.makeAsyncIterator()
                _ = try await rows.next()  // then paused: nobody reads
                if try await !patience.waitAgain(unless: stream.metadata["total_rows"] == 5_000) { break }
            }
            try await Task.sleep(nanoseconds: 300_000_000)  // the followers are waiting on the server
            client.shutdown()
            for task in tasks {
                let error = await Self.result(of: task, within: 30)
                #expect(error??.kind == .cancelled)
                #expect(error??.message.contains("shut down") == true)
            }
            do {
                while try await rows.next() != nil {}
                Issue.record("the row stream went on after shutdown")
            } catch let error as CouchError {
                #expect(error.kind == .cancelled)
            }
            do {
                _ = try await client.value(GetDatabaseInfoOperation(name: db))
                Issue.record("an operation ran after shutdown")
            } catch let error as CouchError {
                #expect(error.message.contains("shut down"))
            }
        }
    }
}
