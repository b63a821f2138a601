import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

/// A document type for typed reads.
struct Post: Codable, Sendable, Equatable {
    var _id: String?
    var _rev: String?
    var title: String
    var count: Int
}

@Suite("Server, database and document operations against recorded CouchDB 3.5 responses", .ownThreads)
struct CoreOperationTests {
    @Test("GET / decodes the welcome message")
    func serverInfo() throws {
        let step = try #require(Transcripts.step("server", "s01"))
        let run = Simulation.run(GetServerInfoOperation(), response: step.simulated)
        #expect(run.request?.method == "GET")
        #expect(run.request?.path == "/")
        #expect(run.request?.headers["Accept"] == "application/json")
        let info = try run.result.get().value
        #expect(info.couchdb == "Welcome")
        #expect(info.version == "3.5.0")
        #expect(info.vendor?.name == "The Apache Software Foundation")
        #expect(info.features?.contains("partitioned") == true)
    }

    @Test("PUT /{db} creates; a second PUT gives 412 file_exists; illegal names give CouchDB's 400")
    func createDatabase() throws {
        let created = try #require(Transcripts.step("databases", "s01"))
        let run = Simulation.run(CreateDatabaseOperation(name: "tx_db"), response: created.simulated)
        #expect(run.request?.method == "PUT")
        #expect(run.request?.path == created.path)
        #expect(run.value == OKResponse(ok: true))
        #expect(try run.result.get().statusCode == 201)

        let again = try #require(Transcripts.step("databases", "s02"))
        let exists = Simulation.run(CreateDatabaseOperation(name: "tx_db"), response: again.simulated)
        #expect(exists.error?.statusCode == 412)
        #expect(exists.error?.error == "file_exists")
        #expect(exists.error?.reason == "The database could not be created, the file already exists.")

        let partitioned = Simulation.run(
            CreateDatabaseOperation(name: "p", partitioned: true, shards: 2, replicas: 1),
            response: .json(201, #"{"ok":true}"#))
        #expect(partitioned.request?.query == "partitioned=true&q=2&n=1")
    }

    @Test("GET /{db} decodes database info; DELETE /{db} deletes; a missing db is a 404 not_found")
    func databaseInfoAndDelete() throws {
        let infoStep = try #require(Transcripts.step("databases", "s09"))
        let info = Simulation.run(GetDatabaseInfoOperation(name: "tx_db"), response: infoStep.simulated)
        #expect(info.request?.path == infoStep.path)
        let value = try info.result.get().value
        #expect(value.dbName == "tx_db")
        #expect(value.docCount == infoStep.responseJSON?["doc_count"]?.intValue.map(Int.init))
        #expect(value.updateSeq.stringValue?.isEmpty == false)

        let missing = try #require(Transcripts.step("databases", "s12"))
        let deleted = Simulation.run(DeleteDatabaseOperation(name: "tx_db"), response: missing.simulated)
        #expect(deleted.request?.method == "DELETE")
        #expect(deleted.error?.statusCode == 404)
        #expect(deleted.error?.error == "not_found")
        #expect(deleted.error?.reason == "Database does not exist.")
    }

    @Test("PUT, GET (typed and free-form), conflict and DELETE of a document")
    func documentLifecycle() throws {
        let put1 = try #require(Transcripts.step("documents", "put1"))
        let put = Simulation.run(
            PutDocumentOperation(database: "tx_docs", id: "doc1", document: Post(title: "Hello", count: 1)),
            response: put1.simulated)
        #expect(put.request?.path == "/tx_docs/doc1")
        #expect(
            put.request?.bodyJSON == put1.requestBody.flatMap { try? JSONDecoder().decode(JSONValue.self, from: $0) })
        let written = try put.result.get()
        #expect(written.statusCode == 201)
        #expect(written.value.rev == put1.responseJSON?["rev"]?.stringValue)
        #expect(written.headers["ETag"] != nil)

        let get1 = try #require(Transcripts.step("documents", "get1"))
        let typed = Simulation.run(
            GetDocumentOperation<Post>(database: "tx_docs", id: "doc1"), response: get1.simulated)
        #expect(typed.value == Post(_id: "doc1", _rev: written.value.rev, title: "Hello", count: 1))
        let free = Simulation.run(GetJSONDocumentOperation(database: "tx_docs", id: "doc1"), response: get1.simulated)
        #expect(free.value?["title"] == "Hello")
        #expect(free.value?["count"] == 1)

        let conflictStep = try #require(Transcripts.step("documents", "s06"))
        let conflict = Simulation.run(
            PutDocumentOperation(database: "tx_docs", id: "doc1", document: Post(title: "x", count: 0)),
            response: conflictStep.simulated)
        #expect(conflict.error?.statusCode == 409)
        #expect(conflict.error?.error == "conflict")
        #expect(conflict.error?.reason == "Document update conflict.")

        let revStep = try #require(Transcripts.step("documents", "s13"))
        let old = Simulation.run(
            GetDocumentOperation<Post>(database: "tx_docs", id: "doc1", revision: "1-1be7d3c6b2f1e03147ca8fdae601830d"),
            response: revStep.simulated)
        #expect(old.request.map { $0.path + "?" + ($0.query ?? "") } == revStep.path)

        let deleteStep = try #require(Transcripts.step("documents", "s21"))
        let id = "8e7d4e87dcbfcdc2ba3adf93740d278a"
        let delete = Simulation.run(
            DeleteDocumentOperation(database: "tx_docs", id: id, revision: "1-dbf5edc30b1b3ace90b5b6b156b4a499"),
            response: deleteStep.simulated)
        #expect(
            delete.request.map { $0.method + " " + $0.path + "?" + ($0.query ?? "") } == "DELETE " + deleteStep.path)
        #expect(delete.value?.rev?.hasPrefix("2-") == true)

        let goneStep = try #require(Transcripts.step("documents", "s23"))
        let gone = Simulation.run(
            GetDocumentOperation<Post>(database: "tx_docs", id: "doc1"), response: goneStep.simulated)
        #expect(gone.error?.statusCode == 404)
        #expect(gone.error?.reason == "deleted")
    }

    @Test("A document that does not encode to an object is a serialisation error; nothing is sent")
    func scalarDocument() {
        let run = Simulation.run(PutDocumentOperation(database: "db", id: "x", document: [1, 2, 3]), responses: [])
        #expect(run.error?.kind == .serialisation)
        #expect(run.requests.isEmpty)
    }

    @Test("GET /_all_dbs decodes a list of names")
    func allDbs() throws {
        let step = try #require(Transcripts.step("server", "s07"))
        let run = Simulation.run(ListDatabasesOperation(), response: step.simulated)
        #expect(run.request?.path == "/_all_dbs")
        #expect(run.value != nil)
    }
}
