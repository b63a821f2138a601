import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

/// A user document type with no CouchDB fields of its own.
private struct Note: Codable, Sendable, Equatable {
    var title: String
    var count: Int
}

@Suite("Document operations against recorded CouchDB 3.5 responses", .ownThreads)
struct DocumentOperationTests {
    @Test("POST /{db} lets the server choose the id; never retried")
    func postCreates() throws {
        let step = try #require(Transcripts.step("documents", "post1"))
        let op = CreateDocumentOperation(database: "tx_docs", document: ["type": "generated"] as JSONValue)
        #expect(op.isIdempotent == false)
        let run = Simulation.run(op, response: step.simulated)
        #expect(requestLine(run.request) == "POST /tx_docs")
        #expect(run.request?.headers["Content-Type"] == "application/json")
        #expect(run.request?.bodyJSON == recordedRequestJSON(step))
        let value = try run.result.get()
        #expect(value.statusCode == 201)
        #expect(
            value.value
                == DocumentWriteResponse(
                    ok: true, id: "8e7d4e87dcbfcdc2ba3adf93740d278a", rev: "1-dbf5edc30b1b3ace90b5b6b156b4a499"))
        #expect(value.headers["Location"] == "http://127.0.0.1:5984/tx_docs/8e7d4e87dcbfcdc2ba3adf93740d278a")

        let batch = Simulation.run(
            CreateDocumentOperation(database: "tx_docs", document: ["b": 1] as JSONValue, batch: true),
            response: .json(202, #"{"ok":true,"id":"x"}"#))
        #expect(requestLine(batch.request) == "POST /tx_docs?batch=ok")
        #expect(batch.value?.rev == nil)
        // The status reaches the decoded value: 202 is accepted, not yet durable.
        #expect(batch.value?.isAccepted == true)
    }

    @Test("HEAD /{db}/{docid}: the revision from the ETag; 404 is nil, not an error")
    func head() throws {
        let step = try #require(Transcripts.step("documents", "s04"))
        let run = Simulation.run(HeadDocumentOperation(database: "tx_docs", id: "doc1"), response: step.simulated)
        #expect(requestLine(run.request) == requestLine(step))
        let head = try #require(try run.result.get().value)
        #expect(
            head
                == DocumentHead(
                    etag: "1-1be7d3c6b2f1e03147ca8fdae601830d", revision: "1-1be7d3c6b2f1e03147ca8fdae601830d",
                    contentLength: 85))

        let missing = Simulation.run(
            HeadDocumentOperation(database: "tx_docs", id: "nope"), response: SimulatedResponse(status: 404))
        #expect(try missing.result.get().value == nil)

        let local = Simulation.run(
            HeadDocumentOperation(database: "tx_local", id: "_local/cfg"),
            response: SimulatedResponse(status: 200, headers: ["ETag": "\"2MFE16LIVQ804CQRHM35YUDFI\""]))
        #expect(requestLine(local.request) == "HEAD /tx_local/_local/cfg")
        #expect(
            try local.result.get().value
                == DocumentHead(etag: "2MFE16LIVQ804CQRHM35YUDFI", revision: nil, contentLength: nil))

