import Foundation
import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

/// Bodies from the real CouchDB transcripts, laid out as CouchDB streams them.
enum StreamFixtures {
    static let transcripts: URL = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<4 { url.deleteLastPathComponent() }  // file, Streaming, SwiftCouchTests, Tests
        return url.deletingLastPathComponent().appendingPathComponent("shared/couchdb-transcripts")
    }()

    /// A streamed body and what a parser must find in it.
    struct Body {
        let name: String
        let rowsKey: String?
        let bytes: [UInt8]
        let rows: [Data]
        let metadata: [String: Data]
    }

    static func json(_ value: Any) -> Data {
        try! JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .fragmentsAllowed])
    }

    /// Successful (200) JSON response bodies of `scenario` that have `rowsKey`, as CouchDB lays them out:
    /// members before the rows, the rows one per line (`separator` between them), then the other members.
    static func bodies(_ scenario: String, rowsKey: String, separator: String) throws -> [Body] {
        let data = try Data(contentsOf: transcripts.appendingPathComponent("\(scenario).json"))
        let root = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let steps = try #require(root["steps"] as? [[String: Any]])
        var result: [Body] = []
        for step in steps {
            let response = try #require(step["response"] as? [String: Any])
            guard response["status"] as? Int == 200, response["body_encoding"] as? String == "json",
                let body = response["body"] as? [String: Any], let rows = body[rowsKey] as? [Any]
            else { continue }
            let before = ["total_rows", "offset", "update_seq"].filter { body[$0] != nil }
            let after = body.keys.filter { $0 != rowsKey && !before.contains($0) }.sorted()
            var text = Data("{".utf8)
            var metadata: [String: Data] = [:]
            for key in before {
                metadata[key] = json(body[key]!)
                text += json(key) + Data(":".utf8) + metadata[key]! + Data(",".utf8)
            }
            let rowData = rows.map { json($0) }
            text += json(rowsKey) + Data(":[".utf8)
            if !rowData.isEmpty {
                text += Data(separator.utf8)
                for (index, row) in rowData.enumerated() {
                    if index > 0 { text += Data(",\(separator)".utf8) }
                    text += row
                }
                text += Data(separator.utf8)
            }
            text += Data("]".utf8)
            for key in after {
                metadata[key] = json(body[key]!)
                text += Data(",\(separator)".utf8) + json(key) + Data(":".utf8) + metadata[key]!
            }
            text += Data("}\n".utf8)
            result.append(
                Body(
                    name: "\(scenario)/\(step["name"] as? String ?? "?")", rowsKey: rowsKey, bytes: Array(text),
                    rows: rowData, metadata: metadata))
        }
        return result
    }

    static func allBodies() throws -> [Body] {
        try bodies("all_docs", rowsKey: "rows", separator: "\r\n") + bodies("views", rowsKey: "rows", separator: "\r\n")
            + bodies("changes", rowsKey: "results", separator: "\n") + bodies("mango", rowsKey: "docs", separator: "\n")
    }
}

@Suite(.cpuBound) struct JSONRowStreamParserTests {
    typealias Parsed = (rows: [Data], metadata: [String: Data])

    /// Parses `bytes` fed in the given chunks.
    /// Rows and metadata of `bytes` fed in the pieces `cuts` makes. Every call also checks that the
    /// row streams' way of feeding (each object row that starts in a chunk offered first to the
    /// fast decoder's strict parser, `leading`) finds the same rows and metadata, or fails with
    /// the same error at the same byte.
    func parse(_ bytes: [UInt8], rowsKey: String?, cuts: [Int]) throws -> Parsed {
        let plain = Result { try frame(bytes, rowsKey: rowsKey, cuts: cuts, offerLeading: false).parsed }
        let offered = Result { try frame(bytes, rowsKey: rowsKey, cuts: cuts, offerLeading: true).parsed }
        switch (plain, offered) {
        case (.success(let a), .success(let b)):
            #expect(a.rows == b.rows && a.metadata == b.metadata, "leading rows taken: cuts \(cuts)")
        case (.failure(let a), .failure(let b)):
            #expect(String(describing: a) == String(describing: b), "leading rows taken: cuts \(cuts)")
        case (.success, .failure(let error)), (.failure(let error), .success):
            Issue.record("Only one way of feeding failed (\(error)); cuts \(cuts)")
        }
        return try plain.get()
    }

