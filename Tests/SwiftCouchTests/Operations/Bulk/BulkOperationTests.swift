import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

@Suite("_bulk_docs, _bulk_get and _all_docs against recorded CouchDB 3.5 responses", .ownThreads)
struct BulkOperationTests {
    @Test("_bulk_docs: one result per document, successes and conflict rows surfaced individually")
    func bulkDocs() throws {
        let create = try #require(Transcripts.step("bulk", "create"))
        let docs: [JSONValue] = [["_id": "a", "v": 1], ["_id": "b", "v": 1], ["v": "no id"]]
        let op = BulkDocsOperation(database: "tx_bulk", documents: docs)
        #expect(op.isIdempotent == false)
        let run = Simulation.run(op, response: create.simulated)
        #expect(requestLine(run.request) == "POST /tx_bulk/_bulk_docs")
        #expect(run.request?.bodyJSON == recordedRequestJSON(create))
        let rows = try run.result.get().value
        #expect(rows.map(\.id) == ["a", "b", "8e7d4e87dcbfcdc2ba3adf93740d373a"])
        #expect(rows[0] == .success(id: "a", rev: "1-7a7e4b29f3af401e69b6f86e4c26b727"))

        let mixed = try #require(Transcripts.step("bulk", "mixed"))
        let typed = [
            CouchDocument(id: "a", rev: "1-7a7e4b29f3af401e69b6f86e4c26b727", body: ["v": 2] as JSONValue),
            CouchDocument(id: "b", body: ["v": "no rev"]), CouchDocument(id: "c", body: ["v": 1]),
        ]
        let mixedRun = Simulation.run(
            BulkDocsOperation(database: "tx_bulk", documents: typed), response: mixed.simulated)
        #expect(mixedRun.request?.bodyJSON == recordedRequestJSON(mixed))
        let results = try mixedRun.result.get().value
        #expect(
            results.map(\.rev) == ["2-d0df861eb528e79690cd2ff3c4d394f3", nil, "1-7a7e4b29f3af401e69b6f86e4c26b727"])
        #expect(
            results[1]
                == .failure(DocumentError(id: "b", rev: nil, error: "conflict", reason: "Document update conflict.")))
        #expect(results[1].error?.error == "conflict")
    }

    @Test("_bulk_docs: deletes with _deleted, new_edits=false (empty answer), and whole-request errors")
    func bulkDocsVariants() throws {
        let deleteStep = try #require(Transcripts.step("bulk", "s05"))
        let deletion = Simulation.run(
            BulkDocsOperation(
                database: "tx_bulk",
                documents: [
                    CouchDocument(
                        id: "c", rev: "1-7a7e4b29f3af401e69b6f86e4c26b727", deleted: true, body: JSONValue.object([:]))
                ]),
            response: deleteStep.simulated)
        #expect(deletion.request?.bodyJSON == recordedRequestJSON(deleteStep))
        #expect(deletion.value?.first?.rev == "2-d9b15b235a7d0afdfe6058d5fb8afbd1")

        let replicated = try #require(Transcripts.step("bulk", "s06"))
        let history = Revisions(
            start: 3,
            ids: [
                "cccccccccccccccccccccccccccccccc", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            ])
        let op = BulkDocsOperation(
            database: "tx_bulk",
            documents: [
                CouchDocument(
                    id: "r", rev: "3-cccccccccccccccccccccccccccccccc", revisions: history,
                    body: ["v": "replicated"] as JSONValue)
            ], newEdits: false)
        #expect(op.isIdempotent == true)
        let run = Simulation.run(op, response: replicated.simulated)
        #expect(run.request?.bodyJSON == recordedRequestJSON(replicated))
        #expect(run.value == [])

        let illegal = try #require(Transcripts.step("bulk", "s04"))
        let bad = Simulation.run(
            BulkDocsOperation(
                database: "tx_bulk", documents: [["_id": "d", "v": 1], ["_id": "_illegal", "v": 1]] as [JSONValue]),
            response: illegal.simulated)
        #expect(bad.error?.statusCode == 400)
        #expect(bad.error?.error == "illegal_docid")

        let needsRev = try #require(Transcripts.step("bulk", "s07"))
        let noRev = Simulation.run(
            BulkDocsOperation(database: "tx_bulk", documents: [["_id": "x"]] as [JSONValue], newEdits: false),
            response: needsRev.simulated)
        #expect(noRev.request?.bodyJSON == recordedRequestJSON(needsRev))
        #expect(noRev.error?.reason == "When `new_edits: false`, the document needs `_rev` or `_revisions` specified")
    }

    @Test("all_or_nothing is sent; CouchDB 3's 417 row list becomes one CouchError")
    func allOrNothing() throws {
        let step = try #require(Transcripts.step("bulk", "s08"))
        let run = Simulation.run(
            BulkDocsOperation(
                database: "tx_bulk", documents: [["_id": "aon1"], ["_id": "a", "v": "conflict"]] as [JSONValue],
                allOrNothing: true),
            response: step.simulated)
        #expect(run.request?.bodyJSON == recordedRequestJSON(step))
        #expect(run.error?.kind == .http)
        #expect(run.error?.statusCode == 417)
        #expect(run.error?.error == "not_implemented")
        #expect(run.error?.reason == "all_or_nothing is not supported")
    }

    @Test("_bulk_docs refuses an empty list and a scalar document before sending")
    func bulkDocsValidation() {
        let empty = Simulation.run(BulkDocsOperation(database: "db", documents: [JSONValue]()), responses: [])
        #expect(empty.error?.kind == .validation)
        let scalar = Simulation.run(
            BulkDocsOperation(database: "db", documents: [["a": 1], 2] as [JSONValue]), responses: [])
        #expect(scalar.error?.kind == .serialisation)
        #expect(scalar.error?.message.contains("Document 1") == true)
        #expect(scalar.requests.isEmpty)
    }

    @Test("_bulk_get: found, missing (rev \"undefined\" read as nil), unknown and malformed revisions")
    func bulkGet() throws {
        let step = try #require(Transcripts.step("bulk", "s10"))
        let items = [
            BulkGetItem(id: "a"), BulkGetItem(id: "missing"),
            BulkGetItem(id: "a", rev: "1-0123456789abcdef0123456789abcdef"),
            BulkGetItem(id: "r", rev: "3-cccccccccccccccccccccccccccccccc"),
        ]
        let op = BulkGetOperation<CouchDocument<JSONValue>>(database: "tx_bulk", items: items)
        #expect(op.isIdempotent == true)
        let run = Simulation.run(op, response: step.simulated)
        #expect(requestLine(run.request) == "POST /tx_bulk/_bulk_get")
        #expect(run.request?.bodyJSON?["docs"]?.arrayValue?.count == 4)
        #expect(run.request?.bodyJSON?["docs"]?[2] == ["id": "a", "rev": "1-0123456789abcdef0123456789abcdef"])
        let response = try run.result.get().value
        #expect(response.results.count == 5)
        #expect(response.results[0].docs.first?.document?.rev == "2-d0df861eb528e79690cd2ff3c4d394f3")
        guard case .failed(let missing)? = response.results[1].docs.first else {
            Issue.record("expected a failure for 'missing'")
            return
        }
        #expect(missing == DocumentError(id: "missing", rev: nil, error: "not_found", reason: "missing"))
        #expect(
            response.results[2].docs == [
                .failed(
                    DocumentError(
                        id: "a", rev: "1-0123456789abcdef0123456789abcdef", error: "not_found", reason: "missing"))
            ])
        if case .failed(let malformed)? = response.results[3].docs.first {
            #expect(malformed.error == "bad_request")
            #expect(malformed.rev == "bogus")
        } else {
            Issue.record("expected bad_request for a malformed rev")
        }
        #expect(response.documents.map { $0.id } == ["a", "r"])

        let noID = try #require(Transcripts.step("bulk", "s11"))
        let anonymous = Simulation.run(
            GenericJSONOperation<BulkGetResponse<JSONValue>>(
                GenericOperation(method: .post, path: CouchPath("tx_bulk", "_bulk_get"), body: noID.requestBody)),
            response: noID.simulated)
        #expect(anonymous.value?.results.first?.id == nil)
        if case .failed(let error)? = anonymous.value?.results.first?.docs.first {
            #expect(error.reason == "document id missed")
        } else {
            Issue.record("expected an error entry")
        }

        let options = Simulation.run(
            BulkGetOperation<JSONValue>(
                database: "db", items: [BulkGetItem(id: "a", attachmentsSince: ["1-x"])],
                options: DocumentReadOptions(revisions: true, attachments: true, latest: true)),
            response: .json(200, #"{"results":[]}"#))
        #expect(options.request?.query == "revs=true&attachments=true&latest=true")
        #expect(options.request?.bodyJSON == ["docs": [["id": "a", "atts_since": ["1-x"]]]])
        let bad = Simulation.run(BulkGetOperation<JSONValue>(database: "db", items: []), responses: [])
        #expect(bad.error?.kind == .validation)
    }

    @Test("_all_docs: rows with id, key and value.rev; design documents included")
    func allDocs() throws {
        let step = try #require(Transcripts.step("all_docs", "s05"))
        let run = Simulation.run(AllDocsOperation<JSONValue>(database: "tx_alldocs"), response: step.simulated)
        #expect(requestLine(run.request) == requestLine(step))
        let value = try run.result.get().value
        #expect(value.totalRows == 5)
        #expect(value.offset == 0)
        #expect(value.rows.map(\.id) == ["_design/d", "a", "b", "c", "d"])
        #expect(value.rows[1].value == AllDocsRow.Value(rev: "1-6a1adde9be9cd8e7d5ef76edc6836391"))
        #expect(value.rows.allSatisfy { $0.exists })
    }

    @Test("_all_docs keys: POST, deleted rows, error rows for unknown keys, offset null, doc null")
    func allDocsKeys() throws {
        let step = try #require(Transcripts.step("all_docs", "s06"))
        let op = AllDocsOperation<JSONValue>(
            database: "tx_alldocs", options: KeyRangeOptions(keys: ["b", "e", "zz", "a"]))
        #expect(op.isIdempotent == true)
        let run = Simulation.run(op, response: step.simulated)
        #expect(requestLine(run.request) == "POST /tx_alldocs/_all_docs")
        #expect(run.request?.bodyJSON == recordedRequestJSON(step))
        let value = try run.result.get().value
        #expect(value.offset == nil)
        #expect(value.rows[1].value?.deleted == true)
        #expect(value.rows[1].exists == false)
        #expect(value.rows[2] == AllDocsRow(id: nil, key: "zz", value: nil, error: "not_found"))

        let docsStep = try #require(Transcripts.step("all_docs", "s07"))
        let withDocs = Simulation.run(
            AllDocsOperation<CouchDocument<JSONValue>>(
                database: "tx_alldocs", options: KeyRangeOptions(keys: ["b", "e", "zz"], includeDocs: true)),
            response: docsStep.simulated)
        #expect(requestLine(withDocs.request) == requestLine(docsStep))
        #expect(withDocs.request?.bodyJSON == recordedRequestJSON(docsStep))
        let rows = try withDocs.result.get().value.rows
        #expect(rows[0].doc?.body["n"] == 1)
        #expect(rows[1].doc == nil)
        #expect(rows[2].error == "not_found")
    }

    @Test("_all_docs ranges, descending, limit/skip, conflicts, update_seq: recorded queries and answers")
    func allDocsRanges() throws {
        let ranges: [(String, KeyRangeOptions, String)] = [
            ("s08", KeyRangeOptions(startKey: "b", endKey: "d"), "start_key=%22b%22&end_key=%22d%22"),
            ("s09", KeyRangeOptions(descending: true), "descending=true"),
            ("s10", KeyRangeOptions(limit: 2, skip: 1), "skip=1&limit=2"),
            (
                "s11", KeyRangeOptions(key: "c", includeDocs: true, conflicts: true),
                "key=%22c%22&include_docs=true&conflicts=true"
            ),
            ("s12", KeyRangeOptions(limit: 0, updateSeq: true), "limit=0&update_seq=true"),
        ]
        for (name, options, query) in ranges {
            let step = try #require(Transcripts.step("all_docs", name))
            let run = Simulation.run(
                AllDocsOperation<CouchDocument<JSONValue>>(database: "tx_alldocs", options: options),
                response: step.simulated)
            #expect(run.request?.method == "GET")
            #expect(run.request?.query == query)
            #expect(sortedQuery(run.request) == sortedQuery(step.path), "\(name)")
            let value = try run.result.get().value
            #expect(value.rows.count == step.responseJSON?["rows"]?.arrayValue?.count)
            #expect(value.offset.map(Int64.init) == step.responseJSON?["offset"]?.intValue)
        }
        let conflicted = try #require(Transcripts.step("all_docs", "s11"))
        let run = Simulation.run(
            AllDocsOperation<CouchDocument<JSONValue>>(
                database: "tx_alldocs", options: KeyRangeOptions(key: "c", includeDocs: true, conflicts: true)),
            response: conflicted.simulated)
        #expect(run.value?.rows.first?.doc?.conflicts == ["1-43a36d04d31d38efc5b9245c53e00627"])
        let seqStep = try #require(Transcripts.step("all_docs", "s12"))
        let seq = Simulation.run(
            AllDocsOperation<JSONValue>(database: "tx_alldocs", options: KeyRangeOptions(limit: 0, updateSeq: true)),
            response: seqStep.simulated)
        #expect(seq.value?.updateSeq == CouchSequence(json: seqStep.responseJSON?["update_seq"] ?? .null))
        #expect(seq.value?.rows.isEmpty == true)
    }

    @Test("_design_docs, _local_docs (total_rows null) and a partition's _all_docs")
    func otherSources() throws {
        let design = try #require(Transcripts.step("views", "s26"))
        let ddocs = Simulation.run(
            AllDocsOperation<JSONValue>(database: "tx_views", source: .designDocuments), response: design.simulated)
        #expect(requestLine(ddocs.request) == requestLine(design))
        #expect(ddocs.value?.rows.map(\.id) == ["_design/app"])

        let local = try #require(Transcripts.step("local_docs", "s06"))
        let locals = Simulation.run(
            AllDocsOperation<JSONValue>(database: "tx_local", source: .localDocuments), response: local.simulated)
        #expect(requestLine(locals.request) == requestLine(local))
        let value = try locals.result.get().value
        #expect(value.totalRows == nil)
        #expect(value.offset == nil)
        #expect(value.rows == [AllDocsRow(id: "_local/cfg", key: "_local/cfg", value: .init(rev: "0-2"))])

        let partition = try #require(Transcripts.step("partitioned", "s09"))
        let part = Simulation.run(
            AllDocsOperation<JSONValue>(database: "tx_part", source: .partition("sensor-1")),
            response: partition.simulated)
        #expect(requestLine(part.request) == requestLine(partition))
        #expect(part.value?.rows.map(\.key) == ["sensor-1:r1", "sensor-1:r2"])

        for bad in ["", "_x", "a:b"] {
            let run = Simulation.run(
                AllDocsOperation<JSONValue>(database: "db", source: .partition(bad)), responses: [])
            #expect(run.error?.kind == .validation, "\(bad)")
        }
    }

    @Test("POST /{db}/_all_docs/queries: one body, one result per query")
    func allDocsQueries() throws {
        let op = AllDocsQueriesOperation<JSONValue>(
            database: "db",
            queries: [KeyRangeOptions(keys: ["a", "b"]), KeyRangeOptions(startKey: "c", limit: 1, includeDocs: true)])
        let body =
            #"{"results":[{"total_rows":3,"offset":null,"rows":[{"id":"a","key":"a","value":{"rev":"1-a"}},{"key":"b","error":"not_found"}]},{"total_rows":3,"offset":2,"rows":[{"id":"c","key":"c","value":{"rev":"1-c"},"doc":{"_id":"c","_rev":"1-c"}}]}]}"#
        let run = Simulation.run(op, response: .json(200, body))
        #expect(requestLine(run.request) == "POST /db/_all_docs/queries")
        #expect(
            run.request?.bodyJSON == [
                "queries": [["keys": ["a", "b"]], ["start_key": "c", "limit": 1, "include_docs": true]]
            ])
        let results = try run.result.get().value.results
        #expect(results.count == 2)
        #expect(results[0].rows[1].error == "not_found")
        #expect(results[1].rows[0].doc?["_rev"] == "1-c")

        let design = Simulation.run(
            AllDocsQueriesOperation<JSONValue>(database: "db", source: .designDocuments, queries: [KeyRangeOptions()]),
            response: .json(200, #"{"results":[{"total_rows":0,"offset":0,"rows":[]}]}"#))
        #expect(requestLine(design.request) == "POST /db/_design_docs/queries")
        #expect(design.request?.bodyJSON == ["queries": [[:]]])

        let none = Simulation.run(AllDocsQueriesOperation<JSONValue>(database: "db", queries: []), responses: [])
        #expect(none.error?.kind == .validation)
        let numeric = Simulation.run(
            AllDocsQueriesOperation<JSONValue>(database: "db", queries: [KeyRangeOptions(keys: ["a", 1])]),
            responses: [])
        #expect(numeric.error?.message.contains("document ids") == true)
    }

    @Test(
        "Key-range validation: conflicting and impossible options are refused before sending",
        arguments: [
            KeyRangeOptions(limit: -1), KeyRangeOptions(skip: -2), KeyRangeOptions(keys: []),
            KeyRangeOptions(key: "a", keys: ["b"]), KeyRangeOptions(key: "a", startKey: "a"),
            KeyRangeOptions(keys: ["a"], endKey: "z"), KeyRangeOptions(conflicts: true),
            KeyRangeOptions(attachments: true), KeyRangeOptions(includeDocs: false, attachmentEncodingInfo: true),
            KeyRangeOptions(keys: ["a", ""]), KeyRangeOptions(startKey: 1), KeyRangeOptions(key: ["a"]),
        ])
    func rangeValidation(options: KeyRangeOptions) {
        let run = Simulation.run(AllDocsOperation<JSONValue>(database: "db", options: options), responses: [])
        #expect(run.error?.kind == .validation)
        #expect(run.requests.isEmpty)
    }
}
