import Foundation
import Testing

@testable import SwiftCouch

/// A document whose decoding records the coding path it was decoded at.
private struct PathDoc: Decodable, Equatable, Sendable {
    var n: Int
    var path: [String]

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: DynamicCodingKey.self)
        n = try container.decode(Int.self, forKey: DynamicCodingKey("n"))
        path = decoder.codingPath.map(\.stringValue)
    }
}

/// `read` run on the top-level object of `json` by the fast decoder: nil when it returned nil.
private func fastRead<T>(_ json: String, _ read: @escaping @Sendable (FastJSONObjectReader) throws -> T?) throws
    -> T?
{
    let captured: @Sendable (FastJSONObjectReader) throws -> Any? = { try read($0) }
    return try Capture.$read.withValue(captured) {
        try FastJSONDecoder.decode(Capture.self, from: Data(json.utf8), dateCoding: .iso8601).value as? T
    }
}

/// Runs the task's `read` inside `init(from:)`.
private struct Capture: Decodable {
    @TaskLocal static var read: (@Sendable (FastJSONObjectReader) throws -> Any?)?
    let value: Any?

    init(from decoder: any Decoder) throws {
        let reader = try #require(FastJSONObjectReader(decoder))
        let read = try #require(Capture.read)
        value = try read(reader)
    }
}

@Suite("FastJSON: rows and bulk results read without keyed containers")
struct FastJSONObjectReaderTests {
    @Test("The reader exists only inside the fast decoder and only for an object")
    func readerOnlyForFastObjects() throws {
        struct Has: Decodable {
            let reader: Bool
            init(from decoder: any Decoder) throws { reader = FastJSONObjectReader(decoder) != nil }
        }
        #expect(try FastJSONDecoder.decode(Has.self, from: Data("{}".utf8), dateCoding: .iso8601).reader)
        #expect(try !FastJSONDecoder.decode(Has.self, from: Data("[]".utf8), dateCoding: .iso8601).reader)
        #expect(try !FastJSONDecoder.decode(Has.self, from: Data("null".utf8), dateCoding: .iso8601).reader)
        #expect(try !JSONDecoder().decode(Has.self, from: Data("{}".utf8)).reader)
    }

    @Test("_all_docs rows: the usual shapes are read directly, with the document at its coding path")
    func allDocsRowsReadDirectly() throws {
        let live = #"{"id":"a","key":"a","value":{"rev":"1-x"},"doc":{"_id":"a","n":1}}"#
        let row = try #require(try fastRead(live) { try AllDocsRow<PathDoc>.read($0) })
        #expect(row.id == "a" && row.key == "a" && row.value == .init(rev: "1-x") && row.doc?.n == 1)
        #expect(row.doc?.path == ["doc"])
        let deleted = #"{"id":"b","key":"b","value":{"rev":"2-y","deleted":true},"doc":null}"#
        let gone = try #require(try fastRead(deleted) { try AllDocsRow<PathDoc>.read($0) })
        #expect(gone.value?.deleted == true && gone.doc == nil && !gone.exists)
        let missing = #"{"key":"zz","error":"not_found"}"#
        let notFound = try #require(try fastRead(missing) { try AllDocsRow<PathDoc>.read($0) })
        #expect(notFound.id == nil && notFound.value == nil && notFound.error == "not_found")
        let noDocs = #"{"id":"c","key":"c","value":{"rev":"1-z"}}"#
        #expect(try fastRead(noDocs) { try AllDocsRow<PathDoc>.read($0) }?.doc == nil)
    }

