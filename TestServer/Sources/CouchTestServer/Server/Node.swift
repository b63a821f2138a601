import CouchQuery
import CouchStore
import Foundation

/// Server-wide state that is not a database: node configuration and the `_db_updates` log.
final class NodeState: @unchecked Sendable {
    // Safe: every member is only touched while `cond` is locked.
    let cond = NSCondition()
    private(set) var config: [String: [String: String]]
    /// Latest event per database, with a counter as sequence: what `_global_changes` holds.
    private var updates: [String: (seq: Int, type: String)] = [:]
    private(set) var updateSeq = 0
    /// Whether `_global_changes` exists: CouchDB's global_changes_server drops the events it
    /// cannot write while it does not.
    private var recording = false
    /// Bumped each time `_global_changes` is created or deleted: its history starts over.
    private(set) var generation = 0
    let startTime = Date()

    init(options: ServerEngine.Options, uuid: String) {
        config = Self.shippedConfiguration(uuid: uuid)
        // What an installation sets in local.ini: its admin, and the settings the TestServer was given.
        config["admins"] = [options.adminName: "-pbkdf2-hidden"]
        if options.sessionTimeout != 600 {
            config["chttpd_auth", default: [:]]["timeout"] = String(options.sessionTimeout)
        }
        if options.passwordIterations != 600_000 {
            config["chttpd_auth", default: [:]]["iterations"] = String(options.passwordIterations)
        }
    }

    /// The keys and values CouchDB 3.5.0's `default.ini` sets (everything else there is commented
    /// out, so a server reports it as `unknown_config_value`), with the release's template values
    /// filled in as a single node started on port 5984 has them. Sections with no key are not
    /// reported, as CouchDB does not.
    static func shippedConfiguration(uuid: String) -> [String: [String: String]] {
        [
            "vendor": ["name": "The Apache Software Foundation"],
            "couchdb": ["uuid": uuid, "database_dir": "./data", "view_index_dir": "./data"],
            "couchdb_engines": ["couch": "couch_bt_engine"],
            "chttpd": ["port": "5984", "bind_address": "127.0.0.1"],
            "httpd": ["port": "5986", "bind_address": "127.0.0.1"],
            "chttpd_auth": ["hash_algorithms": "sha256, sha"],
            "couch_httpd_auth": ["authentication_db": "_users"],
            "indexers": ["couch_mrview": "true"],
            "feature_flags": ["partitioned||*": "true"],
            "smoosh": ["state_dir": "./data"],
            "dreyfus": ["name": "clouseau@127.0.0.1"],
            "prometheus": ["additional_port": "false", "bind_address": "127.0.0.1", "port": "17986"],
            "nouveau": ["enable": "false", "url": "http://127.0.0.1:5987"],
        ]
    }

    func withLock<T>(_ body: () -> T) -> T {
        cond.lock()
        defer { cond.unlock() }
        return body()
    }

    func setConfig(_ section: String, _ key: String, _ value: String?) -> String? {
        withLock {
            let old = config[section]?[key]
            if let value {
                config[section, default: [:]][key] = value
            } else {
                config[section]?[key] = nil
                if config[section]?.isEmpty == true { config[section] = nil }
            }
            return old
        }
    }

    /// `_global_changes` was created (`exists`) or deleted: the history starts over, empty, as a
    /// new database's does.
    func globalChangesDatabase(exists: Bool) {
        cond.lock()
        recording = exists
        updates.removeAll()
        updateSeq = 0
        generation += 1
        cond.broadcast()
        cond.unlock()
    }

    func noteUpdate(_ db: String, _ type: String) {
        // global_changes_listener skips the events of `_global_changes` itself.
        if db == "_global_changes" { return }
        cond.lock()
        guard recording else {
            cond.unlock()
            return
        }
        updateSeq += 1
        if updates[db]?.type == "created", type == "updated" {
            updates[db] = (updateSeq, "created")
        } else {
            updates[db] = (updateSeq, type)
        }
        cond.broadcast()
        cond.unlock()
    }

    /// Events after `since`, in order (lock held).
    func events(since: Int) -> [(db: String, type: String, seq: Int)] {
        updates.filter { $0.value.seq > since }.map { ($0.key, $0.value.type, $0.value.seq) }.sorted { $0.seq < $1.seq }
    }
}

