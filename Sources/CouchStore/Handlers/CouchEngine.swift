import CouchQuery
import CouchGzip
import Foundation
import HTTPWire

/// CouchDB 3.5's engine over the databases of one directory (or of memory), answering the CouchDB API as request and
/// response values: no sockets, no authentication. Its caller says who makes each request (``UserContext``); the
/// engine applies the rules that depend on it (a database's `_security` members and admins, design documents need a
/// database admin, server-wide endpoints need a server admin, `userCtx` in `validate_doc_update`).
///
/// Thread-safe: `handle(_:user:)` may be called from many threads at once. The list of databases sits behind one
/// short-held lock; each database has its own lock (see `Database`), and waiting change feeds hold no lock at all.
public final class CouchEngine: @unchecked Sendable {
    // Safe: `databases`, `closed` and `host` are only touched under `stateLock`; everything else is immutable or is
    // itself thread-safe (UUIDGenerator, JavaScriptFunctions, Database).

    /// How the engine is set up.
    public struct Options: Sendable {
        /// Where to keep data so that the next engine on the directory finds it; nil keeps everything in memory.
        /// Defaults to nil.
        public var dataDirectory: URL? = nil
        /// Whether a write waits for the disk (`fsync`) before it is acknowledged. Defaults to true. When false,
        /// every acknowledged write is still in the database's file (written with `pwrite` before the answer, read
        /// back with `pread`), so a crash of the process loses nothing, but a crash of the machine (or a power
        /// loss) may lose acknowledged writes. For tests and throwaway data only. No effect without
        /// ``dataDirectory``.
        public var synchronousWrites: Bool = true

        /// The defaults: everything in memory.
        public init() {}
    }

    /// The options the engine was created with.
    public let options: Options
    /// The server's uuid (`GET /` answers it), kept in the data directory.
    public let serverUUID: String

    let uuids = UUIDGenerator()
    /// Design documents' JavaScript, compiled per design document revision.
    let javaScript = JavaScriptFunctions()
    private let dataDirectory: DataDirectory?
    private let stateLock = NSLock()
    private var databases: [String: Database] = [:]
    /// Databases whose files could not be opened (damage in the middle), with what was found.
    private var damagedDatabases: [String: String] = [:]
    private var closed = false
    private weak var _host: (any EngineHost)?

    /// Creates the engine; with `options.dataDirectory` set, loads every database kept there.
    public init(options: Options = Options()) throws {
        self.options = options
        var uuid = Crypto.hex(Crypto.randomBytes(16))
        if let root = options.dataDirectory {
            let dir = DataDirectory(root: root)
            try dir.prepare()
            if let state = dir.readServerState(), let u = state["uuid"]?.stringValue {
                uuid = u
            } else {
                try dir.writeServerState(["uuid": .string(uuid)])
            }
            dataDirectory = dir
        } else {
            dataDirectory = nil
        }
        serverUUID = uuid
        if let dir = dataDirectory { try loadDatabases(dir) }
    }

    /// The server around the engine (see ``EngineHost``); nil for an engine used on its own. Held weakly: the host
    /// owns the engine.
    package var host: (any EngineHost)? {
        get {
            stateLock.lock()
            defer { stateLock.unlock() }
            return _host
        }
        set {
            stateLock.lock()
            _host = newValue
            stateLock.unlock()
        }
    }

    private func loadDatabases(_ dir: DataDirectory) throws {
        for url in try dir.databaseFiles() {
            let db: Database
            do {
                db = try Database.open(at: url, synchronousWrites: options.synchronousWrites)
            } catch {
                // A damaged file: its database answers 500 with what was found (see `database(named:)`).
                if let name = DataDirectory.databaseName(of: url) { damagedDatabases[name] = "\(error)" }
                continue
            }
            attachNotifier(db)
            databases[db.name] = db
        }
    }

    // MARK: - Databases

    /// What was found wrong with a database's file when it could not be opened.
    func damageOfDatabase(named name: String) -> String? {
        stateLock.lock()
        defer { stateLock.unlock() }
        return damagedDatabases[name]
    }

    func database(named name: String) -> Database? {
        stateLock.lock()
        defer { stateLock.unlock() }
        return databases[name]
    }

    func allDatabaseNames() -> [String] {
        stateLock.lock()
        defer { stateLock.unlock() }
        return databases.keys.sorted(by: idLess)
    }

    /// Reports every committed document write of a database to the host. The closure holds the database weakly: the
    /// database holds the closure, and a strong hold back would keep every database (and its whole index) alive after
    /// it is deleted or its engine closed.
    private func attachNotifier(_ db: Database) {
        db.onDocumentCommit = { [weak self, weak db] id in
            guard let db else { return }
            self?.host?.documentCommitted(DatabaseHandle(db), id: id)
        }
    }

    func createDatabase(name: String, partitioned: Bool, q: Int, n: Int) -> Result<Database, CouchError> {
        let result = createDatabaseLocked(name: name, partitioned: partitioned, q: q, n: n)
        if case .success(let db) = result {
            attachNotifier(db)
            host?.databaseCreated(DatabaseHandle(db))
        }
        return result
    }

