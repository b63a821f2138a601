import Foundation
import SwiftCouch
import SwiftCouchTesting
import Testing

@Suite("Server operations: _up, _uuids, _all_dbs, _dbs_info, _active_tasks, _membership, _db_updates")
struct ServerOperationTests {
    @Test("GET /_up decodes the recorded health check; a 404 maintenance_mode is a status, not an error")
    func up() throws {
        let step = try #require(Transcripts.step("server", "s03"))
        let run = Simulation.run(GetServerStatusOperation(), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        let status = try run.result.get().value
        #expect(status == ServerStatus(status: "ok", seeds: [:]))
        #expect(status.isUp)

        let draining = Simulation.run(
            GetServerStatusOperation(), response: .json(404, #"{"status":"maintenance_mode"}"#))
        #expect(draining.value == ServerStatus(status: "maintenance_mode"))
        #expect(draining.value?.isUp == false)

        let broken = Simulation.run(GetServerStatusOperation(), response: .json(500, #"{"error":"x","reason":"y"}"#))
        #expect(broken.error?.statusCode == 500)
        #expect(broken.error?.error == "x")
    }

    @Test("GET /_uuids?count=3 decodes three UUIDs; count 1 sends no parameter; count 0 is refused")
    func uuids() throws {
        let step = try #require(Transcripts.step("server", "s04"))
        let run = Simulation.run(GetUUIDsOperation(count: 3), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == "GET /_uuids?count=3")
        #expect(run.value?.uuids == step.responseJSON?["uuids"]?.arrayValue?.compactMap(\.stringValue))
        #expect(run.value?.uuids.count == 3)

        let one = Simulation.run(GetUUIDsOperation(), response: .json(200, #"{"uuids":["a"]}"#))
        #expect(OpsFixtures.line(one.request) == "GET /_uuids")
        OpsFixtures.expectInvalid(GetUUIDsOperation(count: 0), containing: "count must be at least 1")

        let bad = try #require(Transcripts.step("server", "s05"))
        let refused = Simulation.run(GetUUIDsOperation(count: 3), response: bad.simulated)
        #expect(refused.error?.statusCode == 400)
        #expect(refused.error?.reason == "count must be a positive integer")
    }

    @Test("GET /_all_dbs sends every paging option, JSON-encoding the keys")
    func allDbsPaging() throws {
        let step = try #require(Transcripts.step("server", "s08"))
        let op = ListDatabasesOperation(
            descending: true, limit: 5, skip: 1, startKey: "tx_srv_\u{FFF0}", endKey: "tx_srv_")
        let run = Simulation.run(op, response: step.simulated)
        #expect(
            OpsFixtures.line(run.request)
                == "GET /_all_dbs?descending=true&limit=5&skip=1&start_key=%22tx_srv_%EF%BF%B0%22&end_key=%22tx_srv_%22"
        )
        #expect(run.value == ["tx_srv_a"])
        OpsFixtures.expectInvalid(ListDatabasesOperation(limit: -1), containing: "limit must not be negative")
    }

    @Test("GET /_dbs_info over a key range decodes [{key, info}] exactly as recorded")
    func dbsInfoRange() throws {
        let step = try #require(Transcripts.step("server", "s09"))
        let run = Simulation.run(
            GetDatabasesInfoOperation(startKey: "tx_srv_", endKey: "tx_srv_\u{FFF0}"), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        let rows = try run.result.get().value
        #expect(rows.count == 1)
        #expect(rows[0].key == "tx_srv_a")
        #expect(rows[0].error == nil)
        let info = try #require(rows[0].info)
        #expect(info.dbName == "tx_srv_a")
        #expect(info.diskFormatVersion == 8)
        #expect(info.cluster?.q == 2)
        #expect(info.cluster?.n == 1)
        #expect(info.sizes?.file == 16700)
        #expect(info.updateSeq == step.responseJSON?[0]?["info"]?["update_seq"])
    }

    @Test("POST /_dbs_info with keys sends {keys} and decodes a not_found row")
    func dbsInfoKeys() throws {
        let step = try #require(Transcripts.step("server", "s10"))
        let run = Simulation.run(
            GetDatabasesInfoOperation(keys: ["tx_srv_missing", "tx_srv_a"]), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == "POST /_dbs_info")
        #expect(run.request?.headers["Content-Type"] == "application/json")
        #expect(run.request?.bodyJSON == OpsFixtures.json(step.requestBody))
        let rows = try run.result.get().value
        #expect(rows.map(\.key) == ["tx_srv_missing", "tx_srv_a"])
        #expect(rows[0].error == "not_found")
        #expect(rows[0].info == nil)
        #expect(rows[1].info?.docCount == 0)

        OpsFixtures.expectInvalid(GetDatabasesInfoOperation(keys: []), containing: "keys must not be empty")
        var mixed = GetDatabasesInfoOperation(keys: ["a"])
        mixed.limit = 2
        OpsFixtures.expectInvalid(mixed, containing: "keys cannot be combined")
    }

    @Test("GET /_active_tasks types the common fields and keeps the rest")
    func activeTasks() throws {
        let step = try #require(Transcripts.step("server", "s11"))
        let run = Simulation.run(GetActiveTasksOperation(), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == "GET /_active_tasks")
        let tasks = try run.result.get().value
        let task = try #require(tasks.first)
        #expect(task.type == .databaseCompaction)
        #expect(task.node == "couchdb@127.0.0.1")
        #expect(task.pid == "<0.14582.14>")
        #expect(task.processStatus == "waiting")
        #expect(task.database == "_dbs")
        #expect(task.progress == 0)
        #expect(task.changesDone == 0)
        #expect(task.totalChanges == 1738)
        #expect(task.startedOn == 1_795_331_096)
        #expect(task.otherFields == ["phase": "document_copy"])
        #expect(task["phase"] == "document_copy")
        #expect(task["total_changes"] == 1738)

        let indexer = Simulation.run(
            GetActiveTasksOperation(),
            response: .json(
                200,
                #"[{"type":"indexer","design_document":"_design/a","changes_done":5,"total_changes":10,"#
                    + #""started_on":1,"updated_on":2,"database":"shards/x/db"}]"#))
        #expect(indexer.value?.first?.type == .indexer)
        #expect(indexer.value?.first?.otherFields == ["design_document": "_design/a"])
    }

    @Test("GET /_membership decodes the node lists")
    func membership() throws {
        let step = try #require(Transcripts.step("server", "s12"))
        let run = Simulation.run(GetMembershipOperation(), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == "GET /_membership")
        #expect(run.value?.allNodes == ["couchdb@127.0.0.1"])
        #expect(run.value?.clusterNodes == ["couchdb@127.0.0.1"])
    }

    @Test("GET /_db_updates: normal and longpoll with since, timeout and heartbeat")
    func dbUpdates() throws {
        let body =
            #"{"results":[{"db_name":"mydb","type":"created","seq":"1-g1AA"},"#
            + #"{"db_name":"mydb","type":"deleted","seq":"2-g1AA"}],"last_seq":"2-g1AA"}"#
        let normal = Simulation.run(GetDatabaseUpdatesOperation(), response: .json(200, body))
        #expect(OpsFixtures.line(normal.request) == "GET /_db_updates")
        let updates = try normal.result.get().value
        #expect(updates.results.map(\.dbName) == ["mydb", "mydb"])
        #expect(updates.results.map(\.type) == ["created", "deleted"])
        #expect(updates.results.first?.seq == "1-g1AA")
        #expect(updates.lastSeq == "2-g1AA")

        let poll = Simulation.run(
            GetDatabaseUpdatesOperation(feed: .longpoll, since: .now, timeout: 5000),
            response: .json(200, "\n" + body))
        #expect(OpsFixtures.line(poll.request) == "GET /_db_updates?feed=longpoll&since=now&timeout=5000")
        #expect(poll.value?.lastSeq == "2-g1AA")

        let beating = Simulation.run(
            GetDatabaseUpdatesOperation(feed: .longpoll, since: CouchSequence(12), heartbeat: 1000),
            response: .json(200, body))
        #expect(OpsFixtures.line(beating.request) == "GET /_db_updates?feed=longpoll&since=12&heartbeat=1000")

        OpsFixtures.expectInvalid(
            GetDatabaseUpdatesOperation(timeout: 1, heartbeat: 1), containing: "timeout and heartbeat")
        OpsFixtures.expectInvalid(GetDatabaseUpdatesOperation(heartbeat: 0), containing: "heartbeat must be at least 1")
    }

    @Test("A sequence decodes from a string or a number and goes back into since= unchanged")
    func sequences() throws {
        let decoded = try JSONDecoder().decode([CouchSequence].self, from: Data(#"["7-g1A",42,null]"#.utf8))
        #expect(decoded.map(\.queryValue) == ["7-g1A", "42", "null"])
        #expect(decoded[0] == "7-g1A")
        #expect(decoded[1] == 42)
        #expect(CouchSequence.now.queryValue == "now")
        #expect(try OpsFixtures.sortedText(decoded) == #"["7-g1A",42,null]"#)
    }
}
