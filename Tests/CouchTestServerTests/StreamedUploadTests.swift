import CouchGzip
import CouchQuery
import Foundation
import HTTPWire
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// A body handed to the engine in pieces, as a connection reads it: `onRead` runs before each piece (it sees how far
/// the upload got), and the body fails with an error after `failAfter` bytes when set (a client gone away).
private final class PieceSource: RequestBodySource, @unchecked Sendable {
    // @unchecked Sendable: `offset` is guarded by `lock`.
    private let data: Data
    private let piece: Int
    private let failAfter: Int?
    private let onRead: (Int) -> Void
    private let lock = NSLock()
    private var offset = 0
    let declaredLength: Int?

    struct CutOff: Error {}

    init(
        _ data: Data, piece: Int = 100_000, declared: Bool = false, failAfter: Int? = nil,
        onRead: @escaping (Int) -> Void = { _ in }
    ) {
        self.data = data
        self.piece = piece
        self.failAfter = failAfter
        self.onRead = onRead
        self.declaredLength = declared ? data.count : nil
    }

    func read(upTo maximum: Int) throws -> Data? {
        lock.lock()
        defer { lock.unlock() }
        onRead(offset)
        if let failAfter, offset >= failAfter { throw CutOff() }
        guard offset < data.count else { return nil }
        let end = min(offset + min(piece, maximum), data.count)
        defer { offset = end }
        return data.subdata(in: offset..<end)
    }
}

/// A standalone attachment upload whose body is a stream (`ServerRequest.bodySource`, as the TestServer's HTTP server
/// and the in-process transport hand it over) is written to the database's file chunk by chunk as it is read, its
/// digest computed on the way, and committed only once the whole body arrived.
@Suite(.ownThreads) struct StreamedUploadTests {
    private func upload(
        _ engine: ServerEngine, _ path: String, _ source: any RequestBodySource,
        contentType: String = "application/octet-stream"
    ) -> EngineReply {
        engine.send("PUT", path, headers: [("Content-Type", contentType)], bodySource: source)
    }

    @Test func theMD5ComputedPieceByPieceIsTheMD5OfTheWhole() {
        let data = randomPayload(200_003)
        for piece in [1, 63, 64, 65, 1000, 65_536, 200_003] {
            var md5 = Crypto.MD5()
            var offset = 0
            while offset < data.count {
                let end = min(offset + piece, data.count)
                md5.update(data.subdata(in: offset..<end))
                offset = end
            }
            #expect(md5.finish() == Crypto.md5(data), "pieces of \(piece)")
        }
        #expect(Crypto.MD5().finish() == Crypto.md5(Data()))
    }

