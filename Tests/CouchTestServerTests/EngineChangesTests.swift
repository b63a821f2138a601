import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

@Suite(.ownThreads) struct EngineChangesTests {
    private func seqNumber(_ json: JSON?) -> Int? {
        guard let s = json?.stringValue else { return nil }
        return SequenceToken.decode(s)
    }

    @Test func normalFeedSequencesAndPending() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db?q=1")
        for id in ["a", "b", "c"] { engine.send("PUT", "/db/\(id)", json: ["id": .string(id)]) }
        let revA = engine.send("GET", "/db/a").json["_rev"]!.stringValue!
        engine.send("PUT", "/db/a", json: ["_rev": .string(revA), "id": "a2"])
        let all = engine.send("GET", "/db/_changes").json
        let rows = try #require(all["results"]?.arrayValue)
        #expect(rows.map { $0["id"] } == ["b", "c", "a"])
        #expect(rows.map { seqNumber($0["seq"]) } == [2, 3, 4])
        #expect(seqNumber(all["last_seq"]) == 4)
        #expect(all["pending"] == 0)
        let page = engine.send("GET", "/db/_changes?limit=1").json
        #expect(page["pending"] == 2)
        let since = page["last_seq"]!.stringValue!
        let rest = engine.send("GET", "/db/_changes?since=\(since)").json
        #expect(rest["results"]?.arrayValue?.map { $0["id"] } == ["c", "a"])
        #expect(engine.send("GET", "/db/_changes?since=bogus").status == 400)
        let design = engine.send("GET", "/db/_changes?filter=_design").json
        #expect(design["results"] == [])
    }

    @Test func longpollWakesUpOnAWrite() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let writer = Thread {
            Thread.sleep(forTimeInterval: 0.2)
            engine.send("PUT", "/db/late", json: ["x": 1])
        }
        writer.start()
        let reply = engine.send("GET", "/db/_changes?feed=longpoll&since=now&timeout=10000")
        #expect(reply.json["results"]?.arrayValue?.map { $0["id"] } == ["late"])
        let timedOut = engine.send("GET", "/db/_changes?feed=longpoll&since=now&timeout=100")
        #expect(timedOut.json["results"] == [])
    }

    @Test func continuousFeedStreamsNewWritesAndEndsOnTimeout() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        engine.send("PUT", "/db/first", json: [:])
        let writer = Thread {
            Thread.sleep(forTimeInterval: 0.2)
            engine.send("PUT", "/db/second", json: [:])
        }
        writer.start()
        let reply = engine.send("GET", "/db/_changes?feed=continuous&timeout=800")
        let lines = reply.text.split(separator: "\n").compactMap { try? JSON.parse(String($0)) }
        #expect(lines.compactMap { $0["id"] } == ["first", "second"])
        #expect(lines.last?["last_seq"] != nil)
    }

    @Test func continuousFeedStopsWhenTheEngineCloses() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let closer = Thread {
            Thread.sleep(forTimeInterval: 0.2)
            engine.close()
        }
        closer.start()
        let start = Date()
        _ = engine.send("GET", "/db/_changes?feed=continuous&heartbeat=50", streamSeconds: 20)
        #expect(Date().timeIntervalSince(start) < 10)
    }

    @Test func selectorAndDocIDFilters() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        engine.send(
            "POST", "/db/_bulk_docs",
            json: ["docs": [["_id": "a", "t": "x"], ["_id": "b", "t": "y"], ["_id": "c", "t": "x"]]])
        let selected = engine.send("POST", "/db/_changes?filter=_selector", json: ["selector": ["t": "x"]]).json
        // Shard by shard, not in write order (q=2, as CouchDB 3).
        #expect(Set(selected["results"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []) == ["a", "c"])
        let ids = engine.send("POST", "/db/_changes?filter=_doc_ids", json: ["doc_ids": ["b"]]).json
        #expect(ids["results"]?.arrayValue?.map { $0["id"] } == ["b"])
        #expect(ids["pending"] == 2)
    }
}