    /// ``parse(_:rowsKey:cuts:)`` one way; with `offerLeading`, also how many rows the strict
    /// parser took.
    func frame(_ bytes: [UInt8], rowsKey: String?, cuts: [Int], offerLeading: Bool) throws -> (
        parsed: Parsed, taken: Int
    ) {
        var parser = JSONRowStreamParser(rowsKey: rowsKey)
        var decoder = FastJSONDecoder(dateCoding: .iso8601)
        var rows: [Data] = []
        var taken = 0
        var start = 0
        for cut in cuts + [bytes.count] where cut >= start {
            if offerLeading {
                try parser.feed(
                    Data(bytes[start..<cut]), rows: { rows.append(Data($0)) },
                    leading: { rest in
                        var length = 0
                        _ = decoder.decodeLeadingValue(JSONValue.self, from: rest, length: &length)
                        guard length > 0 else { return nil }
                        rows.append(Data(rest[0..<length]))
                        taken += 1
                        return length
                    })
            } else {
                rows += try parser.feed(bytes[start..<cut])
            }
            start = cut
        }
        try parser.finish()
        return ((rows, parser.metadata), taken)
    }

    @Test func rowsWholeInAChunkAreTakenByTheStrictParser() throws {
        let text = Array(#"{"total_rows":3,"rows":[{"id":"a"} , {"id":"b","v":[1,{"x":"}"}]},{"id":"c"}],"x":1}"#.utf8)
        let whole = try frame(text, rowsKey: "rows", cuts: [], offerLeading: true)
        #expect(whole.taken == 3)
        #expect(
            whole.parsed.rows.map { String(decoding: $0, as: UTF8.self) } == [
                #"{"id":"a"}"#, #"{"id":"b","v":[1,{"x":"}"}]}"#, #"{"id":"c"}"#,
            ])
        #expect(whole.parsed.metadata == ["total_rows": Data("3".utf8), "x": Data("1".utf8)])
        // Cut inside the second row: it is left to the framing, the others are taken.
        let cut = try frame(text, rowsKey: "rows", cuts: [40], offerLeading: true)
        #expect(cut.taken == 2)
        #expect(cut.parsed.rows == whole.parsed.rows)
        // A malformed row is never taken: the framing reports it, at its byte.
        let bad = Array(#"{"rows":[{"id":01}]}"#.utf8)
        let error = #expect(throws: JSONStreamError.self) {
            _ = try frame(bad, rowsKey: "rows", cuts: [], offerLeading: true)
        }
        #expect(error?.offset == 16)
    }

    func parse(_ text: String, rowsKey: String?) throws -> Parsed {
        try parse(Array(text.utf8), rowsKey: rowsKey, cuts: [])
    }

    func randomCuts(_ count: Int, _ generator: inout SeededGenerator) -> [Int] {
        var cuts: [Int] = []
        var position = 0
        while true {
            position += Int.random(in: 1...64, using: &generator)
            if position >= count { return cuts }
            cuts.append(position)
        }
    }

