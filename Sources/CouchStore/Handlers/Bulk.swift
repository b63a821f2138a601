import CouchQuery
import Foundation

extension CouchEngine {
    // MARK: - _bulk_docs

    func bulkDocs(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ServerResponse {
        let request = ctx.request
        guard ctx.method == "POST" else { throw CouchError.methodNotAllowed("POST") }
        guard request.contentTypeIsJSON else { throw CouchError.badContentType }
        let body = try request.jsonObjectBody()
        guard let docs = body["docs"]?.arrayValue else {
            throw CouchError.badRequest("POST body must include `docs` parameter.")
        }
        var newEdits = body["new_edits"]?.boolValue ?? true
        if request.queryValue("new_edits") == "false" { newEdits = false }
        if body["all_or_nothing"]?.boolValue == true {
            let rows: [JSON] = docs.map { doc in
                .object([
                    ("id", doc["_id"] ?? .null), ("rev", .string(doc["_rev"]?.stringValue ?? "0-")),
                    ("error", "not_implemented"), ("reason", "all_or_nothing is not supported"),
                ])
            }
            return Reply.json(417, .array(rows))
        }
        // Parse and validate everything first: one bad document fails the whole request.
        var parsed: [(id: String, doc: ParsedDoc)] = []
        for json in docs {
            guard json.isObject else { throw CouchError.badRequest("Document must be a JSON object") }
            let doc = try parseDocument(json)
            let id = doc.id ?? uuids.next()
            try validateDocID(id, db)
            if !newEdits, doc.rev == nil, doc.revisions == nil {
                throw CouchError.badRequest(
                    "When `new_edits: false`, the document needs `_rev` or `_revisions` specified")
            }
            parsed.append((id, doc))
        }
        var results: [JSON] = []
        for (id, original) in parsed {
            var doc = original
            do throws(CouchError) {
                if id.hasPrefix("_local/") {
                    let json = JSON.object(
                        [("_id", .string(id))] + (doc.rev.map { [("_rev", JSON.string($0))] } ?? []) + doc.body.members
                            + (doc.deleted ? [("_deleted", JSON.bool(true))] : []))
                    // The body is the inflated document: not `Content-Encoding: gzip` as the batch may have been.
                    var headers = request.headers
                    headers.remove("Content-Encoding")
                    let localCtx = RequestContext(
                        request: ServerRequest(
                            method: "PUT", rawPath: "/", rawQuery: nil, headers: headers, body: json.data),
                        segments: ctx.segments, user: ctx.user)
                    let response = try localDocumentEndpoint(localCtx, db, id: id)
                    if newEdits, case .data(let data) = response.body, let result = try? JSON.parse(data) {
                        results.append(result)
                    }
                    continue
                }
                try prepareWrite(&doc, id: id, db: db, user: ctx.user)
                try requireWritableCopies(db, ids: [id])
                if newEdits {
                    let rev = try db.withLock { () throws(CouchError) -> String in
                        try db.updateInteractive(
                            id: id, baseRev: doc.rev, deleted: doc.deleted, body: doc.body,
                            attachments: doc.attachments)
                    }
                    results.append(writeResult(id: id, rev: rev))
                } else {
                    let revs = doc.revisions ?? [doc.rev!]
                    try db.withLock { () throws(CouchError) in
                        try db.updateReplicated(
                            id: id, revs: revs, deleted: doc.deleted, body: doc.body,
                            attachments: doc.attachments)
                    }
                }
            } catch {
                results.append(
                    .object([("id", .string(id)), ("error", .string(error.error)), ("reason", .string(error.reason))]))
            }
        }
        // 202 Accepted when some write reached fewer than `w` copies (a cluster with nodes down).
        let written = parsed.map(\.0).filter { !$0.hasPrefix("_local/") }
        return Reply.json(try writeStatus(ctx, db, ids: written), .array(results))
    }

    // MARK: - _bulk_get

    func bulkGet(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ServerResponse {
        let request = ctx.request
        guard ctx.method == "POST" else { throw CouchError.methodNotAllowed("POST") }
        guard request.contentTypeIsJSON else { throw CouchError.badContentType }
        let body = try request.jsonObjectBody()
        guard let docs = body["docs"]?.arrayValue else { throw CouchError.badRequest("Missing JSON list of 'docs'.") }
        let initialOptions = DocRenderOptions(request)
        let latest = request.flag("latest")
        let engine = self
        // Streamed a batch of documents at a time (``RowStreamWriter``): many ids never hold every body at once.
        return Reply.streamed(method: ctx.method, separator: ",") { out in
            guard out.text("{\"results\":[") else { return }
            // `atts_since` given for one document holds for those after it, as it always has here.
            var opts = initialOptions
            let written = out.batches(docs, db: db) { spec in
                engine.bulkGetResult(db, spec, options: &opts, latest: latest)
            }
            guard written else { return }
            out.text("]}\n")
        }
    }

    /// One `results` member of a `_bulk_get` answer (lock held).
    private func bulkGetResult(_ db: Database, _ spec: JSON, options opts: inout DocRenderOptions, latest: Bool)
        -> JSON
    {
        guard let id = spec["id"]?.stringValue else {
            let error: JSON = .object([
                ("rev", .null), ("reason", "document id missed"), ("id", .null), ("error", "bad_request"),
            ])
            return .object([("id", .null), ("docs", .array([["error": error]]))])
        }
        func error(_ rev: JSON, _ reason: String, _ kind: String) -> JSON {
            [
                "error": .object([
                    ("rev", rev), ("reason", .string(reason)), ("id", .string(id)), ("error", .string(kind)),
                ])
            ]
        }
        if let since = spec["atts_since"]?.arrayValue { opts.attsSince = since.compactMap(\.stringValue) }
        let rev = spec["rev"]?.stringValue
        let items: [JSON] = {
            guard let entry = db.docs[id], let winner = entry.winner else {
                return [error(rev.map(JSON.string) ?? "undefined", "missing", "not_found")]
            }
            guard let rev else { return [["ok": renderDocument(entry, winner, opts)]] }
            guard parseRev(rev) != nil else { return [error(.string(rev), "Invalid rev format", "bad_request")] }
            guard let node = entry.nodes[rev], node.hasBody || node.deleted else {
                return [error(.string(rev), "missing", "not_found")]
            }
            if latest {
                let leaves = entry.sortedLeaves.filter { leaf in entry.path(to: leaf.rev).contains { $0.rev == rev } }
                return leaves.map { ["ok": renderDocument(entry, $0, opts)] }
            }
            return [["ok": renderDocument(entry, node, opts)]]
        }()
        return .object([("id", .string(id)), ("docs", .array(items))])
    }

    // MARK: - _revs_diff and _missing_revs

    private func missing(_ db: Database, _ body: JSON) -> [(String, [String], [String])] {
        db.withLock {
            var out: [(String, [String], [String])] = []
            for (id, revsJSON) in body.members {
                let revs = (revsJSON.arrayValue ?? []).compactMap(\.stringValue)
                let entry = db.docs[id]
                let missing = revs.filter { entry?.nodes[$0] == nil }
                if missing.isEmpty { continue }
                var ancestors: [String] = []
                if let entry {
                    let maxPos = missing.compactMap { parseRev($0)?.pos }.max() ?? 0
                    ancestors = entry.sortedLeaves.filter { $0.pos < maxPos }.map(\.rev)
                }
                out.append((id, missing, ancestors))
            }
            return out
        }
    }

    func revsDiff(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ServerResponse {
        guard ctx.method == "POST" else { throw CouchError.methodNotAllowed("POST") }
        let body = try ctx.request.jsonObjectBody()
        let result: [(String, JSON)] = missing(db, body).map { id, missing, ancestors in
            var pairs: [(String, JSON)] = [("missing", .array(missing.map(JSON.string)))]
            if !ancestors.isEmpty { pairs.append(("possible_ancestors", .array(ancestors.map(JSON.string)))) }
            return (id, .object(pairs))
        }
        return Reply.json(200, .object(result))
    }

    func missingRevs(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ServerResponse {
        guard ctx.method == "POST" else { throw CouchError.methodNotAllowed("POST") }
        let body = try ctx.request.jsonObjectBody()
        let result: [(String, JSON)] = missing(db, body).map { id, missing, _ in (id, .array(missing.map(JSON.string)))
        }
        return Reply.json(200, ["missing_revs": .object(result)])
    }

    // MARK: - _purge

    func purge(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ServerResponse {
        try requireServerAdmin(ctx.user)
        guard ctx.method == "POST" else { throw CouchError.methodNotAllowed("POST") }
        guard ctx.request.contentTypeIsJSON else { throw CouchError.badContentType }
        let body = try ctx.request.jsonObjectBody()
        var purged: [(String, JSON)] = []
        for (id, revsJSON) in body.members {
            guard let list = revsJSON.arrayValue else { throw CouchError.badRequest("Invalid revs list for \(id)") }
            let revs = list.compactMap(\.stringValue)
            let done = try db.withLock { () throws(CouchError) -> [String] in try db.purge(id: id, revs: revs) }
            purged.append((id, .array(done.map(JSON.string))))
        }
        return Reply.json(201, .object([("purge_seq", .null), ("purged", .object(purged))]))
    }
}
