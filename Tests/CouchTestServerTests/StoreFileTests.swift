import CouchQuery
import Foundation
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// The storage layer: the record format, recovery from a torn end, corruption, one sync per request,
/// bodies read from disk, and compaction to a new file.
@Suite struct StoreFileTests {
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
        let before = file.fileSyncCount
        writeDocs(engine, "db", count: 1000)
        #expect(file.fileSyncCount - before == 1)
        engine.close()
        let reopened = try ServerEngine(options: testOptions(dir))
        #expect(reopened.send("GET", "/db").json["doc_count"] == 1000)
        #expect(reopened.send("GET", "/db/d999").json["n"] == 999)
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
        #expect(engine.send("GET", "/db/b/file.bin").data == Data(repeating: 7, count: 3_000_000))
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
