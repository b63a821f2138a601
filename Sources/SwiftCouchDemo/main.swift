// The SwiftCouch demo: creates a database, writes, reads, updates and deletes documents, runs a
// small batch on an OperationQueue with dependencies, runs the same code against a local database
// on this machine (SwiftCouchStore), and cleans up — printing each step.
//
// Against a real CouchDB when COUCHDB_URL is set (with COUCHDB_USER and COUCHDB_PASSWORD),
// otherwise against a TestServer started in this process.
//
//     swift run SwiftCouchDemo
//     COUCHDB_URL=http://127.0.0.1:5984 COUCHDB_USER=admin COUCHDB_PASSWORD=password swift run SwiftCouchDemo

import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchSync

/// A document type: any Codable value can be a document.
struct Album: Codable, Sendable {
    var _id: String?
    var _rev: String?
    var title: String
    var artist: String
    var year: Int
}

func step(_ text: String) {
    print("• \(text)")
}

/// App code written once for a remote database and a local one: the titles of the albums of the 1970s.
func seventies(in store: some DocumentStore) async throws -> [String] {
    let found = try await store.find(Selector.field("year").greaterThanOrEqual(1970), as: Album.self)
    return found.docs.map(\.title).sorted()
}

let environment = ProcessInfo.processInfo.environment
let embedded: TestServer?
let serverURL: URL
let credentials: Credentials
if let raw = environment["COUCHDB_URL"], !raw.isEmpty, let url = URL(string: raw) {
    embedded = nil
    serverURL = url
    credentials = Credentials(
        username: environment["COUCHDB_USER"] ?? "admin", password: environment["COUCHDB_PASSWORD"] ?? "password")
    step("Using the CouchDB at \(url.absoluteString)")
} else {
    let server = try TestServer.start()
    embedded = server
    serverURL = server.url
    credentials = Credentials(username: server.adminName, password: server.adminPassword)
    step("No COUCHDB_URL set: started an embedded TestServer at \(server.url.absoluteString)")
}

let client = CouchDBClient(url: serverURL, credentials: credentials)
let database = "swiftcouch-demo-\(UUID().uuidString.lowercased().prefix(8))"

do {
    let info = try await client.value(GetServerInfoOperation())
    step("Server: CouchDB \(info.version) (\(info.vendor?.name ?? "unknown vendor"))")

    _ = try await client.value(CreateDatabaseOperation(name: database))
    step("Created database \(database)")

    let blue = Album(title: "Blue", artist: "Joni Mitchell", year: 1971)
    let written = try await client.value(PutDocumentOperation(database: database, id: "albums/blue", document: blue))
    step("Wrote document '\(written.id)' (note the / inside the id) at revision \(written.rev ?? "?")")

    var album = try await client.value(GetDocumentOperation<Album>(database: database, id: "albums/blue"))
    step("Read it back: \(album.title) by \(album.artist), \(album.year)")

    album.year = 1972
    let updated = try await client.value(
        PutDocumentOperation(database: database, id: "albums/blue", document: album, revision: album._rev))
    step("Updated it to revision \(updated.rev ?? "?")")

    do {
        _ = try await client.execute(
            PutDocumentOperation(database: database, id: "albums/blue", document: album, revision: written.rev))
    } catch {
        step(
            "Writing with the old revision is refused: \(error.statusCode ?? 0) \(error.error ?? "") — \(error.reason ?? "")"
        )
    }

    // A batch on the client's OperationQueue: the second write is built when the first has finished,
    // from the revision it returned.
    let first = client.task(
        for: PutDocumentOperation(
            database: database, id: "albums/hejira",
            document: Album(title: "Hejira", artist: "Joni Mitchell", year: 1976)))
    let secondResult = await withCheckedContinuation { continuation in
        let second = client.task(
            building: {
                let rev = try first.result!.get().value.rev
                return PutDocumentOperation(
                    database: database, id: "albums/hejira",
                    document: Album(title: "Hejira (remastered)", artist: "Joni Mitchell", year: 1976), revision: rev)
            },
            completion: { continuation.resume(returning: $0) })
        second.addDependency(first)
        client.operationQueue.addOperations([first, second], waitUntilFinished: false)
    }
    let secondWrite = try secondResult.get()
    step("Batch with a dependency: the second write used the first's revision and got \(secondWrite.value.rev ?? "?")")

    let dbInfo = try await client.value(GetDatabaseInfoOperation(name: database))
    step("The database holds \(dbInfo.docCount) documents")

    // The same calls on a database kept on this machine: CouchDB's engine in process.
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("swiftcouch-demo-\(UUID())")
    let local = try await LocalDatabase.open(at: directory, name: "albums")
    try await local.put(Album(title: "Court and Spark", artist: "Joni Mitchell", year: 1974), id: "albums/court")
    step("Local database at \(directory.path): 1970s albums \(try await seventies(in: local))")
    step("Remote database \(database): 1970s albums \(try await seventies(in: client.database(database)))")

    // Two-way sync between them: CouchDB's replication protocol, with checkpoints on both sides.
    let sync = Sync(local: .local(local), remote: .remote(client.database(database)))
    let synced = try await sync.run()
    step("Synced: \(synced.pull.docsWritten) pulled, \(synced.push.docsWritten) pushed")
    step("Local database after the sync: 1970s albums \(try await seventies(in: local))")
    step("Remote database after the sync: 1970s albums \(try await seventies(in: client.database(database)))")
    local.close()
    try? FileManager.default.removeItem(at: directory)

    let deleted = try await client.value(
        DeleteDocumentOperation(database: database, id: "albums/blue", revision: updated.rev ?? ""))
    step("Deleted 'albums/blue' (tombstone revision \(deleted.rev ?? "?"))")

    _ = try await client.value(DeleteDatabaseOperation(name: database))
    step("Deleted database \(database)")
} catch {
    print("The demo failed: \(error)")
    _ = try? await client.execute(DeleteDatabaseOperation(name: database))
    embedded?.stop()
    exit(1)
}

client.shutdown()
embedded?.stop()
step("Done.")
