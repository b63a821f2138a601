@_exported import CouchStore
import Foundation
import HTTPWire

/// An in-process CouchDB 3.5-compatible server for tests, listening on 127.0.0.1.
///
/// ```swift
/// let server = try TestServer.start()          // an ephemeral port, admin/password
/// defer { server.stop() }
/// // talk to server.url with server.adminName / server.adminPassword
/// server.faults.failNext(2, with: .tooManyRequests(retryAfter: 1))
/// #expect(server.requestCount(path: "/db/doc", method: "GET") == 3)
/// ```
///
/// Thread-safe. `stop()` is also called when the server is deallocated.
public final class TestServer: @unchecked Sendable {
    // @unchecked Sendable: the mutable state (the HTTP server, engine, handler, running flag) is
    // guarded by `lock`; `faults` and the request counter are thread-safe themselves.

    /// How a server is set up.
    public struct Configuration: Sendable {
        /// The port to listen on (127.0.0.1 only); 0 picks a free one. Defaults to 0.
        public var port: Int
        /// The options the CouchDB engine gets (admin, session timeout, data directory, ...).
        public var engineOptions: ServerEngine.Options
        /// The seed for faults that hit a fraction of requests. Defaults to 0.
        public var faultSeed: UInt64
        /// The largest request body accepted (413 beyond). Defaults to 300 MiB.
        public var maxRequestBodySize: Int
        /// Close kept-alive connections idle for this many seconds, without notice (as proxies and
        /// load balancers do). Defaults to nil: connections stay open until the client closes them.
        public var keepAliveIdleTimeout: Double? = nil
        /// When set, requests go to this handler instead of the CouchDB engine (the engine is
        /// still created and reachable as `server.engine`). Useful to test the HTTP layer alone.
        public var handler: (any RequestHandler)?

        public init(
            port: Int = 0, adminName: String = "admin", adminPassword: String = "password", sessionTimeout: Int = 600,
            dataDirectory: URL? = nil, passwordIterations: Int = 600_000, faultSeed: UInt64 = 0,
            maxRequestBodySize: Int = 300 * 1024 * 1024, handler: (any RequestHandler)? = nil
        ) {
            self.port = port
            var options = ServerEngine.Options()
            options.adminName = adminName
            options.adminPassword = adminPassword
            options.sessionTimeout = sessionTimeout
            options.dataDirectory = dataDirectory
            options.passwordIterations = passwordIterations
            self.engineOptions = options
            self.faultSeed = faultSeed
            self.maxRequestBodySize = maxRequestBodySize
            self.handler = handler
        }

        /// The server admin's name. Defaults to `admin`.
        public var adminName: String {
            get { engineOptions.adminName }
            set { engineOptions.adminName = newValue }
        }

        /// The server admin's password. Defaults to `password`.
        public var adminPassword: String {
            get { engineOptions.adminPassword }
            set { engineOptions.adminPassword = newValue }
        }

        /// Lifetime of an `AuthSession` cookie in seconds. Defaults to 600.
        public var sessionTimeout: Int {
            get { engineOptions.sessionTimeout }
            set { engineOptions.sessionTimeout = newValue }
        }

        /// PBKDF2 iterations for passwords of `_users` documents. Defaults to CouchDB's 600000;
        /// lower it (e.g. to 10) in tests that create users, as each new password costs that much.
        public var passwordIterations: Int {
            get { engineOptions.passwordIterations }
            set { engineOptions.passwordIterations = newValue }
        }

        /// Where the engine keeps its data so that a restart keeps it. Defaults to nil: every database is still
        /// kept in a file, in a private temporary directory that each start makes and each stop removes (so a
        /// restart starts empty). See ``ServerEngine/Options/dataDirectory``.
        public var dataDirectory: URL? {
            get { engineOptions.dataDirectory }
            set { engineOptions.dataDirectory = newValue }
        }

        /// Whether writes wait for the disk (`fsync`). Defaults to nil: yes with a ``dataDirectory``, no in the
        /// private temporary directory. See ``ServerEngine/Options/synchronousWrites``.
        public var synchronousWrites: Bool? {
            get { engineOptions.synchronousWrites }
            set { engineOptions.synchronousWrites = newValue }
        }

