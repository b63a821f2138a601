import Foundation
import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

/// Issue 24: one element of a streamed answer (a row, a feed line, a top-level member) that never
/// ends must not be held whole; the limit is enforced as bytes arrive.
@Suite("Streamed answers: the limit on one row, line or member", .ownThreads)
struct StreamedElementLimitTests {
    static let limit = 1 << 20
    static let chunk = [UInt8](repeating: UInt8(ascii: "x"), count: 64 << 10)

    /// Feeds `prefix`, then chunks of `x` until the parser throws or 8 times the limit went in.
    /// Returns the error, the bytes fed and the most the parser held.
    func feedEndless(_ prefix: String, rowsKey: String?) -> (error: JSONStreamError?, fed: Int, held: Int) {
        var parser = JSONRowStreamParser(rowsKey: rowsKey, maximumElementSize: Self.limit)
        var fed = 0
        var held = 0
        do {
            _ = try parser.feed(Array(prefix.utf8))
            while fed < 8 * Self.limit {
                _ = try parser.feed(Self.chunk)
                fed += Self.chunk.count
                held = max(held, parser.bufferedByteCount)
            }
        } catch {
            return (error, fed, held)
        }
        return (nil, fed, held)
    }

    @Test(
        "A row, a member value or a member name that never ends stops at the limit, holding no more than it",
        arguments: [
            (#"{"total_rows":1,"offset":0,"rows":[{"id":"a","doc":{"text":""#, "rows"),
            (#"{"rows":[1,2,""#, "rows"),
            (#"{"total_rows":1,"warning":""#, "rows"),
            (#"{"total_rows":1,""#, "rows"),
            (#"[{"ok":true},""#, nil),
        ] as [(String, String?)])
    func endlessElement(prefix: String, rowsKey: String?) {
        let (error, fed, held) = feedEndless(prefix, rowsKey: rowsKey)
        #expect(error?.exceededLimit == Self.limit, "\(String(describing: error))")
        #expect(error?.message.contains("\(Self.limit)") == true)
        #expect(fed <= Self.limit + Self.chunk.count, "\(fed) bytes were taken in")
        #expect(held <= Self.limit + Self.chunk.count, "\(held) bytes were held")
    }

    @Test("An element exactly at the limit passes; one byte more fails, also when it arrives in one piece")
    func boundary() throws {
        let size = 1_000
        // A row of exactly `size` bytes: a string of size - 2 characters and its quotes.
        let row = "\"" + String(repeating: "y", count: size - 2) + "\""
        for pieces in [1, 7, size] {
            var parser = JSONRowStreamParser(rowsKey: "rows", maximumElementSize: size)
            var rows = 0
            let body = Array("{\"rows\":[\(row)]}".utf8)
            var start = 0
            let step = max(1, body.count / pieces)
            while start < body.count {
                let end = min(body.count, start + step)
                rows += try parser.feed(body[start..<end]).count
                start = end
            }
            try parser.finish()
            #expect(rows == 1)

            var over = JSONRowStreamParser(rowsKey: "rows", maximumElementSize: size - 1)
            let error = #expect(throws: JSONStreamError.self) {
                var start = 0
                while start < body.count {
                    let end = min(body.count, start + step)
                    _ = try over.feed(body[start..<end])
                    start = end
                }
            }
            #expect(error?.exceededLimit == size - 1)
        }
    }

    @Test("A row taken whole from one chunk by the strict decoder is held to the limit too, and named a row")
    func leadingRowOverTheLimit() throws {
        var parser = JSONRowStreamParser(rowsKey: "rows", maximumElementSize: 100)
        let row = #"{"id":""# + String(repeating: "w", count: 200) + #""}"#
        let body = Data(#"{"rows":[\#(row)]}"#.utf8)
        var decoder = FastJSONDecoder(dateCoding: .iso8601)
        let error = #expect(throws: JSONStreamError.self) {
            try parser.feed(
                body, rows: { _ in },
                leading: { rest in
                    var length = 0
                    _ = decoder.decodeLeadingValue(JSONValue.self, from: rest, length: &length)
                    return length > 0 ? length : nil
                })
        }
        #expect(error?.exceededLimit == 100)
        #expect(error?.message.hasPrefix("a row") == true, "\(String(describing: error))")
        #expect(error?.description.hasPrefix("Element too large") == true)
    }

    @Test("Many small top-level members count together against the limit")
    func manyMembers() {
        var parser = JSONRowStreamParser(rowsKey: "rows", maximumElementSize: 10_000)
        let error = #expect(throws: JSONStreamError.self) {
            _ = try parser.feed(Array("{".utf8))
            for index in 0..<100_000 { _ = try parser.feed(Array("\"m\(index)\":\(index),".utf8)) }
        }
        #expect(error?.exceededLimit == 10_000)
    }

    @Test("Without a limit the parser behaves as before (a long row is read whole)")
    func noLimit() throws {
        var parser = JSONRowStreamParser(rowsKey: nil)
        let big = "\"" + String(repeating: "z", count: 3 << 20) + "\""
        let rows = try parser.feed(Array("[\(big)]".utf8))
        try parser.finish()
        #expect(rows.count == 1 && rows[0].count == (3 << 20) + 2)
    }

    @Test("A continuous feed line that never ends stops at the limit, holding no more than it")
    func endlessLine() {
        var splitter = NDJSONSplitter(maximumLineLength: Self.limit)
        var fed = 0
        var held = 0
        let error = #expect(throws: JSONStreamError.self) {
            _ = try splitter.feed(Data(#"{"seq":"1-a","id":"a","doc":{"t":""#.utf8))
            while fed < 8 * Self.limit {
                _ = try splitter.feed(Self.chunk)
                fed += Self.chunk.count
                held = max(held, splitter.bufferedByteCount)
            }
        }
        #expect(error?.exceededLimit == Self.limit)
        #expect(fed <= Self.limit + Self.chunk.count, "\(fed) bytes were taken in")
        #expect(held <= Self.limit + Self.chunk.count, "\(held) bytes were held")
    }

    @Test("A line at the limit passes, a longer one fails even when it arrives in one piece")
    func lineBoundary() throws {
        var splitter = NDJSONSplitter(maximumLineLength: 10)
        #expect(try splitter.feed(Data("0123456789\n".utf8)) == [Data("0123456789".utf8)])
        #expect(throws: JSONStreamError.self) { _ = try splitter.feed(Data("0123456789A\n".utf8)) }
        var again = NDJSONSplitter(maximumLineLength: 10)
        #expect(throws: JSONStreamError.self) {
            _ = try again.feed(Data("01234".utf8))
            _ = try again.feed(Data("56789AB".utf8))
        }
    }

    @Test("A flood of heartbeat newlines (and blanks between them) holds nothing and never fails")
    func heartbeatFlood() throws {
        var splitter = NDJSONSplitter(maximumLineLength: 1_000)
        let beats = Data(String(repeating: "\n\r\n  \n\t\n", count: 16 << 10).utf8)
        var lines = 0
        for _ in 0..<64 {
            lines += try splitter.feed(beats).count
            #expect(splitter.bufferedByteCount < 64)
        }
        // Blanks without a newline at all (a stalled feed writing spaces) are not kept either.
        for _ in 0..<64 {
            lines += try splitter.feed(Data(repeating: 0x20, count: 64 << 10)).count
            #expect(splitter.bufferedByteCount < 64)
        }
        lines += try splitter.feed(Data("{\"seq\":1}\n".utf8)).count
        #expect(lines == 1)
        #expect(splitter.finish() == nil)
    }
}

/// Issue 24: a streamed answer whose rows member is not an array is not a success with no rows.
@Suite("Streamed answers: a rows member of the wrong type", .ownThreads)
struct StreamedShapeTests {
    @Test(
        "A rows member that is an object, string, number, literal or null is an error, in any chunking",
        arguments: [
            #"{"total_rows":1,"rows":{"id":"a"}}"#, #"{"rows":"many"}"#, #"{"rows":12,"total_rows":1}"#,
            #"{"rows":true}"#, #"{"rows":null}"#, #"{"offset":0,"rows":{}}"#,
        ])
    func wrongRowsType(body: String) {
        let bytes = Array(body.utf8)
        for cut in 0...bytes.count {
            var parser = JSONRowStreamParser(rowsKey: "rows")
            let error = #expect(throws: JSONStreamError.self, "cut at \(cut)") {
                _ = try parser.feed(bytes[0..<cut])
                _ = try parser.feed(bytes[cut...])
                try parser.finish()
            }
            #expect(error?.message.contains("\"rows\"") == true, "\(String(describing: error))")
        }
    }

    @Test("The rows member found (or not) is reported, for callers that need it")
    func rowsMemberSeen() throws {
        var parser = JSONRowStreamParser(rowsKey: "rows")
        _ = try parser.feed(Array(#"{"error":"x","reason":"y"}"#.utf8))
        try parser.finish()
        #expect(!parser.foundRows)
        var other = JSONRowStreamParser(rowsKey: "rows")
        _ = try other.feed(Array(#"{"rows":[]}"#.utf8))
        try other.finish()
        #expect(other.foundRows)
    }
}
