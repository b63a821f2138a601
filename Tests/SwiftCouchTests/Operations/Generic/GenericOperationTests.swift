import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

@Suite("GenericOperation: any endpoint through the same pipeline", .ownThreads)
struct GenericOperationTests {
    @Test("Raw: method, encoded segments, query, headers and body as given; bytes and content type back")
    func raw() throws {
        let op = GenericOperation(
            method: HTTPMethod(rawValue: "report"), path: CouchPath("my/db", "_design", "app", "_nouveau", "by title"),
            query: [URLQueryItem(name: "q", value: "a+b c"), URLQueryItem(name: "limit", value: "5")],
            headers: ["Accept": "text/plain", "X-Trace": "1"], body: Data("payload".utf8), contentType: "text/plain")
        let run = Simulation.run(
            op, response: SimulatedResponse(status: 200, headers: ["Content-Type": "text/plain"], body: Data("ok".utf8))
        )
        let request = try #require(run.request)
        #expect(requestLine(request) == "REPORT /my%2Fdb/_design/app/_nouveau/by%20title?q=a%2Bb%20c&limit=5")
        #expect(request.headers["Accept"] == "text/plain")
        #expect(request.headers["X-Trace"] == "1")
        #expect(request.headers["Content-Type"] == "text/plain")
        #expect(request.body == Data("payload".utf8))
        #expect(run.value == DataResponse(data: Data("ok".utf8), contentType: "text/plain"))
    }

    @Test("JSON: an Encodable body and a decoded response; CouchDB errors become CouchError")
    func json() throws {
        struct Explain: Decodable, Sendable { var dbname: String }
        let request = try GenericOperation(
            path: CouchPath("tx_mango", "_explain"), jsonBody: ["selector": ["year": ["$gt": 2000]]] as JSONValue,
            isIdempotent: true)
        let run = Simulation.run(
            GenericJSONOperation<Explain>(request), response: .json(200, #"{"dbname":"tx_mango"}"#))
        #expect(requestLine(run.request) == "POST /tx_mango/_explain")
        #expect(run.request?.headers["Content-Type"] == "application/json")
        #expect(run.request?.headers["Accept"] == "application/json")
        #expect(run.request?.bodyJSON == ["selector": ["year": ["$gt": 2000]]])
        #expect(run.value?.dbname == "tx_mango")
        #expect(GenericJSONOperation<Explain>(request).isIdempotent == true)

        let step = try #require(Transcripts.step("documents", "s14"))
        let missing = Simulation.run(
            GenericJSONOperation<JSONValue>(GenericOperation(path: CouchPath("tx_docs", "nope"))),
            response: step.simulated)
        #expect(requestLine(missing.request) == requestLine(step))
        #expect(missing.error?.statusCode == 404)
        #expect(missing.error?.reason == "missing")

        let wrongShape = Simulation.run(
            GenericJSONOperation<Explain>(GenericOperation(path: CouchPath("db"))), response: .json(200, "[1]"))
        #expect(wrongShape.error?.kind == .decoding)
    }

    @Test("A POST without isIdempotent is not retried on 5xx; with it, it is")
    func idempotence() {
        var configuration = Configuration()
        configuration.retryPolicy.retryServerErrors = true
        configuration.retryPolicy.initialDelay = 0.001
        configuration.retryPolicy.maximumDelay = 0.001
        let failing = SimulatedResponse.json(503, #"{"error":"unavailable","reason":"x"}"#)
        let once = Simulation.run(
            GenericOperation(method: .post, path: CouchPath("db", "_x"), body: Data("{}".utf8)),
            responses: [failing, .json(200, "{}")], configuration: configuration)
        #expect(once.requests.count == 1)
        #expect(once.error?.statusCode == 503)
        let retried = Simulation.run(
            GenericOperation(method: .post, path: CouchPath("db", "_x"), body: Data("{}".utf8), isIdempotent: true),
            responses: [failing, .json(200, "{}")], configuration: configuration)
        #expect(retried.requests.count == 2)
        #expect(retried.error == nil)
    }

    @Test("Refused before sending: a method that is not a token, an empty path segment")
    func validation() {
        let badMethod = GenericOperation(method: HTTPMethod(rawValue: "GET X"), path: CouchPath("db"))
        #expect(Simulation.run(badMethod, responses: []).error?.kind == .validation)
        let emptySegment = GenericOperation(path: CouchPath("db", "", "x"))
        #expect(Simulation.run(emptySegment, responses: []).error?.kind == .validation)
        let root = Simulation.run(GenericOperation(path: .root), response: .json(200, "{}"))
        #expect(root.request?.path == "/")
    }
}
