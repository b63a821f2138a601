import CouchGzip
import CouchQuery
import Foundation
import HTTPWire
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// `Content-Encoding: gzip` request bodies (CouchDB's `maybe_decompress`) and the shared inflater (CouchGzip).
@Suite(.ownThreads) struct EngineGzipBodyTests {
    /// Python's `gzip.compress(level 9)` of a 1800-byte `_bulk_docs` body with 40 documents: dynamic Huffman blocks.
    static let zlibBulkDocs = """
        H4sIAAAAAAACA33UTUoEMRiE4asMWc8iX1WS/rmKiAt7QKGxQQcUhrm7SjZTEGrZoVbPm84tbcfrV1qfbunlfUtr2nLO6Zyul5/r39fbZd+P0/fxuW+n/+OPtOb7+WEb4230bcgW4y36FrLleMu+pWzLeFv6tsi2jre1b6ts23jb+rbJdrJmk2xnazbLdrFmy+M2sjULCRdh0ULKBaxaSLqgZQtpF8W6hcSL6i+b1Itm5ULyxeTppF/Mnk4CxuLppCCypYMURFg6SEHA0kEKgv5HlYIolg5SENXSQQqiWTpIQUyeTgpi9nRSEIunk4LMlo5SkOEfOSlIWDpKQdLSUQqyWDpKQVZLRynIZukoBTl5OinI2dNJQS6ebrk/338B/wKeNwgHAAA=
        """
    /// A stored (level 0) member of `{"a":1}` followed by an empty member.
    static let storedThenEmpty = "H4sIAAAAAAAEAwEHAPj/eyJhIjoxfa+sG1YHAAAAH4sIAAAAAAACAwMAAAAAAAAAAAA="
    /// `{"x":` and `"yz"}` as two concatenated members.
    static let twoMembers = "H4sIAAAAAAACA6tWqlCyAgAM50d5BQAAAB+LCAAAAAAAAgNTqqxSqgUASMJ0uwUAAAA="

    func data(_ base64: String) -> Data { Data(base64Encoded: base64.replacingOccurrences(of: "\n", with: ""))! }

    @Test func inflatesZlibOutputAllBlockTypesAndMembers() throws {
        let bulk = try Gzip.decompress(data(Self.zlibBulkDocs))
        #expect(bulk.count == 1800)
        let json = try JSON.parse(bulk)
        #expect(json["docs"]?.arrayValue?.count == 40)
        #expect(json["docs"]?.arrayValue?.last?["_id"]?.stringValue == "d039")
        #expect(try Gzip.decompress(data(Self.storedThenEmpty)) == Data(#"{"a":1}"#.utf8))
        #expect(try Gzip.decompress(data(Self.twoMembers)) == Data(#"{"x":"yz"}"#.utf8))
    }

    @Test func roundTripsTheEnginesOwnCompressor() throws {
        let text = Data((0..<3000).map { "line \($0 % 97) of some text\n" }.joined().utf8)
        #expect(try Gzip.decompress(ZlibCompatibleGzip.compress(text)) == text)
        #expect(try Gzip.decompress(ZlibCompatibleGzip.compress(Data())) == Data())
        var random = SystemRandomNumberGenerator()
        let noise = Data((0..<5000).map { _ in UInt8.random(in: 0...255, using: &random) })
        #expect(try Gzip.decompress(ZlibCompatibleGzip.compress(noise)) == noise)
        // Above the compression limit the compressor writes stored blocks.
        let big = Data(repeating: 0x41, count: ZlibCompatibleGzip.compressionLimit + 70_000)
        #expect(try Gzip.decompress(ZlibCompatibleGzip.compress(big)) == big)
    }

