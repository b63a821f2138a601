import CouchGzip
import CouchQuery
import CouchStore
import Foundation
import HTTPWire

/// The TestServer's CouchDB: CouchStore's ``CouchEngine`` with what a server adds around it. It authenticates each
/// request (cookies, Basic, IAM tokens, JWTs: `_session`, `_iam/identity/token`, `_users` password hashing) and passes
/// it on with the user it found; it answers the server endpoints (`_node`, `_membership`, `_db_updates`,
/// `_replicate`, `_scheduler`), runs the `_replicator` database's jobs, and simulates a cluster (writes answered 202
/// with nodes down, lagging reads). Everything else is the engine's.
///
/// Thread-safe: the HTTP layer calls `handle(_:)` from many connection threads at once.
public final class ServerEngine: RequestHandler, EngineHost, @unchecked Sendable {
    // Safe: every member is immutable or is itself thread-safe (CouchEngine, ServerClock, SessionState, TokenStore,
    // NodeState, ClusterState, ReplicationScheduler).

    /// How the server is set up.
    public struct Options: Sendable {
        /// The server admin's name. Defaults to `admin`.
        public var adminName: String = "admin"
        /// The server admin's password. Defaults to `password`.
        public var adminPassword: String = "password"
        /// Lifetime of an `AuthSession` cookie in seconds (CouchDB's `[chttpd_auth] timeout`). Defaults to 600.
        public var sessionTimeout: Int = 600
        /// Where to keep data so that a restart keeps it. Defaults to nil: the databases live in a private temporary
        /// directory, removed when the server is closed (or deallocated), so a restart starts empty; see
        /// ``inMemoryOnly`` for the old memory-only engine.
        public var dataDirectory: URL? = nil
        /// Whether a write waits for the disk (`fsync`) before it is acknowledged (CouchStore's
        /// `CouchEngine.Options.synchronousWrites`). Defaults to nil: true with a ``dataDirectory``, false for the
        /// private temporary directory (whose data does not outlive the server anyway). When false a crash of the
        /// machine, not of the process, may lose acknowledged writes.
        public var synchronousWrites: Bool? = nil
        /// With no ``dataDirectory``: keep databases in memory only, with no file at all (bodies and attachments
        /// in RAM), as the TestServer did before it stored every database in a file. Defaults to false. Ignored
        /// when ``dataDirectory`` is set.
        public var inMemoryOnly: Bool = false
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

        /// The defaults: admin `admin`/`password`, 600 s sessions, a private temporary data directory without
        /// `fsync`, CouchDB's 600000 PBKDF2 iterations.
        public init() {}
    }

    /// The options the server was created with.
    public let options: Options
    /// The engine every database request goes to.
    public let store: CouchEngine
    /// Where the databases' files are: ``Options/dataDirectory``, or the private temporary directory made when it is
    /// nil (removed by ``close()``); nil only with ``Options/inMemoryOnly``.
    public let storageDirectory: URL?
    /// The private temporary directory this server made and removes, if any.
    private let temporaryDirectory: URL?

    let clock = ServerClock()
    let sessions: SessionState
    let tokens = TokenStore()
    let adminSalt: String
    let node: NodeState
    let cluster: ClusterState
    let scheduler = ReplicationScheduler()
    let replicatorQueue = DispatchQueue(label: "ServerEngine.replicator")
    /// Where the cookie secret is kept (in the data directory), so that sessions survive a restart.
    private let secretFile: URL?

