import CouchQuery
import CouchGzip
import Foundation
import HTTPWire

/// The CouchDB behaviour of the TestServer: every endpoint, answered as Apache CouchDB 3.5 does.
///
/// Thread-safe: the HTTP layer calls `handle(_:)` from many connection threads at once. The list of
/// databases sits behind one short-held lock; each database has its own lock (see `Database`), and
/// waiting change feeds hold no lock at all.
public final class CouchEngine: RequestHandler, @unchecked Sendable {
    // Safe: `databases` and `closed` are only touched under `stateLock`; everything else is immutable
    // or is itself thread-safe (SessionState, Clock, UUIDGenerator, Database).

    /// How the engine is set up.
    public struct Options: Sendable {
        /// The server admin's name. Defaults to `admin`.
        public var adminName: String = "admin"
        /// The server admin's password. Defaults to `password`.
        public var adminPassword: String = "password"
        /// Lifetime of an `AuthSession` cookie in seconds (CouchDB's `[chttpd_auth] timeout`). Defaults to 600.
        public var sessionTimeout: Int = 600
        /// Where to keep data so that a restart keeps it; nil keeps everything in memory. Defaults to nil.
        public var dataDirectory: URL? = nil
        /// PBKDF2 iterations used when a `_users` document's password is hashed (CouchDB 3.5: 600000).
        /// Lower it in tests that create many users: every new password costs this many HMAC rounds.
        public var passwordIterations: Int = 600_000
        /// IBM Cloud IAM API keys the token endpoint (`POST /_iam/identity/token`) accepts, each with the identity
        /// its bearer tokens authenticate as. Defaults to none.
        public var iamAPIKeys: [String: IAMIdentity] = [:]
        /// Lifetime in seconds of the bearer tokens the token endpoint issues (IAM's `expires_in`). Defaults to 3600.
        public var iamTokenLifetime: Int = 3600
        /// The secret of HS256 JWTs accepted as `Authorization: Bearer <jwt>` (CouchDB's `[jwt_auth]` with an
        /// `hmac:_default` key, which holds these bytes base64-encoded); the user is the `sub` claim, the roles
        /// are `_couchdb.roles`, and `exp` is required. nil (the default) turns JWT authentication off.
        public var jwtSecret: String? = nil
        /// Whether JSON responses of at least 1 KiB are sent gzip-compressed (`Content-Encoding: gzip`) to requests
        /// that send `Accept-Encoding: gzip`. CouchDB 3.5 itself never compresses JSON responses, so this is off
        /// by default; turn it on to test a client's handling of compressed responses.
        public var gzipJSONResponses: Bool = false

        /// How many CouchDB nodes the server behaves as (see ``ClusterState``). Defaults to 1.
        public var nodes: Int = 1
        /// On a cluster, how many seconds secondary reads may lag behind writes (see
        /// ``ClusterState``). Defaults to 0: every read sees every write.
        public var replicaLag: Double = 0

        /// The defaults: admin `admin`/`password`, 600 s sessions, in memory, CouchDB's 600000 PBKDF2 iterations.
        public init() {}
    }

    /// The options the engine was created with.
    public let options: Options

    let clock = Clock()
    let sessions: SessionState
    let tokens = TokenStore()
    let serverUUID: String
    let adminSalt: String
    let uuids = UUIDGenerator()
    let node: NodeState
    let cluster: ClusterState
    /// Design documents' JavaScript, compiled per design document revision.
    let javaScript = JavaScriptFunctions()
    let scheduler = ReplicationScheduler()
    private let replicatorQueue = DispatchQueue(label: "CouchEngine.replicator")
    private let dataDirectory: DataDirectory?
    private let stateLock = NSLock()
    private var databases: [String: Database] = [:]
    /// Databases whose files could not be opened (damage in the middle), with what was found.
    private var damagedDatabases: [String: String] = [:]
    private var closed = false

