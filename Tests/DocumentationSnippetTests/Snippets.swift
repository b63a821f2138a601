// Generated from the documentation's Swift code blocks by SnippetExtraction: do not edit.
// Regenerate: .ci/update-snippets
// swift-format-ignore-file
import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchSync
import SwiftCouchTesting
import Testing

// README.md, line 68
func snippet1() async throws {

    struct Album: Codable, Sendable {
        var _id: String?
        var _rev: String?
        var title: String
        var year: Int
    }

    let client = CouchDBClient(
        url: URL(string: "http://127.0.0.1:5984")!,
        credentials: Credentials(username: "admin", password: "password"))

    try await client.execute(CreateDatabaseOperation(name: "albums"))
    let written = try await client.value(
        PutDocumentOperation(database: "albums", id: "blue", document: Album(title: "Blue", year: 1971)))
    var album = try await client.value(GetDocumentOperation<Album>(database: "albums", id: "blue"))
    album.year = 1972
    try await client.execute(PutDocumentOperation(database: "albums", id: "blue", document: album, revision: album._rev))

    // An edit that arrives as JSON, written with a stale revision: other errors can be thrown in
    // the same `do` block, so match CouchError by type.
    let edit = Data(#"{"title":"Blue","year":1971}"#.utf8)
    do {
        let edited = try JSONDecoder().decode(Album.self, from: edit)
        try await client.execute(PutDocumentOperation(database: "albums", id: "blue", document: edited, revision: written.rev))
    } catch let error as CouchError {
        // 409 conflict Document update conflict.
        print(error.statusCode ?? 0, error.error ?? "", error.reason ?? "")
    }
    _ = client
    _ = written
    _ = album
    _ = edit
}

// README.md, line 106
func snippet2() async throws {
    let client = SnippetContext.client
    let albums = client.database("albums")
    try await albums.create()
    let saved = try await albums.put(Album(title: "Court and Spark", year: 1974), id: "court")
    var court = try await albums.get("court", as: Album.self)
    court.year = 1975
    do {
        try await albums.put(court, id: "court", revision: saved.rev)
    } catch {
        guard error.isConflict else { throw error }
        print("someone else wrote it first: read it again")
    }
    let seventies = try await albums.find(Selector.field("year").greaterThanOrEqual(1970), as: Album.self)
    print(seventies.docs.count)
    _ = albums
    _ = saved
    _ = court
    _ = seventies
}

// README.md, line 130
func snippet3() async throws {
    let client = SnippetContext.client
    struct ActiveTask: Decodable, Sendable { var type: String; var progress: Int? }
    let tasks = try await client.value(
        GenericJSONOperation<[ActiveTask]>(GenericOperation(method: .get, path: CouchPath("_active_tasks"))))
    print(tasks.map(\.type))
    _ = tasks
}

// README.md, line 139
func snippet4() async throws {
    let client = SnippetContext.client
    let hejira = Album(title: "Hejira", year: 1976)
    let remastered = Album(title: "Hejira (remastered)", year: 2024)
    let myQueue = OperationQueue()
    let create = client.task(for: PutDocumentOperation(database: "albums", id: "hejira", document: hejira))
    // Built when it starts, after `create` finished: it can use the revision `create` returned.
    let update = client.task(building: {
        let rev = try create.result!.get().value.rev
        return PutDocumentOperation(database: "albums", id: "hejira", document: remastered, revision: rev)
    }) { result in
        print(result)   // Result<CouchResponse<DocumentWriteResponse>, CouchError>, exactly once
    }
    update.addDependency(create)
    myQueue.addOperation(create)       // or client.add(task: create)
    myQueue.addOperation(update)
    _ = create
    _ = update
}

// README.md, line 161
func snippet5() async throws {
    let url = SnippetContext.url
    let credentials = SnippetContext.credentials
    var configuration = Configuration()
    configuration.requestTimeout = 30                                   // default 60 s
    configuration.retryPolicy = RetryPolicy(maximumRetries: 6, retryServerErrors: true)
    configuration.maximumConcurrentOperations = 16                      // default 6
    configuration.authentication = .basic                               // default .cookie
    configuration.logHandler = { print($0) }                            // default: silent
    configuration.logTranscripts = true                                 // secrets shown as <redacted>
    let client = CouchDBClient(url: url, credentials: credentials, configuration: configuration)
    _ = configuration
    _ = client
}

// README.md, line 174
func snippet6() async throws {
    var configuration = Configuration()
    let url = SnippetContext.url
    let credentials = SnippetContext.credentials
    // Take part in every request: a header on each attempt (see RequestAdapter for what it cannot change).
    struct CorrelationID: RequestAdapter {
        func adapt(_ headers: inout HTTPFields, context: RequestAdapterContext) async throws {
            headers["X-Correlation-ID"] = "\(context.operation ?? "request")-\(context.attempt)"
        }
    }
    // Watch every attempt, response, failure and retry.
    struct Timings: EventMonitor {
        func responseReceived(_ event: RequestEvent, status: Int, duration: TimeInterval) {
            print(event, status, String(format: "%.1f ms", duration * 1000))
        }
    }
    configuration.adapters = [CorrelationID()]
    configuration.monitors = [Timings()]
    let client = CouchDBClient(url: url, credentials: credentials, configuration: configuration)

    // Options for one call: timeout, retry policy, extra headers.
    let info = try await client.value(
        GetDatabaseInfoOperation(name: "albums"), options: CallOptions(timeout: 5, retryPolicy: .disabled))
    print(info.docCount)
    _ = client
    _ = info
}

// README.md, line 211
func snippet7() async throws {
    var configuration = Configuration()
    configuration.transport = SocketTransport(maximumConnectionsPerHost: 8)   // or URLSessionTransport()
}

// README.md, line 217
func snippet8() async throws {
    let client = SnippetContext.client
    let url = SnippetContext.url
    let saved: CouchSequence? = nil
    let albums: [Album] = []
    let rev = "1-x"
    let destination = SnippetContext.destination
    // Rows parsed and decoded one by one as they arrive; a slow loop pauses the transfer.
    for try await row in client.rows(AllDocsOperation<Album>(database: "albums", options: .init(includeDocs: true))) {
        print(row.id ?? "", row.doc?.title ?? "")
    }

    // Pages by key, forwards (or backwards from any page's `previous` token); tokens are strings.
    for try await page in client.pages(AllDocsOperation<JSONValue>(database: "albums"), pageSize: 50) {
        show(page.rows); remember(page.next?.rawValue)
    }

    // Follow the changes feed forever; it resumes after errors, restarts and 429s, and never skips.
    let follower = ChangesFollower<Album>(client: client, database: "albums",
                                          options: .init(mode: .listen, since: saved, includeDocs: true))
    for try await change in follower {
        apply(change); save(change.checkpoint)   // resume after this change; at-least-once: apply idempotently
    }

    // Write any number of documents in _bulk_docs batches, a bounded number in flight.
    let writer = BulkWriter<Album>(client: client, database: "albums")
    for album in albums { try await writer.add(album) }
    let results = try await writer.finish()        // one BulkWriteResult per album, in order

    // Attachments from and to files, with Foundation.Progress and async progress events.
    let upload = client.upload(UploadAttachmentOperation(database: "albums", documentID: "blue", name: "cover.png",
                                                         revision: rev, contentType: "image/png", body: try .file(url)))
    for await event in upload.progressEvents { print(event.fractionCompleted ?? 0) }
    _ = try await upload.value
    _ = try await client.download(GetAttachmentOperation(database: "albums", documentID: "blue", name: "cover.png"),
                                  to: destination).value
    _ = follower
    _ = writer
    _ = results
    _ = upload
}

// README.md, line 258
func snippet9() async throws {
    var configuration = Configuration()
    let key = "api-key"
    let jwt = "header.payload.signature"
    configuration.authentication = .iam(apiKey: key)             // token fetched, renewed at 80%, one refresh at a time
    configuration.authentication = .bearerToken(jwt)             // sent as is
}

// README.md, line 274
func snippet10() async throws {

    let run = Simulation.run(
        GetDocumentOperation<Album>(database: "albums", id: "a/b"),
        response: .json(200, #"{"_id":"a/b","_rev":"1-x","title":"Blue","year":1971}"#))
    #expect(run.request?.path == "/albums/a%2Fb")     // the exact request, no network
    #expect(run.value?.title == "Blue")
    _ = run
}

// README.md, line 295
func snippet11() async throws {
    let client = SnippetContext.client

    let support = FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask)[0]
    let library = try await LocalDatabase.open(at: support.appendingPathComponent("albums"))
    defer { library.close() }

    let saved = try await library.put(Album(title: "Blue", year: 1971), id: "blue")
    var blue = try await library.get("blue", as: Album.self)
    blue.year = 1972
    try await library.put(blue, id: "blue", revision: saved.rev)
    let seventies = try await library.find(Selector.field("year").greaterThanOrEqual(1970), as: Album.self)
    print(seventies.docs.count)

    // Conflicts (two edits that met in replication): listed from an index, resolved in one write.
    for id in try await library.conflictedDocumentIDs() {
        let leaves = try await library.conflictLeaves(of: id, as: Album.self)
        if let newest = leaves.max(by: { $0.body.year < $1.body.year }), let rev = newest.rev {
            try await library.resolveConflicts(of: id, keeping: rev)
        }
    }

    // App code that runs against either the device or the server.
    func rename(_ id: String, to title: String, in store: some DocumentStore) async throws {
        var album = try await store.get(id, as: Album.self)
        album.title = title
        try await store.put(album, id: id, revision: album._rev)
    }
    try await rename("blue", to: "Blue (remastered)", in: library)
    try await rename("blue", to: "Blue (remastered)", in: client.database("albums"))

    // Changes as they happen, for as long as this task runs.
    let feed = library.changeFeed(as: Album.self, options: .init(mode: .listen, since: .now, includeDocs: true))
    for try await change in feed {
        print(change.id, change.doc?.title ?? "deleted")
    }
    _ = support
    _ = library
    _ = saved
    _ = blue
    _ = seventies
    _ = feed
}

// README.md, line 378
func snippet12() async throws {
    let client = SnippetContext.client

    let support = FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask)[0]
    let notes = try await LocalDatabase.open(at: support.appendingPathComponent("notes"), name: "notes")
    defer { notes.close() }

    var options = ReplicationOptions(continuous: true, createTarget: true)
    // Called after each pulled batch with the documents that now have conflicts here: keep the newest.
    options.conflictResolver = { batch in
        for id in batch.conflictedIDs {
            let leaves = try await batch.database.conflictLeaves(of: id, as: Album.self)
            if let newest = leaves.max(by: { $0.body.year < $1.body.year }), let rev = newest.rev {
                try await batch.database.resolveConflicts(of: id, keeping: rev)
            }
        }
    }
    let sync = Sync(local: .local(notes), remote: .remote(client.database("notes")), options: options)
    Task {
        for await event in sync.events() {
            switch event.event {
            case .state(let state): print(event.direction, state)         // connecting, busy, idle, offline, ...
            case .documentWritten(let doc): print(event.direction, doc.id, doc.rev)
            case .writeDenied(let denied): print("refused", denied.id, denied.reason ?? "")
            default: break
            }
        }
    }
    sync.start()
    // ... when the app goes to the background:
    await sync.stop()

    // One-shot: returns once everything is copied and the final checkpoint is written.
    let summary = try await Replicator(source: .local(notes), target: .remote(client.database("notes"))).run()
    print(summary.docsWritten, summary.docWriteFailures)
    _ = support
    _ = notes
    _ = options
    _ = sync
    _ = summary
}

// Sources/SwiftCouch/SwiftCouch.docc/AdaptersAndMonitoring.md, line 41
func snippet13() async throws {
    struct CorrelationID: RequestAdapter {
        func adapt(_ headers: inout HTTPFields, context: RequestAdapterContext) async throws {
            headers["X-Correlation-ID"] = "\(context.operation ?? "request")-\(context.attempt)"
        }
    }

    var configuration = Configuration()
    configuration.adapters = [CorrelationID()]
    _ = configuration
}

// Sources/SwiftCouch/SwiftCouch.docc/AdaptersAndMonitoring.md, line 64
func snippet14() async throws {
    final class Metrics: EventMonitor, @unchecked Sendable {
        private let lock = NSLock()
        private var retries = 0
        func requestRetried(_ event: RequestEvent, reason: String, delay: TimeInterval) {
            lock.withLock { retries += 1 }
        }
        func responseReceived(_ event: RequestEvent, status: Int, duration: TimeInterval) {
            print(event, status, duration)
        }
    }

    var configuration = Configuration()
    configuration.monitors = [Metrics()]
    configuration.logHandler = { event in print(event.level, event.message, event.metadata) }
    _ = configuration
}

// Sources/SwiftCouch/SwiftCouch.docc/AdaptersAndMonitoring.md, line 89
func snippet15() async throws {
    let client = SnippetContext.client
    var options = CallOptions()
    options.timeout = 5
    options.retryPolicy = .disabled
    options.headers["X-Request-ID"] = "checkout-42"
    let info = try await client.value(GetDatabaseInfoOperation(name: "albums"), options: options)
    print(info.docCount)
    _ = options
    _ = info
}

// Sources/SwiftCouch/SwiftCouch.docc/FailureSemantics.md, line 42
func snippet16() async throws {
    let client = SnippetContext.client
    do {
        try await client.execute(
            PutDocumentOperation(database: "albums", id: "blue", document: Album(title: "Blue", year: 1971)))
    } catch {
        if error.isOutcomeUnknown {
            // The server may have written it: read it back before trying again.
        } else {
            print(error.kind, error.statusCode ?? 0, error.reason ?? "")
        }
    }
}

// Sources/SwiftCouch/SwiftCouch.docc/GettingStarted.md, line 13
func snippet17() async throws {
    struct Album: Codable, Sendable {
        var _id: String?
        var _rev: String?
        var title: String
        var year: Int
    }
}

// Sources/SwiftCouch/SwiftCouch.docc/GettingStarted.md, line 28
func snippet18() async throws {
    let client = CouchDBClient(
        url: URL(string: "http://127.0.0.1:5984")!,
        credentials: Credentials(username: "admin", password: "password"))
    _ = client
}

// Sources/SwiftCouch/SwiftCouch.docc/GettingStarted.md, line 40
func snippet19() async throws {
    let client = SnippetContext.client
    try await client.execute(CreateDatabaseOperation(name: "albums"))
    let written = try await client.value(
        PutDocumentOperation(database: "albums", id: "blue", document: Album(title: "Blue", year: 1971)))
    var album = try await client.value(GetDocumentOperation<Album>(database: "albums", id: "blue"))
    album.year = 1972
    try await client.execute(
        PutDocumentOperation(database: "albums", id: "blue", document: album, revision: written.rev))
    _ = written
    _ = album
}

// Sources/SwiftCouch/SwiftCouch.docc/GettingStarted.md, line 60
func snippet20() async throws {
    let client = SnippetContext.client
    do {
        try await client.execute(CreateDatabaseOperation(name: "albums"))
    } catch {
        // 412 file_exists: The database could not be created, the file already exists.
        print(error.statusCode ?? 0, error.error ?? "", error.reason ?? "")
    }
}

// Sources/SwiftCouch/SwiftCouch.docc/GettingStarted.md, line 76
func snippet21() async throws {
    let client = SnippetContext.client
    let create = client.task(for: CreateDatabaseOperation(name: "albums-2024"))
    let write = client.task(for: PutDocumentOperation(
        database: "albums-2024", id: "blue", document: Album(title: "Blue", year: 1971))) { result in
        print(result)
    }
    write.addDependency(create)
    client.add(task: create)
    client.add(task: write)
    _ = create
    _ = write
}

// Sources/SwiftCouch/SwiftCouch.docc/LargeResultsAndFiles.md, line 18
func snippet22() async throws {
    let client = SnippetContext.client
    for try await row in client.rows(AllDocsOperation<Album>(database: "albums", options: .init(includeDocs: true))) {
        print(row.id ?? "", row.doc?.title ?? "")
    }
}

// Sources/SwiftCouch/SwiftCouch.docc/LargeResultsAndFiles.md, line 35
func snippet23() async throws {
    let client = SnippetContext.client
    let follower = ChangesFollower<Album>(client: client, database: "albums",
                                          options: .init(mode: .listen, includeDocs: true))
    for try await change in follower {
        print(change.id)
    }
    _ = follower
}

// Sources/SwiftCouch/SwiftCouch.docc/LargeResultsAndFiles.md, line 50
func snippet24() async throws {
    let client = SnippetContext.client
    let writer = BulkWriter<Album>(client: client, database: "albums")
    try await writer.add(Album(title: "Blue", year: 1971))
    let results = try await writer.finish()
    print(results.count)
    _ = writer
    _ = results
}

// Sources/SwiftCouch/SwiftCouch.docc/SwiftCouch.md, line 16
func snippet25() async throws {
    let client = SnippetContext.client
    let answer = try await client.value(AllDocsOperation<JSONValue>(database: "albums"))
    print(answer.rows.count)
    _ = answer
}

// Sources/SwiftCouch/SwiftCouch.docc/TestingWithSimulatedResponses.md, line 15
func snippet26() async throws {

    let run = Simulation.run(
        GetDocumentOperation<Album>(database: "albums", id: "a/b"),
        response: .json(200, #"{"_id":"a/b","_rev":"1-x","title":"Blue","year":1971}"#))
    #expect(run.request?.path == "/albums/a%2Fb")
    #expect(run.value?.title == "Blue")
    _ = run
}

// Sources/SwiftCouch/SwiftCouch.docc/TestingWithSimulatedResponses.md, line 30
func snippet27() async throws {

    let transport = SimulatedTransport(responses: [
        .json(201, #"{"ok":true,"id":"blue","rev":"1-a"}"#),
        .json(409, #"{"error":"conflict","reason":"Document update conflict."}"#),
    ])
    let client = Simulation.client(transport: transport)
    _ = try await client.value(
        PutDocumentOperation(database: "albums", id: "blue", document: Album(title: "Blue", year: 1971)))
    do {
        _ = try await client.value(
            PutDocumentOperation(database: "albums", id: "blue", document: Album(title: "Blue", year: 1972)))
    } catch {
        print(error.statusCode ?? 0)  // 409
    }
    print(transport.requests.count)  // 2
    _ = transport
    _ = client
}

// Sources/SwiftCouch/SwiftCouch.docc/WritingYourOwnOperation.md, line 16
func snippet28() async throws {
    let client = SnippetContext.client
    struct RevisionLimitOperation: JSONOperation {
        typealias Response = Int

        var database: String

        func validate() throws(CouchError) {
            try CouchValidation.validateDatabaseName(database)
        }

        var endpoint: CouchPath { CouchPath(database, "_revs_limit") }
    }

    let limit = try await client.value(RevisionLimitOperation(database: "albums"))
    _ = limit
}

// Sources/SwiftCouchTesting/SwiftCouchTesting.docc/SwiftCouchTesting.md, line 13
func snippet29() async throws {

    let run = Simulation.run(
        GetDocumentOperation<JSONValue>(database: "albums", id: "blue"),
        response: .json(200, #"{"_id":"blue","_rev":"1-x"}"#))
    #expect(run.request?.method == "GET")
    #expect(run.request?.path == "/albums/blue")
    _ = run
}

// Sources/SwiftCouchStore/SwiftCouchStore.docc/LocalDatabases.md, line 15
func snippet30() async throws {

    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("albums")
    let albums = try await LocalDatabase.open(at: directory)
    defer { albums.close() }

    let written = try await albums.bulk([
        Album(_id: "blue", title: "Blue", year: 1971),
        Album(_id: "court", title: "Court and Spark", year: 1974),
    ])
    print(written.count)
    do {
        _ = try await albums.get("hejira", as: Album.self)
    } catch {
        print(error.statusCode ?? 0, error.error ?? "", error.reason ?? "")   // 404 not_found missing
    }
    _ = directory
    _ = albums
    _ = written
}

// Sources/SwiftCouchStore/SwiftCouchStore.docc/LocalDatabases.md, line 54
func snippet31() async throws {
    func addYear(_ year: Int, to id: String, in store: some DocumentStore) async throws {
        var album = try await store.get(id, as: Album.self)
        album.year = year
        try await store.put(album, id: id, revision: album._rev)
    }
}

// Sources/SwiftCouchStore/SwiftCouchStore.docc/SwiftCouchStore.md, line 15
func snippet32() async throws {

    let store = try await LocalStore.open(at: FileManager.default.temporaryDirectory.appendingPathComponent("app"))
    let notes = try await store.database("notes")
    try await notes.put(Album(title: "Blue", year: 1971), id: "blue")
    store.close()
    _ = store
    _ = notes
}

// Sources/SwiftCouchSync/SwiftCouchSync.docc/SwiftCouchSync.md, line 16
func snippet33() async throws {
    let client = SnippetContext.client

    let local = try await LocalDatabase.open(at: FileManager.default.temporaryDirectory.appendingPathComponent("notes"))
    let replicator = Replicator(source: .remote(client.database("notes")), target: .local(local))
    let summary = try await replicator.run()
    print(summary.docsRead, summary.docsWritten, summary.docWriteFailures)
    _ = local
    _ = replicator
    _ = summary
}
