import CouchQuery
import Foundation

extension CouchEngine {
    /// Dispatches a request by its path.
    func route(_ ctx: RequestContext) throws(CouchError) -> ServerResponse {
        let segments = ctx.segments
        guard let first = segments.first else { return try welcome(ctx) }
        if first.hasPrefix("_"), !Self.systemDatabases.contains(first) {
            return try serverEndpoint(first, ctx)
        }
        return try databaseEndpoint(ctx)
    }

    /// The databases whose names may start with `_` (CouchDB 3.5's system databases).
    static let systemDatabases: Set<String> = ["_users", "_replicator", "_global_changes"]

    private func requireMethods(_ ctx: RequestContext, _ allowed: String) throws(CouchError) {
        let methods = allowed.split(separator: ",").map(String.init)
        if !methods.contains(ctx.method) { throw CouchError.methodNotAllowed(allowed) }
    }

    // MARK: - Server endpoints

    private func welcome(_ ctx: RequestContext) throws(CouchError) -> ServerResponse {
        try requireMethods(ctx, "GET,HEAD")
        return Reply.json(
            200,
            [
                "couchdb": "Welcome", "version": "3.5.0", "git_sha": "11f0d36", "uuid": .string(serverUUID),
                "features": [
                    "quickjs", "access-ready", "partitioned", "pluggable-storage-engines", "reshard", "scheduler",
                ],
                "vendor": ["name": "The Apache Software Foundation"],
            ])
    }

    private func serverEndpoint(_ name: String, _ ctx: RequestContext) throws(CouchError) -> ServerResponse {
        let request = ctx.request
        switch name {
        case "_up":
            try requireMethods(ctx, "GET,HEAD")
            return Reply.json(200, ["status": "ok", "seeds": [:]])
        case "_uuids":
            try requireMethods(ctx, "GET,HEAD")
            var count = 1
            if let c = request.queryValue("count") {
                guard let n = Int(c), n > 0 else { throw CouchError.badRequest("count must be a positive integer") }
                guard n <= 1000 else { throw CouchError.badRequest("count parameter too large") }
                count = n
            }
            let list = (0..<count).map { _ in JSON.string(uuids.next()) }
            return Reply.json(
                200, ["uuids": .array(list)],
                headers: [("ETag", "\"\(Crypto.opaqueToken(list.description))\"")], cache: "no-cache")
        case "_all_dbs":
            try requireServerAdmin(ctx.user)
            try requireMethods(ctx, "GET,HEAD")
            let names = try selectDatabaseNames(request)
            let body = JSON.array(names.map(JSON.string))
            return Reply.json(200, body, headers: [("ETag", "\"\(Crypto.opaqueToken(body.serialized))\"")])
        case "_dbs_info":
            try requireServerAdmin(ctx.user)
            return try dbsInfo(ctx)
        case "_active_tasks":
            try requireServerAdmin(ctx.user)
            try requireMethods(ctx, "GET,HEAD")
            return Reply.json(200, [])
        default:
            try requireServerAdmin(ctx.user)
            if ctx.segments.count == 1, ctx.method == "PUT" { try validateDatabaseName(name) }
            throw CouchError.dbNotFound
        }
    }

    /// Applies `_all_dbs` style range parameters to the sorted database names.
    private func selectDatabaseNames(_ request: ServerRequest) throws(CouchError) -> [String] {
        var names = allDatabaseNames()
        let descending = try request.booleanQuery("descending") ?? false
        if descending { names.reverse() }
        var start = try request.jsonQuery("start_key")?.stringValue
        if start == nil { start = try request.jsonQuery("startkey")?.stringValue }
        var end = try request.jsonQuery("end_key")?.stringValue
        if end == nil { end = try request.jsonQuery("endkey")?.stringValue }
        let inclusiveEnd = try request.booleanQuery("inclusive_end") ?? true
        names = names.filter { name in
            let c = { (a: String, b: String) in Collation.compareRaw(a, b) * (descending ? -1 : 1) }
            if let start, c(name, start) < 0 { return false }
            if let end {
                let e = c(name, end)
                if e > 0 || (e == 0 && !inclusiveEnd) { return false }
            }
            return true
        }
        let skip = try request.intQuery("skip") ?? 0
        names = Array(names.dropFirst(max(skip, 0)))
        if let limit = try request.intQuery("limit") { names = Array(names.prefix(max(limit, 0))) }
        return names
    }

