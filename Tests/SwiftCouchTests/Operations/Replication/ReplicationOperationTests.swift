import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

@Suite("Replication: _replicate, _replicator documents, _scheduler", .ownThreads)
struct ReplicationOperationTests {
    private let sourceURL = URL(string: "http://admin:password@127.0.0.1:5984/tx_rep_src")!

    @Test("One-shot replication between URLs: the recorded body and result")
    func oneShot() throws {
        let step = try #require(Transcripts.step("replication", "s04"))
        let target = URL(string: "http://admin:password@127.0.0.1:5984/tx_rep_tgt")!
        let op = ReplicateOperation(source: .remote(url: sourceURL), target: .remote(url: target))
        let run = Simulation.run(op, response: step.simulated)
        #expect(OpsFixtures.line(run.request) == "POST /_replicate")
        #expect(run.request?.bodyJSON == OpsFixtures.json(step.requestBody))
        let result = try run.result.get().value
        #expect(result.ok)
        #expect(result.sessionID == "a91a7e5663a3c48c4864ec117e888630")
        #expect(result.replicationIDVersion == 4)
        #expect(result.sourceLastSeq?.json == step.responseJSON?["source_last_seq"])
        let history = try #require(result.history?.first)
        #expect(history.docsWritten == 3)
        #expect(history.missingChecked == 3)
        #expect(history.startLastSeq == 0)
        #expect(history.endLastSeq == result.sourceLastSeq)
        #expect(!String(describing: op).contains("password"))
    }

    @Test("doc_ids + create_target, and plain database names, as recorded")
    func docIDsAndNames() throws {
        let step = try #require(Transcripts.step("replication", "s05"))
        let settings = ReplicationSettings(
            source: .remote(url: sourceURL),
            target: .remote(url: URL(string: "http://admin:password@127.0.0.1:5984/tx_rep_new")!),
            createTarget: true, docIDs: ["r2"])
        let run = Simulation.run(ReplicateOperation(settings: settings), response: step.simulated)
        #expect(run.request?.bodyJSON == OpsFixtures.json(step.requestBody))
        #expect(run.value?.docsWritten == 1)

        let names = try #require(Transcripts.step("replication", "s07"))
        let local = Simulation.run(
            ReplicateOperation(source: .database("tx_rep_src"), target: .database("tx_rep_tgt")),
            response: names.simulated)
        #expect(local.request?.bodyJSON == OpsFixtures.json(names.requestBody))
        #expect(local.value?.history?.first?.docsWritten == 0)

        let missing = try #require(Transcripts.step("replication", "s06"))
        let failed = Simulation.run(
            ReplicateOperation(source: .database("tx_rep_src"), target: .database("tx_rep_missing")),
            response: missing.simulated)
        #expect(failed.error?.statusCode == 500)
        #expect(failed.error?.error == "db_not_found")
    }

