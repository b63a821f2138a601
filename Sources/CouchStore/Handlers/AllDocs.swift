import CouchQuery
import Foundation

/// Query arguments shared by `_all_docs`, `_design_docs`, `_local_docs` and views.
struct ViewArgs {
    var key: JSON?
    var keys: [JSON]?
    var startKey: JSON?
    var endKey: JSON?
    var startDocID: String?
    var endDocID: String?
    var inclusiveEnd = true
    var descending = false
    var limit: Int?
    var skip = 0
    var includeDocs = false
    var conflicts = false
    var updateSeq = false
    var attachments = false
    var attEncodingInfo = false
    var reduce: Bool?
    var group = false
    var groupLevel: Int?

    /// Reads the query string (JSON-encoded keys).
    init(query request: ServerRequest) throws(CouchError) {
        key = try request.jsonQuery("key")
        if let k = try request.jsonQuery("keys") {
            guard let list = k.arrayValue else { throw CouchError.badRequest("`keys` must be an array") }
            keys = list
        }
        startKey = try request.jsonQuery("start_key")
        if startKey == nil { startKey = try request.jsonQuery("startkey") }
        endKey = try request.jsonQuery("end_key")
        if endKey == nil { endKey = try request.jsonQuery("endkey") }
        startDocID = request.queryValue("start_key_doc_id") ?? request.queryValue("startkey_docid")
        endDocID = request.queryValue("end_key_doc_id") ?? request.queryValue("endkey_docid")
        inclusiveEnd = try request.booleanQuery("inclusive_end") ?? true
        descending = try request.booleanQuery("descending") ?? false
        if let l = request.queryValue("limit") {
            guard let n = Int(l), n >= 0 else {
                throw CouchError.queryParse("Invalid value for positive integer: \"\(l)\"")
            }
            limit = n
        }
        if let s = request.queryValue("skip") {
            guard let n = Int(s), n >= 0 else {
                throw CouchError.queryParse("Invalid value for positive integer: \"\(s)\"")
            }
            skip = n
        }
        includeDocs = try request.booleanQuery("include_docs") ?? false
        conflicts = try request.booleanQuery("conflicts") ?? false
        updateSeq = try request.booleanQuery("update_seq") ?? false
        attachments = try request.booleanQuery("attachments") ?? false
        attEncodingInfo = try request.booleanQuery("att_encoding_info") ?? false
        reduce = try request.booleanQuery("reduce")
        group = try request.booleanQuery("group") ?? false
        _ = try request.booleanQuery("sorted")  // read for its errors only
        if let g = request.queryValue("group_level") {
            guard let n = Int(g), n >= 0 else {
                throw CouchError.queryParse("Invalid value for positive integer: \"\(g)\"")
            }
            groupLevel = n
        }
    }

    /// A count from a JSON body (`limit`, `skip`, `group_level`): an integer of 0 or more, as CouchDB's
    /// `parse_pos_int` takes it (which writes a JSON number as it is, a string with quotes).
    private static func count(_ value: JSON) throws(CouchError) -> Int {
        guard let n = value.intValue else {
            throw CouchError.queryParse("Invalid value for integer: \(value.serialized)")
        }
        guard n >= 0, let count = Int(exactly: n) else {
            throw CouchError.queryParse("Invalid value for positive integer: \(value.serialized)")
        }
        return count
    }

    /// Overlays members of a JSON object (POST bodies and `queries` entries).
    mutating func apply(_ body: JSON) throws(CouchError) {
        for (name, value) in body.members {
            switch name {
            case "key": key = value
            case "keys":
                guard let list = value.arrayValue else {
                    throw CouchError.badRequest("`keys` member must be an array.")
                }
                keys = list
            case "startkey", "start_key": startKey = value
            case "endkey", "end_key": endKey = value
            case "startkey_docid", "start_key_doc_id": startDocID = value.stringValue
            case "endkey_docid", "end_key_doc_id": endDocID = value.stringValue
            case "inclusive_end": inclusiveEnd = try BooleanParameter.parse(value) ?? true
            case "descending": descending = try BooleanParameter.parse(value) ?? false
            case "limit": limit = try Self.count(value)
            case "skip": skip = try Self.count(value)
            case "include_docs": includeDocs = try BooleanParameter.parse(value) ?? false
            case "conflicts": conflicts = try BooleanParameter.parse(value) ?? false
            case "update_seq": updateSeq = try BooleanParameter.parse(value) ?? false
            case "attachments": attachments = try BooleanParameter.parse(value) ?? false
            case "att_encoding_info": attEncodingInfo = try BooleanParameter.parse(value) ?? false
            case "reduce": reduce = try BooleanParameter.parse(value)
            case "group": group = try BooleanParameter.parse(value) ?? false
            case "group_level": groupLevel = try Self.count(value)
            default: break
            }
        }
    }

