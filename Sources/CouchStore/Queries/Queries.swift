import CouchQuery
import Foundation

extension MangoError {
    var couchError: CouchError { CouchError(status, error, reason) }
}

extension CouchEngine {
    // MARK: - Mango

    /// Every live design document, rendered with `_id` and `_rev` (lock held).
    private func designDocuments(_ db: Database) -> [JSON] {
        db.sortedIDs.filter { $0.hasPrefix("_design/") }.compactMap { id in
            guard let entry = db.docs[id], let winner = entry.winner, !winner.deleted else { return nil }
            return renderDocument(entry, winner, DocRenderOptions())
        }
    }

    /// The documents with `ids` as Mango sees them, nil for one not live (lock held).
    private func mangoDocuments(_ db: Database, ids: some Sequence<String>) -> [MangoDocument?] {
        ids.map { id in
            guard let entry = db.docs[id], let winner = entry.winner, !winner.deleted else { return nil }
            return MangoDocument(
                id: id, body: renderDocument(entry, winner, DocRenderOptions()), conflicts: entry.conflicts)
        }
    }

    /// `POST /{db}/_find`, streamed: the request is checked and planned before the first byte (its errors
    /// keep their status), then the database is scanned a batch at a time for the index keys, and the
    /// answer's documents fetched and sent a batch at a time (``MangoFindQuery``). The body is the one
    /// CouchDB's layout gives the whole answer: `{"docs":[…]`, then `bookmark`, `execution_stats`, `warning`.
    func mangoFind(_ ctx: RequestContext, _ db: Database, partition: String?) throws(CouchError) -> ServerResponse {
        guard ctx.method == "POST" else { throw CouchError.methodNotAllowed("POST") }
        guard ctx.request.contentTypeIsJSON else { throw CouchError.badContentType }
        let body = try ctx.request.jsonObjectBody()
        let ddocs = db.withLock { designDocuments(db) }
        let query: MangoFindQuery
        do {
            query = try MangoFindQuery(
                requestBody: body, designDocuments: ddocs, partition: partition,
                partitionedDatabase: db.partitioned)
        } catch {
            throw error.couchError
        }
        let engine = self
        let prefix = partition.map { $0 + ":" }
        return Reply.streamed(method: ctx.method, separator: ",") { out in
            guard out.text("{\"docs\":[") else { return }
            let tail = query.run(
                scan: { visit in
                    guard var ids = out.read({ db.withLock { db.sortedIDs } }) else { return false }
                    if let prefix { ids = ids.filter { $0.hasPrefix(prefix) } }
                    var start = 0
                    while start < ids.count {
                        let end = min(start + RowStreamWriter.batchSize, ids.count)
                        let batch = out.read { db.withLock { engine.mangoDocuments(db, ids: ids[start..<end]) } }
                        guard let batch else { return false }
                        for case let document? in batch { visit(document) }
                        start = end
                    }
                    return true
                },
                fetch: { ids in out.read { db.withLock { engine.mangoDocuments(db, ids: ids) } } ?? [] },
                emit: { docs in out.rows(docs) })
            guard let tail, out.isOpen else { return out.abort() }
            var text = "]"
            for (name, value) in tail { text += "," + JSON.string(name).serialized + ":" + value.serialized }
            out.text(text + "}\n")
        }
    }

    func mangoExplain(_ ctx: RequestContext, _ db: Database, partition: String?) throws(CouchError) -> ServerResponse {
        guard ctx.method == "POST" else { throw CouchError.methodNotAllowed("POST") }
        guard ctx.request.contentTypeIsJSON else { throw CouchError.badContentType }
        let body = try ctx.request.jsonObjectBody()
        let ddocs = db.withLock { designDocuments(db) }
        do {
            let result = try Mango.explain(
                requestBody: body, databaseName: db.name, designDocuments: ddocs,
                partition: partition, partitionedDatabase: db.partitioned)
            return Reply.json(200, result)
        } catch {
            throw error.couchError
        }
    }

