import Foundation
import SwiftCouch
import SwiftCouchTesting
import SwiftCouchTestSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

@Suite("Pagers end when the server's paging does not advance")
struct PagingLoopTests {
    static func find(bookmark: String?, docs: [String]) -> SimulatedResponse {
        let rows = docs.map { #"{"_id":"\#($0)"}"# }.joined(separator: ",")
        let mark = bookmark.map { #","bookmark":"\#($0)""# } ?? ""
        return .json(200, #"{"docs":[\#(rows)]\#(mark)}"#)
    }

    static func sentBookmark(_ request: HTTPRequest) -> String? {
        guard let body = request.body, let json = try? JSONDecoder().decode(JSONValue.self, from: body),
            case .object(let fields) = json, case .string(let mark)? = fields["bookmark"]
        else { return nil }
        return mark
    }

    static let query = FindOperation<JSONValue>(database: "db", selector: .field("n").greaterThan(0))

    @Test("_find answering the same bookmark forever: one page, then a CouchError saying so")
    func sameBookmarkForever() async {
        let responder = CountingResponder { _, _ in Self.find(bookmark: "B", docs: ["a", "b"]) }
        let (pages, error) = await drain(responder.client().pages(Self.query, pageSize: 2))
        let couchError = error as? CouchError
        #expect(couchError?.kind == .decoding, "\(String(describing: error))")
        #expect(couchError?.message.contains("bookmark") == true)
        #expect(pages == 1)
        #expect(responder.requests <= 3, "\(responder.requests) requests")
    }

    @Test("_find bookmarks that go round in a cycle end with a CouchError within a few pages")
    func bookmarkCycle() async {
        let responder = CountingResponder { index, _ in
            Self.find(bookmark: ["A", "B", "C"][index % 3], docs: ["a\(index)", "b\(index)"])
        }
        let (pages, error) = await drain(responder.client().pages(Self.query, pageSize: 2))
        #expect((error as? CouchError)?.kind == .decoding, "\(String(describing: error))")
        #expect(pages < 12)
        #expect(responder.requests < 14)
    }

    @Test("CouchDB's own end of _find paging (a last, empty page with the same bookmark) ends normally")
    func realEnd() async {
        let responder = CountingResponder { _, request in
            switch Self.sentBookmark(request) {
            case nil: return Self.find(bookmark: "B1", docs: ["a", "b"])
            case "B1"?: return Self.find(bookmark: "B2", docs: ["c", "d"])
            default: return Self.find(bookmark: "B2", docs: [])
            }
        }
        let (pages, error) = await drain(responder.client().pagedRows(Self.query, pageSize: 2))
        #expect(error == nil, "\(String(describing: error))")
        #expect(pages == 4)
        #expect(responder.requests == 3)
    }

    static func allDocs(_ ids: [String]) -> SimulatedResponse {
        let rows = ids.map { #"{"id":"\#($0)","key":"\#($0)","value":{"rev":"1-a"}}"# }.joined(separator: ",")
        return .json(200, #"{"total_rows":100,"offset":0,"rows":[\#(rows)]}"#)
    }

    @Test("_all_docs answering the same page forever: one page, then a CouchError saying the key did not advance")
    func samePageForever() async {
        let responder = CountingResponder { _, _ in Self.allDocs(["a", "b", "c"]) }
        let (pages, error) = await drain(
            responder.client().pages(AllDocsOperation<JSONValue>(database: "db"), pageSize: 2))
        let couchError = error as? CouchError
        #expect(couchError?.kind == .decoding, "\(String(describing: error))")
        #expect(couchError?.message.contains("advance") == true)
        #expect(pages <= 2)
        #expect(responder.requests <= 3, "\(responder.requests) requests")
    }

    @Test("_all_docs pages that repeat the previous page's rows end with a CouchError")
    func repeatedRows() async {
        // Always rows a, b, with a different extra row each time: the token moves, the page does not.
        let responder = CountingResponder { index, _ in Self.allDocs(["a", "b", "x\(index)"]) }
        let (pages, error) = await drain(
            responder.client().pages(AllDocsOperation<JSONValue>(database: "db"), pageSize: 2))
        #expect((error as? CouchError)?.kind == .decoding, "\(String(describing: error))")
        #expect(pages <= 2)
        #expect(responder.requests <= 3)
    }

    @Test("Ordinary key paging still reads every page")
    func ordinaryKeyPaging() async {
        let ids = (0..<7).map { "k\($0)" }
        let responder = CountingResponder { _, request in
            let start = request.url.query.flatMap { query -> String? in
                URLComponents(string: "?" + query)?.queryItems?.first {
                    $0.name == "startkey" || $0.name == "start_key"
                }?
                .value
            }
            let from = start.map { ids.firstIndex(of: String($0.dropFirst().dropLast())) ?? 0 } ?? 0
            return Self.allDocs(Array(ids[from..<min(ids.count, from + 3)]))
        }
        let (rows, error) = await drain(
            responder.client().pagedRows(AllDocsOperation<JSONValue>(database: "db"), pageSize: 2))
        #expect(error == nil, "\(String(describing: error))")
        #expect(rows == 7)
    }
}
