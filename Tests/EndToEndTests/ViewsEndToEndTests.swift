import Foundation
import SwiftCouch
import Testing

/// A document for the view tests.
private struct Entry: Codable, Sendable, Equatable {
    var kind: String
    var n: Int?
}

/// Writes `a1`, `a2`, `a3` (kind `a`), `b1`, `b2` (kind `b`) with `n` = 1 … 5 and `x` without `n`.
private func writeEntries(_ client: CouchDBClient, _ db: String, prefix: String = "") async throws {
    let entries: [(String, Entry)] = [
        ("a1", Entry(kind: "a", n: 1)), ("a2", Entry(kind: "a", n: 2)), ("a3", Entry(kind: "a", n: 3)),
        ("b1", Entry(kind: "b", n: 4)), ("b2", Entry(kind: "b", n: 5)), ("x", Entry(kind: "x", n: nil)),
    ]
    let rows = try await client.value(
        BulkDocsOperation(
            database: db, documents: entries.map { CouchDocument(id: prefix + $0.0, body: $0.1) }))
    #expect(rows.allSatisfy { $0.error == nil })
}

/// A view of the Mango (`language: "query"`) kind, as `POST /{db}/_index` writes it: it indexes
/// the documents that have `field`, keyed `[value]`, with a `null` value and `_count` as reduce.
/// Both CouchDB and the TestServer build it without JavaScript.
private func mangoDesign(_ name: String, field: String, partitioned: Bool? = nil) -> DesignDocument {
    DesignDocument(
        name: name, language: "query",
        views: [
            "by_\(field)": DesignDocument.View(
                map: .query(["fields": .object([field: "asc"])]), reduce: .count,
                options: ["def": ["fields": [.string(field)]]])
        ], options: partitioned.map { DesignDocument.Options(partitioned: $0) })
}

/// Runs the first call that needs JavaScript. Returns nil, after printing why, when the server
/// answers that it cannot run JavaScript (the TestServer's 501 `not_implemented`); a real CouchDB
/// runs it and the test goes on.
private func unlessJavaScriptIsMissing<T>(_ what: String, _ body: () async throws -> T) async throws -> T? {
    do {
        return try await body()
    } catch let error as CouchError where error.statusCode == 501 && error.error == "not_implemented" {
        print(
            "Skipping the rest of \(what): the server cannot run JavaScript (\(error.reason ?? "501 not_implemented"))."
        )
        return nil
    }
}

