import Foundation
import SwiftCouch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A directory of local databases on this device: CouchDB's engine (CouchStore) in process, behind
/// SwiftCouch's API.
///
/// ```swift
/// let store = try await LocalStore.open(at: directory)
/// let notes = try await store.database("notes")
/// try await notes.put(Note(text: "offline"), id: "first")
/// store.close()
/// ```
///
/// A store holds any number of databases, as a CouchDB server does (an app may keep one per account,
/// or one per sync target); ``LocalDatabase/open(at:name:configuration:)`` opens a store with one
/// database for the common case. Every call runs through the same pipeline as a remote
/// `CouchDBClient`'s — validation, encoding (`configuration.dateCoding`), `CouchError` —
/// handed to the engine in process instead of over a socket, so a ``LocalDatabase`` and
/// `client.database(_:)` answer alike (see `DocumentStore`).
///
/// One store per directory: a second `open` of the same directory, from this process or another,
/// fails while the first is open (the directory is locked), since two engines writing the same
/// files would corrupt them. Close the store when done; its handles fail afterwards.
///
/// `Sendable`: share one store (and its database handles) across tasks.
public final class LocalStore: Sendable {
    /// The directory the store keeps its files in.
    public let directory: URL
    /// A client whose every request is answered in process by this store's engine: run any SwiftCouch
    /// operation on it (`store.client.execute(RevsDiffOperation(...))`).
    public let client: CouchDBClient
    private let connection: EngineConnection
    private let lock: DirectoryLock

    /// Opens the store in `directory`, creating the directory when it does not exist, and reads the
    /// databases kept there.
    /// - Parameters:
    ///   - directory: a file URL of a directory for the store alone.
    ///   - configuration: the client's configuration (`configuration.dateCoding`, logging,
    ///     `configuration.maximumConcurrentOperations`, limits). Its transport, authentication and
    ///     retry policy are the store's own: the transport is the engine, no retries (nothing
    ///     transient happens in process). Timeouts do not apply in process: a call ends when
    ///     the engine answers, the task is cancelled or the store closes. Defaults to SwiftCouch's
    ///     defaults.
    /// - Throws: `CouchError` when the directory cannot be created or read, or another store has
    ///   it open.
    public static func open(at directory: URL, configuration: Configuration = Configuration())
        async throws(CouchError) -> LocalStore
    {
        // Opening reads every database file: on a thread of its own, not Swift concurrency's.
        let opened = await handedOff(on: blockingWorkQueue("SwiftCouchStore.open")) {
            Result { () throws(CouchError) in try LocalStore(directory, configuration) }
        }
        return try opened.get()
    }

    private init(_ directory: URL, _ configuration: Configuration) throws(CouchError) {
        guard directory.isFileURL else {
            throw CouchError.validation("A local store needs a file URL, not \(directory.absoluteString).")
        }
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw CouchError(
                kind: .transport, message: "Could not create the local store's directory \(directory.path): \(error)",
                underlying: error)
        }
        self.directory = directory
        lock = try DirectoryLock(directory.appendingPathComponent("LOCK"))
        connection = try EngineConnection(directory: directory.appendingPathComponent("data", isDirectory: true))
        var configuration = configuration
        configuration.transport = EngineTransport(connection: connection)
        configuration.authentication = .basic
        configuration.retryPolicy = RetryPolicy(maximumRetries: 0)
        client = CouchDBClient(
            url: URL(string: "http://local.couchstore")!, credentials: nil, configuration: configuration)
    }

    /// A handle on the database `name`, created first when `create` is set and it does not exist.
    /// - Throws: `CouchError` 404 `not_found` when it does not exist and `create` is false; a
    ///   validation error for a name CouchDB would refuse.
    public func database(_ name: String, create: Bool = true) async throws(CouchError) -> LocalDatabase {
        let database = LocalDatabase(store: self, name: name)
        do {
            _ = try await database.info()
        } catch  where create && error.isNotFound {
            do {
                try await client.database(name).create()
            } catch  where error.statusCode == 412 {
                // Created meanwhile by another task.
            }
        }
        return database
    }

    /// The names of the store's databases, in order (`_users` and `_replicator`, which the engine
    /// keeps, included).
    public func databaseNames() async throws(CouchError) -> [String] {
        try await client.value(ListDatabasesOperation())
    }

    /// Deletes the database `name` and everything in it.
    public func deleteDatabase(_ name: String) async throws(CouchError) {
        try await client.database(name).delete()
    }

    /// The ids of the conflicted documents of `database`, from the engine's index.
    func conflictedDocumentIDs(inDatabase database: String) async throws(CouchError) -> [String] {
        let connection = self.connection
        // The engine's lock is taken on its own threads, never on Swift concurrency's.
        let found = await handedOff(on: connection.callQueue()) {
            connection.conflictedDocumentIDs(inDatabase: database)
        }
        guard let ids = found else {
            throw CouchError(
                kind: .http, message: "HTTP 404 not_found: Database does not exist.", statusCode: 404,
                error: "not_found", reason: "Database does not exist.", method: "GET", path: "/\(database)")
        }
        return ids
    }

    /// Closes the store: requests still waiting (change feeds) end, later calls fail, and the
    /// directory is unlocked for the next `open`. Calling it again does nothing.
    public func close() {
        client.shutdown()
        connection.close()
        lock.release()
    }

    deinit {
        connection.close()
        lock.release()
    }
}

/// An exclusive lock on a store's directory (`flock` on a file in it), held while the store is open.
final class DirectoryLock: @unchecked Sendable {
    // @unchecked: `descriptor` is only touched under `mutex`.
    private let mutex = NSLock()
    private var descriptor: Int32

    init(_ file: URL) throws(CouchError) {
        let fd = Foundation.open(file.path, O_RDWR | O_CREAT, 0o644)
        guard fd >= 0 else {
            throw CouchError(
                kind: .transport, message: "Could not open \(file.path): \(String(cString: strerror(errno))).")
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            Foundation.close(fd)
            throw CouchError(
                kind: .validation,
                message: "The local store at \(file.deletingLastPathComponent().path) is open already"
                    + " (in this process or another); close it first.")
        }
        descriptor = fd
    }

    func release() {
        mutex.withLock {
            guard descriptor >= 0 else { return }
            flock(descriptor, LOCK_UN)
            Foundation.close(descriptor)
            descriptor = -1
        }
    }
}
