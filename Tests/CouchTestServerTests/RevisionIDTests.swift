import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// The TestServer gives the revision ids CouchDB 3.5.0 gave for the same writes (recorded in
/// `../shared/couchdb-transcripts`: documents.json, changes.json, attachments.json).
@Suite(.ownThreads) struct RevisionIDTests {
    @Test func documentWritesGiveCouchDBsRevisions() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/tx_docs")
        func rev(_ reply: EngineReply) -> String? { reply.json["rev"]?.stringValue }
        #expect(
            rev(engine.send("PUT", "/tx_docs/doc1", json: ["title": "Hello", "count": 1]))
                == "1-1be7d3c6b2f1e03147ca8fdae601830d")
        #expect(
            rev(
                engine.send(
                    "PUT", "/tx_docs/doc1",
                    json: ["_rev": "1-1be7d3c6b2f1e03147ca8fdae601830d", "title": "Hello again", "count": 2]))
                == "2-1aed2226e132481f5c7726ca741df107")
        #expect(
            rev(
                engine.send(
                    "PUT", "/tx_docs/doc1", json: ["title": "via If-Match", "count": 3],
                    headers: [("If-Match", "2-1aed2226e132481f5c7726ca741df107")]))
                == "3-bc263e60b1f08e22a09f6061fa6c9d93")
        #expect(
            rev(engine.send("DELETE", "/tx_docs/doc1", headers: [("If-Match", "3-bc263e60b1f08e22a09f6061fa6c9d93")]))
                == "4-a9839dae25b4b0a621e5cf74c86de579")
        #expect(
            rev(engine.send("PUT", "/tx_docs/doc1", json: ["title": "reborn"])) == "5-61416602fbf86469b215d1bd41816109")
        engine.send("PUT", "/tx_changes")
        #expect(
            rev(engine.send("PUT", "/tx_changes/a", json: ["type": "x", "n": 1]))
                == "1-f5cfa3077faec62918197b00c697e8cd")
        #expect(
            rev(engine.send("PUT", "/tx_changes/b", json: ["type": "y", "n": 2]))
                == "1-94f82410f4bb0a0f700e42d8f269b01d")
    }

    @Test func attachmentWritesGiveCouchDBsRevisions() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/tx_att")
        func rev(_ reply: EngineReply) -> String? { reply.json["rev"]?.stringValue }
        #expect(
            rev(engine.send("PUT", "/tx_att/doc", json: ["kind": "holder"])) == "1-6f779045fa120fa25d6bf2dc96bae018")
        let hello = Data("Hello, CouchDB! Hello, CouchDB! Hello, CouchDB!\n".utf8)
        #expect(
            rev(
                engine.send(
                    "PUT", "/tx_att/doc/hello.txt?rev=1-6f779045fa120fa25d6bf2dc96bae018", body: hello,
                    headers: [("Content-Type", "text/plain")]))
                == "2-37f2f5bf3c2b9d6756e8fca38a839ba8")
        let pixel = try #require(
            Data(
                base64Encoded:
                    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="))
        #expect(
            rev(
                engine.send(
                    "PUT", "/tx_att/doc/pixel.png?rev=2-37f2f5bf3c2b9d6756e8fca38a839ba8", body: pixel,
                    headers: [("Content-Type", "image/png")]))
                == "3-c7ba307a51982d79f8e103f872d5882d")
        #expect(
            rev(engine.send("DELETE", "/tx_att/doc/pixel.png?rev=3-c7ba307a51982d79f8e103f872d5882d"))
                == "4-d5166ec59dc8e7b4c239dd93a7c2e957")
    }

    @Test func erlangTermsOfJSON() {
        var term = ErlangTerm()
        term.json(["a": 1, "b": [true, .null], "c": 2.5, "d": "é", "e": .int(100_000), "f": .int(-5_000_000_000)])
        #expect(
            Array(term.bytes) == [
                104, 1, 108, 0, 0, 0, 6,
                104, 2, 109, 0, 0, 0, 1, 97, 97, 1,
                104, 2, 109, 0, 0, 0, 1, 98, 108, 0, 0, 0, 2, 100, 0, 4, 116, 114, 117, 101, 100, 0, 4, 110, 117, 108,
                108, 106,
                104, 2, 109, 0, 0, 0, 1, 99, 70, 64, 4, 0, 0, 0, 0, 0, 0,
                104, 2, 109, 0, 0, 0, 1, 100, 109, 0, 0, 0, 2, 0xC3, 0xA9,
                104, 2, 109, 0, 0, 0, 1, 101, 98, 0, 1, 0x86, 0xA0,
                104, 2, 109, 0, 0, 0, 1, 102, 110, 5, 1, 0x00, 0xF2, 0x05, 0x2A, 0x01,
                106,
            ])
    }

    /// CouchDB orders revision ids as it holds them: a 32-digit hex hash as 16 bytes, any other as
    /// its text. So `1-9a…` (byte 0x9a) beats `1-zzz` (byte 0x7a), though "zzz" > "9a…" as text.
    @Test func winnersAndConflictsCompareRevisionIDsAsCouchDBHoldsThem() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let hex = "1-9a" + String(repeating: "0", count: 30)
        for rev in ["1-zzz", hex] {
            engine.send(
                "PUT", "/db/doc?new_edits=false", json: ["_id": "doc", "_rev": .string(rev), "v": .string(rev)])
        }
        let doc = engine.send("GET", "/db/doc?conflicts=true").json
        #expect(doc["_rev"] == .string(hex))
        #expect(doc["_conflicts"] == ["1-zzz"])
    }
}

