import Foundation
import HTTPWire
import TestScheduling
import Testing

@testable import CouchStore

/// `ServerRequest` decodes a path segment or query part only when it holds a `%` or a `+` (Foundation's decoding is
/// skipped for the others): the answers are those of decoding every part.
@Suite(.ownThreads) struct ServerRequestDecodingTests {
    private func request(_ path: String, _ query: String?) -> ServerRequest {
        ServerRequest(method: "GET", rawPath: path, rawQuery: query, headers: HTTPHeaders(), body: Data())
    }

    /// What every part decoded by Foundation gives (`+` as a space, a part that does not decode kept as sent).
    private func decodedWhole(_ part: Substring) -> String {
        part.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(part)
    }

    @Test func pathSegmentsDecodeAsBefore() {
        let path = "/db/a%2Fb/a+b/%zz/plain/_design/caf%C3%A9/é/x%20y//end"
        let segments = request(path, nil).pathSegments
        #expect(segments == ["db", "a/b", "a b", "%zz", "plain", "_design", "café", "é", "x y", "end"])
        #expect(segments == path.split(separator: "/").map(decodedWhole))
    }

    @Test func queryPartsDecodeAsBefore() {
        let query = "include_docs=true&key=%22a%22&x=a+b&bad=%zz&empty=&flag&startkey=%5B1%2C2%5D"
        let parts = request("/db/_all_docs", query).query
        #expect(parts.map(\.name) == ["include_docs", "key", "x", "bad", "empty", "flag", "startkey"])
        #expect(parts.map(\.value) == ["true", "\"a\"", "a b", "%zz", "", "", "[1,2]"])
    }
}
