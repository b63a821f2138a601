import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

@Suite("Attachment operations against recorded CouchDB 3.5 responses", .ownThreads)
struct AttachmentOperationTests {
    private static let png = Data(
        base64Encoded:
            "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")!

    @Test("PUT text and binary attachments: raw bytes, their content type, ?rev=")
    func put() throws {
        let text = try #require(Transcripts.step("attachments", "att1"))
        let run = Simulation.run(
            PutAttachmentOperation(
                database: "tx_att", documentID: "doc", name: "hello.txt", data: try #require(text.requestBody),
                contentType: "text/plain", revision: "1-6f779045fa120fa25d6bf2dc96bae018"),
            response: text.simulated)
        #expect(requestLine(run.request) == requestLine(text))
        #expect(run.request?.headers["Content-Type"] == "text/plain")
        #expect(run.request?.body == Data("Hello, CouchDB! Hello, CouchDB! Hello, CouchDB!\n".utf8))
        #expect(run.value == DocumentWriteResponse(ok: true, id: "doc", rev: "2-37f2f5bf3c2b9d6756e8fca38a839ba8"))

        let binary = try #require(Transcripts.step("attachments", "att2"))
        let bin = Simulation.run(
            PutAttachmentOperation(
                database: "tx_att", documentID: "doc", name: "pixel.png", data: Self.png, contentType: "image/png",
                revision: "2-37f2f5bf3c2b9d6756e8fca38a839ba8"),
            response: binary.simulated)
        #expect(requestLine(bin.request) == requestLine(binary))
        #expect(bin.request?.body == binary.requestBody)
        #expect(bin.request?.headers["Content-Type"] == "image/png")

        let stale = try #require(Transcripts.step("attachments", "s13"))
        let conflict = Simulation.run(
            PutAttachmentOperation(
                database: "tx_att", documentID: "doc", name: "hello.txt", data: Data("x".utf8),
                contentType: "text/plain",
                revision: "1-6f779045fa120fa25d6bf2dc96bae018"),
            response: stale.simulated)
        #expect(conflict.error?.statusCode == 409)
        #expect(conflict.error?.error == "conflict")

        let create = try #require(Transcripts.step("attachments", "s14"))
        let created = Simulation.run(
            PutAttachmentOperation(
                database: "tx_att", documentID: "newdoc", name: "first.txt", data: Data("first\n".utf8),
                contentType: "text/plain"),
            response: create.simulated)
        #expect(requestLine(created.request) == requestLine(create))
        #expect(created.value?.rev == "1-ff73c15383c03daecaf5e9d01dc21e4d")
    }

