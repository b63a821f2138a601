import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// Numbers at the ends of their range, from a client, a replication peer or a cookie, meet every place the engine
/// does arithmetic with them: each is a clear error (or an answer), never a trap that takes the server, or an app
/// embedding the store, down. Each case here crashed the test process before its fix.
@Suite(.ownThreads) struct HostileNumberTests {
    private func withEngine(_ body: (ServerEngine) throws -> Void) throws {
        let engine = try ServerEngine(options: testOptions())
        defer { engine.close() }
        engine.send("PUT", "/db")
        try body(engine)
    }

    @Test("An AuthSession cookie whose time is at either end of Int is not a session (and no trap)")
    func cookieTimes() throws {
        try withEngine { engine in
            for time in ["7FFFFFFFFFFFFFFF", "-8000000000000000", "FFFFFFFFFFFFFFFFFFFF"] {
                let reply = engine.send(
                    "GET", "/_session", auth: .cookie(Crypto.base64URL(Data("admin:\(time):x".utf8))))
                #expect(reply.status == 200, "\(time): \(reply.text)")
                #expect(reply.json["userCtx"]?["name"] == .null, "\(time): \(reply.text)")
            }
        }
    }

    @Test("_revisions.start outside 0…2^62 is a doc_validation error, in a PUT and in _bulk_docs")
    func revisionsStart() throws {
        try withEngine { engine in
            for start: Int64 in [.min, -1, .max, 1 << 62] {
                let revisions: JSON = ["start": .int(start), "ids": ["a", "b"]]
                let put = engine.send(
                    "PUT", "/db/d?new_edits=false", json: ["_rev": .string("\(start)-a"), "_revisions": revisions])
                #expect(put.status == 400, "\(start): \(put.text)")
                let bulk = engine.send(
                    "POST", "/db/_bulk_docs",
                    json: ["new_edits": false, "docs": [["_id": "d", "_revisions": revisions]]])
                #expect(bulk.status == 400 && bulk.json["error"] == "doc_validation", "\(start): \(bulk.text)")
            }
            // A path longer than its start (generations below 1): refused, not a trap.
            let short = engine.send(
                "POST", "/db/_bulk_docs",
                json: [
                    "new_edits": false, "docs": [["_id": "d", "_revisions": ["start": 1, "ids": ["a", "b", "c"]]]],
                ])
            #expect(
                (400..<500).contains(short.status) || short.json.arrayValue?.first?["error"] != nil, "\(short.text)")
            #expect(engine.send("GET", "/db").json["doc_count"] == 0)
        }
    }

    @Test("A revision generation past 2^62 is refused; one at the limit is stored, and editing it is refused")
    func generationLimit() throws {
        try withEngine { engine in
            let limit = Int.max >> 1
            for rev in ["\(Int.max)-a", "\(limit + 1)-a", "99999999999999999999-a"] {
                let reply = engine.send(
                    "POST", "/db/_bulk_docs", json: ["new_edits": false, "docs": [["_id": "x", "_rev": .string(rev)]]])
                #expect(reply.status == 400 || reply.json.arrayValue?.first?["error"] != nil, "\(rev): \(reply.text)")
                // No such revision: a conflict, as CouchDB answers it.
                let put = engine.send("PUT", "/db/x", json: ["_rev": .string(rev)])
                #expect([400, 409].contains(put.status), "\(rev): \(put.text)")
            }
            let atLimit = "\(limit)-a"
            let planted = engine.send(
                "POST", "/db/_bulk_docs", json: ["new_edits": false, "docs": [["_id": "x", "_rev": .string(atLimit)]]])
            #expect(planted.status == 201, "\(planted.text)")
            #expect(engine.send("GET", "/db/x").json["_rev"] == .string(atLimit))
            for (method, path, json) in [
                ("PUT", "/db/x", ["_rev": .string(atLimit), "v": 1] as JSON), ("DELETE", "/db/x?rev=\(atLimit)", nil),
            ] {
                let edit = engine.send(method, path, json: json)
                #expect(edit.status == 400, "\(method): \(edit.text)")
            }
            let attachment = engine.send(
                "PUT", "/db/x/file?rev=\(atLimit)", body: Data("bytes".utf8), headers: [("Content-Type", "text/plain")])
            #expect(attachment.status == 400, "\(attachment.text)")
            #expect(engine.send("GET", "/db/x").json["_rev"] == .string(atLimit))
        }
    }

    @Test("A since whose shard positions are at the end of Int answers, with a last_seq it can be read back from")
    func sinceAtTheEnd() throws {
        try withEngine { engine in
            engine.send("POST", "/db/_bulk_docs", json: ["docs": [["_id": "a"], ["_id": "b"]]])
            // Two shards (the default q), each at 2^64 - 1 (read as Int.max).
            var bytes: [UInt8] = [0x83, 0x6c, 0, 0, 0, 2] + Array(repeating: 0, count: 8)
            bytes += Array(repeating: 0xff, count: 16)
            let opaque = Crypto.base64URL(Data(bytes))
            let since = "0-g1AAAA" + opaque
            for feed in ["normal", "longpoll"] {
                let reply = engine.send("GET", "/db/_changes?feed=\(feed)&timeout=100&since=\(since)")
                #expect(reply.status == 200, "\(feed): \(reply.text)")
                #expect(reply.json["results"] == [], "\(feed): \(reply.text)")
                let last = try #require(reply.json["last_seq"]?.stringValue, "\(feed): \(reply.text)")
                #expect(engine.send("GET", "/db/_changes?since=\(last)").status == 200)
            }
        }
    }

    @Test("A Range with a suffix length at the end of Int (or negative) is served whole, not a trap")
    func rangeSuffix() throws {
        try withEngine { engine in
            let bytes = randomPayload(3000)
            engine.send("PUT", "/db/d/blob", body: bytes, headers: [("Content-Type", "application/octet-stream")])
            for range in ["bytes=--9223372036854775808", "bytes=-9223372036854775807", "bytes=--1"] {
                let reply = engine.send("GET", "/db/d/blob", headers: [("Range", range)])
                #expect([200, 206, 416].contains(reply.status), "\(range): \(reply.status)")
                if reply.status == 200 { #expect(reply.data == bytes) }
            }
            let tail = engine.send("GET", "/db/d/blob", headers: [("Range", "bytes=-10")])
            #expect(tail.status == 206 && tail.data == bytes.suffix(10))
        }
    }

    @Test("skip, limit and group_level below 0 in a query or a POST body are query_parse_errors, as CouchDB's")
    func negativeRowArguments() throws {
        try withEngine { engine in
            engine.send(
                "POST", "/db/_bulk_docs", json: ["docs": [["_id": "a", "k": [1, 2]], ["_id": "b", "k": [1, 3]]]])
            engine.send(
                "PUT", "/db/_design/d",
                json: ["views": ["v": ["map": "function(doc) { if (doc.k) emit(doc.k, 1); }", "reduce": "_count"]]])
            for path in ["/db/_all_docs", "/db/_design_docs", "/db/_local_docs", "/db/_design/d/_view/v"] {
                for member in ["skip", "limit"] {
                    let reply = engine.send("POST", path, json: .object([(member, .int(-1))]))
                    #expect(reply.status == 400, "\(path) \(member): \(reply.text)")
                    #expect(reply.json["error"] == "query_parse_error", "\(path) \(member): \(reply.text)")
                    #expect(reply.json["reason"] == "Invalid value for positive integer: -1")
                }
            }
            let queries = engine.send("POST", "/db/_all_docs/queries", json: ["queries": [["skip": -1]]])
            #expect(queries.status == 400, "\(queries.text)")
            for (method, path, json) in [
                ("GET", "/db/_design/d/_view/v?group_level=-1", nil),
                ("POST", "/db/_design/d/_view/v", ["group_level": -1] as JSON),
            ] {
                let reply = engine.send(method, path, json: json)
                #expect(reply.status == 400 && reply.json["error"] == "query_parse_error", "\(path): \(reply.text)")
            }
            let level = engine.send("GET", "/db/_design/d/_view/v?group_level=1")
            #expect(level.json["rows"] == [["key": [1], "value": 2]], "\(level.text)")
        }
    }

    @Test("skip at the end of Int, past a start key or with a bookmark, gives no rows and an offset within total_rows")
    func hugeSkip() throws {
        try withEngine { engine in
            engine.send("POST", "/db/_bulk_docs", json: ["docs": [["_id": "a", "n": 1], ["_id": "b", "n": 2]]])
            engine.send("PUT", "/db/_design/d", json: ["views": ["v": ["map": "function(doc) { emit(doc.n, 1); }"]]])
            let max = Int.max
            for path in [
                "/db/_all_docs?startkey=%22b%22&skip=\(max)", "/db/_design/d/_view/v?key=2&skip=\(max)",
                "/db/_design/d/_view/v?startkey=2&skip=\(max)",
            ] {
                let reply = engine.send("GET", path)
                #expect(reply.status == 200, "\(path): \(reply.text)")
                #expect(reply.json["rows"] == [], "\(path): \(reply.text)")
                #expect((reply.json["offset"]?.intValue ?? -1) <= 3, "\(path): \(reply.text)")
            }
            let first = engine.send("POST", "/db/_find", json: ["selector": ["n": ["$gt": 0]], "limit": 1])
            let bookmark = try #require(first.json["bookmark"]?.stringValue, "\(first.text)")
            let next = engine.send(
                "POST", "/db/_find",
                json: ["selector": ["n": ["$gt": 0]], "skip": .int(Int64.max), "bookmark": .string(bookmark)])
            #expect(next.status == 200 && next.json["docs"] == [], "\(next.text)")
        }
    }

    @Test("q and n that are not positive integers are refused as CouchDB refuses them; q is bounded")
    func shardCounts() throws {
        try withEngine { engine in
            for (name, value) in [("q", "0"), ("q", "-1"), ("q", "abc"), ("n", "0"), ("n", "x")] {
                let reply = engine.send("PUT", "/other?\(name)=\(value)")
                #expect(reply.status == 400, "\(name)=\(value): \(reply.text)")
                #expect(
                    reply.json["reason"] == .string("The `\(name)` value should be a positive integer."),
                    "\(name)=\(value): \(reply.text)")
            }
            let huge = engine.send("PUT", "/other?q=9223372036854775807")
            #expect(huge.status == 400 && huge.json["error"] == "bad_request", "\(huge.text)")
            #expect(engine.send("PUT", "/other?q=8").status == 201)
            #expect(engine.send("GET", "/other").json["cluster"]?["q"] == 8)
        }
    }

    @Test("_db_updates: heartbeat and timeout must be integers of 0 or more, as CouchDB's; heartbeat=0 does not spin")
    func dbUpdatesArguments() throws {
        try withEngine { engine in
            engine.send("PUT", "/_global_changes")
            for argument in ["heartbeat=-1", "heartbeat=x", "timeout=-5", "timeout=abc"] {
                let reply = engine.send("GET", "/_db_updates?feed=continuous&\(argument)")
                #expect(reply.status == 400, "\(argument): \(reply.text)")
                #expect(reply.json["reason"] == "invalid_integer", "\(argument): \(reply.text)")
            }
            // A continuous feed with heartbeat=0, read for 0.5 s: a handful of newlines, not millions.
            let beating = engine.send("GET", "/_db_updates?feed=continuous&heartbeat=0", streamSeconds: 0.5)
            #expect(beating.status == 200)
            #expect(beating.data.count < 1000, "\(beating.data.count) bytes in 0.5 s")
        }
    }
}