        /// With no ``dataDirectory``, keep databases in memory only (no file), as before the TestServer stored
        /// every database in a file. Defaults to false. See ``ServerEngine/Options/inMemoryOnly``.
        public var inMemoryOnly: Bool {
            get { engineOptions.inMemoryOnly }
            set { engineOptions.inMemoryOnly = newValue }
        }

        /// IAM API keys the token endpoint `POST /_iam/identity/token` accepts, each with the identity its
        /// bearer tokens authenticate as (see `iamTokenURL`). Defaults to none.
        public var iamAPIKeys: [String: IAMIdentity] {
            get { engineOptions.iamAPIKeys }
            set { engineOptions.iamAPIKeys = newValue }
        }

        /// How many CouchDB nodes the server behaves as: more than one gives a cluster seen through
        /// one node (`_membership`, `n` copies of each shard, write quorums, 202 Accepted when nodes
        /// are down, lagging replicas on demand). Defaults to 1.
        public var nodes: Int {
            get { engineOptions.nodes }
            set { engineOptions.nodes = newValue }
        }

        /// On a cluster, how many seconds `_all_docs`, views, `_changes`, `_dbs_info`, `_local_docs`,
        /// `_security` and `r=1` document reads may lag behind writes. Defaults to 0.
        public var replicaLag: Double {
            get { engineOptions.replicaLag }
            set { engineOptions.replicaLag = newValue }
        }

        /// Lifetime in seconds of the IAM bearer tokens (`expires_in`). Defaults to 3600.
        public var iamTokenLifetime: Int {
            get { engineOptions.iamTokenLifetime }
            set { engineOptions.iamTokenLifetime = newValue }
        }

        /// Whether large JSON responses are gzip-compressed for clients that send `Accept-Encoding: gzip`
        /// (CouchDB itself never does this). Defaults to false.
        public var gzipJSONResponses: Bool {
            get { engineOptions.gzipJSONResponses }
            set { engineOptions.gzipJSONResponses = newValue }
        }

        /// The secret of accepted HS256 JWT bearer tokens (CouchDB's `[jwt_auth]` `hmac:_default`); nil turns
        /// JWT authentication off. Defaults to nil.
        public var jwtSecret: String? {
            get { engineOptions.jwtSecret }
            set { engineOptions.jwtSecret = newValue }
        }
    }

    /// Starts a server.
    public static func start(_ configuration: Configuration = Configuration()) throws -> TestServer {
        let server = TestServer(configuration: configuration)
        try server.launch(port: configuration.port)
        return server
    }

    /// Starts a server whose requests go to `handler` (see `Configuration.handler`).
    public static func start(handler: any RequestHandler, configuration: Configuration = Configuration()) throws
        -> TestServer
    {
        var configuration = configuration
        configuration.handler = handler
        return try start(configuration)
    }

    /// The configuration the server was started with.
    public let configuration: Configuration
    /// Faults on demand (see `TestServerFaults`). Rules stay in force across `restart()`.
    public let faults: TestServerFaults

    private let lock = NSLock()
    private var http: HTTPServer?
    private var _engine: ServerEngine?
    private var _port = 0
    private var running = false
    let counter = RequestCounter()
    private let stopSignal = StopSignal()

    private init(configuration: Configuration) {
        self.configuration = configuration
        self.faults = TestServerFaults(seed: configuration.faultSeed)
    }

    deinit {
        stop()
    }

