import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The URLSession transport end to end. The rest of the suite runs over the library's default
/// transport (the socket transport for plain `http` on Linux), so the paths that only
/// ``URLSessionTransport`` takes are exercised here, against a TestServer of their own.
@Suite("End to end: URLSessionTransport")
struct URLSessionTransportEndToEndTests {
    @Test("Documents with ids that need encoding, a streamed _all_docs with a small buffer, and a file attachment")
    func documentsRowsAndAttachments() async throws {
        try await withURLSessionServer(for: "the URLSession document round trips") { _, client in
            let db = "urlsession-docs"
            try await client.execute(CreateDatabaseOperation(name: db))
            for id in ["a/b", "space here", "plus+é", "🦊"] {
                let written = try await client.value(
                    PutDocumentOperation(database: db, id: id, document: Note(text: id, n: 0)))
                let read = try await client.value(GetDocumentOperation<Note>(database: db, id: id))
                #expect(read._id == id)
                #expect(read._rev == written.rev)
            }
            _ = try await client.value(
                BulkDocsOperation(
                    database: db, documents: (0..<600).map { Note(_id: String(format: "r%04d", $0), text: "", n: $0) }))
            var options = KeyRangeOptions()
            options.includeDocs = true
            options.startKey = "r"
            options.endKey = "r\u{fff0}"
            var count = 0
            for try await row in client.rows(AllDocsOperation<Note>(database: db, options: options), bufferSize: 8) {
                #expect(row.doc?.n == count)
                count += 1
            }
            #expect(count == 600)

            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "swiftcouch-urlsession-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let source = directory.appendingPathComponent("source.bin")
            let target = directory.appendingPathComponent("target.bin")
            var words = [UInt64](repeating: 0, count: 1 << 19)
            var generator = SystemRandomNumberGenerator()
            for index in words.indices { words[index] = generator.next() }
            let bytes = words.withUnsafeBytes { Data($0) }
            try bytes.write(to: source)
            _ = try await client.upload(
                UploadAttachmentOperation(
                    database: db, documentID: "files/1", name: "blob.bin", revision: nil,
                    contentType: "application/octet-stream", body: try .file(source))
            ).value
            let download = try await client.download(
                GetAttachmentOperation(database: db, documentID: "files/1", name: "blob.bin"), to: target
            ).value
            #expect(download.length == Int64(bytes.count))
            #expect(try Data(contentsOf: target) == bytes)
        }
    }

    @Test("429s are retried and an expired session is renewed once; a finite changes follow sees every write")
    func retriesSessionsAndChanges() async throws {
        try await withURLSessionServer(for: "the URLSession retry and session test") { server, client in
            let db = "urlsession-retry"
            try await client.execute(CreateDatabaseOperation(name: db))
            let rule = server.faults.failFraction(
                0.5, with: .tooManyRequests(retryAfter: nil), matching: .pathPrefix("/\(db)/", method: "PUT"))
            let first = try await writeNotes(client: client, db: db, ids: (0..<40).map { "a\($0)" })
            let fired = server.faults.rules.first { $0.id == rule }?.fired ?? 0
            server.faults.remove(rule)
            #expect(first.allSatisfy { $0.hasPrefix("1-") })
            #expect(fired > 0)
            #expect(server.requestCount(pathPrefix: "/\(db)/", method: "PUT") == 40 + fired)

            let logins = server.requestCount(path: "/_session", method: "POST")
            server.expireAllSessions()
            _ = try await writeNotes(client: client, db: db, ids: (0..<40).map { "b\($0)" })
            #expect(server.requestCount(path: "/_session", method: "POST") - logins == 1)

            let follower = ChangesFollower<JSONValue>(
                client: client, database: db, options: .init(mode: .finite, batchSize: 16))
            var seen = Set<String>()
            for try await change in follower { seen.insert(change.id) }
            #expect(seen.count == 80)
        }
    }

    @Test(
        "A stream paused and resumed every 5 chunks delivers every byte exactly once, in order, from one request",
        arguments: ["urlsession", "socket"])
    func pausedStreamIntegrity(transportName: String) async throws {
        guard E2EEnvironment.shared.testServer != nil else {
            print("Skipping the stream integrity test: it needs a TestServer of its own (COUCHDB_URL is set).")
            return
        }
        let size = 8 << 20
        let server = try TestServer.start(handler: PatternHandler(size: size))
        defer { server.stop() }
        let transport: any Transport = transportName == "socket" ? SocketTransport() : URLSessionTransport()
        defer { transport.shutdown() }
        let receiver = PatternReceiver()
        receiver.attach(
            transport.stream(HTTPRequest(method: .get, url: server.url(path: "/pattern")), receiver: receiver))
        let outcome = try await receiver.outcome()
        #expect(outcome.error == nil)
        #expect(outcome.bytes == size)
        #expect(outcome.firstWrongOffset == nil, "wrong byte at offset \(outcome.firstWrongOffset ?? -1)")
        #expect(outcome.pauses > 5)
        #expect(server.requestCount() == 1, "the request was sent \(server.requestCount()) times")
    }

