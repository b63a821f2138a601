import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// A TestServer (and `ServerEngine`) without a data directory keeps every database in a file, in a private
/// temporary directory removed when it stops.
@Suite(.ownThreads) struct TestServerStorageDefaultTests {
    @Test func withoutADataDirectoryDatabasesLiveInAPrivateTemporaryDirectory() throws {
        let engine = try ServerEngine(options: testOptions())
        let directory = try #require(engine.storageDirectory)
        #expect(engine.options.dataDirectory == nil)
        #expect(engine.store.options.synchronousWrites == false)
        engine.send("PUT", "/db")
        engine.send("PUT", "/db/doc", json: ["a": 1])
        let db = try #require(engine.store.database(named: "db"))
        #expect(db.withLock { db.file != nil })
        #expect(FileManager.default.fileExists(atPath: DataDirectory(root: directory).fileURL(for: "db").path))
        let other = try ServerEngine(options: testOptions())
        #expect(other.storageDirectory != directory)
        other.close()
        engine.close()
        #expect(!FileManager.default.fileExists(atPath: directory.path))
    }

    @Test func aServerLeftWithoutCloseRemovesItsDirectoryWhenReleased() throws {
        var directory: URL?
        do {
            let engine = try ServerEngine(options: testOptions())
            engine.send("PUT", "/db")
            directory = engine.storageDirectory
        }
        let removed = try #require(directory)
        #expect(!FileManager.default.fileExists(atPath: removed.path))
    }

    @Test func aDataDirectoryIsSynchronousByDefaultAndInMemoryOnlyHasNoFile() throws {
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let kept = try ServerEngine(options: testOptions(dir))
        #expect(kept.storageDirectory == dir)
        #expect(kept.store.options.synchronousWrites)
        kept.close()
        #expect(FileManager.default.fileExists(atPath: dir.path))
        var options = testOptions()
        options.inMemoryOnly = true
        let memory = try ServerEngine(options: options)
        defer { memory.close() }
        #expect(memory.storageDirectory == nil)
        memory.send("PUT", "/db")
        let db = try #require(memory.store.database(named: "db"))
        #expect(db.withLock { db.file == nil })
    }

    @Test func withoutFsyncAnAcknowledgedWriteIsInTheFileBeforeTheAnswer() throws {
        // No close: the second engine reads the file as a process started after a crash of the first would.
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        var options = testOptions(dir)
        options.synchronousWrites = false
        let first = try ServerEngine(options: options)
        #expect(first.store.options.synchronousWrites == false)
        first.send("PUT", "/db")
        #expect(first.send("PUT", "/db/doc", json: ["n": 1]).status == 201)
        first.send("PUT", "/db/doc2/a.txt", body: Data("hello".utf8), headers: [("Content-Type", "text/plain")])
        let second = try ServerEngine(options: options)
        defer { second.close() }
        #expect(second.send("GET", "/db/doc").json["n"] == 1)
        #expect(second.send("GET", "/db/doc2/a.txt").text == "hello")
        withExtendedLifetime(first) {}
    }

    @Test func aTestServerRestartWithoutADataDirectoryStartsEmpty() throws {
        var configuration = TestServer.Configuration(passwordIterations: 10)
        configuration.adminName = "admin"
        let server = try TestServer.start(configuration)
        defer { server.stop() }
        let first = try #require(server.engine.storageDirectory)
        _ = server.engine.send("PUT", "/kept")
        #expect(server.engine.store.databaseNames.contains("kept"))
        try server.restart()
        #expect(!FileManager.default.fileExists(atPath: first.path))
        #expect(server.engine.storageDirectory != first)
        #expect(!server.engine.store.databaseNames.contains("kept"))
    }
}