    /// The port the server listens on (the real one when the configuration said 0).
    public var port: Int {
        lock.lock()
        defer { lock.unlock() }
        return _port
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    public var urlString: String { "http://127.0.0.1:\(port)" }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    public var url: URL { URL(string: urlString)! }

    /// The base URL with `path` appended; `path` is used as written (already percent-encoded),
    /// with exactly one `/` between the two.
    public func url(path: String) -> URL {
        URL(string: urlString + (path.hasPrefix("/") ? path : "/" + path))!
    }

    /// The server admin's name.
    public var adminName: String { configuration.adminName }
    /// The server admin's password.
    public var adminPassword: String { configuration.adminPassword }

    /// The CouchDB engine answering requests (a new one after `restart()`).
    public var engine: ServerEngine {
        lock.lock()
        defer { lock.unlock() }
        return _engine!
    }

    /// Whether the server is accepting connections.
    public var isRunning: Bool {
        lock.lock()
        defer { lock.unlock() }
        return running
    }

    /// The URL of the IAM-style token endpoint, for `AuthenticationMode.iam(apiKey:tokenURL:)`.
    public var iamTokenURL: URL { url(path: "/_iam/identity/token") }

    /// An HS256 JWT for `subject` with `roles`, expiring `expiresIn` seconds from now (negative for an expired
    /// one), signed with the configured `jwtSecret` (or `secret`), for `AuthenticationMode.bearerToken`.
    public func makeJWT(subject: String, roles: [String] = [], expiresIn: Int = 3600, secret: String? = nil) -> String {
        engine.makeJWT(subject: subject, roles: roles, expiresIn: expiresIn, secret: secret)
    }

    /// The names of the server's nodes, as `_membership` lists them.
    public var nodeNames: [String] { engine.nodeNames }

    /// Marks nodes down (names from ``nodeNames``; an empty set brings all up): a write whose
    /// shard has fewer than `w` copies up is answered 202 Accepted, with none up it fails.
    public func markNodesDown(_ names: Set<String>) { engine.markNodesDown(names) }

    /// Makes secondary reads lag behind writes by up to `seconds` (0: none). See ``Configuration/replicaLag``.
    public func setReplicaLag(_ seconds: Double) { engine.setReplicaLag(seconds) }

    /// Makes every `AuthSession` cookie and IAM bearer token issued so far invalid, as if its lifetime had run out.
    public func expireAllSessions() {
        engine.expireAllSessions()
    }

    /// Stops the server: closes the listener and every connection, ends streamed responses
    /// (the engine is closed), and waits (at most 5 s) for the connection threads to end.
    /// Calling it again does nothing.
    public func stop() {
        lock.lock()
        let http = self.http
        let engine = self._engine
        let wasRunning = running
        running = false
        self.http = nil
        lock.unlock()
        guard wasRunning else { return }
        http?.beginStop()
        stopSignal.fire()
        engine?.close()
        http?.waitForThreads(timeout: 5)
    }

    /// Stops the server and starts it again on the same port. The engine is closed and opened
    /// again from `dataDirectory`, so a restart keeps the data when there is a data directory and
    /// starts empty without one (the private temporary directory is removed by the stop). Fault
    /// rules and request counts are kept.
    public func restart() throws {
        let port = self.port
        stop()
        try launch(port: port)
    }

    private func launch(port: Int) throws {
        let engine = try ServerEngine(options: configuration.engineOptions)
        let handler: any RequestHandler = configuration.handler ?? engine
        stopSignal.reset()
        let dispatch = Self.makeDispatch(handler: handler, faults: faults, counter: counter, stopSignal: stopSignal)
        var options = HTTPServer.Options(port: port, maxBodySize: configuration.maxRequestBodySize)
        options.idleTimeout = configuration.keepAliveIdleTimeout
        if configuration.handler == nil {
            // The engine writes an attachment upload to its file as it reads it (a custom handler gets bodies whole).
            options.streamsBody = {
                ServerRequest.streamsBody(
                    method: $0.method, pathSegments: $0.pathSegments, contentType: $0.headers["Content-Type"])
            }
        }
        let http: HTTPServer
        do {
            http = try HTTPServer(options: options, dispatch: dispatch)
        } catch {
            engine.close()
            throw error
        }
        lock.lock()
        self.http = http
        self._engine = engine
        self._port = http.port
        self.running = true
        lock.unlock()
        http.start()
    }

    private static func makeDispatch(
        handler: any RequestHandler, faults: TestServerFaults, counter: RequestCounter, stopSignal: StopSignal
    ) -> HTTPServer.Dispatch {
        return { request in
            counter.record(method: request.method, rawPath: request.rawPath, rawQuery: request.rawQuery)
            guard
                let fault = faults.fault(
                    forMethod: request.method, rawPath: request.rawPath, rawQuery: request.rawQuery)
            else { return .response(handler.handle(request)) }
            switch fault {
            case .dropConnection:
                return .drop
            case .delay(let seconds):
                if stopSignal.wait(seconds: seconds) { return .drop }
                return .response(handler.handle(request))
            case .truncatedBody:
                return .truncated(handler.handle(request))
            case .tooManyRequests, .internalServerError, .serviceUnavailable, .invalidJSON, .redirect:
                return .response(fault.cannedResponse!)
            case .replyThenClose(let seconds):
                return .responseThenClose(handler.handle(request), after: seconds)
            case .tooManyRequestsThenClose(_, let seconds):
                return .responseThenClose(fault.cannedResponse!, after: seconds)
            case .dropAfterProcessing:
                _ = handler.handle(request)
                return .drop
            case .slowHead(let seconds):
                let response = handler.handle(request)
                return .raw { writer in
                    let (head, body) = writer.whole(response)
                    let pause = seconds / Double(max(head.count, 1))
                    for byte in head {
                        guard writer.send(Data([byte])), writer.pause(seconds: pause) else { return false }
                    }
                    return writer.send(body)
                }
            case .trickleBody(let seconds):
                let response = handler.handle(request)
                return .raw { writer in
                    let (head, body) = writer.whole(response)
                    guard writer.send(head) else { return false }
                    for byte in body {
                        guard writer.pause(seconds: seconds), writer.send(Data([byte])) else { return false }
                    }
                    return true
                }
            case .interim(let seconds, let count):
                return .raw { writer in
                    var sent = 0
                    while count.map({ sent < $0 }) ?? true {
                        guard writer.send(Data("HTTP/1.1 102 Processing\r\n\r\n".utf8)) else { return false }
                        sent += 1
                        guard writer.pause(seconds: seconds) else { return false }
                    }
                    // The request runs only once the interim responses are over (none ran when the
                    // client went away first).
                    let (head, body) = writer.whole(handler.handle(request))
                    return writer.send(head + body)
                }
            }
        }
    }

    // MARK: - Request counts

    /// How many requests arrived (faulted ones included) for `path` and `method` since the start
    /// or the last `resetRequestCounts()`. `path` is compared with the path as sent (still
    /// percent-encoded); with a `?` in it, with path and query together. Nil path or method
    /// matches all.
    ///
    /// Counts without a path are always exact. Counts by path are kept for the 10,000 (method,
    /// path, query) combinations requested most recently, so a long-running server's memory
    /// stays bounded: a combination not requested since 10,000 others were counts 0 by path.
    public func requestCount(path: String? = nil, method: String? = nil) -> Int {
        guard let path else { return counter.total(method: method) }
        return counter.count { m, p, q in
            if let method, method.uppercased() != m.uppercased() { return false }
            return path.contains("?") ? p + (q.map { "?" + $0 } ?? "") == path : p == path
        }
    }

    /// How many requests arrived whose path (as sent) starts with `pathPrefix`, optionally only
    /// with `method`. Exact for a prefix within the first path segment (`/db`, `/db/`) as long as
    /// the server has seen fewer than 1,000 first segments since; a longer prefix (`/db/doc`) counts
    /// from the counts by path, as `requestCount(path:method:)` does.
    public func requestCount(pathPrefix: String, method: String? = nil) -> Int {
        counter.count(pathPrefix: pathPrefix, method: method)
    }

    /// The last requests that arrived (at most 10,000), oldest first: method, path and query as sent.
    public var requestLog: [(method: String, path: String, query: String?)] { counter.log }

    /// Sets every request count back to 0 and empties `requestLog`.
    public func resetRequestCounts() {
        counter.reset()
    }
}

/// Counts requests by method, path and query, in bounded memory: the last `logLimit` requests
/// in a ring; exact totals by method (at most `methodLimit` methods; requests with further
/// methods count only in the total); counts by (method, path, query) for the `keyLimit`
/// combinations requested most recently; and counts by (method, first path segment) for the
/// `segmentLimit` most recent, which keep `requestCount(pathPrefix: "/db")` and
/// `requestCount(pathPrefix: "/db/")` exact however many documents a database has.
final class RequestCounter: @unchecked Sendable {
    // @unchecked Sendable: all state is guarded by `lock`.
    private struct Key: Hashable {
        var method: String
        var path: String
        var query: String?
    }

