import CouchJS
import HTTPWire
import CouchQuery
import Foundation

/// Design documents' JavaScript, run with CouchJS as CouchDB runs it with its query server: map
/// and reduce functions of views, `validate_doc_update` on every write, `_changes` filters, and a
/// compilation check of every function when a design document is saved.
///
/// Each design document revision gets one `JSQueryServer` (compiled functions kept), used under
/// a lock of its own (the interpreter is not thread-safe): design documents run in parallel, so a
/// slow function (within the interpreter's step, memory and time budgets) holds up only calls into
/// its own design document, never other databases' views or validations.
final class JavaScriptFunctions: @unchecked Sendable {
    // @unchecked Sendable: `servers` and `viewRows` are under `lock`; every use of a server is
    // under its entry's `lock`.
    private let lock = NSLock()
    private final class Entry {
        let lock = NSLock()
        let server: JSQueryServer
        var functions: [String: JSValue] = [:]
        init(_ server: JSQueryServer) { self.server = server }
    }
    private var servers: [String: Entry] = [:]
    /// Computed view rows, per view and database state.
    private var viewRows: [String: [ViewRow]] = [:]

    /// Runs `body` with the query server of a design document revision (made on first use).
    func with<T>(
        _ key: String, ddoc: JSON, _ body: (JSQueryServer, inout [String: JSValue]) throws(CouchError) -> T
    ) throws(CouchError) -> T {
        lock.lock()
        let entry: Entry
        if let existing = servers[key] {
            entry = existing
        } else {
            if servers.count > 200 { servers.removeAll() }
            // A new revision of a design document replaces the query servers of its other revisions
            // (a call still running on one keeps it until it returns).
            if let separator = key.lastIndex(of: "\u{0}") {
                let document = key[...separator]
                for other in servers.keys where other.hasPrefix(document) { servers[other] = nil }
            }
            entry = Entry(JSQueryServer(designDocument: ddoc))
            servers[key] = entry
        }
        lock.unlock()
        entry.lock.lock()
        defer { entry.lock.unlock() }
        return try body(entry.server, &entry.functions)
    }

    /// How many query servers are kept (for tests).
    var serverCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return servers.count
    }

    func cachedRows(_ key: String) -> [ViewRow]? {
        lock.lock()
        defer { lock.unlock() }
        return viewRows[key]
    }

    func storeRows(_ key: String, _ rows: [ViewRow]) {
        lock.lock()
        if viewRows.count > 100 { viewRows.removeAll() }
        viewRows[key] = rows
        lock.unlock()
    }
}

extension CouchEngine {
    /// Compiles (or takes the compiled) function at `path` of a design document revision.
    private func function(
        _ server: JSQueryServer, _ cache: inout [String: JSValue], path: String, source: String
    ) throws(CouchError) -> JSValue {
        if let f = cache[path] { return f }
        do {
            let f = try server.compile(source)
            cache[path] = f
            return f
        } catch {
            throw CouchError(400, "compilation_error", "\(error)")
        }
    }

    /// The query server of a design document's functions: its database, id and content (without the
    /// `_` members, so that the stored body views pass and the rendered document validations pass
    /// name the same one, and a replaced revision is told apart by its content).
    private func serverKey(_ db: Database, _ ddocID: String, _ ddoc: JSON) -> String {
        let content = JSON.object(ddoc.members.filter { !$0.0.hasPrefix("_") })
        return db.name + "\u{0}" + ddocID + "\u{0}" + Crypto.hex(Crypto.md5(content.data))
    }

    // MARK: - Saving a design document

    /// Refuses a JavaScript design document whose functions do not compile, as CouchDB does
    /// (400 `compilation_error`, naming the function).
    func checkDesignFunctionsCompile(_ body: JSON) throws(CouchError) {
        guard (body["language"]?.stringValue ?? "javascript") == "javascript" else { return }
        let server = JSQueryServer(designDocument: body)
        func check(_ source: JSON?, _ what: String) throws(CouchError) {
            guard let source else { return }
            guard case .string(let text) = source else {
                throw CouchError(400, "compilation_error", "Compilation of the \(what) failed: not a string.")
            }
            if what.hasPrefix("reduce"), text.hasPrefix("_") { return }  // a built-in reduce
            do {
                _ = try server.compile(text)
            } catch {
                throw CouchError(400, "compilation_error", "Compilation of the \(what) failed: \(error)")
            }
        }
        for (view, def) in (body["views"] ?? [:]).members {
            try check(def["map"], "map function in the '\(view)' view")
            try check(def["reduce"], "reduce function in the '\(view)' view")
        }
        try check(body["validate_doc_update"], "validate_doc_update function")
        for section in ["filters", "shows", "lists", "updates"] {
            for (name, source) in (body[section] ?? [:]).members {
                try check(source, "\(section.dropLast()) function '\(name)'")
            }
        }
    }

