import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchStore
@testable import SwiftCouchSync
import Testing

/// Runs `body` with a fresh local store, closed and removed afterwards.
func withLocalStore(_ body: (LocalStore) async throws -> Void) async throws {
    let directory = SyncFixture.temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let store = try await LocalStore.open(at: directory)
    defer { store.close() }
    try await body(store)
}

/// Bytes that do not compress, of `count` bytes.
func noise(_ count: Int, seed: UInt64) -> Data {
    var state = seed | 1
    var bytes = [UInt8](repeating: 0, count: count)
    for index in bytes.indices {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        bytes[index] = UInt8(truncatingIfNeeded: state)
    }
    return Data(bytes)
}

@Suite("Replicator: attachments, events, denials, filters, ids")
struct ReplicationFeatureTests {
    @Test("Attachments (binary, text, kept across updates) replicate both ways with identical trees")
    func attachments() async throws {
        let client = SyncFixture.client()
        defer { client.shutdown() }
        let remote = try await SyncFixture.remoteDatabase(client)
        let first = try await remote.putAttachment(
            "blob.bin", of: "with-files", data: noise(200_000, seed: 7), contentType: "application/octet-stream")
        let second = try await remote.putAttachment(
            "notes.txt", of: "with-files", data: Data(String(repeating: "text ", count: 5000).utf8),
            contentType: "text/plain", revision: first.rev)
        try await withLocalStore { store in
            let local = try await store.database("files")
            let pulled = try await Replicator(source: .remote(remote), target: .local(local)).settledRun()
            #expect(pulled.docsWritten == 1)
            #expect(try await SyncFixture.trees(local) == (try await SyncFixture.trees(remote)))

            // An update that keeps the big attachment as a stub: the second run sends it as a stub
            // (atts_since), and the target keeps the bytes it has.
            try await remote.putAttachment(
                "third.txt", of: "with-files", data: Data("third".utf8), contentType: "text/plain",
                revision: second.rev)
            let again = try await Replicator(source: .remote(remote), target: .local(local)).settledRun()
            #expect(again.docsWritten == 1)
            #expect(try await SyncFixture.trees(local) == (try await SyncFixture.trees(remote)))
            let blob = try await local.attachment("blob.bin", of: "with-files")
            #expect(blob.data == noise(200_000, seed: 7))

            let copy = try await SyncFixture.remoteDatabase(client)
            let pushed = try await Replicator(source: .local(local), target: .remote(copy)).settledRun()
            #expect(pushed.docsWritten == 1)
            #expect(try await SyncFixture.trees(copy) == (try await SyncFixture.trees(remote)))
            try await copy.delete()
        }
        try await remote.delete()
    }

    @Test("Events: connecting, busy, one documentWritten per revision, checkpoint, then completed, then stopped")
    func events() async throws {
        let client = SyncFixture.client()
        defer { client.shutdown() }
        let source = try await SyncFixture.remoteDatabase(client)
        try await SyncFixture.fill(source, count: 12)
        try await withLocalStore { store in
            let local = try await store.database("events")
            let replicator = Replicator(
                source: .remote(source), target: .local(local), options: ReplicationOptions(batchSize: 5))
            let log = EventLog(replicator)
            let summary = try await replicator.settledRun()
            let events = await log.finished()
            var states: [String] = []
            var written = 0
            var checkpointIndex: Int?
            var completedIndex: Int?
            for (index, event) in events.enumerated() {
                switch event {
                case .state(let state): states.append(state.name)
                case .documentWritten(let document):
                    written += 1
                    #expect(document.direction == .pull)
                case .checkpoint: checkpointIndex = index
                case .completed(let counts):
                    completedIndex = index
                    #expect(counts == summary)
                default: break
                }
            }
            #expect(states == ["connecting", "busy", "stopped"])
            #expect(written == summary.docsWritten)
            #expect(replicator.state.name == "stopped")
            let checkpoint = try #require(checkpointIndex)
            let completed = try #require(completedIndex)
            #expect(checkpoint < completed)
        }
        try await source.delete()
    }

