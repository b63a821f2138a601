import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

/// A document of the `views` scenario.
private struct Produce: Codable, Sendable, Equatable {
    var _id: String
    var _rev: String
    var type: String
    var name: String
    var score: Int
    var date: [Int]
}

/// The `_stats` reduce value.
private struct Stats: Codable, Sendable, Equatable {
    var sum: Double
    var count: Int
    var min: Double
    var max: Double
    var sumsqr: Double
}

@Suite("Views, design documents and design functions against recorded CouchDB 3.5 responses", .ownThreads)
struct ViewOperationTests {
    private typealias ByName = QueryViewOperation<String, Int, Produce>

    @Test("GET _view: typed rows sorted by key, total_rows and offset")
    func mapView() throws {
        let step = try #require(Transcripts.step("views", "s05"))
        let run = Simulation.run(ByName(database: "tx_views", design: "app", view: "by_name"), response: step.simulated)
        #expect(requestLine(run.request) == requestLine(step))
        let value = try run.result.get().value
        #expect(value.totalRows == 6)
        #expect(value.offset == 0)
        #expect(value.rows.map(\.key) == ["apple", "banana", "carrot", "daikon", "elderberry", "oat"])
        #expect(value.rows.first == ViewRow(id: "p1", key: "apple", value: 10, doc: nil))

        let prefixed = Simulation.run(
            ByName(database: "tx_views", design: "_design/app", view: "by_name"), response: step.simulated)
        #expect(prefixed.request?.path == "/tx_views/_design/app/_view/by_name")
    }

