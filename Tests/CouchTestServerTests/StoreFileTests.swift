import CouchQuery
import Foundation
import HTTPWire
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// The storage layer: the record format, recovery from a torn end, corruption, one sync per request,
/// bodies read from disk, and compaction to a new file.
@Suite(.ownThreads) struct StoreFileTests {
    /// The single database file of `db` in a data directory.
    private func fileURL(_ dir: URL, _ db: String) -> URL {
        DataDirectory(root: dir).fileURL(for: db)
    }

    private func writeDocs(_ engine: ServerEngine, _ db: String, count: Int, from start: Int = 0) {
        let docs = JSON.array((start..<(start + count)).map { i in ["_id": .string("d\(i)"), "n": .int(Int64(i))] })
        #expect(engine.send("POST", "/\(db)/_bulk_docs", json: ["docs": docs]).status == 201)
    }

    @Test func aBulkRequestIsOneDurableSync() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let engine = try ServerEngine(options: testOptions(dir))
        engine.send("PUT", "/db")
        // Counted on this database's file: every TestServer of the tests running alongside keeps its databases in
        // files too, so the process-wide count moves with them.
        let db = try #require(engine.store.database(named: "db"))
        let file = try #require(db.withLock { db.file })
        let before = file.syncCount
        writeDocs(engine, "db", count: 1000)
        #expect(file.syncCount - before == 1)
        engine.close()
        let reopened = try ServerEngine(options: testOptions(dir))
        #expect(reopened.send("GET", "/db").json["doc_count"] == 1000)
        #expect(reopened.send("GET", "/db/d999").json["n"] == 999)
    }

    /// Records read lately are kept (a document's record is read for its tree, then for its body), at most
    /// `recentRecordLimit` small ones; a file cut back forgets them, so an offset that comes to hold another record
    /// is never answered with the old one.
    @Test func recentRecordsAreBoundedAndNeverStale() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = try StoreFile.create(at: dir.appendingPathComponent("recent.db"), synchronousWrites: false)
        var offsets: [Int64] = []
        for i in 0..<40 { offsets.append(file.append(.json, Array("{\"n\":\(i)}".utf8))) }
        try file.sync()
        for _ in 0..<2 {
            for (i, offset) in offsets.enumerated() {
                let (kind, payload) = try file.read(at: offset)
                #expect(kind == .json && Array(payload) == Array("{\"n\":\(i)}".utf8))
                #expect(file.recentRecordCount <= StoreFile.recentRecordLimit)
            }
        }
        #expect(file.recentRecordCount == StoreFile.recentRecordLimit)
        // A large record is not kept.
        let large = file.append(.json, [UInt8](repeating: 0x20, count: StoreFile.recentRecordMaxSize + 1))
        try file.sync()
        _ = try file.read(at: large)
        #expect(try file.read(at: large).payload.count == StoreFile.recentRecordMaxSize + 1)
        #expect(file.recentRecordCount == StoreFile.recentRecordLimit)
        // Written, read (and kept), cut back, written again at the same offset: the new record is read.
        let first = try file.writeNow(.blob, Array("first".utf8))
        #expect(Array(try file.read(at: first).payload) == Array("first".utf8))
        file.abandonWritten(from: first, to: file.size)
        #expect(file.recentRecordCount == 0)
        let second = try file.writeNow(.blob, Array("other".utf8))
        #expect(second == first)
        #expect(Array(try file.read(at: second).payload) == Array("other".utf8))
    }

    @Test func bodiesAndAttachmentsStayOnDisk() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            engine.send("PUT", "/db")
            engine.send("PUT", "/db/a", json: ["big": .string(String(repeating: "x", count: 10_000))])
            engine.send(
                "PUT", "/db/b/file.bin", body: Data(repeating: 7, count: 3_000_000),
                headers: [("Content-Type", "application/octet-stream")])
            engine.close()
        }
        let engine = try ServerEngine(options: testOptions(dir))
        let db = try #require(engine.store.database(named: "db"))
        let (a, b) = db.withLock { (db.docs["a"]!.winner!, db.docs["b"]!.winner!) }
        guard case .stored = a.storedBody else {
            Issue.record("the body of a was read into memory on open")
            return
        }
        guard case .stored(let blob) = b.atts[0].bytes else {
            Issue.record("the attachment was read into memory on open")
            return
        }
        #expect(blob.chunks.count == 3)
        #expect(engine.send("GET", "/db/a").json["big"]?.stringValue?.count == 10_000)
        #expect(
            Crypto.md5(engine.send("GET", "/db/b/file.bin").data) == Crypto.md5(Data(repeating: 7, count: 3_000_000)))
    }

    @Test func aTornEndIsCutOffAtEveryPoint() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = fileURL(dir, "db")
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            engine.send("PUT", "/db")
            writeDocs(engine, "db", count: 3)
            engine.close()
        }
        let committed = try Data(contentsOf: url)
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            writeDocs(engine, "db", count: 2, from: 3)
            engine.close()
        }
        let full = try Data(contentsOf: url)
        #expect(full.count > committed.count)
        // Every cut inside the last group, and garbage after it: the first three documents, never a crash.
        for cut in stride(from: committed.count, to: full.count, by: max(1, (full.count - committed.count) / 40)) {
            try full.prefix(cut).write(to: url)
            let engine = try ServerEngine(options: testOptions(dir))
            #expect(engine.send("GET", "/db").json["doc_count"] == 3, "cut at \(cut)")
            #expect(engine.send("GET", "/db/d3").status == 404)
            engine.close()
            #expect(try Data(contentsOf: url).count == committed.count, "the torn end was cut off")
        }
        try (full + Data(repeating: 0, count: 100)).write(to: url)
        let engine = try ServerEngine(options: testOptions(dir))
        #expect(engine.send("GET", "/db").json["doc_count"] == 5)
    }

    @Test func damageInTheMiddleIsAnErrorNotData() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = fileURL(dir, "db")
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            engine.send("PUT", "/db")
            engine.send("PUT", "/db/first", json: ["v": "first-document-body"])
            engine.send("PUT", "/db/second", json: ["v": 2])
            engine.close()
        }
        var bytes = try Data(contentsOf: url)
        let marker = Data("first-document-body".utf8)
        let at = try #require(bytes.range(of: marker)).lowerBound
        bytes[at] ^= 0xFF
        try bytes.write(to: url)
        let engine = try ServerEngine(options: testOptions(dir))
        let answer = engine.send("GET", "/db/first")
        #expect(answer.status == 500)
        #expect(answer.json["error"] == "file_error")
        #expect(answer.json["reason"]?.stringValue?.contains("corrupt") == true)
        // The name stays taken: it cannot be recreated over the damaged file.
        #expect(engine.send("PUT", "/db").status == 412)
    }

    @Test func aDamagedAttachmentChunkIsAnErrorWhenRead() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = fileURL(dir, "db")
        let payload = Data((0..<5000).map { UInt8($0 % 251) })
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            engine.send("PUT", "/db")
            engine.send("PUT", "/db/a/f.bin", body: payload, headers: [("Content-Type", "application/octet-stream")])
            engine.send("PUT", "/db/later", json: [:])
            engine.close()
        }
        var bytes = try Data(contentsOf: url)
        let at = try #require(bytes.range(of: payload.prefix(64))).lowerBound + 100
        bytes[at] ^= 0x55
        try bytes.write(to: url)
        let engine = try ServerEngine(options: testOptions(dir))
        let answer = engine.send("GET", "/db/a/f.bin")
        #expect(answer.status == 500)
        #expect(answer.data != payload)
        // A range of it too (it sliced the empty bytes a failed read returns: a trap where Data checks bounds).
        let range = engine.send("GET", "/db/a/f.bin", headers: [("Range", "bytes=0-10")])
        #expect(range.status == 500, "\(range.text)")
        #expect(engine.send("GET", "/db/later").status == 200)
    }

    @Test func notADatabaseFile() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        try DataDirectory(root: dir).prepare()
        try Data("hello, not a database".utf8).write(to: fileURL(dir, "db"))
        let engine = try ServerEngine(options: testOptions(dir))
        #expect(engine.send("GET", "/db").status == 500)
    }

    @Test func compactionShrinksTheFileAndKeepsEverything() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = fileURL(dir, "db")
        let engine = try ServerEngine(options: testOptions(dir))
        engine.send("PUT", "/db")
        var revs: [String: String] = [:]
        for i in 0..<50 {
            revs["d\(i)"] =
                engine.send("PUT", "/db/d\(i)", json: ["v": 0, "pad": .string(String(repeating: "p", count: 500))])
                .json["rev"]?.stringValue
        }
        for round in 1...3 {
            for i in 0..<50 {
                revs["d\(i)"] =
                    engine.send(
                        "PUT", "/db/d\(i)",
                        json: [
                            "_rev": .string(revs["d\(i)"]!), "v": .int(Int64(round)),
                            "pad": .string(String(repeating: "p", count: 500)),
                        ]
                    ).json["rev"]?.stringValue
            }
        }
        engine.send(
            "PUT", "/db/att/f.txt", body: Data(String(repeating: "text ", count: 2000).utf8),
            headers: [("Content-Type", "text/plain")])
        engine.send("PUT", "/db/_local/cp", json: ["seq": "42"])
        engine.send("DELETE", "/db/d0?rev=\(revs["d0"]!)")
        let infoBefore = engine.send("GET", "/db").json
        let sizeBefore = try Data(contentsOf: url).count
        let db = try #require(engine.store.database(named: "db"))
        try db.compact()
        let sizeAfter = try Data(contentsOf: url).count
        // Three bodies of four are garbage: the file keeps about a third of its size (42 % here).
        #expect(sizeAfter * 100 <= sizeBefore * 50, "\(sizeAfter) of \(sizeBefore)")
        func check(_ engine: ServerEngine) {
            let info = engine.send("GET", "/db").json
            #expect(info["doc_count"] == infoBefore["doc_count"])
            #expect(info["doc_del_count"] == infoBefore["doc_del_count"])
            #expect(info["update_seq"] == infoBefore["update_seq"])
            #expect(engine.send("GET", "/db/d7").json["v"] == 3)
            #expect(engine.send("GET", "/db/d7").json["_rev"]?.stringValue == revs["d7"])
            #expect(engine.send("GET", "/db/d0").status == 404)
            #expect(engine.send("GET", "/db/att/f.txt").data == Data(String(repeating: "text ", count: 2000).utf8))
            #expect(engine.send("GET", "/db/_local/cp").json["seq"] == "42")
            let changes = engine.send("GET", "/db/_changes").json
            #expect(changes["results"]?.arrayValue?.count == 51)
            #expect(changes["last_seq"] == info["update_seq"])
        }
        check(engine)
        // Writes go on after the swap and survive a restart.
        #expect(engine.send("PUT", "/db/after", json: [:]).status == 201)
        engine.close()
        let reopened = try ServerEngine(options: testOptions(dir))
        #expect(reopened.send("GET", "/db/after").status == 200)
        reopened.send("DELETE", "/db/after?rev=\(reopened.send("GET", "/db/after").json["_rev"]!.stringValue!)")
        // The deletion added one change, so compare what does not move.
        #expect(reopened.send("GET", "/db/d7").json["v"] == 3)
        #expect(reopened.send("GET", "/db/att/f.txt").data == Data(String(repeating: "text ", count: 2000).utf8))
    }

    @Test func writesDuringCompactionAreKept() async throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let engine = try ServerEngine(options: testOptions(dir))
        engine.send("PUT", "/db")
        writeDocs(engine, "db", count: 2000)
        let db = try #require(engine.store.database(named: "db"))
        let writer = Task.detached {
            for i in 0..<200 {
                _ = engine.send("PUT", "/db/late\(i)", json: ["i": .int(Int64(i))])
            }
        }
        try db.compact()
        await writer.value
        try db.compact()
        engine.close()
        let reopened = try ServerEngine(options: testOptions(dir))
        #expect(reopened.send("GET", "/db").json["doc_count"] == 2200)
        #expect(reopened.send("GET", "/db/late199").json["i"] == 199)
        #expect(reopened.send("GET", "/db/d1999").json["n"] == 1999)
    }
}

