import CouchGzip
import CouchQuery
import Foundation
import HTTPWire
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// What CouchDB's replicator pushes into a target (`new_edits=false`, attachments gzip-encoded in
/// `multipart/related`), and what the target answers about it afterwards, as CouchDB 3.5 does.
@Suite(.ownThreads) struct EngineReplicationFidelityTests {
    /// A text attachment as a source CouchDB holds it: the text, and the gzip bytes it stores and sends.
    /// `level: .fastest` makes gzip bytes that differ from the engine's own compression, so the tests
    /// see whether the engine keeps the sender's bytes and digest or makes its own.
    static let text = Data(String(repeating: "Hello, CouchDB! ", count: 64).utf8)
    static let gzipped = Gzip.compress(text, level: .fastest)
    static var gzippedDigest: String { "md5-" + Crypto.md5(gzipped).base64EncodedString() }

    /// A `new_edits=false` multipart PUT as the replicator sends it: the JSON part, then the gzip bytes.
    static func replicatedPut(
        _ engine: ServerEngine, id: String = "r", stub: [(String, JSON)]? = nil, bytes: Data = gzipped,
        maximumBodySize: Int? = nil
    ) -> EngineReply {
        let attachmentStub: [(String, JSON)] =
            stub ?? [
                ("content_type", "text/plain"), ("revpos", 2), ("digest", .string(gzippedDigest)),
                ("length", .int(Int64(text.count))), ("follows", true), ("encoding", "gzip"),
                ("encoded_length", .int(Int64(bytes.count))),
            ]
        let doc: JSON = .object([
            ("_id", .string(id)), ("_rev", "3-c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3"),
            (
                "_revisions",
                [
                    "start": 3,
                    "ids": [
                        "c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3", "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2", "a1a1a1a1a1a1a1a1",
                    ],
                ]
            ),
            ("kind", "replicated"), ("_attachments", .object([("t.txt", .object(attachmentStub))])),
        ])
        var body = Data("--R1\r\nContent-Type: application/json\r\n\r\n".utf8) + doc.data
        body += Data("\r\n--R1\r\nContent-Disposition: attachment; filename=\"t.txt\"\r\n".utf8)
        body += Data("Content-Type: text/plain\r\nContent-Encoding: gzip\r\n\r\n".utf8) + bytes
        body += Data("\r\n--R1--".utf8)
        guard let maximumBodySize else {
            return engine.send(
                "PUT", "/db/\(id)?new_edits=false", body: body,
                headers: [("Content-Type", "multipart/related; boundary=\"R1\"")])
        }
        var headers = HTTPHeaders()
        headers.add("Authorization", "Basic " + Data("admin:password".utf8).base64EncodedString())
        headers.add("Content-Type", "multipart/related; boundary=\"R1\"")
        var request = ServerRequest(
            method: "PUT", rawPath: "/db/\(id)", rawQuery: "new_edits=false", headers: headers, body: body)
        request.maximumBodySize = maximumBodySize
        let response = engine.handle(request)
        guard case .data(let data) = response.body else {
            return EngineReply(status: response.status, headers: response.headers, data: Data())
        }
        return EngineReply(status: response.status, headers: response.headers, data: data)
    }

    @Test func aGzipEncodedMultipartAttachmentIsStoredDecodedWithTheSendersDigestAndLengths() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let put = Self.replicatedPut(engine)
        #expect(put.status == 201)

        // GET answers the text, not the gzip bytes.
        let plain = engine.send("GET", "/db/r/t.txt")
        #expect(plain.status == 200)
        #expect(plain.data == Self.text)
        #expect(plain.headers["Content-Encoding"] == nil)
        // A client that accepts gzip gets the bytes as stored: the sender's.
        let gzip = engine.send("GET", "/db/r/t.txt", headers: [("Accept-Encoding", "gzip")])
        #expect(gzip.headers["Content-Encoding"] == "gzip")
        #expect(gzip.data == Self.gzipped)

