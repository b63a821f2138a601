import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchTestSupport
import Testing

/// Where a ``DocumentStore`` test runs: a local database (SwiftCouchStore, in process) or a
/// database of a TestServer reached over HTTP (``CouchDBClient/database(_:)``). Every test of
/// `DocumentStoreTests` is one generic function run against both.
enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case local
    case remote

    var testDescription: String { rawValue }

    /// The TestServer the remote runs share.
    static let server: TestServer = {
        do {
            return try TestServer.start()
        } catch {
            fatalError("Could not start the TestServer: \(error)")
        }
    }()

    /// Runs `body` with a fresh, empty database of this backend, and removes it afterwards.
    func run(_ body: (any DocumentStore) async throws -> Void) async throws {
        switch self {
        case .local:
            let directory = LocalStoreFixture.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: directory) }
            let database = try await LocalDatabase.open(at: directory, name: "tests")
            defer { database.close() }
            try await body(database)
        case .remote:
            let server = Self.server
            let client = server.adminClient()
            defer { client.shutdown() }
            let database = client.database("store-\(UUID().uuidString.lowercased().prefix(12))")
            try await database.create()
            do {
                try await body(database)
            } catch {
                _ = try? await database.delete()
                throw error
            }
            try await database.delete()
        }
    }
}

enum LocalStoreFixture {
    /// A new directory path under the temporary directory (not created).
    static func temporaryDirectory() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent(
            "swiftcouchstore-\(UUID().uuidString)", isDirectory: true)
    }
}

/// A document type with a date, to check the date coding both ways.
struct Entry: Codable, Sendable, Equatable {
    var _id: String?
    var _rev: String?
    var title: String
    var year: Int
    var added: Date
}

/// The merged body of a conflict resolution.
struct Merged: Codable, Sendable, Equatable {
    var title: String
}

@Suite("DocumentStore: the same calls on a local database and a remote one")
struct DocumentStoreTests {
    static let added = Date(timeIntervalSince1970: 1_700_000_000)

    @Test("Codable documents with dates: put, get, update, delete, create", arguments: Backend.allCases)
    func documents(_ backend: Backend) async throws {
        try await backend.run { try await Self.documents($0) }
    }

    static func documents(_ store: some DocumentStore) async throws {
        let written = try await store.put(Entry(title: "Blue", year: 1971, added: added), id: "blue")
        let rev = try #require(written.rev)
        var blue = try await store.get("blue", as: Entry.self)
        #expect(blue.added == added)
        #expect(blue._rev == rev)
        #expect(blue.title == "Blue")
        // The date went over the wire as SwiftCouch's default ISO 8601 text.
        let raw = try await store.get("blue", as: JSONValue.self)
        #expect(raw["added"] == "2023-11-14T22:13:20Z")

        blue.year = 1972
        let updated = try await store.put(blue, id: "blue", revision: rev)
        #expect(updated.rev?.hasPrefix("2-") == true)
        let old = try await store.get("blue", as: Entry.self, revision: rev)
        #expect(old.year == 1971)

        let created = try await store.create(Entry(title: "Hejira", year: 1976, added: added))
        #expect(!created.id.isEmpty)
        #expect(try await store.get(created.id, as: Entry.self).title == "Hejira")

        try await store.delete("blue", revision: try #require(updated.rev))
        await #expect(throws: CouchError.self) { _ = try await store.get("blue", as: Entry.self) }
        #expect(try await store.info().docCount == 1)
    }

    @Test(
        "Errors are CouchErrors: 404 not_found, 409 conflict, invalid ids refused before sending",
        arguments: Backend.allCases)
    func errors(_ backend: Backend) async throws {
        try await backend.run { try await Self.errors($0) }
    }

    static func errors(_ store: some DocumentStore) async throws {
        do {
            _ = try await store.get("nothing", as: Entry.self)
            Issue.record("a missing document was read")
        } catch {
            #expect(error.kind == .http)
            #expect(error.statusCode == 404)
            #expect(error.error == "not_found")
            #expect(error.reason == "missing")
        }
        let first = try #require(try await store.put(Entry(title: "A", year: 1, added: added), id: "a").rev)
        try await store.put(Entry(title: "B", year: 2, added: added), id: "a", revision: first)
        do {
            try await store.put(Entry(title: "C", year: 3, added: added), id: "a", revision: first)
            Issue.record("a stale revision was accepted")
        } catch {
            #expect(error.statusCode == 409)
            #expect(error.isConflict)
            #expect(error.error == "conflict")
            #expect(error.reason == "Document update conflict.")
        }
        for bad in ["", "_reserved", "_design/"] {
            do {
                try await store.put(Entry(title: "bad", year: 0, added: added), id: bad)
                Issue.record("the id '\(bad)' was accepted")
            } catch {
                #expect(error.kind == .validation, "'\(bad)': \(error)")
                #expect(error.statusCode == nil)
            }
        }
        do {
            _ = try await store.get("a", as: Entry.self, revision: "not a revision")
            Issue.record("an invalid revision was accepted")
        } catch {
            #expect(error.kind == .validation)
        }
        #expect(try await store.info().docCount == 1)
    }

    @Test("Bulk writes, _all_docs, a Mango query and a JavaScript view", arguments: Backend.allCases)
    func queries(_ backend: Backend) async throws {
        try await backend.run { try await Self.queries($0) }
    }

    static func queries(_ store: some DocumentStore) async throws {
        let entries = [("blue", 1971), ("court", 1974), ("hejira", 1976), ("mingus", 1979), ("clouds", 1969)].map {
            Entry(_id: $0.0, title: $0.0.capitalized, year: $0.1, added: added)
        }
        let results = try await store.bulk(entries)
        #expect(results.count == 5)
        #expect(results.allSatisfy { if case .success = $0 { return true } else { return false } })
        // A second write of the same ids conflicts row by row, without throwing.
        let again = try await store.bulk(entries)
        #expect(
            again.allSatisfy { if case .failure(let e) = $0 { return e.error == "conflict" } else { return false } })

        var range = KeyRangeOptions()
        range.includeDocs = true
        let all = try await store.allDocs(as: Entry.self, range: range)
        #expect(all.rows.map(\.id) == ["blue", "clouds", "court", "hejira", "mingus"])
        #expect(all.rows.first?.doc?.added == added)

        _ = try await store.client.value(
            CreateIndexOperation(database: store.name, index: .json(fields: ["year"]), name: "by-year"))
        let seventies = try await store.find(
            MangoQuery(selector: Selector.field("year").greaterThanOrEqual(1970), sort: ["year"]), as: Entry.self)
        #expect(seventies.docs.map(\.title) == ["Blue", "Court", "Hejira", "Mingus"])

        let design: JSONValue = [
            "views": [
                "by_year": [
                    "map": "function (doc) { if (doc.year > 1972) { emit(doc.year, doc.title); } }",
                    "reduce": "_count",
                ]
            ]
        ]
        try await store.put(design, id: "_design/entries")
        var query = ViewQueryOptions()
        query.reduce = false
        let view = try await store.view(
            design: "entries", view: "by_year", keys: Int.self, values: String.self, query: query)
        #expect(view.rows.map(\.key) == [1974, 1976, 1979])
        #expect(view.rows.map(\.value) == ["Court", "Hejira", "Mingus"])
        let count = try await store.view(design: "entries", view: "by_year", keys: JSONValue.self, values: Int.self)
        #expect(count.rows.first?.value == 3)
    }

