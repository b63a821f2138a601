import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

@Suite("Paths are built from percent-encoded segments", .ownThreads)
struct PathEncodingTests {
    @Test(
        "Document ids are encoded as one segment, as CouchDB 3.5 was sent them in document_ids.json",
        arguments: [("a/b", "s02"), ("with space", "s03"), ("plus+sign", "s04"), ("café", "s05"), ("✓😀", "s06")])
    func transcriptIDs(id: String, step: String) throws {
        let recorded = try #require(Transcripts.step("document_ids", step))
        let run = Simulation.run(
            PutDocumentOperation(database: "tx_ids", id: id, document: ["id": id]), response: recorded.simulated)
        #expect(run.request?.method == recorded.method)
        #expect(run.request?.path == recorded.path)
        #expect(run.request?.bodyJSON == ["id": .string(id)])
        #expect(run.value?.id == id)
        #expect(run.value?.rev == recorded.responseJSON?["rev"]?.stringValue)
    }

    @Test("_design/ and _local/ keep their prefix as a segment; the rest of the id is encoded")
    func prefixes() {
        #expect(CouchPath.document("db", "_design/app").encoded == "/db/_design/app")
        #expect(CouchPath.document("db", "_design/a/b").encoded == "/db/_design/a%2Fb")
        #expect(CouchPath.document("db", "_local/x y").encoded == "/db/_local/x%20y")
        #expect(CouchPath.document("my/db", "a?b#c%d").encoded == "/my%2Fdb/a%3Fb%23c%25d")
        #expect(PercentEncoding.encode("AZaz09-._~") == "AZaz09-._~")
        #expect(PercentEncoding.encode("é+ /") == "%C3%A9%2B%20%2F")
    }

    @Test("Query values are encoded too: + is %2B, JSON keys are JSON then percent-encoded")
    func queryEncoding() {
        let run = Simulation.run(
            ListDatabasesOperation(limit: 2, startKey: "a+b", endKey: "z"), response: .json(200, "[]"))
        #expect(run.request?.query == "limit=2&start_key=%22a%2Bb%22&end_key=%22z%22")
        #expect(run.request?.queryValue("start_key") == "\"a+b\"")
    }

    @Test(
        "Invalid ids and names are rejected in validate, before anything is sent",
        arguments: [
            ("db", "_bogus"), ("db", ""), ("db", "_design/"), ("Db", "doc"), ("1db", "doc"), ("db!", "doc"),
            ("", "doc"),
        ])
    func rejected(database: String, id: String) {
        let run = Simulation.run(GetDocumentOperation<JSONValue>(database: database, id: id), responses: [])
        #expect(run.error?.kind == .validation)
        #expect(run.requests.isEmpty)
        #expect(run.error?.message.isEmpty == false)
    }

    @Test(
        "CouchDB's database name rule",
        arguments: [
            ("albums", true), ("a", true), ("a-b_c$d(e)f+g/h", true), ("_users", true), ("_replicator", true),
            ("Albums", false), ("_private", false), ("9lives", false), ("with space", false), ("café", false),
            (String(repeating: "a", count: 238), true), (String(repeating: "a", count: 239), false),
        ])
    func databaseNames(name: String, valid: Bool) {
        let accepted = (try? CouchValidation.validateDatabaseName(name)) != nil
        #expect(accepted == valid)
    }
}