        // The stub: CouchDB's digest (the MD5 of the gzip bytes it stores), the decoded length, the encoded one.
        let stub = try #require(engine.send("GET", "/db/r?att_encoding_info=true").json["_attachments"]?["t.txt"])
        #expect(stub["digest"]?.stringValue == Self.gzippedDigest)
        #expect(stub["length"]?.intValue == Int64(Self.text.count))
        #expect(stub["encoding"]?.stringValue == "gzip")
        #expect(stub["encoded_length"]?.intValue == Int64(Self.gzipped.count))
        #expect(stub["revpos"]?.intValue == 2)
        // Inline, the data is the text.
        let inline = engine.send("GET", "/db/r?attachments=true").json["_attachments"]?["t.txt"]?["data"]
        #expect(inline?.stringValue == Self.text.base64EncodedString())
    }

    @Test func aGzipEncodedAttachmentThatIsNotGzipIs400() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let garbage = Data("not gzip at all".utf8)
        let stub: [(String, JSON)] = [
            ("content_type", "text/plain"), ("revpos", 2), ("length", 10), ("follows", true), ("encoding", "gzip"),
        ]
        let put = Self.replicatedPut(engine, stub: stub, bytes: garbage)
        #expect(put.status == 400)
        #expect(put.json["error"]?.stringValue == "bad_request")
        #expect(engine.send("GET", "/db/r").status == 404)
    }

    @Test func aGzipBombIsRefusedAtTheRequestSizeLimit() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        // 8 MiB of zeros gzip to a few KiB: far past a 1 MiB request limit once inflated.
        let bomb = Gzip.compress(Data(count: 8 << 20), level: .best)
        #expect(bomb.count < 64 * 1024)
        let stub: [(String, JSON)] = [
            ("content_type", "text/plain"), ("revpos", 2),
            ("digest", .string("md5-" + Crypto.md5(bomb).base64EncodedString())),
            ("length", .int(8 << 20)), ("follows", true), ("encoding", "gzip"),
            ("encoded_length", .int(Int64(bomb.count))),
        ]
        let put = Self.replicatedPut(engine, stub: stub, bytes: bomb, maximumBodySize: 1 << 20)
        #expect(put.status == 413)
        #expect(put.json["error"]?.stringValue == "too_large")
        #expect(engine.send("GET", "/db/r").status == 404)
    }

    @Test func anAttachmentWhoseBytesDoNotMatchItsDigestIs400ContentMD5Mismatch() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let stub: [(String, JSON)] = [
            ("content_type", "text/plain"), ("revpos", 2), ("digest", "md5-AAAAAAAAAAAAAAAAAAAAAA=="),
            ("length", .int(Int64(Self.text.count))), ("follows", true), ("encoding", "gzip"),
            ("encoded_length", .int(Int64(Self.gzipped.count))),
        ]
        let put = Self.replicatedPut(engine, stub: stub)
        #expect(put.status == 400)
        #expect(put.json["error"]?.stringValue == "content_md5_mismatch")
        #expect(put.json["reason"]?.stringValue == "Possible message corruption.")
    }

    @Test func newEditsFalseKeepsTheSendersRevpos() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let doc: JSON = [
            "_id": "b", "_rev": "5-e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5",
            "_attachments": [
                "old.bin": ["content_type": "application/octet-stream", "revpos": 2, "data": "AAEC"],
                "new.bin": ["content_type": "application/octet-stream", "revpos": 5, "data": "AwQF"],
            ],
        ]
        let bulk = engine.send("POST", "/db/_bulk_docs", json: ["docs": [doc], "new_edits": false])
        #expect(bulk.status == 201)
        let atts = engine.send("GET", "/db/b").json["_attachments"]
        #expect(atts?["old.bin"]?["revpos"]?.intValue == 2)
        #expect(atts?["new.bin"]?["revpos"]?.intValue == 5)
        // The multipart path (the replicator's) keeps it too.
        #expect(Self.replicatedPut(engine).status == 201)
        #expect(engine.send("GET", "/db/r").json["_attachments"]?["t.txt"]?["revpos"]?.intValue == 2)
        // An interactive edit still gives a new attachment the new revision's generation.
        let edit: JSON = [
            "_rev": "5-e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5",
            "_attachments": ["x.bin": ["content_type": "application/octet-stream", "revpos": 1, "data": "AAEC"]],
        ]
        #expect(engine.send("PUT", "/db/b", json: edit).status == 201)
        #expect(engine.send("GET", "/db/b").json["_attachments"]?["x.bin"]?["revpos"]?.intValue == 6)
    }

    @Test func ensureFullCommitAnswersTheDatabasesInstanceStartTime() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let info = engine.send("GET", "/db").json["instance_start_time"]?.stringValue
        let commit = engine.send("POST", "/db/_ensure_full_commit", json: [:])
        #expect(commit.status == 201)
        #expect(commit.json["ok"] == true)
        let answered = try #require(commit.json["instance_start_time"]?.stringValue)
        #expect(answered == info)
        // Unix seconds, as the shard suffix CouchDB 3.5 reads it from.
        let seconds = try #require(Int(answered))
        #expect(seconds > 1_600_000_000)
        #expect(engine.send("POST", "/missing/_ensure_full_commit", json: [:]).status == 404)
    }

    /// What a replicator relies on survives a restart: the instance_start_time it checkpointed against
    /// (a change would look like a recreated database), the sender's revpos, and a gzip-received
    /// attachment's text, digest and length.
    @Test func aRestartKeepsWhatReplicatorsRelyOn() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        var startTime: String?
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            defer { engine.close() }
            engine.send("PUT", "/db")
            #expect(Self.replicatedPut(engine).status == 201)
            startTime =
                engine.send("POST", "/db/_ensure_full_commit", json: [:]).json["instance_start_time"]?
                .stringValue
        }
        let engine = try ServerEngine(options: testOptions(dir))
        defer { engine.close() }
        let again = engine.send("POST", "/db/_ensure_full_commit", json: [:]).json["instance_start_time"]
        #expect(startTime != nil && again?.stringValue == startTime)
        #expect(engine.send("GET", "/db").json["instance_start_time"]?.stringValue == startTime)
        #expect(engine.send("GET", "/db/r/t.txt").data == Self.text)
        let stub = try #require(engine.send("GET", "/db/r").json["_attachments"]?["t.txt"])
        #expect(stub["digest"]?.stringValue == Self.gzippedDigest)
        #expect(stub["length"]?.intValue == Int64(Self.text.count))
        #expect(stub["revpos"]?.intValue == 2)
        // The sender's gzip bytes are kept too: what gzip-accepting readers get still has the digest.
        let gzipped = engine.send("GET", "/db/r/t.txt", headers: [("Accept-Encoding", "gzip")]).data
        #expect("md5-" + Crypto.md5(gzipped).base64EncodedString() == Self.gzippedDigest)
        let info = engine.send("GET", "/db/r?att_encoding_info=true").json["_attachments"]?["t.txt"]
        #expect(info?["encoded_length"]?.intValue == Int64(gzipped.count))
    }

    /// chttpd_db validates the content type first (chttpd:validate_ctype): 415 without application/json.
    @Test func ensureFullCommitWantsJSON() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let bare = engine.send("POST", "/db/_ensure_full_commit")
        #expect(bare.status == 415)
        #expect(bare.json["error"]?.stringValue == "bad_content_type")
        let text = engine.send(
            "POST", "/db/_ensure_full_commit", body: Data("{}".utf8), headers: [("Content-Type", "text/plain")])
        #expect(text.status == 415)
        let json = engine.send(
            "POST", "/db/_ensure_full_commit", body: Data(),
            headers: [("Content-Type", "application/json; charset=utf-8")])
        #expect(json.status == 201)
    }
}