    private func createDatabaseLocked(name: String, partitioned: Bool, q: Int, n: Int) -> Result<Database, CouchError> {
        stateLock.lock()
        defer { stateLock.unlock() }
        if closed { return .failure(CouchError.shuttingDown) }
        if databases[name] != nil {
            return .failure(
                CouchError(412, "file_exists", "The database could not be created, the file already exists."))
        }
        if damagedDatabases[name] != nil {
            return .failure(
                CouchError(412, "file_exists", "The database could not be created, the file already exists."))
        }
        var db = Database(
            name: name, instanceStartTime: Int(Date().timeIntervalSince1970), partitioned: partitioned, q: q, n: n)
        if let dir = dataDirectory {
            let url = dir.fileURL(for: name)
            if FileManager.default.fileExists(atPath: url.path) {
                // Another engine on this directory owns it.
                return .failure(
                    CouchError(412, "file_exists", "The database could not be created, the file already exists."))
            }
            do throws(CouchError) {
                db = try Database.create(
                    at: url, name: name, instanceStartTime: db.instanceStartTime, partitioned: partitioned, q: q, n: n,
                    synchronousWrites: options.synchronousWrites)
            } catch {
                return .failure(error)
            }
        }
        databases[name] = db
        return .success(db)
    }

    func deleteDatabase(name: String) -> Bool {
        stateLock.lock()
        let db = closed ? nil : databases.removeValue(forKey: name)
        stateLock.unlock()
        guard let db else { return false }
        db.withLock {
            db.isDeleted = true
            if let file = db.file {
                file.close()
                try? FileManager.default.removeItem(at: IndexSnapshot.url(for: file.url))
                try? FileManager.default.removeItem(at: file.url)
                try? StoreFile.syncDirectory(of: file.url)
            }
            db.file = nil
            db.cond.broadcast()
        }
        host?.databaseDeleted(name)
        return true
    }

    /// Whether ``close()`` was called.
    package var isClosed: Bool {
        stateLock.lock()
        defer { stateLock.unlock() }
        return closed
    }

    // MARK: - Requests

    /// Answers one request made by `user`, as CouchDB 3.5 answers it (`HEAD` answers with the headers of `GET` and
    /// no body). The request's headers are never read for authentication: `user` is who makes it.
    public func handle(_ request: ServerRequest, user: UserContext) -> ServerResponse {
        var response = respond(to: request, user: user)
        Self.finishHead(request, &response)
        return response
    }

    /// Answers one request made by `user`, with the full body even for `HEAD` (a server around the engine adds
    /// its own headers first, then calls ``finishHead(_:_:)``).
    package func respond(to request: ServerRequest, user: UserContext) -> ServerResponse {
        if isClosed { return Reply.error(CouchError.shuttingDown) }
        var request = request
        let segments = request.pathSegments
        if request.bodySource != nil,
            !ServerRequest.streamsBody(
                method: request.method, pathSegments: segments, contentType: request.headers["Content-Type"])
        {
            // Only an attachment upload (standalone or multipart) reads its body as it goes.
            do throws(CouchError) {
                try request.readWholeBody()
            } catch {
                return Reply.error(error)
            }
        }
        let ctx = RequestContext(request: request, segments: segments, user: user)
        var (response, scope): (ServerResponse, RequestScope) = RequestScope.run { () -> ServerResponse in
            do throws(CouchError) {
                return try route(ctx)
            } catch {
                return Reply.error(error)
            }
        }
        // One durable sync per database written, before the answer: a write acknowledged is on disk.
        for db in scope.dirty {
            do throws(CouchError) {
                try db.withLock { () throws(CouchError) in try db.syncFile() }
            } catch {
                response = Reply.error(error)
            }
        }
        if let failure = scope.readFailure {
            response = Reply.error(CouchError(500, "file_error", "a stored document could not be read: \(failure)"))
        }
        return response
    }

    /// Drops the body of the answer to a `HEAD` request, keeping its `Content-Length` (a streamed body of known
    /// length, an attachment's, is not read at all).
    package static func finishHead(_ request: ServerRequest, _ response: inout ServerResponse) {
        guard request.method == "HEAD" else { return }
        switch response.body {
        case .data(let data):
            response.headers.set("Content-Length", String(data.count))
            response.body = .empty
        case .stream where response.headers.contains("Content-Length"):
            response.body = .empty
        case .stream, .empty:
            break
        }
    }

    /// Flushes anything kept in `dataDirectory` and stops background work (continuous feeds end).
    public func close() {
        stateLock.lock()
        closed = true
        let all = Array(databases.values)
        stateLock.unlock()
        for db in all {
            db.withLock {
                db.writeSnapshot()
                db.file?.close()
                db.cond.broadcast()
            }
        }
    }
}

/// A request with what the engine worked out about it.
struct RequestContext {
    let request: ServerRequest
    let segments: [String]
    let user: UserContext

    var method: String { request.method }
}

/// CouchDB's default uuid algorithm (`sequential`): a random 26-hex-digit prefix and a 6-digit counter
/// that grows by small random steps.
final class UUIDGenerator: @unchecked Sendable {
    // Safe: state only touched under `lock`.
    private let lock = NSLock()
    private var prefix = Crypto.hex(Crypto.randomBytes(13))
    private var counter = Int.random(in: 0..<0x1000)

    func next() -> String {
        lock.lock()
        defer { lock.unlock() }
        counter += Int.random(in: 1...0xffe)
        if counter >= 0x1000000 {
            prefix = Crypto.hex(Crypto.randomBytes(13))
            counter = Int.random(in: 0..<0x1000)
        }
        let hex = String(counter, radix: 16)
        return prefix + String(repeating: "0", count: 6 - hex.count) + hex
    }
}
