import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

@Suite(.ownThreads) struct EngineReplicationTests {
    /// Polls `condition` for up to `seconds` (the replicator works in the background).
    private func eventually(_ seconds: Double = 5, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return condition()
    }

    @Test func replicatorDocumentsRunAndRecordTheirState() throws {
        let engine = try ServerEngine(options: testOptions())
        defer { engine.close() }
        engine.send("PUT", "/src")
        engine.send("POST", "/src/_bulk_docs", json: ["docs": [["_id": "a"], ["_id": "b", "x": 1]]])
        let put = engine.send(
            "PUT", "/_replicator/job1",
            json: [
                "source": "http://admin:password@127.0.0.1:5984/src", "target": "dst", "create_target": true,
            ])
        #expect(put.status == 201)
        #expect(eventually { engine.send("GET", "/_replicator/job1").json["_replication_state"] == "completed" })
        #expect(engine.send("GET", "/dst/b").json["x"] == 1)
        let docs = engine.send("GET", "/_scheduler/docs").json
        #expect(docs["docs"]?.arrayValue?.first?["state"] == "completed")
        #expect(docs["docs"]?.arrayValue?.first?["source"] == "http://127.0.0.1:5984/src/")
        #expect(engine.send("GET", "/_scheduler/docs/_replicator/job1").json["doc_id"] == "job1")
    }

    @Test func continuousReplicationFollowsTheSourceUntilCancelled() throws {
        let engine = try ServerEngine(options: testOptions())
        defer { engine.close() }
        engine.send("PUT", "/src")
        engine.send("PUT", "/dst")
        let start = engine.send("POST", "/_replicate", json: ["source": "src", "target": "dst", "continuous": true])
        #expect(start.status == 202)
        let id = try #require(start.json["_local_id"]?.stringValue)
        engine.send("PUT", "/src/later", json: ["v": 1])
        #expect(eventually { engine.send("GET", "/dst/later").status == 200 })
        #expect(engine.send("GET", "/_scheduler/jobs").json["jobs"]?.arrayValue?.count == 1)
        #expect(
            engine.send("POST", "/_replicate", json: ["replication_id": .string(id), "cancel": true]).status == 200)
        #expect(engine.send("GET", "/_scheduler/jobs").json["jobs"] == [])
    }
    /// Answers of a real CouchDB 3.5.0 (admin password `swiftcouch-admin`, recorded 2026-11-28):
    /// `"source": "http://admin:swiftcouch%2Dadmin@…/src"` and a wrong password in the URL or in
    /// `auth.basic` are 500 `replication_auth_error` (its replicator does not percent-decode the URL's
    /// user information); no credentials for an admin-only database are 401; a missing source is 500.
    /// The TestServer copied in every case, whatever the credentials, and answered 404 for a missing source.
    @Test func replicationEndpointsAuthenticateAsCouchDBDoes() throws {
        let engine = try ServerEngine(options: testOptions())
        defer { engine.close() }
        engine.send("PUT", "/src")
        engine.send("PUT", "/src/a", json: ["v": 1])
        engine.send("PUT", "/dst")
        let good = "http://admin:password@127.0.0.1:5984/dst"
        func replicate(_ source: JSON, _ target: JSON = .string(good)) -> EngineReply {
            engine.send("POST", "/_replicate", json: ["source": source, "target": target])
        }
        // Fewer than five failures for the admin: a fifth locks it out (CouchDB's lockout, per user).
        func refused(_ name: String) -> String {
            "{session_request_unauthorized,\"http://127.0.0.1:5984/_session\",\"\(name)\"}"
        }
        for (source, name): (JSON, String) in [
            ("http://admin:wrong@127.0.0.1:5984/src", "admin"), ("http://admin:p%61ssword@127.0.0.1:5984/src", "admin"),
            (
                ["url": "http://127.0.0.1:5984/src", "auth": ["basic": ["username": "bob", "password": "wrong"]]], "bob"
            ),
            // auth.basic comes before the URL's credentials.
            (
                [
                    "url": "http://admin:password@127.0.0.1:5984/src",
                    "auth": ["basic": ["username": "eve", "password": "x"]],
                ],
                "eve"
            ),
        ] {
            let reply = replicate(source)
            #expect(reply.status == 500, "\(source)")
            #expect(reply.json["error"] == "replication_auth_error")
            #expect(reply.json["reason"]?.stringValue == refused(name))
        }
        let target = replicate("http://admin:password@127.0.0.1:5984/src", "http://admin:nope@127.0.0.1:5984/dst")
        #expect(target.status == 500)
        #expect(target.json["error"] == "replication_auth_error")
        let anonymous = replicate("http://127.0.0.1:5984/src")
        #expect(anonymous.status == 401)
        #expect(anonymous.json["error"] == "unauthorized")
        #expect(anonymous.json["reason"] == "unauthorized to access or create database http://127.0.0.1:5984/src/")
        #expect(engine.send("GET", "/dst/a").status == 404)
        let missing = replicate("http://admin:password@127.0.0.1:5984/nothing")
        #expect(missing.status == 500)
        #expect(missing.json["error"] == "db_not_found")
        #expect(missing.json["reason"] == "could not open http://127.0.0.1:5984/nothing/")

        // The credentials as CouchDB takes them: in auth.basic, in a Basic header, in the URL.
        let header = "Basic " + Data("admin:password".utf8).base64EncodedString()
        for source: JSON in [
            ["url": "http://127.0.0.1:5984/src", "auth": ["basic": ["username": "admin", "password": "password"]]],
            ["url": "http://127.0.0.1:5984/src", "headers": ["Authorization": .string(header)]],
            "http://admin:password@127.0.0.1:5984/src",
        ] {
            #expect(replicate(source).status == 200, "\(source)")
        }
        #expect(engine.send("GET", "/dst/a").json["v"] == 1)
    }
}
