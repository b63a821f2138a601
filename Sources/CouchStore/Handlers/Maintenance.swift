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
            let exists = db.withLock { db.docs.isLive(ddocID) }
            if !exists { throw CouchError.notFound("missing") }
            return Reply.json(202, Reply.ok)  // view indexes: nothing to compact here
        }
        // As CouchDB: accepted at once, run in the background (`compact_running` meanwhile). On a
        // serial queue of its own, which Dispatch runs on an overcommit thread: a global queue's
        // threads are the ones Swift concurrency runs tasks on (on Linux), and copying a large
        // database would hold one of them for as long as it takes.
        db.withLock { db.compactionRunning = true }
        DispatchQueue(label: "CouchStore.compaction").asyncAfter(deadline: .now() + Self.compactionDuration) {
            try? db.compact()
            db.withLock { db.compactionRunning = false }
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
}
