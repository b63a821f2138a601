import Foundation
import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

@Suite("TopLevelStrings: _id and _rev read from encoded bytes, as JSONDecoder reads them", .ownThreads)
struct TopLevelStringsTests {
    private struct Meta: Decodable, Equatable {
        var _id: String?
        var _rev: String?
    }

    /// What JSONDecoder makes of the same bytes (nil: it refuses them).
    private func decoded(_ json: String) -> [String?]? {
        guard let meta = try? JSONDecoder().decode(Meta.self, from: Data(json.utf8)) else { return nil }
        return [meta._id, meta._rev]
    }

    @Test(
        "Agrees with JSONDecoder",
        arguments: [
            #"{"_id":"a","_rev":"1-x","n":1}"#,
            #"{"n":{"_id":"inner","x":[1,{"_rev":"no"}]},"_id":"outer"}"#,
            #"{}"#,
            #"{ "_id" : "spaced" , "_rev" : null }"#,
            #"{"_id":"a\"b\\c\u00e9\/"}"#,
            #"{"\u005fid":"escaped key"}"#,
            #"{"_id":"first","_id":"last"}"#,
            #"{"text":"a \"_id\": \"trap\" ,}","_id":"real"}"#,
            #"{"_id":12}"#,
            #"{"_rev":["1-a"]}"#,
            #"{"_id":true}"#,
            #"{"a":[],"b":{},"c":"}","_id":"after"}"#,
            "{\"_id\":\"ü🎸\"}",
        ])
    func agreesWithJSONDecoder(json: String) {
        #expect(TopLevelStrings.find(["_id", "_rev"], in: Data(json.utf8)) == decoded(json))
    }

    @Test("Malformed input is refused")
    func malformed() {
        for json in [#"["_id"]"#, #"{"_id":"open"#, #"{"_id" "a"}"#, #"{"_id":"a",}"#, ""] {
            #expect(TopLevelStrings.find(["_id"], in: Data(json.utf8)) == nil, "\(json)")
        }
    }
}
