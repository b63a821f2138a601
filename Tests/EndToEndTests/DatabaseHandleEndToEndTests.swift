import Foundation
import SwiftCouch
import Testing

@Suite("End to end: the database handle")
struct DatabaseHandleEndToEndTests {
    @Test("client.database(name): create, put, get, bulk, allDocs, find, view, changes, attachments, delete")
    func commonCallsByName() async throws {
        let client = E2EEnvironment.shared.client()
        let db = client.database(E2EEnvironment.uniqueDatabaseName("handle"))
        try await db.create()
        do {
            let written = try await db.put(Note(text: "blue", n: 1), id: "blue")
            let rev1 = try #require(written.rev)
            let blue = try await db.get("blue", as: Note.self)
            #expect(blue.text == "blue" && blue._rev == rev1)
            let free = try await db.get("blue", as: JSONValue.self)
            #expect(free["n"] == 1)

            let rows = try await db.bulk([Note(_id: "b1", text: "x", n: 2), Note(_id: "b2", text: "y", n: 3)])
            #expect(rows.count == 2 && rows.allSatisfy { $0.rev != nil })
            try await awaitEveryCopy(client, db.name, id: "blue", rev: rev1)
            do {
                try await db.put(Note(text: "stale", n: 9), id: "blue")
                Issue.record("a write without the revision should conflict")
            } catch {
                #expect(error.isConflict)
            }

            let all = try await converged(
                read: { try await db.allDocs(range: KeyRangeOptions(includeDocs: true)) },
                until: { $0.rows.count == 3 })
            #expect(all.rows.compactMap(\.id) == ["b1", "b2", "blue"])
            var streamed: [String] = []
            for try await row in db.allDocsRows(as: Note.self) { streamed.append(row.id ?? "") }
            #expect(Set(streamed).isSubset(of: ["b1", "b2", "blue"]))

            let found = try await converged(
                read: { try await db.find(Selector.field("n").greaterThanOrEqual(2), as: Note.self) },
                until: { $0.docs.count == 2 })
            #expect(Set(found.docs.map(\.text)) == ["x", "y"])

            let design = DesignDocument(
                name: "by-n", views: ["n": .init(map: "function (doc) { emit(doc.n, doc.text); }")])
            _ = try await client.value(PutDocumentOperation(database: db.name, design: design))
            let view = try await converged(
                read: { try await db.view(design: "by-n", view: "n", keys: Int.self, values: String.self) },
                until: { $0.rows.count == 3 })
            #expect(view.rows.map(\.key) == [1, 2, 3])
            #expect(view.rows.map(\.value) == ["blue", "x", "y"])

            let changes = try await converged(read: { try await db.changes() }, until: { $0.results.count >= 4 })
            #expect(Set(changes.results.map(\.id)).isSuperset(of: ["blue", "b1", "b2", "_design/by-n"]))

            let attached = try await db.putAttachment(
                "note.txt", of: "blue", data: Data("hello".utf8), contentType: "text/plain", revision: rev1)
            let rev2 = try #require(attached.rev)
            let bytes = try await converged(
                read: { try? await db.attachment("note.txt", of: "blue") }, until: { $0 != nil })
            #expect(bytes?.data == Data("hello".utf8))
            #expect(bytes?.contentType?.hasPrefix("text/plain") == true)
            let rev3 = try #require(try await db.deleteAttachment("note.txt", of: "blue", revision: rev2).rev)
            let deleted = try await db.delete("blue", revision: rev3)
            #expect(deleted.ok == true)
            let status = try await convergedStatus(404) { _ = try await db.get("blue", as: JSONValue.self) }
            #expect(status == 404)

            let info = try await db.info()
            #expect(info.dbName == db.name)
        } catch {
            _ = try? await db.delete()
            throw error
        }
        try await db.delete()
        // On a cluster the node asked may answer from what it knew before the deletion reached it.
        let gone = try await converged(
            read: { () async -> Bool? in
                do {
                    _ = try await db.info()
                    return false
                } catch {
                    return (error as? CouchError)?.isNotFound ?? false
                }
            }, until: { $0 == true })
        #expect(gone == true, "a deleted database has no info")
    }

    @Test("A bad database name or document id fails in validate: nothing is sent")
    func validationFirst() async throws {
        let client = E2EEnvironment.shared.client()
        do {
            _ = try await client.database("Bad Name").info()
            Issue.record("an invalid database name should fail")
        } catch {
            #expect(error.kind == .validation)
        }
        do {
            _ = try await client.database("fine").get("_bad", as: JSONValue.self)
            Issue.record("an id starting with _ should fail")
        } catch {
            #expect(error.kind == .validation)
        }
    }
}