    @Test("A target's validate_doc_update refusing some documents: the others written, each denial an event")
    func deniedWrites() async throws {
        let client = SyncFixture.client()
        defer { client.shutdown() }
        let source = try await SyncFixture.remoteDatabase(client)
        let target = try await SyncFixture.remoteDatabase(client)
        try await target.put(
            JSONValue.object([
                "validate_doc_update": .string(
                    "function(doc){ if (doc.secret) { throw({forbidden: 'no secrets here'}); } }")
            ]), id: "_design/guard")
        var documents: [JSONValue] = []
        for index in 0..<10 {
            documents.append(.object(["_id": .string("d\(index)"), "secret": .bool(index % 3 == 0)]))
        }
        _ = try await source.bulk(documents)
        let replicator = Replicator(source: .remote(source), target: .remote(target))
        let log = EventLog(replicator)
        let summary = try await replicator.settledRun()
        #expect(summary.docWriteFailures == 4)
        #expect(summary.docsWritten == 6)
        let denials = await log.finished().compactMap { event -> DeniedWrite? in
            if case .writeDenied(let denied) = event { return denied }
            return nil
        }
        #expect(denials.map(\.id).sorted() == ["d0", "d3", "d6", "d9"])
        #expect(denials.allSatisfy { $0.error == "forbidden" && $0.reason == "no secrets here" })
        try await source.delete()
        try await target.delete()
    }

    @Test("Filters: doc_ids with a design document, selector, design filter with parameters, view, closure")
    func filters() async throws {
        let client = SyncFixture.client()
        defer { client.shutdown() }
        let source = try await SyncFixture.remoteDatabase(client)
        var documents: [JSONValue] = []
        for index in 0..<12 {
            documents.append(
                .object([
                    "_id": .string(String(format: "d%02d", index)), "kind": .string(index % 2 == 0 ? "even" : "odd"),
                    "n": .int(Int64(index)),
                ]))
        }
        _ = try await source.bulk(documents)
        try await source.put(
            JSONValue.object([
                "filters": .object(["by_kind": "function(doc, req){ return doc.kind === req.query.kind; }"]),
                "views": .object(["small": .object(["map": "function(doc){ if (doc.n < 3) emit(doc._id, null); }"])]),
            ]), id: "_design/app")
        let cases: [(ReplicationFilter, [String])] = [
            (.documentIDs(["d01", "_design/app", "d05"]), ["_design/app", "d01", "d05"]),
            (.selector(["n": ["$gt": 9]]), ["d10", "d11"]),
            (
                .designFilter(designDocument: "app", name: "by_kind", parameters: ["kind": "odd"]),
                ["d01", "d03", "d05", "d07", "d09", "d11"]
            ),
            (.view(designDocument: "app", view: "small"), ["d00", "d01", "d02"]),
            (.closure(version: "1", { $0["n"]?.intValue == 4 }), ["d04"]),
        ]
        for (filter, expected) in cases {
            let target = try await SyncFixture.remoteDatabase(client)
            let summary = try await Replicator(
                source: .remote(source), target: .remote(target), options: ReplicationOptions(filter: filter)
            ).settledRun()
            await SyncFixture.settle()
            let ids = try await target.allDocs().rows.compactMap(\.id)
            #expect(ids == expected, "\(filter)")
            #expect(summary.docsWritten == expected.count)
            try await target.delete()
        }
        try await source.delete()
    }

