import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// A data directory written by the TestServer before CouchStore's file format (one JSON line per record in
/// `dbs/<hex>.couchlog`) is converted on open and answers exactly as the server that wrote it did.
///
/// `Fixtures/legacy-log` was recorded from the TestServer at commit 745e3f6^ (the last with line logs): its
/// data directory after documents, an update, a deletion, conflicts and a deleted conflict written with
/// `new_edits=false`, attachments (one added by a later revision, then both kept as stubs), `_local` documents
/// (one deleted), `_security`, `_revs_limit`, a purge, a design document, a compaction and a write after it;
/// `expected.json` is what that server answered to each path listed in it.
@Suite(.ownThreads) struct LegacyLogConversionTests {
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures/legacy-log")

    func copyFixture() throws -> URL {
        let dir = makeTemporaryDirectory()
        let dbs = dir.appendingPathComponent("dbs")
        try FileManager.default.createDirectory(at: dbs, withIntermediateDirectories: true)
        for name in try FileManager.default.contentsOfDirectory(atPath: Self.fixture.appendingPathComponent("dbs").path)
        {
            try FileManager.default.copyItem(
                at: Self.fixture.appendingPathComponent("dbs").appendingPathComponent(name),
                to: dbs.appendingPathComponent(name))
        }
        try FileManager.default.copyItem(
            at: Self.fixture.appendingPathComponent("server.json"), to: dir.appendingPathComponent("server.json"))
        return dir
    }

    /// The answers that do not depend on how sequences are numbered, with object keys in one order (the
    /// recording sorted them).
    static func comparable(_ path: String, _ body: JSON) -> JSON {
        var body = body
        if path.hasPrefix("/legacydb/_changes") {
            let rows = (body["results"]?.arrayValue ?? []).map { $0.removing("seq") }
            body = ["results": .array(rows)]
        } else if path == "/legacydb" {
            body = .object(["db_name", "doc_count", "doc_del_count"].map { ($0, body[$0] ?? .null) })
        }
        return sortedKeys(body)
    }

    static func sortedKeys(_ value: JSON) -> JSON {
        switch value {
        case .object(let pairs): return .object(pairs.map { ($0.0, sortedKeys($0.1)) }.sorted { $0.0 < $1.0 })
        case .array(let items): return .array(items.map(sortedKeys))
        default: return value
        }
    }

    @Test func aLegacyDataDirectoryIsConvertedAndAnswersAsBefore() throws {
        let dir = try copyFixture()
        defer { try? FileManager.default.removeItem(at: dir) }
        let expected = try JSON.parse(Data(contentsOf: Self.fixture.appendingPathComponent("expected.json")))
        let cases = try #require(expected.arrayValue)
        #expect(cases.count == 23)

        for round in 0..<2 {  // converted on the first open; the second opens the converted files
            let engine = try ServerEngine(options: testOptions(dir))
            for item in cases {
                let path = try #require(item["path"]?.stringValue)
                let reply = engine.send("GET", path)
                #expect(reply.status == Int(item["status"]?.intValue ?? 0), "\(path) round \(round)")
                let want = Self.comparable(path, item["body"] ?? .null)
                let got = Self.comparable(path, reply.json)
                #expect(got == want, "\(path) round \(round): \(got.serialized)")
            }
            let bytes = engine.send("GET", "/legacydb/withatt/big.bin").data
            #expect(bytes == Data((0..<30000).map { UInt8(($0 * 7 + 3) % 251) }))
            #expect(engine.send("GET", "/legacydb/withatt/file.txt").data.count == 67)
            engine.close()
            let files = try FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent("dbs").path)
            #expect(!files.contains { $0.hasSuffix(".couchlog") }, "\(files)")
            #expect(files.contains("6c65676163796462.couch"), "\(files)")
        }
        // The converted database takes writes and keeps them.
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            let rev = engine.send("GET", "/legacydb/plain").json["_rev"]?.stringValue ?? ""
            #expect(engine.send("PUT", "/legacydb/plain", json: ["_rev": .string(rev), "n": 3]).status == 201)
            engine.close()
        }
        let engine = try ServerEngine(options: testOptions(dir))
        defer { engine.close() }
        #expect(engine.send("GET", "/legacydb/plain").json["n"] == 3)
        #expect(engine.send("GET", "/legacydb/plain?conflicts=true").json["_rev"]?.stringValue?.hasPrefix("3-") == true)
    }

    /// A torn last line (the old server crashed while appending) is skipped, as the old server skipped it.
    @Test func aTornLastLineIsSkipped() throws {
        let dir = try copyFixture()
        defer { try? FileManager.default.removeItem(at: dir) }
        let log = dir.appendingPathComponent("dbs/7365636f6e64.couchlog")
        let handle = try FileHandle(forWritingTo: log)
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(#"{"op":"doc","id":"torn","seq":9,"add":[{"#.utf8))
        try handle.close()
        let engine = try ServerEngine(options: testOptions(dir))
        defer { engine.close() }
        #expect(engine.send("GET", "/second/one").json["only"] == true)
        #expect(engine.send("GET", "/second/torn").status == 404)
        #expect(engine.send("GET", "/second").json["doc_count"] == 1)
    }
}
