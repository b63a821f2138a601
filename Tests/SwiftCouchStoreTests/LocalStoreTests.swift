import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchTestSupport
import Testing

@Suite("LocalStore: opening, closing, reopening, the conflict index, compaction")
struct LocalStoreTests {
    @Test("What was written is there after close and reopen: documents, dates, attachments, conflicts")
    func reopen() async throws {
        let directory = LocalStoreFixture.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let added = Date(timeIntervalSince1970: 1_234_567_890)

        let first = try await LocalDatabase.open(at: directory, name: "notes")
        let written = try await first.put(Entry(title: "kept", year: 2009, added: added), id: "kept")
        try await first.putAttachment(
            "a.txt", of: "kept", data: Data("attached".utf8), contentType: "text/plain", revision: written.rev)
        let conflictRevs = try await DocumentStoreTests.makeConflict(first, id: "split")
        #expect(try await first.conflictedDocumentIDs() == ["split"])
        first.close()
        // A closed store answers nothing.
        await #expect(throws: CouchError.self) { _ = try await first.info() }

        let second = try await LocalDatabase.open(at: directory, name: "notes")
        defer { second.close() }
        let kept = try await second.get("kept", as: Entry.self)
        #expect(kept.added == added)
        #expect(kept.title == "kept")
        #expect(try await second.attachment("a.txt", of: "kept").data == Data("attached".utf8))
        // The index of conflicted documents is rebuilt as the log is read back.
        #expect(try await second.conflictedDocumentIDs() == ["split"])
        let leaves = try await second.conflictLeaves(of: "split", as: Merged.self)
        #expect(leaves.map(\.rev) == conflictRevs.reversed())
        #expect(try await second.info().docCount == 2)
    }

    @Test("A download whose attachment chunk is damaged in the file fails; it is never a shorter file")
    func damagedChunkFailsTheDownload() async throws {
        let directory = LocalStoreFixture.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let bytes = randomBytes(3 << 20)
        let first = try await LocalDatabase.open(at: directory, name: "files")
        let written = try await first.put(Entry(title: "big", year: 2026, added: Date()), id: "big")
        try await first.putAttachment(
            "big.bin", of: "big", data: bytes, contentType: "application/octet-stream", revision: written.rev)
        // A later write, so that the damaged group is not the last one (whose chunks are checked on open).
        _ = try await first.put(Entry(title: "later", year: 2026, added: Date()), id: "later")
        first.close()
        let files =
            FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil)?
            .compactMap { $0 as? URL }.filter { $0.pathExtension == "couch" } ?? []
        var damaged = false
        for file in files {
            var content = try Data(contentsOf: file)
            let second = bytes.subdata(in: (1 << 20)..<((1 << 20) + 64))
            guard let range = content.range(of: second) else { continue }
            content[range.lowerBound + 500] ^= 0x55
            try content.write(to: file)
            damaged = true
        }
        #expect(damaged)
        let reopened = try await LocalDatabase.open(at: directory, name: "files")
        defer { reopened.close() }
        let destination = directory.appendingPathComponent("out.bin")
        await #expect(throws: CouchError.self) {
            _ = try await reopened.downloadAttachment("big.bin", of: "big", to: destination)
        }
        #expect(!FileManager.default.fileExists(atPath: destination.path))
    }

    @Test("A directory is opened by one store at a time")
    func exclusive() async throws {
        let directory = LocalStoreFixture.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await LocalStore.open(at: directory)
        do {
            _ = try await LocalStore.open(at: directory)
            Issue.record("a second store opened the same directory")
        } catch {
            #expect(error.kind == .validation)
            #expect(error.message.contains("open already"))
        }
        store.close()
        let again = try await LocalStore.open(at: directory)
        again.close()
    }

    @Test("A store holds several databases; a missing one is 404 unless created")
    func severalDatabases() async throws {
        let directory = LocalStoreFixture.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await LocalStore.open(at: directory)
        defer { store.close() }
        let a = try await store.database("a")
        let b = try await store.database("b")
        try await a.put(Merged(title: "in a"), id: "x")
        await #expect(throws: CouchError.self) { _ = try await b.get("x", as: Merged.self) }
        let names = try await store.databaseNames()
        #expect(names.contains("a") && names.contains("b"))
        do {
            _ = try await store.database("c", create: false)
            Issue.record("a missing database was opened without creating it")
        } catch {
            #expect(error.statusCode == 404)
            #expect(error.error == "not_found")
        }
        await #expect(throws: CouchError.self) { _ = try await store.database("Not A Valid Name") }
        try await store.deleteDatabase("b")
        #expect(try await !store.databaseNames().contains("b"))
        do {
            _ = try await b.conflictedDocumentIDs()
            Issue.record("a deleted database listed conflicts")
        } catch {
            #expect(error.statusCode == 404)
        }
        await #expect(throws: CouchError.self) {
            _ = try await LocalStore.open(at: URL(string: "https://example.com/store")!)
        }
    }

    @Test("Purging a conflicting leaf takes the document out of the conflict index")
    func purge() async throws {
        let directory = LocalStoreFixture.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = try await LocalDatabase.open(at: directory)
        defer { database.close() }
        let revs = try await DocumentStoreTests.makeConflict(database, id: "p")
        #expect(try await database.conflictedDocumentIDs() == ["p"])
        _ = try await database.client.value(PurgeOperation(database: database.name, revisions: ["p": [revs[0]]]))
        #expect(try await database.conflictedDocumentIDs() == ["p"])
        _ = try await database.client.value(PurgeOperation(database: database.name, revisions: ["p": [revs[1]]]))
        #expect(try await database.conflictedDocumentIDs() == [])
        // Deleting the losing leaf of a new conflict does it too.
        let again = try await DocumentStoreTests.makeConflict(database, id: "q")
        try await database.delete("q", revision: again[1])
        try await database.delete("q", revision: again[0])
        #expect(try await database.conflictedDocumentIDs() == [])
        #expect(try await database.get("q", as: CouchDocument<Merged>.self).rev == again[2])
    }

    @Test("Compaction returns once done; the old revision's body is gone, the current one stays")
    func compaction() async throws {
        let directory = LocalStoreFixture.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = try await LocalDatabase.open(at: directory)
        defer { database.close() }
        let first = try await database.put(Merged(title: "one"), id: "doc")
        let oldRev = try #require(first.rev)
        try await database.put(Merged(title: "two"), id: "doc", revision: oldRev)
        #expect(try await database.get("doc", as: Merged.self, revision: oldRev).title == "one")
        try await database.compact()
        #expect(try await database.info().compactRunning != true)
        do {
            _ = try await database.get("doc", as: Merged.self, revision: oldRev)
            Issue.record("a compacted revision was read")
        } catch {
            #expect(error.statusCode == 404)
        }
        #expect(try await database.get("doc", as: Merged.self).title == "two")
    }
}