    @Test func transcriptBodiesWhole() throws {
        let bodies = try StreamFixtures.allBodies()
        #expect(bodies.count >= 30)
        #expect(Set(bodies.map(\.rowsKey)) == ["rows", "results", "docs"])
        var totalRows = 0
        for body in bodies {
            let parsed = try parse(body.bytes, rowsKey: body.rowsKey, cuts: [])
            #expect(parsed.rows == body.rows, "\(body.name)")
            #expect(parsed.metadata == body.metadata, "\(body.name)")
            totalRows += parsed.rows.count
        }
        #expect(totalRows > 100)
        // The layout is CouchDB's: rows on their own lines, CRLF-separated for views.
        let view = try #require(bodies.first { $0.name == "views/s05" })
        #expect(String(decoding: view.bytes, as: UTF8.self).contains("[\r\n{"))
        #expect(view.metadata["total_rows"] != nil && view.metadata["offset"] != nil)
    }

    @Test func transcriptBodiesSplitAtEveryPosition() throws {
        let bodies = try StreamFixtures.allBodies()
        let chosen = ["all_docs/s07", "views/s13", "changes/s13", "mango/s03", "changes/s09"]
        for name in chosen {
            let body = try #require(bodies.first { $0.name == name }, "\(name)")
            for cut in 0...body.bytes.count {
                let parsed = try parse(body.bytes, rowsKey: body.rowsKey, cuts: [cut])
                #expect(parsed.rows == body.rows, "\(name) split at \(cut)")
                #expect(parsed.metadata == body.metadata, "\(name) split at \(cut)")
            }
            // And one byte at a time.
            let parsed = try parse(body.bytes, rowsKey: body.rowsKey, cuts: Array(0..<body.bytes.count))
            #expect(parsed.rows == body.rows, "\(name) byte by byte")
        }
    }

    @Test func transcriptBodiesInRandomChunks() throws {
        var generator = SeededGenerator(seed: 42)
        for body in try StreamFixtures.allBodies() {
            for _ in 0..<20 {
                let cuts = randomCuts(body.bytes.count, &generator)
                let parsed = try parse(body.bytes, rowsKey: body.rowsKey, cuts: cuts)
                #expect(parsed.rows == body.rows, "\(body.name) cuts \(cuts)")
                #expect(parsed.metadata == body.metadata, "\(body.name)")
            }
        }
    }