    init() {}

    var renderOptions: DocRenderOptions {
        var o = DocRenderOptions()
        o.conflicts = conflicts
        o.attachments = attachments
        o.attEncodingInfo = attEncodingInfo
        return o
    }
}

extension CouchEngine {
    /// Applies ranges, direction, skip and limit to ids sorted ascending. Returns the offset and the ids.
    func selectIDs(_ ids: [String], _ args: ViewArgs) throws(CouchError) -> (offset: Int, ids: [String]) {
        func cmp(_ id: String, _ key: JSON) -> Int {
            if let s = key.stringValue { return Collation.compareRaw(id, s) }
            return Collation.compare(.string(id), key)
        }
        var start = args.startKey
        var end = args.endKey
        var inclusiveEnd = args.inclusiveEnd
        if let key = args.key {
            start = key
            end = key
            inclusiveEnd = true
        }
        if let s = start, let e = end {
            let c: Int
            if let ss = s.stringValue, let es = e.stringValue {
                c = Collation.compareRaw(ss, es)
            } else {
                c = Collation.compare(s, e)
            }
            if (!args.descending && c > 0) || (args.descending && c < 0) {
                throw CouchError(
                    400, "query_parse_error",
                    "No rows can match your key range, reverse your start_key and end_key or set descending=false",
                    extra: [CouchError.ref()])
            }
        }
        let ordered = args.descending ? Array(ids.reversed()) : ids
        var firstIndex = 0
        if let s = start {
            firstIndex = ordered.firstIndex { args.descending ? cmp($0, s) <= 0 : cmp($0, s) >= 0 } ?? ordered.count
        }
        var selected: [String] = []
        for id in ordered[firstIndex...] {
            if let e = end {
                let c = cmp(id, e) * (args.descending ? -1 : 1)
                if c > 0 || (c == 0 && !inclusiveEnd) { break }
            }
            selected.append(id)
        }
        let skipped = Array(selected.dropFirst(args.skip))
        let limited = args.limit.map { Array(skipped.prefix($0)) } ?? skipped
        return (firstIndex + min(args.skip, ordered.count - firstIndex), limited)
    }

    /// `{"total_rows":…,"offset":…,"rows":[…]}` written the way CouchDB streams it (one row per line).
    func rowsBody(totalRows: JSON, offset: JSON, updateSeq: String? = nil, rows: [JSON]) -> String {
        rowsHead(totalRows: totalRows, offset: offset, updateSeq: updateSeq)
            + rows.map(\.serialized).joined(separator: Self.rowSeparator) + Self.rowsTail
    }

    /// The head of a row response, up to its first row: `{"total_rows":…,"offset":…,"rows":[` and a line break.
    func rowsHead(totalRows: JSON, offset: JSON, updateSeq: String? = nil) -> String {
        var text = "{\"total_rows\":\(totalRows.serialized),\"offset\":\(offset.serialized)"
        if let updateSeq { text += ",\"update_seq\":\(JSON.string(updateSeq).serialized)" }
        text += ",\"rows\":[\r\n"
        return text
    }

    /// What separates the rows of a row response, and what ends it.
    static let rowSeparator = ",\r\n"
    static let rowsTail = "\r\n]}\n"

    private func docRow(_ db: Database, _ entry: DocEntry, _ args: ViewArgs) -> JSON? {
        guard let winner = entry.winner, !winner.deleted else { return nil }
        var pairs = docRowPairs(entry, winner)
        if args.includeDocs { pairs.append(("doc", renderDocument(entry, winner, args.renderOptions))) }
        return .object(pairs)
    }