    @Test func anUploadIsWrittenToTheFileAsItArrivesWithItsDigest() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let data = randomPayload(3 * StoreFile.blobChunkSize + 54_321)
        var onDiskMidway = 0
        let before: Int
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            defer { engine.close() }
            #expect(engine.send("PUT", "/db").status == 201)
            before = databaseFileSize(dir, "db")
            let source = PieceSource(data) { offset in
                // Two and a half chunks in: two chunks are in the file already, not waiting in memory.
                if offset >= 5 * StoreFile.blobChunkSize / 2, onDiskMidway == 0 {
                    onDiskMidway = databaseFileSize(dir, "db") - before
                }
            }
            let put = upload(engine, "/db/a/file.bin", source)
            #expect(put.status == 201, "\(put.text)")
            #expect(onDiskMidway >= 2 * StoreFile.blobChunkSize, "only \(onDiskMidway) bytes in the file midway")
            let doc = engine.send("GET", "/db/a").json
            #expect(doc["_attachments"]?["file.bin"]?["digest"]?.stringValue == attachmentDigest(data))
            #expect(doc["_attachments"]?["file.bin"]?["length"]?.intValue == Int64(data.count))
            #expect(doc["_attachments"]?["file.bin"]?["revpos"]?.intValue == 1)
            #expect(Crypto.md5(engine.send("GET", "/db/a/file.bin").data) == Crypto.md5(data))
        }
        // Read back after reopening: once reading the whole file, once from the index snapshot that wrote.
        for _ in 0..<2 {
            let engine = try ServerEngine(options: testOptions(dir))
            defer { engine.close() }
            let doc = engine.send("GET", "/db/a").json
            #expect(doc["_attachments"]?["file.bin"]?["digest"]?.stringValue == attachmentDigest(data))
            #expect(Crypto.md5(engine.send("GET", "/db/a/file.bin").data) == Crypto.md5(data))
            let range = engine.send("GET", "/db/a/file.bin", headers: [("Range", "bytes=1048570-1048590")])
            #expect(range.status == 206)
            #expect(range.data == data.subdata(in: 1_048_570..<1_048_591))
        }
    }

    @Test func identicalBytesAreStoredOnce() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let data = randomPayload(2 * StoreFile.blobChunkSize + 777)
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            defer { engine.close() }
            engine.send("PUT", "/db")
            #expect(upload(engine, "/db/a/one", PieceSource(data)).status == 201)
            let size = databaseFileSize(dir, "db")
            #expect(upload(engine, "/db/b/two", PieceSource(data, declared: true)).status == 201)
            #expect(databaseFileSize(dir, "db") - size < 64 * 1024, "the same bytes were stored twice")
            #expect(Crypto.md5(engine.send("GET", "/db/b/two").data) == Crypto.md5(data))
        }
        for _ in 0..<2 {
            // After reopening (the whole file, then the snapshot): the stored bytes are still found by digest.
            let engine = try ServerEngine(options: testOptions(dir))
            defer { engine.close() }
            let size = databaseFileSize(dir, "db")
            let id = "c\(UUID().uuidString.prefix(8))"
            #expect(upload(engine, "/db/\(id)/three", PieceSource(data)).status == 201)
            #expect(databaseFileSize(dir, "db") - size < 64 * 1024, "the same bytes were stored again after reopening")
            #expect(Crypto.md5(engine.send("GET", "/db/\(id)/three").data) == Crypto.md5(data))
            #expect(Crypto.md5(engine.send("GET", "/db/a/one").data) == Crypto.md5(data))
        }
    }

    @Test func aBodyCutShortLeavesNoRevisionAndNothingInTheFile() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let data = randomPayload(4 * StoreFile.blobChunkSize)
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            defer { engine.close() }
            engine.send("PUT", "/db")
            let existing = engine.send("PUT", "/db/b", json: ["kept": true]).json["rev"]?.stringValue ?? ""
            let size = databaseFileSize(dir, "db")
            let cut = upload(engine, "/db/a/file.bin", PieceSource(data, failAfter: 5 * StoreFile.blobChunkSize / 2))
            #expect(cut.status == 400)
            #expect(cut.json["error"] == "bad_request")
            #expect(engine.send("GET", "/db/a").status == 404)
            // The chunks written were the file's tail: cut off again.
            #expect(databaseFileSize(dir, "db") == size)
            let cutUpdate = upload(
                engine, "/db/b/file.bin?rev=\(existing)", PieceSource(data, failAfter: 3 * StoreFile.blobChunkSize))
            #expect(cutUpdate.status == 400)
            #expect(engine.send("GET", "/db/b").json["_rev"]?.stringValue == existing)
            #expect(engine.send("GET", "/db").json["doc_count"] == 1)
        }
        let engine = try ServerEngine(options: testOptions(dir))
        defer { engine.close() }
        #expect(engine.send("GET", "/db").json["doc_count"] == 1)
        #expect(engine.send("GET", "/db/a").status == 404)
        #expect(engine.send("GET", "/db/b").json["_attachments"] == nil)
    }

    @Test func aConflictIsAnsweredBeforeTheBodyIsRead() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let engine = try ServerEngine(options: testOptions(dir))
        defer { engine.close() }
        engine.send("PUT", "/db")
        engine.send("PUT", "/db/a", json: [:])
        var reads = 0
        let source = PieceSource(randomPayload(2 * StoreFile.blobChunkSize)) { _ in reads += 1 }
        let put = upload(engine, "/db/a/file.bin", source)
        #expect(put.status == 409)
        #expect(reads == 0)
        let wrongRev = upload(engine, "/db/a/file.bin?rev=1-0123456789abcdef0123456789abcdef", source)
        #expect(wrongRev.status == 409)
        #expect(reads == 0)
    }

    @Test func anUncommittedUploadIsCutOffOnOpen() throws {
        // A crash in the middle of an upload: its chunks are in the file, no document record refers to them, no
        // commit follows them.
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let size: Int
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            defer { engine.close() }
            engine.send("PUT", "/db")
            engine.send("PUT", "/db/a", json: ["n": 1])
            size = databaseFileSize(dir, "db")
            let db = try #require(engine.store.database(named: "db"))
            let file = try #require(db.withLock { db.file })
            let writer = AttachmentStreamWriter(file: file)
            try writer.write(randomPayload(3 * StoreFile.blobChunkSize))
            #expect(databaseFileSize(dir, "db") >= size + 3 * StoreFile.blobChunkSize)
        }
        let engine = try ServerEngine(options: testOptions(dir))
        defer { engine.close() }
        #expect(databaseFileSize(dir, "db") == size)
        #expect(engine.send("GET", "/db/a").json["n"] == 1)
        #expect(engine.send("PUT", "/db/b", json: [:]).status == 201)
    }

    @Test func aCompressibleUploadGetsCouchDBsDigestStreamedOrWhole() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let engine = try ServerEngine(options: testOptions(dir))
        defer { engine.close() }
        engine.send("PUT", "/db")
        for size in [10_000, ZlibCompatibleGzip.compressionLimit + 1, 2 * StoreFile.blobChunkSize + 99] {
            var text = ""
            while text.utf8.count < size { text += "line \(text.utf8.count) of a text attachment\n" }
            let data = Data(text.utf8.prefix(size))
            let whole = engine.send(
                "PUT", "/db/whole\(size)/t.txt", body: data, headers: [("Content-Type", "text/plain")])
            #expect(whole.status == 201)
            let streamed = upload(engine, "/db/streamed\(size)/t.txt", PieceSource(data), contentType: "text/plain")
            #expect(streamed.status == 201)
            let a = engine.send("GET", "/db/whole\(size)").json["_attachments"]?["t.txt"]
            let b = engine.send("GET", "/db/streamed\(size)").json["_attachments"]?["t.txt"]
            #expect(a?["digest"] != nil)
            #expect(a?["digest"] == b?["digest"], "size \(size)")
            #expect(a?["length"] == b?["length"])
            #expect(engine.send("GET", "/db/streamed\(size)/t.txt").data == data)
        }
    }

    @Test func compactionCopiesAStreamedAttachment() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let data = randomPayload(3 * StoreFile.blobChunkSize + 5)
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            defer { engine.close() }
            engine.send("PUT", "/db")
            #expect(upload(engine, "/db/a/file.bin", PieceSource(data)).status == 201)
            // Garbage (a cut-off upload followed by a write, so not cut off) that compaction leaves behind.
            _ = upload(engine, "/db/x/f", PieceSource(data, failAfter: 2 * StoreFile.blobChunkSize))
            let db = try #require(engine.store.database(named: "db"))
            let file = try #require(db.withLock { db.file })
            try AttachmentStreamWriter(file: file).write(randomPayload(2 * StoreFile.blobChunkSize))
            engine.send("PUT", "/db/b", json: [:])
            let size = databaseFileSize(dir, "db")
            try db.compact()
            // The cut-off upload was the file's tail (cut off again); the other chunks were garbage.
            #expect(databaseFileSize(dir, "db") < size - StoreFile.blobChunkSize)
            #expect(Crypto.md5(engine.send("GET", "/db/a/file.bin").data) == Crypto.md5(data))
        }
        let engine = try ServerEngine(options: testOptions(dir))
        defer { engine.close() }
        #expect(Crypto.md5(engine.send("GET", "/db/a/file.bin").data) == Crypto.md5(data))
        #expect(
            engine.send("GET", "/db/a").json["_attachments"]?["file.bin"]?["digest"]?.stringValue
                == attachmentDigest(data))
    }
}