    @Test(
        "_all_docs streamed row by row, in order, to a consumer slower than the transfer", arguments: Backend.allCases)
    func streamedRows(_ backend: Backend) async throws {
        try await backend.run { try await Self.streamedRows($0) }
    }

    static func streamedRows(_ store: some DocumentStore) async throws {
        let documents = (0..<3_000).map {
            Entry(_id: String(format: "row-%05d", $0), title: "t", year: $0, added: added)
        }
        let written = try await store.bulk(documents)
        #expect(written.count == 3_000)
        var range = KeyRangeOptions()
        range.includeDocs = true
        var years: [Int] = []
        for try await row in store.allDocsRows(as: Entry.self, range: range) {
            if let year = row.doc?.year { years.append(year) }
            // Slower than the transfer: the stream's buffer fills, and the transfer is paused.
            if years.count % 500 == 0 { try await Task.sleep(nanoseconds: 5_000_000) }
        }
        #expect(years == Array(0..<3_000))
    }

    @Test("The changes feed is an AsyncSequence that sees a later write", arguments: Backend.allCases)
    func changes(_ backend: Backend) async throws {
        try await backend.run { try await Self.changes($0) }
    }

    static func changes(_ store: some DocumentStore) async throws {
        try await store.put(Entry(title: "Before", year: 1, added: added), id: "before")
        let batch = try await store.changes()
        #expect(batch.results.map(\.id) == ["before"])

        var options = ChangesFollower<Entry>.Options(mode: .listen, since: batch.lastSeq, includeDocs: true)
        options.longPollTimeout = 60_000
        let feed = store.changeFeed(as: Entry.self, options: options)
        // The write comes after the feed has started waiting (or before its first request: either
        // way it is after `since`).
        let writer = Task {
            try await Task.sleep(nanoseconds: 50_000_000)
            try await store.put(Entry(title: "Later", year: 2, added: added), id: "later")
        }
        var seen: [String] = []
        for try await change in feed {
            seen.append(change.id)
            #expect(change.doc?.title == "Later")
            #expect(change.doc?.added == added)
            break
        }
        try await writer.value
        #expect(seen == ["later"])

        let finite = store.changeFeed(as: JSONValue.self, options: .init(mode: .finite))
        var ids: [String] = []
        for try await change in finite { ids.append(change.id) }
        #expect(ids == ["before", "later"])
    }

    @Test(
        "Conflicts made with new_edits=false: listed, leaves read, resolved by keeping a leaf and by a merge",
        arguments: Backend.allCases)
    func conflicts(_ backend: Backend) async throws {
        try await backend.run { try await Self.conflicts($0) }
    }