@Suite("End to end: views, design functions and handlers")
struct ViewsEndToEndTests {
    @Test("A Mango-language view: map rows with ranges, keys, paging, include_docs; reduce and group; /queries")
    func mangoLanguageView() async throws {
        try await withDatabase("views-mango") { client, db in
            try await writeEntries(client, db)
            _ = try await client.value(PutDocumentOperation(database: db, design: mangoDesign("idx", field: "n")))
            try await settle(client, db)  // views read one copy of each shard
            typealias Query = QueryViewOperation<[Int], JSONValue, Entry>

            let map = try await client.value(
                Query(database: db, design: "idx", view: "by_n", options: .init(reduce: false)))
            #expect(map.rows.map(\.id) == ["a1", "a2", "a3", "b1", "b2"])
            #expect(map.rows.map(\.key) == [[1], [2], [3], [4], [5]])
            #expect(map.rows.allSatisfy { $0.value == .null && $0.doc == nil })
            #expect(map.totalRows == 5)
            #expect(map.offset == 0)

            let range = try await client.value(
                Query(
                    database: db, design: "_design/idx", view: "by_n",
                    options: .init(startKey: [2], endKey: [4], inclusiveEnd: false, reduce: false)))
            #expect(range.rows.map(\.id) == ["a2", "a3"])
            #expect(range.offset == 1)
            let descending = try await client.value(
                Query(
                    database: db, design: "idx", view: "by_n",
                    options: .init(descending: true, limit: 2, skip: 1, reduce: false, includeDocs: true)))
            #expect(descending.rows.map(\.id) == ["b1", "a3"])
            #expect(descending.rows.compactMap(\.doc) == [Entry(kind: "b", n: 4), Entry(kind: "a", n: 3)])
            let keyed = try await client.value(
                Query(database: db, design: "idx", view: "by_n", options: .init(keys: [[5], [9], [1]], reduce: false)))
            #expect(keyed.rows.map(\.id) == ["b2", "a1"])
            let one = try await client.value(
                Query(database: db, design: "idx", view: "by_n", options: .init(key: [3], reduce: false)))
            #expect(one.rows.map(\.id) == ["a3"])

            let count = try await client.value(
                QueryViewOperation<JSONValue, Int, JSONValue>(database: db, design: "idx", view: "by_n"))
            #expect(count.rows.map(\.value) == [5])
            #expect(count.rows.first?.key == .null)
            let grouped = try await client.value(
                QueryViewOperation<[Int], Int, JSONValue>(
                    database: db, design: "idx", view: "by_n", options: .init(startKey: [4], group: true)))
            #expect(grouped.rows.map(\.key) == [[4], [5]])
            #expect(grouped.rows.map(\.value) == [1, 1])

            let queries = try await client.value(
                QueryViewQueriesOperation<JSONValue, JSONValue, Entry>(
                    database: db, design: "idx", view: "by_n",
                    queries: [
                        .init(keys: [[2]], reduce: false, includeDocs: true), .init(limit: 1, reduce: false),
                        .init(),
                    ]))
            #expect(queries.results.count == 3)
            #expect(queries.results[0].rows.first?.doc == Entry(kind: "a", n: 2))
            #expect(queries.results[1].rows.map(\.id) == ["a1"])
            #expect(queries.results[2].rows.map(\.value) == [5])

            await expectView("A view the design document does not have", status: 404, error: "not_found") {
                _ = try await client.execute(QueryJSONViewOperation(database: db, design: "idx", view: "nope"))
            }
            await expectView("include_docs on a reduced view", status: 400, error: "query_parse_error") {
                _ = try await client.execute(
                    GenericJSONOperation<JSONValue>(
                        GenericOperation(
                            path: CouchPath(db, "_design", "idx", "_view", "by_n"),
                            query: [URLQueryItem(name: "include_docs", value: "true")])))
            }

            // _info describes the index of a design document in the query language.
            let info = try await client.value(GetDesignDocumentInfoOperation(database: db, design: "idx"))
            #expect(info.name == "idx")
            #expect(info.viewIndex.language == "query")
        }
    }

    @Test("_design/x/_info has no update_options; POST _temp_view is 410 gone")
    func designInfoAndTemporaryViews() async throws {
        try await withDatabase("views-info") { client, db in
            _ = try await client.value(PutDocumentOperation(database: db, design: mangoDesign("idx", field: "n")))
            let info = try await client.value(
                GenericJSONOperation<JSONValue>(GenericOperation(path: CouchPath(db, "_design", "idx", "_info"))))
            let index = try #require(info["view_index"]?.objectValue)
            #expect(index["language"] == "query")
            #expect(index["update_options"] == nil)
            let temporaryView = try GenericOperation(
                path: CouchPath(db, "_temp_view"), jsonBody: ["map": "function(doc) { emit(doc._id, null); }"])
            do {
                _ = try await client.value(GenericJSONOperation<JSONValue>(temporaryView))
                Issue.record("_temp_view should be 410")
            } catch let error as CouchError {
                #expect(error.statusCode == 410)
                #expect(error.error == "gone")
                #expect(error.reason == "Temporary views are not supported in CouchDB")
            }
        }
    }

