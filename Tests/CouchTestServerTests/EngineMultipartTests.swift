import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

@Suite(.ownThreads) struct EngineMultipartTests {
    @Test func multipartRelatedUploadAndOpenRevsWithAttachments() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        let bytes = Data([0, 1, 2, 255, 13, 10, 45, 45])
        let doc: JSON = [
            "kind": "m",
            "_attachments": ["a.bin": ["content_type": "application/octet-stream", "length": 8, "follows": true]],
        ]
        var body = Data("--B1\r\nContent-Type: application/json\r\n\r\n".utf8) + doc.data
        body += Data("\r\n--B1\r\nContent-Disposition: attachment; filename=\"a.bin\"\r\n\r\n".utf8) + bytes
        body += Data("\r\n--B1--".utf8)
        let put = engine.send(
            "PUT", "/db/m", body: body, headers: [("Content-Type", "multipart/related; boundary=\"B1\"")])
        #expect(put.status == 201)
        #expect(engine.send("GET", "/db/m/a.bin").data == bytes)

        let reply = engine.send("GET", "/db/m?open_revs=all&attachments=true", headers: [("Accept", "multipart/mixed")])
        let outer = try #require(MIME.boundary(reply.headers["Content-Type"]))
        let parts = try #require(MIME.parse(reply.data, boundary: outer))
        #expect(parts.count == 1)
        let inner = try #require(MIME.boundary(parts[0].headers["Content-Type"]))
        let innerParts = try #require(MIME.parse(parts[0].body, boundary: inner))
        #expect(innerParts.count == 2)
        #expect((try? JSON.parse(innerParts[0].body))?["_attachments"]?["a.bin"]?["follows"] == true)
        #expect(innerParts[1].body == bytes)
    }
}