    /// ``docRow(_:_:_:)`` as text, the document's stored body copied as written (the streamed rows).
    private func docRowText(_ db: Database, _ entry: DocEntry, _ args: ViewArgs) -> String? {
        guard let winner = entry.winner, !winner.deleted else { return nil }
        let pairs = docRowPairs(entry, winner)
        guard args.includeDocs else { return JSON.object(pairs).serialized }
        return rowText(pairs, doc: renderDocumentText(entry, winner, args.renderOptions))
    }

    private func docRowPairs(_ entry: DocEntry, _ winner: RevNode) -> [(String, JSON)] {
        [("id", .string(entry.id)), ("key", .string(entry.id)), ("value", ["rev": .string(winner.rev)])]
    }

    /// The row of one key of a `keys` query (lock held): deleted documents and unknown keys get CouchDB's
    /// special rows (`special`), the others their document's (`document`).
    private func keyRow<Row>(
        _ db: Database, _ key: JSON, _ args: ViewArgs, idFilter: (String) -> Bool, special: (JSON) -> Row,
        document: (DocEntry) -> Row?
    ) -> Row? {
        guard let id = key.stringValue, idFilter(id), let entry = db.docs[id], let winner = entry.winner else {
            return special(.object([("key", key), ("error", "not_found")]))
        }
        if winner.deleted {
            var pairs: [(String, JSON)] = [
                ("id", .string(id)), ("key", key), ("value", ["rev": .string(winner.rev), "deleted": true]),
            ]
            if args.includeDocs { pairs.append(("doc", .null)) }
            return special(.object(pairs))
        }
        return document(entry)
    }

    /// ``keyRow(_:_:_:idFilter:special:document:)`` as JSON.
    private func keyRow(_ db: Database, _ key: JSON, _ args: ViewArgs, idFilter: (String) -> Bool) -> JSON? {
        keyRow(db, key, args, idFilter: idFilter, special: { $0 }, document: { docRow(db, $0, args) })
    }

    /// The keys of a `keys` query in the order their rows are sent, skip and limit applied (every key has
    /// exactly one row).
    private func orderedKeys(_ keys: [JSON], _ args: ViewArgs) -> [JSON] {
        let ordered = args.descending ? Array(keys.reversed()) : keys
        let skipped = ordered.dropFirst(args.skip)
        return Array(args.limit.map { skipped.prefix($0) } ?? skipped)
    }

    /// Rows for a `keys` query (lock held).
    private func keyRows(_ db: Database, _ keys: [JSON], _ args: ViewArgs, idFilter: (String) -> Bool) -> [JSON] {
        orderedKeys(keys, args).compactMap { keyRow(db, $0, args, idFilter: idFilter) }
    }

    /// What an `_all_docs` query reads, worked out under the lock before the first byte is sent (so a bad
    /// range is still a 400): its counts and the ids (or keys) of its rows, a snapshot of the index. The rows
    /// are rendered from it a batch at a time, each document read then.
    struct AllDocsPlan: Sendable {
        enum Items: Sendable {
            case ids([String])
            case keys([JSON])
        }
        var total: Int
        var offset: Int?
        var updatePosition: [Int]
        var items: Items
        /// For a partition's query: the prefix its keys' ids must have.
        var prefix: String?
    }