    // MARK: - validate_doc_update

    /// Runs every design document's `validate_doc_update` on a write (lock not held): a thrown
    /// `{forbidden: …}` refuses it with 403, `{unauthorized: …}` with 401.
    func runValidations(_ db: Database, id: String, doc: ParsedDoc, user: UserContext) throws(CouchError) {
        let host = self.host
        let (validators, oldDoc, security) = db.withLock { () -> ([(String, JSON)], JSON, JSON) in
            var validators: [(String, JSON)] = []
            for ddocID in db.designIDs.sorted() {
                guard let entry = db.docs[ddocID], let winner = entry.winner, !winner.deleted, let body = winner.body,
                    (body["language"]?.stringValue ?? "javascript") == "javascript", body["validate_doc_update"] != nil
                else { continue }
                // `_users/_design/_auth` in the TestServer: the host enforces those rules natively.
                if host?.enforcesValidation(ofDesignDocument: ddocID, in: db.name) == true { continue }
                validators.append((ddocID, renderDocument(entry, winner, DocRenderOptions())))
            }
            var old: JSON = .null
            if !validators.isEmpty, let entry = db.docs[id], let winner = entry.winner, !winner.deleted {
                old = renderDocument(entry, winner, DocRenderOptions())
            }
            return (validators, old, db.security)
        }
        guard !validators.isEmpty else { return }
        var members: [(String, JSON)] = [("_id", .string(id))]
        if let rev = doc.rev { members.append(("_rev", .string(rev))) }
        members += doc.body.members
        if doc.deleted { members.append(("_deleted", true)) }
        let newDoc = JSON.object(members)
        let userCtx: JSON = [
            "db": .string(db.name), "name": user.name.map(JSON.string) ?? .null,
            "roles": .array(user.roles.map(JSON.string)),
        ]
        for (ddocID, ddoc) in validators {
            guard case .string(let source)? = ddoc["validate_doc_update"] else { continue }
            try javaScript.with(serverKey(db, ddocID, ddoc), ddoc: ddoc) { (server, cache) throws(CouchError) in
                let validate = try function(server, &cache, path: "validate_doc_update", source: source)
                do throws(JSQueryServer.Failure) {
                    _ = try server.call(validate, [newDoc, oldDoc, userCtx, security])
                } catch {
                    if let message = error.thrownObject?["forbidden"] {
                        throw CouchError(403, "forbidden", message.stringValue ?? message.serialized)
                    }
                    if let message = error.thrownObject?["unauthorized"] {
                        throw CouchError(401, "unauthorized", message.stringValue ?? message.serialized)
                    }
                    // Anything else thrown, or a budget run out: CouchDB's 500 `unknown_error`, for
                    // this write only (the message says what happened, and is logged).
                    server.interpreter.log("validate_doc_update in \(ddocID) failed: \(error)")
                    throw CouchError(500, "unknown_error", "validate_doc_update in \(ddocID) failed: \(error)")
                }
            }
        }
    }

    // MARK: - Views

    /// What a JavaScript view needs from its database, read under the database's lock: its rows
    /// when they are cached for this state, else the documents to map.
    struct JavaScriptViewInput {
        var rows: [ViewRow]?
        var docs: [(String, JSON)] = []
        var source = ""
        var key = ""
        var stateKey = ""
    }

    /// Reads what a JavaScript view needs (the database's lock held): nothing runs here, so a
    /// slow map function never holds the lock.
    func javascriptViewInput(_ db: Database, ddocID: String, ddoc: JSON, view: String, partition: String?)
        throws(CouchError) -> JavaScriptViewInput
    {
        guard case .string(let source)? = ddoc["views"]?[view]?["map"] else {
            throw CouchError.notFound("missing_named_view")
        }
        var input = JavaScriptViewInput(source: source)
        input.key = serverKey(db, ddocID, ddoc)
        input.stateKey =
            input.key + "\u{0}" + view + "\u{0}" + (partition ?? "") + "\u{0}" + String(db.updateSeq)
            + "\u{0}" + String(ObjectIdentifier(db).hashValue)
        if let rows = javaScript.cachedRows(input.stateKey) {
            input.rows = rows
            return input
        }
        let prefix = partition.map { $0 + ":" }
        for id in db.sortedIDs where !id.hasPrefix("_design/") {
            if let prefix, !id.hasPrefix(prefix) { continue }
            guard let entry = db.docs[id], let winner = entry.winner, !winner.deleted else { continue }
            input.docs.append((id, renderDocument(entry, winner, DocRenderOptions())))
        }
        return input
    }