@Suite(.ownThreads) struct EngineLongpollHeartbeatTests {
    @Test func longpollWithHeartbeatSendsNewlinesUntilAChange() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let writer = Thread {
            Thread.sleep(forTimeInterval: 0.35)
            engine.send("PUT", "/db/x", json: [:])
        }
        writer.start()
        let reply = engine.send("GET", "/db/_changes?feed=longpoll&since=now&heartbeat=100")
        #expect(reply.text.hasPrefix("\n"))
        let body = try JSON.parse(reply.text.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(body["results"]?.arrayValue?.map { $0["id"] } == ["x"])
    }

    /// A CouchDB 3 database has q=2 shards and its `_changes` interleaves them: the TestServer
    /// must not teach clients a write order CouchDB does not keep.
    @Test func changesInterleaveShardsAndResumeFromAnySequence() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let ids = (0..<25).map { String(format: "c%03d", $0) }
        for id in ids { engine.send("PUT", "/db/\(id)", json: ["v": 1]) }
        let feed = engine.send("GET", "/db/_changes").json
        let rows = feed["results"]?.arrayValue ?? []
        let order = rows.compactMap { $0["id"]?.stringValue }
        #expect(Set(order) == Set(ids))
        #expect(order != ids)  // not write order
        // Shard by shard: the ids of each shard come together, each shard in its own write order.
        let shardOf = { (id: String) in engine.send("GET", "/db/_shards/\(id)").json["range"]?.stringValue ?? "" }
        let shards = order.map(shardOf)
        #expect(Set(shards).count == 2)
        #expect(zip(shards, shards.dropFirst()).filter { $0 != $1 }.count == 1)
        for shard in Set(shards) {
            let inShard = order.filter { shardOf($0) == shard }
            #expect(inShard == inShard.sorted())
        }
        // Sequences have CouchDB's shape, N-opaque, N the sum of the shards' own sequences.
        let seqs = rows.compactMap { $0["seq"]?.stringValue }
        #expect(seqs.allSatisfy { $0.range(of: #"^[0-9]+-g1AAAA[A-Za-z0-9_-]+$"#, options: .regularExpression) != nil })
        #expect(feed["last_seq"]?.stringValue?.hasPrefix("25-") == true)
        // `since` any row's sequence resumes with exactly the changes after that row.
        for (index, seq) in seqs.enumerated() {
            let rest = engine.send("GET", "/db/_changes?since=\(seq)").json["results"]?.arrayValue ?? []
            #expect(
                rest.compactMap { $0["id"]?.stringValue } == Array(order.dropFirst(index + 1)), "since row \(index)")
        }
        // With a limit, last_seq resumes where the page stopped.
        let page = engine.send("GET", "/db/_changes?limit=10").json
        let next = engine.send("GET", "/db/_changes?since=\(page["last_seq"]!.stringValue!)").json
        let paged = (page["results"]?.arrayValue ?? []) + (next["results"]?.arrayValue ?? [])
        #expect(paged.compactMap { $0["id"]?.stringValue } == order)
        // `last-event-id` is read as `since`, as CouchDB does.
        let byEventID = engine.send("GET", "/db/_changes?last-event-id=\(seqs[19])").json["results"]?.arrayValue ?? []
        #expect(byEventID.count == 5)
    }

    @Test func shardCountFromQueryOrClusterConfiguration() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/two")
        engine.send("PUT", "/eight?q=8")
        engine.send("PUT", "/_node/_local/_config/cluster/q", json: "4")
        engine.send("PUT", "/four")
        for (db, q) in [("two", 2), ("eight", 8), ("four", 4)] {
            #expect(engine.send("GET", "/\(db)/_shards").json["shards"]?.objectValue?.count == q, "\(db)")
            #expect(engine.send("GET", "/\(db)").json["cluster"]?["q"] == .int(Int64(q)), "\(db)")
        }
    }
}
