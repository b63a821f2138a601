import Foundation
import SwiftCouch
import Testing

@Suite("End to end: database maintenance")
struct DatabasesEndToEndTests {
    @Test("HEAD /{db}: true for an existing database, false for a missing one")
    func exists() async throws {
        try await withDatabase("exists") { client, db in
            let exists = try await client.value(DatabaseExistsOperation(name: db))
            #expect(exists)
            let missing = try await client.value(DatabaseExistsOperation(name: db + "-missing"))
            #expect(!missing)
        }
    }

    @Test("_compact (database and design document), _view_cleanup, _ensure_full_commit")
    func compactionAndCommit() async throws {
        try await withDatabase("compact") { client, db in
            try await writeNotes(client: client, db: db, ids: ["a", "b", "c"])
            let design = DesignDocument(name: "v", views: ["all": .init(map: "function(doc) { emit(doc._id, null); }")])
            _ = try await client.value(PutDocumentOperation(database: db, design: design))
            #expect(try await client.value(CompactDatabaseOperation(database: db)).ok)
            #expect(try await client.value(CompactDatabaseOperation(database: db, designDocument: "v")).ok)
            #expect(try await client.value(CompactDatabaseOperation(database: db, designDocument: "_design/v")).ok)
            #expect(try await client.value(ViewCleanupOperation(database: db)).ok)
            let commit = try await client.value(EnsureFullCommitOperation(database: db))
            #expect(commit.ok)
            #expect(commit.instanceStartTime != nil)
            // A cluster's counts come from one copy of each shard: they converge.
            let info = try await converged(
                read: { try await client.value(GetDatabaseInfoOperation(name: db)) }, until: { $0.docCount == 4 })
            #expect(info.docCount == 4)
            do {
                _ = try await client.execute(CompactDatabaseOperation(database: db + "-missing"))
                Issue.record("compacting a missing database should fail")
            } catch let error as CouchError {
                #expect(error.statusCode == 404)
            }
        }
    }