/// The index snapshot beside a database file: opening from it gives what reading the whole file gives.
@Suite(.ownThreads) struct IndexSnapshotTests {
    /// Everything a client can see of database `db`, for comparing two opens.
    private func view(_ engine: ServerEngine) -> [JSON] {
        [
            engine.send("GET", "/db").json["doc_count"] ?? .null,
            engine.send("GET", "/db").json["doc_del_count"] ?? .null,
            engine.send("GET", "/db").json["update_seq"] ?? .null,
            engine.send("GET", "/db/_all_docs?include_docs=true&conflicts=true").json,
            engine.send("GET", "/db/_changes?style=all_docs").json,
            engine.send("GET", "/db/_local/cp").json,
            engine.send("GET", "/db/_security").json,
            .string(Crypto.hex(Crypto.md5(engine.send("GET", "/db/a/f.bin").data))),
        ]
    }

    private func fill(_ engine: ServerEngine, from: Int, count: Int) {
        for i in from..<(from + count) {
            engine.send("PUT", "/db/d\(i)", json: ["i": .int(Int64(i))])
        }
        engine.send(
            "POST", "/db/_bulk_docs",
            json: [
                "new_edits": false,
                "docs": [["_id": .string("d\(from)"), "_rev": "1-ffffffffffffffffffffffffffffffff", "v": "branch"]],
            ])
        if let rev = engine.send("GET", "/db/d\(from + 1)").json["_rev"]?.stringValue {
            engine.send("DELETE", "/db/d\(from + 1)?rev=\(rev)")
        }
    }