/// Differences a client meets without JavaScript, now as CouchDB 3.5 behaves.
@Suite(.ownThreads) struct EngineFidelityTests {
    @Test func malformedRevisionIs400EvenForAMissingDocument() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        engine.send("PUT", "/db/doc", json: ["v": 1])
        for path in ["/db/doc?rev=garbage", "/db/missing?rev=x-1", "/db/doc?rev=1"] {
            let reply = engine.send("GET", path)
            #expect(reply.status == 400, "\(path)")
            #expect(reply.json == ["error": "bad_request", "reason": "Invalid rev format"], "\(path)")
        }
    }

    @Test func compactionRunsInTheBackgroundAndDropsOldBodies() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let first = engine.send("PUT", "/db/doc", json: ["v": 1]).json["rev"]!.stringValue!
        let second = engine.send("PUT", "/db/doc", json: ["_rev": .string(first), "v": 2]).json["rev"]!.stringValue!
        #expect(engine.send("GET", "/db/doc?rev=\(first)").status == 200)
        #expect(engine.send("POST", "/db/_compact", json: [:]).status == 202)
        #expect(engine.send("GET", "/db").json["compact_running"] == true)
        var waited = 0.0
        while engine.send("GET", "/db").json["compact_running"] != false, waited < 10 {
            Thread.sleep(forTimeInterval: 0.02)
            waited += 0.02
        }
        #expect(engine.send("GET", "/db").json["compact_running"] == false)
        let old = engine.send("GET", "/db/doc?rev=\(first)")
        #expect(old.status == 404)
        #expect(old.json == ["error": "not_found", "reason": "missing"])
        #expect(engine.send("GET", "/db/doc?rev=\(second)").json["v"] == 2)
        let history = engine.send("GET", "/db/doc?revs=true").json["_revisions"]?["ids"]?.arrayValue ?? []
        #expect(history.count == 2)  // the ids stay
    }
}

@Suite(.ownThreads) struct SystemDatabaseTests {
    @Test func usersHasItsAuthDesignDocument() throws {
        let engine = try ServerEngine(options: testOptions())
        let ddoc = engine.send("GET", "/_users/_design/_auth").json
        #expect(ddoc["language"] == "javascript")
        #expect(
            ddoc["validate_doc_update"]?.stringValue?.hasPrefix("function(newDoc, oldDoc, userCtx, secObj)") == true)
        // Recreated with the database, as CouchDB's auth cache does.
        engine.send("DELETE", "/_users")
        engine.send("PUT", "/_users")
        #expect(engine.send("GET", "/_users/_design/_auth").status == 200)
    }
}

@Suite(.ownThreads) struct DesignInfoTests {
    /// chttpd_view:handle_temp_view_req answers every method 410 gone (after the database is opened).
    @Test func temporaryViewsAreGone() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let gone = engine.send("POST", "/db/_temp_view", json: ["map": "function(doc) { emit(null, 1); }"])
        #expect(gone.status == 410)
        #expect(gone.json == ["error": "gone", "reason": "Temporary views are not supported in CouchDB"])
        #expect(engine.send("GET", "/db/_temp_view").status == 410)
        #expect(engine.send("POST", "/nodb/_temp_view", json: [:]).status == 404)
    }

    @Test func designInfoHasCollatorVersions() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        engine.send("PUT", "/db/_design/d", json: ["views": ["v": ["map": "function(doc) { emit(doc._id, 1); }"]]])
        let index = engine.send("GET", "/db/_design/d/_info").json["view_index"]
        #expect(index?["collator_versions"]?.arrayValue?.isEmpty == false)
        // fabric_group_info:merge_results keeps only the keys it merges: no update_options.
        #expect(index?["update_options"] == nil)
        #expect(
            index?.objectValue?.map(\.0) == [
                "updates_pending", "waiting_commit", "waiting_clients", "updater_running", "update_seq", "sizes",
                "signature", "purge_seq", "language", "compact_running", "collator_versions",
            ])
        #expect(index?["language"] == "javascript")
    }
}

