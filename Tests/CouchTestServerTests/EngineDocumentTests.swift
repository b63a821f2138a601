import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

@Suite(.ownThreads) struct EngineDocumentTests {
    @Test func revisionsChainAndConflictsAreDetected() throws {
        let engine = try ServerEngine(options: testOptions())
        #expect(engine.send("PUT", "/db").status == 201)
        let r1 = engine.send("PUT", "/db/doc", json: ["v": 1])
        #expect(r1.status == 201)
        let rev1 = try #require(r1.json["rev"]?.stringValue)
        #expect(rev1.hasPrefix("1-") && rev1.count == 34)
        #expect(r1.headers["ETag"] == "\"\(rev1)\"")
        // Same body, same parent: same revision (deterministic like CouchDB).
        #expect(engine.send("PUT", "/other", json: nil).status == 201)
        #expect(engine.send("PUT", "/other/doc", json: ["v": 1]).json["rev"]?.stringValue == rev1)

        #expect(engine.send("PUT", "/db/doc", json: ["v": 2]).status == 409)
        let r2 = engine.send("PUT", "/db/doc", json: ["_rev": .string(rev1), "v": 2])
        let rev2 = try #require(r2.json["rev"]?.stringValue)
        #expect(rev2.hasPrefix("2-"))
        #expect(engine.send("PUT", "/db/doc", json: ["_rev": .string(rev1), "v": 3]).json["error"] == "conflict")

        let revs = engine.send("GET", "/db/doc?revs=true").json
        #expect(revs["_revisions"]?["start"] == 2)
        #expect(revs["_revisions"]?["ids"]?.arrayValue?.count == 2)
        #expect(engine.send("GET", "/db/doc?rev=\(rev1)").json["v"] == 1)
        #expect(engine.send("GET", "/db/doc", headers: [("If-None-Match", "\"\(rev2)\"")]).status == 304)
    }

