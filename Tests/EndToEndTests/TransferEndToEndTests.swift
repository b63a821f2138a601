import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import Testing

@Suite("End to end: attachments through files and streams, with progress")
struct TransferEndToEndTests {
    static func temporaryFile(_ name: String) -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("swiftcouch-\(UUID().uuidString)-\(name)")
    }

    @Test("A text attachment downloads as stored, gzip-encoded, when asked to keep the encoding; decoded otherwise")
    func downloadKeepingTheEncoding() async throws {
        try await withDatabase("encoded") { client, db in
            let text = Data(String(repeating: "a line of text that compresses well\n", count: 4_000).utf8)
            _ = try await client.value(
                UploadAttachmentOperation(
                    database: db, documentID: "doc", name: "notes.txt", revision: nil, contentType: "text/plain",
                    body: .stream(InputStream(data: text), length: Int64(text.count))))
            var read = GetDocumentOperation<JSONValue>(database: db, id: "doc")
            read.options.attachmentEncodingInfo = true
            let stub = try await client.value(read)["_attachments"]?["notes.txt"]
            let encoded = Self.temporaryFile("encoded.gz")
            let decoded = Self.temporaryFile("decoded.txt")
            defer {
                try? FileManager.default.removeItem(at: encoded)
                try? FileManager.default.removeItem(at: decoded)
            }
            let kept = try await client.download(
                GetAttachmentOperation(database: db, documentID: "doc", name: "notes.txt"), to: encoded,
                options: DownloadOptions(keepsContentEncoding: true)
            ).value
            #expect(kept.contentEncoding == "gzip")
            #expect(stub?["encoding"] == "gzip" && stub?["encoded_length"] == .int(kept.length))
            #expect(try stub?["digest"] == .string("md5-" + md5Base64(of: encoded)), "the stored bytes, digest and all")
            #expect(try Data(contentsOf: encoded).prefix(2) == Data([0x1f, 0x8b]))
            let plain = try await client.download(
                GetAttachmentOperation(database: db, documentID: "doc", name: "notes.txt"), to: decoded
            ).value
            #expect(plain.contentEncoding == nil)
            #expect(try Data(contentsOf: decoded) == text)
        }
    }

    @Test("An 8 MiB binary attachment uploads from a file and downloads to a file, byte for byte, with progress")
    func fileRoundTrip() async throws {
        try await withDatabase("files") { client, db in
            let source = Self.temporaryFile("source.bin")
            let target = Self.temporaryFile("target.bin")
            defer {
                try? FileManager.default.removeItem(at: source)
                try? FileManager.default.removeItem(at: target)
            }
            // 8 MiB of binary data: random 64-bit words, built quickly even in a debug build.
            var words = [UInt64](repeating: 0, count: 1 << 20)
            var generator = SystemRandomNumberGenerator()
            for index in words.indices { words[index] = generator.next() }
            let bytes = words.withUnsafeBytes { Data($0) }
            try bytes.write(to: source)

            let upload = client.upload(
                UploadAttachmentOperation(
                    database: db, documentID: "media/1", name: "blob/part.bin", revision: nil,
                    contentType: "application/octet-stream", body: try .file(source)))
            let events = Task { await upload.progressEvents.reduce(into: [TransferProgress]()) { $0.append($1) } }
            let written = try await upload.value
            #expect(written.rev?.hasPrefix("1-") == true)
            let uploadEvents = await events.value
            #expect(uploadEvents.last?.completedBytes == Int64(bytes.count))
            #expect(upload.progress.completedUnitCount == Int64(bytes.count))

            let download = client.download(
                GetAttachmentOperation(database: db, documentID: "media/1", name: "blob/part.bin"), to: target)
            let downloadEvents = Task { await download.progressEvents.reduce(into: 0) { count, _ in count += 1 } }
            let result = try await download.value
            #expect(result.length == Int64(bytes.count))
            #expect(result.contentType == "application/octet-stream")
            #expect(try Data(contentsOf: target) == bytes)
            #expect(await downloadEvents.value >= 1)
            #expect(download.progress.completedUnitCount == Int64(bytes.count))
        }
    }

    @Test("A missing attachment downloads as a 404 CouchError and writes nothing useful")
    func missingDownload() async throws {
        try await withDatabase("missing") { client, db in
            let target = Self.temporaryFile("none.bin")
            defer { try? FileManager.default.removeItem(at: target) }
            do {
                _ = try await client.download(
                    GetAttachmentOperation(database: db, documentID: "nope", name: "a.txt"), to: target
                ).value
                Issue.record("expected a 404")
            } catch let error as CouchError {
                #expect(error.statusCode == 404)
                #expect(error.error == "not_found")
            }
        }
    }

    @Test("Upload from an InputStream; after a 429 a file body is resent, a one-shot stream is refused clearly")
    func retriesAndStreams() async throws {
        try await withPrivateTestServer(for: "upload retries") { server, client in
            try await client.execute(CreateDatabaseOperation(name: "uploads"))
            let payload = Data(repeating: 0x61, count: 100_000)
            let stream = InputStream(data: payload)
            let fromStream = try await client.upload(
                UploadAttachmentOperation(
                    database: "uploads", documentID: "s", name: "a.txt", revision: nil, contentType: "text/plain",
                    body: .stream(stream, length: Int64(payload.count)))
            ).value
            #expect(fromStream.rev?.hasPrefix("1-") == true)

            let file = Self.temporaryFile("retry.txt")
            defer { try? FileManager.default.removeItem(at: file) }
            try payload.write(to: file)
            _ = server.faults.failNext(2, with: .tooManyRequests(retryAfter: nil), matching: .pathPrefix("/uploads/f/"))
            let fromFile = try await client.upload(
                UploadAttachmentOperation(
                    database: "uploads", documentID: "f", name: "a.txt", revision: nil, contentType: "text/plain",
                    body: try .file(file))
            ).value
            #expect(fromFile.rev?.hasPrefix("1-") == true)
            #expect(server.requestCount(pathPrefix: "/uploads/f/", method: "PUT") == 3)

            _ = server.faults.failNext(1, with: .tooManyRequests(retryAfter: nil), matching: .pathPrefix("/uploads/g/"))
            do {
                _ = try await client.upload(
                    UploadAttachmentOperation(
                        database: "uploads", documentID: "g", name: "a.txt", revision: nil,
                        contentType: "text/plain",
                        body: .stream(InputStream(data: payload), length: Int64(payload.count)))
                ).value
                Issue.record("a one-shot stream must not be retried")
            } catch let error as CouchError {
                #expect(error.message.contains("InputStream"))
                #expect(server.requestCount(pathPrefix: "/uploads/g/", method: "PUT") == 1)
            }
        }
    }
}