    @Test("Names with '/' keep it as a separator; each part is percent-encoded; ids keep %2F")
    func names() {
        let run = Simulation.run(
            PutAttachmentOperation(
                database: "db", documentID: "a/b", name: "img/2024 1/ü+x.png", data: Data([0, 1]),
                contentType: "image/png",
                revision: "1-a", revisionPlacement: .ifMatch),
            response: .json(201, #"{"ok":true,"id":"a/b","rev":"2-b"}"#))
        #expect(requestLine(run.request) == "PUT /db/a%2Fb/img/2024%201/%C3%BC%2Bx.png")
        #expect(run.request?.headers["If-Match"] == "1-a")

        let design = Simulation.run(
            GetAttachmentOperation(database: "db", documentID: "_design/app", name: "index.html"),
            response: SimulatedResponse(status: 200, body: Data()))
        #expect(design.request?.path == "/db/_design/app/index.html")

        for bad in ["", "_x", "a//b", "a/"] {
            let op = GetAttachmentOperation(database: "db", documentID: "d", name: bad)
            #expect(Simulation.run(op, responses: []).error?.kind == .validation, "\(bad)")
        }
        let local = GetAttachmentOperation(database: "db", documentID: "_local/x", name: "a")
        #expect(Simulation.run(local, responses: []).error?.kind == .validation)
    }

    @Test("GET an attachment: exact bytes and content type; Range gives 206 on binary, 200 on text")
    func get() throws {
        let text = try #require(Transcripts.step("attachments", "get_txt"))
        let run = Simulation.run(
            GetAttachmentOperation(database: "tx_att", documentID: "doc", name: "hello.txt"), response: text.simulated)
        #expect(requestLine(run.request) == requestLine(text))
        #expect(run.request?.headers["Accept"] == "*/*")
        #expect(
            run.value
                == DataResponse(
                    data: Data("Hello, CouchDB! Hello, CouchDB! Hello, CouchDB!\n".utf8), contentType: "text/plain"))

        let binary = try #require(Transcripts.step("attachments", "s06"))
        let bin = Simulation.run(
            GetAttachmentOperation(database: "tx_att", documentID: "doc", name: "pixel.png"), response: binary.simulated
        )
        #expect(bin.value?.data == Self.png)

        let ranged = try #require(Transcripts.step("attachments", "s10"))
        let part = Simulation.run(
            GetAttachmentOperation(
                database: "tx_att", documentID: "doc", name: "pixel.png", range: .closed(from: 0, to: 7)),
            response: ranged.simulated)
        #expect(part.request?.headers["Range"] == "bytes=0-7")
        let response = try part.result.get()
        #expect(response.statusCode == 206)
        #expect(response.headers["Content-Range"] == "bytes 0-7/70")
        #expect(response.value.data == Self.png.prefix(8))

        let ignored = try #require(Transcripts.step("attachments", "s09"))
        let whole = Simulation.run(
            GetAttachmentOperation(
                database: "tx_att", documentID: "doc", name: "hello.txt", range: .closed(from: 0, to: 4)),
            response: ignored.simulated)
        #expect(try whole.result.get().statusCode == 200)
        #expect(whole.value?.data.count == 48)

        let missing = try #require(Transcripts.step("attachments", "s12"))
        let notFound = Simulation.run(
            GetAttachmentOperation(database: "tx_att", documentID: "doc", name: "missing.txt"),
            response: missing.simulated)
        #expect(notFound.error?.statusCode == 404)
        #expect(notFound.error?.reason == "Document is missing attachment")

        let headers = [(ByteRange.from(10), "bytes=10-"), (.suffix(5), "bytes=-5")]
        for (range, header) in headers {
            let op = GetAttachmentOperation(database: "db", documentID: "d", name: "f", revision: "2-x", range: range)
            let ranged = Simulation.run(op, response: SimulatedResponse(status: 206, body: Data([1])))
            #expect(ranged.request?.headers["Range"] == header)
            #expect(ranged.request?.query == "rev=2-x")
        }
        for bad in [ByteRange.closed(from: 5, to: 1), .from(-1), .suffix(0)] {
            let op = GetAttachmentOperation(database: "db", documentID: "d", name: "f", range: bad)
            #expect(Simulation.run(op, responses: []).error?.kind == .validation)
        }
    }

    @Test("HEAD an attachment: length, type, digest from the ETag; 404 is nil")
    func head() throws {
        let step = try #require(Transcripts.step("attachments", "s07"))
        let run = Simulation.run(
            HeadAttachmentOperation(database: "tx_att", documentID: "doc", name: "hello.txt"), response: step.simulated)
        #expect(requestLine(run.request) == requestLine(step))
        #expect(
            try run.result.get().value
                == AttachmentHead(
                    contentType: "text/plain", length: 48, digest: "md5-sa447aTau5kFz1Dd+5WrYQ==", acceptsRanges: false)
        )
        let missing = Simulation.run(
            HeadAttachmentOperation(database: "tx_att", documentID: "doc", name: "nope"),
            response: SimulatedResponse(status: 404))
        #expect(try missing.result.get().value == nil)
    }

    @Test("DELETE an attachment with ?rev=")
    func delete() throws {
        let step = try #require(Transcripts.step("attachments", "delatt"))
        let run = Simulation.run(
            DeleteAttachmentOperation(
                database: "tx_att", documentID: "doc", name: "pixel.png", revision: "3-c7ba307a51982d79f8e103f872d5882d"
            ),
            response: step.simulated)
        #expect(requestLine(run.request) == requestLine(step))
        #expect(run.value?.rev == "4-d5166ec59dc8e7b4c239dd93a7c2e957")
    }

