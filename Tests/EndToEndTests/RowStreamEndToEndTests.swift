import Foundation
import SwiftCouch
import Testing

@Suite("End to end: streaming rows")
struct RowStreamEndToEndTests {
    @Test("_all_docs rows stream in order with their documents; metadata is read too")
    func allDocs() async throws {
        try await withDatabase("rows") { client, db in
            let writer = BulkWriter<Note>(client: client, database: db, options: .init(batchSize: 500))
            for index in 0..<3_000 {
                try await writer.add(Note(_id: String(format: "r%05d", index), text: "t", n: index))
            }
            _ = try await writer.finish()
            var options = KeyRangeOptions()
            options.includeDocs = true
            // On a cluster `_all_docs` reads one copy of each shard, which converges on the writes.
            _ = try await converged(
                read: {
                    try await client.value(
                        AllDocsOperation<JSONValue>(database: db, options: KeyRangeOptions(limit: 0)))
                },
                until: {
                    $0.totalRows == 3_000
                })
            // Each streamed request may reach another copy of a shard: stream again until one saw
            // every write (a single node: the first).
            var rows: [(id: String, n: Int?)] = []
            var total: JSONValue?
            var status: Int?
            var patience = Patience()
            repeat {
                let stream = client.rows(AllDocsOperation<Note>(database: db, options: options), bufferSize: 16)
                rows = []
                for try await row in stream { rows.append((row.id ?? "", row.doc?.n)) }
                total = stream.metadata["total_rows"]
                status = stream.statusCode
            } while try await patience.waitAgain(unless: rows.count >= 3_000)
            #expect(rows.count == 3_000)
            #expect(rows.enumerated().allSatisfy { $0.element.id == String(format: "r%05d", $0.offset) })
            #expect(rows.enumerated().allSatisfy { $0.element.n == $0.offset })
            #expect(total == 3_000)
            #expect(status == 200)
        }
    }

    @Test("Leaving the loop early cancels the transfer; the client keeps working")
    func earlyExit() async throws {
        try await withDatabase("rows-exit") { client, db in
            _ = try await client.value(
                BulkDocsOperation(database: db, documents: (0..<500).map { Note(_id: "e\($0)", text: "", n: $0) }))
            // `_all_docs` reads one copy of each shard: wait until the copies have the writes.
            _ = try await converged(
                read: {
                    try await client.value(
                        AllDocsOperation<JSONValue>(database: db, options: KeyRangeOptions(limit: 0)))
                }, until: { $0.totalRows == 500 })
            // Each request may reach another copy of a shard, one that has not caught up: stream
            // again until one had rows (a single node: the first).
            var taken = 0
            var patience = Patience()
            repeat {
                taken = 0
                for try await _ in client.rows(AllDocsOperation<JSONValue>(database: db), bufferSize: 4) {
                    taken += 1
                    if taken == 10 { break }
                }
            } while try await patience.waitAgain(unless: taken >= 10)
            #expect(taken == 10)
            #expect(
                try await converged(
                    read: { try await client.value(GetDatabaseInfoOperation(name: db)) }, until: { $0.docCount == 500 }
                ).docCount == 500)
        }
    }

    @Test("An error status arrives as a CouchError from the first next()")
    func errorStatus() async throws {
        let client = E2EEnvironment.shared.client()
        do {
            for try await _ in client.rows(
                AllDocsOperation<JSONValue>(database: E2EEnvironment.uniqueDatabaseName("no")))
            {
                Issue.record("no rows expected")
            }
            Issue.record("expected a 404")
        } catch let error as CouchError {
            #expect(error.statusCode == 404)
            #expect(error.error == "not_found")
        }
    }

    @Test("Validation happens before anything is sent, and fails the iteration")
    func validation() async {
        let client = E2EEnvironment.shared.client()
        do {
            for try await _ in client.rows(AllDocsOperation<JSONValue>(database: "Bad Name")) {}
            Issue.record("expected a validation error")
        } catch let error as CouchError {
            #expect(error.kind == .validation)
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    @Test("_find and _changes results stream as rows")
    func findAndChanges() async throws {
        try await withDatabase("rows-find") { client, db in
            _ = try await client.value(
                BulkDocsOperation(database: db, documents: (0..<40).map { Note(_id: "f\($0)", text: "", n: $0) }))
            // `_find` and `_changes` read one copy of each shard, and each request may reach
            // another copy: stream again until one saw every write (a single node: the first).
            var found: [Int] = []
            let query = FindOperation<Note>(database: db, selector: .field("n").greaterThanOrEqual(30))
            var patience = Patience()
            repeat {
                found = []
                for try await note in client.rows(query) { found.append(note.n) }
            } while try await patience.waitAgain(unless: found.count >= 10)
            #expect(found.sorted() == Array(30..<40))
            var changed: [String] = []
            repeat {
                changed = []
                for try await change in client.rows(ChangesOperation<JSONValue>(database: db)) {
                    changed.append(change.id)
                }
            } while try await patience.waitAgain(unless: changed.count >= 40)
            #expect(changed.allSatisfy { $0.hasPrefix("f") })
            #expect(Set(changed).count == 40)
            #expect(changed.count == 40)
        }
    }
}