    @Test func replicatedBranchesPickTheWinnerLikeCouchDB() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let write = engine.send(
            "POST", "/db/_bulk_docs",
            json: [
                "new_edits": false,
                "docs": [
                    ["_id": "c", "_rev": "1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "v": "a"],
                    ["_id": "c", "_rev": "1-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "v": "b"],
                    [
                        "_id": "r", "_rev": "3-cccccccccccccccccccccccccccccccc",
                        "_revisions": [
                            "start": 3,
                            "ids": ["cccccccccccccccccccccccccccccccc", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"],
                        ],
                    ],
                ],
            ])
        #expect(write.status == 201)
        #expect(write.json == [])
        let doc = engine.send("GET", "/db/c?conflicts=true").json
        #expect(doc["_rev"] == "1-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
        #expect(doc["_conflicts"] == ["1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"])
        // Deleting the winner makes the other branch win.
        let del = engine.send("DELETE", "/db/c?rev=1-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
        #expect(del.status == 200)
        let after = engine.send("GET", "/db/c?deleted_conflicts=true").json
        #expect(after["_rev"] == "1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
        #expect(after["_deleted_conflicts"]?.arrayValue?.count == 1)
        let info = engine.send("GET", "/db/r?revs_info=true").json
        #expect(info["_revs_info"]?.arrayValue?.map { $0["status"] } == ["available", "missing"])
        let diff = engine.send("POST", "/db/_revs_diff", json: ["r": ["3-cccccccccccccccccccccccccccccccc", "4-dddd"]])
            .json
        #expect(diff["r"]?["missing"] == ["4-dddd"])
        #expect(diff["r"]?["possible_ancestors"] == ["3-cccccccccccccccccccccccccccccccc"])
    }

    @Test func tombstonesAndRecreation() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let rev1 = engine.send("PUT", "/db/d", json: ["a": 1]).json["rev"]!.stringValue!
        let del = engine.send("DELETE", "/db/d", headers: [("If-Match", rev1)])
        #expect(del.status == 200)
        #expect(engine.send("GET", "/db/d").json["reason"] == "deleted")
        let reborn = engine.send("PUT", "/db/d", json: ["a": 2])
        #expect(reborn.json["rev"]?.stringValue?.hasPrefix("3-") == true)
        let info = engine.send("GET", "/db").json
        #expect(info["doc_count"] == 1)
        #expect(info["doc_del_count"] == 0)
    }

    @Test func localDocumentsAndAllDocs() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        #expect(engine.send("PUT", "/db/_local/x", json: ["s": 1]).json["rev"] == "0-1")
        #expect(engine.send("PUT", "/db/_local/x", json: ["_rev": "0-1", "s": 2]).json["rev"] == "0-2")
        engine.send("POST", "/db/_bulk_docs", json: ["docs": [["_id": "b"], ["_id": "a"], ["_id": "c"]]])
        let all = engine.send("GET", "/db/_all_docs?startkey=%22b%22").json
        #expect(all["total_rows"] == 3)
        #expect(all["offset"] == 1)
        #expect(all["rows"]?.arrayValue?.map { $0["id"] } == ["b", "c"])
        let local = engine.send("GET", "/db/_local_docs").json
        #expect(local["total_rows"] == .null)
        #expect(local["rows"]?.arrayValue?.count == 1)
        #expect(engine.send("DELETE", "/db/_local/x?rev=0-2").json["rev"] == "0-0")
    }

    /// CouchDB 3.5 checks no conflict on a `_local` document (answers recorded from the real server):
    /// `0-N` becomes `0-(N+1)` whatever is stored, a deletion is `0-0` with any well-formed `rev`.
    @Test func localDocumentsHaveNoConflicts() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        #expect(engine.send("PUT", "/db/_local/a", json: ["v": 1]).json["rev"] == "0-1")
        let stale = engine.send("PUT", "/db/_local/a", json: ["_rev": "0-7", "v": 2])
        #expect(stale.status == 201)
        #expect(stale.json["rev"] == "0-8")
        #expect(engine.send("PUT", "/db/_local/b", json: ["_rev": "0-5"]).json["rev"] == "0-6")
        #expect(engine.send("PUT", "/db/_local/b?rev=0-4", json: [:]).json["rev"] == "0-5")
        #expect(engine.send("PUT", "/db/_local/b", json: ["_rev": "0--5"]).json["rev"] == "0--4")
        let ifMatch = engine.send("PUT", "/db/_local/d", json: [:], headers: [("If-Match", "\"0-9\"")])
        #expect(ifMatch.json["rev"] == "0-10")
        for bad in ["1-abc", "0-xyz", "0-9223372036854775807"] {
            let response = engine.send("PUT", "/db/_local/c", json: ["_rev": .string(bad)])
            #expect(response.status == 500, "\(bad)")
            #expect(response.json["error"] == "error", "\(bad)")
            #expect(response.json["reason"] == "Invalid rev format", "\(bad)")
        }
        let junk = engine.send("PUT", "/db/_local/c", json: ["_rev": "junk"])
        #expect(junk.status == 400)
        #expect(junk.json["reason"] == "Invalid rev format")
        #expect(engine.send("GET", "/db/_local/c").status == 404)
        // Deleting: any well-formed rev; a document that is not there is 404 through DELETE but 200 through PUT.
        let deleted = engine.send("DELETE", "/db/_local/b?rev=0-1")
        #expect(deleted.status == 200)
        #expect(deleted.json["rev"] == "0-0")
        #expect(engine.send("DELETE", "/db/_local/b?rev=0-1").status == 404)
        #expect(engine.send("DELETE", "/db/_local/a?rev=junk").status == 400)
        #expect(engine.send("DELETE", "/db/_local/a?rev=3-abc").json["rev"] == "0-0")
        let ghost = engine.send("PUT", "/db/_local/g", json: ["_deleted": true])
        #expect(ghost.status == 200)
        #expect(ghost.json["rev"] == "0-0")
        #expect(engine.send("PUT", "/db/_local/g", json: ["a": 1]).json["rev"] == "0-1")
        let bulk = engine.send(
            "POST", "/db/_bulk_docs",
            json: [
                "docs": [
                    ["_id": "_local/e", "_rev": "0-3"], ["_id": "_local/f", "_rev": "1-1"],
                    ["_id": "_local/h", "_deleted": true],
                ]
            ])
        let rows = bulk.json.arrayValue ?? []
        #expect(rows.count == 3)
        #expect(rows.first?["rev"] == "0-4")
        #expect(rows.dropFirst().first?["error"] == "error")
        #expect(rows.dropFirst().first?["reason"] == "Invalid rev format")
        #expect(rows.last?["rev"] == "0-0")
    }