    /// The rows of a JavaScript view: its map function over every document (the database's lock
    /// not held), sorted by key then id. A document for which the map function throws or runs
    /// out of a budget is skipped and logged, as CouchDB does.
    func javascriptViewRows(_ input: JavaScriptViewInput, ddoc: JSON, view: String) throws(CouchError) -> [ViewRow] {
        if let rows = input.rows { return rows }
        let rows = try javaScript.with(input.key, ddoc: ddoc) { (server, cache) throws(CouchError) -> [ViewRow] in
            let map = try function(server, &cache, path: "views/\(view)/map", source: input.source)
            var rows: [ViewRow] = []
            for (id, doc) in input.docs {
                do {
                    for emitted in try server.map(map, doc) {
                        rows.append(ViewRow(key: emitted.key, id: id, value: emitted.value))
                    }
                } catch {
                    server.interpreter.log("function raised exception \(error) with doc._id \(id)")
                }
            }
            return rows
        }
        let sorted = rows.sorted { a, b in
            let c = Collation.compare(a.key, b.key)
            return c != 0 ? c < 0 : Collation.compareRaw(a.id, b.id) < 0
        }
        javaScript.storeRows(input.stateKey, sorted)
        return sorted
    }

    /// A JavaScript reduce over a group of rows, as CouchDB runs it: in chunks, then a rereduce
    /// of the chunks' results.
    func javascriptReduce(_ db: Database, ddocID: String, ddoc: JSON, view: String, rows: [ViewRow])
        throws(CouchError) -> JSON
    {
        guard case .string(let source)? = ddoc["views"]?[view]?["reduce"] else { return .null }
        return try javaScript.with(serverKey(db, ddocID, ddoc), ddoc: ddoc) {
            (server, cache) throws(CouchError) -> JSON in
            let reduce = try function(server, &cache, path: "views/\(view)/reduce", source: source)
            func run(_ keys: [JSON]?, _ values: [JSON], _ rereduce: Bool) throws(CouchError) -> JSON {
                do {
                    return try server.reduce(reduce, keys: keys, values: values, rereduce: rereduce)
                } catch {
                    throw CouchError(500, "reduce_error", "\(error)")
                }
            }
            let chunkSize = 100
            if rows.count <= chunkSize {
                return try run(rows.map { .array([$0.key, .string($0.id)]) }, rows.map(\.value), false)
            }
            var partials: [JSON] = []
            var start = 0
            while start < rows.count {
                let chunk = rows[start..<min(start + chunkSize, rows.count)]
                partials.append(try run(chunk.map { .array([$0.key, .string($0.id)]) }, chunk.map(\.value), false))
                start += chunkSize
            }
            return try run(nil, partials, true)
        }
    }

    // MARK: - _changes filters

    /// A `_changes` filter function of a design document (lock not held by the caller at call time).
    func javascriptFilter(_ db: Database, ddocID: String, ddoc: JSON, name: String, request: JSON)
        throws(CouchError) -> @Sendable (JSON) -> Bool
    {
        guard case .string(let source)? = ddoc["filters"]?[name] else {
            throw CouchError.notFound("missing json key: \(name)")
        }
        let key = serverKey(db, ddocID, ddoc)
        let functions = javaScript
        _ = try functions.with(key, ddoc: ddoc) { (server, cache) throws(CouchError) in
            _ = try function(server, &cache, path: "filters/\(name)", source: source)
        }
        return { doc in
            (try? functions.with(key, ddoc: ddoc) { (server, cache) throws(CouchError) -> Bool in
                guard let filter = cache["filters/\(name)"] else { return false }
                return ((try? server.call(filter, [doc, request])) ?? nil).map { json -> Bool in
                    switch json {
                    case .bool(let b): return b
                    case .null: return false
                    case .int(let i): return i != 0
                    case .double(let d): return d != 0
                    case .string(let s): return !s.isEmpty
                    default: return true
                    }
                } ?? false
            }) ?? false
        }
    }

