import Foundation
import SwiftCouch
import Testing

/// The changes scenario: `a` (updated), `b` (deleted), `c` (with a conflict), `_design/filters`, written in that
/// order of last change: `_design/filters`, `a`, `b`, `c`.
private struct ChangesFixture {
    var revA: String
    var revB: String
    var revC: String
    var conflictC: String

    static func write(_ client: CouchDBClient, _ db: String) async throws -> ChangesFixture {
        let a1 = try #require(
            try await client.value(
                PutDocumentOperation(database: db, id: "a", document: ["type": "x", "n": 1] as JSONValue)
            ).rev)
        let b1 = try #require(
            try await client.value(
                PutDocumentOperation(database: db, id: "b", document: ["type": "y", "n": 2] as JSONValue)
            ).rev)
        let c1 = try #require(
            try await client.value(
                PutDocumentOperation(database: db, id: "c", document: ["type": "x", "n": 3] as JSONValue)
            ).rev)
        _ = try await client.value(
            PutDocumentOperation(database: db, design: DesignDocument(name: "filters", views: [:])))
        let a2 = try #require(
            try await client.value(
                PutDocumentOperation(
                    database: db, id: "a", document: ["type": "x", "n": 10] as JSONValue, revision: a1)
            ).rev)
        let b2 = try #require(try await client.value(DeleteDocumentOperation(database: db, id: "b", revision: b1)).rev)
        let conflict = "1-" + String(repeating: "e", count: 32)
        let written = try await client.value(
            BulkDocsOperation(
                database: db, documents: [["_id": "c", "_rev": .string(conflict), "type": "x", "n": 33] as JSONValue],
                newEdits: false))
        #expect(written.allSatisfy { $0.error == nil })
        let fixture = ChangesFixture(revA: a2, revB: b2, revC: c1, conflictC: conflict)
        // On a cluster `_changes` may come from a copy that has not seen these writes yet: wait
        // until it has (CouchDB promises convergence, not read-your-writes).
        _ = try await converged(
            read: {
                try await client.value(ChangesOperation<JSONValue>(database: db, style: .allDocs))
            },
            until: { feed in
                let revs = Set(feed.results.flatMap { $0.changes.map(\.rev) })
                return feed.results.count == 4 && revs.isSuperset(of: [a2, b2, c1, conflict])
            })
        return fixture
    }
}

/// Like `withDatabase`, with one shard (`q=1`): CouchDB orders a feed only within a shard, and these tests check
/// the order.
private func withSingleShardDatabase(
    _ purpose: String, _ body: (CouchDBClient, String) async throws -> Void
) async throws {
    let client = E2EEnvironment.shared.client()
    let name = E2EEnvironment.uniqueDatabaseName(purpose)
    _ = try await client.execute(CreateDatabaseOperation(name: name, shards: 1))
    do {
        try await body(client, name)
    } catch {
        _ = try? await client.execute(DeleteDatabaseOperation(name: name))
        throw error
    }
    _ = try await client.execute(DeleteDatabaseOperation(name: name))
}

@Suite("End to end: changes feed")
struct ChangesEndToEndTests {
    @Test("Normal feed: every document once, in order of last change; deleted flagged; since and limit page")
    func normalSinceLimit() async throws {
        try await withSingleShardDatabase("changes") { client, db in
            let fixture = try await ChangesFixture.write(client, db)
            let all = try await client.value(ChangesOperation<JSONValue>(database: db))
            #expect(all.results.map(\.id) == ["_design/filters", "a", "b", "c"])
            #expect(all.results.map(\.deleted) == [false, false, true, false])
            #expect(all.results[1].changes == [ChangeRevision(rev: fixture.revA)])
            #expect(all.results[2].changes == [ChangeRevision(rev: fixture.revB)])
            #expect(all.lastSeq == all.results.last?.seq)
            #expect(all.results.allSatisfy { $0.doc == nil })

            let first = try await client.value(ChangesOperation<JSONValue>(database: db, since: .beginning, limit: 2))
            #expect(first.results.map(\.id) == ["_design/filters", "a"])
            #expect(first.lastSeq == first.results.last?.seq)
            let rest = try await client.value(ChangesOperation<JSONValue>(database: db, since: first.lastSeq))
            #expect(rest.results.map(\.id) == ["b", "c"])
            // Sequences are opaque: on a cluster the same position can be written differently
            // (each copy names itself), so resuming is checked, not the strings.
            let none = try await client.value(ChangesOperation<JSONValue>(database: db, since: all.lastSeq))
            #expect(none.results.isEmpty)

            let newest = try await client.value(ChangesOperation<JSONValue>(database: db, limit: 2, descending: true))
            #expect(newest.results.map(\.id) == ["c", "b"])

            do {
                _ = try await client.execute(ChangesOperation<JSONValue>(database: db, since: "bogus"))
                Issue.record("a malformed since should be refused")
            } catch let error as CouchError {
                #expect(error.statusCode == 400)
                #expect(error.reason == "Malformed sequence supplied in 'since' parameter.")
            }
        }
    }