/// A database file whose checksums are right but whose numbers are not what the engine writes (a file damaged where
/// no checksum sees, or written by someone else): opening it, or the first request, is an error, never a trap.
@Suite(.ownThreads) struct HostileFileTests {
    /// A data directory whose database `db` has a document `d` with an attachment, then the records `extra`
    /// appended (in one committed group) and the index snapshot removed; runs `body` on an engine opened over it.
    private func withDamaged(_ extra: [(StoreRecordKind, String)], _ body: (ServerEngine) throws -> Void) throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            engine.send("PUT", "/db")
            engine.send("PUT", "/db/d", json: ["v": 1])
            engine.close()
        }
        let url = DataDirectory(root: dir).fileURL(for: "db")
        let file = try StoreFile.open(at: url) { _, _, _, _ in }
        for (kind, text) in extra {
            var payload = Array(text.utf8)
            if kind == .document, let split = text.firstIndex(of: "\n") {
                // A document record: the head's length, the head, the bodies.
                let head = Array(text[..<split].utf8)
                payload = []
                appendUInt32(&payload, UInt32(head.count))
                payload += head + Array(text[text.index(after: split)...].utf8)
            }
            _ = file.append(kind, payload)
        }
        try file.sync()
        file.close()
        try? FileManager.default.removeItem(at: URL(fileURLWithPath: url.path + ".index"))
        let engine = try ServerEngine(options: testOptions(dir))
        defer { engine.close() }
        try body(engine)
    }

    /// Every request that reads the database answers; none traps. Returns the statuses.
    @discardableResult
    private func probe(_ engine: ServerEngine) -> [Int] {
        [
            engine.send("GET", "/db").status, engine.send("GET", "/db/d").status,
            engine.send("GET", "/db/x?attachments=true").status,
            engine.send("GET", "/db/x/t.txt", headers: [("Accept-Encoding", "gzip")]).status,
            engine.send("GET", "/db/_changes").status, engine.send("PUT", "/db/new", json: [:]).status,
        ]
    }

    @Test("Sequences out of range in a state record or a document record: the database is an error, not a trap")
    func sequences() throws {
        let max = Int64.max
        for records: [(StoreRecordKind, String)] in [
            [(.json, #"{"op":"state","update_seq":\#(max)}"#), (.json, #"{"op":"forget","id":"d","purge":true}"#)],
            [(.json, #"{"op":"state","update_seq":\#(max)}"#)],
            [(.json, #"{"op":"state","purge_seq":-1}"#)],
            [(.json, #"{"op":"state","shards":[[-1],[\#(max)]]}"#)],
            [(.document, "{\"id\":\"a\",\"seq\":-1,\"add\":[{\"r\":\"1-x\",\"bi\":0,\"bs\":2}]}\n[{}]")],
            [(.document, "{\"id\":\"a\",\"seq\":\(max),\"add\":[{\"r\":\"1-x\",\"bi\":0,\"bs\":2}]}\n[{}]")],
        ] {
            try withDamaged(records) { engine in
                let statuses = probe(engine)
                #expect(statuses.allSatisfy { $0 < 600 }, "\(records): \(statuses)")
                #expect(statuses[0] == 500, "\(records): \(statuses)")
            }
        }
    }

    @Test("Offsets, sizes and lengths out of range in a document record: reading it is an error, not a trap")
    func offsetsAndLengths() throws {
        let max = Int64.max
        let min = Int64.min
        let heads = [
            // A body at an offset before the file's start, or at Int64.min.
            #"{"id":"x","seq":9,"add":[{"r":"1-x","bi":0,"bo":\#(min),"bs":2}]}"#,
            #"{"id":"x","seq":9,"add":[{"r":"1-x","bi":0,"bo":3,"bs":2}]}"#,
            // Body sizes that would overflow the database's size.
            #"{"id":"x","seq":9,"add":[{"r":"1-x","bi":0,"bs":\#(max)},{"r":"2-y","pi":0,"bi":0,"bs":\#(max)}]}"#,
            // Attachments of Int64.max bytes in one chunk at an impossible offset, compressible and not.
            #"{"id":"x","seq":9,"add":[{"r":"1-x","bi":0,"bs":2,"a":[{"n":"t.txt","ct":"text/plain","dg":"md5-x","len":\#(max),"ck":[\#(min),8]}]}]}"#,
            #"{"id":"x","seq":9,"add":[{"r":"1-x","bi":0,"bs":2,"a":[{"n":"t.txt","ct":"image/png","dg":"md5-x","len":\#(max),"ck":[8],"eck":[-5],"elen":-1}]}]}"#,
        ]
        for head in heads {
            try withDamaged([(.document, head + "\n[{}]")]) { engine in
                let statuses =
                    probe(engine) + [
                        engine.send("GET", "/db/x").status,
                        engine.send("GET", "/db/x/t.txt", headers: [("Range", "bytes=0-10")]).status,
                        engine.send("POST", "/db/_bulk_get", json: ["docs": [["id": "x"]]]).status,
                    ]
                #expect(statuses.allSatisfy { $0 < 600 }, "\(head): \(statuses)")
            }
        }
    }

    @Test("A database file whose first record names 2^42 shards is not opened as one")
    func hugeShardCount() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        try DataDirectory(root: dir).prepare()
        for q in ["4398046511104", "0", "-3"] {
            let url = DataDirectory(root: dir).fileURL(for: "huge")
            try? FileManager.default.removeItem(at: url)
            let file = try StoreFile.create(at: url)
            _ = file.append(.json, Array(#"{"op":"meta","name":"huge","q":\#(q),"n":1,"file":"f"}"#.utf8))
            try file.sync()
            file.close()
            let engine = try ServerEngine(options: testOptions(dir))
            defer { engine.close() }
            let status = engine.send("GET", "/huge").status
            #expect([404, 500].contains(status), "q=\(q): \(status)")
        }
    }

    @Test("_changes: a timeout or heartbeat past what a Date can wait on is CouchDB's 60 s cap, not a trap")
    func changesWaits() throws {
        let engine = try ServerEngine(options: testOptions())
        defer { engine.close() }
        engine.send("PUT", "/db")
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.3) { engine.send("PUT", "/db/late", json: [:]) }
        let longpoll = engine.send("GET", "/db/_changes?feed=longpoll&since=now&timeout=10000000000000")
        #expect(longpoll.status == 200 && longpoll.text.contains("late"), "\(longpoll.text)")
        // Each feed waits (on a deadline 60 s away) until a write 0.3 s later wakes it; the read, over by then, refuses
        // the row, which ends the feed.
        let max = Int.max
        for (index, path) in [
            "/db/_changes?feed=continuous&since=now&heartbeat=\(max)",
            "/db/_changes?feed=longpoll&since=now&heartbeat=\(max)",
            "/db/_changes?feed=continuous&since=now&timeout=\(max)",
        ].enumerated() {
            DispatchQueue.global().asyncAfter(deadline: .now() + 0.3) { engine.send("PUT", "/db/w\(index)", json: [:]) }
            let started = Date()
            let reply = engine.send("GET", path, streamSeconds: 0.1)
            #expect(reply.status == 200, "\(path): \(reply.text)")
            #expect(Date().timeIntervalSince(started) < 30, "\(path)")
        }
        engine.send("PUT", "/_global_changes")
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.3) { engine.send("PUT", "/woken") }
        let started = Date()
        let updates = engine.send("GET", "/_db_updates?feed=continuous&heartbeat=\(max)", streamSeconds: 0.1)
        #expect(updates.status == 200, "\(updates.text)")
        #expect(Date().timeIntervalSince(started) < 30)
    }
}