@Suite("LocalStore: feeds waiting in the engine end on cancellation and on close")
struct LocalFeedTests {
    @Test("Cancelling the task that listens ends the wait at once, and the store still answers")
    func cancelListening() async throws {
        let directory = LocalStoreFixture.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = try await LocalDatabase.open(at: directory)
        defer { database.close() }
        var options = ChangesFollower<JSONValue>.Options(mode: .listen, since: .now)
        options.longPollTimeout = 600_000
        let feed = database.changeFeed(as: JSONValue.self, options: options)
        let listener = Task {
            var count = 0
            for try await _ in feed { count += 1 }
            return count
        }
        try await Task.sleep(nanoseconds: 100_000_000)
        let started = Date()
        listener.cancel()
        _ = try? await listener.value
        // A generous bound: the long-poll would have waited ten minutes.
        #expect(Date().timeIntervalSince(started) < 30)
        try await database.put(Merged(title: "after"), id: "after")
        #expect(try await database.info().docCount == 1)
    }

    @Test("Closing the store ends a listening feed with an error")
    func closeEndsFeed() async throws {
        let directory = LocalStoreFixture.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = try await LocalDatabase.open(at: directory)
        var options = ChangesFollower<JSONValue>.Options(mode: .listen, since: .now)
        options.longPollTimeout = 600_000
        options.continuous = true
        let feed = database.changeFeed(as: JSONValue.self, options: options)
        let listener = Task { () -> Bool in
            do {
                for try await _ in feed {}
                return false
            } catch {
                return true
            }
        }
        try await Task.sleep(nanoseconds: 100_000_000)
        let started = Date()
        database.close()
        #expect(await listener.value)
        #expect(Date().timeIntervalSince(started) < 30)
    }
}