    @Test("A partitioned view answers per partition and refuses a global query")
    func partitionedMangoView() async throws {
        try await withDatabase("views-partitioned", partitioned: true) { client, db in
            for partition in ["p1", "p2"] { try await writeEntries(client, db, prefix: partition + ":") }
            _ = try await client.value(PutDocumentOperation(database: db, design: mangoDesign("idx", field: "n")))
            try await settle(client, db)  // views read one copy of each shard
            let rows = try await client.value(
                QueryViewOperation<[Int], JSONValue, Entry>(
                    database: db, design: "idx", view: "by_n", partition: "p2",
                    options: .init(startKey: [4], reduce: false, includeDocs: true)))
            #expect(rows.rows.map(\.id) == ["p2:b1", "p2:b2"])
            #expect(rows.rows.compactMap(\.doc?.n) == [4, 5])
            let count = try await client.value(
                QueryViewOperation<JSONValue, Int, JSONValue>(
                    database: db, design: "idx", view: "by_n", partition: "p1"))
            #expect(count.rows.map(\.value) == [5])
            do {
                _ = try await client.execute(QueryJSONViewOperation(database: db, design: "idx", view: "by_n"))
                Issue.record("a partitioned view needs a partition")
            } catch let error as CouchError {
                #expect(error.statusCode == 400)
                #expect(error.error == "query_parse_error")
                #expect(error.reason == "`partition` parameter is mandatory for queries to this view.")
            }

            // A JavaScript partitioned view: the same, where the server runs JavaScript.
            _ = try await client.value(
                PutDocumentOperation(
                    database: db,
                    design: DesignDocument(
                        name: "js", views: ["by_kind": .init(map: "function(doc) { emit(doc.kind, doc.n); }")])))
            guard
                let js = try await unlessJavaScriptIsMissing(
                    "the partitioned JavaScript view test",
                    {
                        try await client.value(
                            QueryViewOperation<String, Int?, JSONValue>(
                                database: db, design: "js", view: "by_kind", partition: "p1",
                                options: .init(key: "a")))
                    })
            else { return }
            #expect(js.rows.map(\.id) == ["p1:a1", "p1:a2", "p1:a3"])
            #expect(js.rows.map(\.value) == [1, 2, 3])
        }
    }

    @Test("JavaScript views: map rows, built-in and JavaScript reduce, group_level, keys, /queries")
    func javaScriptViews() async throws {
        try await withDatabase("views-js") { client, db in
            try await writeEntries(client, db)
            let map = "function(doc) { if (doc.n) { emit([doc.kind, doc.n], doc.n); } }"
            let design = DesignDocument(
                name: "app",
                views: [
                    "by_kind": .init(map: .source(map)), "sum": .init(map: .source(map), reduce: .sum),
                    "stats": .init(map: .source(map), reduce: .stats),
                    "js_sum": .init(
                        map: .source(map), reduce: "function(keys, values, rereduce) { return sum(values); }"),
                ])
            _ = try await client.value(PutDocumentOperation(database: db, design: design))
            try await settle(client, db)  // views read one copy of each shard
            typealias Rows = QueryViewOperation<[JSONValue], Int, Entry>
            guard
                let all = try await unlessJavaScriptIsMissing(
                    "the JavaScript view test",
                    { try await client.value(Rows(database: db, design: "app", view: "by_kind")) })
            else { return }
            #expect(all.rows.map(\.id) == ["a1", "a2", "a3", "b1", "b2"])
            #expect(all.rows.map(\.value) == [1, 2, 3, 4, 5])
            #expect(all.rows.first?.key == ["a", 1])
            #expect(all.totalRows == 5)

            let kindB = try await client.value(
                Rows(
                    database: db, design: "app", view: "by_kind",
                    options: .init(startKey: ["b"], endKey: ["b", [:]], includeDocs: true)))
            #expect(kindB.rows.map(\.id) == ["b1", "b2"])
            #expect(kindB.rows.compactMap(\.doc) == [Entry(kind: "b", n: 4), Entry(kind: "b", n: 5)])
            let backwards = try await client.value(
                Rows(database: db, design: "app", view: "by_kind", options: .init(descending: true, limit: 2, skip: 1)))
            #expect(backwards.rows.map(\.id) == ["b1", "a3"])
            let keyed = try await client.value(
                Rows(database: db, design: "app", view: "by_kind", options: .init(keys: [["b", 5], ["a", 1]])))
            #expect(keyed.rows.map(\.id) == ["b2", "a1"])

            let total = try await client.value(
                QueryViewOperation<JSONValue, Int, JSONValue>(database: db, design: "app", view: "sum"))
            #expect(total.rows.map(\.value) == [15])
            let perKind = try await client.value(
                QueryViewOperation<[String], Int, JSONValue>(
                    database: db, design: "app", view: "sum", options: .init(groupLevel: 1)))
            #expect(perKind.rows.map(\.key) == [["a"], ["b"]])
            #expect(perKind.rows.map(\.value) == [6, 9])
            let jsSum = try await client.value(
                QueryViewOperation<[String], Int, JSONValue>(
                    database: db, design: "app", view: "js_sum", options: .init(groupLevel: 1)))
            #expect(jsSum.rows.map(\.value) == [6, 9])
            let stats = try await client.value(
                QueryViewOperation<JSONValue, JSONValue, JSONValue>(database: db, design: "app", view: "stats"))
            #expect(stats.rows.first?.value == ["sum": 15, "count": 5, "min": 1, "max": 5, "sumsqr": 55])
            let unreduced = try await client.value(
                QueryViewOperation<[JSONValue], Int, JSONValue>(
                    database: db, design: "app", view: "sum", options: .init(limit: 1, reduce: false)))
            #expect(unreduced.rows.map(\.id) == ["a1"])

            let queries = try await client.value(
                QueryViewQueriesOperation<JSONValue, JSONValue, JSONValue>(
                    database: db, design: "app", view: "sum",
                    queries: [.init(), .init(limit: 2, group: true), .init(keys: [["a", 3]], reduce: false)]))
            #expect(queries.results.map(\.rows.count) == [1, 2, 1])
            #expect(queries.results[0].rows.first?.value == 15)
            #expect(queries.results[2].rows.first?.id == "a3")

            let info = try await client.value(GetDesignDocumentInfoOperation(database: db, design: "app"))
            #expect(info.viewIndex.language == "javascript")
        }
    }