    /// Plans one `_all_docs` query (optionally restricted to one simulated shard's partition).
    func allDocsPlan(_ db: Database, _ args: ViewArgs, partition: String? = nil) throws(CouchError) -> AllDocsPlan {
        try db.withLock { () throws(CouchError) -> AllDocsPlan in
            var live = db.sortedIDs.filter { db.docs.isLive($0) }
            var total = db.docCount
            var a = args
            var prefix: String?
            if let partition {
                let shard = db.shard(of: partition + ":x")
                live = live.filter { db.shard(of: $0) == shard }
                total = live.count
                prefix = partition + ":"
                if a.keys == nil {
                    // The partition's bounds, swapped when descending (couch_mrview_util's
                    // apply_all_docs_partition).
                    let low = JSON.string(partition + ":")
                    let high = JSON.string(partition + ":" + "\u{FFF0}")
                    if a.startKey == nil { a.startKey = a.descending ? high : low }
                    if a.endKey == nil { a.endKey = a.descending ? low : high }
                }
            }
            if let keys = a.keys {
                return AllDocsPlan(
                    total: total, offset: nil, updatePosition: db.currentPosition, items: .keys(orderedKeys(keys, a)),
                    prefix: prefix)
            }
            let (offset, ids) = try selectIDs(live, a)
            return AllDocsPlan(
                total: total, offset: offset, updatePosition: db.currentPosition, items: .ids(ids), prefix: prefix)
        }
    }

    /// Writes the rows of `plan` a batch at a time. False once the body cannot go on.
    func writeAllDocsRows(_ db: Database, _ plan: AllDocsPlan, _ args: ViewArgs, to out: RowStreamWriter) -> Bool {
        let prefix = plan.prefix
        switch plan.items {
        case .ids(let ids):
            return out.batches(ids, db: db) { id in db.docs[id].flatMap { docRowText(db, $0, args) } }
        case .keys(let keys):
            return out.batches(keys, db: db) { key in
                keyRow(
                    db, key, args, idFilter: { id in prefix.map { id.hasPrefix($0) } ?? true },
                    special: \.serialized, document: { docRowText(db, $0, args) })
            }
        }
    }

    /// Runs one `_all_docs` query whole (a `queries` request's answer holds each result in one object).
    func allDocsResult(_ db: Database, _ args: ViewArgs, partition: String? = nil) throws(CouchError)
        -> (total: Int, offset: Int?, rows: [JSON], updatePosition: [Int])
    {
        let plan = try allDocsPlan(db, args, partition: partition)
        let prefix = plan.prefix
        let rows: [JSON] = db.withLock {
            switch plan.items {
            case .ids(let ids):
                return ids.compactMap { id in db.docs[id].flatMap { docRow(db, $0, args) } }
            case .keys(let keys):
                return keys.compactMap { key in
                    keyRow(db, key, args, idFilter: { id in prefix.map { id.hasPrefix($0) } ?? true })
                }
            }
        }
        return (plan.total, plan.offset, rows, plan.updatePosition)
    }

    // MARK: - Endpoints

    func allDocs(_ ctx: RequestContext, _ db: Database, rest: [String], partition: String? = nil) throws(CouchError)
        -> ServerResponse
    {
        let request = ctx.request
        if rest.first == "queries" {
            guard ctx.method == "POST" else { throw CouchError.methodNotAllowed("POST") }
            let body = try request.jsonObjectBody()
            guard let queries = body["queries"]?.arrayValue else {
                throw CouchError.badRequest("Request body must be a JSON object with a `queries` member")
            }
            var results: [String] = []
            for query in queries {
                var args = try ViewArgs(query: request)
                try args.apply(query)
                let r = try allDocsResult(db, args, partition: partition)
                var pairs: [(String, JSON)] = [
                    ("total_rows", .int(Int64(r.total))), ("offset", r.offset.map { .int(Int64($0)) } ?? .null),
                ]
                if args.updateSeq {
                    pairs.append(("update_seq", .string(SequenceToken.encode(position: r.updatePosition, db: db.name))))
                }
                pairs.append(("rows", .array(r.rows)))
                results.append(JSON.object(pairs).serialized)
            }
            return Reply.text(200, "{\"results\":[\r\n" + results.joined(separator: ",\r\n") + "\r\n]}\n")
        }
        guard rest.isEmpty else { throw CouchError.notFound("missing") }
        var args = try ViewArgs(query: request)
        switch ctx.method {
        case "GET", "HEAD": break
        case "POST":
            guard request.contentTypeIsJSON else { throw CouchError.badContentType }
            try args.apply(try request.jsonObjectBody())
        default: throw CouchError.methodNotAllowed("GET,HEAD,POST")
        }
        let plan = try allDocsPlan(db, args, partition: partition)
        let head = rowsHead(
            totalRows: .int(Int64(plan.total)), offset: plan.offset.map { .int(Int64($0)) } ?? .null,
            updateSeq: args.updateSeq ? SequenceToken.encode(position: plan.updatePosition, db: db.name) : nil)
        let engine = self
        let query = args
        return Reply.streamed(method: ctx.method, separator: Self.rowSeparator) { out in
            guard out.text(head), engine.writeAllDocsRows(db, plan, query, to: out) else { return }
            out.text(Self.rowsTail)
        }
    }

