import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// The compiled design documents the engine keeps: one query server per design document in use,
/// the one of a replaced revision let go of (its interpreter and everything it made with it).
@Suite(.ownThreads) struct EngineJavaScriptCacheTests {
    @Test func aReplacedDesignDocumentRevisionsQueryServerIsLetGoOf() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        engine.send("PUT", "/db/a", json: ["n": 1])
        var rev: String?
        for round in 0..<12 {
            var ddoc: JSON = [
                "views": ["v": ["map": .string("function (doc) { emit(doc.n, \(round)) }")]],
                "validate_doc_update": "function (newDoc) { if (newDoc.bad) throw({forbidden: 'bad'}) }",
            ]
            if let rev { ddoc = ddoc.setting("_rev", .string(rev)) }
            let put = engine.send("PUT", "/db/_design/d", json: ddoc)
            #expect(put.status == 201)
            rev = put.json["rev"]?.stringValue
            // Use the revision: its view and its validation.
            let rows = engine.send("GET", "/db/_design/d/_view/v").json["rows"]?.arrayValue
            #expect(rows?.first?["value"]?.intValue == Int64(round))
            #expect(engine.send("PUT", "/db/b\(round)", json: ["bad": true]).status == 403)
        }
        #expect(engine.store.javaScript.serverCount == 1)
        // Another design document has one of its own.
        engine.send("PUT", "/db/_design/e", json: ["views": ["v": ["map": "function (doc) { emit(1, 1) }"]]])
        #expect(engine.send("GET", "/db/_design/e/_view/v").status == 200)
        #expect(engine.store.javaScript.serverCount == 2)
    }
}
