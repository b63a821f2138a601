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

    struct Loose: Encodable, Sendable {
        var _id: String?
        var _rev: String?
        var v: Int
    }

    /// The documents of a `_bulk_docs` request body.
    static func docs(in request: HTTPRequest) -> [JSONValue] {
        let body = request.body.flatMap { try? JSONDecoder().decode(JSONValue.self, from: $0) }
        return body?["docs"]?.arrayValue ?? []
    }

    static func fastOptions(batchSize: Int = 10) -> BulkWriter<Loose>.Options {
        var options = BulkWriter<Loose>.Options(batchSize: batchSize)
        options.rowRetryDelay = 0.001
        return options
    }

    /// Answers `_bulk_docs` like CouchDB: 400 for the whole request when any document is marked
    /// `poison` (something the client cannot know in advance), otherwise one success per document.
    static func poisonServer() -> SimulatedTransport {
        SimulatedTransport(responder: { request in
            let docs = BulkWriterTests.docs(in: request)
            if docs.contains(where: { $0["poison"] != nil }) {
                return .json(400, #"{"error":"bad_request","reason":"Document rejected as a whole"}"#)
            }
            let rows = docs.map { #"{"ok":true,"id":"\#($0["_id"]?.stringValue ?? "?")","rev":"1-x"}"# }
            return .json(201, "[\(rows.joined(separator: ","))]")
        })
    }

    @Test("Ids CouchDB refuses for the whole request are refused before batching; the rest are written")
    func invalidIDsFailAlone() async throws {
        let transport = Self.poisonServer()
        let client = Simulation.client(transport: transport)
        let writer = BulkWriter<Loose>(client: client, database: "db", options: Self.fastOptions(batchSize: 500))
        for index in 0..<1_000 {
            try await writer.add(Loose(_id: index == 321 ? "_illegal" : (index == 654 ? "" : "d\(index)"), v: index))
        }
        let results = try await writer.finish()
        #expect(results.count == 1_000)
        #expect(results.filter { $0.rev != nil }.count == 998)
        #expect(results[321].error?.error == "illegal_docid")
        #expect(results[321].id == "_illegal")
        #expect(results[654].error?.error == "illegal_docid")
        #expect(transport.requests.count == 2)  // two batches; nothing refused by the server
        let sent = transport.requests.flatMap { BulkWriterTests.docs(in: $0.request) }
        #expect(!sent.contains { $0["_id"]?.stringValue == "_illegal" })
    }

    @Test("A batch rejected as a whole is split until the document at fault is alone")
    func rejectedBatchIsBisected() async throws {
        struct Maybe: Encodable, Sendable {
            var _id: String
            var poison: Bool?
        }
        let transport = Self.poisonServer()
        let client = Simulation.client(transport: transport)
        var options = BulkWriter<Maybe>.Options(batchSize: 64)
        options.rowRetryDelay = 0.001
        let writer = BulkWriter<Maybe>(client: client, database: "db", options: options)
        for index in 0..<64 { try await writer.add(Maybe(_id: "d\(index)", poison: index == 37 ? true : nil)) }
        let results = try await writer.finish()
        #expect(results.filter { $0.rev != nil }.count == 63)
        #expect(results[37].error?.error == "bad_request")
        #expect(results[37].error?.reason == "Document rejected as a whole")
        #expect(results[37].id == "d37")
        #expect(transport.requests.count <= 1 + 2 * 6 + 1)  // log2(64) levels, two requests each
    }

    @Test("Documents without _id get one on the client, before the first send, and keep it when resent")
    func clientSideIDs() async throws {
        let transport = SimulatedTransport(responder: { request in
            let docs = BulkWriterTests.docs(in: request)
            let rows = docs.map { #"{"id":"\#($0["_id"]?.stringValue ?? "?")","error":"timeout","reason":"t"}"# }
            return .json(201, "[\(rows.joined(separator: ","))]")
        })
        let client = Simulation.client(transport: transport)
        var options = Self.fastOptions()
        options.rowRetries = 2
        let writer = BulkWriter<Loose>(client: client, database: "db", options: options)
        try await writer.add(Loose(v: 1))
        try await writer.add(Loose(_rev: nil, v: 2))
        let results = try await writer.finish()
        let sentIDs = transport.requests.map { request in
            (BulkWriterTests.docs(in: request.request)).map { $0["_id"]?.stringValue }
        }
        #expect(sentIDs.count == 3)
        #expect(sentIDs.allSatisfy { $0 == sentIDs[0] })  // the same ids every time
        #expect(sentIDs[0].allSatisfy { $0?.count == 32 })
        #expect(Set(sentIDs[0]).count == 2)
        #expect(results.allSatisfy { $0.error?.error == "timeout" })
    }

    @Test("A batch whose answer was lost is sent again, byte for byte, and its documents are written")
    func lostAnswerResendsTheSameBody() async throws {
        let calls = Counter()
        let transport = SimulatedTransport(responder: { request in
            if calls.increment() == 1 { return .failure(URLError(.networkConnectionLost)) }
            let rows = BulkWriterTests.docs(in: request).map {
                #"{"ok":true,"id":"\#($0["_id"]?.stringValue ?? "?")","rev":"1-a"}"#
            }
            return .json(201, "[\(rows.joined(separator: ","))]")
        })
        let client = Simulation.client(transport: transport)
        let writer = BulkWriter<Loose>(client: client, database: "db", options: Self.fastOptions(batchSize: 50))
        for index in 0..<50 { try await writer.add(Loose(_id: "d\(index)", v: index)) }
        try await writer.add(Loose(v: 50))  // no _id: given one, the same in both sends
        let results = try await writer.finish()
        // The full batch twice, and the last document's batch (sent while the first waits to resend).
        #expect(transport.requests.count == 3)
        let full = transport.requests.filter { BulkWriterTests.docs(in: $0.request).count == 50 }.map(\.body)
        #expect(full.count == 2)
        #expect(full.first! != nil && full.first! == full.last!)
        #expect(results.count == 51)
        #expect(results.allSatisfy { $0.rev == "1-a" })
    }

    /// A row answered `timeout` was in fact written; its resend meets a conflict with itself.
    @Test(
        "A conflict on a resent row is a success when the stored revision is the one the lost write made",
        arguments: [true, false])
    func conflictOnResendIsConfirmed(sameBody: Bool) async throws {
        let bulkCallCount = Counter()
        let transport = SimulatedTransport(responder: { request in
            if request.method == .get {
                #expect(request.path == "/db/x")
                #expect(request.query == "revs=true")
                let stored = sameBody ? 7 : 8
                return .json(
                    200,
                    #"{"_id":"x","_rev":"4-new","v":\#(stored),"_revisions":{"start":4,"ids":["new","parent","b","a"]}}"#
                )
            }
            let bulkCalls = bulkCallCount.increment()
            return .json(
                201,
                bulkCalls == 1
                    ? #"[{"id":"x","error":"unknown_error","reason":"lost"}]"#
                    : #"[{"id":"x","error":"conflict","reason":"Document update conflict."}]"#)
        })
        let client = Simulation.client(transport: transport)
        let writer = BulkWriter<Loose>(client: client, database: "db", options: Self.fastOptions())
        try await writer.add(Loose(_id: "x", _rev: "3-parent", v: 7))
        let results = try await writer.finish()
        if sameBody {
            #expect(results == [.success(id: "x", rev: "4-new")])
        } else {
            #expect(results[0].error?.error == "conflict")
        }
    }

    /// A hostile server's generations at the ends of Int: the lost-write check compares them without a trap,
    /// and a conflict stays a conflict.
    @Test(
        "A conflict on a resent row whose generations are at the ends of Int stays a conflict",
        arguments: [
            ("9223372036854775807-parent", "9223372036854775807-new"), ("1-parent", "-9223372036854775808-new"),
        ])
    func conflictOnResendAtTheEnds(parent: String, stored: String) async throws {
        let bulkCallCount = Counter()
        let transport = SimulatedTransport(responder: { request in
            if request.method == .get {
                return .json(200, #"{"_id":"x","_rev":"\#(stored)","v":7,"_revisions":{"start":1,"ids":["new"]}}"#)
            }
            return .json(
                201,
                bulkCallCount.increment() == 1
                    ? #"[{"id":"x","error":"timeout","reason":"lost"}]"#
                    : #"[{"id":"x","error":"conflict","reason":"Document update conflict."}]"#)
        })
        let client = Simulation.client(transport: transport)
        let writer = BulkWriter<Loose>(client: client, database: "db", options: Self.fastOptions())
        try await writer.add(Loose(_id: "x", _rev: parent, v: 7))
        let results = try await writer.finish()
        #expect(results[0].error?.error == "conflict")
    }
}
