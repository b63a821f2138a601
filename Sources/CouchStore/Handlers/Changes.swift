import CouchQuery
import Foundation

/// A parsed `_changes` request.
struct ChangesArgs {
    enum Filter {
        case none
        case docIDs([String])
        case selector(MangoSelector)
        case design
        /// A design document's filter function, or a view's map function (`filter=_view`).
        case function(@Sendable (JSON) -> Bool)
    }

    var feed = "normal"
    /// nil means `now`.
    var since: SequenceToken.Since? = .global(0)
    var limit: Int?
    var descending = false
    var includeDocs = false
    var allLeaves = false
    var filter = Filter.none
    var heartbeat: Int?
    var timeout: Int?
    var render = DocRenderOptions()

    var isFiltered: Bool {
        if case .none = filter { return false }
        return true
    }
}

extension CouchEngine {
    /// CouchDB's `[chttpd] changes_timeout` default, in milliseconds: the longest a feed's `timeout` or `heartbeat`
    /// waits.
    package static let changesTimeout = 60000

    private func parseChangesArgs(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ChangesArgs {
        let request = ctx.request
        var args = ChangesArgs()
        args.feed = request.queryValue("feed") ?? "normal"
        if !["normal", "longpoll", "continuous", "eventsource"].contains(args.feed) {
            throw CouchError.badRequest("Supported `feed` types: normal, continuous, live, longpoll, eventsource")
        }
        // `last-event-id` (query or EventSource header) is read as `since`, as CouchDB does.
        let since =
            request.queryValue("since") ?? request.queryValue("last-event-id") ?? request.headers["Last-Event-ID"]
        if let since {
            if since == "now" {
                args.since = nil
            } else {
                guard let position = SequenceToken.decodeSince(since, shards: max(db.q, 1)) else {
                    throw CouchError.badRequest("Malformed sequence supplied in 'since' parameter.")
                }
                args.since = position
            }
        }
        if let l = request.queryValue("limit") {
            guard let n = Int(l), n >= 0 else { throw CouchError.badRequest("Invalid value for limit: \(l)") }
            args.limit = max(n, 1)
        }
        args.descending = request.flag("descending")
        args.includeDocs = request.flag("include_docs")
        args.allLeaves = request.queryValue("style") == "all_docs"
        args.render.conflicts = request.flag("conflicts")
        args.render.attachments = request.flag("attachments")
        args.render.attEncodingInfo = request.flag("att_encoding_info")
        // Both are at most CouchDB's `[chttpd] changes_timeout` (60 s), as couch_changes:get_changes_timeout takes
        // them: a longer wait is a 60 s one (and a deadline past what a Date can be waited on is never made).
        if let h = request.queryValue("heartbeat") {
            if h == "true" {
                args.heartbeat = Self.changesTimeout
            } else if let n = Int(h), n > 0 {
                args.heartbeat = min(n, Self.changesTimeout)
            } else if h != "false" {
                throw CouchError.badRequest("Invalid heartbeat value. Expecting a positive integer value (or `true`).")
            }
        }
        if let t = request.queryValue("timeout") {
            guard let n = Int(t), n >= 0 else { throw CouchError.badRequest("Invalid timeout value: \(t)") }
            args.timeout = min(n, Self.changesTimeout)
        }
        var body: JSON = [:]
        if ctx.method == "POST", !request.body.isEmpty {
            body = try request.jsonBody()
        }
        switch request.queryValue("filter") {
        case nil:
            break
        case "_doc_ids":
            var ids: [JSON]?
            if let q = try request.jsonQuery("doc_ids") { ids = q.arrayValue }
            if let b = body["doc_ids"] { ids = b.arrayValue }
            guard let ids, ids.allSatisfy({ $0.stringValue != nil }) else {
                throw CouchError.badRequest("`doc_ids` filter parameter is not a list of doc ids.")
            }
            args.filter = .docIDs(ids.compactMap(\.stringValue))
        case "_selector":
            guard let selector = body["selector"] else {
                throw CouchError.badRequest("Selector must be specified in POST payload")
            }
            do {
                args.filter = .selector(try MangoSelector(selector))
            } catch {
                throw CouchError(error.status, error.error, error.reason)
            }
        case "_design":
            args.filter = .design
        case "_view":
            guard let view = request.queryValue("view") else {
                throw CouchError.badRequest("`view` filter parameter is not provided.")
            }
            let parts = view.split(separator: "/", maxSplits: 1).map(String.init)
            guard parts.count == 2 else {
                throw CouchError.badRequest("`view` must be of the form `designname/viewname`")
            }
            let ddoc = db.withLock { designDocument(db, "_design/" + parts[0]) }
            guard let ddoc else { throw CouchError.notFound("missing") }
            guard ddoc["views"]?[parts[1]] != nil else { throw CouchError.notFound("missing_named_view") }
            args.filter = .function(
                try javascriptViewFilter(db, ddocID: "_design/" + parts[0], ddoc: ddoc, view: parts[1]))
        case let name?:
            let parts = name.split(separator: "/", maxSplits: 1).map(String.init)
            guard parts.count == 2 else {
                throw CouchError.badRequest("`filter` must be of the form `designname/filtername`")
            }
            let ddoc = db.withLock { designDocument(db, "_design/" + parts[0]) }
            guard let ddoc else { throw CouchError.notFound("missing") }
            guard ddoc["filters"]?[parts[1]] != nil else { throw CouchError.notFound("missing json key: \(parts[1])") }
            args.filter = .function(
                try javascriptFilter(
                    db, ddocID: "_design/" + parts[0], ddoc: ddoc, name: parts[1], request: filterRequest(ctx, db)))
        }
        return args
    }

    /// A live design document as stored, with `_id` and `_rev` (lock held).
    func designDocument(_ db: Database, _ id: String) -> JSON? {
        guard let entry = db.docs[id], let winner = entry.winner, !winner.deleted else { return nil }
        return renderDocument(entry, winner, DocRenderOptions())
    }

    func javascriptNotSupported(_ what: String) -> CouchError {
        CouchError(501, "not_implemented", "The engine does not run JavaScript: \(what) needs a CouchDB server")
    }

    /// Where a feed starts (lock held): the shard positions `args.since` names, or now.
    func startPosition(_ db: Database, _ args: ChangesArgs) -> [Int] {
        switch args.since {
        case nil: return db.currentPosition
        case .global(let n)?: return db.position(atGlobal: n)
        case .position(let position)?: return position
        }
    }

    /// Whether `entry` passes the filters CouchDB applies before counting (`_doc_ids`, `_design`):
    /// changes they exclude stay counted in `pending`, as CouchDB reports them.
    private func passesPrefilter(_ entry: DocEntry, _ args: ChangesArgs) -> Bool {
        switch args.filter {
        case .docIDs(let ids): return ids.contains(entry.id)
        case .design: return entry.id.hasPrefix("_design/")
        case .selector, .none, .function: return true
        }
    }

    /// Whether `entry` passes the request's filter.
    private func passes(_ entry: DocEntry, _ winner: RevNode, _ args: ChangesArgs) -> Bool {
        guard passesPrefilter(entry, args) else { return false }
        if case .selector(let selector) = args.filter {
            var opts = DocRenderOptions()
            opts.conflicts = false
            return selector.matches(renderDocument(entry, winner, opts))
        }
        if case .function(let passes) = args.filter {
            return passes(renderDocument(entry, winner, DocRenderOptions()))
        }
        return true
    }

    private func changeRow(_ db: Database, _ entry: DocEntry, _ winner: RevNode, seq: [Int], _ args: ChangesArgs)
        -> JSON
    {
        var pairs: [(String, JSON)] = [
            ("seq", .string(SequenceToken.encode(position: seq, db: db.name))), ("id", .string(entry.id)),
        ]
        let revs = args.allLeaves ? entry.sortedLeaves.map(\.rev) : [winner.rev]
        pairs.append(("changes", .array(revs.map { ["rev": .string($0)] })))
        if winner.deleted { pairs.append(("deleted", true)) }
        if args.includeDocs { pairs.append(("doc", renderDocument(entry, winner, args.render))) }
        return .object(pairs)
    }

    /// One batch of changes after shard positions `since` (lock held): shard by shard, as a
    /// clustered CouchDB interleaves its shards (not in write order). Each row's `seq` resumes
    /// right after it; the last sequence covers everything looked at (filtered-out changes too).
    func collectChanges(_ db: Database, since: [Int], args: ChangesArgs, limit: Int?, countPending: Bool = true) -> (
        rows: [JSON], lastSeq: [Int], pending: Int
    ) {
        var rows: [JSON] = []
        if args.descending {
            // Newest first, over the whole database; each document read only when it is reached.
            let changed = db.changedIDsNewestFirst(since: 0)
            var lastSeq = db.currentPosition
            var pending = changed.count
            for (id, _) in changed {
                pending -= 1
                guard let entry = db.docs[id], let winner = entry.winner, passes(entry, winner, args) else { continue }
                let seq = db.position(atGlobal: entry.seq)
                rows.append(changeRow(db, entry, winner, seq: seq, args))
                lastSeq = seq
                if let limit, rows.count >= limit { break }
            }
            return (rows, lastSeq, max(pending, 0))
        }
        var position = since
        if position.count != db.currentPosition.count { position = db.position(atGlobal: 0) }
        // Documents are read one at a time as they are reached, so a batch with a limit reads only
        // what it needs (a replicator's batches of a large database stay cheap). `pending` is what
        // follows a full batch, counted from the index only then (and only when asked).
        var excluded = 0
        var full = false
        db.forEachChange(after: since) { id, shard, shardSeq in
            position[shard] = max(position[shard], shardSeq)
            guard let entry = db.docs[id] else { return true }
            guard passesPrefilter(entry, args) else {
                excluded += 1
                return true
            }
            guard let winner = entry.winner, passes(entry, winner, args) else { return true }
            rows.append(changeRow(db, entry, winner, seq: position, args))
            if let limit, rows.count >= limit {
                full = true
                return false
            }
            return true
        }
        if full {
            // As CouchDB counts it: the changes after the last row, and those skipped by the filter.
            return (rows, position, excluded + (countPending ? db.countChanges(after: position) : 0))
        }
        let lastSeq = zip(position, db.currentPosition).map { max($0, $1) }
        return (rows, lastSeq, excluded)
    }

    func changes(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ServerResponse {
        guard ctx.method == "GET" || ctx.method == "HEAD" || ctx.method == "POST" else {
            throw CouchError.methodNotAllowed("GET,HEAD,POST")
        }
        let args = try parseChangesArgs(ctx, db)
        let startSince: [Int] = db.withLock { startPosition(db, args) }
        let etag = "\"\(Crypto.opaqueToken(db.name + "#" + String(db.withLock { db.updateSeq })))\""
        switch args.feed {
        case "normal":
            return streamedNormalFeed(ctx, db, args: args, since: startSince, etag: etag)
        case "longpoll" where args.heartbeat != nil:
            return heartbeatLongpoll(db, args: args, since: startSince)
        case "longpoll":
            let deadline = Date().addingTimeInterval(Double(args.timeout ?? 60000) / 1000)
            var since = startSince
            while true {
                let (batch, timedOut): ((rows: [JSON], lastSeq: [Int], pending: Int), Bool) = db.withLock {
                    var batch = collectChanges(db, since: since, args: args, limit: args.limit)
                    while batch.rows.isEmpty, !db.isDeleted, !isClosed, Date() < deadline {
                        let seen = db.updateSeq
                        while db.updateSeq == seen, !db.isDeleted, !isClosed, Date() < deadline {
                            _ = db.cond.wait(until: deadline)
                        }
                        batch = collectChanges(db, since: since, args: args, limit: args.limit)
                    }
                    return (batch, Date() >= deadline)
                }
                if !batch.rows.isEmpty || timedOut || db.withLock({ db.isDeleted }) || isClosed {
                    return Reply.text(200, changesBody(db, batch))
                }
                since = batch.lastSeq
            }
        default:
            return continuousFeed(db, args: args, since: startSince)
        }
    }

    /// `feed=longpoll&heartbeat=…`: newlines while waiting (CouchDB then ignores `timeout`), the body once a change passes.
    private func heartbeatLongpoll(_ db: Database, args: ChangesArgs, since start: [Int]) -> ServerResponse {
        var response = ServerResponse(status: 200)
        response.headers.add("Content-Type", "application/json")
        response.headers.add("Cache-Control", "must-revalidate")
        let engine = self
        let interval = Double(args.heartbeat ?? 60000) / 1000
        response.body = .stream { writer in
            var since = start
            while true {
                let wakeAt = Date().addingTimeInterval(interval)
                let (batch, stop): ((rows: [JSON], lastSeq: [Int], pending: Int), Bool) = db.withLock {
                    var batch = engine.collectChanges(db, since: since, args: args, limit: args.limit)
                    while batch.rows.isEmpty, !db.isDeleted, !engine.isClosed, Date() < wakeAt {
                        let seen = db.updateSeq
                        while db.updateSeq == seen, !db.isDeleted, !engine.isClosed, Date() < wakeAt {
                            _ = db.cond.wait(until: wakeAt)
                        }
                        batch = engine.collectChanges(db, since: since, args: args, limit: args.limit)
                    }
                    return (batch, db.isDeleted || engine.isClosed)
                }
                if !batch.rows.isEmpty || stop {
                    writer.write(Data(engine.changesBody(db, batch).utf8))
                    return
                }
                since = batch.lastSeq
                if !writer.write(Data("\n".utf8)) { return }
            }
        }
        return response
    }

    /// A normal feed sent as it is read (limited, filtered, descending or whole), through the engine's one
    /// streamed-body mechanism (``RowStreamWriter``): 1,000 changes are read under the lock at a time, each
    /// document's body only then, and written without it, so memory stays flat however many changes there
    /// are. The body is the same as the feed built whole (CouchDB sends it chunked too): the rows, then
    /// `last_seq` and `pending` counted as CouchDB counts them (the changes after the last row and those the
    /// filter skipped).
    private func streamedNormalFeed(
        _ ctx: RequestContext, _ db: Database, args: ChangesArgs, since start: [Int],
        etag: String
    ) -> ServerResponse {
        let engine = self
        return Reply.streamed(method: ctx.method, separator: ",\n", headers: [("ETag", etag)]) { out in
            guard out.text("{\"results\":[\n") else { return }
            let tail: (lastSeq: [Int], pending: Int)?
            if args.descending {
                tail = engine.streamDescendingChanges(db, args: args, to: out)
            } else {
                tail = engine.streamChanges(db, since: start, args: args, to: out)
            }
            guard let tail else { return }
            var text = out.wroteRows ? "\n" : ""
            text += "],\n\"last_seq\":"
            text += JSON.string(SequenceToken.encode(position: tail.lastSeq, db: db.name)).serialized
            text += ",\"pending\":\(tail.pending)}\n"
            out.text(text)
        }
    }

    /// The rows of an ascending normal feed, a batch at a time; the feed's `last_seq` and `pending`, nil
    /// when the body could not go on.
    private func streamChanges(_ db: Database, since start: [Int], args: ChangesArgs, to out: RowStreamWriter)
        -> (lastSeq: [Int], pending: Int)?
    {
        var since = start
        var remaining = args.limit
        // Changes a prefilter skipped in the batches before (CouchDB counts them in `pending`).
        var excluded = 0
        while true {
            let size = min(remaining ?? RowStreamWriter.batchSize, RowStreamWriter.batchSize)
            // `pending` is counted from the index only when the feed's own limit ends it.
            let last = remaining.map { $0 <= RowStreamWriter.batchSize } ?? false
            guard
                let batch = out.read({
                    db.withLock { collectChanges(db, since: since, args: args, limit: size, countPending: last) }
                }), out.rows(batch.rows)
            else { return nil }
            since = batch.lastSeq
            if batch.rows.count < size || last { return (batch.lastSeq, excluded + batch.pending) }
            excluded += batch.pending
            remaining = remaining.map { $0 - size }
        }
    }

    /// The rows of a descending normal feed (newest first over the whole database), a batch at a time,
    /// from a snapshot of the sequence index taken when it starts; each document read when its batch is.
    private func streamDescendingChanges(_ db: Database, args: ChangesArgs, to out: RowStreamWriter)
        -> (lastSeq: [Int], pending: Int)?
    {
        guard let snapshot = out.read({ db.withLock { (db.changedIDsNewestFirst(since: 0), db.currentPosition) } })
        else { return nil }
        let (changed, current) = snapshot
        var lastSeq = current
        var pending = changed.count
        var start = changed.startIndex
        var written = 0
        while start < changed.endIndex {
            let end = min(start + RowStreamWriter.batchSize, changed.endIndex)
            var done = false
            let batch: [JSON]? = out.read {
                db.withLock {
                    var rows: [JSON] = []
                    for (id, _) in changed[start..<end] {
                        pending -= 1
                        guard let entry = db.docs[id], let winner = entry.winner, passes(entry, winner, args) else {
                            continue
                        }
                        let seq = db.position(atGlobal: entry.seq)
                        rows.append(changeRow(db, entry, winner, seq: seq, args))
                        lastSeq = seq
                        if let limit = args.limit, written + rows.count >= limit {
                            done = true
                            break
                        }
                    }
                    return rows
                }
            }
            guard let batch, out.rows(batch) else { return nil }
            written += batch.count
            if done { break }
            start = end
        }
        return (lastSeq, max(pending, 0))
    }

    private func changesBody(_ db: Database, _ batch: (rows: [JSON], lastSeq: [Int], pending: Int)) -> String {
        var text = "{\"results\":[\n"
        text += batch.rows.map(\.serialized).joined(separator: ",\n")
        if !batch.rows.isEmpty { text += "\n" }
        text += "],\n\"last_seq\":" + JSON.string(SequenceToken.encode(position: batch.lastSeq, db: db.name)).serialized
        text += ",\"pending\":\(batch.pending)}\n"
        return text
    }

    /// `feed=continuous` and `feed=eventsource`: streamed; waits for writes without holding any lock.
    private func continuousFeed(_ db: Database, args: ChangesArgs, since start: [Int]) -> ServerResponse {
        let eventSource = args.feed == "eventsource"
        var response = ServerResponse(status: 200)
        response.headers.add("Content-Type", eventSource ? "text/event-stream" : "application/json")
        response.headers.add("Cache-Control", eventSource ? "no-cache" : "must-revalidate")
        let engine = self
        response.body = .stream { writer in
            var since = start
            var remaining = args.limit
            let timeout = Double(args.timeout ?? 60000) / 1000
            var deadline = Date().addingTimeInterval(timeout)
            func format(_ row: JSON) -> String {
                if eventSource {
                    let seq = row["seq"] ?? .null
                    return "data: \(row.serialized)\nid: \(seq.serialized)\n\n"
                }
                return row.serialized + "\n"
            }
            while true {
                let batch = db.withLock { engine.collectChanges(db, since: since, args: args, limit: remaining) }
                for row in batch.rows {
                    if !writer.write(Data(format(row).utf8)) { return }
                }
                if !batch.rows.isEmpty { deadline = Date().addingTimeInterval(timeout) }
                since = batch.lastSeq
                if let r = remaining {
                    remaining = r - batch.rows.count
                    if remaining! <= 0 {
                        if !eventSource {
                            let last: JSON = .object([
                                ("last_seq", .string(SequenceToken.encode(position: since, db: db.name))),
                                ("pending", .int(Int64(batch.pending))),
                            ])
                            writer.write(Data((last.serialized + "\n").utf8))
                        }
                        return
                    }
                }
                // Wait for a write, a heartbeat or the timeout; the database lock is released while waiting.
                let wakeAt: Date = args.heartbeat.map { Date().addingTimeInterval(Double($0) / 1000) } ?? deadline
                let (changed, stop): (Bool, Bool) = db.withLock {
                    let seen = db.updateSeq
                    while db.updateSeq == seen, !db.isDeleted, !engine.isClosed, Date() < wakeAt {
                        _ = db.cond.wait(until: wakeAt)
                    }
                    return (db.updateSeq != seen, db.isDeleted || engine.isClosed)
                }
                if stop { return }
                if changed { continue }
                if args.heartbeat != nil {
                    let beat = eventSource ? "event: heartbeat\ndata: \n\n" : "\n"
                    if !writer.write(Data(beat.utf8)) { return }
                    continue
                }
                // Timed out without a heartbeat: the feed ends.
                if !eventSource {
                    let last: JSON = .object([
                        ("last_seq", .string(SequenceToken.encode(position: since, db: db.name))), ("pending", 0),
                    ])
                    writer.write(Data((last.serialized + "\n\n").utf8))
                }
                return
            }
        }
        return response
    }
}