    @Test("Inline base64 attachments written with Attachment; stubs, data and encoding info read back")
    func inline() throws {
        let step = try #require(Transcripts.step("attachments", "inline"))
        let doc = CouchDocument(
            attachments: [
                "note.txt": .inline(Data("inline note\n".utf8), contentType: "text/plain"),
                "blob.bin": .inline(Data(0..<16), contentType: "application/octet-stream"),
            ], body: JSONValue.object([:]))
        let run = Simulation.run(
            PutDocumentOperation(database: "tx_att", id: "inline", document: doc), response: step.simulated)
        #expect(requestLine(run.request) == requestLine(step))
        #expect(run.request?.bodyJSON == recordedRequestJSON(step))

        let stubs = try #require(Transcripts.step("attachments", "s15"))
        let read = Simulation.run(
            GetDocumentOperation<CouchDocument<JSONValue>>(database: "tx_att", id: "doc"), response: stubs.simulated)
        let attachments = try #require(try read.result.get().value.attachments)
        #expect(
            attachments["pixel.png"]
                == Attachment(
                    contentType: "image/png", stub: true, digest: "md5-+Cm5FPxHz8nAdHwRnCfPGw==", length: 70, revpos: 3)
        )

        let inlined = try #require(Transcripts.step("attachments", "s16"))
        let withData = Simulation.run(
            GetDocumentOperation<CouchDocument<JSONValue>>(
                database: "tx_att", id: "doc", options: DocumentReadOptions(attachments: true)),
            response: inlined.simulated)
        #expect(requestLine(withData.request) == requestLine(inlined))
        #expect(withData.value?.attachments?["pixel.png"]?.data == Self.png)
        #expect(
            withData.value?.attachments?["hello.txt"]?.data
                == Data("Hello, CouchDB! Hello, CouchDB! Hello, CouchDB!\n".utf8))

        let encoded = try #require(Transcripts.step("attachments", "s17"))
        let info = Simulation.run(
            GetDocumentOperation<CouchDocument<JSONValue>>(
                database: "tx_att", id: "doc", options: DocumentReadOptions(attachmentEncodingInfo: true)),
            response: encoded.simulated)
        #expect(requestLine(info.request) == requestLine(encoded))
        #expect(info.value?.attachments?["hello.txt"]?.encoding == "gzip")
        #expect(info.value?.attachments?["hello.txt"]?.encodedLength == 40)

        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(Attachment.self, from: Data(#"{"data":"not base64!"}"#.utf8))
        }
    }

    @Test("multipart/related upload: JSON part with follows stubs in part order, then the raw bytes")
    func multipartUpload() throws {
        let doc = CouchDocument(
            rev: "1-a", attachments: ["old.txt": .keep, "pixel.png": .keep], body: ["title": "report"] as JSONValue)
        let op = PutMultipartDocumentOperation(
            database: "db", id: "report", document: doc,
            attachments: [
                AttachmentUpload(name: "pixel.png", contentType: "image/png", data: Self.png),
                AttachmentUpload(
                    name: "a \"quoted\".txt", contentType: "text/plain", data: Data("hi\r\n--not a boundary".utf8)),
            ])
        let run = Simulation.run(op, response: .json(201, #"{"ok":true,"id":"report","rev":"2-b"}"#))
        let request = try #require(run.request)
        #expect(requestLine(request) == "PUT /db/report")
        let contentType = try #require(request.headers["Content-Type"])
        #expect(contentType.hasPrefix("multipart/related; boundary=\""))
        let boundary = try #require(MultipartCoding.boundary(contentType: contentType))
        let parts = try MultipartCoding.decode(try #require(request.body), boundary: boundary)
        #expect(parts.count == 3)
        #expect(parts[0].headers["Content-Type"] == "application/json")
        let json = try JSONDecoder().decode(JSONValue.self, from: parts[0].body)
        #expect(
            json == [
                "_rev": "1-a", "title": "report",
                "_attachments": [
                    "old.txt": ["stub": true],
                    "pixel.png": ["content_type": "image/png", "follows": true, "length": 70],
                    "a \"quoted\".txt": ["content_type": "text/plain", "follows": true, "length": 20],
                ],
            ])
        // The follows entries appear in the JSON text in the order of the parts.
        let text = String(decoding: parts[0].body, as: UTF8.self)
        let first = try #require(text.range(of: "\"pixel.png\":{"))
        let second = try #require(text.range(of: "\"a \\\"quoted\\\".txt\""))
        #expect(first.lowerBound < second.lowerBound)
        #expect(parts[1].body == Self.png)
        #expect(parts[1].filename == "pixel.png")
        #expect(parts[2].headers["Content-Type"] == "text/plain")
        #expect(parts[2].filename == "a \"quoted\".txt")
        #expect(parts[2].body == Data("hi\r\n--not a boundary".utf8))

        let none = PutMultipartDocumentOperation(
            database: "db", id: "r", document: ["a": 1] as JSONValue, attachments: [])
        #expect(Simulation.run(none, responses: []).error?.kind == .validation)
        let twice = PutMultipartDocumentOperation(
            database: "db", id: "r", document: ["a": 1] as JSONValue,
            attachments: [
                AttachmentUpload(name: "x", contentType: "a/b", data: Data()),
                AttachmentUpload(name: "x", contentType: "a/b", data: Data()),
            ])
        #expect(Simulation.run(twice, responses: []).error?.kind == .validation)
    }

    @Test("open_revs as multipart/mixed: the recorded body parses into its two revisions")
    func openRevisionsMultipart() throws {
        let step = try #require(Transcripts.step("documents", "s19"))
        let run = Simulation.run(
            GetOpenRevisionsMultipartOperation(database: "tx_docs", id: "conflicted"), response: step.simulated)
        #expect(requestLine(run.request) == requestLine(step))
        #expect(run.request?.headers["Accept"] == "multipart/mixed")
        let revisions = try run.result.get().value
        #expect(revisions.count == 2)
        let docs = try revisions.map { try $0.decode(CouchDocument<JSONValue>.self) }
        #expect(docs.map(\.rev) == ["1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "1-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"])
        #expect(revisions.allSatisfy { $0.attachments.isEmpty && $0.missingRevision == nil })
    }

    @Test("open_revs multipart with attachments (nested multipart/related) and a missing revision")
    func openRevisionsMultipartAttachments() throws {
        let inner = try MultipartCoding.encode(
            [
                MIMEPart(
                    headers: ["Content-Type": "application/json"],
                    body: Data(
                        #"{"_id":"d","_rev":"2-b","_attachments":{"p.png":{"content_type":"image/png","revpos":2,"digest":"md5-x","length":70,"follows":true}}}"#
                            .utf8)),
                MIMEPart(
                    headers: ["Content-Disposition": "attachment; filename=\"p.png\"", "Content-Type": "image/png"],
                    body: Self.png),
            ], boundary: "inner42")
        let outer = try MultipartCoding.encode(
            [
                MIMEPart(headers: ["Content-Type": "multipart/related; boundary=\"inner42\""], body: inner),
                MIMEPart(
                    headers: ["Content-Type": "application/json; error=\"true\""],
                    body: Data(#"{"missing":"3-c"}"#.utf8)),
            ], boundary: "outer7")
        let run = Simulation.run(
            GetOpenRevisionsMultipartOperation(
                database: "db", id: "d", revisions: .revisions(["2-b", "3-c"]),
                options: DocumentReadOptions(attachments: true)),
            response: SimulatedResponse(
                status: 200, headers: ["Content-Type": "multipart/mixed; boundary=\"outer7\""], body: outer))
        #expect(run.request?.query == "open_revs=%5B%222-b%22%2C%223-c%22%5D&attachments=true")
        let revisions = try run.result.get().value
        #expect(revisions.count == 2)
        #expect(revisions[0].attachments["p.png"]?.data == Self.png)
        #expect(revisions[0].attachments["p.png"]?.contentType == "image/png")
        #expect(try revisions[0].decode(CouchDocument<JSONValue>.self).attachments?["p.png"]?.follows == true)
        #expect(revisions[1].missingRevision == "3-c")

        let notMultipart = Simulation.run(
            GetOpenRevisionsMultipartOperation(database: "db", id: "d"), response: .json(200, "[]"))
        #expect(notMultipart.error?.kind == .decoding)
        #expect(throws: CouchError.self) { try MultipartCoding.decode(Data("garbage".utf8), boundary: "b") }
        #expect(throws: CouchError.self) {
            try MultipartCoding.decode(Data("--b\r\nX: y\r\n\r\nno end".utf8), boundary: "b")
        }
    }
}