    /// Creates the engine; with `options.dataDirectory` set, loads every database kept there.
    public init(options: Options = Options()) throws {
        self.options = options
        cluster = ClusterState(nodes: options.nodes, replicaLag: options.replicaLag)
        var secret = Crypto.randomBytes(32)
        var uuid = Crypto.hex(Crypto.randomBytes(16))
        if let root = options.dataDirectory {
            let dir = DataDirectory(root: root)
            try dir.prepare()
            if let state = dir.readServerState() {
                if let s = state["secret"]?.stringValue, let d = Crypto.fromHex(s) { secret = d }
                if let u = state["uuid"]?.stringValue { uuid = u }
            } else {
                try dir.writeServerState(["uuid": .string(uuid), "secret": .string(Crypto.hex(secret))])
            }
            dataDirectory = dir
        } else {
            dataDirectory = nil
        }
        serverUUID = uuid
        node = NodeState(options: options, uuid: uuid)
        sessions = SessionState(secret: secret)
        adminSalt = Crypto.hex(Crypto.md5(Data((uuid + options.adminName).utf8)))
        if let dir = dataDirectory { try loadDatabases(dir) }
        for system in ["_users", "_replicator"] where database(named: system) == nil {
            _ = try? createDatabase(name: system, partitioned: false, q: 1, n: 1).get()
        }
        ensureAuthDesignDocument()
        // Resume the jobs of replication documents kept in the data directory.
        if let replicator = database(named: "_replicator") {
            let ids = replicator.withLock { replicator.sortedIDs }
            for id in ids { replicator.onDocumentCommit?(id) }
        }
    }

