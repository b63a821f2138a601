import CouchQuery
import Foundation
import HTTPWire
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// Hostile design documents (they arrive by replication from any server) through the engine:
/// a function that would have trapped, hung or overflowed the stack is that document's or that
/// request's error, and the server goes on answering (issue 24, item 4).
@Suite(.ownThreads) struct EngineJavaScriptFaultTests {
    @Test func hostileValidateDocUpdateFailsTheWriteNotTheServer() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        // Stored without complaint: it compiles. Before the fix, the next PUT trapped the process
        // ("Double value cannot be converted to Int because it is either infinite or NaN").
        let stored = engine.send(
            "PUT", "/db/_design/v",
            json: [
                "validate_doc_update": """
                function (newDoc) {
                  if (newDoc.kind == 'trap') { (1).toFixed(Infinity); 'abc'.charAt(Infinity); (255).toString(1); }
                  if (newDoc.kind == 'forbidden') { throw({forbidden: 'no ' + String.fromCharCode(NaN).length}); }
                }
                """
            ])
        #expect(stored.status == 201)
        let trapped = engine.send("PUT", "/db/a", json: ["kind": "trap"])
        #expect(trapped.status == 500)
        #expect(trapped.json["error"] == "unknown_error")
        #expect(trapped.text.contains("RangeError"))
        #expect(engine.send("PUT", "/db/b", json: ["kind": "forbidden"]).json["reason"] == "no 1")
        #expect(engine.send("PUT", "/db/c", json: ["kind": "fine"]).status == 201)
        #expect(engine.send("GET", "/db/a").status == 404)
        #expect(engine.send("GET", "/db").json["doc_count"] == 2)  // the design document and c
    }

    @Test func aMapFunctionThatFailsSkipsThatDocument() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        engine.send(
            "POST", "/db/_bulk_docs",
            json: [
                "docs": [["_id": "a", "n": 1], ["_id": "b", "n": 2], ["_id": "c", "n": 3], ["_id": "d", "n": 4]]
            ])
        let stored = engine.send(
            "PUT", "/db/_design/m",
            json: [
                "views": [
                    "v": [
                        "map": """
                        function (doc) {
                          if (doc.n == 2) { emit(new Date(NaN, 0).getTime(), String.fromCharCode(NaN)); (1).toFixed(Infinity); }
                          if (doc.n == 3) { 'a'.padStart(1e9, 'b'); }
                          emit(doc._id, 'abc'.charAt(Infinity));
                        }
                        """
                    ]
                ]
            ])
        #expect(stored.status == 201)
        let view = engine.send("GET", "/db/_design/m/_view/v")
        #expect(view.status == 200)
        #expect(view.json["rows"]?.arrayValue?.map { $0["id"] } == ["a", "d"])
        #expect(view.json["rows"]?.arrayValue?.first?["value"] == "")
    }

    @Test func deeplyNestedFunctionsAreCompilationErrors() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        // Before the fix: a stack overflow (SIGSEGV) while the design document was checked.
        let source =
            "function (doc) { emit(" + String(repeating: "[", count: 100_000)
            + String(repeating: "]", count: 100_000) + ") }"
        let refused = engine.send("PUT", "/db/_design/deep", json: ["views": ["v": ["map": .string(source)]]])
        #expect(refused.status == 400)
        #expect(refused.json["error"] == "compilation_error")
        #expect(refused.text.contains("nested too deeply"))
        #expect(engine.send("GET", "/db").status == 200)
    }

    @Test func aShowFunctionCannotSmuggleHeaders() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        engine.send(
            "PUT", "/db/_design/s",
            json: [
                "shows": [
                    "h": """
                    function (doc, req) {
                      return {body: 'ok', headers: {'X-Ok': '1', 'X-Bad': 'a\\r\\nSet-Cookie: evil=1',
                        'Content-Length': '0', 'Bad Name': 'x', 'Transfer-Encoding': 'chunked'}};
                    }
                    """
                ]
            ])
        let shown = engine.send("GET", "/db/_design/s/_show/h")
        #expect(shown.status == 200)
        #expect(shown.text == "ok")
        #expect(shown.headers["X-Ok"] == "1")
        #expect(shown.headers["X-Bad"] == nil)
        #expect(shown.headers["Set-Cookie"] == nil)
        #expect(shown.headers["Bad Name"] == nil)
        #expect(shown.headers["Transfer-Encoding"] == nil)
        #expect(shown.headers["Content-Length"] != "0")
    }
}
