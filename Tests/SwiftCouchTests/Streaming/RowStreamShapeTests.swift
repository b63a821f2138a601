import Foundation
import SwiftCouch
import SwiftCouchTesting
import SwiftCouchTestSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

@Suite("Streamed answers of the wrong shape end with a decoding error, not an empty success")
struct RowStreamShapeTests {
    static func stream(_ body: String, status: Int = 200, configure: (inout Configuration) -> Void = { _ in })
        -> CouchRowStream<AllDocsRow<JSONValue>>
    {
        let responder = CountingResponder { _, _ in .json(status, body) }
        return responder.client(configure: configure).rows(AllDocsOperation<JSONValue>(database: "db"))
    }

    @Test(
        "rows as an object, string or number, or no rows at all, fail as value() does: .decoding, status, body",
        arguments: [
            #"{"total_rows":1,"offset":0,"rows":{"id":"a","key":"a","value":{"rev":"1-a"}}}"#,
            #"{"total_rows":1,"offset":0,"rows":"a"}"#, #"{"total_rows":1,"offset":0,"rows":1}"#,
            #"{"total_rows":1,"offset":0}"#, #"{"error":"nope","reason":"a 200 that is no answer"}"#,
        ])
    func wrongRows(body: String) async {
        let whole = await CountingResponder { _, _ in .json(200, body) }.client().allDocsError()
        #expect(whole?.kind == .decoding, "value() itself accepts \(body)")
        let (count, error) = await drain(Self.stream(body))
        let couchError = error as? CouchError
        #expect(count == 0)
        #expect(couchError?.kind == .decoding, "\(String(describing: error))")
        #expect(couchError?.statusCode == 200)
        #expect(couchError?.bodyText?.contains("total_rows") == true || body.contains("error"))
    }

    @Test("_changes streamed: results not an array, or no last_seq, fail; a good body still streams")
    func changesShapes() async {
        for body in [
            #"{"results":{"seq":"1"},"last_seq":"1"}"#, #"{"results":[{"seq":"1","id":"a","changes":[]}]}"#,
        ] {
            let responder = CountingResponder { _, _ in .json(200, body) }
            let (_, error) = await drain(responder.client().rows(ChangesOperation<JSONValue>(database: "db")))
            #expect((error as? CouchError)?.kind == .decoding, "\(body): \(String(describing: error))")
        }
        let good = CountingResponder { _, _ in
            .json(200, #"{"results":[{"seq":"1","id":"a","changes":[{"rev":"1-a"}]}],"last_seq":"1","pending":0}"#)
        }
        let (count, error) = await drain(good.client().rows(ChangesOperation<JSONValue>(database: "db")))
        #expect(count == 1)
        #expect(error == nil)
    }

    @Test("A row past Configuration.maximumStreamedElementSize ends the stream with an error naming the limit")
    func elementLimitFromTheConfiguration() async {
        let big = String(repeating: "b", count: 40_000)
        let body =
            #"{"rows":[{"id":"a","key":"a","value":{"rev":"1-a"}},{"id":"\#(big)","key":"b","value":{"rev":"1-b"}}]}"#
        let (count, error) = await drain(Self.stream(body) { $0.maximumStreamedElementSize = 32_000 })
        let couchError = error as? CouchError
        #expect(count <= 1)
        #expect(couchError?.kind == .decoding)
        #expect(couchError?.message.contains("maximumStreamedElementSize") == true, "\(String(describing: error))")
        #expect(couchError?.message.contains("32000") == true)
        #expect(couchError?.statusCode == 200)
        // The default (16 MiB) lets it through.
        let (all, none) = await drain(Self.stream(body))
        #expect(all == 2 && none == nil)
    }

    @Test("An error status still arrives as that error")
    func errorStatus() async {
        let (_, error) = await drain(Self.stream(#"{"error":"not_found","reason":"missing"}"#, status: 404))
        #expect((error as? CouchError)?.statusCode == 404)
        #expect((error as? CouchError)?.error == "not_found")
    }
    @Test("A continuous feed's closing line nested 1,000,000 deep is an error or metadata, never a crash")
    func deepClosingLine() async {
        let deep = String(repeating: "[", count: 1_000_000) + String(repeating: "]", count: 1_000_000)
        let body = #"{"seq":"1","id":"a","changes":[{"rev":"1-a"}]}"# + "\n" + #"{"last_seq":"# + deep + "}\n"
        let responder = CountingResponder { _, _ in .json(200, body) }
        let stream = responder.client().rows(ContinuousChangesOperation(ChangesOperation<JSONValue>(database: "db")))
        let (_, error) = await drain(stream)
        // Not a valid closing line, so read as a row, which does not decode: the stream's error.
        #expect((error as? CouchError)?.kind == .decoding, "\(String(describing: error))")
    }
}

extension CouchDBClient {
    /// The error `value()` gives for an `_all_docs` answer, if any.
    fileprivate func allDocsError() async -> CouchError? {
        do {
            _ = try await value(AllDocsOperation<JSONValue>(database: "db"))
            return nil
        } catch {
            return error
        }
    }
}
