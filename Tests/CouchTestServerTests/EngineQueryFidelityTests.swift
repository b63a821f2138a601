import CouchQuery
import Foundation
import HTTPWire
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// Differences from CouchDB 3.5 that other clients' test suites found (issue 25, item 5).
@Suite(.ownThreads) struct EngineQueryFidelityTests {
    private func engineWithNames() throws -> ServerEngine {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        engine.send(
            "POST", "/db/_bulk_docs",
            json: [
                "docs": [
                    ["_id": "a", "name": "ba"], ["_id": "b", "name": "bar"], ["_id": "c", "name": "baz"],
                    ["_id": "d", "name": "bb"], ["_id": "e", "name": "b"],
                ]
            ])
        engine.send(
            "PUT", "/db/_design/app",
            json: ["views": ["by_name": ["map": "function(doc) { if (doc.name) { emit(doc.name, null); } }"]]])
        return engine
    }

    /// `endkey="ba\uffff"` is the usual prefix query: CouchDB's ICU collator gives U+FFFF the highest
    /// primary weight, so it sorts after every letter (before the fix it was ignored and the range
    /// ended at "ba").
    @Test func aKeyRangeEndingInUFFFFIsAPrefixQuery() throws {
        let engine = try engineWithNames()
        let range = engine.send("GET", "/db/_design/app/_view/by_name?startkey=%22ba%22&endkey=%22ba%EF%BF%BF%22")
        #expect(range.status == 200)
        #expect(range.json["rows"]?.arrayValue?.compactMap { $0["key"]?.stringValue } == ["ba", "bar", "baz"])
        let descending = engine.send(
            "GET", "/db/_design/app/_view/by_name?descending=true&startkey=%22ba%EF%BF%BF%22&endkey=%22ba%22")
        #expect(descending.json["rows"]?.arrayValue?.compactMap { $0["key"]?.stringValue } == ["baz", "bar", "ba"])
    }

    @Test func collationWeighsUFFFFHighestAndUFFFELowest() {
        #expect(Collation.compareStrings("ba\u{FFFF}", "baz") > 0)
        #expect(Collation.compareStrings("ba\u{FFFF}", "ba") > 0)
        #expect(Collation.compareStrings("ba\u{FFFF}", "bb") < 0)
        #expect(Collation.compareStrings("ba\u{FFFF}", "ba\u{4E00}") > 0)
        #expect(Collation.compareStrings("ba\u{FFFE}", "ba") > 0)
        #expect(Collation.compareStrings("ba\u{FFFE}", "ba ") < 0)
        #expect(Collation.compare(["ba\u{FFFF}"], ["bazooka", 1]) > 0)
    }
}