    /// Pausing a URLSession task on Linux is unsafe (a suspension overtaken by completion traps in
    /// FoundationNetworking; a resumed transfer is sent again), so ``URLSessionTransport`` does not
    /// suspend there. Each stream here is paused on every chunk and resumed from another thread at
    /// once, some are cancelled at random moments, and all are paused again after their end: every
    /// one must end, none may trap, and each completed one has exactly its bytes.
    @Test("Pausing, resuming and cancelling streamed tasks at any moment never traps, and every byte arrives")
    func pauseResumeCancelStorm() async throws {
        guard E2EEnvironment.shared.testServer != nil else {
            print("Skipping the URLSession pause storm: it needs a TestServer of its own (COUCHDB_URL is set).")
            return
        }
        let size = 96 * 1024
        let server = try TestServer.start(handler: FixedBodyHandler(size: size))
        defer { server.stop() }
        let transport = URLSessionTransport()
        defer { transport.shutdown() }
        var generator = SystemRandomNumberGenerator()
        let streams = Int(ProcessInfo.processInfo.environment["STORM_STREAMS"] ?? "") ?? 240
        try await withThrowingTaskGroup(of: (Int, StormReceiver.Outcome).self) { group in
            for index in 0..<streams {
                let cancelAfterChunks = index % 4 == 3 ? Int.random(in: 0...6, using: &generator) : nil
                group.addTask {
                    let receiver = StormReceiver(cancelAfterChunks: cancelAfterChunks)
                    let task = transport.stream(
                        HTTPRequest(method: .get, url: server.url(path: "/body/\(index)")), receiver: receiver)
                    receiver.attach(task)
                    return (index, try await receiver.outcome())
                }
            }
            var completed = 0
            var cancelled = 0
            for try await (index, outcome) in group {
                switch outcome {
                case .completed(let bytes):
                    completed += 1
                    #expect(bytes == size, "stream \(index) delivered \(bytes) of \(size) bytes")
                case .failed(let error):
                    let code = (error as? URLError)?.code
                    if index % 4 == 3, code == .cancelled {
                        cancelled += 1
                    } else {
                        Issue.record("stream \(index) failed: \(error)")
                    }
                }
            }
            #expect(completed + cancelled == streams)
            #expect(completed >= streams * 3 / 4)
        }
    }
}

/// Answers every request with `size` bytes, written in small pieces so that they arrive as many chunks.
private struct FixedBodyHandler: RequestHandler {
    let size: Int
    func handle(_ request: ServerRequest) -> ServerResponse {
        let total = size
        return ServerResponse(
            status: 200, headers: ["Content-Type": "application/octet-stream"],
            body: .stream { writer in
                var sent = 0
                while sent < total {
                    let piece = min(8 * 1024, total - sent)
                    guard writer.write(Data(repeating: 0x5A, count: piece)) else { return }
                    sent += piece
                }
            })
    }
}

/// Pauses its task on every chunk and resumes it from another thread straight away; optionally
/// cancels after some chunks; pauses once more after the end.
private final class StormReceiver: StreamReceiver, @unchecked Sendable {
    // @unchecked Sendable: mutable state is behind `lock`.
    enum Outcome: Sendable {
        case completed(Int)
        case failed(any Error)
    }
    private let lock = NSLock()
    private var task: (any StreamingTask)?
    private var bytes = 0
    private var chunks = 0
    private var result: Outcome?
    private var waiter: CheckedContinuation<Outcome, any Error>?
    private let cancelAfterChunks: Int?

    init(cancelAfterChunks: Int?) { self.cancelAfterChunks = cancelAfterChunks }

    func attach(_ task: any StreamingTask) {
        lock.withLock { self.task = task }
        if cancelAfterChunks == 0 { task.cancel() }
    }

    func receive(head: HTTPResponse) {}