    @Test("_revs_limit and _purged_infos_limit: read the defaults, set, read back")
    func limits() async throws {
        try await withDatabase("limits") { client, db in
            #expect(try await client.value(GetDatabaseLimitOperation(database: db, limit: .revisions)) == 1000)
            #expect(try await client.value(SetDatabaseLimitOperation(database: db, limit: .revisions, value: 5)).ok)
            #expect(try await client.value(GetDatabaseLimitOperation(database: db, limit: .revisions)) == 5)

            #expect(try await client.value(GetDatabaseLimitOperation(database: db, limit: .purgedInfos)) == 1000)
            #expect(
                try await client.value(SetDatabaseLimitOperation(database: db, limit: .purgedInfos, value: 200)).ok)
            #expect(try await client.value(GetDatabaseLimitOperation(database: db, limit: .purgedInfos)) == 200)

            do {
                _ = try await client.execute(SetDatabaseLimitOperation(database: db, limit: .revisions, value: 0))
                Issue.record("0 should be refused before sending")
            } catch let error as CouchError {
                #expect(error.kind == .validation)
            }
        }
    }

    @Test("_revs_diff and _missing_revs: missing revisions and possible ancestors")
    func revisionDifferences() async throws {
        try await withDatabase("revsdiff") { client, db in
            let rev1 = try #require(
                try await client.value(PutDocumentOperation(database: db, id: "d", document: Note(text: "1", n: 1))).rev
            )
            let rev2 = try #require(
                try await client.value(
                    PutDocumentOperation(database: db, id: "d", document: Note(text: "2", n: 2), revision: rev1)
                ).rev)
            let future = "3-" + String(repeating: "a", count: 32)
            let unknown = "1-" + String(repeating: "b", count: 32)
            // On a cluster, a copy that has not seen rev2 yet would report it missing.
            try await awaitEveryCopy(client, db, id: "d", rev: rev2)

            let diff = try await client.value(
                RevsDiffOperation(database: db, revisions: ["d": [rev1, rev2, future], "nope": [unknown]]))
            #expect(diff["d"]?.missing == [future])
            #expect(diff["d"]?.possibleAncestors == [rev2])
            #expect(diff["nope"]?.missing == [unknown])
            #expect(diff["nope"]?.possibleAncestors == nil)

            let none = try await client.value(RevsDiffOperation(database: db, revisions: ["d": [rev2]]))
            #expect(none.isEmpty)

            let missing = try await client.value(
                MissingRevsOperation(database: db, revisions: ["d": [rev2, future], "nope": [unknown]]))
            #expect(missing.missingRevs["d"] == [future])
            #expect(missing.missingRevs["nope"] == [unknown])
            let nothing = try await client.value(MissingRevsOperation(database: db, revisions: ["d": [rev1, rev2]]))
            #expect(nothing.missingRevs.isEmpty)
        }
    }

    @Test("_purge removes a document completely; the purge sequence moves")
    func purge() async throws {
        try await withDatabase("purge") { client, db in
            let keep = try await client.value(
                PutDocumentOperation(database: db, id: "keep", document: Note(text: "k", n: 0)))
            #expect(keep.ok == true)
            let doomed = try #require(
                try await client.value(
                    PutDocumentOperation(database: db, id: "doomed", document: Note(text: "d", n: 1))
                )
                .rev)
            // A cluster copy that gets the document only after the purge would keep it: purge
            // once every copy has it.
            try await awaitEveryCopy(client, db, id: "doomed", rev: doomed)
            try await awaitEveryCopy(client, db, id: "keep", rev: try #require(keep.rev))
            let before = try await client.value(GetDatabaseInfoOperation(name: db))
            let purged = try await client.value(PurgeOperation(database: db, revisions: ["doomed": [doomed]]))
            #expect(purged.purged == ["doomed": [doomed]])
            // On a cluster the purge reaches every copy soon, not at once (a read may find one
            // that still has the document).
            let gone = try await converged(
                read: { () async -> Int? in
                    do {
                        _ = try await client.execute(GetJSONDocumentOperation(database: db, id: "doomed"))
                        return 200
                    } catch let error as CouchError {
                        return error.statusCode
                    } catch {
                        return nil
                    }
                }, until: { $0 == 404 })
            #expect(gone == 404, "a purged document should be gone")
            let after = try await converged(
                read: { try await client.value(GetDatabaseInfoOperation(name: db)) },
                until: { $0.docCount == 1 && $0.purgeSeq != before.purgeSeq })
            #expect(after.docCount == 1)
            #expect(after.docDelCount == 0)
            #expect(after.purgeSeq != before.purgeSeq)
            // Purging an unknown revision purges nothing.
            let unknown = "1-" + String(repeating: "c", count: 32)
            let nothing = try await client.value(PurgeOperation(database: db, revisions: ["keep": [unknown]]))
            #expect(nothing.purged["keep"] ?? [] == [])
        }
    }

    @Test("_shards: the database's ranges and nodes; the range of one document")
    func shards() async throws {
        let client = E2EEnvironment.shared.client()
        let name = E2EEnvironment.uniqueDatabaseName("shards")
        _ = try await client.execute(CreateDatabaseOperation(name: name, shards: 1))
        do {
            let membership = try await client.value(GetMembershipOperation())
            let shards = try await client.value(GetShardsOperation(database: name))
            #expect(shards.shards.count == 1, "q=1 means one range, got \(shards.shards)")
            #expect(Array(shards.shards.keys) == ["00000000-ffffffff"])
            #expect(
                shards.shards.values.allSatisfy { !$0.isEmpty && Set($0).isSubset(of: Set(membership.allNodes)) })
            let shard = try await client.value(GetDocumentShardOperation(database: name, documentID: "some-doc"))
            #expect(shard.range == "00000000-ffffffff")
            #expect(!shard.nodes.isEmpty)
        } catch {
            _ = try? await client.execute(DeleteDatabaseOperation(name: name))
            throw error
        }
        _ = try await client.execute(DeleteDatabaseOperation(name: name))

        try await withDatabase("shards2") { client, db in
            let info = try await client.value(GetDatabaseInfoOperation(name: db))
            let q = try #require(info.cluster?.q)
            let shards = try await client.value(GetShardsOperation(database: db))
            #expect(shards.shards.count == q)
        }
    }
}
