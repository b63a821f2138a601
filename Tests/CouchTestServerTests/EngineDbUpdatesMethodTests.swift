import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// `/_db_updates` answers GET (and HEAD, which CouchDB's chttpd serves as a GET without its body)
/// and nothing else: global_changes_httpd sends 405 with `Allow: GET` to any other method, before it
/// checks who is asking.
@Suite(.ownThreads) struct EngineDbUpdatesMethodTests {
    @Test func onlyGetAndHeadAreAnswered() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/_global_changes")
        engine.send("PUT", "/db")
        let get = engine.send("GET", "/_db_updates")
        #expect(get.status == 200)
        let head = engine.send("HEAD", "/_db_updates")
        #expect(head.status == 200)
        #expect(head.data.isEmpty)
        #expect(head.headers["Content-Type"] == get.headers["Content-Type"])

        for method in ["POST", "PUT", "DELETE"] {
            let reply = engine.send(method, "/_db_updates", json: [:])
            #expect(reply.status == 405, "\(method)")
            #expect(reply.headers["Allow"] == "GET", "\(method)")
            #expect(reply.json["error"]?.stringValue == "method_not_allowed")
            #expect(reply.json["reason"]?.stringValue == "Only GET allowed")
        }
        // The method is checked before who asks: anonymous POST is 405 too, anonymous GET 401.
        #expect(engine.send("POST", "/_db_updates", json: [:], auth: .anonymous).status == 405)
        #expect(engine.send("GET", "/_db_updates", auth: .anonymous).status == 401)
    }
}