    @Test func openingFromTheSnapshotMatchesReadingTheWholeFile() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = DataDirectory(root: dir).fileURL(for: "db")
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            engine.send("PUT", "/db")
            fill(engine, from: 0, count: 30)
            engine.send(
                "PUT", "/db/a/f.bin", body: Data(repeating: 3, count: 5000),
                headers: [("Content-Type", "application/octet-stream")])
            engine.send("PUT", "/db/_local/cp", json: ["seq": "1"])
            engine.send("PUT", "/db/_security", json: ["members": ["names": ["x"]], "admins": [:]])
            engine.close()
        }
        #expect(FileManager.default.fileExists(atPath: IndexSnapshot.url(for: url).path))
        // Writes after the snapshot, and no close (a killed app): the next open replays them.
        let second = try ServerEngine(options: testOptions(dir))
        #expect(second.store.database(named: "db")?.openedFromSnapshot == true)
        fill(second, from: 100, count: 10)
        let expected = view(second)
        let third = try ServerEngine(options: testOptions(dir))
        #expect(third.store.database(named: "db")?.openedFromSnapshot == true)
        #expect(view(third) == expected)
        // Without the snapshot, the whole file gives the same.
        try FileManager.default.removeItem(at: IndexSnapshot.url(for: url))
        let fourth = try ServerEngine(options: testOptions(dir))
        #expect(fourth.store.database(named: "db")?.openedFromSnapshot == false)
        #expect(view(fourth) == expected)
        // A damaged snapshot is not used.
        fourth.close()
        var bytes = try Data(contentsOf: IndexSnapshot.url(for: url))
        bytes[bytes.count / 2] ^= 0x40
        try bytes.write(to: IndexSnapshot.url(for: url))
        let fifth = try ServerEngine(options: testOptions(dir))
        #expect(fifth.store.database(named: "db")?.openedFromSnapshot == false)
        #expect(view(fifth) == expected)
    }

    @Test func aSnapshotOfTheFileBeforeCompactionIsNotUsed() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let url = DataDirectory(root: dir).fileURL(for: "db")
        let engine = try ServerEngine(options: testOptions(dir))
        engine.send("PUT", "/db")
        fill(engine, from: 0, count: 20)
        engine.close()
        let old = try Data(contentsOf: IndexSnapshot.url(for: url))
        let again = try ServerEngine(options: testOptions(dir))
        try #require(again.store.database(named: "db")).compact()
        let expected = view(again)
        again.close()
        // Put the old file's snapshot back beside the compacted file: it must be refused.
        try old.write(to: IndexSnapshot.url(for: url))
        let reopened = try ServerEngine(options: testOptions(dir))
        #expect(reopened.store.database(named: "db")?.openedFromSnapshot == false)
        #expect(view(reopened) == expected)
    }
}