    @Test("The replication id: credentials never change it, a filter or winning_revs_only does")
    func replicationID() async throws {
        let url = URL(string: "http://127.0.0.1:5984")!
        let alice = CouchDBClient(url: url, credentials: Credentials(username: "alice", password: "one"))
        let bob = CouchDBClient(url: URL(string: "http://bob:two@127.0.0.1:5984/")!)
        let anonymous = CouchDBClient(url: url)
        defer {
            alice.shutdown()
            bob.shutdown()
            anonymous.shutdown()
        }
        let target = SyncEndpoint.remote(anonymous.database("target"))
        func id(_ client: CouchDBClient, _ options: ReplicationOptions = ReplicationOptions()) -> String {
            ReplicationID.make(source: .remote(client.database("source")), target: target, options: options)
        }
        #expect(id(alice) == id(bob))
        #expect(id(alice) == id(anonymous))
        #expect(id(alice).count == 32)
        #expect(id(alice, ReplicationOptions(continuous: true, batchSize: 10)) == id(alice))
        let filtered = id(alice, ReplicationOptions(filter: .documentIDs(["a", "b"])))
        #expect(filtered != id(alice))
        #expect(filtered == id(alice, ReplicationOptions(filter: .documentIDs(["b", "a"]))))
        #expect(filtered != id(alice, ReplicationOptions(filter: .documentIDs(["a"]))))
        #expect(
            id(alice, ReplicationOptions(filter: .selector(["a": 1])))
                != id(alice, ReplicationOptions(filter: .selector(["a": 2]))))
        #expect(
            id(alice, ReplicationOptions(filter: .closure(version: "1", { _ in true })))
                != id(alice, ReplicationOptions(filter: .closure(version: "2", { _ in true }))))
        #expect(id(alice, ReplicationOptions(winningRevisionsOnly: true)) != id(alice))
        let other = ReplicationID.make(
            source: .remote(CouchDBClient(url: URL(string: "http://127.0.0.1:5985")!).database("source")),
            target: target, options: ReplicationOptions())
        #expect(other != id(alice))
    }

    @Test("Backoff: full jitter under an exponential ceiling, capped; Retry-After honoured and capped; reset")
    func backoff() {
        var backoff = ReplicationBackoff(base: 1, cap: 10)
        #expect(backoff.next(random: 0.5) == 0.5)
        #expect(backoff.next(random: 0.5) == 1)
        #expect(backoff.next(random: 1) == 4)
        #expect(backoff.next(random: 1) == 8)
        #expect(backoff.next(random: 1) == 10)
        #expect(backoff.next(random: 0) == 0)
        #expect(backoff.next(retryAfter: 3, random: 0) == 3)
        #expect(backoff.next(retryAfter: 3600, random: 0) == 10)
        for _ in 0..<100 { _ = backoff.next() }
        #expect(backoff.next(random: 1) == 10)
        backoff.reset()
        #expect(backoff.attempt == 0)
        #expect(backoff.next(random: 1) == 1)
    }

    @Test("A deleted checkpoint on one side: the next run starts from the start and the result is the same")
    func deletedCheckpoint() async throws {
        let client = SyncFixture.client()
        defer { client.shutdown() }
        let source = try await SyncFixture.remoteDatabase(client)
        try await SyncFixture.fill(source, count: 10)
        let target = try await SyncFixture.remoteDatabase(client)
        let replicator = Replicator(
            source: .remote(source), target: .remote(target),
            options: ReplicationOptions(batchSize: 3, workers: 2, checkpointInterval: 0))
        let first = try await replicator.settledRun()
        let checkpoint = try await client.value(
            GetDocumentOperation<JSONValue>(database: target.name, id: "_local/" + replicator.replicationID))
        _ = try await client.value(
            DeleteDocumentOperation(
                database: target.name, id: "_local/" + replicator.replicationID,
                revision: checkpoint["_rev"]?.stringValue ?? ""))
        try await source.put(JSONValue.object(["late": true]), id: "late")
        let second = try await Replicator(source: .remote(source), target: .remote(target)).settledRun()
        #expect(second.missingChecked == first.missingChecked + 1)
        #expect(second.docsWritten == 1)
        #expect(try await SyncFixture.trees(target) == (try await SyncFixture.trees(source)))
        try await source.delete()
        try await target.delete()
    }
}