    /// Writes three sibling leaves of `id` (generation 1) as a replicator would.
    static func makeConflict(_ store: some DocumentStore, id: String) async throws -> [String] {
        let revs = [
            "1-" + String(repeating: "a", count: 32), "1-" + String(repeating: "b", count: 32),
            "1-" + String(repeating: "c", count: 32),
        ]
        let docs = revs.enumerated().map { index, rev in
            CouchDocument(id: id, rev: rev, body: Merged(title: "leaf \(index)"))
        }
        _ = try await store.client.value(BulkDocsOperation(database: store.name, documents: docs, newEdits: false))
        return revs
    }

    static func conflicts(_ store: some DocumentStore) async throws {
        try await store.put(Merged(title: "plain"), id: "plain")
        #expect(try await store.conflictedDocumentIDs() == [])
        let keepRevs = try await makeConflict(store, id: "keep")
        let mergeRevs = try await makeConflict(store, id: "merge")
        #expect(try await store.conflictedDocumentIDs() == ["keep", "merge"])

        // The leaves, the winner first (the greatest hash), then the rest in CouchDB's order.
        let leaves = try await store.conflictLeaves(of: "keep", as: Merged.self)
        #expect(leaves.map(\.rev) == keepRevs.reversed())
        #expect(leaves.map(\.body.title) == ["leaf 2", "leaf 1", "leaf 0"])
        #expect(try await store.conflictLeaves(of: "plain", as: Merged.self).count == 1)

        // Keeping a losing leaf: it becomes the winner, the others are deleted.
        let kept = try await store.resolveConflicts(of: "keep", keeping: keepRevs[0])
        #expect(kept.rev == keepRevs[0])
        let keep = try await store.get("keep", as: CouchDocument<Merged>.self)
        #expect(keep.rev == keepRevs[0])
        #expect(keep.body.title == "leaf 0")
        #expect(try await store.conflictedDocumentIDs() == ["merge"])
        // A revision that is not a live leaf any more is refused before anything is written.
        do {
            try await store.resolveConflicts(of: "keep", keeping: keepRevs[1])
            Issue.record("a deleted leaf was kept")
        } catch {
            #expect(error.kind == .validation)
        }

        // A merge: a new revision on the winner, every other leaf deleted, in one _bulk_docs.
        let merged = try await store.resolveConflicts(of: "merge", merged: Merged(title: "merged"))
        #expect(merged.rev?.hasPrefix("2-") == true)
        let doc = try await store.get(
            "merge", as: CouchDocument<Merged>.self, revision: nil,
            options: CallOptions())
        #expect(doc.body.title == "merged")
        #expect(doc.rev == merged.rev)
        #expect(try await store.conflictLeaves(of: "merge", as: Merged.self).count == 1)
        #expect(try await store.conflictedDocumentIDs() == [])
        _ = mergeRevs
    }

    @Test("An attachment from a file and back to a file", arguments: Backend.allCases)
    func attachmentFiles(_ backend: Backend) async throws {
        try await backend.run { try await Self.attachmentFiles($0) }
    }

    static func attachmentFiles(_ store: some DocumentStore) async throws {
        let directory = LocalStoreFixture.temporaryDirectory()
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let bytes = randomBytes(700_000)
        let source = directory.appendingPathComponent("cover.bin")
        try bytes.write(to: source)

        let written = try await store.put(Merged(title: "with a cover"), id: "album")
        let uploaded = try await store.uploadAttachment(
            "cover.bin", of: "album", from: source, contentType: "application/octet-stream", revision: written.rev)
        #expect(uploaded.rev?.hasPrefix("2-") == true)

        let destination = directory.appendingPathComponent("copy.bin")
        let download = try await store.downloadAttachment("cover.bin", of: "album", to: destination)
        #expect(download.length == Int64(bytes.count))
        #expect(download.contentType == "application/octet-stream")
        #expect(try Data(contentsOf: destination) == bytes)
        #expect(try await store.attachment("cover.bin", of: "album").data == bytes)

        do {
            try await store.downloadAttachment("missing.bin", of: "album", to: directory.appendingPathComponent("x"))
            Issue.record("a missing attachment was downloaded")
        } catch {
            #expect(error.statusCode == 404)
        }
    }

    @Test("100 tasks writing at once: every write lands", arguments: Backend.allCases)
    func concurrentWrites(_ backend: Backend) async throws {
        try await backend.run { try await Self.concurrentWrites($0) }
    }

    static func concurrentWrites(_ store: some DocumentStore) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<100 {
                group.addTask {
                    try await store.put(Entry(title: "n\(index)", year: index, added: added), id: "doc-\(index)")
                    // And one contended document: each task updates it until its write wins.
                    while true {
                        let current = try? await store.get("counter", as: JSONValue.self)
                        let count = current?["count"]?.intValue ?? 0
                        do {
                            try await store.put(
                                ["count": .int(count + 1)] as JSONValue, id: "counter",
                                revision: current?["_rev"]?.stringValue)
                            return
                        } catch let error as CouchError {
                            if !error.isConflict { throw error }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(try await store.info().docCount == 101)
        #expect(try await store.get("counter", as: JSONValue.self)["count"]?.intValue == 100)
    }
}
