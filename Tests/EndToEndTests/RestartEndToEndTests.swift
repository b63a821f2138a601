import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import Testing

@Suite("End to end: a TestServer restarted mid-batch loses nothing")
struct RestartEndToEndTests {
    @Test("Restart with a data directory mid-batch: every acknowledged write survives, the batch completes")
    func restartMidBatch() async throws {
        guard E2EEnvironment.shared.testServer != nil else {
            print("Skipping the restart test: it restarts an embedded TestServer (COUCHDB_URL is set).")
            return
        }
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("swiftcouch-restart-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try TestServer.start(TestServer.Configuration(dataDirectory: directory))
        defer { server.stop() }
        var configuration = Configuration()
        configuration.maximumConcurrentOperations = 4
        configuration.retryPolicy = RetryPolicy(
            maximumRetries: 20, initialDelay: 0.02, maximumDelay: 0.3, retryServerErrors: true)
        let client = server.adminClient(configuration: configuration)
        defer { client.shutdown() }
        let db = "restart-batch"
        try await client.execute(CreateDatabaseOperation(name: db))

        let acknowledged = Acknowledged()
        let total = 120
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                // Restart once a third of the batch has been acknowledged.
                for _ in 0..<1_000 where acknowledged.count < total / 3 {
                    try await Task.sleep(for: .milliseconds(5))
                }
                try server.restart()
            }
            for index in 0..<total {
                group.addTask {
                    let id = "doc-\(index)"
                    try await writeUntilStored(client: client, db: db, id: id, value: index)
                    acknowledged.add(id)
                }
            }
            try await group.waitForAll()
        }
        #expect(acknowledged.count == total)
        // Restart once more after the batch: everything acknowledged must still be there.
        try server.restart()
        let info = try await client.value(GetDatabaseInfoOperation(name: db))
        #expect(info.docCount == total)
        for index in stride(from: 0, to: total, by: 7) {
            let note = try await client.value(GetDocumentOperation<Note>(database: db, id: "doc-\(index)"))
            #expect(note.n == index)
            #expect(note._rev?.hasPrefix("1-") == true)
        }
        try await client.execute(DeleteDatabaseOperation(name: db))
    }
}

/// Writes a document; when the write's fate is unknown (the connection dropped), reads it back and
/// writes again only if it is missing — so it lands exactly once.
func writeUntilStored(client: CouchDBClient, db: String, id: String, value: Int) async throws {
    for _ in 0..<50 {
        let failure: CouchError?
        do {
            try await client.execute(PutDocumentOperation(database: db, id: id, document: Note(text: id, n: value)))
            failure = nil
        } catch {
            failure = error
        }
        guard let failure else { return }
        guard failure.kind == .transport || failure.statusCode == 409 else { throw failure }
        if let stored = try? await client.value(GetDocumentOperation<Note>(database: db, id: id)), stored.n == value {
            return
        }
        try await Task.sleep(for: .milliseconds(20))
    }
    throw CouchError.validation("\(id) could not be written after 50 attempts")
}

/// Thread-safe set of acknowledged ids.
final class Acknowledged: @unchecked Sendable {
    // @unchecked Sendable: `ids` is only touched under `lock`.
    private let lock = NSLock()
    private var ids: Set<String> = []
    func add(_ id: String) {
        lock.lock()
        ids.insert(id)
        lock.unlock()
    }
    var count: Int {
        lock.lock()
        defer { lock.unlock() }
        return ids.count
    }
}
