import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

@Suite("Database operations: HEAD, compaction, cleanup, limits, revisions, purge, shards", .ownThreads)
struct DatabaseMaintenanceTests {
    @Test("HEAD /{db}: 200 is true, 404 is false, 401 is an error")
    func exists() throws {
        let step = try #require(Transcripts.step("databases", "s08"))
        let run = Simulation.run(DatabaseExistsOperation(name: "tx_db"), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        #expect(run.value == true)

        let missing = Simulation.run(DatabaseExistsOperation(name: "tx_db"), response: SimulatedResponse(status: 404))
        #expect(missing.value == false)
        #expect(missing.error == nil)

        let denied = Simulation.run(DatabaseExistsOperation(name: "tx_db"), response: SimulatedResponse(status: 401))
        #expect(denied.error?.statusCode == 401)
        OpsFixtures.expectInvalid(DatabaseExistsOperation(name: "Bad"), containing: "lowercase letter")
    }

    @Test("POST /{db}/_compact and /_compact/{ddoc} carry Content-Type: application/json and no body")
    func compact() throws {
        let step = try #require(Transcripts.step("maintenance", "s09"))
        let run = Simulation.run(CompactDatabaseOperation(database: "tx_maint"), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        #expect(run.request?.headers["Content-Type"] == "application/json")
        #expect(run.request?.body == nil)
        let response = try run.result.get()
        #expect(response.statusCode == 202)
        #expect(response.value == OKResponse(ok: true))

        let viewStep = try #require(Transcripts.step("maintenance", "s11"))
        for name in ["v", "_design/v"] {
            let views = Simulation.run(
                CompactDatabaseOperation(database: "tx_maint", designDocument: name), response: viewStep.simulated)
            #expect(OpsFixtures.line(views.request) == "POST /tx_maint/_compact/v")
            #expect(views.request?.headers["Content-Type"] == "application/json")
        }

        let refused = try #require(Transcripts.step("maintenance", "s10"))
        let error = Simulation.run(CompactDatabaseOperation(database: "tx_maint"), response: refused.simulated).error
        #expect(error?.statusCode == 415)
        #expect(error?.error == "bad_content_type")
        OpsFixtures.expectInvalid(
            CompactDatabaseOperation(database: "db", designDocument: "_design/"), containing: "must not be empty")
    }

    @Test("POST /{db}/_view_cleanup and /_ensure_full_commit")
    func cleanupAndCommit() throws {
        let step = try #require(Transcripts.step("maintenance", "s12"))
        let run = Simulation.run(ViewCleanupOperation(database: "tx_maint"), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        #expect(run.request?.headers["Content-Type"] == "application/json")
        #expect(run.value?.ok == true)

        let commit = Simulation.run(
            EnsureFullCommitOperation(database: "db"),
            response: .json(201, #"{"ok":true,"instance_start_time":"0"}"#))
        #expect(OpsFixtures.line(commit.request) == "POST /db/_ensure_full_commit")
        #expect(commit.request?.headers["Content-Type"] == "application/json")
        #expect(commit.value == FullCommitResponse(ok: true, instanceStartTime: "0"))
    }

    @Test("GET/PUT /{db}/_revs_limit with bare numbers; a 500 function_clause is an error")
    func revsLimit() throws {
        let getStep = try #require(Transcripts.step("maintenance", "s04"))
        let get = Simulation.run(
            GetDatabaseLimitOperation(database: "tx_maint", limit: .revisions), response: getStep.simulated)
        #expect(OpsFixtures.line(get.request) == OpsFixtures.line(getStep))
        #expect(get.value == 1000)

        let putStep = try #require(Transcripts.step("maintenance", "s05"))
        let put = Simulation.run(
            SetDatabaseLimitOperation(database: "tx_maint", limit: .revisions, value: 5), response: putStep.simulated)
        #expect(OpsFixtures.line(put.request) == OpsFixtures.line(putStep))
        #expect(put.request?.body == putStep.requestBody)
        #expect(put.request?.body == Data("5".utf8))
        #expect(put.request?.headers["Content-Type"] == "application/json")
        #expect(put.value?.ok == true)

        let bad = try #require(Transcripts.step("maintenance", "s06"))
        let error = Simulation.run(
            SetDatabaseLimitOperation(database: "tx_maint", limit: .revisions, value: 5), response: bad.simulated
        ).error
        #expect(error?.statusCode == 500)
        #expect(error?.reason == "function_clause")
        OpsFixtures.expectInvalid(
            SetDatabaseLimitOperation(database: "db", limit: .revisions, value: 0),
            containing: "value must be at least 1")
    }

    @Test("GET/PUT /{db}/_purged_infos_limit")
    func purgedInfosLimit() throws {
        let get = Simulation.run(
            GetDatabaseLimitOperation(database: "db", limit: .purgedInfos), response: .json(200, "1000\n"))
        #expect(OpsFixtures.line(get.request) == "GET /db/_purged_infos_limit")
        #expect(get.value == 1000)
        let put = Simulation.run(
            SetDatabaseLimitOperation(database: "db", limit: .purgedInfos, value: 200),
            response: .json(200, #"{"ok":true}"#))
        #expect(OpsFixtures.line(put.request) == "PUT /db/_purged_infos_limit")
        #expect(put.request?.body == Data("200".utf8))
    }

    @Test("POST /{db}/_revs_diff sends the map and decodes missing and possible_ancestors")
    func revsDiff() throws {
        let step = try #require(Transcripts.step("bulk", "s12"))
        let revisions: RevisionsByDocument = [
            "r": ["3-cccccccccccccccccccccccccccccccc", "4-dddddddddddddddddddddddddddddddd"],
            "a": ["2-d0df861eb528e79690cd2ff3c4d394f3"],
            "zz": ["1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"],
        ]
        let run = Simulation.run(RevsDiffOperation(database: "tx_bulk", revisions: revisions), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        #expect(run.request?.bodyJSON == OpsFixtures.json(step.requestBody))
        let diff = try run.result.get().value
        #expect(diff.count == 2)
        #expect(diff["a"] == nil)
        #expect(diff["zz"] == RevisionDifference(missing: ["1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]))
        #expect(
            diff["r"]
                == RevisionDifference(
                    missing: ["4-dddddddddddddddddddddddddddddddd"],
                    possibleAncestors: ["3-cccccccccccccccccccccccccccccccc"]))

        OpsFixtures.expectInvalid(
            RevsDiffOperation(database: "db", revisions: [:]), containing: "at least one document")
        OpsFixtures.expectInvalid(RevsDiffOperation(database: "db", revisions: ["a": []]), containing: "no revisions")
        OpsFixtures.expectInvalid(RevsDiffOperation(database: "db", revisions: ["a": ["x"]]), containing: "N-hash")
    }

    @Test("POST /{db}/_missing_revs decodes missing_revs")
    func missingRevs() throws {
        let run = Simulation.run(
            MissingRevsOperation(database: "db", revisions: ["a": ["1-x", "2-y"]]),
            response: .json(200, #"{"missing_revs":{"a":["2-y"]}}"#))
        #expect(OpsFixtures.line(run.request) == "POST /db/_missing_revs")
        #expect(run.request?.bodyJSON == ["a": ["1-x", "2-y"]])
        #expect(run.value?.missingRevs == ["a": ["2-y"]])
    }

    @Test("POST /{db}/_purge sends the map; a null purge_seq decodes as nil")
    func purge() throws {
        let step = try #require(Transcripts.step("maintenance", "s07"))
        let run = Simulation.run(
            PurgeOperation(database: "tx_maint", revisions: ["doomed": ["1-7a7e4b29f3af401e69b6f86e4c26b727"]]),
            response: step.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        #expect(run.request?.bodyJSON == OpsFixtures.json(step.requestBody))
        let purged = try run.result.get()
        #expect(purged.statusCode == 201)
        #expect(purged.value.purgeSeq == nil)
        #expect(purged.value.purged == ["doomed": ["1-7a7e4b29f3af401e69b6f86e4c26b727"]])

        let numbered = Simulation.run(
            PurgeOperation(database: "db", revisions: ["a": ["1-x"]]),
            response: .json(201, #"{"purge_seq":"1-g1","purged":{"a":["1-x"]}}"#))
        #expect(numbered.value?.purgeSeq == "1-g1")
    }

    @Test("GET /{db}/_shards and /{db}/_shards/{docid}")
    func shards() throws {
        let all = Simulation.run(
            GetShardsOperation(database: "db"),
            response: .json(200, #"{"shards":{"00000000-7fffffff":["node1@127.0.0.1"],"80000000-ffffffff":["n2"]}}"#))
        #expect(OpsFixtures.line(all.request) == "GET /db/_shards")
        #expect(all.value?.shards["80000000-ffffffff"] == ["n2"])

        let one = Simulation.run(
            GetDocumentShardOperation(database: "db", documentID: "a/b"),
            response: .json(200, #"{"range":"80000000-ffffffff","nodes":["n2"]}"#))
        #expect(OpsFixtures.line(one.request) == "GET /db/_shards/a%2Fb")
        #expect(one.value == DocumentShard(range: "80000000-ffffffff", nodes: ["n2"]))
    }
}