    @Test("Continuous, selector, headers, basic auth, cancel: every setting by CouchDB's name")
    func settings() throws {
        var settings = ReplicationSettings(
            source: .remote(
                url: URL(string: "https://example.com/src")!, headers: ["Authorization": "Bearer t"],
                basicAuth: Credentials(username: "u", password: "p")),
            target: .database("tgt"), continuous: true, selector: .field("type").equals("x"), sinceSeq: "3-abc")
        settings.winningRevsOnly = true
        settings.useCheckpoints = false
        settings.checkpointInterval = 5000
        settings.httpConnections = 4
        settings.workerProcesses = 2
        settings.workerBatchSize = 100
        settings.connectionTimeout = 10_000
        settings.retriesPerRequest = 3
        settings.sourceProxy = "http://proxy:8080"
        settings.createTargetParams = ["q": 1]
        settings.userCtx = UserContext(name: "bob", roles: ["r"])
        let run = Simulation.run(
            ReplicateOperation(settings: settings), response: .json(202, #"{"ok":true,"_local_id":"abc+continuous"}"#))
        #expect(
            run.request?.bodyJSON
                == [
                    "source": [
                        "url": "https://example.com/src", "headers": ["Authorization": "Bearer t"],
                        "auth": ["basic": ["username": "u", "password": "p"]],
                    ],
                    "target": "tgt", "continuous": true, "selector": ["type": ["$eq": "x"]], "since_seq": "3-abc",
                    "winning_revs_only": true, "use_checkpoints": false, "checkpoint_interval": 5000,
                    "http_connections": 4, "worker_processes": 2, "worker_batch_size": 100,
                    "connection_timeout": 10_000, "retries_per_request": 3, "source_proxy": "http://proxy:8080",
                    "create_target_params": ["q": 1], "user_ctx": ["name": "bob", "roles": ["r"]],
                ])
        #expect(run.value?.localID == "abc+continuous")
        #expect(!settings.source.description.contains("Bearer t"))
        #expect(!settings.source.description.contains(":p"))

        let cancel = Simulation.run(
            ReplicateOperation(
                settings: ReplicationSettings(source: .database("a"), target: .database("b")), cancel: true,
                replicationID: "abc+continuous"),
            response: .json(200, #"{"ok":true,"_local_id":"abc+continuous"}"#))
        #expect(cancel.request?.bodyJSON == ["source": "a", "target": "b", "cancel": true, "id": "abc+continuous"])

        OpsFixtures.expectInvalid(
            ReplicateOperation(
                settings: ReplicationSettings(
                    source: .database("a"), target: .database("b"), docIDs: ["x"], selector: .all)),
            containing: "only one of docIDs, filter and selector")
        OpsFixtures.expectInvalid(
            ReplicateOperation(source: .remote(url: URL(string: "ftp://x/y")!), target: .database("b")),
            containing: "http or https")
        OpsFixtures.expectInvalid(
            ReplicateOperation(
                settings: ReplicationSettings(source: .database("a"), target: .database("b"), filter: "nofilter")),
            containing: "designdoc/filtername")
    }

    @Test("_replicator documents: create, read (with server-written state), delete")
    func replicatorDocuments() throws {
        var document = ReplicationDocument(
            id: "nightly",
            settings: ReplicationSettings(source: .database("a"), target: .database("b"), continuous: true))
        let put = Simulation.run(
            PutReplicationDocumentOperation(document: document),
            response: .json(201, #"{"ok":true,"id":"nightly","rev":"1-x"}"#))
        #expect(OpsFixtures.line(put.request) == "PUT /_replicator/nightly")
        #expect(put.request?.bodyJSON == ["_id": "nightly", "source": "a", "target": "b", "continuous": true])
        #expect(put.value?.rev == "1-x")

        let body =
            #"{"_id":"nightly","_rev":"2-y","source":"http://h/a","target":"b","_replication_state":"completed","#
            + #""_replication_state_time":"2026-11-22T07:05:00Z","_replication_stats":{"docs_written":3}}"#
        let get = Simulation.run(GetReplicationDocumentOperation(id: "nightly"), response: .json(200, body))
        #expect(OpsFixtures.line(get.request) == "GET /_replicator/nightly")
        let read = try get.result.get().value
        #expect(read.revision == "2-y")
        #expect(read.settings.source == .remote(url: URL(string: "http://h/a")!))
        #expect(read.settings.target == .database("b"))
        #expect(read.state == "completed")
        #expect(read.stats?["docs_written"] == 3)

        document = read
        document.settings.continuous = false
        let update = Simulation.run(
            PutReplicationDocumentOperation(document: document),
            response: .json(201, #"{"ok":true,"id":"nightly","rev":"3-z"}"#))
        #expect(
            update.request?.bodyJSON == [
                "_id": "nightly", "_rev": "2-y", "source": "http://h/a", "target": "b", "continuous": false,
            ])

        let delete = Simulation.run(
            DeleteReplicationDocumentOperation(id: "nightly", revision: "3-z"),
            response: .json(200, #"{"ok":true,"id":"nightly","rev":"4-w"}"#))
        #expect(OpsFixtures.line(delete.request) == "DELETE /_replicator/nightly?rev=3-z")
    }

    @Test("_scheduler/jobs and _scheduler/docs: recorded empty lists and typed entries")
    func scheduler() throws {
        let jobsStep = try #require(Transcripts.step("server", "s13"))
        let jobs = Simulation.run(GetSchedulerJobsOperation(), response: jobsStep.simulated)
        #expect(OpsFixtures.line(jobs.request) == "GET /_scheduler/jobs")
        #expect(jobs.value == SchedulerJobList(totalRows: 0, offset: 0, jobs: []))

        let docsStep = try #require(Transcripts.step("server", "s14"))
        let docs = Simulation.run(GetSchedulerDocumentsOperation(), response: docsStep.simulated)
        #expect(OpsFixtures.line(docs.request) == "GET /_scheduler/docs")
        #expect(docs.value?.docs.isEmpty == true)

        let jobBody =
            #"{"total_rows":1,"offset":0,"jobs":[{"database":"_replicator","id":"a81a+continuous","pid":"<0.1.0>","#
            + #""source":"http://h/a/","target":"http://h/b/","user":null,"doc_id":"nightly","#
            + #""info":{"revisions_checked":10,"docs_written":10,"changes_pending":0},"#
            + #""history":[{"timestamp":"2026-11-22T07:05:00Z","type":"started"},"#
            + #"{"timestamp":"2026-11-22T07:04:00Z","type":"crashed","reason":"db_not_found"}],"#
            + #""node":"couchdb@127.0.0.1","start_time":"2026-11-22T07:04:00Z"}]}"#
        let typed = Simulation.run(GetSchedulerJobsOperation(limit: 10, skip: 0), response: .json(200, jobBody))
        #expect(OpsFixtures.line(typed.request) == "GET /_scheduler/jobs?limit=10&skip=0")
        let job = try #require(typed.value?.jobs.first)
        #expect(job.docID == "nightly")
        #expect(job.user == nil)
        #expect(job.history.map(\.type) == ["started", "crashed"])
        #expect(job.history[1].reason == "db_not_found")
        #expect(job.info?["docs_written"] == 10)

        let docBody =
            #"{"database":"_replicator","doc_id":"nightly","id":null,"node":"couchdb@127.0.0.1","source":"http://h/a/","#
            + #""target":"http://h/b/","state":"crashing","info":{"error":"db_not_found"},"error_count":2,"#
            + #""last_updated":"2026-11-22T07:05:00Z","start_time":"2026-11-22T07:04:00Z"}"#
        let one = Simulation.run(GetSchedulerDocumentOperation(id: "nightly"), response: .json(200, docBody))
        #expect(OpsFixtures.line(one.request) == "GET /_scheduler/docs/_replicator/nightly")
        #expect(one.value?.state == "crashing")
        #expect(one.value?.errorCount == 2)
        #expect(one.value?.id == nil)

        let scoped = Simulation.run(
            GetSchedulerDocumentsOperation(database: "_replicator"),
            response: .json(200, #"{"total_rows":0,"offset":0,"docs":[]}"#))
        #expect(OpsFixtures.line(scoped.request) == "GET /_scheduler/docs/_replicator")
    }
}