    /// Creates the server; with `options.dataDirectory` set, the engine loads every database kept there and the
    /// jobs of the `_replicator` database resume.
    public init(options: Options = Options()) throws {
        self.options = options
        var storeOptions = CouchEngine.Options()
        if let directory = options.dataDirectory {
            storeOptions.dataDirectory = directory
            storeOptions.synchronousWrites = options.synchronousWrites ?? true
            temporaryDirectory = nil
        } else if options.inMemoryOnly {
            temporaryDirectory = nil
        } else {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "swiftcouch-testserver-\(UUID().uuidString)", isDirectory: true)
            storeOptions.dataDirectory = directory
            storeOptions.synchronousWrites = options.synchronousWrites ?? false
            temporaryDirectory = directory
            TemporaryDirectories.register(directory)
        }
        storageDirectory = storeOptions.dataDirectory
        do {
            store = try CouchEngine(options: storeOptions)
        } catch {
            if let temporaryDirectory { TemporaryDirectories.remove(temporaryDirectory) }
            throw error
        }
        cluster = ClusterState(nodes: options.nodes, replicaLag: options.replicaLag)
        node = NodeState(options: options, uuid: store.serverUUID)
        var secret = Crypto.randomBytes(32)
        if let root = options.dataDirectory {
            let file = root.appendingPathComponent("testserver-auth.json")
            if let data = try? Data(contentsOf: file), let state = try? JSON.parse(data),
                let hex = state["secret"]?.stringValue, let saved = Crypto.fromHex(hex)
            {
                secret = saved
            } else {
                try Self.writeSecret(secret, to: file)
            }
            secretFile = file
        } else {
            secretFile = nil
        }
        sessions = SessionState(secret: secret)
        adminSalt = Crypto.hex(Crypto.md5(Data((store.serverUUID + options.adminName).utf8)))
        store.host = self
        if store.databaseNames.contains("_global_changes") { node.globalChangesDatabase(exists: true) }
        for system in ["_users", "_replicator"] where store.handle(ofDatabase: system) == nil {
            _ = store.handle(storeRequest("PUT", "/\(system)?q=1&n=1"), user: .admin)
        }
        ensureAuthDesignDocument()
        // Resume the jobs of replication documents kept in the data directory.
        if let replicator = store.handle(ofDatabase: "_replicator") {
            for id in replicator.documentIDs { documentCommitted(replicator, id: id) }
        }
    }

    private static func writeSecret(_ secret: Data, to file: URL) throws {
        let state: JSON = ["secret": .string(Crypto.hex(secret))]
        try Data(state.serialized.utf8).write(to: file, options: .atomic)
    }

    /// The server's uuid (`GET /`, `_node/_local/_config/couchdb/uuid`).
    public var serverUUID: String { store.serverUUID }

    /// A request the server makes to its own engine (as an admin, with no HTTP in between).
    func storeRequest(_ method: String, _ path: String, json: JSON? = nil) -> ServerRequest {
        var headers = HTTPHeaders()
        headers.add("Host", "127.0.0.1:5984")
        if json != nil { headers.add("Content-Type", "application/json") }
        let parts = path.split(separator: "?", maxSplits: 1)
        return ServerRequest(
            method: method, rawPath: String(parts[0]), rawQuery: parts.count > 1 ? String(parts[1]) : nil,
            headers: headers, body: json.map { Data($0.serialized.utf8) } ?? Data())
    }

    // MARK: - Requests

    /// Answers one request: authenticates it, answers the server's own endpoints, and passes the rest to the engine
    /// with the user it found.
    public func handle(_ request: ServerRequest) -> ServerResponse {
        if store.isClosed { return Reply.error(CouchError.shuttingDown) }
        let identity: Identity
        let refresh: String?
        do {
            (identity, refresh) = try identify(request)
        } catch {
            return Reply.error(error)
        }
        var response: ServerResponse
        do {
            let ctx = ServerContext(request: request, segments: request.pathSegments, identity: identity)
            response = try serverEndpoint(ctx) ?? store.respond(to: request, user: identity.user)
        } catch {
            response = Reply.error(error)
        }
        if let refresh, !response.headers.contains("Set-Cookie") {
            response.headers.add("Set-Cookie", refresh)
        }
        if options.gzipJSONResponses { compressIfAccepted(request, &response) }
        CouchEngine.finishHead(request, &response)
        return response
    }

    /// The server endpoints answered here rather than by the engine; nil for every other request.
    private func serverEndpoint(_ ctx: ServerContext) throws(CouchError) -> ServerResponse? {
        guard let first = ctx.segments.first else { return nil }
        switch first {
        case "_session":
            return try handleSession(ctx)
        case "_iam":
            return try iamToken(ctx)
        case "_membership":
            try requireServerAdmin(ctx.user)
            try requireMethods(ctx, "GET,HEAD")
            let nodes = JSON.array(cluster.nodeNames.map(JSON.string))
            return Reply.json(200, ["all_nodes": nodes, "cluster_nodes": nodes])
        case "_scheduler":
            try requireServerAdmin(ctx.user)
            try requireMethods(ctx, "GET,HEAD")
            return try schedulerEndpoint(ctx)
        case "_replicate":
            if ctx.user.isAnonymous { throw CouchError.notServerAdmin }
            return try replicate(ctx)
        case "_node":
            try requireServerAdmin(ctx.user)
            return try nodeEndpoint(ctx)
        case "_db_updates":
            // global_changes_httpd: any method but GET (HEAD is a GET to chttpd) is 405, before who asks is checked.
            guard ctx.method == "GET" || ctx.method == "HEAD" else { throw CouchError.methodNotAllowed("GET") }
            try requireServerAdmin(ctx.user)
            return try dbUpdates(ctx)
        default:
            return nil
        }
    }

    func requireServerAdmin(_ user: UserContext) throws(CouchError) {
        if !user.isServerAdmin { throw CouchError.notServerAdmin }
    }

    private func requireMethods(_ ctx: ServerContext, _ allowed: String) throws(CouchError) {
        if !allowed.split(separator: ",").contains(Substring(ctx.method)) {
            throw CouchError.methodNotAllowed(allowed)
        }
    }

    /// Gzips a JSON body of at least 1 KiB when the client accepts gzip (`gzipJSONResponses`). A streamed JSON
    /// body (rows, a normal `_changes` feed) is collected whole first: this test option trades streaming for it.
    private func compressIfAccepted(_ request: ServerRequest, _ response: inout ServerResponse) {
        guard !response.headers.contains("Content-Encoding"),
            (response.headers["Content-Type"] ?? "").hasPrefix("application/json")
        else { return }
        let data: Data
        switch response.body {
        case .data(let whole) where whole.count >= 1024:
            data = whole
        case .stream
        where !response.headers.contains("Content-Length") && request.method != "HEAD"
            && Self.acceptsGzip(request) && !Self.isFeed(request):
            guard let whole = Reply.collect(response.body) else { return }
            response.body = .data(whole)
            guard whole.count >= 1024 else { return }
            data = whole
        default:
            return
        }
        guard Self.acceptsGzip(request) else { return }
        response.body = .data(ZlibCompatibleGzip.compress(data))
        response.headers.set("Content-Encoding", "gzip")
        response.headers.add("Vary", "Accept-Encoding")
    }

    private static func acceptsGzip(_ request: ServerRequest) -> Bool {
        (request.headers["Accept-Encoding"] ?? "").lowercased().split(separator: ",").contains {
            let coding = $0.split(separator: ";")
            guard coding.first?.trimmingCharacters(in: .whitespaces) == "gzip" else { return false }
            return !coding.dropFirst().contains { $0.replacingOccurrences(of: " ", with: "") == "q=0" }
        }
    }

    /// Whether the request is for a feed that waits for changes (never collected whole).
    private static func isFeed(_ request: ServerRequest) -> Bool {
        guard let feed = request.queryValue("feed") else { return false }
        return feed != "normal"
    }

    /// Makes every `AuthSession` cookie and IAM bearer token issued so far invalid, as if its lifetime had run out.
    public func expireAllSessions() {
        tokens.revokeAll()
        let secret = sessions.rotate()
        if let secretFile { try? Self.writeSecret(secret, to: secretFile) }
    }

    /// Flushes anything kept in `dataDirectory` and stops background work (continuous feeds and replications end);
    /// the private temporary directory (see ``storageDirectory``) is removed.
    public func close() {
        store.close()
        node.withLock { node.cond.broadcast() }
        if let temporaryDirectory { TemporaryDirectories.remove(temporaryDirectory) }
    }

    deinit {
        if let temporaryDirectory {
            store.close()
            TemporaryDirectories.remove(temporaryDirectory)
        }
    }

    /// Whether ``close()`` was called.
    var isClosed: Bool { store.isClosed }

    /// Moves the server's clock forward (tests of cookie and token expiry).
    func advanceClock(by seconds: TimeInterval) { clock.advance(by: seconds) }

    // MARK: - EngineHost

    package func placementDefaults() -> (q: Int, n: Int, maxCopies: Int) {
        // The node's `[cluster] q` (set through _config), else CouchDB 3's default of 2.
        let configuredQ = node.withLock { node.config["cluster"]?["q"] }.flatMap { Int($0) }
        return (configuredQ ?? 2, cluster.defaultCopies, cluster.nodeNames.count)
    }

    package func nodes(ofShard shard: Int, copies: Int) -> [String] { cluster.nodes(ofShard: shard, copies: copies) }

    package func willWrite(_ db: DatabaseHandle, ids: [String]) throws(EngineError) {
        try requireWritableCopies(db, ids: ids)
    }

    package func writeStatus(_ db: DatabaseHandle, ids: [String], request: ServerRequest) throws(EngineError) -> Int {
        try clusterWriteStatus(db, ids: ids, request: request)
    }

    package func readCopy(of db: DatabaseHandle) -> DatabaseHandle { cluster.readCopy(of: db) }

    package func beforeDocumentUpdate(
        _ db: DatabaseHandle, id: String, deleted: Bool, body: inout JSON, user: UserContext
    ) throws(EngineError) {
        if db.name == "_users", !id.hasPrefix("_design/"), !deleted { try validateUserDocument(&body, id: id) }
    }

    package func enforcesValidation(ofDesignDocument id: String, in database: String) -> Bool {
        database == "_users" && id == "_design/_auth"
    }

    package func databaseCreated(_ db: DatabaseHandle) {
        cluster.databaseCreated(db)
        if db.name == "_global_changes" { node.globalChangesDatabase(exists: true) }
        node.noteUpdate(db.name, "created")
        if db.name == "_users" { ensureAuthDesignDocument() }
    }

    package func databaseDeleted(_ name: String) {
        if name == "_global_changes" { node.globalChangesDatabase(exists: false) }
        node.noteUpdate(name, "deleted")
        cluster.forget(name)
    }

    package func documentCommitted(_ db: DatabaseHandle, id: String) {
        node.noteUpdate(db.name, "updated")
        guard db.name == "_replicator" else { return }
        replicatorQueue.async { [weak self] in
            guard let self, !self.isClosed else { return }
            self.replicatorDocumentChanged(db, id: id)
        }
    }
}

