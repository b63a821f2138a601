import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import Testing

@Suite("End to end: following the changes feed")
struct ChangesFollowerEndToEndTests {
    /// A database of several shards (CouchDB 3's default q=2) interleaves them in `_changes`:
    /// every change comes once, not necessarily in write order.
    @Test("Finite mode delivers every change once in batches, then stops; the last sequence resumes")
    func finite() async throws {
        try await withDatabase("follow-finite") { client, db in
            let ids = (0..<25).map { String(format: "c%03d", $0) }
            for id in ids {
                try await client.execute(PutDocumentOperation(database: db, id: id, document: Note(text: id, n: 0)))
            }
            // On a cluster `_changes` may lag the writes: wait until it has them all.
            _ = try await converged(
                read: { try await client.value(ChangesOperation<JSONValue>(database: db)) },
                until: {
                    $0.results.count == ids.count
                })
            let follower = ChangesFollower<JSONValue>(
                client: client, database: db, options: .init(mode: .finite, batchSize: 10))
            var seen: [String] = []
            for try await change in follower { seen.append(change.id) }
            #expect(seen.sorted() == ids)
            let resumeFrom = try #require(follower.lastProcessedSequence)
            try await client.execute(PutDocumentOperation(database: db, id: "late", document: Note(text: "", n: 1)))
            // A cluster's `_changes` may come from a copy that has not seen the write yet: it
            // converges, so wait for it rather than assume read-your-writes.
            var later: [String] = []
            let converged = try await eventually(seconds: 30) {
                let resumed = ChangesFollower<JSONValue>(
                    client: client, database: db, options: .init(mode: .finite, since: resumeFrom))
                later = []
                for try await change in resumed { later.append(change.id) }
                return !later.isEmpty
            }
            #expect(converged)
            #expect(later == ["late"])
        }
    }

    /// Issue 8 item 5: saving `lastProcessedSequence` right after handling a change is one change
    /// behind; each change's own checkpoint resumes right after it.
    @Test("Each change's checkpoint resumes right after it: nothing skipped, the checkpointed change not again")
    func checkpointsResumeAfterTheChange() async throws {
        try await withDatabase("follow-checkpoint") { client, db in
            let ids = (0..<12).map { String(format: "k%03d", $0) }
            for id in ids {
                try await client.execute(PutDocumentOperation(database: db, id: id, document: Note(text: id, n: 0)))
            }
            try await settle(client, db)  // `_changes` reads one copy of each shard
            for stopAfter in [1, 4, 5, 11] {  // inside a batch, at its end (batches of 5), at the very end
                let follower = ChangesFollower<JSONValue>(
                    client: client, database: db, options: .init(mode: .finite, batchSize: 5))
                var handled: [String] = []
                var saved: CouchSequence?
                for try await change in follower {
                    handled.append(change.id)
                    saved = change.checkpoint
                    if handled.count == stopAfter { break }
                }
                let resumed = ChangesFollower<JSONValue>(
                    client: client, database: db, options: .init(mode: .finite, since: saved, batchSize: 5))
                var rest: [String] = []
                for try await change in resumed { rest.append(change.id) }
                #expect(!rest.contains(handled.last!), "stopped after \(stopAfter)")
                #expect(Set(handled + rest) == Set(ids), "stopped after \(stopAfter)")
            }
        }
    }

    @Test("A missing database ends the follow with its 404, no retry loop")
    func terminal() async throws {
        let client = E2EEnvironment.shared.client()
        let follower = ChangesFollower<JSONValue>(
            client: client, database: E2EEnvironment.uniqueDatabaseName("nope"), options: .init(mode: .listen))
        do {
            for try await _ in follower { Issue.record("no change expected") }
            Issue.record("expected a 404")
        } catch let error as CouchError {
            #expect(error.statusCode == 404)
        }
    }

    @Test(
        "Listen mode (long-poll, then continuous) through a server restart, 429s and dropped connections: every change, none skipped",
        arguments: [false, true])
    func resilient(continuous: Bool) async throws {
        guard E2EEnvironment.shared.testServer != nil else {
            print("Skipping the resilient follower test: it restarts an embedded TestServer (COUCHDB_URL is set).")
            return
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "swiftcouch-follow-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try TestServer.start(TestServer.Configuration(dataDirectory: directory, faultSeed: 7))
        defer { server.stop() }
        var configuration = Configuration()
        configuration.retryPolicy = RetryPolicy(maximumRetries: 2, initialDelay: 0.01, maximumDelay: 0.05)
        let client = server.adminClient(configuration: configuration)
        defer { client.shutdown() }
        let db = "follow"
        try await client.execute(CreateDatabaseOperation(name: db))
        _ = server.faults.failFraction(
            0.25, with: .tooManyRequests(retryAfter: nil), matching: .pathPrefix("/follow/_changes"))
        _ = server.faults.failFraction(0.15, with: .dropConnection, matching: .pathPrefix("/follow/_changes"))

        var options = ChangesFollower<JSONValue>.Options(mode: .listen, batchSize: 7)
        options.longPollTimeout = 300
        options.continuous = continuous
        options.heartbeat = continuous ? 200 : nil
        options.initialBackoff = 0.01
        options.maximumBackoff = 0.1
        let retries = Counter()
        let follower = ChangesFollower<JSONValue>(
            client: client, database: db, options: options, onRetry: { _, _ in retries.increment() })
        let total = 60
        let ids = (0..<total).map { String(format: "w%03d", $0) }
        let writer = Task {
            for (index, id) in ids.enumerated() {
                if index == total / 2 { try server.restart() }
                try await writeUntilStored(client: client, db: db, id: id, value: index)
            }
        }
        var delivered: [String] = []
        for try await change in follower {
            if delivered.last != change.id { delivered.append(change.id) }
            if Set(delivered).count == total { break }
        }
        try await writer.value
        // Every change, none skipped; not in write order: a database of several shards (CouchDB 3's
        // default q=2) interleaves them.
        #expect(Set(delivered) == Set(ids), "every change, none skipped")
        #expect(retries.value > 0, "the faults and the restart made the follower recover")
    }
}

/// A thread-safe counter.
final class Counter: @unchecked Sendable {
    // @unchecked Sendable: `count` is only touched under `lock`.
    private let lock = NSLock()
    private var count = 0
    func increment() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}