    @Test("Show, list and update handlers")
    func handlers() async throws {
        try await withDatabase("views-handlers") { client, db in
            try await writeEntries(client, db)
            let design = DesignDocument(
                name: "h",
                views: ["by_n": .init(map: "function(doc) { if (doc.n) { emit(doc.n, doc.kind); } }")],
                updates: [
                    "stamp": """
                    function(doc, req) {
                      if (!doc) { return [{_id: req.query.id, kind: 'made', n: 0}, 'created ' + req.query.id]; }
                      doc.n = JSON.parse(req.body).n;
                      return [doc, 'updated ' + doc._id];
                    }
                    """
                ],
                shows: [
                    "card": """
                    function(doc, req) {
                      var who = doc ? doc._id + ':' + doc.kind : 'nobody';
                      return {body: (req.query.greeting || 'hi') + ' ' + who, headers: {'Content-Type': 'text/plain'}};
                    }
                    """
                ],
                lists: [
                    "csv": """
                    function(head, req) {
                      start({headers: {'Content-Type': 'text/csv'}});
                      var row, out = [];
                      while ((row = getRow())) { out.push(row.id + '=' + row.value); }
                      send(out.join(','));
                    }
                    """
                ])
            _ = try await client.value(PutDocumentOperation(database: db, design: design))
            try await settle(client, db)  // list functions read a view
            guard
                let shown = try await unlessJavaScriptIsMissing(
                    "the handler test",
                    {
                        try await client.value(
                            ShowFunctionOperation(
                                database: db, design: "h", function: "card", documentID: "a2",
                                query: [URLQueryItem(name: "greeting", value: "hello")]))
                    })
            else { return }
            #expect(String(decoding: shown.data, as: UTF8.self) == "hello a2:a")
            #expect(shown.contentType?.hasPrefix("text/plain") == true)
            let nobody = try await client.value(ShowFunctionOperation(database: db, design: "h", function: "card"))
            #expect(String(decoding: nobody.data, as: UTF8.self) == "hi nobody")

            let listed = try await client.value(
                ListFunctionOperation(
                    database: db, design: "h", function: "csv", view: "by_n", options: .init(startKey: 2, limit: 2)))
            #expect(String(decoding: listed.data, as: UTF8.self) == "a2=a,a3=a")
            #expect(listed.contentType?.hasPrefix("text/csv") == true)
            let listedKeys = try await client.value(
                ListFunctionOperation(
                    database: db, design: "h", function: "csv", view: "by_n", viewDesign: "h",
                    options: .init(keys: [5, 1])))
            #expect(String(decoding: listedKeys.data, as: UTF8.self) == "b2=b,a1=a")

            let created = try await client.execute(
                UpdateHandlerOperation(
                    database: db, design: "h", function: "stamp", query: [URLQueryItem(name: "id", value: "new")]))
            #expect(created.statusCode == 201)
            #expect(String(decoding: created.value.data, as: UTF8.self) == "created new")
            #expect(created.headers["X-Couch-Id"] == "new")
            #expect(created.headers["X-Couch-Update-NewRev"]?.hasPrefix("1-") == true)
            let updated = try await client.execute(
                UpdateHandlerOperation(
                    database: db, design: "h", function: "stamp", documentID: "a1", body: Data(#"{"n":42}"#.utf8)))
            #expect(String(decoding: updated.value.data, as: UTF8.self) == "updated a1")
            #expect(updated.headers["X-Couch-Update-NewRev"]?.hasPrefix("2-") == true)
            #expect(
                try await client.value(GetDocumentOperation<Entry>(database: db, id: "a1")) == Entry(kind: "a", n: 42))
            #expect(
                try await client.value(GetDocumentOperation<Entry>(database: db, id: "new"))
                    == Entry(kind: "made", n: 0))
        }
    }
}

extension ViewsEndToEndTests {
    /// A key range ending in U+FFFF is the usual prefix query: CouchDB collates view keys with ICU,
    /// which weighs U+FFFF above every letter (issue 25; the TestServer used to ignore it and end the
    /// range at the prefix itself).
    @Test("A view key range ending in U+FFFF takes every key with that prefix")
    func prefixRangeEndingInUFFFF() async throws {
        try await withDatabase("views-prefix") { client, db in
            let names = ["ba", "bar", "baz", "bb", "b", "Bar"]
            try await writeNamesIndexed(names, client, db)
            typealias Query = QueryViewOperation<[String], JSONValue, JSONValue>
            let prefix = try await client.value(
                Query(
                    database: db, design: "idx", view: "by_name",
                    options: .init(startKey: ["ba"], endKey: ["ba\u{FFFF}"], reduce: false)))
            #expect(prefix.rows.map(\.key) == [["ba"], ["bar"], ["Bar"], ["baz"]])
            let descending = try await client.value(
                Query(
                    database: db, design: "idx", view: "by_name",
                    options: .init(startKey: ["ba\u{FFFF}"], endKey: ["ba"], descending: true, reduce: false)))
            #expect(descending.rows.map(\.key) == [["baz"], ["Bar"], ["bar"], ["ba"]])
        }
    }
}

extension ViewsEndToEndTests {
    /// Writes a document `{"name": …}` for each of `names` (ids `n0`, `n1`, …) and the Mango-language
    /// view `_design/idx/_view/by_name` over them, and waits until the view sees them.
    fileprivate func writeNamesIndexed(_ names: [String], _ client: CouchDBClient, _ db: String) async throws {
        let rows = try await client.value(
            BulkDocsOperation(
                database: db,
                documents: names.enumerated().map { CouchDocument(id: "n\($0.offset)", body: ["name": $0.element]) }))
        #expect(rows.allSatisfy { $0.error == nil })
        _ = try await client.value(PutDocumentOperation(database: db, design: mangoDesign("idx", field: "name")))
        try await settle(client, db)
    }

