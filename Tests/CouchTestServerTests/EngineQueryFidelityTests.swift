import CouchQuery
import Foundation
import HTTPWire
import Testing

@testable import CouchTestServer

/// Differences from CouchDB 3.5 that other clients' test suites found (issue 25, item 5).
@Suite struct EngineQueryFidelityTests {
    private func engineWithNames() throws -> CouchEngine {
        let engine = try CouchEngine(options: testOptions())
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
