import CouchQuery
import CouchStore
import Foundation
import HTTPWire

/// Replication jobs: continuous `_replicate` requests and `_replicator` documents, as `_scheduler` lists them.
final class ReplicationScheduler: @unchecked Sendable {
    // Safe: `entries` and `cancelled` are only touched under `lock`.
    struct Entry {
        var id: String
        var docID: String?
        var state: String
        var source: String
        var target: String
        var info: JSON
        var startTime: String
        var lastUpdated: String
        var continuous: Bool
    }

    private let lock = NSLock()
    private var entries: [String: Entry] = [:]
    private var generation: [String: Int] = [:]

    /// Registers a job; returns its generation (a later registration or a cancel makes older workers stop).
    func register(_ entry: Entry) -> Int {
        lock.lock()
        defer { lock.unlock() }
        entries[entry.id] = entry
        generation[entry.id, default: 0] += 1
        return generation[entry.id]!
    }

    func update(_ id: String, generation g: Int, _ change: (inout Entry) -> Void) {
        lock.lock()
        defer { lock.unlock() }
        guard generation[id] == g, var entry = entries[id] else { return }
        change(&entry)
        entries[id] = entry
    }

    func isCurrent(_ id: String, generation g: Int) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        return generation[id] == g
    }

    @discardableResult
    func cancel(_ id: String) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard entries.removeValue(forKey: id) != nil else { return false }
        generation[id, default: 0] += 1
        return true
    }

    func cancel(docID: String) {
        lock.lock()
        let ids = entries.values.filter { $0.docID == docID }.map(\.id)
        lock.unlock()
        for id in ids { cancel(id) }
    }

    var all: [Entry] {
        lock.lock()
        defer { lock.unlock() }
        return entries.values.sorted { ($0.docID ?? $0.id) < ($1.docID ?? $1.id) }
    }
}

extension ServerEngine {
    /// A stable replication id for a source/target pair (and options that change what is replicated).
    func replicationID(_ body: JSON) -> String {
        let parts = [
            body["source"]?.serialized ?? "", body["target"]?.serialized ?? "", body["doc_ids"]?.serialized ?? "",
            body["filter"]?.serialized ?? "", body["continuous"]?.boolValue == true ? "+continuous" : "",
        ]
        return Crypto.hex(Crypto.md5(Data(parts.joined(separator: "|").utf8)))
            + (body["continuous"]?.boolValue == true ? "+continuous" : "")
    }

    private func isoNow() -> String {
        let f = ISO8601DateFormatter()
        return f.string(from: Date(timeIntervalSince1970: clock.now))
    }

    private func displayEndpoint(_ endpoint: JSON?) -> String {
        guard let endpoint else { return "" }
        var text = endpoint.stringValue ?? endpoint["url"]?.stringValue ?? ""
        if let url = URLComponents(string: text), url.user != nil {
            var copy = url
            copy.user = nil
            copy.password = nil
            text = copy.string ?? text
        }
        if !text.hasSuffix("/") { text += "/" }
        return text
    }

    /// Starts a continuous job: replicates now, then again after every change of the source, until cancelled,
    /// the engine closes or a database goes away.
    func startContinuousReplication(
        id: String, docID: String?, body: JSON, source: DatabaseHandle, target: DatabaseHandle,
        docIDs: [String]?
    ) {
        let now = isoNow()
        let generation = scheduler.register(
            ReplicationScheduler.Entry(
                id: id, docID: docID, state: "running", source: displayEndpoint(body["source"]),
                target: displayEndpoint(body["target"]), info: ["revisions_checked": 0, "docs_written": 0],
                startTime: now,
                lastUpdated: now, continuous: true))
        let engine = self
        let thread = Thread {
            var since = 0
            var checked = 0
            var written = 0
            while engine.scheduler.isCurrent(id, generation: generation), !engine.isClosed {
                let stats = engine.store.replicateOnce(source, target, docIDs: docIDs, since: since)
                since = stats.lastSeq
                checked += stats.missingChecked
                written += stats.written
                let (c, w) = (checked, written)
                engine.scheduler.update(id, generation: generation) {
                    $0.info = [
                        "revisions_checked": .int(Int64(c)), "docs_written": .int(Int64(w)), "doc_write_failures": 0,
                    ]
                    $0.lastUpdated = engine.isoNow()
                }
                let sourceThere = source.waitForUpdate(
                    after: since, until: Date().addingTimeInterval(0.5), unless: { engine.isClosed })
                if !sourceThere || target.isDeleted {
                    engine.scheduler.update(id, generation: generation) { $0.state = "crashing" }
                    return
                }
            }
        }
        thread.name = "replication \(id)"
        thread.start()
    }