    @Test func attachmentsRoundTripBinarySafe() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let bytes = Data((0..<256).map { UInt8($0) })
        let put = engine.send(
            "PUT", "/db/doc/dir/blob.bin", body: bytes, headers: [("Content-Type", "application/octet-stream")])
        #expect(put.status == 201)
        let rev = put.json["rev"]!.stringValue!
        let get = engine.send("GET", "/db/doc/dir/blob.bin")
        #expect(get.data == bytes)
        #expect(get.headers["Accept-Ranges"] == "bytes")
        let range = engine.send("GET", "/db/doc/dir/blob.bin", headers: [("Range", "bytes=10-19")])
        #expect(range.status == 206)
        #expect(range.data == bytes.subdata(in: 10..<20))
        let stub = engine.send("GET", "/db/doc").json["_attachments"]?["dir/blob.bin"]
        #expect(stub?["length"] == 256)
        #expect(stub?["stub"] == true)
        // Updating with the stub keeps the attachment.
        let update = engine.send(
            "PUT", "/db/doc", json: ["_rev": .string(rev), "x": 1, "_attachments": ["dir/blob.bin": ["stub": true]]])
        #expect(update.status == 201)
        #expect(engine.send("GET", "/db/doc/dir/blob.bin").data == bytes)
        let inline = engine.send("GET", "/db/doc?attachments=true").json["_attachments"]?["dir/blob.bin"]?["data"]
        #expect(inline?.stringValue == bytes.base64EncodedString())
    }
}

@Suite(.ownThreads) struct EngineRevsLimitTests {
    @Test func revsLimitStemsHistory() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        engine.send("PUT", "/db/_revs_limit", body: Data("3".utf8), headers: [("Content-Type", "application/json")])
        var rev = engine.send("PUT", "/db/d", json: ["n": 0]).json["rev"]!.stringValue!
        for n in 1...6 {
            rev = engine.send("PUT", "/db/d", json: ["_rev": .string(rev), "n": .int(Int64(n))]).json["rev"]!
                .stringValue!
        }
        let doc = engine.send("GET", "/db/d?revs=true").json
        #expect(doc["_revisions"]?["start"] == 7)
        #expect(doc["_revisions"]?["ids"]?.arrayValue?.count == 3)
        #expect(
            engine.send(
                "PUT", "/db/_revs_limit", body: Data("\"x\"".utf8), headers: [("Content-Type", "application/json")]
            ).status == 500)
    }
}

@Suite(.ownThreads) struct EngineQueryViewTests {
    @Test func mangoStyleViewsWithBuiltInReduces() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        engine.send(
            "POST", "/db/_bulk_docs",
            json: [
                "docs": [
                    ["_id": "a", "t": "x", "n": 1], ["_id": "b", "t": "y", "n": 2], ["_id": "c", "t": "x", "n": 3],
                    ["_id": "d"],
                ]
            ])
        engine.send(
            "PUT", "/db/_design/q",
            json: [
                "language": "query",
                "views": [
                    "by_t": [
                        "map": ["fields": ["t": "asc"]], "reduce": "_count", "options": ["def": ["fields": ["t"]]],
                    ]
                ],
            ])
        let map = engine.send("GET", "/db/_design/q/_view/by_t?reduce=false").json
        #expect(map["total_rows"] == 3)
        #expect(map["rows"]?.arrayValue?.map { $0["id"] } == ["a", "c", "b"])
        #expect(map["rows"]?.arrayValue?.first?["key"] == ["x"])
        let reduced = engine.send("GET", "/db/_design/q/_view/by_t").json
        #expect(reduced["rows"] == [["key": nil, "value": 3]])
        let grouped = engine.send("GET", "/db/_design/q/_view/by_t?group=true").json
        #expect(grouped["rows"] == [["key": ["x"], "value": 2], ["key": ["y"], "value": 1]])
        let keyed = engine.send("GET", "/db/_design/q/_view/by_t?reduce=false&key=%5B%22y%22%5D&include_docs=true").json
        #expect(keyed["rows"]?.arrayValue?.first?["doc"]?["n"] == 2)
        // JavaScript views run (CouchJS).
        engine.send("PUT", "/db/_design/js", json: ["views": ["v": ["map": "function(doc) { emit(doc._id, 1); }"]]])
        let js = engine.send("GET", "/db/_design/js/_view/v")
        #expect(js.status == 200)
        #expect(js.json["total_rows"] == 4)  // every document, the one without `t` too
        #expect(engine.send("GET", "/db/_design/js/_view/nope").json["reason"] == "missing_named_view")
    }
}
