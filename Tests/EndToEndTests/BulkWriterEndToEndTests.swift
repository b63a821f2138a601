import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import Testing

@Suite("End to end: the bulk writer")
struct BulkWriterEndToEndTests {
    @Test("2,500 documents in batches of 200, at most 3 in flight: one result per document, in order")
    func writesEverything() async throws {
        try await withDatabase("bulkwriter") { client, db in
            let writer = BulkWriter<Note>(
                client: client, database: db, options: .init(batchSize: 200, maximumBatchesInFlight: 3))
            for index in 0..<2_500 {
                try await writer.add(Note(_id: String(format: "n%05d", index), text: "note", n: index))
            }
            let results = try await writer.finish()
            #expect(results.count == 2_500)
            #expect(results.allSatisfy { $0.rev?.hasPrefix("1-") == true })
            #expect(results.enumerated().allSatisfy { $0.element.id == String(format: "n%05d", $0.offset) })
            // A cluster's counts come from one copy of each shard: they converge.
            let info = try await converged(
                read: { try await client.value(GetDatabaseInfoOperation(name: db)) }, until: { $0.docCount == 2_500 })
            #expect(info.docCount == 2_500)
        }
    }

    @Test("Conflicting rows are reported, not retried; the rest are written")
    func conflicts() async throws {
        try await withDatabase("bulkconflict") { client, db in
            let taken = try await client.value(
                PutDocumentOperation(database: db, id: "taken", document: Note(text: "x", n: 0)))
            // A cluster copy that has not seen "taken" yet would accept the write (no conflict there).
            try await awaitEveryCopy(client, db, id: "taken", rev: try #require(taken.rev))
            let writer = BulkWriter<Note>(client: client, database: db, options: .init(batchSize: 2))
            let results = try await writer.write(
                contentsOf: [
                    Note(_id: "a", text: "a", n: 1), Note(_id: "taken", text: "b", n: 2),
                    Note(_id: "c", text: "c", n: 3),
                ]
                .async)
            #expect(results.map(\.id) == ["a", "taken", "c"])
            #expect(results[1].error?.error == "conflict")
            #expect(results[0].rev != nil && results[2].rev != nil)
        }
    }

    @Test("A 429 storm on _bulk_docs: every document still lands exactly once")
    func storm() async throws {
        let retries = RetryPolicy(maximumRetries: 30, initialDelay: 0.005, maximumDelay: 0.05)
        try await withPrivateTestServer(for: "the bulk 429 storm", retryPolicy: retries) { server, client in
            try await client.execute(CreateDatabaseOperation(name: "storm"))
            _ = server.faults.failFraction(
                0.5, with: .tooManyRequests(retryAfter: nil), matching: .path("/storm/_bulk_docs"))
            let writer = BulkWriter<Note>(client: client, database: "storm", options: .init(batchSize: 50))
            for index in 0..<500 { try await writer.add(Note(_id: "d\(index)", text: "", n: index)) }
            let results = try await writer.finish()
            #expect(results.allSatisfy { $0.rev?.hasPrefix("1-") == true })
            #expect(try await client.value(GetDatabaseInfoOperation(name: "storm")).docCount == 500)
        }
    }

    /// Issue 8 item 4: CouchDB fails a whole `_bulk_docs` request for one illegal id.
    @Test("5,000 documents with one illegal id: 4,999 written, one illegal_docid failure")
    func oneIllegalIDFailsAlone() async throws {
        try await withDatabase("bulkillegal") { client, db in
            let writer = BulkWriter<Note>(
                client: client, database: db, options: .init(batchSize: 500, maximumBatchesInFlight: 3))
            for index in 0..<5_000 {
                try await writer.add(Note(_id: index == 2_345 ? "_illegal" : "n\(index)", text: "note", n: index))
            }
            let results = try await writer.finish()
            #expect(results.filter { $0.rev != nil }.count == 4_999)
            #expect(results[2_345].error?.error == "illegal_docid")
            // A cluster's counts come from one copy of each shard: they converge.
            let info = try await converged(
                read: { try await client.value(GetDatabaseInfoOperation(name: db)) }, until: { $0.docCount == 4_999 })
            #expect(info.docCount == 4_999)
        }
    }

    /// Issue 8 item 12: a `_bulk_docs` request carried out whose answer was lost is sent again;
    /// documents without `_id` got one on the client, so the resend creates nothing twice, and
    /// the conflicts it meets are recognised as the lost write.
    @Test("Answers lost after the write: documents without _id are written once each and reported written")
    func lostAnswersNeverDuplicate() async throws {
        try await withPrivateTestServer(for: "lost bulk answers") { server, client in
            let db = E2EEnvironment.uniqueDatabaseName("bulklost")
            _ = try await client.execute(CreateDatabaseOperation(name: db))
            server.faults.failNext(2, with: .dropAfterProcessing, matching: .path("/\(db)/_bulk_docs", method: "POST"))
            var options = BulkWriter<Note>.Options(batchSize: 100, maximumBatchesInFlight: 2)
            options.rowRetryDelay = 0.01
            let writer = BulkWriter<Note>(client: client, database: db, options: options)
            for index in 0..<300 { try await writer.add(Note(text: "no id", n: index)) }
            let results = try await writer.finish()
            #expect(results.allSatisfy { $0.rev?.hasPrefix("1-") == true }, "\(results.compactMap(\.error).prefix(3))")
            #expect(Set(results.compactMap(\.id)).count == 300)
            #expect(try await client.value(GetDatabaseInfoOperation(name: db)).docCount == 300)
            _ = try await client.execute(DeleteDatabaseOperation(name: db))
        }
    }
}

extension Array where Element: Sendable {
    /// The elements as an `AsyncSequence`.
    var async: AsyncStream<Element> {
        AsyncStream { continuation in
            for element in self { continuation.yield(element) }
            continuation.finish()
        }
    }
}