    private func dbsInfo(_ ctx: RequestContext) throws(CouchError) -> ServerResponse {
        let request = ctx.request
        switch ctx.method {
        case "GET", "HEAD":
            let names = try selectDatabaseNames(request)
            let rows: [JSON] = names.compactMap { name in
                guard let db = database(named: name) else { return nil }
                return .object([("key", .string(name)), ("info", databaseInfo(secondary(db)))])
            }
            let body = JSON.array(rows)
            return Reply.json(200, body, headers: [("ETag", "\"\(Crypto.opaqueToken(names.description))\"")])
        case "POST":
            guard request.contentTypeIsJSON else { throw CouchError.badContentType }
            let body = try request.jsonObjectBody()
            guard let keys = body["keys"]?.arrayValue else { throw CouchError.badRequest("`keys` member must exist.") }
            let rows: [JSON] = keys.map { key in
                if let name = key.stringValue, let db = database(named: name) {
                    return .object([("key", key), ("info", databaseInfo(secondary(db)))])
                }
                return .object([("key", key), ("error", "not_found")])
            }
            return Reply.json(200, .array(rows))
        default:
            throw CouchError.methodNotAllowed("GET,HEAD,POST")
        }
    }

    // MARK: - Database endpoints

    private func databaseEndpoint(_ ctx: RequestContext) throws(CouchError) -> ServerResponse {
        let segments = ctx.segments
        let dbName = segments[0]
        if segments.count == 1 {
            switch ctx.method {
            case "PUT":
                try requireServerAdmin(ctx.user)
                return try createDatabaseEndpoint(ctx, name: dbName)
            case "DELETE":
                try requireServerAdmin(ctx.user)
                if ctx.request.queryValue("rev") != nil {
                    throw CouchError.badRequest(
                        "You tried to DELETE a database with a ?=rev parameter. Did you mean to DELETE a document instead?"
                    )
                }
                guard deleteDatabase(name: dbName) else { throw CouchError.dbNotFound }
                return Reply.json(200, Reply.ok)
            case "GET", "HEAD":
                let db = try openDatabase(dbName, ctx)
                return Reply.json(200, databaseInfo(db))
            case "POST":
                let db = try openDatabase(dbName, ctx)
                return try postDocument(ctx, db)
            default:
                throw CouchError.methodNotAllowed("DELETE,GET,HEAD,POST,PUT")
            }
        }
        // System databases: _users and _replicator listings are admin-only.
        if Self.systemDatabases.contains(dbName), segments[1] == "_all_docs" || segments[1] == "_changes" {
            try requireServerAdmin(ctx.user)
        }
        let db = try openDatabase(dbName, ctx)
        let second = segments[1]
        switch second {
        // Reads CouchDB serves from one copy of each shard: on a lagging cluster, maybe an old one.
        case "_all_docs": return try allDocs(ctx, secondary(db), rest: Array(segments.dropFirst(2)))
        case "_design_docs": return try designDocs(ctx, secondary(db), rest: Array(segments.dropFirst(2)))
        case "_local_docs": return try localDocs(ctx, secondary(db), rest: Array(segments.dropFirst(2)))
        case "_bulk_docs": return try bulkDocs(ctx, db)
        case "_bulk_get": return try bulkGet(ctx, db)
        case "_changes":
            let normalFeed = (ctx.request.queryValue("feed") ?? "normal") == "normal"
            return try changes(ctx, normalFeed ? secondary(db) : db)
        case "_revs_diff": return try revsDiff(ctx, db)
        case "_missing_revs": return try missingRevs(ctx, db)
        case "_purge": return try purge(ctx, db)
        case "_purged_infos_limit": return try purgedInfosLimit(ctx, db)
        case "_purged_infos": return try purgedInfos(ctx, db)
        case "_revs_limit": return try revsLimit(ctx, db)
        case "_security": return try security(ctx, ctx.method == "GET" ? secondary(db) : db)
        case "_compact": return try compact(ctx, db)
        case "_view_cleanup": return try viewCleanup(ctx, db)
        case "_ensure_full_commit": return try ensureFullCommit(ctx, db)
        case "_find": return try mangoFind(ctx, db, partition: nil)
        case "_explain": return try mangoExplain(ctx, db, partition: nil)
        case "_index": return try mangoIndex(ctx, db)
        case "_partition": return try partitionEndpoint(ctx, db)
        case "_shards": return try shards(db, rest: Array(segments.dropFirst(2)))
        case "_temp_view":
            // chttpd_view:handle_temp_view_req, whatever the method.
            throw CouchError(410, "gone", "Temporary views are not supported in CouchDB")
        case "_design":
            guard segments.count >= 3 else { throw CouchError.notFound("missing") }
            let ddocID = "_design/" + segments[2]
            if segments.count == 3 { return try documentEndpoint(ctx, db, id: ddocID) }
            return try designEndpoint(ctx, db, ddocID: ddocID, rest: Array(segments.dropFirst(3)))
        case "_local":
            guard segments.count >= 3 else { throw CouchError.notFound("missing") }
            let id = "_local/" + segments.dropFirst(2).joined(separator: "/")
            return try localDocumentEndpoint(ctx, db, id: id)
        default:
            if second.hasPrefix("_local/") { return try localDocumentEndpoint(ctx, db, id: second) }
            if segments.count == 2 {
                // `r=1` reads one copy, which may not have the latest write yet.
                let oneCopy = ctx.method == "GET" && ctx.request.queryValue("r") == "1"
                return try documentEndpoint(ctx, oneCopy ? secondary(db) : db, id: second)
            }
            return try attachmentEndpoint(ctx, db, docID: second, name: segments.dropFirst(2).joined(separator: "/"))
        }
    }

