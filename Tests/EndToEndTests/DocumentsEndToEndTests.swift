import Foundation
import SwiftCouch
import Testing

/// A document body without metadata, for ``CouchDocument``.
private struct Memo: Codable, Sendable, Equatable {
    var text: String
}

/// A 32-character revision hash made of one repeated hex digit.
private func hash(_ digit: Character) -> String { String(repeating: digit, count: 32) }

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

/// Writes document `id` with a conflict made by replicated (`new_edits=false`) writes:
/// `1-a…` with children `2-b…` and `2-c…` (the winner), and the deleted leaf `2-d…`.
private func writeConflicts(_ client: CouchDBClient, _ db: String, id: String) async throws {
    let root = hash("a")
    func revision(_ digit: Character, _ text: String, deleted: Bool = false) -> CouchDocument<Memo> {
        CouchDocument(
            id: id, rev: "2-" + hash(digit), deleted: deleted,
            revisions: Revisions(start: 2, ids: [hash(digit), root]), body: Memo(text: text))
    }
    let first = CouchDocument(
        id: id, rev: "1-" + root, revisions: Revisions(start: 1, ids: [root]), body: Memo(text: "root"))
    let written = try await client.execute(
        BulkDocsOperation(
            database: db,
            documents: [first, revision("b", "loser"), revision("c", "winner"), revision("d", "gone", deleted: true)],
            newEdits: false))
    #expect(written.statusCode == 201)
    #expect(written.value.isEmpty)
    // On a cluster, wait until the copies have every branch: read from all of them (r = n, which
    // repairs the copies behind) until the conflicts are there, three reads in a row.
    var everyCopy = GetDocumentOperation<CouchDocument<Memo>>(
        database: db, id: id, options: DocumentReadOptions(meta: true))
    everyCopy.readQuorum = (try await client.value(GetDatabaseInfoOperation(name: db))).cluster?.n ?? 1
    _ = try await converged(
        read: { try? await client.value(everyCopy) },
        until: { $0?.conflicts == ["2-" + hash("b")] && $0?.deletedConflicts == ["2-" + hash("d")] })
}

