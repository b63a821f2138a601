import Foundation
import SwiftCouch
import Testing

@Suite("End to end: partitioned databases")
struct PartitionsEndToEndTests {
    @Test("Partition info: counts per partition, deletions, an empty partition; ids must name a partition")
    func partitionInfo() async throws {
        try await withDatabase("partitions", partitioned: true) { client, db in
            let info = try await client.value(GetDatabaseInfoOperation(name: db))
            #expect(info.props?.partitioned == true)
            let r1 = try #require(
                try await client.value(
                    PutDocumentOperation(database: db, id: "sensor-1:r1", document: Note(text: "t", n: 20))
                ).rev)
            _ = try await client.value(
                PutDocumentOperation(database: db, id: "sensor-1:r2", document: Note(text: "t", n: 21)))
            _ = try await client.value(
                PutDocumentOperation(database: db, id: "sensor-2:r1", document: Note(text: "t", n: 18)))

            let one = try await client.value(GetPartitionInfoOperation(database: db, partition: "sensor-1"))
            #expect(one.dbName == db)
            #expect(one.partition == "sensor-1")
            #expect(one.docCount == 2)
            #expect(one.docDelCount == 0)
            #expect((one.sizes?.external ?? 0) > 0)
            let two = try await client.value(GetPartitionInfoOperation(database: db, partition: "sensor-2"))
            #expect(two.docCount == 1)

            _ = try await client.value(DeleteDocumentOperation(database: db, id: "sensor-1:r1", revision: r1))
            let afterDelete = try await converged(
                read: { try await client.value(GetPartitionInfoOperation(database: db, partition: "sensor-1")) },
                until: { $0.docCount == 1 && $0.docDelCount == 1 })
            #expect(afterDelete.docCount == 1)
            #expect(afterDelete.docDelCount == 1)

            let empty = try await client.value(GetPartitionInfoOperation(database: db, partition: "nobody"))
            #expect(empty.partition == "nobody")
            #expect(empty.docCount == 0)
            #expect(empty.docDelCount == 0)

            let listed = try await client.value(
                AllDocsOperation<JSONValue>(database: db, source: .partition("sensor-1")))
            #expect(listed.rows.map(\.id) == ["sensor-1:r2"])

            do {
                _ = try await client.execute(
                    PutDocumentOperation(database: db, id: "no-partition", document: Note(text: "t", n: 1)))
                Issue.record("an id without a partition should be refused")
            } catch let error as CouchError {
                #expect(error.statusCode == 400)
                #expect(error.error == "illegal_docid")
                #expect(error.reason == "Doc id must be of form partition:id")
            }
            do {
                _ = try await client.execute(GetPartitionInfoOperation(database: db, partition: "_bad"))
                Issue.record("a partition name starting with _ should be refused before sending")
            } catch let error as CouchError {
                #expect(error.kind == .validation)
            }
        }
    }

    @Test("Partition info on a database that is not partitioned → 400")
    func notPartitioned() async throws {
        try await withDatabase("unpartitioned") { client, db in
            do {
                _ = try await client.execute(GetPartitionInfoOperation(database: db, partition: "p"))
                Issue.record("partition info needs a partitioned database")
            } catch let error as CouchError {
                #expect(error.statusCode == 400)
                #expect(error.error == "bad_request")
                #expect(error.reason == "database is not partitioned")
            }
        }
    }
}