    /// Counts by key, at most `limit` keys: the least recently counted are dropped first.
    private struct BoundedCounts {
        let limit: Int
        private(set) var counts: [Key: (count: Int, lastUse: Int)] = [:]

        init(limit: Int) { self.limit = limit }

        mutating func add(_ key: Key, at use: Int) {
            counts[key, default: (0, 0)].count += 1
            counts[key]!.lastUse = use
            if counts.count > limit {
                // Drop the least recently used quarter at once, so sorting is rare.
                let drop = counts.sorted { $0.value.lastUse < $1.value.lastUse }.prefix(limit / 4)
                for (old, _) in drop { counts[old] = nil }
            }
        }

        func sum(where predicate: (Key) -> Bool) -> Int {
            counts.reduce(0) { $0 + (predicate($1.key) ? $1.value.count : 0) }
        }

        mutating func removeAll() { counts.removeAll() }
    }

    static let keyLimit = 10_000
    static let segmentLimit = 1_000
    static let logLimit = 10_000
    static let methodLimit = 64

    private let lock = NSLock()
    private var byKey = BoundedCounts(limit: keyLimit)
    private var bySegment = BoundedCounts(limit: segmentLimit)
    private var methodTotals: [String: Int] = [:]
    private var total = 0
    /// A ring of the last `logLimit` requests; `next` is where the next one goes once it is full.
    private var ring: [Key] = []
    private var next = 0