    /// couch_mrview_http:parse_boolean reads view and `_all_docs` booleans in any case and refuses
    /// anything else with 400 `query_parse_error` (issue 25; the TestServer took only the literal
    /// `true` and ignored other values).
    @Test("View and _all_docs boolean parameters ignore case; another value is 400 query_parse_error")
    func booleanParametersIgnoreCase() async throws {
        try await withDatabase("views-booleans") { client, db in
            let names = ["ba", "bar", "bb"]
            try await writeNamesIndexed(names, client, db)
            func get(_ path: CouchPath, _ query: [String: String]) async throws -> JSONValue {
                try await client.value(
                    GenericJSONOperation<JSONValue>(
                        GenericOperation(
                            path: path,
                            query: query.sorted { $0.key < $1.key }.map { URLQueryItem(name: $0.key, value: $0.value) })
                    ))
            }
            let view = CouchPath(db, "_design", "idx", "_view", "by_name")
            let grouped = try await get(view, ["group": "True"])
            #expect(grouped["rows"]?.arrayValue?.count == 3)
            let descending = try await get(view, ["descending": "TRUE", "reduce": "False", "limit": "1"])
            #expect(descending["rows"]?.arrayValue?.first?["key"] == ["bb"])
            let docs = try await get(
                CouchPath(db, "_all_docs"), ["include_docs": "True", "descending": "tRuE", "limit": "1"])
            #expect(docs["rows"]?.arrayValue?.first?["doc"]?["name"] == "bb")
            for (path, query) in [(view, ["descending": "yes"]), (CouchPath(db, "_all_docs"), ["include_docs": "yes"])]
            {
                do {
                    _ = try await get(path, query)
                    Issue.record("\(query) should be refused")
                } catch let failure as CouchError {
                    #expect(failure.statusCode == 400)
                    #expect(failure.error == "query_parse_error")
                    #expect(failure.reason == "Invalid boolean parameter: \"yes\"")
                }
            }
        }
    }
}

extension ViewsEndToEndTests {
    /// An update function whose first element is `null` saves nothing and answers 200 with its
    /// response (chttpd_show:send_doc_update_response; the TestServer answered 400 "Document must be a
    /// JSON object"): a string as text/html, `{json: …}` as application/json, its own `code` kept.
    @Test("An update handler returning [null, response] answers 200 with the response and saves nothing")
    func updateHandlerReturningNull() async throws {
        try await withDatabase("views-update-null") { client, db in
            let design = DesignDocument(
                name: "u",
                updates: [
                    "text": "function(doc, req) { return [null, 'nothing saved']; }",
                    "json": "function(doc, req) { return [null, {json: {seen: doc ? doc._id : null}}]; }",
                    "coded": "function(doc, req) { return [null, {code: 202, body: 'queued'}]; }",
                ])
            _ = try await client.value(PutDocumentOperation(database: db, design: design))
            guard
                let text = try await unlessJavaScriptIsMissing(
                    "the update handler test",
                    { try await client.execute(UpdateHandlerOperation(database: db, design: "u", function: "text")) })
            else { return }
            #expect(text.statusCode == 200)
            #expect(String(decoding: text.value.data, as: UTF8.self) == "nothing saved")
            #expect(text.value.contentType == "text/html; charset=utf-8")
            #expect(text.headers["X-Couch-Update-NewRev"] == nil)
            _ = try await client.value(
                PutDocumentOperation(database: db, id: "a", document: ["n": 1] as JSONValue))
            let json = try await client.execute(
                UpdateHandlerOperation(database: db, design: "u", function: "json", documentID: "a"))
            #expect(json.statusCode == 200)
            #expect(try JSONDecoder().decode(JSONValue.self, from: json.value.data) == ["seen": "a"])
            #expect(json.value.contentType == "application/json")
            let coded = try await client.execute(UpdateHandlerOperation(database: db, design: "u", function: "coded"))
            #expect(coded.statusCode == 202)
            #expect(String(decoding: coded.value.data, as: UTF8.self) == "queued")
            // Database info sums one copy of each shard: on a cluster it may lag behind the writes.
            let count = try await converged(
                read: { try await client.value(GetDatabaseInfoOperation(name: db)).docCount }, until: { $0 == 2 })
            #expect(count == 2)  // the design document and a
        }
    }
}

/// Runs `body`, which must fail with an HTTP ``CouchError`` of `status` and `error`.
private func expectView(
    _ what: String, status: Int, error: String, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> Void
) async {
    do {
        try await body()
        Issue.record("\(what) should fail with \(status)", sourceLocation: sourceLocation)
    } catch let failure as CouchError {
        #expect(failure.statusCode == status, "\(what): \(failure)", sourceLocation: sourceLocation)
        #expect(failure.error == error, "\(what): \(failure)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("\(what) threw \(error)", sourceLocation: sourceLocation)
    }
}
