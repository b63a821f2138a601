import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

@Suite("Node operations: _config, _stats, _system; Cloudant capacity", .ownThreads)
struct NodeOperationTests {
    @Test("GET the whole configuration, a section and a value of a node")
    func readConfiguration() throws {
        let whole = Simulation.run(
            GetConfigurationOperation(),
            response: .json(200, #"{"couchdb":{"max_document_size":"8000000"},"cors":{"origins":"*"}}"#))
        #expect(OpsFixtures.line(whole.request) == "GET /_node/_local/_config")
        #expect(whole.value?["cors"]?["origins"] == "*")

        let section = Simulation.run(
            GetConfigurationSectionOperation(section: "couchdb", node: "couchdb@127.0.0.1"),
            response: .json(200, #"{"max_document_size":"8000000","uuid":"e56e"}"#))
        #expect(OpsFixtures.line(section.request) == "GET /_node/couchdb%40127.0.0.1/_config/couchdb")
        #expect(section.value == ["max_document_size": "8000000", "uuid": "e56e"])

        let value = Simulation.run(
            GetConfigurationValueOperation(section: "couchdb", key: "max_document_size"),
            response: .json(200, #""8000000""#))
        #expect(OpsFixtures.line(value.request) == "GET /_node/_local/_config/couchdb/max_document_size")
        #expect(value.value == "8000000")

        let missing = Simulation.run(
            GetConfigurationValueOperation(section: "couchdb", key: "nope"),
            response: .json(404, #"{"error":"not_found","reason":"unknown_config_value"}"#))
        #expect(missing.error?.statusCode == 404)
        #expect(missing.error?.reason == "unknown_config_value")
        OpsFixtures.expectInvalid(
            GetConfigurationSectionOperation(section: ""), containing: "section must not be empty")
    }

    @Test("PUT a value sends it as a JSON string and answers the old value; DELETE answers the removed value")
    func writeConfiguration() throws {
        let put = Simulation.run(
            SetConfigurationValueOperation(section: "chttpd", key: "enable_cors", value: "true"),
            response: .json(200, #""false""#))
        #expect(OpsFixtures.line(put.request) == "PUT /_node/_local/_config/chttpd/enable_cors")
        #expect(put.request?.body == Data(#""true""#.utf8))
        #expect(put.request?.headers["Content-Type"] == "application/json")
        #expect(put.value == "false")

        let delete = Simulation.run(
            DeleteConfigurationValueOperation(section: "cors", key: "origins"), response: .json(200, #""*""#))
        #expect(OpsFixtures.line(delete.request) == "DELETE /_node/_local/_config/cors/origins")
        #expect(delete.request?.body == nil)
        #expect(delete.value == "*")
    }

    @Test("GET /_node/{node}/_stats decodes the tree of groups and metrics")
    func statistics() throws {
        let body =
            #"{"couchdb":{"open_databases":{"value":3,"type":"counter","desc":"number of open databases"},"#
            + #""request_time":{"value":{"min":0.5,"max":9,"n":4},"type":"histogram","desc":"time"}},"#
            + #""fabric":{"worker":{"timeouts":{"value":0,"type":"counter","desc":"worker timeouts"}}}}"#
        let run = Simulation.run(GetNodeStatisticsOperation(), response: .json(200, body))
        #expect(OpsFixtures.line(run.request) == "GET /_node/_local/_stats")
        let stats = try run.result.get().value
        #expect(stats["couchdb", "open_databases"]?.metric?.value == 3)
        #expect(stats["couchdb", "open_databases"]?.metric?.type == "counter")
        #expect(stats["couchdb", "request_time"]?.metric?.value["max"] == 9)
        #expect(stats["fabric", "worker", "timeouts"]?.metric?.desc == "worker timeouts")
        #expect(stats["fabric", "nope"] == nil)

        let one = Simulation.run(
            GetNodeStatisticsOperation(path: ["couchdb", "open_databases"]),
            response: .json(200, #"{"value":3,"type":"counter","desc":"number of open databases"}"#))
        #expect(OpsFixtures.line(one.request) == "GET /_node/_local/_stats/couchdb/open_databases")
        #expect(one.value?.metric?.value == 3)
    }

    @Test("GET /_node/{node}/_system decodes the VM figures")
    func system() throws {
        let body =
            #"{"uptime":259,"memory":{"other":23,"atom":512,"processes":300,"ets":8},"run_queue":0,"#
            + #""ets_table_count":120,"context_switches":1000,"reductions":99,"garbage_collection_count":7,"#
            + #""words_reclaimed":70,"io_input":12,"io_output":13,"os_proc_count":0,"stale_proc_count":0,"#
            + #""process_count":400,"process_limit":262144,"message_queues":{"couch_file":{"count":2}},"#
            + #""internal_replication_jobs":0,"distribution":{}}"#
        let run = Simulation.run(GetNodeSystemOperation(), response: .json(200, body))
        #expect(OpsFixtures.line(run.request) == "GET /_node/_local/_system")
        let info = try run.result.get().value
        #expect(info.uptime == 259)
        #expect(info.memory?["atom"] == 512)
        #expect(info.processLimit == 262_144)
        #expect(info.osProcessCount == 0)
        #expect(info.messageQueues?["couch_file"]?["count"] == 2)
        #expect(info.distribution == [:])
    }

    @Test("Cloudant capacity: read, set and current throughput")
    func cloudantCapacity() throws {
        let body =
            #"{"current":{"throughput":{"blocks":1,"query":5,"read":100,"write":50}},"#
            + #""target":{"throughput":{"blocks":2,"query":10,"read":200,"write":100}}}"#
        let get = Simulation.run(GetProvisionedThroughputOperation(), response: .json(200, body))
        #expect(OpsFixtures.line(get.request) == "GET /_api/v2/user/capacity/throughput")
        let capacity = try get.result.get().value
        #expect(capacity.current == ThroughputCapacity(blocks: 1, query: 5, read: 100, write: 50))
        #expect(capacity.target.blocks == 2)
        #expect(capacity.isChanging)

        let put = Simulation.run(SetProvisionedThroughputOperation(blocks: 2), response: .json(200, body))
        #expect(OpsFixtures.line(put.request) == "PUT /_api/v2/user/capacity/throughput")
        #expect(put.request.flatMap { String(data: $0.body ?? Data(), encoding: .utf8) } == #"{"blocks":2}"#)
        #expect(put.value?.target.write == 100)
        OpsFixtures.expectInvalid(SetProvisionedThroughputOperation(blocks: 0), containing: "blocks must be at least 1")

        let current = Simulation.run(
            GetCurrentThroughputOperation(), response: .json(200, #"{"throughput":{"query":1,"read":7,"write":3}}"#))
        #expect(OpsFixtures.line(current.request) == "GET /_api/v2/user/current/throughput")
        #expect(current.value?.throughput == ThroughputCapacity(query: 1, read: 7, write: 3))
    }
}