        let denied = Simulation.run(
            HeadDocumentOperation(database: "tx_docs", id: "doc1"), response: SimulatedResponse(status: 401))
        #expect(denied.error?.statusCode == 401)
    }

    @Test("COPY /{db}/{docid} with Destination, and with ?rev= inside Destination to overwrite")
    func copy() throws {
        let step = try #require(Transcripts.step("documents", "copy1"))
        let run = Simulation.run(
            CopyDocumentOperation(database: "tx_docs", id: "src", destination: "src-copy"), response: step.simulated)
        #expect(requestLine(run.request) == "COPY /tx_docs/src")
        #expect(run.request?.headers["Destination"] == "src-copy")
        #expect(run.request?.body == nil)
        #expect(run.value == DocumentWriteResponse(ok: true, id: "src-copy", rev: "1-a9d909311613c622a50c00869b8e2073"))

        let over = try #require(Transcripts.step("documents", "s28"))
        let overwrite = Simulation.run(
            CopyDocumentOperation(
                database: "tx_docs", id: "src", destination: "src-copy",
                destinationRevision: "1-a9d909311613c622a50c00869b8e2073"), response: over.simulated)
        #expect(overwrite.request?.headers["Destination"] == "src-copy?rev=1-a9d909311613c622a50c00869b8e2073")
        #expect(overwrite.value?.rev == "2-ac5f19ad51a7224d0c403ba150c38542")

        let special = Simulation.run(
            CopyDocumentOperation(
                database: "db", id: "a/b", destination: "_design/x y", sourceRevision: "3-abc"),
            response: .json(201, #"{"ok":true,"id":"_design/x y","rev":"1-a"}"#))
        #expect(requestLine(special.request) == "COPY /db/a%2Fb?rev=3-abc")
        #expect(special.request?.headers["Destination"] == "_design%2Fx%20y")

        let onto = Simulation.run(CopyDocumentOperation(database: "db", id: "a", destination: "a"), responses: [])
        #expect(onto.error?.kind == .validation)
        #expect(onto.requests.isEmpty)
    }

    @Test("GET with every read option builds the documented query")
    func getOptionsQuery() throws {
        let options = DocumentReadOptions(
            revisions: true, revisionsInfo: true, conflicts: true, deletedConflicts: true, attachments: true,
            attachmentsSince: ["1-a", "2-b"], attachmentEncodingInfo: true, latest: true, localSequence: true,
            meta: true)
        let run = Simulation.run(
            GetDocumentOperation<JSONValue>(database: "db", id: "d", revision: "2-b", options: options),
            response: .json(200, #"{"_id":"d","_rev":"2-b"}"#))
        #expect(
            run.request?.query
                == "rev=2-b&revs=true&revs_info=true&conflicts=true&deleted_conflicts=true&attachments=true"
                + "&atts_since=%5B%221-a%22%2C%222-b%22%5D&att_encoding_info=true&latest=true&local_seq=true&meta=true")
        #expect(run.request?.queryValue("atts_since") == #"["1-a","2-b"]"#)

        let old = GetDocumentOperation<JSONValue>(database: "db", id: "d", conflicts: true, revisions: true)
        #expect(old.conflicts && old.revisions)
        let bad = Simulation.run(
            GetDocumentOperation<JSONValue>(
                database: "db", id: "d", options: DocumentReadOptions(attachmentsSince: [])), responses: [])
        #expect(bad.error?.kind == .validation)
        let badRev = Simulation.run(
            GetDocumentOperation<JSONValue>(
                database: "db", id: "d", options: DocumentReadOptions(attachmentsSince: ["x"])), responses: [])
        #expect(badRev.error?.message.contains("'x'") == true)
    }

    @Test("CouchDocument reads _revisions, _revs_info, _conflicts and _deleted next to the body")
    func metadata() throws {
        let revs = try #require(Transcripts.step("documents", "s11"))
        let withRevs = Simulation.run(
            GetDocumentOperation<CouchDocument<Note>>(database: "tx_docs", id: "doc1", revisions: true),
            response: revs.simulated)
        #expect(requestLine(withRevs.request) == requestLine(revs))
        let doc = try withRevs.result.get().value
        #expect(doc.id == "doc1")
        #expect(doc.rev == "3-bc263e60b1f08e22a09f6061fa6c9d93")
        #expect(doc.title == "via If-Match")
        #expect(doc.body == Note(title: "via If-Match", count: 3))
        #expect(
            doc.revisions?.revisions == [
                "3-bc263e60b1f08e22a09f6061fa6c9d93", "2-1aed2226e132481f5c7726ca741df107",
                "1-1be7d3c6b2f1e03147ca8fdae601830d",
            ])

        let info = try #require(Transcripts.step("documents", "s12"))
        let withInfo = Simulation.run(
            GetDocumentOperation<CouchDocument<Note>>(
                database: "tx_docs", id: "doc1", options: DocumentReadOptions(revisionsInfo: true)),
            response: info.simulated)
        #expect(requestLine(withInfo.request) == requestLine(info))
        #expect(withInfo.value?.revisionsInfo?.count == 3)
        #expect(
            withInfo.value?.revisionsInfo?.first
                == RevisionInfo(rev: "3-bc263e60b1f08e22a09f6061fa6c9d93", status: .available))

        let conflicts = try #require(Transcripts.step("documents", "s17"))
        let withConflicts = Simulation.run(
            GetDocumentOperation<CouchDocument<JSONValue>>(database: "tx_docs", id: "conflicted", conflicts: true),
            response: conflicts.simulated)
        #expect(requestLine(withConflicts.request) == requestLine(conflicts))
        #expect(withConflicts.value?.conflicts == ["1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"])
        #expect(withConflicts.value?.body["v"] == "b")

        let tombstone = try #require(Transcripts.step("documents", "s24"))
        let deleted = Simulation.run(
            GetDocumentOperation<CouchDocument<JSONValue>>(
                database: "tx_docs", id: "doc1", revision: "4-a9839dae25b4b0a621e5cf74c86de579"),
            response: tombstone.simulated)
        #expect(requestLine(deleted.request) == requestLine(tombstone))
        #expect(deleted.value?.deleted == true)

        let missing = try #require(Transcripts.step("documents", "s14"))
        let notFound = Simulation.run(
            GetDocumentOperation<CouchDocument<Note>>(database: "tx_docs", id: "nope"), response: missing.simulated)
        #expect(notFound.error?.statusCode == 404)
        #expect(notFound.error?.error == "not_found")
        #expect(notFound.error?.reason == "missing")
    }

    @Test("CouchDocument forwards body fields, read-only ones included")
    func dynamicMembers() throws {
        struct Frozen: Codable, Sendable {
            let name: String
            var size: Int
        }
        var doc = try JSONDecoder().decode(
            CouchDocument<Frozen>.self, from: Data(#"{"_id":"f","_rev":"1-a","name":"ice","size":2}"#.utf8))
        doc.size += 1
        #expect(doc.name == "ice")
        #expect(doc.body.size == 3)
        #expect(doc.id == "f")
        #expect(doc.deleted == false)
    }

    @Test("CouchDocument writes its metadata into the body's object; read-only metadata is never sent")
    func metadataEncoding() throws {
        var doc = CouchDocument(id: "n1", rev: "1-a", body: Note(title: "t", count: 1))
        doc.conflicts = ["1-b"]
        doc.attachments = ["a.txt": .inline(Data("hi".utf8), contentType: "text/plain"), "keep.png": .keep]
        let run = Simulation.run(
            PutDocumentOperation(database: "db", id: "n1", document: doc),
            response: .json(201, #"{"ok":true,"id":"n1","rev":"2-b"}"#))
        #expect(
            run.request?.bodyJSON == [
                "_id": "n1", "_rev": "1-a", "title": "t", "count": 1,
                "_attachments": [
                    "a.txt": ["content_type": "text/plain", "data": "aGk="], "keep.png": ["stub": true],
                ],
            ])

        let json = CouchDocument(id: "j", deleted: true, body: ["_id": "ignored", "x": 1] as JSONValue)
        let data = try JSONEncoder().encode(json)
        #expect(try JSONDecoder().decode(JSONValue.self, from: data) == ["_id": "j", "_deleted": true, "x": 1])
        #expect(throws: EncodingError.self) { try JSONEncoder().encode(CouchDocument(body: [1, 2] as JSONValue)) }
    }

    @Test("PUT and DELETE with If-Match instead of ?rev=; batch=ok answers 202 without a rev")
    func ifMatchAndBatch() throws {
        let put3 = try #require(Transcripts.step("documents", "put3"))
        let put = Simulation.run(
            PutDocumentOperation(
                database: "tx_docs", id: "doc1", document: Note(title: "via If-Match", count: 3),
                revision: "2-1aed2226e132481f5c7726ca741df107", revisionPlacement: .ifMatch),
            response: put3.simulated)
        #expect(requestLine(put.request) == requestLine(put3))
        #expect(put.request?.headers["If-Match"] == "2-1aed2226e132481f5c7726ca741df107")
        #expect(put.request?.bodyJSON == recordedRequestJSON(put3))
        #expect(put.value?.rev == "3-bc263e60b1f08e22a09f6061fa6c9d93")

        let del1 = try #require(Transcripts.step("documents", "del1"))
        let delete = Simulation.run(
            DeleteDocumentOperation(
                database: "tx_docs", id: "doc1", revision: "3-bc263e60b1f08e22a09f6061fa6c9d93",
                revisionPlacement: .ifMatch), response: del1.simulated)
        #expect(requestLine(delete.request) == requestLine(del1))
        #expect(delete.request?.headers["If-Match"] == "3-bc263e60b1f08e22a09f6061fa6c9d93")
        #expect(delete.value?.rev == "4-a9839dae25b4b0a621e5cf74c86de579")

        let s33 = try #require(Transcripts.step("documents", "s33"))
        let batch = Simulation.run(
            PutDocumentOperation(database: "tx_docs", id: "batched", document: ["b": 1] as JSONValue, batch: true),
            response: s33.simulated)
        #expect(requestLine(batch.request) == requestLine(s33))
        #expect(try batch.result.get().statusCode == 202)
        #expect(batch.value == DocumentWriteResponse(ok: true, id: "batched", rev: nil, isAccepted: true))

        let batchDelete = Simulation.run(
            DeleteDocumentOperation(database: "db", id: "d", revision: "1-a", batch: true),
            response: .json(202, #"{"ok":true,"id":"d"}"#))
        #expect(requestLine(batchDelete.request) == "DELETE /db/d?rev=1-a&batch=ok")
        #expect(batchDelete.value?.isAccepted == true)  // 202: not yet durable
    }

    @Test("CouchDB's 400s for bad bodies and ids come back as CouchError")
    func badWrites() throws {
        for name in ["s31", "s32"] {
            let step = try #require(Transcripts.step("documents", name))
            // s31 is an id the client refuses itself; send it through GenericOperation to read the answer.
            let op = GenericJSONOperation<DocumentWriteResponse>(
                GenericOperation(
                    method: .put, path: CouchPath(segments: step.path.split(separator: "/").map(String.init)),
                    body: step.requestBody))
            let run = Simulation.run(op, response: step.simulated)
            #expect(requestLine(run.request) == requestLine(step))
            #expect(run.error?.statusCode == 400)
            #expect(run.error?.error == step.responseJSON?["error"]?.stringValue)
            #expect(run.error?.reason == step.responseJSON?["reason"]?.stringValue)
        }
        let refused = Simulation.run(
            PutDocumentOperation(database: "tx_docs", id: "_reserved", document: ["a": 1] as JSONValue), responses: [])
        #expect(refused.error?.kind == .validation)
    }

    @Test("open_revs=all as JSON: found revisions; a listed revision that does not exist is missing")
    func openRevisions() throws {
        let step = try #require(Transcripts.step("documents", "s18"))
        let run = Simulation.run(
            GetOpenRevisionsOperation<CouchDocument<JSONValue>>(database: "tx_docs", id: "conflicted"),
            response: step.simulated)
        #expect(requestLine(run.request) == requestLine(step))
        #expect(run.request?.headers["Accept"] == "application/json")
        let revisions = try run.result.get().value
        #expect(
            revisions.compactMap(\.document?.rev).sorted() == [
                "1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "1-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
            ])

        let listed = Simulation.run(
            GetOpenRevisionsOperation<JSONValue>(
                database: "db", id: "d", revisions: .revisions(["1-a", "9-z"]),
                options: DocumentReadOptions(revisions: true, latest: true)),
            response: .json(200, #"[{"ok":{"_id":"d","_rev":"1-a"}},{"missing":"9-z"}]"#))
        #expect(listed.request?.query == "open_revs=%5B%221-a%22%2C%229-z%22%5D&revs=true&latest=true")
        let values = try listed.result.get().value
        #expect(values.count == 2)
        #expect(values[0] == .found(["_id": "d", "_rev": "1-a"]))
        #expect(values[1] == .missing(rev: "9-z"))

        let empty = Simulation.run(
            GetOpenRevisionsOperation<JSONValue>(database: "db", id: "d", revisions: .revisions([])), responses: [])
        #expect(empty.error?.kind == .validation)
    }

    @Test("_local documents: PUT/GET/DELETE under /_local/, opaque ETags, rev 0-N, deleted means missing")
    func localDocuments() throws {
        let create = try #require(Transcripts.step("local_docs", "s02"))
        let put = Simulation.run(
            PutDocumentOperation(database: "tx_local", id: "_local/cfg", document: ["setting": "a"] as JSONValue),
            response: create.simulated)
        #expect(requestLine(put.request) == requestLine(create))
        #expect(put.value == DocumentWriteResponse(ok: true, id: "_local/cfg", rev: "0-1"))

        let read = try #require(Transcripts.step("local_docs", "s03"))
        let get = Simulation.run(
            GetDocumentOperation<CouchDocument<JSONValue>>(database: "tx_local", id: "_local/cfg"),
            response: read.simulated)
        #expect(requestLine(get.request) == requestLine(read))
        #expect(get.value?.rev == "0-1")
        #expect(get.value?.body["setting"] == "a")

        let upd = try #require(Transcripts.step("local_docs", "upd"))
        let update = Simulation.run(
            PutDocumentOperation(
                database: "tx_local", id: "_local/cfg",
                document: CouchDocument(rev: "0-1", body: ["setting": "c"] as JSONValue)),
            response: upd.simulated)
        #expect(update.request?.bodyJSON == recordedRequestJSON(upd))
        #expect(update.value?.rev == "0-2")

        let remove = try #require(Transcripts.step("local_docs", "s08"))
        let delete = Simulation.run(
            DeleteDocumentOperation(database: "tx_local", id: "_local/cfg", revision: "0-2"), response: remove.simulated
        )
        #expect(requestLine(delete.request) == requestLine(remove))
        #expect(delete.value?.rev == "0-0")

        let gone = try #require(Transcripts.step("local_docs", "s09"))
        let after = Simulation.run(
            GetJSONDocumentOperation(database: "tx_local", id: "_local/cfg"), response: gone.simulated)
        #expect(after.error?.statusCode == 404)
        #expect(after.error?.reason == "missing")
    }
}
