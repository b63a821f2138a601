import CouchStore
import Foundation
import HTTPWire
import TestScheduling
import Testing

/// CouchStore's engine used in-process, as an app uses it: no TestServer, no HTTP, no authentication configured. Only
/// public API (no `@testable`).
@Suite(.ownThreads) struct EmbeddedEngineTests {
    /// One request to the engine; the answer's status and body parsed as JSON (nil when empty).
    struct Answer {
        var status: Int
        var body: Any?
        var object: [String: Any] { body as? [String: Any] ?? [:] }
    }

    func send(
        _ engine: CouchEngine, _ method: String, _ path: String, _ json: Any? = nil, user: UserContext = .admin,
        headers extra: [(String, String)] = []
    ) throws -> Answer {
        var headers = HTTPHeaders()
        var body = Data()
        if let json {
            body = try JSONSerialization.data(withJSONObject: json)
            headers.add("Content-Type", "application/json")
        }
        for (name, value) in extra { headers.add(name, value) }
        let parts = path.split(separator: "?", maxSplits: 1).map(String.init)
        let response = engine.handle(
            ServerRequest(
                method: method, rawPath: parts[0], rawQuery: parts.count > 1 ? parts[1] : nil, headers: headers,
                body: body),
            user: user)
        var data = Data()
        switch response.body {
        case .empty: break
        case .data(let bytes): data = bytes
        case .stream(let produce):
            // A streamed answer (a whole _changes feed) comes through a ChunkWriter.
            let collector = Collector()
            produce(collector)
            data = collector.data
        }
        guard !data.isEmpty else { return Answer(status: response.status) }
        return Answer(status: response.status, body: try JSONSerialization.jsonObject(with: data))
    }

    /// Collects a streamed answer.
    final class Collector: ChunkWriter, @unchecked Sendable {
        // @unchecked: written only by the producer running synchronously in `send`.
        var data = Data()
        func write(_ chunk: Data) -> Bool {
            data.append(chunk)
            return true
        }
    }

    @Test("The engine alone serves a database: create, write, read, _changes, _find; a reopened directory keeps it")
    func engineServesADatabaseWithNoServerAround() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("couchstore-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        var options = CouchEngine.Options()
        options.dataDirectory = directory
        let engine = try CouchEngine(options: options)

        #expect(try send(engine, "PUT", "/notes").status == 201)
        let put = try send(engine, "PUT", "/notes/a", ["title": "first", "n": 1])
        #expect(put.status == 201)
        let rev = try #require(put.object["rev"] as? String)
        #expect(rev.hasPrefix("1-"))
        #expect(try send(engine, "POST", "/notes", ["_id": "b", "title": "second", "n": 2]).status == 201)

        let read = try send(engine, "GET", "/notes/a")
        #expect(read.status == 200)
        #expect(read.object["title"] as? String == "first")
        #expect(read.object["_rev"] as? String == rev)

        let changes = try send(engine, "GET", "/notes/_changes")
        #expect(changes.status == 200)
        let ids = (changes.object["results"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
        #expect(ids.sorted() == ["a", "b"])

        let found = try send(engine, "POST", "/notes/_find", ["selector": ["n": ["$gt": 1]]])
        #expect(found.status == 200)
        let docs = found.object["docs"] as? [[String: Any]] ?? []
        #expect(docs.compactMap { $0["_id"] as? String } == ["b"])

        // A single node with no host: `_shards` names no TestServer node, and the server's own endpoints are not
        // the engine's.
        let shards = try send(engine, "GET", "/notes/_shards/a")
        #expect((shards.object["nodes"] as? [String]) == ["nonode@nohost"])
        for path in ["/_session", "/_membership", "/_node/_local/_config", "/_db_updates", "/_scheduler/jobs"] {
            #expect(try send(engine, "GET", path).status == 404, "\(path)")
        }

        engine.close()
        let reopened = try CouchEngine(options: options)
        defer { reopened.close() }
        #expect(try send(reopened, "GET", "/notes/b").object["title"] as? String == "second")
    }

    @Test("Who makes a request is the value passed in, never the request's headers; _security applies to it")
    func theUserIsAValueNotAHeader() throws {
        let engine = try CouchEngine()
        defer { engine.close() }
        let basicAdmin = [("Authorization", "Basic " + Data("admin:password".utf8).base64EncodedString())]
        // Credentials in a header mean nothing to the engine: an anonymous caller stays anonymous.
        let refused = try send(engine, "PUT", "/private", user: .anonymous, headers: basicAdmin)
        #expect(refused.status == 401)
        #expect(refused.object["error"] as? String == "unauthorized")
        #expect(try send(engine, "PUT", "/private").status == 201)
        #expect(try send(engine, "PUT", "/private/doc", ["v": 1]).status == 201)
        let security: [String: Any] = [
            "members": ["names": ["ann"], "roles": []], "admins": ["names": [], "roles": []],
        ]
        #expect(try send(engine, "PUT", "/private/_security", security).status == 200)

        #expect(try send(engine, "GET", "/private/doc", user: UserContext(name: "ann")).status == 200)
        let bob = try send(engine, "GET", "/private/doc", user: UserContext(name: "bob"))
        #expect(bob.status == 403)
        #expect(try send(engine, "GET", "/private/doc", user: .anonymous).status == 401)
        // A member is not a database admin: design documents are refused.
        let ddoc = try send(engine, "PUT", "/private/_design/d", ["views": [:]], user: UserContext(name: "ann"))
        #expect(ddoc.status == 401)
    }

    @Test("CouchStore's sources never import or name the TestServer, and its target does not depend on it")
    func couchStoreDoesNotReferenceTheTestServer() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let sources = root.appendingPathComponent("Sources/CouchStore")
        let files = try #require(FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil))
            .compactMap { $0 as? URL }.filter { $0.pathExtension == "swift" }
        #expect(files.count > 10)
        for file in files {
            let text = try String(contentsOf: file, encoding: .utf8)
            for word in ["CouchTestServer", "ServerEngine", "TestServerFaults"] {
                #expect(!text.contains(word), "\(file.lastPathComponent) names \(word)")
            }
        }
        let manifest = try String(contentsOf: root.appendingPathComponent("Package.swift"), encoding: .utf8)
        let start = try #require(manifest.range(of: "name: \"CouchStore\", dependencies:"))
        let declaration = manifest[start.upperBound...].prefix { $0 != ")" }
        #expect(declaration.contains("CouchQuery"))
        #expect(!declaration.contains("CouchTestServer"))
    }
}
