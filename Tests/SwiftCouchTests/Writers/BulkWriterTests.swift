import Foundation
import SwiftCouch
import SwiftCouchTesting
import Testing

@Suite("BulkWriter: batching and row retries")
struct BulkWriterTests {
    struct Doc: Encodable, Sendable {
        var _id: String
    }

    @Test("Only rows failing for a retryable reason are sent again; conflicts are reported as they are")
    func retriesOnlyRetryableRows() async throws {
        let transport = SimulatedTransport(responses: [
            .json(
                201,
                #"[{"ok":true,"id":"a","rev":"1-a"},{"id":"b","error":"too_many_requests","reason":"slow"},"#
                    + #"{"id":"c","error":"conflict","reason":"Document update conflict."}]"#),
            .json(201, #"[{"ok":true,"id":"b","rev":"1-b"}]"#),
        ])
        let client = Simulation.client(transport: transport)
        var options = BulkWriter<Doc>.Options(batchSize: 10)
        options.rowRetryDelay = 0.001
        let writer = BulkWriter<Doc>(client: client, database: "db", options: options)
        for id in ["a", "b", "c"] { try await writer.add(Doc(_id: id)) }
        let results = try await writer.finish()
        #expect(results.map(\.rev) == ["1-a", "1-b", nil])
        #expect(results[2].error?.error == "conflict")
        #expect(transport.requests.count == 2)
        #expect(transport.requests[1].bodyJSON == ["docs": [["_id": "b"]]])
    }

    @Test("Batches hold at most batchSize documents")
    func batchSizes() async throws {
        let transport = SimulatedTransport(responder: { request in
            let docs = (try? JSONDecoder().decode([String: [Doc2]].self, from: request.body ?? Data()))?["docs"] ?? []
            let rows = docs.map { #"{"ok":true,"id":"\#($0._id)","rev":"1-x"}"# }.joined(separator: ",")
            return .json(201, "[\(rows)]")
        })
        let client = Simulation.client(transport: transport)
        let writer = BulkWriter<Doc>(
            client: client, database: "db", options: .init(batchSize: 4, maximumBatchesInFlight: 2))
        for index in 0..<10 { try await writer.add(Doc(_id: "d\(index)")) }
        let results = try await writer.finish()
        #expect(results.count == 10)
        #expect(transport.requests.map { ($0.bodyJSON?["docs"]?.arrayValue?.count) ?? 0 }.sorted() == [2, 4, 4])
    }

    struct Doc2: Decodable {
        var _id: String
    }
}

@Suite("Request compression")
struct RequestCompressionTests {
    @Test("JSON bodies at or over the threshold are sent gzip'd; smaller ones and non-JSON bodies as they are")
    func gzipThreshold() throws {
        var configuration = Configuration()
        configuration.gzipRequestBodiesOfAtLeast = 1_000
        let documents = (0..<200).map { ["_id": "doc\($0)", "text": "some repetitive text"] }
        let big = Simulation.run(
            BulkDocsOperation(database: "db", documents: documents), response: .json(201, "[]"),
            configuration: configuration)
        let request = try #require(big.request)
        #expect(request.headers["Content-Encoding"] == "gzip")
        #expect(request.headers["Content-Type"] == "application/json")
        let body = try #require(request.body)
        let plain = try Gzip.decompress(body)
        #expect(body.count < plain.count / 4)
        let decoded = try JSONDecoder().decode([String: [[String: String]]].self, from: plain)
        #expect(decoded["docs"] == documents)

        let small = Simulation.run(
            PutDocumentOperation(database: "db", id: "x", document: ["a": 1]),
            response: .json(201, #"{"ok":true,"id":"x","rev":"1-a"}"#),
            configuration: configuration)
        #expect(small.request?.headers["Content-Encoding"] == nil)
        #expect(small.request?.bodyJSON == ["a": 1])
    }
}