    /// Saves a design document produced by the Mango index code (a new revision through the normal path).
    private func saveDesignDocument(_ db: Database, _ json: JSON, user: UserContext) throws(CouchError) {
        var doc = try parseDocument(json)
        guard let id = doc.id else { throw CouchError.badRequest("design document without _id") }
        try prepareWrite(&doc, id: id, db: db, user: user)
        try db.withLock { () throws(CouchError) in
            var base = doc.rev
            if base == nil, let winner = db.docs[id]?.winner, !winner.deleted { base = winner.rev }
            try db.updateInteractive(
                id: id, baseRev: base, deleted: doc.deleted, body: doc.body, attachments: doc.attachments)
        }
    }

    func mangoIndex(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ServerResponse {
        let segments = ctx.segments
        switch (ctx.method, segments.count) {
        case ("GET", 2), ("HEAD", 2):
            let ddocs = db.withLock { designDocuments(db) }
            let listing = Mango.listIndexes(designDocuments: ddocs, partitionedDatabase: db.partitioned)
            // `limit` and `skip` page the list as mango_httpd does; `total_rows` still counts all.
            let skip = max(0, Int(ctx.request.queryValue("skip") ?? "") ?? 0)
            let limit = Int(ctx.request.queryValue("limit") ?? "")
            guard skip > 0 || limit != nil, let all = listing["indexes"]?.arrayValue else {
                return Reply.json(200, listing)
            }
            let page = Array(all.dropFirst(skip).prefix(max(0, limit ?? all.count)))
            return Reply.json(200, listing.setting("indexes", .array(page)))
        case ("POST", 2):
            guard ctx.request.contentTypeIsJSON else { throw CouchError.badContentType }
            let body = try ctx.request.jsonObjectBody()
            let ddocs = db.withLock { designDocuments(db) }
            let creation: MangoIndexCreation
            do {
                creation = try Mango.createIndex(
                    requestBody: body, designDocuments: ddocs, partitionedDatabase: db.partitioned)
            } catch {
                throw error.couchError
            }
            if let ddoc = creation.designDocumentToSave { try saveDesignDocument(db, ddoc, user: ctx.user) }
            return Reply.json(200, creation.response)
        case ("DELETE", 5), ("DELETE", 4):
            let ddocName = segments[2]
            let type = segments.count == 5 ? segments[3] : "json"
            let name = segments[segments.count - 1]
            let ddocID = ddocName.hasPrefix("_design/") ? ddocName : "_design/" + ddocName
            let ddocs = db.withLock { designDocuments(db) }
            let deletion: MangoIndexDeletion
            do {
                deletion = try Mango.deleteIndex(
                    designDocuments: ddocs, designDocumentID: ddocID, type: type, name: name)
            } catch {
                throw error.couchError
            }
            if let updated = deletion.updated {
                try saveDesignDocument(db, updated, user: ctx.user)
            } else {
                let id = deletion.designDocumentID
                var probe = ParsedDoc()
                probe.deleted = true
                try prepareWrite(&probe, id: id, db: db, user: ctx.user)
                try db.withLock { () throws(CouchError) in
                    guard let winner = db.docs[id]?.winner, !winner.deleted else {
                        throw CouchError.notFound("missing")
                    }
                    try db.updateInteractive(id: id, baseRev: winner.rev, deleted: true, body: [:], attachments: [])
                }
            }
            return Reply.json(200, deletion.response)
        case ("POST", 3) where segments[2] == "_bulk_delete":
            throw CouchError(501, "not_implemented", "The engine does not support _index/_bulk_delete")
        default:
            if segments.count == 2 { throw CouchError.methodNotAllowed("GET,POST") }
            throw CouchError.methodNotAllowed("DELETE")
        }
    }

    // MARK: - Design documents and views

    func designEndpoint(_ ctx: RequestContext, _ db: Database, ddocID: String, rest: [String], partition: String? = nil)
        throws(CouchError) -> ServerResponse
    {
        switch rest[0] {
        case "_view":
            guard rest.count == 2 || (rest.count == 3 && rest[2] == "queries") else {
                throw CouchError.notFound("missing")
            }
            // Served from one copy of each shard: on a lagging cluster, maybe an old one.
            return try viewQuery(ctx, secondary(db), ddocID: ddocID, view: rest[1], partition: partition)
        case "_info":
            let language = db.withLock { () -> String? in
                guard let entry = db.docs[ddocID], entry.isDeleted == false else { return nil }
                return entry.winner?.body?["language"]?.stringValue ?? "javascript"
            }
            guard let language else { throw CouchError.notFound("missing") }
            let name = String(ddocID.dropFirst("_design/".count))
            return Reply.json(
                200,
                .object([
                    ("name", .string(name)),
                    (
                        "view_index",
                        // As fabric_group_info:merge_results builds it: updates_pending, then the
                        // keys it merges in reverse order, and none other (no update_options).
                        .object([
                            ("updates_pending", ["minimum": 0, "preferred": 0, "total": 0]), ("waiting_commit", false),
                            ("waiting_clients", 0), ("updater_running", false), ("update_seq", 0),
                            ("sizes", ["file": 0, "external": 0, "active": 0]),
                            ("signature", .string(Crypto.hex(Crypto.md5(Data(ddocID.utf8))))), ("purge_seq", 0),
                            ("language", .string(language)), ("compact_running", false),
                            // The ICU collator version the index was built with (CouchDB 3.5 on ICU 72).
                            ("collator_versions", ["153.120"]),
                        ])
                    ),
                ]))
        case "_show", "_list", "_update":
            return try designHandler(ctx, db, ddocID: ddocID, rest: rest)
        case "_rewrite":
            let exists = db.withLock { db.docs[ddocID]?.isDeleted == false }
            guard exists else { throw CouchError.notFound("missing") }
            throw CouchError(501, "not_implemented", "The engine does not emulate _rewrite")
        default:
            return try attachmentEndpoint(ctx, db, docID: ddocID, name: rest.joined(separator: "/"))
        }
    }

    func viewQuery(_ ctx: RequestContext, _ db: Database, ddocID: String, view: String, partition: String?)
        throws(CouchError) -> ServerResponse
    {
        let request = ctx.request
        var args = try ViewArgs(query: request)
        switch ctx.method {
        case "GET", "HEAD": break
        case "POST":
            guard request.contentTypeIsJSON else { throw CouchError.badContentType }
            let body = try request.jsonObjectBody()
            if body["queries"] == nil { try args.apply(body) }
        default: throw CouchError.methodNotAllowed("GET,POST,HEAD")
        }
        let ddoc: JSON? = db.withLock { db.docs[ddocID].flatMap { $0.isDeleted ? nil : $0.winner?.body } }
        guard let ddoc else { throw CouchError.notFound("missing") }
        guard let viewDef = ddoc["views"]?[view] else { throw CouchError.notFound("missing_named_view") }
        let partitionedView = db.partitioned && (ddoc["options"]?["partitioned"]?.boolValue ?? true)
        if partitionedView, partition == nil {
            throw CouchError.queryParse("`partition` parameter is mandatory for queries to this view.")
        }
        let hasReduce = viewDef["reduce"] != nil
        if hasReduce, args.reduce != false, args.includeDocs {
            throw CouchError.queryParse("`include_docs` is invalid for reduce")
        }
        if !hasReduce, args.reduce == true {
            throw CouchError.queryParse("Reduce is invalid for map-only views.")
        }
        if let s = args.startKey, let e = args.endKey {
            let c = Collation.compare(s, e)
            if (!args.descending && c > 0) || (args.descending && c < 0) {
                throw CouchError(
                    400, "query_parse_error",
                    "No rows can match your key range, reverse your start_key and end_key or set descending=false",
                    extra: [CouchError.ref()])
            }
        }
        let language = ddoc["language"]?.stringValue ?? "javascript"
        // JavaScript runs after the database's lock is let go: a slow map function holds up no write.
        let read = try db.withLock { () throws(CouchError) -> ([ViewRow]?, JavaScriptViewInput?) in
            if let native = try nativeViewRows(db, ddoc: ddoc, view: viewDef, partition: partition) {
                return (native, nil)
            }
            guard language == "javascript" else { return (nil, nil) }
            return (nil, try javascriptViewInput(db, ddocID: ddocID, ddoc: ddoc, view: view, partition: partition))
        }
        var rows = read.0
        if let input = read.1 { rows = try javascriptViewRows(input, ddoc: ddoc, view: view) }
        guard let rows else {
            throw CouchError(
                400, "unknown_query_language", "The view \(ddocID)/_view/\(view) is in language \(language).")
        }
        let reduce = viewDef["reduce"]?.stringValue
        let jsReduce: @Sendable ([ViewRow]) throws(CouchError) -> JSON = { (group) throws(CouchError) -> JSON in
            try self.javascriptReduce(db, ddocID: ddocID, ddoc: ddoc, view: view, rows: group)
        }
        if ctx.method == "POST", let queries = try request.jsonObjectBody()["queries"]?.arrayValue {
            var results: [String] = []
            for query in queries {
                var a = try ViewArgs(query: request)
                try a.apply(query)
                var text = try runView(db, rows: rows, reduce: reduce, args: a, jsReduce: jsReduce).text()
                if text.hasSuffix("\n") { text.removeLast() }
                results.append(text)
            }
            return Reply.text(200, "{\"results\":[\r\n" + results.joined(separator: ",\r\n") + "\r\n]}\n")
        }
        let output = try runView(db, rows: rows, reduce: reduce, args: args, jsReduce: jsReduce)
        return Reply.streamed(method: ctx.method, separator: Self.rowSeparator, output.write)
    }

    // MARK: - Partitions

    func partitionEndpoint(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ServerResponse {
        let segments = ctx.segments
        guard db.partitioned else { throw CouchError.badRequest("database is not partitioned") }
        guard segments.count >= 3 else { throw CouchError.notFound("missing") }
        let partition = segments[2]
        if partition.hasPrefix("_") {
            throw CouchError.badRequest("Partition name cannot start with an underscore.")
        }
        if segments.count == 3 {
            guard ctx.method == "GET" || ctx.method == "HEAD" else { throw CouchError.methodNotAllowed("GET,HEAD") }
            let info: JSON = db.withLock {
                var live = 0
                var deleted = 0
                var external = 0
                for id in db.sortedIDs where id.hasPrefix(partition + ":") {
                    guard let entry = db.docs[id], let winner = entry.winner else { continue }
                    if winner.deleted {
                        deleted += 1
                    } else {
                        live += 1
                        external += (winner.body?.serialized.utf8.count ?? 2) + id.utf8.count
                    }
                }
                return .object([
                    ("db_name", .string(db.name)),
                    ("sizes", ["active": .int(Int64(external * 3 + 25 * live)), "external": .int(Int64(external))]),
                    ("partition", .string(partition)), ("doc_count", .int(Int64(live))),
                    ("doc_del_count", .int(Int64(deleted))),
                ])
            }
            return Reply.json(200, info)
        }
        switch segments[3] {
        case "_all_docs": return try allDocs(ctx, db, rest: Array(segments.dropFirst(4)), partition: partition)
        case "_find": return try mangoFind(ctx, db, partition: partition)
        case "_explain": return try mangoExplain(ctx, db, partition: partition)
        case "_design":
            guard segments.count >= 6 else { throw CouchError.notFound("missing") }
            return try designEndpoint(
                ctx, db, ddocID: "_design/" + segments[4], rest: Array(segments.dropFirst(5)),
                partition: partition)
        default:
            throw CouchError.notFound("missing")
        }
    }
}