    /// A view used as a `_changes` filter (`filter=_view`): a document passes when the map
    /// function emits anything for it.
    func javascriptViewFilter(_ db: Database, ddocID: String, ddoc: JSON, view: String)
        throws(CouchError) -> @Sendable (JSON) -> Bool
    {
        guard case .string(let source)? = ddoc["views"]?[view]?["map"] else {
            throw CouchError.notFound("missing_named_view")
        }
        let key = serverKey(db, ddocID, ddoc)
        let functions = javaScript
        _ = try functions.with(key, ddoc: ddoc) { (server, cache) throws(CouchError) in
            _ = try function(server, &cache, path: "views/\(view)/map", source: source)
        }
        return { doc in
            // Map functions never see design documents.
            if doc["_id"]?.stringValue?.hasPrefix("_design/") == true { return false }
            return
                (try? functions.with(key, ddoc: ddoc) { (server, cache) throws(CouchError) -> Bool in
                    guard let map = cache["views/\(view)/map"] else { return false }
                    return !((try? server.map(map, doc)) ?? []).isEmpty
                }) ?? false
        }
    }

    /// The `req` object a filter function gets.
    func filterRequest(_ ctx: RequestContext, _ db: Database) -> JSON {
        let query = JSON.object(ctx.request.query.map { ($0.name, JSON.string($0.value)) })
        return [
            "info": ["db_name": .string(db.name)], "method": .string(ctx.method), "query": query,
            "userCtx": [
                "db": .string(db.name), "name": ctx.user.name.map(JSON.string) ?? .null,
                "roles": .array(ctx.user.roles.map(JSON.string)),
            ],
        ]
    }
}

// MARK: - Show, list and update handlers