    /// Reacts to a write in `_replicator`: runs the replication the document describes (one-shot jobs record
    /// `_replication_state` in the document when they finish, as CouchDB does).
    func replicatorDocumentChanged(_ db: DatabaseHandle, id: String) {
        if id.hasPrefix("_design/") { return }
        guard let doc = db.winningBody(id) else {
            scheduler.cancel(docID: id)
            return
        }
        if let state = doc["_replication_state"]?.stringValue, state == "completed" || state == "failed" { return }
        let repID = replicationID(doc)
        let now = isoNow()
        let source = displayEndpoint(doc["source"])
        let target = displayEndpoint(doc["target"])
        let databases: (DatabaseHandle, DatabaseHandle)
        do {
            databases = try store.replicationDatabases(doc)
        } catch {
            let generation = scheduler.register(
                ReplicationScheduler.Entry(
                    id: repID, docID: id, state: "failed", source: source, target: target,
                    info: ["error": .string("\(error.error): \(error.reason)")], startTime: now, lastUpdated: now,
                    continuous: false))
            _ = generation
            recordReplicationState(
                db, id: id, state: "failed", extra: [("_replication_state_reason", .string(error.reason))])
            return
        }
        let docIDs = doc["doc_ids"]?.arrayValue?.compactMap(\.stringValue)
        if doc["continuous"]?.boolValue == true {
            startContinuousReplication(
                id: repID, docID: id, body: doc, source: databases.0, target: databases.1, docIDs: docIDs)
            return
        }
        let stats = store.replicateOnce(databases.0, databases.1, docIDs: docIDs)
        let info: JSON = .object([
            ("revisions_checked", .int(Int64(stats.missingChecked))),
            ("missing_revisions_found", .int(Int64(stats.missingFound))),
            ("docs_read", .int(Int64(stats.written))), ("docs_written", .int(Int64(stats.written))),
            ("changes_pending", .null), ("doc_write_failures", .int(Int64(stats.failures))),
            ("checkpointed_source_seq", .string(SequenceToken.encode(stats.lastSeq, db: stats.sourceName))),
        ])
        _ = scheduler.register(
            ReplicationScheduler.Entry(
                id: repID, docID: id, state: "completed", source: source, target: target, info: info, startTime: now,
                lastUpdated: isoNow(), continuous: false))
        recordReplicationState(db, id: id, state: "completed", extra: [("_replication_stats", info)])
    }

    private func recordReplicationState(_ db: DatabaseHandle, id: String, state: String, extra: [(String, JSON)]) {
        let time = isoNow()
        try? db.amendWinningDocument(id) { body in
            var body = body.setting("_replication_state", .string(state))
            body = body.setting("_replication_state_time", .string(time))
            for (k, v) in extra { body = body.setting(k, v) }
            return body
        }
    }

    // MARK: - /_scheduler

