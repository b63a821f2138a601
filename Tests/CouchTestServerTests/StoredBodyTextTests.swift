import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// Responses copy a stored body's text from the file instead of parsing and serialising it again: the
/// text must be exactly what the JSON form renders, for every body and every rendering option.
@Suite(.ownThreads) struct StoredBodyTextTests {
    /// Values whose text holds everything a scan for an element's end could trip on.
    static let awkwardValues: [JSON] = [
        .null, true, false, .int(0), .int(-42), .int(Int64.max), .double(1.0), .double(-2.5e-7), .double(1e21),
        .string(""), .string("],}{[,"), .string("a \"quoted\" \\ back\\slash\\"), .string("\\"),
        .string("\u{0}\u{1f}\n"),
        .string("snow ☃ and 𝄞"), .array([]), .object([]),
        .array([.string("]"), .object([("}", .string("{"))]), .array([.array([.null])])]),
        .object([("a", .object([("b", .array([.int(1), .string("\\\"")]))])), ("", .null)]),
    ]

    @Test func everyElementOfAnArrayIsFoundAsWritten() {
        let values = Self.awkwardValues
        let bytes = Array(JSON.array(values).serialized.utf8)
        for (index, value) in values.enumerated() {
            let range = StoredJSON.element(index, ofArray: bytes[...])
            #expect(range.map { String(decoding: bytes[$0], as: UTF8.self) } == value.serialized, "element \(index)")
        }
        #expect(StoredJSON.element(values.count, ofArray: bytes[...]) == nil)
        #expect(StoredJSON.element(-1, ofArray: bytes[...]) == nil)
        // Found inside a slice that does not start at 0, as a record's payload is.
        let padded = Array("xx".utf8) + bytes
        #expect(
            StoredJSON.element(2, ofArray: padded[2...]).map { String(decoding: padded[$0], as: UTF8.self) }
                == values[2].serialized)
    }

    @Test func damagedArraysFindNothingAndNeverTrap() {
        for text in ["", "[", "[1,", "{}", "[\"abc", "[{\"a\":1", "[1 2]", "[\"\\", "]", "[,]", "[{]}]"] {
            let bytes = Array(text.utf8)
            for index in 0..<3 {
                let range = StoredJSON.element(index, ofArray: bytes[...])
                if let range { #expect(range.upperBound <= bytes.count, "\(text)") }
            }
        }
        #expect(StoredJSON.element(0, ofArray: Array("[".utf8)[...]) == nil)
        #expect(StoredJSON.element(0, ofArray: Array("[\"abc".utf8)[...]) == nil)
        #expect(StoredJSON.element(1, ofArray: Array("[1,".utf8)[...]) == nil)
    }

    /// Every document (conflicted, deleted, with attachments, an empty body, awkward values) under every
    /// rendering option: the text form equals the JSON form serialised, read from memory before a restart and
    /// from the file after one; `GET` sends that text.
    @Test func theTextOfEveryDocumentIsItsJSONSerialised() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        var engine = try ServerEngine(options: testOptions(dir))
        engine.send("PUT", "/db")
        var members: [(String, JSON)] = []
        for (index, value) in Self.awkwardValues.enumerated() { members.append(("v\(index)", value)) }
        #expect(engine.send("PUT", "/db/awkward", json: .object(members)).status == 201)
        #expect(engine.send("PUT", "/db/empty", json: [:]).status == 201)
        let written = engine.send("PUT", "/db/gone", json: ["x": 1])
        #expect(engine.send("DELETE", "/db/gone?rev=\(written.json["rev"]?.stringValue ?? "")").status == 200)
        let att = engine.send(
            "PUT", "/db/withatt/a.txt", body: Data("hello, text".utf8), headers: [("Content-Type", "text/plain")])
        #expect(att.status == 201)
        for (rev, value) in [("1-aaa", "left"), ("1-bbb", "right"), ("2-ccc", "deleted")] {
            var doc: JSON = ["_id": "conflicted", "_rev": .string(rev), "side": .string(value)]
            if value == "deleted" {
                doc = [
                    "_id": "conflicted", "_rev": .string(rev), "_deleted": true,
                    "_revisions": ["start": 2, "ids": ["ccc", "aaa"]],
                ]
            }
            let reply = engine.send("POST", "/db/_bulk_docs", json: ["docs": [doc], "new_edits": false])
            #expect(reply.status == 201)
        }
        try compareEveryDocument(engine)
        engine.close()
        engine = try ServerEngine(options: testOptions(dir))
        defer { engine.close() }
        try compareEveryDocument(engine)
    }

    private func compareEveryDocument(_ engine: ServerEngine) throws {
        let db = try #require(engine.store.database(named: "db"))
        let options = [
            "", "revs=true", "revs_info=true", "conflicts=true", "deleted_conflicts=true", "local_seq=true",
            "attachments=true", "att_encoding_info=true", "meta=true",
        ]
        for id in ["awkward", "empty", "gone", "withatt", "conflicted"] {
            let entry = try #require(db.withLock { db.docs[id] })
            for node in entry.nodes.values where node.hasBody || node.deleted {
                for query in options {
                    var request = engineRequest("GET", "/db/\(id)?\(query)")
                    request.headers.set("Accept", "application/json")
                    let opts = DocRenderOptions(request)
                    let json = engine.store.renderDocument(entry, node, opts).serialized
                    let text = engine.store.renderDocumentText(entry, node, opts)
                    #expect(text == json, "\(id) \(node.rev) \(query)")
                }
            }
            guard let winner = entry.winner, !winner.deleted else { continue }
            let reply = engine.send("GET", "/db/\(id)?conflicts=true")
            #expect(
                reply.text == engine.store.renderDocument(
                    entry, winner,
                    DocRenderOptions(
                        engineRequest("GET", "/db/\(id)?conflicts=true"))
                ).serialized + "\n")
        }
        // The streamed rows carry the same documents.
        let rows = engine.send("GET", "/db/_all_docs?include_docs=true&conflicts=true").json["rows"]?.arrayValue ?? []
        #expect(rows.count == 4)
        for row in rows {
            let id = try #require(row["id"]?.stringValue)
            let entry = try #require(db.withLock { db.docs[id] })
            var opts = DocRenderOptions()
            opts.conflicts = true
            #expect(row["doc"] == engine.store.renderDocument(entry, try #require(entry.winner), opts), "\(id)")
        }
    }

    /// A scan in file order is served a block at a time; a record that straddles the end of a block, and one
    /// longer than a block, are read whole and checked.
    @Test func recordsAreReadWholeAcrossBlocks() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = try StoreFile.create(at: dir.appendingPathComponent("blocks.db"), synchronousWrites: false)
        var records: [(Int64, [UInt8])] = []
        for i in 0..<200 {
            // Sizes from 1 byte to well over a block, so that records end everywhere in a block.
            let size = i == 100 ? StoreFile.readBlockSize * 3 : 1 + (i * 397) % 900
            let payload = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i) }
            records.append((file.append(.blob, payload), payload))
        }
        try file.sync()
        for (offset, payload) in records {
            let (kind, read) = try file.read(at: offset)
            #expect(kind == .blob && Array(read) == payload)
        }
        for (offset, payload) in records.reversed() {
            #expect(Array(try file.read(at: offset).payload) == payload)
        }
        // An offset inside a record is not a record.
        #expect(throws: StoreFileError.self) { _ = try file.read(at: records[3].0 + 5) }
    }
}