/// A whole normal `_changes` feed is sent as it is read, a batch at a time, and says what the feed
/// built whole says.
@Suite(.ownThreads) struct StreamedChangesFeedTests {
    @Test func aWholeFeedStreamsTheSameRowsAsTheFeedBuiltWhole() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let engine = try ServerEngine(options: testOptions(dir))
        engine.send("PUT", "/db")
        for batch in 0..<5 {
            let docs = JSON.array((0..<500).map { i in ["_id": .string("d\(batch)-\(i)"), "i": .int(Int64(i))] })
            engine.send("POST", "/db/_bulk_docs", json: ["docs": docs])
        }
        let streamed = engine.store.handle(
            ServerRequest(method: "GET", rawPath: "/db/_changes", rawQuery: nil, headers: HTTPHeaders(), body: Data()),
            user: .admin)
        guard case .stream = streamed.body else {
            Issue.record("a whole feed of 2,500 changes was built whole")
            return
        }
        let whole = engine.send("GET", "/db/_changes?limit=100000").json
        let sent = engine.send("GET", "/db/_changes").json
        #expect(sent["results"]?.arrayValue?.count == 2500)
        #expect(sent["results"] == whole["results"])
        #expect(sent["last_seq"] == whole["last_seq"])
        #expect(sent["pending"] == 0)
        let docs = engine.send("GET", "/db/_changes?include_docs=true&style=all_docs").json
        #expect(docs["results"]?.arrayValue?.last?["doc"]?["i"] != nil)
    }
}