extension ServerEngine {
    func nodeEndpoint(_ ctx: ServerContext) throws(CouchError) -> ServerResponse {
        let segments = ctx.segments
        guard segments.count >= 2 else { throw CouchError.notFound("missing") }
        let name = segments[1] == "_local" || segments[1] == "nonode@nohost" ? cluster.nodeNames[0] : segments[1]
        guard cluster.nodeNames.contains(name) else { throw CouchError(404, "not_found", "unknown_node") }
        if segments.count == 2 { return Reply.json(200, ["name": .string(name)]) }
        switch segments[2] {
        case "_config":
            return try configEndpoint(ctx, Array(segments.dropFirst(3)))
        case "_stats":
            let stats: JSON = [
                "couchdb": [
                    "request_time": [
                        "value": ["min": 0, "max": 0, "arithmetic_mean": 0], "type": "histogram",
                        "desc": "length of a request inside CouchDB without MochiWeb",
                    ],
                    "open_databases": [
                        "value": .int(Int64(store.databaseNames.count)), "type": "counter",
                        "desc": "number of open databases",
                    ],
                ]
            ]
            // `_stats/{group}/{metric}` answers just that part of the tree, as CouchDB does.
            var selected = stats
            for name in segments.dropFirst(3) {
                guard let next = selected[name] else { throw CouchError.notFound("missing") }
                selected = next
            }
            return Reply.json(200, selected)
        case "_system":
            let uptime = Int64(Date().timeIntervalSince(node.startTime))
            return Reply.json(
                200,
                [
                    "uptime": .int(uptime), "memory": ["other": 0, "atom": 0, "processes": 0, "binary": 0, "ets": 0],
                    "run_queue": 0, "ets_table_count": 0, "context_switches": 0, "reductions": 0,
                    "garbage_collection_count": 0,
                    "words_reclaimed": 0, "io_input": 0, "io_output": 0, "os_proc_count": 0, "stale_proc_count": 0,
                    "process_count": 0, "process_limit": 262144, "message_queues": [:], "internal_replication_jobs": 0,
                    "distribution": [:],
                ])
        case "_versions":
            return Reply.json(200, ["erlang_version": "26", "javascript_engine": ["name": "none", "version": "0"]])
        default:
            throw CouchError.notFound("missing")
        }
    }

    private func configEndpoint(_ ctx: ServerContext, _ rest: [String]) throws(CouchError) -> ServerResponse {
        switch rest.count {
        case 0:
            guard ctx.method == "GET" || ctx.method == "HEAD" else { throw CouchError.methodNotAllowed("GET") }
            let config = node.withLock { node.config }
            let body: JSON = .object(
                config.keys.sorted().map { section in
                    (section, .object(config[section]!.keys.sorted().map { ($0, JSON.string(config[section]![$0]!)) }))
                })
            return Reply.json(200, body)
        case 1:
            guard ctx.method == "GET" || ctx.method == "HEAD" else { throw CouchError.methodNotAllowed("GET") }
            let section = node.withLock { node.config[rest[0]] ?? [:] }
            return Reply.json(200, .object(section.keys.sorted().map { ($0, JSON.string(section[$0]!)) }))
        case 2:
            let (section, key) = (rest[0], rest[1])
            switch ctx.method {
            case "GET", "HEAD":
                guard let value = node.withLock({ node.config[section]?[key] }) else {
                    throw CouchError(404, "not_found", "unknown_config_value")
                }
                return Reply.json(200, .string(value))
            case "PUT":
                let body = try ctx.request.jsonBody()
                guard let value = body.stringValue else {
                    throw CouchError.badRequest("config values must be strings")
                }
                let old = node.setConfig(section, key, value)
                return Reply.json(200, .string(old ?? ""))
            case "DELETE":
                guard let old = node.setConfig(section, key, nil) else {
                    throw CouchError(404, "not_found", "unknown_config_value")
                }
                return Reply.json(200, .string(old))
            default:
                throw CouchError.methodNotAllowed("DELETE,GET,PUT")
            }
        default:
            throw CouchError.notFound("missing")
        }
    }

