import CouchQuery
import Foundation

extension CouchEngine {
    func revsLimit(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ServerResponse {
        switch ctx.method {
        case "GET", "HEAD":
            return Reply.json(200, .int(Int64(db.withLock { db.revsLimit })))
        case "PUT":
            try checkDatabaseAdmin(db, ctx.user)
            let value = try ctx.request.jsonBody()
            guard case .int(let n) = value, n > 0 else {
                throw CouchError(500, "unknown_error", "function_clause", extra: [CouchError.ref()])
            }
            try db.withLock { () throws(CouchError) in try db.setRevsLimit(Int(n)) }
            return Reply.json(200, Reply.ok)
        default:
            throw CouchError.methodNotAllowed("GET,PUT")
        }
    }

    func purgedInfosLimit(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ServerResponse {
        try requireServerAdmin(ctx.user)
        switch ctx.method {
        case "GET", "HEAD":
            return Reply.json(200, .int(Int64(db.withLock { db.purgedInfosLimit })))
        case "PUT":
            let value = try ctx.request.jsonBody()
            guard case .int(let n) = value, n > 0 else {
                throw CouchError.badRequest("`purge_infos_limit` must be positive integer")
            }
            try db.withLock { () throws(CouchError) in try db.setPurgedInfosLimit(Int(n)) }
            return Reply.json(200, Reply.ok)
        default:
            throw CouchError.methodNotAllowed("GET,PUT")
        }
    }

    func purgedInfos(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ServerResponse {
        guard ctx.method == "GET" || ctx.method == "HEAD" else { throw CouchError.methodNotAllowed("GET") }
        return Reply.json(200, ["purged_infos": []])
    }

    func security(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ServerResponse {
        switch ctx.method {
        case "GET", "HEAD":
            return Reply.json(200, db.withLock { db.security })
        case "PUT":
            let value = try ctx.request.jsonBody()
            let current = db.withLock { db.security }
            guard value.isObject, isDatabaseAdmin(current, ctx.user) else {
                throw CouchError(500, "error", "no_majority")
            }
            for section in ["admins", "members"] {
                if let s = value[section] {
                    guard s.isObject else { throw CouchError(500, "error", "no_majority") }
                    for list in ["names", "roles"] {
                        if let l = s[list], l.arrayValue == nil || !(l.arrayValue!.allSatisfy { $0.stringValue != nil })
                        {
                            throw CouchError(500, "error", "no_majority")
                        }
                    }
                }
            }
            try db.withLock { () throws(CouchError) in try db.setSecurity(value) }
            return Reply.json(200, Reply.ok)
        default:
            throw CouchError.methodNotAllowed("GET,PUT")
        }
    }

    func compact(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ServerResponse {
        try checkDatabaseAdmin(db, ctx.user)
        guard ctx.method == "POST" else { throw CouchError.methodNotAllowed("POST") }
        guard ctx.request.contentTypeIsJSON else { throw CouchError.badContentType }
        if ctx.segments.count > 2 {
            let ddocID = "_design/" + ctx.segments[2]
            let exists = db.withLock { db.docs[ddocID]?.isDeleted == false }
            if !exists { throw CouchError.notFound("missing") }
            return Reply.json(202, Reply.ok)  // view indexes: nothing to compact here
        }
        // As CouchDB: accepted at once, run in the background (`compact_running` meanwhile).
        db.withLock { db.compactionRunning = true }
        DispatchQueue.global().asyncAfter(deadline: .now() + Self.compactionDuration) {
            db.withLock {
                try? db.compact()
                db.compactionRunning = false
            }
        }
        return Reply.json(202, Reply.ok)
    }

    /// How long a database compaction takes here: long enough for a client to see it running.
    static let compactionDuration = 0.1

    func viewCleanup(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ServerResponse {
        try checkDatabaseAdmin(db, ctx.user)
        guard ctx.method == "POST" else { throw CouchError.methodNotAllowed("POST") }
        guard ctx.request.contentTypeIsJSON else { throw CouchError.badContentType }
        return Reply.json(202, Reply.ok)
    }

    func ensureFullCommit(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ServerResponse {
        guard ctx.method == "POST" else { throw CouchError.methodNotAllowed("POST") }
        guard ctx.request.contentTypeIsJSON else { throw CouchError.badContentType }
        // CouchDB 3.5 answers the database's creation time (its shards' file suffix), as `GET /db` does:
        // replicators compare it with their checkpoint's to notice a database deleted and recreated.
        return Reply.json(201, ["ok": true, "instance_start_time": .string(String(db.instanceStartTime))])
    }

    // MARK: - /_replicate (between databases of this server)

    /// The database name a replication endpoint names: a plain name or a URL of this server.
    private func replicationDatabaseName(_ endpoint: JSON) -> (name: String, display: String)? {
        var text: String?
        if let s = endpoint.stringValue { text = s } else if let url = endpoint["url"]?.stringValue { text = url }
        guard let text else { return nil }
        if text.hasPrefix("http://") || text.hasPrefix("https://"), let url = URL(string: text) {
            var path = url.path
            while path.hasPrefix("/") { path.removeFirst() }
            let raw = text.components(separatedBy: "/").last(where: { !$0.isEmpty }) ?? path
            let name = raw.removingPercentEncoding ?? path
            var display = "\(url.scheme ?? "http")://\(url.host ?? "127.0.0.1")"
            if let port = url.port { display += ":\(port)" }
            display += "/" + raw + "/"
            return (name, display)
        }
        return (text, text)
    }

    /// What one replication pass did.
    struct ReplicationStats {
        var missingChecked = 0
        var missingFound = 0
        var written = 0
        var failures = 0
        var lastSeq = 0
        var sourceName = ""
    }

    /// Resolves the databases of a replication (creating the target when asked), with CouchDB's errors.
    func replicationDatabases(_ body: JSON) throws(CouchError) -> (Database, Database) {
        guard let source = body["source"].flatMap(replicationDatabaseName),
            let target = body["target"].flatMap(replicationDatabaseName)
        else {
            throw CouchError.badRequest("Must specify source and target")
        }
        guard let sourceDB = database(named: source.name) else {
            throw CouchError(404, "db_not_found", "could not open \(source.display)")
        }
        var targetDB = database(named: target.name)
        if targetDB == nil, body["create_target"]?.boolValue == true {
            try validateDatabaseName(target.name)
            switch createDatabase(name: target.name, partitioned: sourceDB.partitioned, q: 2, n: 1) {
            case .success(let db): targetDB = db
            case .failure(let e): throw e
            }
        }
        guard let targetDB else { throw CouchError(500, "db_not_found", "could not open \(target.display)") }
        return (sourceDB, targetDB)
    }

    /// Copies every leaf revision (with its history and attachments) the target lacks, from `since` on.
    func replicateOnce(_ sourceDB: Database, _ targetDB: Database, docIDs: [String]?, since: Int = 0)
        -> ReplicationStats
    {
        var stats = ReplicationStats()
        stats.sourceName = sourceDB.name
        let (entries, lastSeq): ([DocEntry], Int) = sourceDB.withLock {
            var list = sourceDB.changedDocs(since: since)
            if let docIDs { list = list.filter { docIDs.contains($0.id) } }
            return (list, sourceDB.updateSeq)
        }
        stats.lastSeq = lastSeq
        for entry in entries where !entry.id.hasPrefix("_local/") {
            for leaf in entry.sortedLeaves {
                stats.missingChecked += 1
                let present = targetDB.withLock { targetDB.docs[entry.id]?.nodes[leaf.rev] != nil }
                if present { continue }
                stats.missingFound += 1
                let path = entry.path(to: leaf.rev).map(\.rev)
                do throws(CouchError) {
                    try targetDB.withLock { () throws(CouchError) in
                        try targetDB.updateReplicated(
                            id: entry.id, revs: path, deleted: leaf.deleted, body: leaf.body ?? [:],
                            attachments: leaf.atts.map { .keep($0) })
                    }
                    stats.written += 1
                } catch {
                    stats.failures += 1
                }
            }
        }
        return stats
    }

    func replicate(_ ctx: RequestContext) throws(CouchError) -> ServerResponse {
        guard ctx.method == "POST" else { throw CouchError.methodNotAllowed("POST") }
        guard ctx.request.contentTypeIsJSON else { throw CouchError.badContentType }
        let body = try ctx.request.jsonObjectBody()
        if body["cancel"]?.boolValue == true {
            let id = body["replication_id"]?.stringValue ?? body["id"]?.stringValue ?? replicationID(body)
            guard scheduler.cancel(id) else { throw CouchError.notFound("missing") }
            return Reply.json(200, ["ok": true, "_local_id": .string(id)])
        }
        let (sourceDB, targetDB) = try replicationDatabases(body)
        let docIDs = body["doc_ids"]?.arrayValue?.compactMap(\.stringValue)
        if body["continuous"]?.boolValue == true {
            let id = replicationID(body)
            startContinuousReplication(
                id: id, docID: nil, body: body, source: sourceDB, target: targetDB, docIDs: docIDs)
            return Reply.json(202, ["ok": true, "_local_id": .string(id)])
        }
        let startTime = httpDate(clock.now)
        let stats = replicateOnce(sourceDB, targetDB, docIDs: docIDs)
        let (missingChecked, missingFound, written, failures, lastSeq) =
            (stats.missingChecked, stats.missingFound, stats.written, stats.failures, stats.lastSeq)
        let sessionID = Crypto.hex(Crypto.randomBytes(16))
        let endTime = httpDate(clock.now)
        let seq = JSON.string(
            SequenceToken.encode(
                position: sourceDB.withLock { sourceDB.position(atGlobal: lastSeq) }, db: sourceDB.name))
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