    private func loadDatabases(_ dir: DataDirectory) throws {
        for url in try dir.databaseFiles() {
            let db: Database
            do {
                db = try Database.open(at: url)
            } catch {
                // A damaged file: its database answers 500 with what was found (see `database(named:)`).
                if let name = DataDirectory.databaseName(of: url) { damagedDatabases[name] = "\(error)" }
                continue
            }
            attachNotifier(db)
            databases[db.name] = db
            if db.name == "_global_changes" { node.globalChangesDatabase(exists: true) }
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

    /// Reports every committed write of a database to `_db_updates`.
    private func attachNotifier(_ db: Database) {
        let node = self.node
        let name = db.name
        db.onCommit = { node.noteUpdate(name, "updated") }
        if name == "_replicator" {
            db.onDocumentCommit = { [weak self] id in
                self?.replicatorQueue.async { [weak self] in
                    guard let self, !self.isClosed else { return }
                    self.replicatorDocumentChanged(db, id: id)
                }
            }
        }
    }

    /// The validation function of `_users/_design/_auth`, as CouchDB keeps one there. The engine
    /// enforces the same rules natively (see Auth.swift); this is the document clients read.
    static let authValidateFunction = """
        function(newDoc, oldDoc, userCtx, secObj) {
          var isAdmin = userCtx.roles.indexOf('_admin') !== -1;
          if (newDoc._deleted === true) {
            if (!isAdmin && oldDoc && oldDoc.name !== userCtx.name) {
              throw({forbidden: 'Only admins may delete other user docs.'});
            }
            return;
          }
          if (newDoc.type !== 'user') { throw({forbidden: 'doc.type must be user'}); }
          if (!newDoc.name) { throw({forbidden: 'doc.name is required'}); }
          if (!newDoc.roles) { throw({forbidden: 'doc.roles must exist'}); }
          if (!isArray(newDoc.roles)) { throw({forbidden: 'doc.roles must be an array'}); }
          for (var i = 0; i < newDoc.roles.length; i++) {
            if (typeof newDoc.roles[i] !== 'string') { throw({forbidden: 'doc.roles can only contain strings'}); }
          }
          if (newDoc._id !== 'org.couchdb.user:' + newDoc.name) {
            throw({forbidden: 'Doc ID must be of the form org.couchdb.user:name'});
          }
          if (oldDoc && oldDoc.name !== newDoc.name) { throw({forbidden: 'Usernames can not be changed.'}); }
          if (newDoc.name.charAt(0) === '_') { throw({forbidden: 'Username may not start with underscore.'}); }
          if (newDoc.name.indexOf(':') !== -1) { throw({forbidden: 'Character `:` is not allowed in usernames.'}); }
          if (!isAdmin) {
            if (oldDoc && oldDoc.name !== userCtx.name) { throw({forbidden: 'You may only update your own user document.'}); }
            var oldRoles = oldDoc ? oldDoc.roles : [];
            if (JSON.stringify(oldRoles.slice().sort()) !== JSON.stringify(newDoc.roles.slice().sort())) {
              throw({forbidden: 'Only _admin may edit roles'});
            }
          }
        }
        """

    /// Creates `_users/_design/_auth` when `_users` exists without it, as CouchDB does.
    func ensureAuthDesignDocument() {
        guard let users = database(named: "_users") else { return }
        users.withLock {
            guard users.docs["_design/_auth"] == nil else { return }
            let body: JSON = [
                "language": "javascript", "validate_doc_update": .string(Self.authValidateFunction),
            ]
            _ = try? users.updateInteractive(
                id: "_design/_auth", baseRev: nil, deleted: false, body: body, attachments: [])
        }
    }

    func createDatabase(name: String, partitioned: Bool, q: Int, n: Int) -> Result<Database, CouchError> {
        let result = createDatabaseLocked(name: name, partitioned: partitioned, q: q, n: n)
        if case .success(let db) = result {
            attachNotifier(db)
            cluster.databaseCreated(db)
            if name == "_global_changes" { node.globalChangesDatabase(exists: true) }
            node.noteUpdate(name, "created")
            if name == "_users" { ensureAuthDesignDocument() }
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
        var db = Database(name: name, instanceStartTime: Int(clock.now), partitioned: partitioned, q: q, n: n)
        if let dir = dataDirectory {
            let url = dir.fileURL(for: name)
            if FileManager.default.fileExists(atPath: url.path) {
                // Another engine on this directory owns it.
                return .failure(
                    CouchError(412, "file_exists", "The database could not be created, the file already exists."))
            }
            do throws(CouchError) {
                db = try Database.create(
                    at: url, name: name, instanceStartTime: db.instanceStartTime, partitioned: partitioned, q: q, n: n)
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
                try? FileManager.default.removeItem(at: file.url)
                try? StoreFile.syncDirectory(of: file.url)
            }
            db.file = nil
            db.cond.broadcast()
        }
        if name == "_global_changes" { node.globalChangesDatabase(exists: false) }
        node.noteUpdate(name, "deleted")
        cluster.forget(name)
        return true
    }

    var isClosed: Bool {
        stateLock.lock()
        defer { stateLock.unlock() }
        return closed
    }

    // MARK: - Requests

    /// Answers one request.
    public func handle(_ request: ServerRequest) -> ServerResponse {
        if isClosed { return Reply.error(CouchError.shuttingDown) }
        let user: UserContext
        let refresh: String?
        do {
            (user, refresh) = try identify(request)
        } catch {
            return Reply.error(error)
        }
        let ctx = RequestContext(request: request, segments: request.pathSegments, user: user)
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
        if let refresh, !response.headers.contains("Set-Cookie") {
            response.headers.add("Set-Cookie", refresh)
        }
        if options.gzipJSONResponses { compressIfAccepted(request, &response) }
        if request.method == "HEAD", case .data(let data) = response.body {
            response.headers.set("Content-Length", String(data.count))
            response.body = .empty
        }
        return response
    }

    /// Gzips a JSON body of at least 1 KiB when the client accepts gzip (`gzipJSONResponses`).
    private func compressIfAccepted(_ request: ServerRequest, _ response: inout ServerResponse) {
        guard case .data(let data) = response.body, data.count >= 1024, !response.headers.contains("Content-Encoding"),
            (response.headers["Content-Type"] ?? "").hasPrefix("application/json")
        else { return }
        let accepted = (request.headers["Accept-Encoding"] ?? "").lowercased().split(separator: ",").contains {
            let coding = $0.split(separator: ";")
            guard coding.first?.trimmingCharacters(in: .whitespaces) == "gzip" else { return false }
            return !coding.dropFirst().contains { $0.replacingOccurrences(of: " ", with: "") == "q=0" }
        }
        guard accepted else { return }
        response.body = .data(ZlibCompatibleGzip.compress(data))
        response.headers.set("Content-Encoding", "gzip")
        response.headers.add("Vary", "Accept-Encoding")
    }

    /// Makes every `AuthSession` cookie and IAM bearer token issued so far invalid, as if its lifetime had run out.
    public func expireAllSessions() {
        tokens.revokeAll()
        let secret = sessions.rotate()
        if let dir = dataDirectory {
            try? dir.writeServerState(["uuid": .string(serverUUID), "secret": .string(Crypto.hex(secret))])
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
                try? db.syncFile()
                db.file?.close()
                db.cond.broadcast()
            }
        }
        node.withLock { node.cond.broadcast() }
    }

    /// Moves the engine's clock forward (tests of cookie expiry and renewal).
    func advanceClock(by seconds: TimeInterval) { clock.advance(by: seconds) }
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