@Suite("Replicator internals")
struct ReplicationInternalsTests {
    @Test("Attachments sent: those above the newest possible ancestor on the revision's own path")
    func sentAbove() {
        let document: JSONValue = .object([
            "_id": "d", "_rev": "5-e",
            "_revisions": .object(["start": 5, "ids": .array(["e", "d", "c", "b", "a"])]),
        ])
        #expect(AttachmentCopy.sentAbove(document, ancestors: nil) == 0)
        #expect(AttachmentCopy.sentAbove(document, ancestors: ["3-c"]) == 3)
        #expect(AttachmentCopy.sentAbove(document, ancestors: ["3-c", "4-d", "2-zz"]) == 4)
        // Not on the path (another branch), or beyond what _revisions holds: send everything.
        #expect(AttachmentCopy.sentAbove(document, ancestors: ["3-x", "9-e", "0-a", "junk"]) == 0)
    }

    @Test("Attachments sent: generations at Int64's ends, from a hostile source or target, send everything")
    func sentAboveAtTheEnds() {
        let extremes: [Int64] = [.min, .min + 1, -1, 0, .max - 1, .max]
        for start in extremes {
            let document: JSONValue = .object([
                "_id": "d", "_rev": "5-e", "_revisions": .object(["start": .int(start), "ids": .array(["e", "d"])]),
            ])
            let ancestors = extremes.map { "\($0)-e" } + ["-9223372036854775808-d", "9223372036854775807-d"]
            #expect(AttachmentCopy.sentAbove(document, ancestors: ancestors) == (start >= 1 ? start : 0))
        }
    }

    @Test("Checkpoint logs: same session, newest shared history entry, or from the start")
    func startPoint() {
        func entry(_ session: String, _ seq: Int64) -> ReplicationLog.Entry {
            ReplicationLog.Entry(
                sessionID: session, startTime: "", endTime: "", startLastSeq: .int(0), endLastSeq: .int(seq),
                recordedSeq: .int(seq), summary: ReplicationSummary())
        }
        let source = ReplicationLog(
            rev: nil, sessionID: "s3", sourceLastSeq: .int(30),
            history: [entry("s3", 30), entry("s2", 20), entry("s1", 10)])
        let sameSession = ReplicationLog(rev: nil, sessionID: "s3", sourceLastSeq: .int(30), history: [entry("s3", 30)])
        #expect(ReplicationLog.startPoint(source: source, target: sameSession) == .int(30))
        let older = ReplicationLog(
            rev: nil, sessionID: "s2", sourceLastSeq: .int(20), history: [entry("s2", 20), entry("s1", 10)])
        #expect(ReplicationLog.startPoint(source: source, target: older) == .int(20))
        let foreign = ReplicationLog(rev: nil, sessionID: "x", sourceLastSeq: .int(99), history: [entry("x", 99)])
        #expect(ReplicationLog.startPoint(source: source, target: foreign) == nil)
        #expect(ReplicationLog.startPoint(source: nil, target: older) == nil)
        // The JSON round trip keeps what decides the start point.
        let decoded = ReplicationLog(json: source.json(id: "abc"))
        #expect(decoded?.sameContent(as: source) == true)
        #expect(source.json(id: "abc")["_id"] == "_local/abc")
    }
}

@Suite("Replicator: open_revs URLs")
struct OpenRevisionsChunkTests {
    @Test("210 leaves are read in several open_revs requests, each URL-sized, none lost or repeated")
    func chunks() {
        let revs = (0..<210).map { "2-" + String(repeating: String(format: "%02x", $0 % 256), count: 16) }
        let chunks = BatchWorker.urlSizedChunks(revs)
        #expect(chunks.count > 1)
        #expect(chunks.flatMap { $0 } == revs)
        for chunk in chunks {
            #expect(chunk.reduce(0) { $0 + $1.utf8.count + 9 } <= 4_000)
        }
        #expect(BatchWorker.urlSizedChunks(["1-a"]) == [["1-a"]])
        #expect(BatchWorker.urlSizedChunks([]).isEmpty)
    }
}