/// A `multipart/related` document upload (what CouchDB's replicator sends) whose body is a stream: the JSON part is
/// read whole, each attachment part written to the file as it is read (a gzip-encoded one decoded on the way).
@Suite(.ownThreads) struct StreamedMultipartTests {
    /// The body CouchDB's replicator sends: the document with `follows` stubs, then one part per attachment.
    private func multipart(_ doc: JSON, _ parts: [(name: String, type: String, bytes: Data, gzip: Bool)]) -> Data {
        var body = Data("--B1\r\nContent-Type: application/json\r\n\r\n".utf8)
        body += doc.data
        for part in parts {
            var head = "\r\n--B1\r\nContent-Disposition: attachment; filename=\"\(part.name)\"\r\n"
            head += "Content-Type: \(part.type)\r\n"
            if part.gzip { head += "Content-Encoding: gzip\r\n" }
            head += "Content-Length: \(part.bytes.count)\r\n\r\n"
            body += Data(head.utf8) + part.bytes
        }
        body += Data("\r\n--B1--".utf8)
        return body
    }

    /// A `multipart/related` PUT of `body`, read whole or (`streamed`) from `source` (by default the body in pieces).
    private func put(_ engine: ServerEngine, _ path: String, _ body: Data, streamed: Bool, source: PieceSource? = nil)
        -> EngineReply
    {
        engine.send(
            "PUT", path, body: streamed ? nil : body, headers: [("Content-Type", "multipart/related; boundary=\"B1\"")],
            bodySource: streamed ? source ?? PieceSource(body, piece: 70_000, declared: true) : nil)
    }