    func designDocs(_ ctx: RequestContext, _ db: Database, rest: [String] = []) throws(CouchError) -> ServerResponse {
        try namespaceQuery(ctx, rest: rest) { args throws(CouchError) in
            try db.withLock { () throws(CouchError) -> (JSON, JSON, [JSON]) in
                let ids = db.sortedIDs.filter { $0.hasPrefix("_design/") && db.docs.isLive($0) }
                let total = JSON.int(Int64(ids.count))
                if let keys = args.keys {
                    return (total, .null, keyRows(db, keys, args, idFilter: { $0.hasPrefix("_design/") }))
                }
                let (offset, selected) = try selectIDs(ids, args)
                let rows = selected.compactMap { db.docs[$0].flatMap { docRow(db, $0, args) } }
                return (total, .int(Int64(offset)), rows)
            }
        }
    }

    func localDocs(_ ctx: RequestContext, _ db: Database, rest: [String] = []) throws(CouchError) -> ServerResponse {
        try namespaceQuery(ctx, rest: rest) { args throws(CouchError) in
            try db.withLock { () throws(CouchError) -> (JSON, JSON, [JSON]) in
                func row(_ id: String) -> JSON? {
                    guard let doc = db.local[id] else { return nil }
                    var pairs: [(String, JSON)] = [
                        ("id", .string(id)), ("key", .string(id)), ("value", ["rev": .string("0-\(doc.rev)")]),
                    ]
                    if args.includeDocs {
                        pairs.append(
                            (
                                "doc",
                                .object([("_id", .string(id)), ("_rev", .string("0-\(doc.rev)"))] + doc.body.members)
                            ))
                    }
                    return .object(pairs)
                }
                if let keys = args.keys {
                    let rows = keys.map { key in
                        key.stringValue.flatMap(row) ?? .object([("key", key), ("error", "not_found")])
                    }
                    return (.null, .null, rows)
                }
                let ids = db.local.keys.sorted(by: idLess)
                return (.null, .null, try selectIDs(ids, args).ids.compactMap(row))
            }
        }
    }

    /// `_design_docs` and `_local_docs`, and their `/queries` form: one result per query of a
    /// `{"queries":[…]}` body, as CouchDB answers them.
    private func namespaceQuery(
        _ ctx: RequestContext, rest: [String],
        run: (ViewArgs) throws(CouchError) -> (total: JSON, offset: JSON, rows: [JSON])
    ) throws(CouchError) -> ServerResponse {
        let request = ctx.request
        if rest.first == "queries", rest.count == 1 {
            guard ctx.method == "POST" else { throw CouchError.methodNotAllowed("POST") }
            let body = try request.jsonObjectBody()
            guard let queries = body["queries"]?.arrayValue else {
                throw CouchError.badRequest("Request body must be a JSON object with a `queries` member")
            }
            var results: [String] = []
            for query in queries {
                var args = try ViewArgs(query: request)
                try args.apply(query)
                let result = try run(args)
                results.append(
                    JSON.object([
                        ("total_rows", result.total), ("offset", result.offset), ("rows", .array(result.rows)),
                    ])
                    .serialized)
            }
            return Reply.text(200, "{\"results\":[\r\n" + results.joined(separator: ",\r\n") + "\r\n]}\n")
        }
        guard rest.isEmpty else { throw CouchError.notFound("missing") }
        var args = try ViewArgs(query: request)
        if ctx.method == "POST" { try args.apply(try request.jsonObjectBody()) }
        let result = try run(args)
        return Reply.text(200, rowsBody(totalRows: result.total, offset: result.offset, rows: result.rows))
    }
}
