import Foundation
import SwiftCouch
import SwiftCouchStore
import Testing

/// The engine's streamed row answers reach an app through the in-process transport: whole (`allDocs`, `find`,
/// `changes`) and as row streams, over more rows than one batch; and a body cut short is an error, never rows.
@Suite("LocalDatabase: streamed answers through the in-process transport")
struct StreamedLocalRowsTests {
    struct Numbered: Codable, Sendable {
        var _id: String?
        var n: Int
        var text: String
    }

    func documents(_ count: Int) -> [Numbered] {
        (0..<count).map { Numbered(_id: String(format: "n%05d", $0), n: $0, text: "document \($0) of the local rows") }
    }

    @Test("2,500 documents: allDocs, allDocsRows, find and changes with a limit answer every row in order")
    func manyRowsInBatches() async throws {
        let directory = LocalStoreFixture.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = try await LocalDatabase.open(at: directory)
        defer { database.close() }
        _ = try await database.bulk(documents(2_500))
        var range = KeyRangeOptions()
        range.includeDocs = true
        let whole = try await database.allDocs(as: Numbered.self, range: range)
        #expect(whole.rows.count == 2_500)
        #expect(whole.rows.enumerated().allSatisfy { $0.element.doc?.n == $0.offset })
        var streamed = 0
        for try await row in database.allDocsRows(as: Numbered.self, range: range) {
            if row.doc?.n != streamed { Issue.record("row \(streamed) is \(String(describing: row.doc?.n))") }
            streamed += 1
        }
        #expect(streamed == 2_500)
        let found = try await database.find(
            MangoQuery(selector: Selector.field("n").greaterThanOrEqual(1_000), limit: 1_400), as: Numbered.self)
        #expect(found.docs.count == 1_400)
        let changes = try await database.changes(limit: 2_100, includeDocs: true, as: Numbered.self)
        #expect(changes.results.count == 2_100)
        #expect(changes.pending == 400)
    }
    @Test("A stored document that cannot be read once the answer has begun fails the call; it never looks complete")
    func aBodyCutShortIsAnError() async throws {
        let directory = LocalStoreFixture.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        var damaged = 0
        do {
            let database = try await LocalDatabase.open(at: directory)
            _ = try await database.bulk(documents(2_500))
            // The feed interleaves shards: the 1,500th change is in the answer's second batch.
            let changes = try await database.changes(limit: 1_500, as: JSONValue.self)
            let last = try #require(changes.results.last?.id)
            damaged = try #require(Int(last.dropFirst()))
            database.close()
        }
        let marker = Data("document \(damaged) of the local rows".utf8)
        let files = (FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil)?.allObjects ?? [])
            .compactMap { $0 as? URL }
        let file = try #require(files.first { (try? Data(contentsOf: $0))?.range(of: marker) != nil })
        var bytes = try Data(contentsOf: file)
        bytes[try #require(bytes.range(of: marker)).lowerBound] ^= 0xFF
        try bytes.write(to: file)
        let database = try await LocalDatabase.open(at: directory)
        defer { database.close() }
        do {
            let changes = try await database.changes(limit: 2_000, includeDocs: true, as: Numbered.self)
            Issue.record("a feed cut short was taken as whole: \(changes.results.count) rows")
        } catch {
            #expect("\(error)".contains("cut short"), "\(error)")
        }
    }
}