    @Test func aReplicatedMultipartDocumentIsWrittenAsItArrives() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let engine = try ServerEngine(options: testOptions(dir))
        defer { engine.close() }
        engine.send("PUT", "/db")
        let big = randomPayload(3 * StoreFile.blobChunkSize + 1_234)
        var text = ""
        while text.utf8.count < 600_000 { text += "line \(text.utf8.count) of a replicated text attachment\n" }
        let plain = Data(text.utf8)
        let gz = ZlibCompatibleGzip.compress(plain)
        func doc(_ id: String) -> JSON {
            [
                "_id": .string(id), "_rev": "2-7051cbe5c8faecd085a3fa619e6e6337", "n": 1,
                "_revisions": [
                    "start": 2, "ids": ["7051cbe5c8faecd085a3fa619e6e6337", "967a00dff5e02add41819138abb3284d"],
                ],
                "_attachments": [
                    "big.bin": [
                        "content_type": "application/octet-stream", "revpos": 1,
                        "digest": .string(attachmentDigest(big)),
                        "length": .int(Int64(big.count)), "follows": true,
                    ],
                    "t.txt": [
                        "content_type": "text/plain", "revpos": 2, "digest": .string(attachmentDigest(gz)),
                        "length": .int(Int64(plain.count)), "encoding": "gzip",
                        "encoded_length": .int(Int64(gz.count)), "follows": true,
                    ],
                ],
            ]
        }
        func body(_ id: String) -> Data {
            multipart(
                doc(id),
                [("big.bin", "application/octet-stream", big, false), ("t.txt", "text/plain", gz, true)])
        }
        let before = databaseFileSize(dir, "db")
        var onDiskMidway = 0
        let whole = body("s")
        let source = PieceSource(whole, piece: 70_000, declared: true) { offset in
            if offset >= 5 * StoreFile.blobChunkSize / 2, onDiskMidway == 0 {
                onDiskMidway = databaseFileSize(dir, "db") - before
            }
        }
        let streamed = put(engine, "/db/s?new_edits=false", whole, streamed: true, source: source)
        #expect(streamed.status == 201, "\(streamed.text)")
        #expect(onDiskMidway >= 2 * StoreFile.blobChunkSize, "only \(onDiskMidway) bytes in the file midway")
        // The same body read whole: the same attachments.
        #expect(put(engine, "/db/w?new_edits=false", body("w"), streamed: false).status == 201)
        let s = engine.send("GET", "/db/s?att_encoding_info=true").json["_attachments"]
        let w = engine.send("GET", "/db/w?att_encoding_info=true").json["_attachments"]
        #expect(s?["big.bin"]?["digest"]?.stringValue == attachmentDigest(big))
        #expect(s?["t.txt"]?["digest"]?.stringValue == attachmentDigest(gz))
        #expect(s?["t.txt"]?["length"]?.intValue == Int64(plain.count))
        #expect(s?["t.txt"]?["revpos"]?.intValue == 2)
        #expect(s?["big.bin"]?["revpos"]?.intValue == 1)
        #expect(s == w)
        #expect(Crypto.md5(engine.send("GET", "/db/s/big.bin").data) == Crypto.md5(big))
        #expect(engine.send("GET", "/db/s/t.txt").data == plain)
        engine.close()
        let reopened = try ServerEngine(options: testOptions(dir))
        defer { reopened.close() }
        #expect(Crypto.md5(reopened.send("GET", "/db/s/big.bin").data) == Crypto.md5(big))
        #expect(reopened.send("GET", "/db/s/t.txt").data == plain)
        #expect(
            reopened.send("GET", "/db/s").json["_attachments"]?["t.txt"]?["digest"]?.stringValue == attachmentDigest(gz)
        )
    }

    @Test func aPartOfAnotherLengthThanItsStubIsRefusedAsCouchDBRefusesIt() throws {
        // couch_att:write_streamed_attachment: "attachment shorter than expected" / "attachment longer than expected".
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let engine = try ServerEngine(options: testOptions(dir))
        defer { engine.close() }
        engine.send("PUT", "/db")
        let bytes = randomPayload(StoreFile.blobChunkSize + 3)
        for streamed in [true, false] {
            for (declared, reason) in [
                (bytes.count + 1, "attachment shorter than expected"),
                (bytes.count - 1, "attachment longer than expected"),
            ] {
                let doc: JSON = [
                    "_id": "l",
                    "_attachments": [
                        "a.bin": [
                            "content_type": "application/octet-stream", "length": .int(Int64(declared)),
                            "follows": true,
                        ]
                    ],
                ]
                let put = put(
                    engine, "/db/l", multipart(doc, [("a.bin", "application/octet-stream", bytes, false)]),
                    streamed: streamed)
                #expect(put.status == 400)
                #expect(put.json["error"] == "bad_request")
                #expect(put.json["reason"]?.stringValue == reason)
                #expect(engine.send("GET", "/db/l").status == 404)
            }
        }
    }

    @Test func aWrongDigestOrACutOffBodyWritesNothing() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let engine = try ServerEngine(options: testOptions(dir))
        defer { engine.close() }
        engine.send("PUT", "/db")
        let big = randomPayload(2 * StoreFile.blobChunkSize + 10)
        let wrong: JSON = [
            "_id": "x",
            "_attachments": [
                "big.bin": [
                    "content_type": "application/octet-stream", "digest": .string(attachmentDigest(Data("other".utf8))),
                    "length": .int(Int64(big.count)), "follows": true,
                ]
            ],
        ]
        let size = databaseFileSize(dir, "db")
        let body = multipart(wrong, [("big.bin", "application/octet-stream", big, false)])
        let mismatch = put(engine, "/db/x", body, streamed: true)
        #expect(mismatch.status == 400)
        #expect(mismatch.json["error"] == "content_md5_mismatch")
        #expect(engine.send("GET", "/db/x").status == 404)
        #expect(databaseFileSize(dir, "db") == size)
        let right = wrong.setting(
            "_attachments",
            [
                "big.bin": [
                    "content_type": "application/octet-stream", "length": .int(Int64(big.count)), "follows": true,
                ]
            ])
        let cut = put(
            engine, "/db/x", multipart(right, [("big.bin", "application/octet-stream", big, false)]), streamed: true,
            source: PieceSource(body, failAfter: StoreFile.blobChunkSize + 5))
        #expect(cut.status == 400)
        #expect(engine.send("GET", "/db/x").status == 404)
        #expect(databaseFileSize(dir, "db") == size)
        #expect(
            put(
                engine, "/db/x", multipart(right, [("big.bin", "application/octet-stream", big, false)]), streamed: true
            ).status == 201)
        #expect(Crypto.md5(engine.send("GET", "/db/x/big.bin").data) == Crypto.md5(big))
    }
}