/// A compaction swapping the file in while an attachment is streamed out does not disturb the download.
@Suite(.ownThreads) struct CompactionDuringReadTests {
    final class CompactingWriter: ChunkWriter, @unchecked Sendable {
        // @unchecked: written only by the one producer that runs synchronously in the test.
        var data = Data()
        var chunks = 0
        let compact: () -> Void
        init(compact: @escaping () -> Void) { self.compact = compact }
        func write(_ chunk: Data) -> Bool {
            data.append(chunk)
            chunks += 1
            if chunks == 1 { compact() }
            return true
        }
    }

    @Test func aDownloadOutlivesTheFileItStartedIn() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let engine = try ServerEngine(options: testOptions(dir))
        engine.send("PUT", "/db")
        let bytes = Data((0..<(3 * 1024 * 1024 + 77)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        engine.send("PUT", "/db/a/f.bin", body: bytes, headers: [("Content-Type", "application/octet-stream")])
        // Garbage, so that compaction writes a new file.
        for i in 0..<20 { engine.send("PUT", "/db/g\(i)", json: ["i": .int(Int64(i))]) }
        let db = try #require(engine.store.database(named: "db"))
        let before = db.withLock { db.file }
        let response = engine.store.handle(
            ServerRequest(method: "GET", rawPath: "/db/a/f.bin", rawQuery: nil, headers: HTTPHeaders(), body: Data()),
            user: .admin)
        guard case .stream(let produce) = response.body else {
            Issue.record("a 3 MiB stored attachment was not streamed")
            return
        }
        let writer = CompactingWriter { try? db.compact() }
        produce(writer)
        #expect(db.withLock { db.file } !== before, "the compaction swapped the file in mid-download")
        #expect(writer.chunks >= 3)
        // Compared by size and digest: a failure message of two 3 MiB values takes minutes to render.
        #expect(writer.data.count == bytes.count)
        #expect(Crypto.md5(writer.data) == Crypto.md5(bytes))
    }
}

/// A document record names a parent inside the same record by its place (`pi`), and one outside it (a stemmed
/// tree's) by its revision (`p`); records written before `pi` existed (every parent a `p`) still read the same.
@Suite(.ownThreads) struct DocumentRecordParentTests {
    @Test func parentsAreWrittenByPlaceAndReadBackEitherWay() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = try StoreFile.create(at: dir.appendingPathComponent("p.couch"))
        defer { file.close() }
        let a = String(repeating: "a", count: 32)
        let b = String(repeating: "b", count: 32)
        let c = String(repeating: "c", count: 32)
        let d = String(repeating: "d", count: 32)
        let nodes = [
            RevNode(pos: 2, hash: a, parent: "1-" + d, deleted: false, body: ["v": 1], atts: []),
            RevNode(pos: 3, hash: b, parent: "2-" + a, deleted: false, body: ["v": 2], atts: []),
            RevNode(pos: 3, hash: c, parent: "2-" + a, deleted: true, body: [:], atts: []),
        ]
        let (bytes, _) = DocumentRecord.encode(id: "x", seq: 1, nodes: nodes, in: file)
        let head = try DocumentRecord.head(bytes[...])
        let added = try #require(head["add"]?.arrayValue)
        #expect(added[0]["p"]?.stringValue == "1-" + d)  // not in the record (stemmed away)
        #expect(added[1]["pi"] == 0 && added[1]["p"] == nil)
        #expect(added[2]["pi"] == 0 && added[2]["p"] == nil)
        let read = DocumentRecord.nodes(fromHead: head, file: file, offset: 0)
        #expect(read.map(\.rev) == nodes.map(\.rev))
        #expect(read.map(\.parent) == nodes.map(\.parent))

        // The earlier layout: every parent by revision.
        let legacy = try JSON.parse(
            Data(#"{"id":"x","seq":1,"add":[{"r":"2-\#(a)"},{"r":"3-\#(b)","p":"2-\#(a)"}]}"#.utf8))
        #expect(DocumentRecord.nodes(fromHead: legacy, file: file, offset: 0).map(\.parent) == [nil, "2-" + a])

        // A place that is out of range or the node itself names no parent (never a cycle, never a trap).
        let hostile = try JSON.parse(
            Data(
                #"{"id":"x","seq":1,"add":[{"r":"2-\#(a)","pi":0},{"r":"3-\#(b)","pi":-1},{"r":"4-\#(c)","pi":9}]}"#
                    .utf8))
        #expect(DocumentRecord.nodes(fromHead: hostile, file: file, offset: 0).map(\.parent) == [nil, nil, nil])
    }
}
