import Foundation
import SwiftCouch
import SwiftCouchTesting
import Testing

private struct Event: Codable, Sendable, Equatable {
    var _id: String?
    var at: Date
}

@Suite("Dates in documents")
struct DateCodingTests {
    @Test("By default a Date is written as ISO-8601 text and read back from it (with or without fractions)")
    func iso8601ByDefault() async throws {
        let date = Date(timeIntervalSince1970: 1_764_066_600)  // 2025-11-25T10:30:00Z
        let transport = SimulatedTransport(responses: [
            .json(201, #"{"ok":true,"id":"e","rev":"1-a"}"#),
            .json(200, #"{"_id":"e","_rev":"1-a","at":"2025-11-25T10:30:00Z"}"#),
            .json(200, #"{"_id":"e","_rev":"1-a","at":"2025-11-25T10:30:00.250Z"}"#),
        ])
        let client = Simulation.client(transport: transport)
        defer { client.shutdown() }
        _ = try await client.value(PutDocumentOperation(database: "db", id: "e", document: Event(at: date)))
        #expect(transport.requests.first?.bodyJSON?["at"] == "2025-11-25T10:30:00Z")
        let read = try await client.value(GetDocumentOperation<Event>(database: "db", id: "e"))
        #expect(read.at == date)
        let fraction = try await client.value(GetDocumentOperation<Event>(database: "db", id: "e"))
        #expect(abs(fraction.at.timeIntervalSince(date) - 0.25) < 0.001)
    }

    @Test("A client configured for numbers writes and reads numbers; rows decode dates the same way")
    func configurablePerClient() async throws {
        var configuration = Configuration()
        configuration.dateCoding = .millisecondsSince1970
        let transport = SimulatedTransport(responses: [
            .json(201, #"{"ok":true,"id":"e","rev":"1-a"}"#),
            .json(
                200,
                #"{"total_rows":1,"offset":0,"rows":[{"id":"e","key":"e","value":{"rev":"1-a"},"doc":{"_id":"e","at":1764066600000}}]}"#
            ),
        ])
        let client = Simulation.client(transport: transport, configuration: configuration)
        defer { client.shutdown() }
        let date = Date(timeIntervalSince1970: 1_764_066_600)
        _ = try await client.value(PutDocumentOperation(database: "db", id: "e", document: Event(at: date)))
        #expect(transport.requests.first?.bodyJSON?["at"] == 1_764_066_600_000)
        var read: [Date] = []
        for try await row in client.rows(AllDocsOperation<Event>(database: "db", options: .init(includeDocs: true))) {
            if let at = row.doc?.at { read.append(at) }
        }
        #expect(read == [date])
    }

    @Test("The BulkWriter writes dates as its client's configuration says")
    func bulkWriterUsesTheClientsCoding() async throws {
        var configuration = Configuration()
        configuration.dateCoding = .secondsSince1970
        let transport = SimulatedTransport(responses: [.json(201, #"[{"ok":true,"id":"e","rev":"1-a"}]"#)])
        let client = Simulation.client(transport: transport, configuration: configuration)
        defer { client.shutdown() }
        let writer = BulkWriter<Event>(client: client, database: "db")
        try await writer.add(Event(_id: "e", at: Date(timeIntervalSince1970: 1_000)))
        let results = try await writer.finish()
        #expect(results.first?.rev == "1-a")
        #expect(transport.requests.first?.bodyJSON?["docs"]?[0]?["at"] == 1_000)
    }

    @Test("Text that is not an ISO-8601 date is a decoding error that says so")
    func badDate() {
        let run = Simulation.run(
            GetDocumentOperation<Event>(database: "db", id: "e"),
            response: .json(200, #"{"_id":"e","at":"last tuesday"}"#))
        #expect(run.error?.kind == .decoding)
        #expect(run.error?.message.contains("ISO-8601") == true)
    }
}