    func schedulerEndpoint(_ ctx: ServerContext) throws(CouchError) -> ServerResponse {
        let segments = ctx.segments
        let request = ctx.request
        let skip = Int(request.queryValue("skip") ?? "") ?? 0
        let limit = Int(request.queryValue("limit") ?? "")
        func page(_ list: [JSON]) -> [JSON] {
            let skipped = Array(list.dropFirst(max(skip, 0)))
            return limit.map { Array(skipped.prefix(max($0, 0))) } ?? skipped
        }
        switch segments.dropFirst().first {
        case "jobs":
            let jobs: [JSON] = scheduler.all.filter { $0.state == "running" }.map { e in
                .object([
                    ("database", e.docID == nil ? .null : "_replicator"), ("id", .string(e.id)), ("pid", "<0.1.0>"),
                    ("source", .string(e.source)), ("target", .string(e.target)), ("user", .null),
                    ("doc_id", e.docID.map(JSON.string) ?? .null),
                    ("info", e.info),
                    ("history", .array([.object([("timestamp", .string(e.startTime)), ("type", "started")])])),
                    ("node", "couchdb@127.0.0.1"), ("start_time", .string(e.startTime)),
                ])
            }
            if segments.count == 3 {
                guard let job = jobs.first(where: { $0["id"]?.stringValue == segments[2] }) else {
                    throw CouchError.notFound("unknown")
                }
                return Reply.json(200, job)
            }
            return Reply.json(
                200,
                .object([
                    ("total_rows", .int(Int64(jobs.count))), ("offset", .int(Int64(skip))),
                    ("jobs", .array(page(jobs))),
                ]))
        case "docs":
            if segments.count >= 3, segments[2] != "_replicator" {
                throw CouchError.notFound("missing")
            }
            let docs: [JSON] = scheduler.all.filter { $0.docID != nil }.map { e in
                .object([
                    ("database", "_replicator"), ("doc_id", .string(e.docID!)), ("id", .string(e.id)),
                    ("node", "couchdb@127.0.0.1"), ("source", .string(e.source)), ("target", .string(e.target)),
                    ("state", .string(e.state)), ("info", e.info), ("error_count", 0),
                    ("last_updated", .string(e.lastUpdated)), ("start_time", .string(e.startTime)),
                ])
            }
            if segments.count == 4 {
                guard let doc = docs.first(where: { $0["doc_id"]?.stringValue == segments[3] }) else {
                    throw CouchError.notFound("unknown")
                }
                return Reply.json(200, doc)
            }
            return Reply.json(
                200,
                .object([
                    ("total_rows", .int(Int64(docs.count))), ("offset", .int(Int64(skip))),
                    ("docs", .array(page(docs))),
                ]))
        default:
            throw CouchError.notFound("missing")
        }
    }

    // MARK: - /_replicate (between databases of this server)