    /// `/db/doc` → `/db/`, `/db` → `/db`: the path up to and including its second `/`.
    private static func segment(_ path: String) -> String {
        guard let slash = path.dropFirst().firstIndex(of: "/") else { return path }
        return String(path[...slash])
    }

    func record(method: String, rawPath: String, rawQuery: String?) {
        let key = Key(method: method, path: rawPath, query: rawQuery)
        lock.lock()
        defer { lock.unlock() }
        total += 1
        if methodTotals[method] != nil || methodTotals.count < Self.methodLimit {
            methodTotals[method, default: 0] += 1
        }
        byKey.add(key, at: total)
        bySegment.add(Key(method: method, path: Self.segment(rawPath), query: nil), at: total)
        if ring.count < Self.logLimit {
            ring.append(key)
        } else {
            ring[next] = key
            next = (next + 1) % Self.logLimit
        }
    }

    /// The sum of the kept counts whose method, path and query match.
    func count(where predicate: (String, String, String?) -> Bool) -> Int {
        lock.lock()
        defer { lock.unlock() }
        return byKey.sum { predicate($0.method, $0.path, $0.query) }
    }

    /// Requests whose path starts with `prefix`, with `method` (case-insensitive) unless nil.
    func count(pathPrefix prefix: String, method: String?) -> Int {
        let matchesMethod = { (m: String) in method.map { $0.uppercased() == m.uppercased() } ?? true }
        // A prefix within the first segment (`/db`, `/db/`) is answered from the segment counts.
        if !prefix.contains("?"), prefix.hasPrefix("/"), Self.segment(prefix) == prefix {
            lock.lock()
            defer { lock.unlock() }
            return bySegment.sum { matchesMethod($0.method) && $0.path.hasPrefix(prefix) }
        }
        return count { m, p, q in
            matchesMethod(m) && (prefix.contains("?") ? p + (q.map { "?" + $0 } ?? "") : p).hasPrefix(prefix)
        }
    }

    /// Every request, or those with `method` (case-insensitive).
    func total(method: String?) -> Int {
        lock.lock()
        defer { lock.unlock() }
        guard let method else { return total }
        return methodTotals.reduce(0) { $0 + ($1.key.uppercased() == method.uppercased() ? $1.value : 0) }
    }

    var log: [(method: String, path: String, query: String?)] {
        lock.lock()
        defer { lock.unlock() }
        return (ring[next...] + ring[..<next]).map { (method: $0.method, path: $0.path, query: $0.query) }
    }

    /// How many entries the counter holds (counts, method totals and log together).
    var storedEntryCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return byKey.counts.count + bySegment.counts.count + methodTotals.count + ring.count
    }

    func reset() {
        lock.lock()
        byKey.removeAll()
        bySegment.removeAll()
        methodTotals.removeAll()
        total = 0
        ring.removeAll()
        next = 0
        lock.unlock()
    }
}

/// A flag that, once fired, wakes everyone waiting on it (used to cut delays short on stop).
final class StopSignal: @unchecked Sendable {
    // @unchecked Sendable: `fired` is guarded by `condition`.
    private let condition = NSCondition()
    private var fired = false

    func fire() {
        condition.lock()
        fired = true
        condition.broadcast()
        condition.unlock()
    }

    func reset() {
        condition.lock()
        fired = false
        condition.unlock()
    }

    /// Waits `seconds`, or less if fired. True when it was fired.
    func wait(seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        condition.lock()
        defer { condition.unlock() }
        while !fired {
            if !condition.wait(until: deadline) { return fired }
        }
        return true
    }
}