/// Uploads through the TestServer's HTTP server: the body is read from the socket as the engine writes it.
@Suite(.ownThreads) struct StreamedUploadHTTPTests {
    private func headers(_ extra: [(String, String)] = []) -> HTTPHeaders {
        var headers = HTTPHeaders()
        headers.add("Authorization", "Basic " + Data("admin:password".utf8).base64EncodedString())
        for (name, value) in extra { headers.add(name, value) }
        return headers
    }

    @Test func aConnectionClosedBeforeContentLengthLeavesNoRevisionAndAReadableDatabase() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = DataDirectory(root: dir).fileURL(for: "db")
        func size() -> Int { (try? FileManager.default.attributesOfItem(atPath: file.path)[.size] as? Int) ?? -1 }
        let configuration = TestServer.Configuration(dataDirectory: dir, passwordIterations: 10)
        let baseline: Int
        do {
            let server = try TestServer.start(configuration)
            defer { server.stop() }
            let connection = try RawHTTPConnection(port: server.port, timeout: 10)
            #expect(try connection.request(method: "PUT", target: "/db", headers: headers()).status == 201)
            #expect(
                try connection.request(method: "PUT", target: "/db/b", headers: headers(), body: Data("{}".utf8)).status
                    == 201)
            baseline = size()
            let cut = try RawHTTPConnection(port: server.port, timeout: 10)
            var head = HTTPRequestHead(
                method: "PUT", target: "/db/a/file.bin",
                headers: headers([("Host", "127.0.0.1"), ("Content-Length", String(4 << 20))])
            ).serialized
            head.append(randomPayload(3 << 20 / 2))
            try cut.send(head)
            cut.close()
            // Stopping waits for the connection's thread: the upload has been given up by then.
        }
        let server = try TestServer.start(configuration)
        defer { server.stop() }
        // Cut off again when the upload was given up, or on open when the server stopped first.
        #expect(size() == baseline, "the cut-off upload's chunks stayed in the file")
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        #expect(try connection.request(method: "GET", target: "/db/a", headers: headers()).status == 404)
        let info = try connection.request(method: "GET", target: "/db", headers: headers())
        #expect(info.status == 200)
        #expect(try JSON.parse(info.body)["doc_count"] == 1)
    }

    /// A download over HTTP gathers chunks for one `sendmsg`: the bytes (whole, and a range across chunks) are the
    /// upload's; a damaged chunk in the middle ends the body after the chunks before it, short of its length, and
    /// the connection closes, so the client never takes it for whole.
    @Test func aGatheredDownloadIsWholeOrCutShortAtADamagedChunk() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let configuration = TestServer.Configuration(dataDirectory: dir, passwordIterations: 10)
        let payload = randomPayload(5 * StoreFile.blobChunkSize + 12_345)
        do {
            let server = try TestServer.start(configuration)
            defer { server.stop() }
            let connection = try RawHTTPConnection(port: server.port, timeout: 20)
            #expect(try connection.request(method: "PUT", target: "/db", headers: headers()).status == 201)
            let put = try connection.request(
                method: "PUT", target: "/db/a/f.bin",
                headers: headers([("Content-Type", "application/octet-stream")]), body: payload)
            #expect(put.status == 201)
            let whole = try connection.request(method: "GET", target: "/db/a/f.bin", headers: headers())
            #expect(whole.body == payload)
            let range = try connection.request(
                method: "GET", target: "/db/a/f.bin", headers: headers([("Range", "bytes=1000-3500000")]))
            #expect(range.status == 206 && range.body == payload[1000...3_500_000])
            // Again, now from buffers the first downloads gave back to the pool (and kept at most `keep`).
            for _ in 0..<3 {
                let again = try connection.request(method: "GET", target: "/db/a/f.bin", headers: headers())
                #expect(again.body == payload)
            }
            #expect(ReadBufferPool.chunks.idleCount <= ReadBufferPool.chunks.keep)
        }
        // The third chunk damaged on disk.
        let url = DataDirectory(root: dir).fileURL(for: "db")
        var bytes = try Data(contentsOf: url)
        let third = payload[(2 * StoreFile.blobChunkSize)...].prefix(64)
        let at = try #require(bytes.range(of: third)).lowerBound + 100
        bytes[at] ^= 0x55
        try bytes.write(to: url)
        let server = try TestServer.start(configuration)
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 20)
        #expect {
            _ = try connection.request(method: "GET", target: "/db/a/f.bin", headers: headers())
        } throws: { error in
            guard case RawHTTPConnection.Failure.closedMidBody(_, let partial) = error else { return false }
            return partial == payload.prefix(2 * StoreFile.blobChunkSize)
        }
    }

    /// Downloads gather chunks only as far as the process-wide budget allows; each always keeps its one chunk.
    @Test func gatheringIsBoundedAcrossDownloads() {
        let budget = GatheredChunks(limit: 20)
        #expect(budget.take(15) == 15)
        #expect(budget.take(15) == 5)
        #expect(budget.take(1) == 0)
        #expect(budget.take(-3) == 0)
        #expect(budget.take(Int.min) == 0)
        #expect(budget.take(Int.max) == 0)
        budget.give(15)
        #expect(budget.take(16) == 15)
        budget.give(15)
        budget.give(5)
        #expect(budget.take(Int.max) == 20)
    }

    /// Read buffers are reused once released, never while a `Data` still holds them, and at most `keep` stay idle.
    @Test func readBuffersAreReusedOnlyOnceReleased() throws {
        let pool = ReadBufferPool(size: 64, keep: 2)
        #expect(pool.take(65) == nil)
        let first = try #require(pool.take(64))
        let second = try #require(pool.take(10))
        #expect(first != second)
        pool.give(first)
        #expect(pool.take(1) == first)
        let third = try #require(pool.take(64))
        for buffer in [first, second, third] { pool.give(buffer) }
        #expect(pool.idleCount == 2)  // the third was freed

        // Through a file: a chunk read into a pooled buffer keeps its bytes while it is held.
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let payload = randomPayload(3 * StoreFile.blobChunkSize)
        let engine = try ServerEngine(options: testOptions(dir))
        defer { engine.close() }
        engine.send("PUT", "/db")
        engine.send("PUT", "/db/a/f.bin", body: payload, headers: [("Content-Type", "application/octet-stream")])
        let db = try #require(engine.store.database(named: "db"))
        let attachment = try #require(db.withLock { db.docs["a"]?.winner?.atts.first })
        guard case .stored(let blob) = attachment.bytes else {
            Issue.record("the attachment is not in the file")
            return
        }
        let digest = attachment.digest
        let chunks = ReadBufferPool(size: StoreFile.blobChunkSize + 512, keep: 1)
        var held = try blob.chunk(0, digest: digest, buffers: chunks)
        let other = try blob.chunk(1, digest: digest, buffers: chunks)
        #expect(held == payload.prefix(StoreFile.blobChunkSize))
        held = try blob.chunk(2, digest: digest, buffers: chunks)  // the first chunk's buffer is given back
        #expect(chunks.idleCount == 1)
        let reread = try blob.chunk(0, digest: digest, buffers: chunks)  // reuses it
        #expect(chunks.idleCount == 0)
        #expect(reread == payload.prefix(StoreFile.blobChunkSize))
        #expect(other == payload.dropFirst(StoreFile.blobChunkSize).prefix(StoreFile.blobChunkSize))
        #expect(held == payload.suffix(StoreFile.blobChunkSize))
    }

    @Test func aWrongContentMD5IsAcceptedAsCouchDB35AcceptsIt() throws {
        // couchdb_attachments_tests.erl: should_upload_attachment_with_invalid_md5 and
        // should_upload_chunked_attachment_with_invalid_md5 expect 201 (chttpd_db does not check the header).
        let server = try TestServer.start(TestServer.Configuration(passwordIterations: 10))
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        #expect(try connection.request(method: "PUT", target: "/db", headers: headers()).status == 201)
        let data = randomPayload(3 << 20)
        let bogus = Data("foobar!".utf8).base64EncodedString()
        let put = try connection.request(
            method: "PUT", target: "/db/a/file.bin",
            headers: headers([("Content-MD5", bogus), ("Content-Type", "application/octet-stream")]), body: data)
        #expect(put.status == 201)
        var chunked = HTTPSerializer.chunk(data.prefix(1 << 20))
        chunked.append(HTTPSerializer.chunk(data.dropFirst(1 << 20)))
        chunked.append(HTTPSerializer.lastChunk())
        let putChunked = try connection.request(
            method: "PUT", target: "/db/b/file.bin",
            headers: headers([("Content-MD5", bogus), ("Transfer-Encoding", "chunked")]), body: chunked)
        #expect(putChunked.status == 201)
        for id in ["a", "b"] {
            let doc = try JSON.parse(
                try connection.request(method: "GET", target: "/db/\(id)", headers: headers()).body)
            #expect(doc["_attachments"]?["file.bin"]?["digest"]?.stringValue == attachmentDigest(data))
            let bytes = try connection.request(method: "GET", target: "/db/\(id)/file.bin", headers: headers()).body
            #expect(Crypto.md5(bytes) == Crypto.md5(data))
        }
    }

    @Test func aMultipartDocumentUploadIsStreamedAndKeepsTheConnection() throws {
        let server = try TestServer.start(TestServer.Configuration(passwordIterations: 10))
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        #expect(try connection.request(method: "PUT", target: "/db", headers: headers()).status == 201)
        let data = randomPayload(3 << 20)
        let doc: JSON = [
            "_id": "m", "n": 1,
            "_attachments": [
                "big.bin": [
                    "content_type": "application/octet-stream", "length": .int(Int64(data.count)), "follows": true,
                ]
            ],
        ]
        var body = Data("--B1\r\nContent-Type: application/json\r\n\r\n".utf8) + doc.data
        body += Data("\r\n--B1\r\nContent-Disposition: attachment; filename=\"big.bin\"\r\n\r\n".utf8) + data
        body += Data("\r\n--B1--\r\n".utf8)
        let put = try connection.request(
            method: "PUT", target: "/db/m", headers: headers([("Content-Type", "multipart/related; boundary=\"B1\"")]),
            body: body)
        #expect(put.status == 201, "\(put.text)")
        let fetched = try JSON.parse(try connection.request(method: "GET", target: "/db/m", headers: headers()).body)
        #expect(fetched["n"] == 1)
        #expect(fetched["_attachments"]?["big.bin"]?["digest"]?.stringValue == attachmentDigest(data))
        let bytes = try connection.request(method: "GET", target: "/db/m/big.bin", headers: headers()).body
        #expect(Crypto.md5(bytes) == Crypto.md5(data))
    }

    @Test func anUploadAnsweredAfterInterimResponsesIsStoredWhole() throws {
        // The `.interim` fault runs the handler only after its 102 responses: the body is still there to read.
        let server = try TestServer.start(TestServer.Configuration(passwordIterations: 10))
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        #expect(try connection.request(method: "PUT", target: "/db", headers: headers()).status == 201)
        server.faults.failNext(
            with: .interim(seconds: 0.01, count: 2), matching: .path("/db/a/file.bin", method: "PUT"))
        let data = randomPayload(3 << 20 / 2)
        let put = try connection.request(method: "PUT", target: "/db/a/file.bin", headers: headers(), body: data)
        #expect(put.status == 201)
        #expect(put.interim.count == 2)
        let bytes = try connection.request(method: "GET", target: "/db/a/file.bin", headers: headers()).body
        #expect(Crypto.md5(bytes) == Crypto.md5(data))
    }

    @Test func anEarlyAnswerReadsTheRestOfTheBodyAndKeepsTheConnection() throws {
        let server = try TestServer.start(TestServer.Configuration(passwordIterations: 10))
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        #expect(try connection.request(method: "PUT", target: "/db", headers: headers()).status == 201)
        #expect(
            try connection.request(method: "PUT", target: "/db/a", headers: headers(), body: Data("{}".utf8)).status
                == 201)
        // A conflict is answered before the body is read; the body is then read and dropped.
        let conflict = try connection.request(
            method: "PUT", target: "/db/a/file.bin", headers: headers(), body: randomPayload(2 << 20))
        #expect(conflict.status == 409)
        let next = try connection.request(method: "GET", target: "/db", headers: headers())
        #expect(next.status == 200)
        #expect(try JSON.parse(next.body)["doc_count"] == 1)
    }
}
