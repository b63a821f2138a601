import Foundation
import SwiftCouch
import Testing

/// A document body without metadata, for ``CouchDocument``.
private struct Item: Codable, Sendable, Equatable {
    var n: Int
}

/// Runs `body`, which must fail with an HTTP ``CouchError`` of `status` (and `error`, when given).
private func expectHTTPFailure(
    _ what: String, status: Int, error: String? = nil, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> Void
) async {
    do {
        try await body()
        Issue.record("\(what) should fail with \(status)", sourceLocation: sourceLocation)
    } catch let failure as CouchError {
        #expect(failure.statusCode == status, "\(what): \(failure)", sourceLocation: sourceLocation)
        if let error { #expect(failure.error == error, "\(what): \(failure)", sourceLocation: sourceLocation) }
    } catch {
        Issue.record("\(what) threw \(error)", sourceLocation: sourceLocation)
    }
}

/// Writes documents `a` … `e` (`n` = 1 … 5) and deletes `d`; returns the revisions by id.
private func writeLetters(_ client: CouchDBClient, _ db: String) async throws -> [String: String] {
    let letters = ["a", "b", "c", "d", "e"]
    let docs = letters.enumerated().map { CouchDocument(id: $0.element, body: Item(n: $0.offset + 1)) }
    let rows = try await client.value(BulkDocsOperation(database: db, documents: docs))
    var revs: [String: String] = [:]
    for row in rows {
        let id = try #require(row.id)
        let rev: String = try #require(row.rev)
        revs[id] = rev
    }
    #expect(revs.count == 5)
    let deleted = try await client.value(DeleteDocumentOperation(database: db, id: "d", revision: revs["d"] ?? ""))
    let deletedRev: String = try #require(deleted.rev)
    revs["d"] = deletedRev
    return revs
}

@Suite("End to end: _bulk_docs, _bulk_get, _all_docs and _design_docs")
struct BulkEndToEndTests {
    @Test("_bulk_docs: creates with given and generated ids, updates, a per-row conflict, deletes")
    func bulkDocs() async throws {
        try await withDatabase("bulk-docs") { client, db in
            let created = try await client.execute(
                BulkDocsOperation(
                    database: db,
                    documents: [
                        CouchDocument(id: "a", body: Item(n: 1)), CouchDocument(id: "b", body: Item(n: 2)),
                        CouchDocument(body: Item(n: 3)),
                    ]))
            #expect(created.statusCode == 201)
            #expect(created.value.count == 3)
            #expect(created.value.map(\.id).prefix(2) == ["a", "b"])
            #expect(created.value.allSatisfy { $0.rev?.hasPrefix("1-") == true })
            let generated = try #require(created.value[2].id)
            #expect(generated.count == 32)
            let revA = try #require(created.value[0].rev)
            let revB = try #require(created.value[1].rev)
            // A cluster copy that has not seen "b" yet would take a write of it without a revision.
            try await awaitEveryCopy(client, db, id: "b", rev: revB)
            try await awaitEveryCopy(client, db, id: "a", rev: revA)

            let mixed = try await client.value(
                BulkDocsOperation(
                    database: db,
                    documents: [
                        CouchDocument(id: "a", rev: revA, body: Item(n: 10)),
                        CouchDocument(id: "b", body: Item(n: 20)),  // no rev: conflict
                        CouchDocument(id: "c", body: Item(n: 30)),
                    ]))
            #expect(mixed.count == 3)
            #expect(mixed[0].id == "a")
            #expect(mixed[0].rev?.hasPrefix("2-") == true)
            let conflict = try #require(mixed[1].error)
            #expect(conflict.id == "b")
            #expect(conflict.error == "conflict")
            #expect(conflict.reason == "Document update conflict.")
            #expect(mixed[2] == .success(id: "c", rev: try #require(mixed[2].rev)))
            #expect(try await client.value(GetDocumentOperation<Item>(database: db, id: "a")) == Item(n: 10))
            #expect(try await client.value(GetDocumentOperation<Item>(database: db, id: "b")) == Item(n: 2))

            let deleted = try await client.value(
                BulkDocsOperation(
                    database: db, documents: [CouchDocument(id: "b", rev: revB, deleted: true, body: [String: Int]())]
                ))
            #expect(deleted.first?.rev?.hasPrefix("2-") == true)
            await expectHTTPFailure("Reading a document deleted in bulk", status: 404, error: "not_found") {
                _ = try await client.execute(GetDocumentOperation<Item>(database: db, id: "b"))
            }
        }
    }

    @Test("_bulk_docs with new_edits=false stores the given history; all_or_nothing is refused with 417")
    func replicatedWritesAndAllOrNothing() async throws {
        try await withDatabase("bulk-newedits") { client, db in
            let ids = ["c", "b", "a"].map { String(repeating: $0, count: 32) }
            let replicated = try await client.execute(
                BulkDocsOperation(
                    database: db,
                    documents: [
                        CouchDocument(
                            id: "r", rev: "3-" + ids[0], revisions: Revisions(start: 3, ids: ids), body: Item(n: 3))
                    ], newEdits: false))
            #expect(replicated.statusCode == 201)
            #expect(replicated.value.isEmpty)
            let read = try await client.value(
                GetDocumentOperation<CouchDocument<Item>>(database: db, id: "r", revisions: true))
            #expect(read.rev == "3-" + ids[0])
            #expect(read.revisions == Revisions(start: 3, ids: ids))
            #expect(read.n == 3)

            do {
                _ = try await client.execute(
                    BulkDocsOperation(
                        database: db,
                        documents: [
                            CouchDocument(id: "x", body: Item(n: 1)), CouchDocument(id: "r", body: Item(n: 2)),
                        ],
                        allOrNothing: true))
                Issue.record("all_or_nothing should be refused")
            } catch let error as CouchError {
                #expect(error.statusCode == 417)
                #expect(error.error == "not_implemented")
                #expect(error.reason == "all_or_nothing is not supported")
            }
            await expectHTTPFailure("A document of a refused all_or_nothing write", status: 404) {
                _ = try await client.execute(GetDocumentOperation<Item>(database: db, id: "x"))
            }
        }
    }

    @Test("_bulk_get: winning and given revisions, a missing document, an unknown revision, revs")
    func bulkGet() async throws {
        try await withDatabase("bulk-get") { client, db in
            let rev1 = try #require(
                try await client.value(PutDocumentOperation(database: db, id: "a", document: Item(n: 1))).rev)
            let rev2 = try #require(
                try await client.value(
                    PutDocumentOperation(database: db, id: "a", document: Item(n: 2), revision: rev1)
                ).rev)
            let response = try await client.value(
                BulkGetOperation<CouchDocument<Item>>(
                    database: db,
                    items: [
                        BulkGetItem(id: "a"), BulkGetItem(id: "missing"), BulkGetItem(id: "a", rev: rev1),
                        BulkGetItem(id: "a", rev: "1-" + String(repeating: "0", count: 32)),
                    ], options: DocumentReadOptions(revisions: true)))
            #expect(response.results.map(\.id) == ["a", "missing", "a", "a"])
            let winner = try #require(response.results[0].docs.first?.document)
            #expect(winner.rev == rev2)
            #expect(winner.n == 2)
            #expect(winner.revisions?.revisions == [rev2, rev1])
            guard case .failed(let missing) = response.results[1].docs.first else {
                Issue.record("a missing document should be an error entry: \(response.results[1].docs)")
                return
            }
            #expect(missing.id == "missing")
            #expect(missing.rev == nil)
            #expect(missing.error == "not_found")
            #expect(missing.reason == "missing")
            #expect(response.results[2].docs.first?.document?.n == 1)
            #expect(response.results[3].docs.first?.document == nil)
            #expect(response.documents.map(\.n) == [2, 1])
        }
    }

    @Test("_all_docs GET: ranges, inclusive_end, descending, limit and skip, key, include_docs, update_seq")
    func allDocsGet() async throws {
        try await withDatabase("bulk-alldocs") { client, db in
            let revs = try await writeLetters(client, db)
            try await settle(client, db)  // `_all_docs` reads one copy of each shard
            typealias List = AllDocsOperation<Item>

            let all = try await client.value(List(database: db))
            #expect(all.rows.map(\.id) == ["a", "b", "c", "e"])
            #expect(all.totalRows == 4)
            #expect(all.offset == 0)
            #expect(all.rows.map(\.value?.rev) == ["a", "b", "c", "e"].map { revs[$0] })
            #expect(all.rows.allSatisfy { $0.doc == nil })

            let range = try await client.value(
                List(database: db, options: KeyRangeOptions(startKey: "b", endKey: "e", inclusiveEnd: false)))
            #expect(range.rows.map(\.key) == ["b", "c"])
            #expect(range.offset == 1)
            let descending = try await client.value(
                List(database: db, options: KeyRangeOptions(startKey: "c", descending: true)))
            #expect(descending.rows.map(\.key) == ["c", "b", "a"])
            let page = try await client.value(List(database: db, options: KeyRangeOptions(limit: 2, skip: 1)))
            #expect(page.rows.map(\.key) == ["b", "c"])
            #expect(page.offset == 1)
            let one = try await client.value(List(database: db, options: KeyRangeOptions(key: "e", includeDocs: true)))
            #expect(one.rows.count == 1)
            #expect(one.rows.first?.doc == Item(n: 5))
            let withDocs = try await client.value(List(database: db, options: KeyRangeOptions(includeDocs: true)))
            #expect(withDocs.rows.compactMap(\.doc) == [Item(n: 1), Item(n: 2), Item(n: 3), Item(n: 5)])
            let sequenced = try await client.value(
                List(database: db, options: KeyRangeOptions(limit: 0, updateSeq: true)))
            #expect(sequenced.rows.isEmpty)
            #expect(sequenced.updateSeq != nil)
            #expect(all.updateSeq == nil)
        }
    }

    @Test("_all_docs POST keys: order kept, deleted and missing keys reported; /queries; _design_docs")
    func allDocsKeysQueriesAndDesignDocs() async throws {
        try await withDatabase("bulk-keys") { client, db in
            let revs = try await writeLetters(client, db)
            for name in ["one", "two"] {
                _ = try await client.value(
                    PutDocumentOperation(database: db, design: DesignDocument(name: name, language: "javascript")))
            }
            try await settle(client, db)  // `_all_docs` reads one copy of each shard
            let keyed = try await client.value(
                AllDocsOperation<Item>(
                    database: db, options: KeyRangeOptions(keys: ["e", "d", "zz", "a"], includeDocs: true)))
            #expect(keyed.rows.map(\.key) == ["e", "d", "zz", "a"])
            #expect(keyed.offset == nil)
            #expect(keyed.rows.map(\.exists) == [true, false, false, true])
            #expect(keyed.rows[0].doc == Item(n: 5))
            #expect(keyed.rows[1].id == "d")
            #expect(keyed.rows[1].value == AllDocsRow<Item>.Value(rev: revs["d"] ?? "", deleted: true))
            #expect(keyed.rows[1].doc == nil)
            #expect(keyed.rows[2].id == nil)
            #expect(keyed.rows[2].error == "not_found")
            #expect(keyed.rows[2].value == nil)

            let queries = try await client.value(
                AllDocsQueriesOperation<Item>(
                    database: db,
                    queries: [
                        KeyRangeOptions(keys: ["c", "a"]), KeyRangeOptions(startKey: "b", limit: 2),
                        KeyRangeOptions(key: "e", includeDocs: true),
                    ]))
            #expect(queries.results.count == 3)
            #expect(queries.results[0].rows.map(\.key) == ["c", "a"])
            #expect(queries.results[1].rows.map(\.key) == ["b", "c"])
            #expect(queries.results[2].rows.first?.doc == Item(n: 5))

            // Design documents are in _all_docs (before the letters) and alone in _design_docs.
            let everything = try await converged(
                read: { try await client.value(AllDocsOperation<JSONValue>(database: db)) },
                until: { $0.rows.map(\.key) == ["_design/one", "_design/two", "a", "b", "c", "e"] })
            #expect(everything.rows.map(\.key) == ["_design/one", "_design/two", "a", "b", "c", "e"])
            let designs = try await client.value(
                AllDocsOperation<DesignDocument>(
                    database: db, source: .designDocuments, options: KeyRangeOptions(includeDocs: true)))
            #expect(designs.rows.map(\.key) == ["_design/one", "_design/two"])
            #expect(designs.rows.compactMap(\.doc?.name) == ["one", "two"])
            let lastDesign = try await client.value(
                AllDocsOperation<JSONValue>(
                    database: db, source: .designDocuments, options: KeyRangeOptions(descending: true, limit: 1)))
            #expect(lastDesign.rows.map(\.key) == ["_design/two"])
            let designQueries = try await client.value(
                AllDocsQueriesOperation<JSONValue>(
                    database: db, source: .designDocuments,
                    queries: [KeyRangeOptions(keys: ["_design/two"]), KeyRangeOptions(limit: 1)]))
            #expect(designQueries.results.map { $0.rows.map(\.key) } == [["_design/two"], ["_design/one"]])
        }
    }

    @Test("A partition's _all_docs lists only that partition")
    func partitionedAllDocs() async throws {
        try await withDatabase("bulk-partitioned", partitioned: true) { client, db in
            let rows = try await client.value(
                BulkDocsOperation(
                    database: db,
                    documents: ["sensor-1:r1", "sensor-1:r2", "sensor-2:r1"].enumerated().map {
                        CouchDocument(id: $0.element, body: Item(n: $0.offset))
                    }))
            #expect(rows.allSatisfy { $0.error == nil })
            await expectHTTPFailure("A document id without a partition", status: 400, error: "illegal_docid") {
                _ = try await client.execute(PutDocumentOperation(database: db, id: "plain", document: Item(n: 9)))
            }
            try await settle(client, db)  // `_all_docs` reads one copy of each shard
            let partition = try await converged(
                read: {
                    try await client.value(
                        AllDocsOperation<Item>(
                            database: db, source: .partition("sensor-1"), options: KeyRangeOptions(includeDocs: true)))
                }, until: { $0.rows.count == 2 })
            #expect(partition.rows.map(\.id) == ["sensor-1:r1", "sensor-1:r2"])
            #expect(partition.rows.compactMap(\.doc) == [Item(n: 0), Item(n: 1)])
            let all = try await client.value(AllDocsOperation<Item>(database: db))
            #expect(all.rows.count == 3)
            // CouchDB swaps the partition's bounds for a descending query.
            let descending = try await client.value(
                AllDocsOperation<Item>(
                    database: db, source: .partition("sensor-1"), options: KeyRangeOptions(descending: true, limit: 5)
                ))
            #expect(descending.rows.map(\.id) == ["sensor-1:r2", "sensor-1:r1"])
        }
    }
}