extension EngineQueryFidelityTests {
    /// couch_mrview_http:parse_boolean lowercases the value: `True`, `TRUE` and `fAlSe` are booleans,
    /// anything else is 400 query_parse_error (before the fix, views and _all_docs took only the
    /// literal `true` and ignored other values).
    @Test func viewBooleanParametersIgnoreCaseAndRefuseOtherValues() throws {
        let engine = try engineWithNames()
        engine.send(
            "PUT", "/db/_design/r",
            json: ["views": ["count": ["map": "function(doc) { emit(doc.name.length, 1); }", "reduce": "_count"]]])
        let grouped = engine.send("GET", "/db/_design/r/_view/count?group=True")
        #expect(grouped.json["rows"] == [["key": 1, "value": 1], ["key": 2, "value": 2], ["key": 3, "value": 2]])
        let unreduced = engine.send("GET", "/db/_design/r/_view/count?reduce=FALSE&include_docs=True&limit=1")
        #expect(unreduced.json["rows"]?.arrayValue?.first?["doc"]?["name"] == "b")
        let descending = engine.send(
            "GET", "/db/_design/app/_view/by_name?descending=TRUE&inclusive_end=False&endkey=%22bar%22")
        #expect(descending.json["rows"]?.arrayValue?.compactMap { $0["key"]?.stringValue } == ["bb", "baz"])
        let docs = engine.send("GET", "/db/_all_docs?include_docs=True&descending=TRUE&limit=1")
        #expect(docs.json["rows"]?.arrayValue?.first?["doc"]?["name"] == "b")
        #expect(engine.send("GET", "/_all_dbs?descending=True").json == ["db", "_users", "_replicator"])

        for (path, shown) in [
            ("/db/_design/r/_view/count?group=yes", "\"yes\""),
            ("/db/_all_docs?include_docs=1", "\"1\""),
            ("/db/_design_docs?descending=", "[]"),
            ("/db/_all_docs?conflicts=%22t%5C%22%22", "\"\\\"t\\\\\\\"\\\"\""),
            ("/_all_dbs?descending=nope", "\"nope\""),
        ] {
            let refused = engine.send("GET", path)
            #expect(refused.status == 400, "\(path)")
            #expect(
                refused.json == [
                    "error": "query_parse_error", "reason": .string("Invalid boolean parameter: " + shown),
                ],
                "\(path)")
        }
        let posted = engine.send(
            "POST", "/db/_design/app/_view/by_name", json: ["descending": "True", "limit": 1])
        #expect(posted.json["rows"]?.arrayValue?.first?["key"] == "bb")
        let postedBad = engine.send("POST", "/db/_all_docs", json: ["include_docs": "maybe"])
        #expect(postedBad.json["reason"] == "Invalid boolean parameter: \"maybe\"")
    }

    /// `_changes` and document reads compare with the literal `true` (chttpd_db's parse_changes_query
    /// and parse_doc_query): other values are false, never an error.
    @Test func changesAndDocumentFlagsStayLiteral() throws {
        let engine = try engineWithNames()
        let changes = engine.send("GET", "/db/_changes?include_docs=True&descending=yes")
        #expect(changes.status == 200)
        #expect(changes.json["results"]?.arrayValue?.first?["doc"] == nil)
        #expect(changes.json["results"]?.arrayValue?.count == 6)
        let doc = engine.send("GET", "/db/a?revs=True")
        #expect(doc.status == 200)
        #expect(doc.json["_revisions"] == nil)
    }
}

extension EngineQueryFidelityTests {
    /// chttpd_show:send_doc_update_response saves only when the first element is an object; for
    /// `null` (or any other value) it answers 200 with the response, which render.js turns from a
    /// string into `{body: …}` (text/html) and chttpd_external sends as JSON for `{json: …}`.
    @Test func anUpdateFunctionReturningNullAnswersItsResponse() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let stored = engine.send(
            "PUT", "/db/_design/u",
            json: [
                "updates": [
                    "text": "function(doc, req) { return [null, 'nothing saved']; }",
                    "json": "function(doc, req) { return [null, {json: {ok: true, seen: doc ? doc._id : null}}]; }",
                    "coded":
                        "function(doc, req) { return [null, {code: 202, headers: {'X-Note': 'n'}, body: 'queued'}]; }",
                    "string": "function(doc, req) { return ['not a document', 'ignored']; }",
                ]
            ])
        #expect(stored.status == 201)
        let text = engine.send("POST", "/db/_design/u/_update/text")
        #expect(text.status == 200)
        #expect(text.text == "nothing saved")
        #expect(text.headers["Content-Type"] == "text/html; charset=utf-8")
        #expect(text.headers["X-Couch-Update-NewRev"] == nil)
        engine.send("PUT", "/db/a", json: ["n": 1])
        let json = engine.send("PUT", "/db/_design/u/_update/json/a")
        #expect(json.status == 200)
        #expect(json.json == ["ok": true, "seen": "a"])
        #expect(json.headers["Content-Type"] == "application/json")
        let coded = engine.send("POST", "/db/_design/u/_update/coded")
        #expect(coded.status == 202)
        #expect(coded.text == "queued")
        #expect(coded.headers["X-Note"] == "n")
        let string = engine.send("POST", "/db/_design/u/_update/string")
        #expect(string.status == 200)
        #expect(string.text == "ignored")
        #expect(engine.send("GET", "/db").json["doc_count"] == 2)  // the design document and a
    }
}