    func receive(chunk: Data) {
        let (task, count) = lock.withLock { () -> ((any StreamingTask)?, Int) in
            bytes += chunk.count
            chunks += 1
            return (self.task, chunks)
        }
        guard let task else { return }
        task.pause()
        DispatchQueue.global().async { task.resume() }
        if let cancelAfterChunks, count == cancelAfterChunks {
            DispatchQueue.global().async { task.cancel() }
        }
    }

    func complete(error: (any Error)?) {
        let (task, waiter, outcome) = lock.withLock {
            () -> ((any StreamingTask)?, CheckedContinuation<Outcome, any Error>?, Outcome) in
            let outcome: Outcome = error.map { .failed($0) } ?? .completed(bytes)
            result = outcome
            defer { self.waiter = nil }
            return (self.task, self.waiter, outcome)
        }
        // Late calls on a finished task must be harmless.
        task?.pause()
        task?.resume()
        task?.cancel()
        waiter?.resume(returning: outcome)
    }

    func outcome() async throws -> Outcome {
        try await withCheckedThrowingContinuation { continuation in
            let ready = lock.withLock { () -> Outcome? in
                if let result { return result }
                waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}

/// Runs `body` against a TestServer of its own with an admin client over ``URLSessionTransport``,
/// or skips with a printed reason against a real CouchDB (faults and request counts need the
/// TestServer; the rest of the suite covers a real server).
private func withURLSessionServer(
    for what: String, _ body: (TestServer, CouchDBClient) async throws -> Void
) async throws {
    guard E2EEnvironment.shared.testServer != nil else {
        print("Skipping \(what): it needs a TestServer of its own (COUCHDB_URL is set).")
        return
    }
    let server = try TestServer.start()
    defer { server.stop() }
    var configuration = Configuration()
    configuration.retryPolicy = RetryPolicy(maximumRetries: 30, initialDelay: 0.005, maximumDelay: 0.05)
    configuration.maximumConcurrentOperations = 8
    configuration.transport = URLSessionTransport(maximumConnectionsPerHost: 8)
    let client = server.adminClient(configuration: configuration)
    defer { client.shutdown() }
    try await body(server, client)
}

/// Answers with `size` bytes in which the byte at offset `i` is `i % 251`, in 64 KiB writes.
private struct PatternHandler: RequestHandler {
    let size: Int
    func handle(_ request: ServerRequest) -> ServerResponse {
        let total = size
        return ServerResponse(
            status: 200, headers: ["Content-Type": "application/octet-stream"],
            body: .stream { writer in
                var sent = 0
                while sent < total {
                    let start = sent
                    let piece = [UInt8]((0..<min(64 * 1024, total - sent)).map { UInt8((start + $0) % 251) })
                    guard writer.write(Data(piece)) else { return }
                    sent += piece.count
                }
            })
    }
}

/// Checks every byte against the pattern; pauses every 5 chunks and resumes 20 ms later.
private final class PatternReceiver: StreamReceiver, @unchecked Sendable {
    // @unchecked Sendable: mutable state is behind `lock`.
    struct Outcome: Sendable {
        var bytes = 0
        var firstWrongOffset: Int?
        var pauses = 0
        var error: String?
    }
    private let lock = NSLock()
    private var state = Outcome()
    private var chunks = 0
    private var task: (any StreamingTask)?
    private var finished = false
    private var waiter: CheckedContinuation<Outcome, any Error>?

    func attach(_ task: any StreamingTask) { lock.withLock { self.task = task } }

    func receive(head: HTTPResponse) {}

    func receive(chunk: Data) {
        let pause = lock.withLock { () -> (any StreamingTask)? in
            if state.firstWrongOffset == nil {
                for (index, byte) in chunk.enumerated() where byte != UInt8((state.bytes + index) % 251) {
                    state.firstWrongOffset = state.bytes + index
                    break
                }
            }
            state.bytes += chunk.count
            chunks += 1
            guard chunks % 5 == 0, let task else { return nil }
            state.pauses += 1
            return task
        }
        if let pause {
            pause.pause()
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(20)) { pause.resume() }
        }
    }

    func complete(error: (any Error)?) {
        let (waiter, outcome) = lock.withLock { () -> (CheckedContinuation<Outcome, any Error>?, Outcome) in
            state.error = error.map { "\($0)" }
            finished = true
            defer { self.waiter = nil }
            return (self.waiter, state)
        }
        waiter?.resume(returning: outcome)
    }

    func outcome() async throws -> Outcome {
        try await withCheckedThrowingContinuation { continuation in
            let ready = lock.withLock { () -> Outcome? in
                if finished { return state }
                waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