    @Test func viewShapeWithMetadataBeforeAndAfter() throws {
        let text =
            "{\"total_rows\":3,\"offset\":1,\"rows\":[\r\n{\"id\":\"a\",\"key\":\"a\",\"value\":1},\r\n"
            + "{\"id\":\"b\",\"key\":[1,{\"x\":[]}],\"value\":null}\r\n],\r\n\"update_seq\":\"9-abc\"}\n"
        var parser = JSONRowStreamParser(rowsKey: "rows")
        let bytes = Array(text.utf8)
        let cut = text.utf8.count - 20  // inside the update_seq member
        let first = try parser.feed(bytes[0..<cut])
        #expect(
            first.map { String(decoding: $0, as: UTF8.self) } == [
                "{\"id\":\"a\",\"key\":\"a\",\"value\":1}", "{\"id\":\"b\",\"key\":[1,{\"x\":[]}],\"value\":null}",
            ])
        #expect(parser.metadata == ["total_rows": Data("3".utf8), "offset": Data("1".utf8)])
        #expect(try parser.feed(bytes[cut...]).isEmpty)
        try parser.finish()
        #expect(parser.metadata["update_seq"] == Data("\"9-abc\"".utf8))
        #expect(parser.metadata.count == 3)
    }

    @Test func changesAndFindShapes() throws {
        let changes = try parse(
            "{\"results\":[\n{\"seq\":\"1-a\",\"id\":\"x\",\"changes\":[{\"rev\":\"1-b\"}]},\n"
                + "{\"seq\":\"2-a\",\"id\":\"y\",\"changes\":[{\"rev\":\"1-c\"}],\"deleted\":true}\n],\n"
                + "\"last_seq\":\"2-a\",\"pending\":0}\n", rowsKey: "results")
        #expect(changes.rows.count == 2)
        #expect(changes.metadata["last_seq"] == Data("\"2-a\"".utf8))
        #expect(changes.metadata["pending"] == Data("0".utf8))

        let find = try parse(
            "{\"docs\":[\n{\"_id\":\"a\",\"age\":3.5e1}\n],\n\"bookmark\": \"g1AAA\",\n"
                + "\"warning\":\"No matching index found\",\"execution_stats\":{\"total_keys_examined\":0,"
                + "\"execution_time_ms\":1.25}}", rowsKey: "docs")
        #expect(find.rows == [Data("{\"_id\":\"a\",\"age\":3.5e1}".utf8)])
        #expect(find.metadata["bookmark"] == Data("\"g1AAA\"".utf8))
        #expect(find.metadata["warning"] == Data("\"No matching index found\"".utf8))
        #expect(
            find.metadata["execution_stats"]
                == Data("{\"total_keys_examined\":0,\"execution_time_ms\":1.25}".utf8))
    }

    @Test func bareArrayOfBulkDocsResults() throws {
        let text =
            "[{\"ok\":true,\"id\":\"a\",\"rev\":\"1-x\"},\n{\"id\":\"b\",\"error\":\"conflict\",\"reason\":\"Document update conflict.\"}]"
        let parsed = try parse(text, rowsKey: nil)
        #expect(parsed.rows.count == 2)
        #expect(parsed.metadata.isEmpty)
        #expect(
            String(decoding: parsed.rows[1], as: UTF8.self)
                == "{\"id\":\"b\",\"error\":\"conflict\",\"reason\":\"Document update conflict.\"}")

        // Real _bulk_docs results from the transcripts.
        let data = try Data(contentsOf: StreamFixtures.transcripts.appendingPathComponent("bulk.json"))
        let root = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let steps = try #require(root["steps"] as? [[String: Any]])
        var checked = 0
        for step in steps where ["create", "mixed"].contains(step["name"] as? String) {
            let results = try #require((step["response"] as? [String: Any])?["body"] as? [Any])
            let expected = results.map { StreamFixtures.json($0) }
            let body = Array(StreamFixtures.json(results))
            for cut in 0...body.count {
                #expect(try parse(body, rowsKey: nil, cuts: [cut]).rows == expected)
            }
            checked += 1
        }
        #expect(checked == 2)
    }

    @Test func allDocsQueriesResultsAreRows() throws {
        let text =
            "{\"results\":[{\"total_rows\":2,\"offset\":0,\"rows\":[{\"id\":\"a\"}]},{\"total_rows\":2,\"offset\":1,\"rows\":[]}]}"
        let parsed = try parse(text, rowsKey: "results")
        #expect(
            parsed.rows.map { String(decoding: $0, as: UTF8.self) } == [
                "{\"total_rows\":2,\"offset\":0,\"rows\":[{\"id\":\"a\"}]}",
                "{\"total_rows\":2,\"offset\":1,\"rows\":[]}",
            ])
    }

    @Test func errorObjectYieldsNoRowsAndMetadata() throws {
        for rowsKey in ["rows", nil] as [String?] {
            let parsed = try parse("{\"error\":\"not_found\",\"reason\":\"missing\"}", rowsKey: rowsKey)
            #expect(parsed.rows.isEmpty)
            #expect(parsed.metadata == ["error": Data("\"not_found\"".utf8), "reason": Data("\"missing\"".utf8)])
        }
    }

    @Test func nestedMembersNamedLikeTheRowsKeyAreNotRows() throws {
        let parsed = try parse("{\"meta\":{\"rows\":[1,2]},\"r\\u006fws\":[3, \"4\"],\"rows2\":[5]}", rowsKey: "rows")
        #expect(parsed.rows == [Data("3".utf8), Data("\"4\"".utf8)])
        #expect(parsed.metadata["meta"] == Data("{\"rows\":[1,2]}".utf8))
        #expect(parsed.metadata["rows2"] == Data("[5]".utf8))
        // A rows member that is not an array is an error (issue 24: it was metadata, and a stream
        // over it ended with no rows as if that were the answer).
        #expect(throws: JSONStreamError.self) { try parse("{\"rows\":null}", rowsKey: "rows") }
    }

    @Test func trickyStringsAndScalarsSplitEverywhere() throws {
        let rows = [
            "{\"s\":\"]}],{\\\"\\\\\",\"t\":\"\\\\\"}",
            "\"caf\u{e9} \u{20ac} \u{1F600} \\u00e9\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\"",
            "-0.5e+10", "0", "12345678901234567890", "1E-2", "true", "false", "null", "[]", "{}",
            "[[[{\"a\":[{}]}]]]", "\"\"",
        ]
        let text = "[" + rows.joined(separator: " ,\r\n\t") + "]"
        let bytes = Array(text.utf8)
        let expected = rows.map { Data($0.utf8) }
        #expect(try parse(bytes, rowsKey: nil, cuts: []).rows == expected)
        for cut in 0...bytes.count {
            #expect(try parse(bytes, rowsKey: nil, cuts: [cut]).rows == expected, "split at \(cut)")
        }
        var generator = SeededGenerator(seed: 7)
        for _ in 0..<200 {
            let cuts = (0..<3).map { _ in Int.random(in: 0...bytes.count, using: &generator) }.sorted()
            #expect(try parse(bytes, rowsKey: nil, cuts: cuts).rows == expected, "cuts \(cuts)")
        }
        #expect(try parse(bytes, rowsKey: nil, cuts: Array(0..<bytes.count)).rows == expected)
        // Every returned row is valid JSON on its own.
        for row in expected { _ = try JSONSerialization.jsonObject(with: row, options: .fragmentsAllowed) }
    }

    @Test func feedOverloadsAgree() throws {
        let text = Array("{\"rows\":[1,{\"a\":\"b\"}],\"x\":2}".utf8)
        var a = JSONRowStreamParser(rowsKey: "rows")
        var b = JSONRowStreamParser(rowsKey: "rows")
        var c = JSONRowStreamParser(rowsKey: "rows")
        var d = JSONRowStreamParser(rowsKey: "rows")
        let rowsA = try a.feed(text)
        let rowsB = try b.feed(Data(text))
        let rowsC = try text.withUnsafeBytes { raw throws(JSONStreamError) in try c.feed(raw) }
        let rowsD = try d.feed(AnySequence(text))  // not contiguous
        #expect(rowsA == [Data("1".utf8), Data("{\"a\":\"b\"}".utf8)])
        #expect(rowsB == rowsA && rowsC == rowsA && rowsD == rowsA)
        for var parser in [a, b, c, d] {
            try parser.finish()
            #expect(parser.metadata == ["x": Data("2".utf8)])
        }
    }

    @Test(arguments: [
        ("{\"rows\":[1,2}", 12),
        ("{\"rows\":[]}}", 11),
        ("{\"rows\":[]} x", 12),
        ("{\"a\" 1}", 5),
        ("{\"a\":1,}", 7),
        ("[1,]", 3),
        ("[1 2]", 3),
        ("{\"rows\":[01]}", 10),
        ("{\"rows\":[\"\\x\"]}", 11),
        ("{\"rows\":[\"\\u12G4\"]}", 14),
        ("{\"rows\":[tru]}", 12),
        ("{\"rows\":[nul,1]}", 12),
        ("{\"rows\":[\"a\u{1}\"]}", 11),
        ("{\"rows\":[1.]}", 11),
        ("{\"rows\":[-]}", 10),
        ("{\"rows\":[1e]}", 11),
        ("{\"rows\":[+1]}", 9),
        ("{1:2}", 1),
        ("{\"rows\":[]]", 10),
        ("42", 0),
        ("\"text\"", 0),
        ("[{\"a\":1]", 7),
        ("{\"rows\":[{\"a\":1}}", 16),
        ("[1]\u{0}", 3),
    ])
    func malformedInputIsRejected(text: String, offset: Int) throws {
        let bytes = Array(text.utf8)
        let error = #expect(throws: JSONStreamError.self) {
            _ = try parse(bytes, rowsKey: text.hasPrefix("{") ? "rows" : nil, cuts: [])
        }
        #expect(error?.offset == offset, "\(text): \(String(describing: error))")
        #expect(error?.description.contains("byte \(offset)") == true)
        // However the input is split, it is rejected at the same byte.
        for cut in 0...bytes.count {
            let split = #expect(throws: JSONStreamError.self) {
                _ = try parse(bytes, rowsKey: text.hasPrefix("{") ? "rows" : nil, cuts: [cut])
            }
            #expect(split?.offset == offset)
        }
    }

    @Test(arguments: [
        "", "  \r\n", "{\"rows\":[1,2", "{\"rows\":[\"ab", "{\"rows\":[\"a\\", "{\"a\":[1", "{\"total_rows\":1",
    ])
    func incompleteInputFailsAtFinish(text: String) throws {
        var parser = JSONRowStreamParser(rowsKey: "rows")
        _ = try? parser.feed(Array(text.utf8))
        let error = #expect(throws: JSONStreamError.self) { try parser.finish() }
        #expect(error?.offset == text.utf8.count)
    }

    @Test func arrayWhereAnObjectIsExpectedIsAnError() {
        var parser = JSONRowStreamParser(rowsKey: "rows")
        #expect(throws: JSONStreamError.self) { _ = try parser.feed(Array("[1,2]".utf8)) }
    }

    @Test func excessiveNestingIsRejected() {
        var parser = JSONRowStreamParser(rowsKey: nil)
        let deep = [UInt8](repeating: UInt8(ascii: "["), count: JSONRowStreamParser.maximumDepth + 1)
        let error = #expect(throws: JSONStreamError.self) { _ = try parser.feed(deep) }
        #expect(error?.offset == JSONRowStreamParser.maximumDepth)
    }

    @Test func memoryStaysFlatOverManyRows() throws {
        var parser = JSONRowStreamParser(rowsKey: "rows")
        var count = 0
        var maximumBuffered = 0
        var chunk: [UInt8] = []
        func flush() throws {
            count += try parser.feed(chunk).count
            maximumBuffered = max(maximumBuffered, parser.bufferedByteCount)
            chunk.removeAll(keepingCapacity: true)
        }
        chunk += Array("{\"total_rows\":200000,\"offset\":0,\"rows\":[\r\n".utf8)
        for i in 0..<200_000 {
            if i > 0 { chunk += Array(",\r\n".utf8) }
            chunk += Array(
                "{\"id\":\"doc\(i)\",\"key\":[\"k\",\(i)],\"value\":{\"rev\":\"1-abc\",\"s\":\"\\\"}]\"}}".utf8)
            if chunk.count >= 4096 { try flush() }
        }
        chunk += Array("\r\n]}".utf8)
        try flush()
        try parser.finish()
        #expect(count == 200_000)
        #expect(maximumBuffered < 1024, "buffered up to \(maximumBuffered) bytes")
    }

    @Test func aLargeRowDoesNotKeepItsBufferAfterwards() throws {
        var parser = JSONRowStreamParser(rowsKey: nil)
        let big = "\"" + String(repeating: "x", count: 500_000) + "\""
        let bytes = Array("[\(big),1,2]".utf8)
        var rows: [Data] = []
        var start = 0
        while start < bytes.count {
            let end = min(start + 1000, bytes.count)
            rows += try parser.feed(bytes[start..<end])
            start = end
        }
        try parser.finish()
        #expect(rows.count == 3 && rows[0].count == 500_002)
        #expect(parser.bufferedByteCount < 4096)
    }
}