    @Test func rejectsCorruptAndTruncatedInput() {
        var good = ZlibCompatibleGzip.compress(Data("hello hello hello".utf8))
        #expect(throws: GzipError.self) { try Gzip.decompress(Data("not gzip".utf8)) }
        #expect(throws: GzipError.self) { try Gzip.decompress(good.prefix(good.count - 3)) }
        #expect(throws: GzipError.self) { try Gzip.decompress(Data()) }
        good[good.count - 6] ^= 0xff  // the CRC
        #expect(throws: GzipError.self) { try Gzip.decompress(good) }
        #expect(throws: GzipError.self) {
            try Gzip.decompress(ZlibCompatibleGzip.compress(Data(repeating: 1, count: 100)), maximumSize: 50)
        }
    }

    @Test func gzippedBulkDocsAndDocumentWrites() throws {
        let engine = try ServerEngine(options: testOptions())
        defer { engine.close() }
        #expect(engine.send("PUT", "/gz").status == 201)
        let bulk = engine.send(
            "POST", "/gz/_bulk_docs", body: data(Self.zlibBulkDocs),
            headers: [("Content-Type", "application/json"), ("Content-Encoding", "gzip")])
        #expect(bulk.status == 201)
        #expect(bulk.json.arrayValue?.count == 40)
        #expect(engine.send("GET", "/gz/d007").json["text"]?.stringValue == "hello world 0")

        let doc = ZlibCompatibleGzip.compress(Data(#"{"kind":"gzipped"}"#.utf8))
        let put = engine.send(
            "PUT", "/gz/single", body: doc,
            headers: [("Content-Type", "application/json"), ("Content-Encoding", "gzip")])
        #expect(put.status == 201)
        #expect(engine.send("GET", "/gz/single").json["kind"]?.stringValue == "gzipped")
        let identity = engine.send(
            "PUT", "/gz/plain", body: Data(#"{"a":1}"#.utf8),
            headers: [("Content-Type", "application/json"), ("Content-Encoding", "identity")])
        #expect(identity.status == 201)
    }

    /// A `_local` document in a gzipped `_bulk_docs` body is written like the others (its inner write must not
    /// inflate the already inflated body again).
    @Test func gzippedBulkDocsWithALocalDocument() throws {
        let engine = try ServerEngine(options: testOptions())
        defer { engine.close() }
        #expect(engine.send("PUT", "/gz").status == 201)
        let body = Gzip.compress(Data(#"{"docs":[{"_id":"_local/cp","n":1},{"_id":"plain","n":2}]}"#.utf8))
        let bulk = engine.send(
            "POST", "/gz/_bulk_docs", body: body,
            headers: [("Content-Type", "application/json"), ("Content-Encoding", "gzip")])
        #expect(bulk.status == 201)
        #expect(bulk.json.arrayValue?.count == 2)
        #expect(engine.send("GET", "/gz/_local/cp").json["n"]?.intValue == 1)
        #expect(engine.send("GET", "/gz/plain").json["n"]?.intValue == 2)
    }

    @Test func badGzipAndUnknownEncodingsGetCouchDBErrors() throws {
        let engine = try ServerEngine(options: testOptions())
        defer { engine.close() }
        #expect(engine.send("PUT", "/gz").status == 201)
        let bad = engine.send(
            "POST", "/gz/_bulk_docs", body: Data(#"{"docs":[]}"#.utf8),
            headers: [("Content-Type", "application/json"), ("Content-Encoding", "gzip")])
        #expect(bad.status == 400)
        #expect(bad.json["error"]?.stringValue == "bad_request")
        #expect(bad.json["reason"]?.stringValue == "Request body is not properly gzipped.")
        let unknown = engine.send(
            "POST", "/gz", body: Data(#"{"a":1}"#.utf8),
            headers: [("Content-Type", "application/json"), ("Content-Encoding", "br")])
        #expect(unknown.status == 415)
        #expect(unknown.json["error"]?.stringValue == "bad_content_type")
        #expect(unknown.json["reason"]?.stringValue == "br is not a supported content encoding.")
    }

    @Test func largeJSONResponsesAreGzippedOnlyWhenEnabledAndAccepted() throws {
        var options = testOptions()
        options.gzipJSONResponses = true
        let engine = try ServerEngine(options: options)
        defer { engine.close() }
        #expect(engine.send("PUT", "/gz").status == 201)
        let docs: [JSON] = (0..<60).map { .object([("_id", .string("doc\($0)")), ("text", "some text to compress")]) }
        #expect(engine.send("POST", "/gz/_bulk_docs", json: ["docs": .array(docs)]).status == 201)
        let zipped = engine.send(
            "GET", "/gz/_all_docs?include_docs=true", headers: [("Accept-Encoding", "gzip, deflate")])
        #expect(zipped.headers["Content-Encoding"] == "gzip")
        let rows = try JSON.parse(try Gzip.decompress(zipped.data))["rows"]?.arrayValue
        #expect(rows?.count == 60)
        let plain = engine.send("GET", "/gz/_all_docs?include_docs=true")
        #expect(plain.headers["Content-Encoding"] == nil)
        #expect(plain.json["rows"]?.arrayValue?.count == 60)
        let small = engine.send("GET", "/gz/doc1", headers: [("Accept-Encoding", "gzip")])
        #expect(small.headers["Content-Encoding"] == nil)

        let off = try ServerEngine(options: testOptions())
        defer { off.close() }
        #expect(off.send("GET", "/_all_dbs", headers: [("Accept-Encoding", "gzip")]).headers["Content-Encoding"] == nil)
    }
}

/// A `Content-Encoding: gzip` request body is held to the server's body limit as it inflates (CouchDB's
/// `max_http_request_size`): a small body that inflates past the limit is refused 413 `too_large`.
@Suite(.ownThreads) struct GzipRequestBodyLimitTests {
    static let admin = "Basic " + Data("admin:password".utf8).base64EncodedString()

    func put(_ c: RawHTTPConnection, _ path: String, _ body: Data, gzip: Bool) throws -> RawHTTPConnection.Response {
        var headers = HTTPHeaders()
        headers.add("Authorization", Self.admin)
        headers.add("Content-Type", "application/json")
        if gzip { headers.add("Content-Encoding", "gzip") }
        return try c.request(method: "PUT", target: path, headers: headers, body: body)
    }

    /// `{"a":"000…"}` with `count` zeros.
    static func document(zeros count: Int) -> Data {
        Data(#"{"a":""#.utf8) + Data(repeating: 0x30, count: count) + Data(#""}"#.utf8)
    }

    @Test func gzipBodyInflatingPastTheServerLimitGets413() throws {
        let limit = 64 * 1024
        let server = try TestServer.start(TestServer.Configuration(passwordIterations: 10, maxRequestBodySize: limit))
        defer { server.stop() }
        let connection = try RawHTTPConnection(port: server.port, timeout: 10)
        #expect(try put(connection, "/gz", Data(), gzip: false).status == 201)
        // 4 MiB of zeros: about 4 KiB on the wire, far below the limit, 64 times the limit inflated.
        let bomb = Gzip.compress(Self.document(zeros: 4 << 20))
        #expect(bomb.count < limit)
        let refused = try put(connection, "/gz/bomb", bomb, gzip: true)
        #expect(refused.status == 413)
        #expect(try JSON.parse(refused.body)["error"]?.stringValue == "too_large")
        // Inflated to just under the limit, the same shape is written.
        let fits = try RawHTTPConnection(port: server.port, timeout: 10)
        let small = Gzip.compress(Self.document(zeros: limit - 100))
        #expect(try put(fits, "/gz/fits", small, gzip: true).status == 201)
        #expect(try put(fits, "/gz/over", Gzip.compress(Self.document(zeros: limit)), gzip: true).status == 413)
    }

    /// The inflation that refuses the bomb holds the limit plus one slice's output, not the whole output twice (the
    /// old one-shot inflation held its buffer and a copy of it: 2 × the limit).
    @Test func inflationPastTheLimitHoldsTheLimitAndOneSlice() throws {
        let limit = 8 << 20
        let bomb = Gzip.compress(Data(repeating: 0, count: 12 << 20), level: .fastest)
        var peak = 0
        #expect(throws: GzipError.outputTooLarge(limit: limit)) {
            try Gzip.decompress(bomb, format: .gzip, maximumSize: limit, peakHeldBytes: &peak)
        }
        // The inflater's buffer for one slice's output, grown by doubling: twice the most one slice gives.
        let oneSlice = 2 * Gzip.decompressionSliceSize * 1032 + 64 * 1024
        #expect(peak > limit / 2)
        #expect(peak <= limit + oneSlice)
        // A body that fits comes out whole, also through the sliced path.
        let text = Data((0..<20_000).map { "line \($0 % 89)\n" }.joined().utf8)
        #expect(try Gzip.decompress(Gzip.compress(text), maximumSize: text.count) == text)
        #expect(throws: GzipError.outputTooLarge(limit: text.count - 1)) {
            try Gzip.decompress(Gzip.compress(text), maximumSize: text.count - 1)
        }
    }
}