    /// Opens a database and checks that the user may read it.
    func openDatabase(_ name: String, _ ctx: RequestContext) throws(CouchError) -> Database {
        guard let db = database(named: name) else {
            if let damage = damageOfDatabase(named: name) {
                throw CouchError(500, "file_error", "the database file is damaged: \(damage)")
            }
            throw CouchError.dbNotFound
        }
        try checkMember(db, ctx.user)
        return db
    }

    private func createDatabaseEndpoint(_ ctx: RequestContext, name: String) throws(CouchError) -> ServerResponse {
        try validateDatabaseName(name)
        let request = ctx.request
        let partitioned = request.flag("partitioned")
        // `?q=`, else the host's default (a node's `[cluster] q`), else CouchDB 3's default of 2; `?n=` (at most one
        // copy per node), else the host's default (3 on a cluster, as CouchDB's), 1 alone.
        let defaults = host?.placementDefaults() ?? (q: 2, n: 1, maxCopies: 1)
        func positive(_ name: String, _ fallback: Int) throws(CouchError) -> Int {
            guard let text = request.queryValue(name) else { return fallback }
            guard let value = Int(text), value > 0 else {
                throw CouchError.badRequest("The `\(name)` value should be a positive integer.")
            }
            return value
        }
        let q = try positive("q", min(max(defaults.q, 1), SequenceToken.maximumShards))
        let n = min(try positive("n", defaults.n), defaults.maxCopies)
        // CouchDB takes any q; a sequence of this engine holds each shard's position, for up to 255 shards.
        guard q <= SequenceToken.maximumShards else {
            throw CouchError.badRequest(
                "The `q` value should be a positive integer of at most \(SequenceToken.maximumShards).")
        }
        switch createDatabase(name: name, partitioned: partitioned, q: q, n: n) {
        case .success:
            return Reply.json(201, Reply.ok, headers: [("Location", request.baseURL + "/" + encodePathSegment(name))])
        case .failure(let e):
            throw e
        }
    }

    func validateDatabaseName(_ name: String) throws(CouchError) {
        if Self.systemDatabases.contains(name) { return }
        let allowedRest = Set("abcdefghijklmnopqrstuvwxyz0123456789_$()+-/")
        let valid: Bool
        if let first = name.first, ("a"..."z").contains(first), name.count <= 238,
            name.dropFirst().allSatisfy({ allowedRest.contains($0) })
        {
            valid = true
        } else {
            valid = false
        }
        if !valid {
            throw CouchError(
                400, "illegal_database_name",
                "Name: '\(name)'. Only lowercase characters (a-z), digits (0-9), and any of the characters _, $, (, ), +, -, and / are allowed. Must begin with a letter."
            )
        }
    }

    /// The body of `GET /db`.
    func databaseInfo(_ db: Database) -> JSON {
        db.withLock {
            let props: JSON = db.partitioned ? ["partitioned": true] : [:]
            let external = db.externalSize
            return .object([
                ("instance_start_time", .string(String(db.instanceStartTime))),
                ("db_name", .string(db.name)),
                ("purge_seq", .string(SequenceToken.encode(db.purgeSeq, db: db.name, purge: true))),
                ("update_seq", .string(SequenceToken.encode(position: db.currentPosition, db: db.name))),
                (
                    "sizes",
                    [
                        "file": .int(db.file?.size ?? Int64(16700 + external * 2)), "external": .int(Int64(external)),
                        "active": .int(Int64(db.docCount == 0 && db.delCount == 0 ? 0 : db.activeSize)),
                    ]
                ),
                ("props", props),
                ("doc_del_count", .int(Int64(db.delCount))),
                ("doc_count", .int(Int64(db.docCount))),
                ("disk_format_version", 8),
                ("compact_running", .bool(db.compactionRunning)),
                (
                    "cluster",
                    [
                        "q": .int(Int64(db.q)), "n": .int(Int64(db.n)), "w": .int(Int64(Self.quorum(db.n))),
                        "r": .int(Int64(Self.quorum(db.n))),
                    ]
                ),
            ])
        }
    }
}