@Suite("End to end: document operations")
struct DocumentsEndToEndTests {
    @Test("POST creates a document with a server-assigned id; HEAD tells existing, older and missing apart")
    func postAndHead() async throws {
        try await withDatabase("doc-post") { client, db in
            let created = try await client.execute(CreateDocumentOperation(database: db, document: Memo(text: "hi")))
            #expect(created.statusCode == 201)
            let id = created.value.id
            let rev1 = try #require(created.value.rev)
            #expect(id.count == 32)
            #expect(id.allSatisfy { $0.isHexDigit })
            #expect(rev1.hasPrefix("1-"))
            #expect(created.headers["Location"]?.hasSuffix("/\(db)/\(id)") == true)
            let read = try await client.value(GetDocumentOperation<CouchDocument<Memo>>(database: db, id: id))
            #expect(read.id == id)
            #expect(read.rev == rev1)
            #expect(read.text == "hi")

            // A body with its own _id keeps it.
            let named = try await client.value(
                CreateDocumentOperation(database: db, document: CouchDocument(id: "chosen", body: Memo(text: "x"))))
            #expect(named.id == "chosen")

            let head = try #require(try await client.value(HeadDocumentOperation(database: db, id: id)))
            #expect(head.revision == rev1)
            #expect(head.etag == rev1)
            let rev2 = try #require(
                try await client.value(
                    PutDocumentOperation(database: db, id: id, document: Memo(text: "again"), revision: rev1)
                ).rev)
            #expect(try await client.value(HeadDocumentOperation(database: db, id: id))?.revision == rev2)
            #expect(try await client.value(HeadDocumentOperation(database: db, id: id, revision: rev1)) != nil)
            #expect(try await client.value(HeadDocumentOperation(database: db, id: "nobody")) == nil)
            _ = try await client.value(DeleteDocumentOperation(database: db, id: id, revision: rev2))
            #expect(try await client.value(HeadDocumentOperation(database: db, id: id)) == nil)
        }
    }

    @Test("COPY to a new id, onto an existing id with its revision, and of an older source revision")
    func copy() async throws {
        try await withDatabase("doc-copy") { client, db in
            let rev1 = try #require(
                try await client.value(PutDocumentOperation(database: db, id: "src", document: Memo(text: "one"))).rev)
            let rev2 = try #require(
                try await client.value(
                    PutDocumentOperation(database: db, id: "src", document: Memo(text: "two"), revision: rev1)
                ).rev)

            let copied = try await client.execute(CopyDocumentOperation(database: db, id: "src", destination: "a/copy"))
            #expect(copied.statusCode == 201)
            #expect(copied.value.id == "a/copy")
            let copyRev = try #require(copied.value.rev)
            #expect(copyRev.hasPrefix("1-"))
            #expect(try await client.value(GetDocumentOperation<Memo>(database: db, id: "a/copy")).text == "two")

            await expectHTTPFailure("COPY onto an existing id without its revision", status: 409, error: "conflict") {
                _ = try await client.execute(CopyDocumentOperation(database: db, id: "src", destination: "a/copy"))
            }
            let over = try await client.value(
                CopyDocumentOperation(
                    database: db, id: "src", destination: "a/copy", destinationRevision: copyRev, sourceRevision: rev1))
            #expect(over.id == "a/copy")
            #expect(over.rev?.hasPrefix("2-") == true)
            #expect(try await client.value(GetDocumentOperation<Memo>(database: db, id: "a/copy")).text == "one")
            // The source is untouched.
            let source = try await client.value(GetDocumentOperation<CouchDocument<Memo>>(database: db, id: "src"))
            #expect(source.rev == rev2)
            #expect(source.text == "two")
        }
    }

    @Test("GET with rev, revs, revs_info, latest and local_seq")
    func readOptions() async throws {
        try await withDatabase("doc-read") { client, db in
            var revs: [String] = []
            for text in ["one", "two", "three"] {
                let written = try await client.value(
                    PutDocumentOperation(database: db, id: "d", document: Memo(text: text), revision: revs.last))
                revs.append(try #require(written.rev))
            }
            typealias Read = GetDocumentOperation<CouchDocument<Memo>>

            let old = try await client.value(Read(database: db, id: "d", revision: revs[0]))
            #expect(old.rev == revs[0])
            #expect(old.text == "one")

            let withRevs = try await client.value(Read(database: db, id: "d", revisions: true))
            let history = try #require(withRevs.revisions)
            #expect(history.start == 3)
            #expect(history.revisions == revs.reversed())
            #expect(withRevs.revisionsInfo == nil)

            let info = try await client.value(
                Read(database: db, id: "d", options: DocumentReadOptions(revisionsInfo: true)))
            #expect(info.revisionsInfo?.map(\.rev) == revs.reversed())
            #expect(info.revisionsInfo?.allSatisfy { $0.status == .available } == true)

            let latest = try await client.value(
                Read(database: db, id: "d", revision: revs[0], options: DocumentReadOptions(latest: true)))
            #expect(latest.rev == revs[2])
            #expect(latest.text == "three")

            let sequenced = try await client.value(
                Read(database: db, id: "d", options: DocumentReadOptions(localSequence: true)))
            #expect(sequenced.localSequence != nil)
            #expect(withRevs.localSequence == nil)

            await expectHTTPFailure("A revision that does not exist", status: 404, error: "not_found") {
                _ = try await client.execute(Read(database: db, id: "d", revision: "1-" + hash("f")))
            }
            await expectHTTPFailure("A document that does not exist", status: 404, error: "not_found") {
                _ = try await client.execute(Read(database: db, id: "nothing"))
            }
        }
    }

    @Test("Conflicts from new_edits=false writes: conflicts, deleted_conflicts, meta, open_revs list and all")
    func conflictsAndOpenRevisions() async throws {
        try await withDatabase("doc-conflicts") { client, db in
            try await writeConflicts(client, db, id: "c")
            typealias Read = GetDocumentOperation<CouchDocument<Memo>>

            let plain = try await client.value(Read(database: db, id: "c"))
            #expect(plain.rev == "2-" + hash("c"))
            #expect(plain.text == "winner")
            #expect(plain.conflicts == nil)

            let conflicted = try await client.value(Read(database: db, id: "c", conflicts: true))
            #expect(conflicted.conflicts == ["2-" + hash("b")])
            #expect(conflicted.deletedConflicts == nil)

            let deleted = try await client.value(
                Read(database: db, id: "c", options: DocumentReadOptions(deletedConflicts: true)))
            #expect(deleted.deletedConflicts == ["2-" + hash("d")])
            #expect(deleted.conflicts == nil)

            let meta = try await client.value(Read(database: db, id: "c", options: DocumentReadOptions(meta: true)))
            #expect(meta.conflicts == ["2-" + hash("b")])
            #expect(meta.deletedConflicts == ["2-" + hash("d")])
            #expect(meta.revisionsInfo?.map(\.rev) == ["2-" + hash("c"), "1-" + hash("a")])

            let listed = try await client.value(
                GetOpenRevisionsOperation<CouchDocument<Memo>>(
                    database: db, id: "c",
                    revisions: .revisions(["2-" + hash("b"), "2-" + hash("e"), "2-" + hash("c")]),
                    options: DocumentReadOptions(revisions: true)))
            // CouchDB answers the found revisions first and the missing ones after, in no promised order.
            #expect(listed.count == 3)
            let found = listed.compactMap(\.document).sorted { ($0.rev ?? "") < ($1.rev ?? "") }
            #expect(found.map(\.text) == ["loser", "winner"])
            #expect(found.first?.revisions?.revisions == ["2-" + hash("b"), "1-" + hash("a")])
            let missing = listed.compactMap { result -> String? in
                if case .missing(let rev) = result { return rev }
                return nil
            }
            #expect(missing == ["2-" + hash("e")])

            let all = try await client.value(GetOpenRevisionsOperation<CouchDocument<Memo>>(database: db, id: "c"))
            let leaves = all.compactMap(\.document).sorted { ($0.rev ?? "") < ($1.rev ?? "") }
            #expect(all.count == 3)
            #expect(leaves.map(\.rev) == ["2-" + hash("b"), "2-" + hash("c"), "2-" + hash("d")])
            #expect(leaves.map(\.deleted) == [false, false, true])

            // Resolving: delete the losing leaf; the conflict is gone.
            _ = try await client.value(DeleteDocumentOperation(database: db, id: "c", revision: "2-" + hash("b")))
            // On a cluster a copy may answer before it has seen the deletion: read until every read agrees.
            let resolved = try await converged(
                read: { try await client.value(Read(database: db, id: "c", conflicts: true)) },
                until: { $0.conflicts == nil })
            #expect(resolved.conflicts == nil)
            #expect(resolved.rev == "2-" + hash("c"))
        }
    }

    @Test("batch=ok writes answer 202 without a revision and are applied")
    func batchWrites() async throws {
        try await withDatabase("doc-batch") { client, db in
            let put = try await client.execute(
                PutDocumentOperation(database: db, id: "later", document: Memo(text: "soon"), batch: true))
            #expect(put.statusCode == 202)
            #expect(put.value.id == "later")
            #expect(put.value.rev == nil)
            let posted = try await client.execute(
                CreateDocumentOperation(database: db, document: Memo(text: "posted"), batch: true))
            #expect(posted.statusCode == 202)
            #expect(posted.value.rev == nil)

            // CouchDB may apply a batched write a moment later: look for a bounded number of times.
            var found: Memo?
            for _ in 0..<100 where found == nil {
                found = try? await client.value(GetDocumentOperation<Memo>(database: db, id: "later"))
                if found == nil { try await Task.sleep(nanoseconds: 20_000_000) }
            }
            #expect(found == Memo(text: "soon"))
            var postedFound: Memo?
            for _ in 0..<100 where postedFound == nil {
                postedFound = try? await client.value(GetDocumentOperation<Memo>(database: db, id: posted.value.id))
                if postedFound == nil { try await Task.sleep(nanoseconds: 20_000_000) }
            }
            #expect(postedFound == Memo(text: "posted"))
        }
    }

    @Test("If-Match carries the revision of updates and deletes; a stale one conflicts")
    func ifMatch() async throws {
        try await withDatabase("doc-ifmatch") { client, db in
            let rev1 = try #require(
                try await client.value(PutDocumentOperation(database: db, id: "m", document: Memo(text: "1"))).rev)
            let rev2 = try #require(
                try await client.value(
                    PutDocumentOperation(
                        database: db, id: "m", document: Memo(text: "2"), revision: rev1, revisionPlacement: .ifMatch)
                ).rev)
            #expect(rev2.hasPrefix("2-"))
            // On a cluster a copy that has not seen rev2 yet would take a write based on rev1.
            try await awaitEveryCopy(client, db, id: "m", rev: rev2)
            await expectHTTPFailure("A stale If-Match", status: 409, error: "conflict") {
                _ = try await client.execute(
                    PutDocumentOperation(
                        database: db, id: "m", document: Memo(text: "x"), revision: rev1, revisionPlacement: .ifMatch))
            }
            await expectHTTPFailure("DELETE with a stale If-Match", status: 409, error: "conflict") {
                _ = try await client.execute(
                    DeleteDocumentOperation(database: db, id: "m", revision: rev1, revisionPlacement: .ifMatch))
            }
            let deleted = try await client.value(
                DeleteDocumentOperation(database: db, id: "m", revision: rev2, revisionPlacement: .ifMatch))
            #expect(deleted.rev?.hasPrefix("3-") == true)
            await expectHTTPFailure("Reading a deleted document", status: 404, error: "not_found") {
                _ = try await client.execute(GetDocumentOperation<Memo>(database: db, id: "m"))
            }
        }
    }

    @Test("_local documents: put, overwrite without rev, get, _local_docs, not in _all_docs, delete")
    func localDocuments() async throws {
        try await withDatabase("doc-local") { client, db in
            let first = try await client.value(
                PutDocumentOperation(database: db, id: "_local/cfg", document: Memo(text: "v1")))
            #expect(first.id == "_local/cfg")
            #expect(first.rev == "0-1")
            // Without a revision a _local document is overwritten and keeps its revision; with one
            // it moves on.
            let second = try await client.value(
                PutDocumentOperation(database: db, id: "_local/cfg", document: Memo(text: "v1b")))
            #expect(second.rev == "0-1")
            let third = try await client.value(
                PutDocumentOperation(database: db, id: "_local/cfg", document: Memo(text: "v2"), revision: "0-1"))
            #expect(third.rev == "0-2")
            // HEAD finds it, but its ETag is opaque, not a revision.
            let head = try #require(try await client.value(HeadDocumentOperation(database: db, id: "_local/cfg")))
            #expect(head.revision == nil)
            #expect(head.etag.isEmpty == false)
            // A cluster's copies of a `_local` document are written by a quorum: read until the
            // copy that answers has the last write.
            let read = try await converged(
                read: {
                    try await client.value(GetDocumentOperation<CouchDocument<Memo>>(database: db, id: "_local/cfg"))
                }, until: { $0.rev == "0-2" })
            #expect(read.id == "_local/cfg")
            #expect(read.rev == "0-2")
            #expect(read.text == "v2")
            _ = try await client.value(PutDocumentOperation(database: db, id: "plain", document: Memo(text: "p")))
            try await settle(client, db)  // `_local_docs` and `_all_docs` read one copy of each shard
            let locals = try await converged(
                read: {
                    try await client.value(
                        AllDocsOperation<Memo>(
                            database: db, source: .localDocuments, options: KeyRangeOptions(includeDocs: true)))
                }, until: { $0.rows.first?.value?.rev == "0-2" })
            #expect(locals.rows.map(\.id) == ["_local/cfg"])
            #expect(locals.rows.first?.value?.rev == "0-2")
            #expect(locals.rows.first?.doc == Memo(text: "v2"))
            #expect(locals.totalRows == nil)
            let all = try await converged(
                read: { try await client.value(AllDocsOperation<JSONValue>(database: db)) },
                until: { $0.rows.map(\.id) == ["plain"] })
            #expect(all.rows.map(\.id) == ["plain"])

            _ = try await client.value(
                PutDocumentOperation(database: db, id: "_local/other", document: Memo(text: "o")))
            let deleted = try await client.value(
                DeleteDocumentOperation(database: db, id: "_local/cfg", revision: "0-2"))
            #expect(deleted.rev == "0-0")
            // On a cluster, a copy may answer before it has seen the delete: read until it has.
            // (A read after that may still reach such a copy: the refusal checked is one of those reads.)
            let gone = try await converged(
                read: { () async -> CouchError? in
                    do {
                        _ = try await client.execute(GetDocumentOperation<Memo>(database: db, id: "_local/cfg"))
                        return nil
                    } catch {
                        return error as? CouchError
                    }
                }, until: { $0?.statusCode == 404 })
            #expect(gone?.statusCode == 404, "a deleted _local document should be 404")
            #expect(gone?.reason == "missing")
            // Several _local_docs queries at once.
            // `_local_docs` is read from one copy of each shard: on a cluster it converges on the writes.
            let localQueries = try await converged(
                read: {
                    try await client.value(
                        AllDocsQueriesOperation<Memo>(
                            database: db, source: .localDocuments,
                            queries: [
                                KeyRangeOptions(keys: ["_local/other", "_local/none"]), KeyRangeOptions(limit: 1),
                            ]))
                },
                until: {
                    $0.results.map { $0.rows.map(\.key) } == [["_local/other", "_local/none"], ["_local/other"]]
                        && $0.results.first?.rows.last?.error == "not_found"
                })
            #expect(
                localQueries.results.map { $0.rows.map(\.key) } == [["_local/other", "_local/none"], ["_local/other"]])
            #expect(localQueries.results.first?.rows.last?.error == "not_found")
        }
    }

    @Test("Design documents: put, get, update keeping unknown members, _info, delete")
    func designDocuments() async throws {
        try await withDatabase("doc-design") { client, db in
            let design = DesignDocument(
                name: "app", language: "javascript",
                views: ["by_text": .init(map: "function(doc) { emit(doc.text, 1); }", reduce: .count)],
                filters: ["mine": "function(doc, req) { return true; }"],
                other: ["rewrites": [["from": "/a", "to": "/b"]]])
            let created = try await client.value(PutDocumentOperation(database: db, design: design))
            #expect(created.id == "_design/app")
            let rev1 = try #require(created.rev)

            var read = try await client.value(GetDocumentOperation<DesignDocument>(database: db, design: "app"))
            #expect(read.id == "_design/app")
            #expect(read.rev == rev1)
            #expect(read.views?["by_text"]?.reduce == .count)
            #expect(read.views?["by_text"]?.map == "function(doc) { emit(doc.text, 1); }")
            #expect(read.filters?["mine"] != nil)
            #expect(read.other["rewrites"] == [["from": "/a", "to": "/b"]])

            let info = try await client.value(GetDesignDocumentInfoOperation(database: db, design: "_design/app"))
            #expect(info.name == "app")
            #expect(info.viewIndex.language == "javascript")
            #expect(info.viewIndex.signature?.isEmpty == false)

            read.shows = ["card": "function(doc, req) { return doc.text; }"]
            let updated = try await client.value(PutDocumentOperation(database: db, design: read))
            let rev2 = try #require(updated.rev)
            #expect(rev2.hasPrefix("2-"))
            let reread = try await client.value(GetDocumentOperation<DesignDocument>(database: db, design: "app"))
            #expect(reread.shows?["card"] != nil)
            #expect(reread.other["rewrites"] == [["from": "/a", "to": "/b"]])

            let deleted = try await client.value(DeleteDocumentOperation(database: db, design: "app", revision: rev2))
            #expect(deleted.rev?.hasPrefix("3-") == true)
            await expectHTTPFailure("A deleted design document", status: 404, error: "not_found") {
                _ = try await client.execute(GetDocumentOperation<DesignDocument>(database: db, design: "app"))
            }
            // CouchDB 3.5.0 answers this with 404 `not_found`, or (while the index process still
            // holds the design document) 500 `badmatch`: either way an error, never an answer.
            do {
                _ = try await client.execute(GetDesignDocumentInfoOperation(database: db, design: "app"))
                Issue.record("_info of a deleted design document answered")
            } catch let failure as CouchError {
                #expect([404, 500].contains(failure.statusCode ?? 0), "\(failure)")
            }
        }
    }
}