    /// Checks the credentials a replication endpoint given as a URL carries, as CouchDB 3.5's replicator
    /// presents them to the server it replicates from or to: `auth.basic` first, then the URL's user
    /// information taken verbatim (CouchDB does not percent-decode it: `%2D` stays three characters),
    /// then a Basic `Authorization` header. Wrong credentials are CouchDB's 500 `replication_auth_error`
    /// (its session request was refused); none, for a database the anonymous user may not read, its 401.
    /// A plain database name is the requesting user's and is not checked here.
    func checkReplicationEndpoint(_ endpoint: JSON?) throws(CouchError) {
        guard let endpoint, let text = endpoint.stringValue ?? endpoint["url"]?.stringValue,
            let schemeEnd = text.range(of: "://"), text.hasPrefix("http")
        else { return }
        let afterScheme = text[schemeEnd.upperBound...]
        let authority = afterScheme.prefix { $0 != "/" }
        let rest = afterScheme.dropFirst(authority.count)
        var hostPort = authority
        var fromURL: (String, String)?
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            hostPort = authority[authority.index(after: at)...]
            if let colon = userInfo.firstIndex(of: ":") {
                fromURL = (String(userInfo[..<colon]), String(userInfo[userInfo.index(after: colon)...]))
            }
        }
        var fromAuth: (String, String)?
        if let basic = endpoint["auth"]?["basic"], let name = basic["username"]?.stringValue,
            let password = basic["password"]?.stringValue
        {
            fromAuth = (name, password)
        }
        var fromHeader: (String, String)?
        if case .object(let headers)? = endpoint["headers"],
            let value = headers.first(where: { $0.0.lowercased() == "authorization" })?.1.stringValue,
            value.lowercased().hasPrefix("basic "),
            let data = Data(base64Encoded: value.dropFirst(6).trimmingCharacters(in: .whitespaces)),
            let pair = String(data: data, encoding: .utf8), let colon = pair.firstIndex(of: ":")
        {
            fromHeader = (String(pair[..<colon]), String(pair[pair.index(after: colon)...]))
        }
        let base = text[..<schemeEnd.upperBound] + hostPort
        var user = UserContext.anonymous
        if let (name, password) = fromAuth ?? fromURL ?? fromHeader {
            guard let creds = try authenticate(name: name, password: password) else {
                throw CouchError(
                    500, "replication_auth_error", "{session_request_unauthorized,\"\(base)/_session\",\"\(name)\"}")
            }
            user = UserContext(name: creds.name, roles: creds.roles)
        }
        var path = String(rest)
        while path.hasSuffix("/") { path.removeLast() }
        let probe = store.handle(
            ServerRequest(
                method: "GET", rawPath: path.isEmpty ? "/" : path, rawQuery: nil, headers: HTTPHeaders(),
                body: Data()),
            user: user)
        if probe.status == 401 || probe.status == 403 {
            throw CouchError(401, "unauthorized", "unauthorized to access or create database \(base)\(path)/")
        }
    }

    func replicate(_ ctx: ServerContext) throws(CouchError) -> ServerResponse {
        guard ctx.method == "POST" else { throw CouchError.methodNotAllowed("POST") }
        guard ctx.request.contentTypeIsJSON else { throw CouchError.badContentType }
        let body = try ctx.request.jsonObjectBody()
        if body["cancel"]?.boolValue == true {
            let id = body["replication_id"]?.stringValue ?? body["id"]?.stringValue ?? replicationID(body)
            guard scheduler.cancel(id) else { throw CouchError.notFound("missing") }
            return Reply.json(200, ["ok": true, "_local_id": .string(id)])
        }
        try checkReplicationEndpoint(body["source"])
        try checkReplicationEndpoint(body["target"])
        let (sourceDB, targetDB) = try store.replicationDatabases(body)
        let docIDs = body["doc_ids"]?.arrayValue?.compactMap(\.stringValue)
        if body["continuous"]?.boolValue == true {
            let id = replicationID(body)
            startContinuousReplication(
                id: id, docID: nil, body: body, source: sourceDB, target: targetDB, docIDs: docIDs)
            return Reply.json(202, ["ok": true, "_local_id": .string(id)])
        }
        let startTime = httpDate(Date(timeIntervalSince1970: clock.now))
        let stats = store.replicateOnce(sourceDB, targetDB, docIDs: docIDs)
        let (missingChecked, missingFound, written, failures, lastSeq) =
            (stats.missingChecked, stats.missingFound, stats.written, stats.failures, stats.lastSeq)
        let sessionID = Crypto.hex(Crypto.randomBytes(16))
        let endTime = httpDate(Date(timeIntervalSince1970: clock.now))
        let seq = JSON.string(sourceDB.sequenceToken(atGlobal: lastSeq))
        let history: JSON = .object([
            ("session_id", .string(sessionID)), ("start_time", .string(startTime)), ("end_time", .string(endTime)),
            ("start_last_seq", 0), ("end_last_seq", seq), ("recorded_seq", seq),
            ("missing_checked", .int(Int64(missingChecked))), ("missing_found", .int(Int64(missingFound))),
            ("docs_read", .int(Int64(written))), ("docs_written", .int(Int64(written))),
            ("doc_write_failures", .int(Int64(failures))), ("bulk_get_docs", .int(Int64(written))),
            ("bulk_get_attempts", .int(Int64(written))),
        ])
        var pairs: [(String, JSON)] = [
            ("ok", true), ("session_id", .string(sessionID)), ("source_last_seq", seq), ("replication_id_version", 4),
        ]
        if docIDs != nil {
            pairs.append(contentsOf: [
                ("start_time", .string(startTime)), ("end_time", .string(endTime)), ("docs_read", .int(Int64(written))),
                ("docs_written", .int(Int64(written))), ("doc_write_failures", .int(Int64(failures))),
            ])
        }
        pairs.append(("history", .array([history])))
        return Reply.json(200, .object(pairs))
    }
}