    @Test("Recorded view queries: key, ranges with inclusive_end, descending, skip/limit, stable/update")
    func queries() throws {
        let cases: [(String, ViewQueryOptions, String)] = [
            ("s06", ViewQueryOptions(key: "carrot"), "key=%22carrot%22"),
            (
                "s09", ViewQueryOptions(startKey: "banana", endKey: "daikon", inclusiveEnd: false),
                "start_key=%22banana%22&end_key=%22daikon%22&inclusive_end=false"
            ),
            (
                "s10", ViewQueryOptions(startKey: "daikon", endKey: "banana", descending: true),
                "start_key=%22daikon%22&end_key=%22banana%22&descending=true"
            ),
            ("s12", ViewQueryOptions(limit: 2, skip: 2), "skip=2&limit=2"),
            ("s14", ViewQueryOptions(update: .never, stable: true), "update=false&stable=true"),
        ]
        for (name, options, query) in cases {
            let step = try #require(Transcripts.step("views", name))
            let run = Simulation.run(
                QueryJSONViewOperation(database: "tx_views", design: "app", view: "by_name", options: options),
                response: step.simulated)
            #expect(run.request?.query == query, "\(name)")
            let recorded = sortedQuery(step.path).map {
                $0.replacingOccurrences(of: "startkey=", with: "start_key=").replacingOccurrences(
                    of: "endkey=", with: "end_key=")
            }.sorted()
            #expect(sortedQuery(run.request) == recorded, "\(name)")
            let value = try run.result.get().value
            #expect(
                value.rows.map(\.id) == step.responseJSON?["rows"]?.arrayValue?.map { $0["id"]?.stringValue }, "\(name)"
            )
        }
    }

    @Test("POST keys: rows follow the order of the keys; include_docs decodes typed documents")
    func keysAndDocs() throws {
        let step = try #require(Transcripts.step("views", "s08"))
        let op = ByName(
            database: "tx_views", design: "app", view: "by_name",
            options: ViewQueryOptions(keys: ["daikon", "apple", "nope"]))
        #expect(op.isIdempotent == true)
        let run = Simulation.run(op, response: step.simulated)
        #expect(requestLine(run.request) == requestLine(step))
        #expect(run.request?.bodyJSON == recordedRequestJSON(step))
        #expect(run.value?.rows.map(\.key) == ["daikon", "apple"])

        let docs = try #require(Transcripts.step("views", "s13"))
        let withDocs = Simulation.run(
            ByName(
                database: "tx_views", design: "app", view: "by_name",
                options: ViewQueryOptions(limit: 2, includeDocs: true)),
            response: docs.simulated)
        #expect(withDocs.request?.query == "limit=2&include_docs=true")
        #expect(sortedQuery(withDocs.request) == sortedQuery(docs.path))
        let rows = try withDocs.result.get().value.rows
        #expect(
            rows[0].doc
                == Produce(
                    _id: "p1", _rev: "1-d7d5f5ee926fddaccfd4d2ea269c9dde", type: "fruit", name: "apple", score: 10,
                    date: [2024, 1, 15]))
    }

    @Test("Reduce: null key without grouping, group=true, group_level, _stats values, reduce=false")
    func reduce() throws {
        let total = try #require(Transcripts.step("views", "s15"))
        let all = Simulation.run(
            QueryViewOperation<JSONValue, Int, JSONValue>(database: "tx_views", design: "app", view: "count_by_type"),
            response: total.simulated)
        let value = try all.result.get().value
        #expect(value.totalRows == nil)
        #expect(value.rows == [ViewRow(id: nil, key: .null, value: 6, doc: nil)])

        let optionalKey = Simulation.run(
            QueryViewOperation<String?, Int, JSONValue>(database: "tx_views", design: "app", view: "count_by_type"),
            response: total.simulated)
        #expect(optionalKey.value?.rows.first?.key == .some(nil))

        let grouped = try #require(Transcripts.step("views", "s16"))
        let byType = Simulation.run(
            QueryViewOperation<String, Int, JSONValue>(
                database: "tx_views", design: "app", view: "count_by_type", options: ViewQueryOptions(group: true)),
            response: grouped.simulated)
        #expect(requestLine(byType.request) == requestLine(grouped))
        #expect(byType.value?.rows.map { "\($0.key)=\($0.value)" } == ["fruit=3", "grain=1", "veg=2"])

        let stats = try #require(Transcripts.step("views", "s20"))
        let statsRun = Simulation.run(
            QueryViewOperation<String, Stats, JSONValue>(
                database: "tx_views", design: "app", view: "stats_by_type", options: ViewQueryOptions(group: true)),
            response: stats.simulated)
        #expect(statsRun.value?.rows.first?.value == Stats(sum: 85, count: 3, min: 10, max: 55, sumsqr: 3525))

        let level = try #require(Transcripts.step("views", "s22"))
        let byYear = Simulation.run(
            QueryViewOperation<[Int], Int, JSONValue>(
                database: "tx_views", design: "app", view: "by_date", options: ViewQueryOptions(groupLevel: 1)),
            response: level.simulated)
        #expect(requestLine(byYear.request) == requestLine(level))
        #expect(byYear.value?.rows.map(\.key) == [[2024], [2025]])

        let mapped = try #require(Transcripts.step("views", "s17"))
        let noReduce = Simulation.run(
            QueryViewOperation<String, Int, JSONValue>(
                database: "tx_views", design: "app", view: "count_by_type",
                options: ViewQueryOptions(limit: 3, reduce: false)),
            response: mapped.simulated)
        #expect(noReduce.request?.query == "limit=3&reduce=false")
        #expect(sortedQuery(noReduce.request) == sortedQuery(mapped.path))
        #expect(noReduce.value?.rows.map(\.id) == ["p1", "p2", "p5"])
    }

    @Test("View errors: 400 query_parse_error, 404 missing_named_view, partition mandatory")
    func errors() throws {
        let reversed = try #require(Transcripts.step("views", "s11"))
        let run = Simulation.run(
            QueryJSONViewOperation(
                database: "tx_views", design: "app", view: "by_name",
                options: ViewQueryOptions(startKey: "banana", endKey: "daikon", descending: true)),
            response: reversed.simulated)
        #expect(run.error?.statusCode == 400)
        #expect(run.error?.error == "query_parse_error")
        #expect(
            run.error?.reason
                == "No rows can match your key range, reverse your start_key and end_key or set descending=false")

        let missing = try #require(Transcripts.step("views", "s25"))
        let nope = Simulation.run(
            QueryJSONViewOperation(database: "tx_views", design: "app", view: "nope"), response: missing.simulated)
        #expect(nope.error?.statusCode == 404)
        #expect(nope.error?.reason == "missing_named_view")

        let global = try #require(Transcripts.step("partitioned", "s12"))
        let unpartitioned = Simulation.run(
            QueryJSONViewOperation(database: "tx_part", design: "readings", view: "by_t"), response: global.simulated)
        #expect(unpartitioned.error?.reason == "`partition` parameter is mandatory for queries to this view.")
    }

    @Test("Partitioned view: /{db}/_partition/{p}/_design/{ddoc}/_view/{view}")
    func partitioned() throws {
        let step = try #require(Transcripts.step("partitioned", "s11"))
        let run = Simulation.run(
            QueryViewOperation<Double, String, JSONValue>(
                database: "tx_part", design: "readings", view: "by_t", partition: "sensor-1"),
            response: step.simulated)
        #expect(requestLine(run.request) == requestLine(step))
        #expect(run.value?.rows.map(\.key) == [20.5, 21])
        #expect(run.value?.rows.map(\.id) == ["sensor-1:r1", "sensor-1:r2"])
    }

    @Test("Every view option goes into the query; keys stay in the body")
    func allOptions() throws {
        var options = ViewQueryOptions(
            keys: [["a", 1], nil], startKeyDocID: "d1", endKeyDocID: "d9", inclusiveEnd: true, descending: false,
            limit: 5, skip: 1, reduce: false, includeDocs: true, conflicts: true, attachments: true,
            attachmentEncodingInfo: true, update: .afterResponse, stable: false, sorted: false, updateSeq: true)
        options.limit = 7
        #expect(options.range.limit == 7)
        let run = Simulation.run(
            QueryJSONViewOperation(database: "db", design: "d", view: "v", options: options),
            response: .json(200, #"{"total_rows":0,"offset":0,"update_seq":12,"rows":[]}"#))
        #expect(run.request?.method == "POST")
        #expect(
            run.request?.query
                == "start_key_doc_id=d1&end_key_doc_id=d9&inclusive_end=true&descending=false&skip=1&limit=7"
                + "&include_docs=true&conflicts=true&attachments=true&att_encoding_info=true&update_seq=true"
                + "&reduce=false&update=lazy&stable=false&sorted=false")
        #expect(run.request?.bodyJSON == ["keys": [["a", 1], nil]])
        #expect(run.value?.updateSeq == CouchSequence(12))

        let grouped = Simulation.run(
            QueryJSONViewOperation(
                database: "db", design: "d", view: "v",
                options: ViewQueryOptions(endKey: ["a", [:]], group: true, groupLevel: 2)),
            response: .json(200, #"{"rows":[]}"#))
        #expect(grouped.request?.query == "end_key=%5B%22a%22%2C%7B%7D%5D&group=true&group_level=2")
    }

    @Test(
        "View option validation",
        arguments: [
            ViewQueryOptions(groupLevel: -1), ViewQueryOptions(group: true, reduce: false),
            ViewQueryOptions(groupLevel: 1, reduce: false), ViewQueryOptions(group: false, groupLevel: 1),
            ViewQueryOptions(reduce: true, includeDocs: true), ViewQueryOptions(limit: -1),
        ])
    func validation(options: ViewQueryOptions) {
        let run = Simulation.run(
            QueryJSONViewOperation(database: "db", design: "d", view: "v", options: options), responses: [])
        #expect(run.error?.kind == .validation)
        #expect(run.requests.isEmpty)
    }

    @Test("Names are checked: empty view, design, bad partition")
    func names() {
        let ops = [
            QueryJSONViewOperation(database: "db", design: "", view: "v"),
            QueryJSONViewOperation(database: "db", design: "_design/", view: "v"),
            QueryJSONViewOperation(database: "db", design: "d", view: ""),
            QueryJSONViewOperation(database: "db", design: "d", view: "v", partition: "_p"),
            QueryJSONViewOperation(database: "Bad", design: "d", view: "v"),
        ]
        for op in ops { #expect(Simulation.run(op, responses: []).error?.kind == .validation) }
    }

    @Test("POST _view/{view}/queries: several queries of one view")
    func viewQueries() throws {
        let op = QueryViewQueriesOperation<String, Int, JSONValue>(
            database: "db", design: "app", view: "by_name",
            queries: [ViewQueryOptions(keys: ["a"]), ViewQueryOptions(limit: 1, update: .never)])
        let run = Simulation.run(
            op,
            response: .json(
                200,
                #"{"results":[{"total_rows":2,"offset":null,"rows":[{"id":"x","key":"a","value":1}]},{"total_rows":2,"offset":0,"rows":[{"id":"x","key":"a","value":1}]}]}"#
            ))
        #expect(requestLine(run.request) == "POST /db/_design/app/_view/by_name/queries")
        #expect(run.request?.bodyJSON == ["queries": [["keys": ["a"]], ["limit": 1, "update": "false"]]])
        #expect(try run.result.get().value.results.map(\.rows.count) == [1, 1])
    }

    @Test("DesignDocument: PUT body as recorded, reads back typed, unknown members kept; _info")
    func designDocument() throws {
        let step = try #require(Transcripts.step("views", "s03"))
        let mapByType = "function(doc) { if (doc.type) { emit(doc.type, doc.score); } }"
        let design = DesignDocument(
            name: "app", language: "javascript",
            views: [
                "by_name": .init(map: "function(doc) { if (doc.type) { emit(doc.name, doc.score); } }"),
                "count_by_type": .init(map: .source(mapByType), reduce: .count),
                "sum_by_type": .init(map: .source(mapByType), reduce: .sum),
                "stats_by_type": .init(map: .source(mapByType), reduce: .stats),
                "js_sum_by_type": .init(
                    map: .source(mapByType), reduce: "function(keys, values, rereduce) { return sum(values); }"),
                "by_date": .init(map: "function(doc) { if (doc.date) { emit(doc.date, doc.score); } }", reduce: .sum),
                "collation": .init(map: "function(doc) { if ('k' in doc) { emit(doc.k, doc._id); } }"),
                "throws_sometimes": .init(
                    map:
                        "function(doc) { if (doc.score > 35) { throw({forbidden: 'too big'}); } if (doc.type) { emit(doc._id, doc.score); } }"
                ),
            ])
        let run = Simulation.run(PutDocumentOperation(database: "tx_views", design: design), response: step.simulated)
        #expect(requestLine(run.request) == requestLine(step))
        var expected = recordedRequestJSON(step)?.objectValue ?? [:]
        expected["_id"] = "_design/app"
        #expect(run.request?.bodyJSON == .object(expected))
        #expect(run.value?.id == "_design/app")

        let mango =
            #"{"_id":"_design/idx","_rev":"1-a","language":"query","views":{"by-name":{"map":{"fields":{"name":"asc"},"partial_filter_selector":{}},"reduce":"_count","options":{"def":{"fields":["name"]}}}},"options":{"partitioned":false},"filters":{"f":"function(doc, req) { return true; }"},"validate_doc_update":"function(n, o, u) {}","updates":{"u":"function(doc, req) { return [doc, 'ok']; }"},"shows":{"s":"function(doc, req) { return 'x'; }"},"lists":{"l":"function(head, req) {}"},"autoupdate":false,"rewrites":[{"from":"/a","to":"/b"}],"indexes":{"i":{"index":"function(doc) {}"}}}"#
        let get = Simulation.run(
            GetDocumentOperation<DesignDocument>(database: "db", design: "idx"), response: .json(200, mango))
        #expect(get.request?.path == "/db/_design/idx")
        let read = try get.result.get().value
        #expect(read.name == "idx")
        #expect(read.language == "query")
        #expect(read.views?["by-name"]?.map == .query(["fields": ["name": "asc"], "partial_filter_selector": [:]]))
        #expect(read.views?["by-name"]?.reduce == .count)
        #expect(read.options == DesignDocument.Options(partitioned: false))
        #expect(read.autoupdate == false)
        #expect(read.other.keys.sorted() == ["indexes", "rewrites"])
        let rewritten = try JSONDecoder().decode(JSONValue.self, from: JSONEncoder().encode(read))
        #expect(rewritten == (try JSONDecoder().decode(JSONValue.self, from: Data(mango.utf8))))

        let delete = Simulation.run(
            DeleteDocumentOperation(database: "db", design: "_design/idx", revision: "1-a"),
            response: .json(200, #"{"ok":true,"id":"_design/idx","rev":"2-b"}"#))
        #expect(requestLine(delete.request) == "DELETE /db/_design/idx?rev=1-a")

        let broken = try #require(Transcripts.step("views", "s04"))
        let refused = Simulation.run(
            PutDocumentOperation(
                database: "tx_views",
                design: DesignDocument(name: "broken", views: ["v": .init(map: "function(doc) { emit(doc._id, ")])),
            response: broken.simulated)
        #expect(refused.request?.bodyJSON?["views"] == recordedRequestJSON(broken)?["views"])
        #expect(refused.error?.error == "compilation_error")

        // No transcript records _info; this body follows CouchDB 3.5's couch_mrview_http output.
        let info = Simulation.run(
            GetDesignDocumentInfoOperation(database: "db", design: "app"),
            response: .json(
                200,
                #"{"name":"app","view_index":{"collator_versions":["153.112"],"compact_running":false,"language":"javascript","purge_seq":0,"signature":"a1b2","sizes":{"active":100,"external":50,"file":4000},"update_seq":"12-g1AAAA","updater_running":false,"waiting_clients":0,"waiting_commit":false}}"#
            ))
        #expect(requestLine(info.request) == "GET /db/_design/app/_info")
        let index = try info.result.get().value
        #expect(index.name == "app")
        #expect(index.viewIndex.signature == "a1b2")
        #expect(index.viewIndex.sizes?.file == 4000)
        #expect(index.viewIndex.updateSeq == CouchSequence("12-g1AAAA"))
        #expect(index.viewIndex.collatorVersions == ["153.112"])
    }

    @Test("Show, list and update handlers: paths, methods, bodies and raw responses")
    func designFunctions() throws {
        let show = Simulation.run(
            ShowFunctionOperation(
                database: "db", design: "app", function: "html", documentID: "a/b",
                query: [URLQueryItem(name: "format", value: "full")], accept: "text/html"),
            response: SimulatedResponse(
                status: 200, headers: ["Content-Type": "text/html"], body: Data("<p>x</p>".utf8)))
        #expect(requestLine(show.request) == "GET /db/_design/app/_show/html/a%2Fb?format=full")
        #expect(show.request?.headers["Accept"] == "text/html")
        #expect(show.value == DataResponse(data: Data("<p>x</p>".utf8), contentType: "text/html"))

        let list = Simulation.run(
            ListFunctionOperation(
                database: "db", design: "app", function: "csv", view: "by_name", viewDesign: "other",
                options: ViewQueryOptions(keys: ["a"], limit: 2), query: [URLQueryItem(name: "sep", value: ";")]),
            response: SimulatedResponse(status: 200, headers: ["Content-Type": "text/csv"], body: Data("a;1\n".utf8)))
        #expect(requestLine(list.request) == "POST /db/_design/app/_list/csv/other/by_name?limit=2&sep=%3B")
        #expect(list.request?.bodyJSON == ["keys": ["a"]])
        #expect(list.value?.contentType == "text/csv")

        let create = Simulation.run(
            UpdateHandlerOperation(database: "db", design: "app", function: "stamp", body: Data(#"{"x":1}"#.utf8)),
            response: SimulatedResponse(
                status: 201,
                headers: ["X-Couch-Update-NewRev": "1-abc", "X-Couch-Id": "gen", "Content-Type": "text/plain"],
                body: Data("ok".utf8)))
        #expect(requestLine(create.request) == "POST /db/_design/app/_update/stamp")
        #expect(create.request?.headers["Content-Type"] == "application/json")
        let created = try create.result.get()
        #expect(created.headers["X-Couch-Update-NewRev"] == "1-abc")
        #expect(created.value.data == Data("ok".utf8))

        let update = Simulation.run(
            UpdateHandlerOperation(
                database: "db", design: "app", function: "bump", documentID: "d 1", body: Data("n=2".utf8),
                contentType: "application/x-www-form-urlencoded"),
            response: SimulatedResponse(
                status: 409, headers: ["Content-Type": "application/json"],
                body: Data(#"{"error":"conflict","reason":"Document update conflict."}"#.utf8)))
        #expect(requestLine(update.request) == "PUT /db/_design/app/_update/bump/d%201")
        #expect(update.request?.headers["Content-Type"] == "application/x-www-form-urlencoded")
        #expect(update.error?.error == "conflict")
    }
}
