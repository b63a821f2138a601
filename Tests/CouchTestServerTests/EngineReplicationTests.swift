import CouchQuery
import Foundation
import Testing

@testable import CouchStore
@testable import CouchTestServer

@Suite struct EngineReplicationTests {
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
}
