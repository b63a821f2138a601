import Foundation
import SwiftCouch
import Testing

/// A document body without metadata, for ``CouchDocument``.
private struct Holder: Codable, Sendable, Equatable {
    var kind: String
}

/// Every byte value, twice: binary content no text encoding survives.
private let binary = Data((0..<512).map { UInt8($0 % 256) })
/// Text that CouchDB stores gzip-compressed (`text/*` is compressible).
private let text = Data(String(repeating: "Hello, CouchDB! ", count: 8).utf8)

/// Runs `body`, which must fail with an HTTP ``CouchError`` of `status` (and `error`, when given).
private func expectHTTPFailure(
    _ what: String, status: Int, error: String? = nil, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> Void
) async {
    do {
        try await body()
        Issue.record("\(what) should fail with \(status)", sourceLocation: sourceLocation)
    } catch let failure as CouchError {
        #expect(failure.statusCode == status, "\(what): \(failure)", sourceLocation: sourceLocation)
        if let error { #expect(failure.error == error, "\(what): \(failure)", sourceLocation: sourceLocation) }
    } catch {
        Issue.record("\(what) threw \(error)", sourceLocation: sourceLocation)
    }
}

/// Writes `id` as a conflict by replicated writes: `1-a…` → `2-b…` and `2-c…` (the winner), each
/// leaf with the binary attachment `blob.bin` and the text attachment `note.txt` inline.
private func writeConflictWithAttachments(_ client: CouchDBClient, _ db: String, id: String) async throws {
    let root = String(repeating: "a", count: 32)
    func leaf(_ digit: Character, _ kind: String) -> CouchDocument<Holder> {
        let hash = String(repeating: digit, count: 32)
        return CouchDocument(
            id: id, rev: "2-" + hash,
            attachments: [
                "blob.bin": .inline(binary + Data(kind.utf8), contentType: "application/octet-stream"),
                "note.txt": .inline(text + Data(kind.utf8), contentType: "text/plain"),
            ], revisions: Revisions(start: 2, ids: [hash, root]), body: Holder(kind: kind))
    }
    let written = try await client.value(
        BulkDocsOperation(database: db, documents: [leaf("b", "loser"), leaf("c", "winner")], newEdits: false))
    #expect(written.isEmpty)
}

@Suite("End to end: attachments")
struct AttachmentsEndToEndTests {
    @Test("Binary and text attachments: put (creating the document), get, head, Range, delete")
    func standalone() async throws {
        try await withDatabase("att-standalone") { client, db in
            let created = try await client.execute(
                PutAttachmentOperation(
                    database: db, documentID: "doc", name: "blob.bin", data: binary,
                    contentType: "application/octet-stream"))
            #expect(created.statusCode == 201)
            #expect(created.value.id == "doc")
            let rev1 = try #require(created.value.rev)
            #expect(rev1.hasPrefix("1-"))
            let rev2 = try #require(
                try await client.value(
                    PutAttachmentOperation(
                        database: db, documentID: "doc", name: "note.txt", data: text, contentType: "text/plain",
                        revision: rev1)
                ).rev)
            // A cluster copy that has not seen rev2 would take the stale write as a conflict branch.
            try await awaitEveryCopy(client, db, id: "doc", rev: rev2)
            await expectHTTPFailure("An attachment write with a stale revision", status: 409, error: "conflict") {
                _ = try await client.execute(
                    PutAttachmentOperation(
                        database: db, documentID: "doc", name: "other.txt", data: text, contentType: "text/plain",
                        revision: rev1))
            }

            let blob = try await client.value(GetAttachmentOperation(database: db, documentID: "doc", name: "blob.bin"))
            #expect(blob.data == binary)
            #expect(blob.contentType == "application/octet-stream")
            let note = try await client.value(GetAttachmentOperation(database: db, documentID: "doc", name: "note.txt"))
            #expect(note.data == text)
            #expect(note.contentType?.hasPrefix("text/plain") == true)
            let old = try await client.value(
                GetAttachmentOperation(database: db, documentID: "doc", name: "blob.bin", revision: rev1))
            #expect(old.data == binary)

            let stubs = try #require(
                try await client.value(GetDocumentOperation<CouchDocument<JSONValue>>(database: db, id: "doc"))
                    .attachments)
            #expect(stubs["blob.bin"]?.stub == true)
            #expect(stubs["blob.bin"]?.length == binary.count)
            #expect(stubs["blob.bin"]?.revpos == 1)
            #expect(stubs["note.txt"]?.revpos == 2)

            let blobHead = try #require(
                try await client.value(HeadAttachmentOperation(database: db, documentID: "doc", name: "blob.bin")))
            #expect(blobHead.length == binary.count)
            #expect(blobHead.contentType == "application/octet-stream")
            #expect(blobHead.digest == stubs["blob.bin"]?.digest)
            #expect(blobHead.acceptsRanges)
            // Text is stored compressed: no ranges (and the length depends on Accept-Encoding).
            let noteHead = try #require(
                try await client.value(HeadAttachmentOperation(database: db, documentID: "doc", name: "note.txt")))
            #expect(noteHead.digest == stubs["note.txt"]?.digest)
            #expect(!noteHead.acceptsRanges)
            #expect(
                try await client.value(HeadAttachmentOperation(database: db, documentID: "doc", name: "none.bin"))
                    == nil)
            #expect(
                try await client.value(HeadAttachmentOperation(database: db, documentID: "nodoc", name: "blob.bin"))
                    == nil)

            let first = try await client.execute(
                GetAttachmentOperation(
                    database: db, documentID: "doc", name: "blob.bin", range: .closed(from: 0, to: 7)))
            #expect(first.statusCode == 206)
            #expect(first.value.data == binary.prefix(8))
            #expect(first.headers["Content-Range"] == "bytes 0-7/\(binary.count)")
            let tail = try await client.execute(
                GetAttachmentOperation(database: db, documentID: "doc", name: "blob.bin", range: .suffix(4)))
            #expect(tail.statusCode == 206)
            #expect(tail.value.data == binary.suffix(4))
            let rest = try await client.execute(
                GetAttachmentOperation(database: db, documentID: "doc", name: "blob.bin", range: .from(500)))
            #expect(rest.statusCode == 206)
            #expect(rest.value.data == binary.suffix(12))
            let textRange = try await client.execute(
                GetAttachmentOperation(
                    database: db, documentID: "doc", name: "note.txt", range: .closed(from: 0, to: 3)))
            #expect(textRange.statusCode == 200)
            #expect(textRange.value.data == text)

            let rev3 = try #require(
                try await client.value(
                    DeleteAttachmentOperation(database: db, documentID: "doc", name: "blob.bin", revision: rev2)
                ).rev)
            #expect(rev3.hasPrefix("3-"))
            await expectHTTPFailure("A deleted attachment", status: 404, error: "not_found") {
                _ = try await client.execute(GetAttachmentOperation(database: db, documentID: "doc", name: "blob.bin"))
            }
            let kept = try await client.value(GetAttachmentOperation(database: db, documentID: "doc", name: "note.txt"))
            #expect(kept.data == text)
            // The revision before the delete still has it.
            let before = try await client.value(
                GetAttachmentOperation(database: db, documentID: "doc", name: "blob.bin", revision: rev2))
            #expect(before.data == binary)
        }
    }

    @Test("Names with '/', spaces and non-ASCII letters; If-Match revisions")
    func namesAndIfMatch() async throws {
        try await withDatabase("att-names") { client, db in
            let rev1 = try #require(
                try await client.value(PutDocumentOperation(database: db, id: "a/doc", document: Holder(kind: "k")))
                    .rev)
            let name = "dir/sub dir/café.bin"
            let rev2 = try #require(
                try await client.value(
                    PutAttachmentOperation(
                        database: db, documentID: "a/doc", name: name, data: binary, contentType: "image/png",
                        revision: rev1, revisionPlacement: .ifMatch)
                ).rev)
            let read = try await client.value(GetAttachmentOperation(database: db, documentID: "a/doc", name: name))
            #expect(read.data == binary)
            #expect(read.contentType == "image/png")
            let head = try await client.value(HeadAttachmentOperation(database: db, documentID: "a/doc", name: name))
            #expect(head?.length == binary.count)
            let doc = try await client.value(GetDocumentOperation<CouchDocument<Holder>>(database: db, id: "a/doc"))
            #expect(doc.attachments.map { Array($0.keys) } == [name])
            #expect(doc.kind == "k")

            let rev3 = try #require(
                try await client.value(
                    DeleteAttachmentOperation(
                        database: db, documentID: "a/doc", name: name, revision: rev2, revisionPlacement: .ifMatch)
                ).rev)
            #expect(rev3.hasPrefix("3-"))
            #expect(
                try await client.value(HeadAttachmentOperation(database: db, documentID: "a/doc", name: name)) == nil)
        }
    }

    @Test("Inline base64 attachments, stubs that keep them, attachments=true, atts_since, att_encoding_info")
    func inlineAndStubs() async throws {
        try await withDatabase("att-inline") { client, db in
            var doc = CouchDocument(
                id: "inline",
                attachments: [
                    "blob.bin": .inline(binary, contentType: "application/octet-stream"),
                    "note.txt": .inline(text, contentType: "text/plain"),
                ], body: Holder(kind: "v1"))
            let rev1 = try #require(
                try await client.value(PutDocumentOperation(database: db, id: "inline", document: doc)).rev)
            typealias Read = GetDocumentOperation<CouchDocument<Holder>>

            let stubbed = try await client.value(Read(database: db, id: "inline"))
            let blobStub = try #require(stubbed.attachments?["blob.bin"])
            #expect(blobStub.stub == true)
            #expect(blobStub.data == nil)
            #expect(blobStub.length == binary.count)
            #expect(blobStub.contentType == "application/octet-stream")
            #expect(blobStub.digest?.hasPrefix("md5-") == true)
            #expect(blobStub.revpos == 1)

            // An update that sends the stubs back keeps the attachments and adds one (once every
            // copy of a cluster has the attachments the stubs name).
            try await awaitEveryCopy(client, db, id: "inline", rev: rev1)
            doc.rev = rev1
            doc.kind = "v2"
            doc.attachments = [
                "blob.bin": .keep, "note.txt": .keep,
                "extra.bin": .inline(Data([1, 2, 3]), contentType: "application/x-1"),
            ]
            // A real cluster may still refuse the stubs (412 missing_stub) from a copy that has not
            // stored the attachments: nothing was written then, so write again until it is taken.
            var written: String?
            var patience = Patience()
            while written == nil {
                do {
                    written = try await client.value(PutDocumentOperation(database: db, id: "inline", document: doc))
                        .rev
                } catch let error as CouchError
                    where error.statusCode == 412 && error.error == "missing_stub"
                {
                    guard try await patience.waitAgain(pause: 0.2) else { throw error }
                }
            }
            let rev2 = try #require(written)
            let kept = try await converged(
                read: { try await client.value(Read(database: db, id: "inline")) }, until: { $0.rev == rev2 })
            #expect(kept.kind == "v2")
            #expect(Set(kept.attachments.map { Array($0.keys) } ?? []) == ["blob.bin", "note.txt", "extra.bin"])
            #expect(kept.attachments?["blob.bin"]?.revpos == 1)
            #expect(kept.attachments?["extra.bin"]?.revpos == 2)

            let inline = try await client.value(
                Read(database: db, id: "inline", options: DocumentReadOptions(attachments: true)))
            #expect(inline.attachments?["blob.bin"]?.data == binary)
            #expect(inline.attachments?["note.txt"]?.data == text)
            #expect(inline.attachments?["extra.bin"]?.data == Data([1, 2, 3]))
            #expect(inline.attachments?["blob.bin"]?.stub == nil)

            // Only what changed after rev1 is inlined.
            let since = try await client.value(
                Read(
                    database: db, id: "inline",
                    options: DocumentReadOptions(attachments: true, attachmentsSince: [rev1])))
            #expect(since.attachments?["extra.bin"]?.data == Data([1, 2, 3]))
            #expect(since.attachments?["blob.bin"]?.data == nil)
            #expect(since.attachments?["blob.bin"]?.stub == true)

            let encoding = try await client.value(
                Read(database: db, id: "inline", options: DocumentReadOptions(attachmentEncodingInfo: true)))
            let noteInfo = try #require(encoding.attachments?["note.txt"])
            #expect(noteInfo.encoding == "gzip")
            #expect((noteInfo.encodedLength ?? .max) < text.count)
            #expect(encoding.attachments?["blob.bin"]?.encoding == nil)

            // _bulk_get and _all_docs inline attachments too.
            let bulk = try await client.value(
                BulkGetOperation<CouchDocument<Holder>>(
                    database: db, items: [BulkGetItem(id: "inline", rev: rev2, attachmentsSince: [rev1])],
                    options: DocumentReadOptions(attachments: true)))
            #expect(bulk.documents.first?.attachments?["extra.bin"]?.data == Data([1, 2, 3]))
            #expect(bulk.documents.first?.attachments?["note.txt"]?.stub == true)
            try await settle(client, db)  // `_all_docs` reads one copy of each shard
            let listed = try await client.value(
                AllDocsOperation<CouchDocument<Holder>>(
                    database: db, options: KeyRangeOptions(includeDocs: true, attachments: true)))
            #expect(listed.rows.first?.doc?.attachments?["blob.bin"]?.data == binary)

            // An update without _attachments drops them all.
            doc.rev = rev2
            doc.attachments = nil
            _ = try await client.value(PutDocumentOperation(database: db, id: "inline", document: doc))
            #expect(try await client.value(Read(database: db, id: "inline")).attachments == nil)
        }
    }

    @Test("multipart/related upload of a document with binary and text attachments, then an update keeping a stub")
    func multipartUpload() async throws {
        try await withDatabase("att-multipart") { client, db in
            let created = try await client.execute(
                PutMultipartDocumentOperation(
                    database: db, id: "mp", document: Holder(kind: "multi"),
                    attachments: [
                        AttachmentUpload(name: "blob.bin", contentType: "application/octet-stream", data: binary),
                        AttachmentUpload(name: "dir/note.txt", contentType: "text/plain", data: text),
                    ]))
            #expect(created.statusCode == 201)
            let rev1 = try #require(created.value.rev)
            let doc = try await client.value(GetDocumentOperation<CouchDocument<Holder>>(database: db, id: "mp"))
            #expect(doc.kind == "multi")
            #expect(doc.attachments?["blob.bin"]?.length == binary.count)
            #expect(doc.attachments?["dir/note.txt"]?.length == text.count)
            #expect(
                try await client.value(GetAttachmentOperation(database: db, documentID: "mp", name: "blob.bin")).data
                    == binary)
            #expect(
                try await client.value(GetAttachmentOperation(database: db, documentID: "mp", name: "dir/note.txt"))
                    .data == text)

            // Update: keep blob.bin as a stub, replace the text, add another.
            let update = CouchDocument(
                id: "mp", rev: rev1, attachments: ["blob.bin": .keep, "dir/note.txt": .keep],
                body: Holder(kind: "updated"))
            let rev2 = try #require(
                try await client.value(
                    PutMultipartDocumentOperation(
                        database: db, id: "mp", document: update,
                        attachments: [
                            AttachmentUpload(name: "dir/note.txt", contentType: "text/plain", data: Data("new".utf8)),
                            AttachmentUpload(
                                name: "more.bin", contentType: "application/x-more", data: Data([0, 0xFF])),
                        ])
                ).rev)
            #expect(rev2.hasPrefix("2-"))
            let after = try await client.value(GetDocumentOperation<CouchDocument<Holder>>(database: db, id: "mp"))
            #expect(after.kind == "updated")
            #expect(after.attachments?["blob.bin"]?.revpos == 1)
            #expect(after.attachments?["dir/note.txt"]?.revpos == 2)
            #expect(
                try await client.value(GetAttachmentOperation(database: db, documentID: "mp", name: "dir/note.txt"))
                    .data == Data("new".utf8))
            #expect(
                try await client.value(GetAttachmentOperation(database: db, documentID: "mp", name: "more.bin")).data
                    == Data([0, 0xFF]))
            #expect(
                try await client.value(GetAttachmentOperation(database: db, documentID: "mp", name: "blob.bin")).data
                    == binary)
        }
    }

    @Test("open_revs as multipart/mixed: every leaf with its binary attachment bytes, and a missing revision")
    func openRevisionsMultipart() async throws {
        try await withDatabase("att-openrevs") { client, db in
            try await writeConflictWithAttachments(client, db, id: "c")
            let all = try await client.value(
                GetOpenRevisionsMultipartOperation(
                    database: db, id: "c", options: DocumentReadOptions(revisions: true, attachments: true)))
            #expect(all.count == 2)
            let byKind = Dictionary(
                try all.map { part in (try part.decode(CouchDocument<Holder>.self).kind, part) },
                uniquingKeysWith: { first, _ in first })
            #expect(Set(byKind.keys) == ["loser", "winner"])
            for (kind, part) in byKind {
                let doc = try part.decode(CouchDocument<Holder>.self)
                #expect(doc.id == "c")
                #expect(doc.revisions?.ids.count == 2)
                #expect(doc.attachments?["blob.bin"]?.follows == true)
                #expect(part.attachments["blob.bin"]?.data == binary + Data(kind.utf8))
                #expect(part.attachments["blob.bin"]?.encoding == nil)
                #expect(part.attachments["note.txt"] != nil)
                #expect(part.missingRevision == nil)
            }

            let listed = try await client.value(
                GetOpenRevisionsMultipartOperation(
                    database: db, id: "c",
                    revisions: .revisions([
                        "2-" + String(repeating: "c", count: 32), "3-" + String(repeating: "f", count: 32),
                    ]),
                    options: DocumentReadOptions(attachments: true)))
            #expect(listed.count == 2)
            #expect(listed.compactMap(\.missingRevision) == ["3-" + String(repeating: "f", count: 32)])
            let winner = try #require(listed.first { $0.missingRevision == nil })
            #expect(try winner.decode(CouchDocument<Holder>.self).kind == "winner")
            #expect(winner.attachments["blob.bin"]?.data == binary + Data("winner".utf8))

            // The JSON form gives the same leaves with base64 data.
            let json = try await client.value(
                GetOpenRevisionsOperation<CouchDocument<Holder>>(
                    database: db, id: "c", options: DocumentReadOptions(attachments: true)))
            #expect(Set(json.compactMap(\.document?.kind)) == ["loser", "winner"])
            #expect(json.compactMap { $0.document?.attachments?["note.txt"]?.data }.count == 2)
        }
    }

    @Test("open_revs multipart as CouchDB sends it: attachments always included, text ones still gzip-encoded")
    func openRevisionsMultipartEncoding() async throws {
        try await withDatabase("att-openrevs-gzip") { client, db in
            try await writeConflictWithAttachments(client, db, id: "c")
            // CouchDB adds attachments, follows and att_encoding_info to every multipart open_revs read.
            let parts = try await client.value(GetOpenRevisionsMultipartOperation(database: db, id: "c"))
            #expect(parts.count == 2)
            for part in parts {
                let doc = try part.decode(CouchDocument<Holder>.self)
                #expect(part.attachments["blob.bin"]?.data == binary + Data(doc.kind.utf8), "\(doc.kind)")
                let note = try #require(part.attachments["note.txt"], "\(doc.kind): note.txt should come as a part")
                #expect(note.encoding == "gzip")
                #expect(note.data.starts(with: [0x1F, 0x8B]))
                #expect(doc.attachments?["note.txt"]?.encoding == "gzip")
                #expect(doc.attachments?["note.txt"]?.encodedLength == note.data.count)
            }
        }
    }
}