    @Test("include_docs gives the winning documents (a deletion stub for b); style=all_docs lists conflicts")
    func includeDocsAndStyle() async throws {
        try await withSingleShardDatabase("changes-docs") { client, db in
            let fixture = try await ChangesFixture.write(client, db)
            let withDocs = try await client.value(ChangesOperation<JSONValue>(database: db, includeDocs: true))
            let byID = Dictionary(uniqueKeysWithValues: withDocs.results.map { ($0.id, $0) })
            #expect(byID["a"]?.doc?["n"] == 10)
            #expect(byID["a"]?.doc?["_rev"] == .string(fixture.revA))
            #expect(byID["b"]?.doc?["_deleted"] == true)
            #expect(byID["_design/filters"]?.doc?["_id"] == "_design/filters")
            let winner = max(fixture.revC, fixture.conflictC)
            #expect(byID["c"]?.doc?["_rev"] == .string(winner))

            let mainOnly = try await client.value(ChangesOperation<JSONValue>(database: db, style: .mainOnly))
            #expect(mainOnly.results.first { $0.id == "c" }?.changes == [ChangeRevision(rev: winner)])
            let allDocs = try await client.value(ChangesOperation<JSONValue>(database: db, style: .allDocs))
            let c = try #require(allDocs.results.first { $0.id == "c" })
            #expect(Set(c.changes.map(\.rev)) == [fixture.revC, fixture.conflictC])
            #expect(allDocs.results.first { $0.id == "a" }?.changes.count == 1)
        }
    }

    @Test("Filters: _doc_ids, _selector (with include_docs), _design")
    func filters() async throws {
        try await withSingleShardDatabase("changes-filters") { client, db in
            _ = try await ChangesFixture.write(client, db)
            let byIDs = try await client.value(
                ChangesOperation<JSONValue>(database: db, filter: .documentIDs(["c", "b", "nope"])))
            #expect(byIDs.results.map(\.id) == ["b", "c"])

            let selected = try await client.value(
                ChangesOperation<JSONValue>(
                    database: db, includeDocs: true, filter: .selector(Selector.field("type").equals("x"))))
            #expect(selected.results.map(\.id) == ["a", "c"])
            #expect(selected.results.allSatisfy { $0.doc?["type"] == "x" })

            let designs = try await client.value(ChangesOperation<JSONValue>(database: db, filter: .design))
            #expect(designs.results.map(\.id) == ["_design/filters"])
        }
    }

    @Test("Longpoll: returns empty at a short timeout; returns a write made while it waits")
    func longpoll() async throws {
        try await withSingleShardDatabase("changes-longpoll") { client, db in
            let first = try await client.value(
                PutDocumentOperation(database: db, id: "first", document: Note(text: "1", n: 1)))
            // `since=now` is the sequence of the copy that answers: on a cluster, one that has the write.
            try await awaitEveryCopy(client, db, id: "first", rev: try #require(first.rev))
            let quiet = try await client.value(
                ChangesOperation<JSONValue>(database: db, feed: .longpoll, since: .now, timeout: 200))
            #expect(quiet.results.isEmpty)
            #expect(quiet.lastSeq.json != .null)

            let waiting = Task {
                try await client.value(
                    ChangesOperation<Note>(
                        database: db, feed: .longpoll, since: quiet.lastSeq, includeDocs: true, timeout: 20_000))
            }
            _ = try await client.value(PutDocumentOperation(database: db, id: "late", document: Note(text: "2", n: 2)))
            let answer = try await waiting.value
            #expect(answer.results.map(\.id) == ["late"])
            #expect(answer.results.first?.doc?.n == 2)
            #expect(answer.lastSeq != quiet.lastSeq)
        }
    }
}