    func dbUpdates(_ ctx: ServerContext) throws(CouchError) -> ServerResponse {
        // global_changes_httpd: any method but GET (HEAD is a GET to chttpd) is 405.
        guard ctx.method == "GET" || ctx.method == "HEAD" else { throw CouchError.methodNotAllowed("GET") }
        // CouchDB serves `_db_updates` from `_global_changes`, which a single node does not have
        // until someone creates it.
        guard store.handle(ofDatabase: "_global_changes") != nil else { throw CouchError.dbNotFound }
        let request = ctx.request
        let feed = request.queryValue("feed") ?? "normal"
        var since = 0
        if let s = request.queryValue("since") {
            if s == "now" {
                since = self.node.withLock { self.node.updateSeq }
            } else {
                guard let n = SequenceToken.decode(s) else {
                    throw CouchError.badRequest("Malformed sequence supplied in 'since' parameter.")
                }
                since = n
            }
        }
        // Milliseconds, as global_changes_httpd's to_non_neg_int reads them: anything but an integer of 0 or more is
        // a 400; at most 60 s (the feed under it takes them so). A heartbeat of 0 is taken as 100 ms (CouchDB sends
        // at most one per tick of its feed's timer).
        func milliseconds(_ name: String) throws(CouchError) -> Int? {
            guard let text = request.queryValue(name) else { return nil }
            guard let value = Int(text), value >= 0 else { throw CouchError.badRequest("invalid_integer") }
            return min(value, CouchEngine.changesTimeout)
        }
        let timeout = Double(try milliseconds("timeout") ?? 60000) / 1000
        let heartbeat: Int?
        switch request.queryValue("heartbeat") {
        case "true": heartbeat = 60000
        case "false": heartbeat = nil
        default: heartbeat = try milliseconds("heartbeat").map { max($0, 100) }
        }
        @Sendable func row(_ e: (db: String, type: String, seq: Int)) -> JSON {
            .object([
                ("db_name", .string(e.db)), ("type", .string(e.type)),
                ("seq", .string(SequenceToken.encode(e.seq, db: "_dbs"))),
            ])
        }
        let node = self.node
        switch feed {
        case "longpoll", "continuous", "eventsource":
            if feed == "longpoll" {
                let deadline = Date().addingTimeInterval(timeout)
                let (events, last): ([(db: String, type: String, seq: Int)], Int) = node.withLock {
                    var events = node.events(since: since)
                    while events.isEmpty, Date() < deadline, !isClosed {
                        _ = node.cond.wait(until: deadline)
                        events = node.events(since: since)
                    }
                    return (events, node.updateSeq)
                }
                return Reply.text(200, Self.dbUpdatesBody(events.map(row), last: last))
            }
            var response = ServerResponse(status: 200)
            response.headers.add("Content-Type", "application/json")
            response.headers.add("Cache-Control", "must-revalidate")
            let engine = self
            let start = since
            let generation = node.withLock { node.generation }
            response.body = .stream { writer in
                var position = start
                var deadline = Date().addingTimeInterval(timeout)
                while true {
                    let events = node.withLock { node.events(since: position) }
                    for e in events {
                        if !writer.write(Data((row(e).serialized + "\n").utf8)) { return }
                        position = e.seq
                        deadline = Date().addingTimeInterval(timeout)
                    }
                    let wakeAt = heartbeat.map { Date().addingTimeInterval(Double($0) / 1000) } ?? deadline
                    let (changed, startedOver): (Bool, Bool) = node.withLock {
                        let seen = node.updateSeq
                        while node.updateSeq == seen, node.generation == generation, Date() < wakeAt,
                            !engine.isClosed
                        {
                            _ = node.cond.wait(until: wakeAt)
                        }
                        return (node.updateSeq != seen, node.generation != generation)
                    }
                    // The feed followed a `_global_changes` that is gone.
                    if engine.isClosed || startedOver { return }
                    if changed { continue }
                    if heartbeat != nil {
                        if !writer.write(Data("\n".utf8)) { return }
                        continue
                    }
                    let last = JSON.object([("last_seq", .string(SequenceToken.encode(position, db: "_dbs")))])
                    writer.write(Data((last.serialized + "\n").utf8))
                    return
                }
            }
            return response
        default:
            let (events, last) = node.withLock { (node.events(since: since), node.updateSeq) }
            return Reply.text(200, Self.dbUpdatesBody(events.map(row), last: last))
        }
    }

    /// The normal and longpoll feeds as global_changes_httpd.erl writes them: `{"results":[` and a
    /// newline, the rows joined by `,\r\n`, then a newline, `],`, and `"last_seq"` on a line of its own.
    static func dbUpdatesBody(_ rows: [JSON], last: Int) -> String {
        "{\"results\":[\n" + rows.map(\.serialized).joined(separator: ",\r\n") + "\n],\n\"last_seq\":"
            + JSON.string(SequenceToken.encode(last, db: "_dbs")).serialized + "}\n"
    }
}
