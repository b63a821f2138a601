import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

@Suite("Partitions: partition info", .ownThreads)
struct PartitionOperationTests {
    @Test("GET /{db}/_partition/{partition} decodes the recorded info")
    func info() throws {
        let step = try #require(Transcripts.step("partitioned", "s08"))
        let run = Simulation.run(
            GetPartitionInfoOperation(database: "tx_part", partition: "sensor-1"), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        let info = try run.result.get().value
        #expect(info.dbName == "tx_part")
        #expect(info.partition == "sensor-1")
        #expect(info.docCount == 2)
        #expect(info.docDelCount == 0)
        #expect(info.sizes?.active == 163)
        #expect(info.sizes?.external == 46)

        OpsFixtures.expectInvalid(GetPartitionInfoOperation(database: "db", partition: "a:b"), containing: "':'")
        OpsFixtures.expectInvalid(
            GetPartitionInfoOperation(database: "db", partition: ""), containing: "must not be empty")
        let missing = Simulation.run(
            GetPartitionInfoOperation(database: "db", partition: "p"),
            response: .json(400, #"{"error":"bad_request","reason":"database is not partitioned"}"#))
        #expect(missing.error?.reason == "database is not partitioned")
    }
}
