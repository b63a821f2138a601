import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

@Suite(.ownThreads) struct EngineServerTests {
    @Test func nodeConfigurationRoundTrip() throws {
        let engine = try ServerEngine(options: testOptions())
        #expect(engine.send("GET", "/_node/_local").json["name"] == "couchdb@127.0.0.1")
        // CouchDB 3.5.0's default.ini: authentication_db is set, timeout is commented out.
        #expect(engine.send("GET", "/_node/_local/_config/couch_httpd_auth/authentication_db").json == "_users")
        #expect(engine.send("GET", "/_node/_local/_config/chttpd_auth/timeout").status == 404)
        #expect(engine.send("GET", "/_node/_local/_config/couchdb/max_document_size").status == 404)
        #expect(engine.send("GET", "/_node/_local/_config/couchdb/uuid").json == .string(engine.serverUUID))
        #expect(engine.send("PUT", "/_node/_local/_config/x/y", json: "1").json == "")
        #expect(engine.send("PUT", "/_node/_local/_config/x/y", json: "2").json == "1")
        #expect(engine.send("GET", "/_node/_local/_config/x").json == ["y": "2"])
        #expect(engine.send("DELETE", "/_node/_local/_config/x/y").json == "2")
        #expect(engine.send("GET", "/_node/_local/_config/x/y").status == 404)
        #expect(engine.send("GET", "/_node/_local/_config", auth: .anonymous).status == 401)
    }

    @Test func databaseUpdatesFeed() throws {
        let engine = try ServerEngine(options: testOptions())
        // Served from _global_changes, as CouchDB does: 404 until it exists.
        #expect(
            engine.send("GET", "/_db_updates").json == ["error": "not_found", "reason": "Database does not exist."])
        #expect(
            engine.send("PUT", "/_users").json == [
                "error": "file_exists", "reason": "The database could not be created, the file already exists.",
            ])
        #expect(engine.send("PUT", "/_global_changes").status == 201)
        let start = engine.send("GET", "/_db_updates").json["last_seq"]!.stringValue!
        engine.send("PUT", "/one")
        engine.send("PUT", "/one/doc", json: [:])
        engine.send("PUT", "/two")
        engine.send("DELETE", "/two")
        let events = engine.send("GET", "/_db_updates?since=\(start)").json["results"]?.arrayValue ?? []
        #expect(events.map { $0["db_name"] } == ["one", "two"])
        #expect(events.map { $0["type"] } == ["created", "deleted"])
        let writer = Thread {
            Thread.sleep(forTimeInterval: 0.2)
            engine.send("PUT", "/three")
        }
        writer.start()
        let polled = engine.send("GET", "/_db_updates?feed=longpoll&since=now&timeout=5000").json
        #expect(polled["results"]?.arrayValue?.first?["db_name"] == "three")
    }

    /// The normal and longpoll feeds are written as global_changes_httpd.erl writes them:
    /// `{"results":[` and a newline, rows joined by `,\r\n`, then `\n],\n"last_seq":…}\n`. They hold
    /// only what happened since `_global_changes` was created (events before it are lost, as
    /// global_changes_server drops them while the database does not exist), and none of its own.
    @Test func databaseUpdatesLayoutAndHistory() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/before")
        #expect(engine.send("PUT", "/_global_changes").status == 201)
        let empty = engine.send("GET", "/_db_updates")
        let emptySeq = try #require(empty.json["last_seq"]?.stringValue)
        #expect(empty.text == "{\"results\":[\n\n],\n\"last_seq\":\"\(emptySeq)\"}\n")
        engine.send("PUT", "/one")
        engine.send("PUT", "/two")
        for path in ["/_db_updates", "/_db_updates?feed=longpoll&timeout=100"] {
            let reply = engine.send("GET", path)
            let rows = reply.json["results"]?.arrayValue ?? []
            #expect(rows.map { $0["db_name"] } == ["one", "two"], "\(path)")
            let last = try #require(reply.json["last_seq"]?.stringValue)
            let lines = rows.map { row in
                "{\"db_name\":\"\(row["db_name"]!.stringValue!)\",\"type\":\"created\",\"seq\":\"\(row["seq"]!.stringValue!)\"}"
            }
            let expected = "{\"results\":[\n" + lines.joined(separator: ",\r\n") + "\n],\n\"last_seq\":\"\(last)\"}\n"
            #expect(reply.text == expected, "\(path)")
        }
        // History does not survive deleting and recreating _global_changes.
        engine.send("DELETE", "/_global_changes")
        engine.send("PUT", "/three")
        engine.send("PUT", "/_global_changes")
        #expect(engine.send("GET", "/_db_updates").json["results"] == [])
        engine.send("PUT", "/four")
        let after = engine.send("GET", "/_db_updates").json["results"]?.arrayValue ?? []
        #expect(after.map { $0["db_name"] } == ["four"])
    }

    @Test func welcomeUuidsAndErrors() throws {
        let engine = try ServerEngine(options: testOptions())
        let welcome = engine.send("GET", "/", auth: .anonymous)
        #expect(welcome.json["version"] == "3.5.0")
        #expect(engine.send("GET", "/_uuids?count=5").json["uuids"]?.arrayValue?.count == 5)
        #expect(engine.send("GET", "/_uuids?count=abc").status == 400)
        #expect(engine.send("PUT", "/Bad").json["error"] == "illegal_database_name")
        #expect(engine.send("GET", "/_nonexistent").json["reason"] == "Database does not exist.")
        let head = engine.send("HEAD", "/_users")
        #expect(head.status == 200 && head.data.isEmpty && head.headers["Content-Length"] != nil)
        #expect(engine.send("PATCH", "/_users/x").headers["Allow"] == "DELETE,GET,HEAD,POST,PUT,COPY")
    }
}