/// JavaScript in design documents, run as CouchDB runs it.
@Suite(.ownThreads) struct EngineJavaScriptTests {
    @Test func designDocumentsWhoseFunctionsDoNotCompileAreRefused() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let notAFunction = engine.send("PUT", "/db/_design/a", json: ["views": ["v": ["map": "'not a function'"]]])
        #expect(notAFunction.status == 400)
        #expect(notAFunction.json["error"] == "compilation_error")
        let badReduce = engine.send(
            "PUT", "/db/_design/b",
            json: ["views": ["v": ["map": "function(doc) { emit(1, 1); }", "reduce": "function(k, v) { return"]]])
        #expect(badReduce.json["error"] == "compilation_error")
        let badValidate = engine.send("PUT", "/db/_design/c", json: ["validate_doc_update": "function(n) { if ("])
        #expect(badValidate.json["error"] == "compilation_error")
        #expect(
            engine.send("PUT", "/db/_design/d", json: ["filters": ["f": "function(doc, req) { return true; }"]]).status
                == 201)
    }

    @Test func validateDocUpdateForbidsAndRequiresAuthorization() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        engine.send(
            "PUT", "/db/_design/rules",
            json: [
                "validate_doc_update": """
                function(newDoc, oldDoc, userCtx, secObj) {
                  if (newDoc._deleted) return;
                  if (!newDoc.title) throw({forbidden: 'A title is required.'});
                  if (newDoc.locked && userCtx.roles.indexOf('_admin') === -1) throw({unauthorized: 'Admins only.'});
                  if (oldDoc && oldDoc.title !== newDoc.title) throw({forbidden: 'Titles do not change.'});
                }
                """
            ])
        #expect(engine.send("PUT", "/db/ok", json: ["title": "t"]).status == 201)
        let untitled = engine.send("PUT", "/db/bad", json: ["n": 1])
        #expect(untitled.status == 403)
        #expect(untitled.json == ["error": "forbidden", "reason": "A title is required."])
        let rev = engine.send("GET", "/db/ok").json["_rev"]!
        let renamed = engine.send("PUT", "/db/ok", json: ["_rev": rev, "title": "other"])
        #expect(renamed.json["reason"] == "Titles do not change.")
        let bulk = engine.send("POST", "/db/_bulk_docs", json: ["docs": [["_id": "x", "title": "y"], ["_id": "z"]]])
            .json
        #expect(bulk.arrayValue?.map { $0["error"] } == [nil, "forbidden"])
        #expect(engine.send("DELETE", "/db/ok?rev=\(rev.stringValue!)").status == 200)
    }

    @Test func javascriptReduceWithRereduceAndFilters() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let docs: [JSON] = (0..<250).map {
            ["_id": .string(String(format: "d%03d", $0)), "n": .int(Int64($0)), "odd": .bool($0 % 2 == 1)]
        }
        engine.send("POST", "/db/_bulk_docs", json: ["docs": .array(docs)])
        engine.send(
            "PUT", "/db/_design/app",
            json: [
                "views": [
                    "total": [
                        "map": "function(doc) { emit(doc.odd, doc.n); }",
                        // Counts its rereduce calls in the result, to see that it was called.
                        "reduce": """
                        function(keys, values, rereduce) {
                          if (rereduce) { return {sum: sum(values.map(function (v) { return v.sum; })), rereduced: true}; }
                          return {sum: sum(values), rereduced: false};
                        }
                        """,
                    ]
                ],
                "filters": ["odd": "function(doc, req) { return doc.odd === true && req.query.min <= doc.n; }"],
            ])
        let all = engine.send("GET", "/db/_design/app/_view/total").json["rows"]?.arrayValue?.first?["value"]
        #expect(all?["sum"] == .int(Int64((0..<250).reduce(0, +))))
        #expect(all?["rereduced"] == true)  // 250 rows: reduced in chunks, then rereduced
        let grouped = engine.send("GET", "/db/_design/app/_view/total?group=true").json["rows"]?.arrayValue ?? []
        #expect(grouped.count == 2)
        let filtered = engine.send("GET", "/db/_changes?filter=app/odd&min=240").json["results"]?.arrayValue ?? []
        #expect(Set(filtered.compactMap { $0["id"]?.stringValue }) == ["d241", "d243", "d245", "d247", "d249"])
        let byView = engine.send("GET", "/db/_changes?filter=_view&view=app/total").json["results"]?.arrayValue ?? []
        #expect(byView.count == 250)
    }
}