/// The engine's error (CouchStore's `EngineError`), by the name the engine's code uses.
typealias CouchError = EngineError

/// Who made a request, as the server worked it out.
struct Identity {
    var user: UserContext
    /// `cookie`, `default` (Basic), `iam` (a token from the IAM endpoint) or `jwt`, nil when anonymous.
    var authenticatedBy: String?

    static let anonymous = Identity(user: .anonymous, authenticatedBy: nil)
}

/// A request to one of the server's own endpoints.
struct ServerContext {
    let request: ServerRequest
    let segments: [String]
    let identity: Identity

    var user: UserContext { identity.user }
    var method: String { request.method }
}

/// What the HTTP layer calls for each request. Implementations must be safe to call from many
/// connection threads at once.
public protocol RequestHandler: Sendable {
    /// Answers one request.
    func handle(_ request: ServerRequest) -> ServerResponse
}

/// The private temporary directories of live servers, removed when their server closes or, for a server still
/// running when the process exits (a test suite's shared server), at exit.
private enum TemporaryDirectories {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var live: Set<URL> = []  // only under lock
    nonisolated(unsafe) private static var installed = false  // only under lock

    static func register(_ directory: URL) {
        lock.lock()
        defer { lock.unlock() }
        live.insert(directory)
        if !installed {
            installed = true
            atexit { TemporaryDirectories.removeAll() }
        }
    }

    static func remove(_ directory: URL) {
        lock.lock()
        live.remove(directory)
        lock.unlock()
        try? FileManager.default.removeItem(at: directory)
    }

    private static func removeAll() {
        lock.lock()
        let all = live
        live.removeAll()
        lock.unlock()
        for directory in all { try? FileManager.default.removeItem(at: directory) }
    }
}