/// CouchDB's opaque clustered sequences, `N-g1AAAA…`: the number before the dash is what we use.
package enum SequenceToken {
    package static func encode(_ n: Int, db: String, purge: Bool = false) -> String {
        var bytes = Data([0x83, 0x6c, 0x00, 0x00, 0x00, 0x01])
        bytes.append(Crypto.md5(Data((db + (purge ? "#purge" : "")).utf8)).prefix(8))
        var v = UInt64(n)
        for _ in 0..<8 {
            bytes.append(UInt8(v & 0xff))
            v >>= 8
        }
        return "\(n)-g1AAAA" + Crypto.base64URL(bytes)
    }

    /// The most shards a database can have: a sequence's opaque part counts them in one byte.
    static let maximumShards = 255

    /// A sequence of a sharded database, in CouchDB's shape: `N-opaque`, where N is the sum of
    /// the shards' own sequences and the opaque part carries each shard's position.
    static func encode(position: [Int], db: String) -> String {
        var bytes = Data([0x83, 0x6c, 0x00, 0x00, 0x00, UInt8(truncatingIfNeeded: position.count)])
        bytes.append(Crypto.md5(Data(db.utf8)).prefix(8))
        for value in position {
            var v = UInt64(max(value, 0))
            for _ in 0..<8 {
                bytes.append(UInt8(v & 0xff))
                v >>= 8
            }
        }
        // A position echoes what a client's `since` said, up to Int.max a shard: the sum saturates.
        let sum = position.reduce(0) { total, value in
            let (next, overflow) = total.addingReportingOverflow(max(value, 0))
            return overflow ? Int.max : next
        }
        return "\(sum)-g1AAAA" + Crypto.base64URL(bytes)
    }

    /// Where a `since` value points: shard positions (a sequence this server issued for a
    /// database of `shards` shards), or a plain number counted over the whole database.
    enum Since: Equatable {
        case position([Int])
        case global(Int)
    }

    /// Parses a `since` value of a database of `shards` shards (`now` is handled by the caller).
    static func decodeSince(_ text: String, shards: Int) -> Since? {
        if let n = Int(text), n >= 0 { return .global(n) }
        guard let n = decode(text) else { return nil }
        let opaque = text[text.index(after: text.firstIndex(of: "-")!)...]
        if opaque.hasPrefix("g1AAAA"), let bytes = Crypto.fromBase64URL(String(opaque.dropFirst(6))),
            bytes.count == 14 + 8 * shards, bytes.count >= 6, Int(bytes[5]) == shards
        {
            let values = (0..<shards).map { index -> Int in
                let start = 14 + 8 * index
                var v: UInt64 = 0
                for (offset, byte) in bytes[start..<(start + 8)].enumerated() { v |= UInt64(byte) << (8 * offset) }
                return Int(min(v, UInt64(Int.max)))
            }
            return .position(values)
        }
        return .global(n)
    }

    /// Parses a `since`-style value: `0`, an integer, `now` (nil here), or `N-opaque`.
    package static func decode(_ text: String) -> Int? {
        if let n = Int(text), n >= 0 { return n }
        guard let dash = text.firstIndex(of: "-"), let n = Int(text[..<dash]), n >= 0 else { return nil }
        let rest = text[text.index(after: dash)...]
        guard !rest.isEmpty, rest.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" }) else {
            return nil
        }
        return n
    }
}

extension CouchEngine {
    /// `GET /{db}/_shards` (each of the q ranges of `00000000-ffffffff` on this node) and
    /// `GET /{db}/_shards/{docid}` (the range holding that document), as CouchDB answers them.
    func shards(_ db: Database, rest: [String]) throws(CouchError) -> ServerResponse {
        let q = max(db.q, 1)
        let width = (UInt64(1) << 32) / UInt64(q)
        func range(_ index: Int) -> String {
            let start = UInt64(index) * width
            let end = index == q - 1 ? UInt64(0xFFFF_FFFF) : start + width - 1
            return String(format: "%08x-%08x", start, end)
        }
        let host = self.host
        func nodes(_ shard: Int) -> JSON {
            let names = host?.nodes(ofShard: shard, copies: db.n) ?? [Self.singleNodeName]
            return .array(names.map(JSON.string))
        }
        if let id = rest.first {
            let shard = db.withLock { db.shard(of: id) }
            return Reply.json(200, ["range": .string(range(shard)), "nodes": nodes(shard)])
        }
        return Reply.json(200, ["shards": .object((0..<q).map { (range($0), nodes($0)) })])
    }
}
