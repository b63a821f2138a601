import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

@Suite("Key paging: requests, look-ahead and tokens", .ownThreads)
struct KeyPagingTests {
    static func rows(_ ids: [String]) -> String {
        let rows = ids.map { #"{"id":"\#($0)","key":"\#($0)","value":{"rev":"1-a"}}"# }.joined(separator: ",")
        return #"{"total_rows":100,"offset":0,"rows":[\#(rows)]}"#
    }

    @Test("First page asks for pageSize + 1 rows and uses the extra row as the next token")
    func firstPage() throws {
        let run = Simulation.run(
            KeyPageOperation(AllDocsOperation<JSONValue>(database: "db"), pageSize: 3),
            response: .json(200, Self.rows(["a", "b", "c", "d"])))
        #expect(run.request?.path == "/db/_all_docs")
        #expect(run.request?.queryValue("limit") == "4")
        let page = try run.result.get().value
        #expect(page.rows.compactMap(\.id) == ["a", "b", "c"])
        #expect(page.next == PageToken(direction: .forward, key: "d", documentID: "d"))
        #expect(page.previous == nil)
    }

    @Test("A backward page runs descending from the token, skipping it, and reverses the rows")
    func backwardPage() throws {
        let token = PageToken(direction: .backward, key: "g", documentID: "g")
        let run = Simulation.run(
            KeyPageOperation(AllDocsOperation<JSONValue>(database: "db"), pageSize: 3, token: token),
            response: .json(200, Self.rows(["f", "e", "d", "c"])))
        #expect(run.request?.queryValue("descending") == "true")
        #expect(run.request?.queryValue("skip") == "1")
        #expect(run.request?.queryValue("limit") == "4")
        #expect(run.request?.queryValue("startkey") ?? run.request?.queryValue("start_key") == "\"g\"")
        let page = try run.result.get().value
        #expect(page.rows.compactMap(\.id) == ["d", "e", "f"])
        #expect(page.previous == PageToken(direction: .backward, key: "d", documentID: "d"))
        #expect(page.next == PageToken(direction: .forward, key: "g", documentID: "g"))
    }

    @Test("The last page has no next token")
    func lastPage() throws {
        let run = Simulation.run(
            KeyPageOperation(
                AllDocsOperation<JSONValue>(database: "db"), pageSize: 3,
                token: PageToken(direction: .forward, key: "x", documentID: nil)),
            response: .json(200, Self.rows(["x", "y"])))
        let page = try run.result.get().value
        #expect(page.next == nil)
        #expect(page.previous == PageToken(direction: .backward, key: "x", documentID: "x"))
    }

    @Test("Tokens survive their string form and Codable, and garbage is rejected")
    func tokens() throws {
        let token = PageToken(direction: .forward, key: ["a", 1, ["nested": true]], documentID: "id/with+chars")
        #expect(PageToken(rawValue: token.rawValue) == token)
        #expect(!token.rawValue.contains("+") && !token.rawValue.contains("/") && !token.rawValue.contains("="))
        let encoded = try JSONEncoder().encode(["token": token])
        #expect(try JSONDecoder().decode([String: PageToken].self, from: encoded)["token"] == token)
        #expect(PageToken(rawValue: "not a token") == nil)
    }
}