    @Test("_all_docs rows that are not as expected are left to the container, with Foundation's result")
    func allDocsRowsUnexpected() throws {
        let unexpected = [
            #"{"id":"a","value":{"rev":"1-x"}}"#,  // no key
            #"{"id":1,"key":"a","value":{"rev":"1-x"}}"#,  // id not a string
            #"{"id":"a","key":"a","value":{"rev":1}}"#,  // rev not a string
            #"{"id":"a","key":"a","value":{}}"#,  // no rev
            #"{"id":"a","key":"a","value":{"rev":"1-x","deleted":"yes"}}"#,
            #"{"id":"a","key":"a","value":[1]}"#, #"{"id":"a","key":"a","value":{"rev":"1"},"error":7}"#,
        ]
        for json in unexpected {
            #expect(try fastRead(json) { try AllDocsRow<PathDoc>.read($0) } == nil, "\(json)")
            expectSameDecoding(AllDocsRow<JSONValue>.self, json, fast: nil)
        }
        let same = [
            #"{"id":"a","key":"a","value":{"rev":"1-x"},"doc":{"_id":"a","n":1}}"#,
            #"{"id":null,"key":"a","value":null,"doc":null,"error":null}"#,
            #"{"key":"zz","error":"not_found"}"#, #"{"id":"a","key":"a","value":{"rev":"1","deleted":false},"x":[]}"#,
            #"{"id":"b","key":"b","value":{"rev":"2-y","deleted":true},"doc":null}"#,
            #"{"id":"a","id":"b","key":"a","value":{"rev":"1"}}"#,  // a repeated member: the first
            #"{"id":"a","key":"a","value":{"rev":"1"},"doc":5}"#,  // the document's own error
        ]
        for json in unexpected + same { expectSameDecoding(AllDocsRow<JSONValue>.self, json, fast: nil) }
        // Errors inside the document: the same path and message either way.
        expectSameDecoding(
            AllDocsRow<Note>.self, #"{"id":"a","key":"a","value":{"rev":"1"},"doc":{"text":"t"}}"#, fast: nil)
        expectSameDecoding(
            AllDocsRow<Note>.self, #"{"id":"a","key":"a","value":{"rev":"1"},"doc":{"text":"t","n":"x"}}"#, fast: nil)
        expectSameDecoding(
            AllDocsRow<Note>.self, #"{"id":"a","key":"a","value":{"rev":"1"},"doc":{"text":"t","n":2}}"#, fast: nil)
    }

    @Test("View rows: read directly when id, key and value are there; otherwise the container's error")
    func viewRows() throws {
        typealias Row = ViewRow<JSONValue, Int, PathDoc>
        let row = try #require(
            try fastRead(#"{"id":"d","key":["a",1],"value":3,"doc":{"n":4}}"#) { try Row.read($0) })
        #expect(row.id == "d" && row.key == .array([.string("a"), .int(1)]) && row.value == 3)
        #expect(row.doc?.path == ["doc"])
        let reduced = try #require(try fastRead(#"{"key":null,"value":10}"#) { try Row.read($0) })
        #expect(reduced.id == nil && reduced.key == .null && reduced.doc == nil)
        #expect(try fastRead(#"{"id":"d","value":3}"#) { try Row.read($0) } == nil)
        #expect(try fastRead(#"{"id":2,"key":1,"value":3}"#) { try Row.read($0) } == nil)
        for json in [
            #"{"id":"d","key":"k","value":3}"#, #"{"id":"d","key":"k","value":"3"}"#, #"{"id":"d","value":3}"#,
            #"{"id":"d","key":"k"}"#, #"{"id":5,"key":"k","value":3}"#, #"{"id":"d","key":"k","value":null}"#,
            #"{"id":"d","key":"k","value":3,"doc":{"text":"t","n":1}}"#, #"{"id":"d","key":"k","value":3,"doc":[]}"#,
        ] {
            expectSameDecoding(ViewRow<String, Int, Note>.self, json, fast: nil)
        }
    }

    @Test("Bulk results: successes read directly, failures and odd shapes by the container")
    func bulkResults() throws {
        let success = try fastRead(#"{"ok":true,"id":"a","rev":"1-x"}"#) { BulkWriteResult.read($0) }
        #expect(success == .success(id: "a", rev: "1-x"))
        #expect(try fastRead(#"{"id":"a","error":"conflict","reason":"r"}"#) { BulkWriteResult.read($0) } == nil)
        #expect(try fastRead(#"{"id":"a","rev":null}"#) { BulkWriteResult.read($0) } == nil)
        for json in [
            #"[{"ok":true,"id":"a","rev":"1-x"},{"id":"b","error":"conflict","reason":"Document update conflict."}]"#,
            #"[{"id":"a","error":null}]"#, #"[{"id":"a"}]"#, #"[{"id":"a","rev":5}]"#, #"[{"ok":true,"rev":"1"}]"#,
            #"[{"id":"x","error":"forbidden","reason":"no"}]"#,
        ] {
            expectSameDecoding([BulkWriteResult].self, json, fast: nil)
        }
    }

    @Test("A _bulk_docs answer of successes is read element by element; any other is left to Array")
    func bulkAnswersReadWhole() throws {
        func direct(_ json: String) throws -> [BulkWriteResult]? {
            let impl = FastJSONDecoderImpl(dateCoding: .iso8601)
            let bytes = Array(json.utf8)
            return try bytes.withUnsafeBytes { raw in
                _ = try impl.parse(raw, leadingValueOnly: false)
                return impl.bulkWriteResults(token: 0)
            }
        }
        let successes = #"[{"ok":true,"id":"a","rev":"1-x"},{"ok":true,"id":"b\u00e9","rev":"2-y"}]"#
        #expect(try direct(successes) == [.success(id: "a", rev: "1-x"), .success(id: "bé", rev: "2-y")])
        #expect(try direct("[]") == [])
        expectSameDecoding([BulkWriteResult].self, successes, fast: true)
        expectSameDecoding([BulkWriteResult].self, "[]", fast: true)
        for json in [
            #"[{"ok":true,"id":"a","rev":"1-x"},{"id":"b","error":"conflict","reason":"Document update conflict."}]"#,
            #"[{"ok":true,"id":"a","rev":"1-x"},7]"#, #"[{"id":"a","rev":null}]"#, #"{"id":"a","rev":"1"}"#,
        ] {
            #expect(try direct(json) == nil, "\(json)")
            expectSameDecoding([BulkWriteResult].self, json, fast: nil)
        }
    }
}

@Suite("The _bulk_docs answer scanner")
struct BulkAnswerScannerTests {
    func scan(_ json: String) -> [BulkWriteResult]? {
        Array(json.utf8).withUnsafeBytes { BulkAnswerScanner.successes(in: $0) }
    }

    @Test("CouchDB's answer of successes is read in one pass, as the decoder reads it")
    func canonical() throws {
        let rows = (0..<300).map { #"{"ok":true,"id":"doc\#($0)é/x","rev":"1-\#(String($0, radix: 16))abc"}"# }
        let json = "[" + rows.joined(separator: ",") + "]"
        let scanned = try #require(scan(json))
        #expect(scanned.count == 300)
        #expect(scanned[7] == .success(id: "doc7é/x", rev: "1-7abc"))
        let decoded = try JSONDecoder().decode([BulkWriteResult].self, from: Data(json.utf8))
        #expect(scanned == decoded)
        #expect(scan("[]") == [])
        #expect(scan(" \n[]\r\n") == [])
        #expect(scan(" [" + rows[0] + "]\n") == [.success(id: "doc0é/x", rev: "1-0abc")])
    }

    @Test("Any other shape is left to the decoder, which reads it as before")
    func otherShapes() throws {
        for json in [
            #"[{"ok":true,"id":"a","rev":"1-x"},{"id":"b","error":"conflict","reason":"Document update conflict."}]"#,
            #"[{"ok": true,"id":"a","rev":"1-x"}]"#, #"[ {"ok":true,"id":"a","rev":"1-x"}]"#,
            #"[{"ok":true,"id":"a\"b","rev":"1-x"}]"#, #"[{"ok":true,"id":"a\u00e9","rev":"1-x"}]"#,
            #"[{"ok":true,"rev":"1-x","id":"a"}]"#, #"[{"ok":true,"id":"a","rev":"1-x","extra":1}]"#,
            #"[{"ok":true,"id":"a","rev":"1-x"}"#, #"[{"ok":true,"id":"a","rev":"1-x"}]x"#,
            #"[{"ok":true,"id":"a","rev":"1-x"},]"#, #"[{"ok":false,"id":"a","rev":"1-x"}]"#,
            #"[{"id":"a","rev":"1-x"}]"#, #"{"ok":true,"id":"a","rev":"1-x"}"#, "", "[",
        ] {
            #expect(scan(json) == nil, "\(json)")
            expectSameDecoding([BulkWriteResult].self, json, fast: nil)
        }
        let invalidUTF8: [UInt8] = Array(#"[{"ok":true,"id":"a"#.utf8) + [0xFF] + Array(#"","rev":"1-x"}]"#.utf8)
        #expect(invalidUTF8.withUnsafeBytes { BulkAnswerScanner.successes(in: $0) } == nil)
        let control: [UInt8] = Array(#"[{"ok":true,"id":"a"#.utf8) + [0x01] + Array(#"","rev":"1-x"}]"#.utf8)
        #expect(control.withUnsafeBytes { BulkAnswerScanner.successes(in: $0) } == nil)
    }
}

private struct Note: Decodable, Equatable {
    var text: String
    var n: Int
}
