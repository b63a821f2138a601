import Foundation
import SwiftCouch
import Testing

/// The answer of `GET /_up`.
private struct UpStatus: Decodable, Sendable {
    var status: String
}

@Suite("End to end: generic operations")
struct GenericEndToEndTests {
    @Test("GET /_up decoded, raw and as JSONValue")
    func up() async throws {
        let client = E2EEnvironment.shared.client()
        let typed = try await client.execute(GenericJSONOperation<UpStatus>(GenericOperation(path: CouchPath("_up"))))
        #expect(typed.statusCode == 200)
        #expect(typed.value.status == "ok")
        let raw = try await client.value(GenericOperation(path: CouchPath("_up")))
        #expect(raw.contentType?.hasPrefix("application/json") == true)
        let json = try JSONDecoder().decode(JSONValue.self, from: raw.data)
        #expect(json["status"] == "ok")
    }

    @Test("A document PUT and GET round trip through generic operations, with query, headers and errors")
    func documentRoundTrip() async throws {
        try await withDatabase("generic") { client, db in
            let put = try await client.execute(
                GenericJSONOperation<DocumentWriteResponse>(
                    try GenericOperation(
                        method: .put, path: CouchPath(db, "a/b"), jsonBody: ["text": "generic", "n": 1] as JSONValue)))
            #expect(put.statusCode == 201)
            #expect(put.value.id == "a/b")
            let rev = try #require(put.value.rev)

            // The id is one segment, so it is sent as a%2Fb and found by the typed operation too.
            let typed = try await client.value(GetJSONDocumentOperation(database: db, id: "a/b"))
            #expect(typed["text"] == "generic")

            let read = try await client.value(
                GenericJSONOperation<JSONValue>(
                    GenericOperation(
                        path: CouchPath(db, "a/b"), query: [URLQueryItem(name: "revs", value: "true")])))
            #expect(read["_rev"]?.stringValue == rev)
            #expect(read["_revisions"]?["start"] == 1)

            // A raw body with its own content type, and a header (If-Match) instead of ?rev=.
            let raw = try await client.execute(
                GenericOperation(
                    method: .put, path: CouchPath(db, "a/b"), headers: ["If-Match": rev],
                    body: Data(#"{"text":"raw"}"#.utf8), contentType: "application/json"))
            #expect(raw.statusCode == 201)
            let rawWrite = try JSONDecoder().decode(DocumentWriteResponse.self, from: raw.value.data)
            #expect(rawWrite.rev?.hasPrefix("2-") == true)

            let head = try await client.execute(GenericOperation(method: .head, path: CouchPath(db, "a/b")))
            #expect(head.statusCode == 200)
            #expect(head.value.data.isEmpty)
            #expect(head.headers["ETag"] == "\"\(rawWrite.rev ?? "")\"")

            do {
                _ = try await client.execute(GenericOperation(path: CouchPath(db, "missing")))
                Issue.record("a missing document should be 404")
            } catch let error as CouchError {
                #expect(error.kind == .http)
                #expect(error.statusCode == 404)
                #expect(error.error == "not_found")
                #expect(error.reason == "missing")
            }
            do {
                _ = try await client.execute(
                    GenericOperation(method: HTTPMethod(rawValue: "PATCH"), path: CouchPath(db, "a/b")))
                Issue.record("PATCH should be refused")
            } catch let error as CouchError {
                #expect(error.statusCode == 405)
                #expect(error.error == "method_not_allowed")
            }
            do {
                _ = try await client.execute(GenericOperation(path: CouchPath(db, "", "x")))
                Issue.record("an empty segment should be refused before sending")
            } catch let error as CouchError {
                #expect(error.kind == .validation)
            }
        }
    }
}