extension CouchEngine {
    /// The `req` object show, list and update functions get.
    private func handlerRequest(_ ctx: RequestContext, _ db: Database, id: String?) -> JSON {
        let request = ctx.request
        var headers: [(String, JSON)] = []
        for field in request.headers where !["authorization", "cookie"].contains(field.name.lowercased()) {
            headers.append((field.name, .string(field.value)))
        }
        let query = JSON.object(request.query.map { ($0.name, JSON.string($0.value)) })
        var form: [(String, JSON)] = []
        if (request.headers["Content-Type"] ?? "").hasPrefix("application/x-www-form-urlencoded") {
            for pair in String(decoding: request.body, as: UTF8.self).split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1).map {
                    String($0).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String($0)
                }
                form.append((parts[0], .string(parts.count > 1 ? parts[1] : "")))
            }
        }
        return [
            "info": ["db_name": .string(db.name)], "id": id.map(JSON.string) ?? .null, "uuid": .string(uuids.next()),
            "method": .string(ctx.method), "path": .array(ctx.segments.map(JSON.string)),
            "raw_path": .string(request.rawPath + (request.rawQuery.map { "?" + $0 } ?? "")), "query": query,
            "headers": .object(headers),
            "body": request.body.isEmpty && ctx.method == "GET"
                ? "undefined" : .string(String(decoding: request.body, as: UTF8.self)),
            "peer": "127.0.0.1", "form": .object(form), "cookie": [:],
            "userCtx": [
                "db": .string(db.name), "name": ctx.user.name.map(JSON.string) ?? .null,
                "roles": .array(ctx.user.roles.map(JSON.string)),
            ],
            "secObj": db.withLock { db.security },
        ]
    }

    private func reply(_ rendered: JSQueryServer.Rendered, status: Int, extra: [(String, String)] = [])
        -> ServerResponse
    {
        var headers = HTTPHeaders()
        for (name, value) in rendered.headers where Self.isSafeHeader(name, value) { headers.add(name, value) }
        for (name, value) in extra { headers.add(name, value) }
        return ServerResponse(status: rendered.code ?? status, headers: headers, body: .data(rendered.body))
    }

    /// Whether a header a show, list or update function set may be sent: a token for a name, no
    /// CR, LF or NUL in the value (no header or body smuggled into the response), and none of the
    /// fields that frame the message, which the server writes itself.
    static func isSafeHeader(_ name: String, _ value: String) -> Bool {
        let tokenCharacters = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        guard !name.isEmpty, name.count <= 256, name.allSatisfy(tokenCharacters.contains),
            value.utf8.count <= 8_192, !value.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }),
            !value.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" })
        else { return false }
        return !["content-length", "transfer-encoding", "connection"].contains(name.lowercased())
    }

    private func renderError(_ error: JSQueryServer.Failure) -> CouchError {
        if let thrown = error.thrownObject {
            if let message = thrown["forbidden"] {
                return CouchError(403, "forbidden", message.stringValue ?? message.serialized)
            }
            if let message = thrown["unauthorized"] {
                return CouchError(401, "unauthorized", message.stringValue ?? message.serialized)
            }
        }
        return CouchError(500, "render_error", "\(error)")
    }

    /// `_show`, `_list` and `_update` of a design document, run with CouchJS.
    func designHandler(_ ctx: RequestContext, _ db: Database, ddocID: String, rest: [String]) throws(CouchError)
        -> ServerResponse
    {
        guard let ddoc = db.withLock({ designDocument(db, ddocID) }) else { throw CouchError.notFound("missing") }
        let kind = rest[0]
        guard rest.count >= 2 else { throw CouchError.notFound("missing") }
        let section = ["_show": "shows", "_list": "lists", "_update": "updates"][kind] ?? ""
        guard case .string(let source)? = ddoc[section]?[rest[1]] else {
            throw CouchError.notFound("missing json key: \(rest[1])")
        }
        let key = serverKey(db, ddocID, ddoc)
        let path = "\(section)/\(rest[1])"
        switch kind {
        case "_show":
            let id = rest.count > 2 ? rest.dropFirst(2).joined(separator: "/") : nil
            let doc = id.flatMap { docID in db.withLock { designDocument(db, docID) } }
            let req = handlerRequest(ctx, db, id: id)
            let rendered = try javaScript.with(key, ddoc: ddoc) { (server, cache) throws(CouchError) in
                let show = try function(server, &cache, path: path, source: source)
                do throws(JSQueryServer.Failure) {
                    return try server.show(show, doc: doc, req: req)
                } catch {
                    throw renderError(error)
                }
            }
            return reply(rendered, status: 200)
        case "_list":
            guard rest.count >= 3 else { throw CouchError.notFound("missing") }
            let (viewDDocID, view) =
                rest.count >= 4 ? ("_design/" + rest[2], rest[3]) : (ddocID, rest[2])
            let viewResponse = try viewQuery(ctx, db, ddocID: viewDDocID, view: view, partition: nil)
            guard let data = Reply.collect(viewResponse.body), let result = try? JSON.parse(data) else {
                throw CouchError(500, "render_error", "The view did not answer rows")
            }
            let head: JSON = .object(
                [("total_rows", result["total_rows"] ?? .null), ("offset", result["offset"] ?? .null)]
                    + (result["update_seq"].map { [("update_seq", $0)] } ?? []))
            let rows = result["rows"]?.arrayValue ?? []
            let req = handlerRequest(ctx, db, id: nil)
            let rendered = try javaScript.with(key, ddoc: ddoc) { (server, cache) throws(CouchError) in
                let list = try function(server, &cache, path: path, source: source)
                do throws(JSQueryServer.Failure) {
                    return try server.list(list, head: head, req: req, rows: rows)
                } catch {
                    throw renderError(error)
                }
            }
            return reply(rendered, status: 200)
        default:  // _update
            guard ctx.method == "POST" || ctx.method == "PUT" else { throw CouchError.methodNotAllowed("POST,PUT") }
            let id = rest.count > 2 ? rest.dropFirst(2).joined(separator: "/") : nil
            let doc = id.flatMap { docID in db.withLock { designDocument(db, docID) } }
            let req = handlerRequest(ctx, db, id: id)
            let (newDoc, rendered) = try javaScript.with(key, ddoc: ddoc) {
                (server, cache) throws(CouchError) -> (JSON?, JSQueryServer.Rendered) in
                let update = try function(server, &cache, path: path, source: source)
                do throws(JSQueryServer.Failure) {
                    return try server.update(update, doc: doc, req: req)
                } catch {
                    throw renderError(error)
                }
            }
            guard let newDoc else { return reply(rendered, status: 200) }
            var parsed = try parseDocument(newDoc)
            guard let docID = parsed.id ?? id else {
                throw CouchError(400, "bad_request", "Document id must be a string")
            }
            try validateDocID(docID, db)
            try prepareWrite(&parsed, id: docID, db: db, user: ctx.user)
            try requireWritableCopies(db, ids: [docID])
            let newRev = try db.withLock { () throws(CouchError) -> String in
                try db.updateInteractive(
                    id: docID, baseRev: parsed.rev, deleted: parsed.deleted, body: parsed.body,
                    attachments: parsed.attachments)
            }
            return reply(
                rendered, status: try writeStatus(ctx, db, ids: [docID]),
                extra: [("X-Couch-Id", docID), ("X-Couch-Update-NewRev", newRev)])
        }
    }
}
