import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// A database's memory (its index of every document, its file) goes when the database goes: once it is deleted, and
/// once its engine is closed and released. An app that opens and closes local stores, or deletes databases, must not
/// keep every index it ever had.
@Suite(.ownThreads) struct EngineLifetimeTests {
    /// Writes a few documents (one with a conflict, one with an attachment) to a new database `name`.
    private func fill(_ engine: ServerEngine, _ name: String) {
        engine.send("PUT", "/\(name)")
        engine.send("POST", "/\(name)/_bulk_docs", json: ["docs": .array((0..<50).map { ["_id": .string("d\($0)")] })])
        engine.send(
            "POST", "/\(name)/_bulk_docs",
            json: ["new_edits": false, "docs": [["_id": "d1", "_rev": "1-ffffffffffffffffffffffffffffffff"]]])
        engine.send("PUT", "/\(name)/a/file", body: Data("bytes".utf8), headers: [("Content-Type", "text/plain")])
        engine.send("GET", "/\(name)/_changes?include_docs=true")
    }

    @Test(arguments: [false, true])
    func aDeletedDatabaseIsFreed(onDisk: Bool) throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let engine = try ServerEngine(options: testOptions(onDisk ? dir : nil))
        defer { engine.close() }
        weak var freed: Database?
        do {
            fill(engine, "db")
            let db = try #require(engine.store.database(named: "db"))
            freed = db
        }
        #expect(engine.send("DELETE", "/db").status == 200)
        #expect(freed == nil, "the deleted database is still held")
    }

    @Test func anEngineClosedAndReleasedFreesItsDatabases() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        weak var freedDatabase: Database?
        weak var freedEngine: CouchEngine?
        do {
            let engine = try ServerEngine(options: testOptions(dir))
            fill(engine, "db")
            let db = try #require(engine.store.database(named: "db"))
            freedDatabase = db
            freedEngine = engine.store
            engine.close()
        }
        #expect(freedEngine == nil, "the closed engine is still held")
        #expect(freedDatabase == nil, "a database of the closed engine is still held")
    }
}
