import CouchQuery
import Foundation

/// A document body split into what CouchDB treats specially and the document's own members.
struct ParsedDoc {
    var id: String?
    var rev: String?
    var deleted = false
    var body: JSON = [:]
    var attachments: [AttachmentInput] = []
    var hasAttachments = false
    /// `_revisions` as full rev strings, newest first.
    var revisions: [String]?
}

/// What to put into a rendered document.
struct DocRenderOptions {
    var revs = false
    var revsInfo = false
    var conflicts = false
    var deletedConflicts = false
    var localSeq = false
    var attachments = false
    var attEncodingInfo = false
    var attsSince: [String]? = nil

    init() {}

    init(_ request: ServerRequest) {
        revs = request.flag("revs")
        revsInfo = request.flag("revs_info")
        conflicts = request.flag("conflicts")
        deletedConflicts = request.flag("deleted_conflicts")
        localSeq = request.flag("local_seq")
        attachments = request.flag("attachments")
        attEncodingInfo = request.flag("att_encoding_info")
        if request.flag("meta") {
            revsInfo = true
            conflicts = true
            deletedConflicts = true
        }
        if let since = request.queryValue("atts_since"), let value = try? JSON.parse(since), let list = value.arrayValue
        {
            attsSince = list.compactMap(\.stringValue)
        }
    }
}

private let allowedSpecialMembers: Set<String> = [
    "_id", "_rev", "_attachments", "_deleted", "_revisions", "_revs_info", "_conflicts", "_deleted_conflicts",
    "_local_seq", "_access",
]
private let bodySpecialMembers: Set<String> = [
    "_replication_state", "_replication_state_time", "_replication_state_reason", "_replication_id",
    "_replication_stats",
]

extension CouchEngine {
    // MARK: - Parsing and validation

    /// Splits a JSON document into special members and body, with CouchDB's validation errors.
    /// `followed` holds the bytes of the `"follows": true` attachments of a `multipart/related` upload.
    func parseDocument(_ json: JSON, followed: [String: FollowedAttachment]? = nil) throws(CouchError) -> ParsedDoc {
        guard case .object(let pairs) = json else { throw CouchError.badRequest("Document must be a JSON object") }
        var doc = ParsedDoc()
        var body: [(String, JSON)] = []
        for (key, value) in pairs {
            if !key.hasPrefix("_") || bodySpecialMembers.contains(key) {
                body.removeAll { $0.0 == key }
                body.append((key, value))
                continue
            }
            guard allowedSpecialMembers.contains(key) else {
                throw CouchError(400, "doc_validation", "Bad special document member: \(key)")
            }
            switch key {
            case "_id":
                guard let s = value.stringValue else {
                    throw CouchError(400, "illegal_docid", "Document id must be a string")
                }
                doc.id = s
            case "_rev":
                guard let s = value.stringValue else { throw CouchError.badRequest("Invalid rev format") }
                doc.rev = s
            case "_deleted":
                doc.deleted = value.boolValue ?? false
            case "_revisions":
                guard let start = value["start"]?.intValue, let ids = value["ids"]?.arrayValue else {
                    throw CouchError(400, "doc_validation", "_revisions member must be an object with start and ids")
                }
                // CouchDB's generations are unbounded integers; this engine's stop at `maximumGeneration`.
                guard start >= 0, start <= maximumGeneration else {
                    throw CouchError(
                        400, "doc_validation", "_revisions.start must be a generation from 0 to \(maximumGeneration)")
                }
                var revs: [String] = []
                for (i, id) in ids.enumerated() {
                    guard let h = id.stringValue else {
                        throw CouchError(400, "doc_validation", "RevId isn't a string")
                    }
                    revs.append("\(Int(start) - i)-\(h)")
                }
                doc.revisions = revs
            case "_attachments":
                guard case .object(let atts) = value else {
                    throw CouchError.badRequest("_attachments must be a JSON object")
                }
                doc.hasAttachments = true
                for (name, spec) in atts {
                    guard case .object = spec else {
                        throw CouchError.badRequest("Invalid attachment stub for \(name)")
                    }
                    if spec["stub"]?.boolValue == true {
                        doc.attachments.append(
                            .stub(
                                name: name, revpos: spec["revpos"]?.intValue.map { Int($0) },
                                digest: spec["digest"]?.stringValue))
                    } else if let dataText = spec["data"]?.stringValue {
                        guard let data = Data(base64Encoded: dataText) else {
                            throw CouchError.badRequest("Invalid attachment data for \(name)")
                        }
                        doc.attachments.append(
                            .data(
                                name: name,
                                contentType: spec["content_type"]?.stringValue ?? "application/octet-stream",
                                data: data,
                                revpos: spec["revpos"]?.intValue.map { Int($0) }))
                    } else if spec["follows"]?.boolValue == true, let followed {
                        guard let part = followed[name] else {
                            throw CouchError.badRequest("Missing attachment data for \(name)")
                        }
                        if var uploaded = part.uploaded {
                            uploaded.contentType = part.contentType
                            doc.attachments.append(
                                .uploaded(uploaded, revpos: spec["revpos"]?.intValue.map { Int($0) }))
                            continue
                        }
                        doc.attachments.append(
                            .data(
                                name: name, contentType: part.contentType, data: part.data,
                                revpos: spec["revpos"]?.intValue.map { Int($0) }, encoded: part.encoded))
                    } else if spec["follows"]?.boolValue == true {
                        throw CouchError.badRequest(
                            "Attachment \(name) uses `follows`, which needs a multipart/related request")
                    } else {
                        throw CouchError.badRequest("Invalid attachment data for \(name)")
                    }
                }
            default:
                break
            }
        }
        doc.body = .object(body)
        return doc
    }

    /// CouchDB's document id rules (and the partition rule of partitioned databases).
    func validateDocID(_ id: String, _ db: Database) throws(CouchError) {
        if id.isEmpty { throw CouchError(400, "illegal_docid", "Document id must not be empty") }
        if id.hasPrefix("_design/") || id.hasPrefix("_local/") {
            if id == "_design/" || id == "_local/" {
                throw CouchError(400, "illegal_docid", "Illegal document id `\(id)`")
            }
            return
        }
        if id.hasPrefix("_") {
            throw CouchError(400, "illegal_docid", "Only reserved document ids may start with underscore.")
        }
        if db.partitioned {
            guard let colon = id.firstIndex(of: ":"), colon != id.startIndex, id.index(after: colon) != id.endIndex
            else {
                throw CouchError(400, "illegal_docid", "Doc id must be of form partition:id")
            }
            if id.hasPrefix("_") {
                throw CouchError(400, "illegal_docid", "Only reserved document ids may start with underscore.")
            }
        }
    }

    /// Extra rules for writes: design documents need a db admin and must compile, then `validate_doc_update` and the
    /// host's rules (the TestServer's `_users` documents).
    func prepareWrite(_ doc: inout ParsedDoc, id: String, db: Database, user: UserContext) throws(CouchError) {
        if id.hasPrefix("_design/") {
            let security = db.withLock { db.security }
            if !isDatabaseAdmin(security, user) {
                throw CouchError(401, "unauthorized", "You are not a db or server admin.")
            }
        }
        if id.hasPrefix("_design/"), !doc.deleted, (doc.body["language"]?.stringValue ?? "javascript") == "javascript" {
            for (view, def) in (doc.body["views"] ?? [:]).members {
                if let map = def["map"]?.stringValue, !javascriptLooksComplete(map) {
                    throw CouchError(
                        400, "compilation_error",
                        "Compilation of the map function in the '\(view)' view failed: SyntaxError: unexpected token in expression: '' (\(map))"
                    )
                }
            }
            try checkDesignFunctionsCompile(doc.body)
        }
        if !id.hasPrefix("_local/") {
            try runValidations(db, id: id, doc: doc, user: user)
        }
        if let host {
            var body = doc.body
            try host.beforeDocumentUpdate(DatabaseHandle(db), id: id, deleted: doc.deleted, body: &body, user: user)
            doc.body = body
        }
    }

    /// A cheap syntax check of JavaScript source (we run no JavaScript): brackets balance outside strings and comments.
    func javascriptLooksComplete(_ source: String) -> Bool {
        var stack: [Character] = []
        var chars = Array(source)[...]
        while let c = chars.popFirst() {
            switch c {
            case "\"", "'", "`":
                while let d = chars.popFirst(), d != c { if d == "\\" { _ = chars.popFirst() } }
            case "/" where chars.first == "/":
                while let d = chars.popFirst(), d != "\n" {}
            case "/" where chars.first == "*":
                _ = chars.popFirst()
                while let d = chars.popFirst() {
                    if d == "*", chars.first == "/" {
                        _ = chars.popFirst()
                        break
                    }
                }
            case "(", "[", "{": stack.append(c)
            case ")", "]", "}":
                let open: Character = c == ")" ? "(" : (c == "]" ? "[" : "{")
                guard stack.popLast() == open else { return false }
            default: break
            }
        }
        return stack.isEmpty
    }

    // MARK: - Rendering

    /// The JSON of one revision, members in CouchDB's order.
    func renderDocument(_ entry: DocEntry, _ node: RevNode, _ opts: DocRenderOptions) -> JSON {
        .object(documentHead(entry, node) + (node.body ?? [:]).members + documentTail(entry, node, opts))
    }

    /// ``renderDocument(_:_:_:)`` as JSON text, for a response: the body is copied from the file as it
    /// was written (the same text serialising it would give), neither parsed nor serialised again.
    func renderDocumentText(_ entry: DocEntry, _ node: RevNode, _ opts: DocRenderOptions) -> String {
        documentText(entry, node, tail: documentTail(entry, node, opts))
    }

    /// The text of a document whose members after its body are `tail`.
    func documentText(_ entry: DocEntry, _ node: RevNode, tail: [(String, JSON)]) -> String {
        // A body that is not an object has no members, as in the JSON form.
        var body: Substring = ""
        if let text = node.bodyText?.utf8, text.count > 2, text.first == UInt8(ascii: "{"),
            text.last == UInt8(ascii: "}")
        {
            body = Substring(text.dropFirst().dropLast())
        }
        return objectText([membersText(documentHead(entry, node)), body, membersText(tail)])
    }

    /// A row's text: the members `pairs`, then `"doc"` with the document text `doc`.
    func rowText(_ pairs: [(String, JSON)], doc: String) -> String {
        objectText([membersText(pairs), Substring("\"doc\":" + doc)])
    }

    /// The members of an object as JSON text, without its braces.
    private func membersText(_ pairs: [(String, JSON)]) -> Substring {
        JSON.object(pairs).serialized.dropFirst().dropLast()
    }

    /// An object of members already written as text (the empty ones left out).
    private func objectText(_ members: [Substring]) -> String {
        "{" + members.filter { !$0.isEmpty }.joined(separator: ",") + "}"
    }

    /// The members a rendered document begins with.
    private func documentHead(_ entry: DocEntry, _ node: RevNode) -> [(String, JSON)] {
        [("_id", .string(entry.id)), ("_rev", .string(node.rev))]
    }

    /// The members a rendered document has after its body, as `opts` asks for them.
    func documentTail(_ entry: DocEntry, _ node: RevNode, _ opts: DocRenderOptions) -> [(String, JSON)] {
        var pairs: [(String, JSON)] = []
        if node.deleted { pairs.append(("_deleted", true)) }
        if opts.revs {
            let path = entry.path(to: node.rev)
            pairs.append(
                ("_revisions", ["start": .int(Int64(node.pos)), "ids": .array(path.map { .string($0.hash) })]))
        }
        if opts.revsInfo {
            let path = entry.path(to: node.rev)
            let infos: [JSON] = path.map { n in
                let status = n.deleted ? "deleted" : (!n.hasBody ? "missing" : "available")
                return ["rev": .string(n.rev), "status": .string(status)]
            }
            pairs.append(("_revs_info", .array(infos)))
        }
        if opts.conflicts {
            let c = entry.conflicts
            if !c.isEmpty, entry.winner?.rev == node.rev { pairs.append(("_conflicts", .array(c.map(JSON.string)))) }
        }
        if opts.deletedConflicts {
            let c = entry.deletedConflicts
            if !c.isEmpty, entry.winner?.rev == node.rev {
                pairs.append(("_deleted_conflicts", .array(c.map(JSON.string))))
            }
        }
        if opts.localSeq { pairs.append(("_local_seq", .int(Int64(entry.seq)))) }
        if !node.atts.isEmpty {
            var sinceAncestors = Set<String>()
            if let since = opts.attsSince {
                for rev in since where entry.nodes[rev] != nil {
                    for n in entry.path(to: rev) { sinceAncestors.insert(n.rev) }
                }
            }
            let maxSincePos = sinceAncestors.compactMap { parseRev($0)?.pos }.max() ?? 0
            var atts: [(String, JSON)] = []
            for att in node.atts {
                var a: [(String, JSON)] = [
                    ("content_type", .string(att.contentType)), ("revpos", .int(Int64(att.revpos))),
                    ("digest", .string(att.digest)),
                ]
                let inline = opts.attachments && (opts.attsSince == nil || att.revpos > maxSincePos)
                if inline {
                    a.append(("data", .string(att.data.base64EncodedString())))
                } else {
                    a.append(("length", .int(Int64(att.length))))
                    a.append(("stub", true))
                }
                if opts.attEncodingInfo, att.isCompressible {
                    a.append(("encoding", "gzip"))
                    a.append(("encoded_length", .int(Int64(att.encoded?.count ?? att.length))))
                }
                atts.append((att.name, .object(a)))
            }
            pairs.append(("_attachments", .object(atts)))
        }
        return pairs
    }

    /// The body of a successful write.
    func writeResult(id: String, rev: String) -> JSON {
        .object([("ok", true), ("id", .string(id)), ("rev", .string(rev))])
    }

    func documentLocation(_ request: ServerRequest, _ db: Database, _ id: String) -> String {
        request.baseURL + "/" + encodePathSegment(db.name) + "/" + encodePathSegment(id)
    }

    // MARK: - /db/doc

    func documentEndpoint(_ ctx: RequestContext, _ db: Database, id: String) throws(CouchError) -> ServerResponse {
        switch ctx.method {
        case "GET", "HEAD": return try getDocument(ctx, db, id: id)
        case "PUT": return try putDocument(ctx, db, id: id)
        case "DELETE": return try deleteDocument(ctx, db, id: id)
        case "COPY": return try copyDocument(ctx, db, id: id)
        case "POST":
            if id.hasPrefix("_") { throw CouchError.notFound("missing") }
            throw CouchError.methodNotAllowed("DELETE,GET,HEAD,POST,PUT,COPY")
        default: throw CouchError.methodNotAllowed("DELETE,GET,HEAD,POST,PUT,COPY")
        }
    }

    private func getDocument(_ ctx: RequestContext, _ db: Database, id: String) throws(CouchError) -> ServerResponse {
        let request = ctx.request
        if let openRevs = request.queryValue("open_revs") {
            return try getOpenRevs(ctx, db, id: id, spec: openRevs)
        }
        let opts = DocRenderOptions(request)
        let rev = request.queryValue("rev")
        // CouchDB parses the revision before it looks for the document.
        if let rev, parseRev(rev) == nil { throw CouchError.badRequest("Invalid rev format") }
        let (entry, node): (DocEntry, RevNode) = try db.withLock { () throws(CouchError) -> (DocEntry, RevNode) in
            guard let entry = db.docs[id], let winner = entry.winner else { throw CouchError.notFound("missing") }
            if let rev {
                guard let node = entry.nodes[rev], node.hasBody || node.deleted else {
                    throw CouchError.notFound("missing")
                }
                if request.flag("latest"), let leaf = latestLeaf(entry, rev) { return (entry, leaf) }
                return (entry, node)
            }
            if winner.deleted { throw CouchError.notFound("deleted") }
            return (entry, winner)
        }
        let tail = documentTail(entry, node, opts)
        let hasMeta = tail.contains { ["_revs_info", "_conflicts", "_deleted_conflicts", "_local_seq"].contains($0.0) }
        let etag = "\"\(node.rev)\""
        if !hasMeta, request.headers["If-None-Match"] == etag { return notModified(etag) }
        let text = documentText(entry, node, tail: tail) + "\n"
        return Reply.text(200, text, headers: hasMeta ? [] : [("ETag", etag)])
    }

    private func latestLeaf(_ entry: DocEntry, _ rev: String) -> RevNode? {
        let leaves = entry.sortedLeaves.filter { leaf in entry.path(to: leaf.rev).contains { $0.rev == rev } }
        return leaves.first
    }

    func notModified(_ etag: String) -> ServerResponse {
        var h = ServerResponse(status: 304)
        h.headers.add("ETag", etag)
        h.headers.add("Content-Length", "0")
        return h
    }

    private func getOpenRevs(_ ctx: RequestContext, _ db: Database, id: String, spec: String) throws(CouchError)
        -> ServerResponse
    {
        let request = ctx.request
        let opts = DocRenderOptions(request)
        var requested: [String]? = nil
        if spec != "all" {
            guard let value = try? JSON.parse(spec), let list = value.arrayValue else {
                throw CouchError.badRequest("Invalid open_revs value. Must be \"all\" or a JSON array")
            }
            requested = list.compactMap(\.stringValue)
        }
        let latest = request.flag("latest")
        let (entry, results): (DocEntry?, [(JSON, RevNode?)]) = try db.withLock {
            () throws(CouchError) -> (DocEntry?, [(JSON, RevNode?)]) in
            guard let entry = db.docs[id] else {
                if let requested { return (nil, requested.map { (["missing": .string($0)], nil) }) }
                throw CouchError.notFound("missing")
            }
            guard let requested else {
                return (entry, entry.sortedLeaves.map { (["ok": renderDocument(entry, $0, opts)], $0) })
            }
            var out: [(JSON, RevNode?)] = []
            for rev in requested {
                if latest, entry.nodes[rev] != nil {
                    let leaves = entry.sortedLeaves.filter { leaf in entry.path(to: leaf.rev).contains { $0.rev == rev }
                    }
                    for leaf in leaves { out.append((["ok": renderDocument(entry, leaf, opts)], leaf)) }
                } else if let node = entry.nodes[rev], node.hasBody || node.deleted {
                    out.append((["ok": renderDocument(entry, node, opts)], node))
                } else {
                    out.append((["missing": .string(rev)], nil))
                }
            }
            return (entry, out)
        }
        let accept = request.headers["Accept"] ?? ""
        if accept.contains("application/json") {
            return Reply.text(200, "[" + results.map(\.0.serialized).joined(separator: ",") + "]\n")
        }
        let boundary = Crypto.hex(Crypto.randomBytes(16))
        var data = Data()
        for (result, node) in results {
            data += Data("--\(boundary)\r\n".utf8)
            // CouchDB always sends attachments (and their encoding info) in multipart open_revs.
            data += openRevsPart(result, entry: entry, node: node, attachments: true)
            data += Data("\r\n".utf8)
        }
        data += Data("--\(boundary)--".utf8)
        var response = ServerResponse(status: 200, body: .data(data))
        response.headers.add("Content-Type", "multipart/mixed; boundary=\"\(boundary)\"")
        return response
    }

    /// The revision a write is based on: `?rev=`, `If-Match` or the body's `_rev` (which must agree).
    private func baseRevision(_ request: ServerRequest, bodyRev: String?) throws(CouchError) -> String? {
        var rev = bodyRev
        if let q = request.queryValue("rev") {
            if let b = bodyRev, b != q {
                throw CouchError.badRequest("Document rev from request body and query string have different values")
            }
            rev = q
        }
        if let ifMatch = request.headers["If-Match"] {
            let value = ifMatch.trimmingCharacters(in: CharacterSet(charactersIn: "\" "))
            if let r = rev, r != value {
                throw CouchError.badRequest("Document rev and etag have different values")
            }
            rev = value
        }
        return rev
    }

    private func putDocument(_ ctx: RequestContext, _ db: Database, id: String) throws(CouchError) -> ServerResponse {
        let request = ctx.request
        let isMultipart = (request.headers["Content-Type"] ?? "").lowercased().hasPrefix("multipart/related")
        let json: JSON
        var followed: [String: FollowedAttachment]?
        var writers: [AttachmentStreamWriter] = []
        if isMultipart, let streamed = try parseMultipartDocumentStreamed(request, db) {
            (json, followed, writers) = streamed
        } else if isMultipart {
            var whole = request
            try whole.readWholeBody()
            (json, followed) = try parseMultipartDocument(whole)
        } else {
            var whole = request
            try whole.readWholeBody()
            json = try whole.jsonBody()
        }
        // Streamed attachments' chunks are given up when the write fails (no document record refers to them).
        var committed = false
        defer { if !committed { for writer in writers.reversed() { writer.abandon() } } }
        var doc = try parseDocument(json, followed: followed)
        try validateDocID(id, db)
        let rev = try baseRevision(request, bodyRev: doc.rev)
        doc.rev = rev
        try prepareWrite(&doc, id: id, db: db, user: ctx.user)
        if request.queryValue("new_edits") == "false" {
            let revs = doc.revisions ?? rev.map { [$0] } ?? []
            guard !revs.isEmpty else {
                throw CouchError.badRequest(
                    "When `new_edits: false`, the document needs `_rev` or `_revisions` specified")
            }
            try db.withLock { () throws(CouchError) in
                try db.updateReplicated(
                    id: id, revs: revs, deleted: doc.deleted, body: doc.body, attachments: doc.attachments)
            }
            committed = true
            return Reply.json(
                201, writeResult(id: id, rev: revs[0]),
                headers: [("ETag", "\"\(revs[0])\""), ("Location", documentLocation(request, db, id))])
        }
        try requireWritableCopies(db, ids: [id])
        let newRev = try db.withLock { () throws(CouchError) -> String in
            try db.updateInteractive(
                id: id, baseRev: rev, deleted: doc.deleted, body: doc.body, attachments: doc.attachments)
        }
        committed = true
        if request.queryValue("batch") == "ok" {
            return Reply.json(202, .object([("ok", true), ("id", .string(id))]))
        }
        // 202 Accepted when fewer than `w` copies took the write (a cluster with nodes down).
        let durable = try writeStatus(ctx, db, ids: [id]) == 201
        return Reply.json(
            !durable ? 202 : doc.deleted ? 200 : 201, writeResult(id: id, rev: newRev),
            headers: [("ETag", "\"\(newRev)\""), ("Location", documentLocation(request, db, id))])
    }

    func postDocument(_ ctx: RequestContext, _ db: Database) throws(CouchError) -> ServerResponse {
        let request = ctx.request
        guard request.contentTypeIsJSON || request.headers["Content-Type"] == nil else {
            throw CouchError.badContentType
        }
        let json = try request.jsonBody()
        var doc = try parseDocument(json)
        let id = doc.id ?? uuids.next()
        if id.hasPrefix("_local/") {
            return try putLocal(ctx, db, id: id, json: json)
        }
        try validateDocID(id, db)
        try prepareWrite(&doc, id: id, db: db, user: ctx.user)
        try requireWritableCopies(db, ids: [id])
        let newRev = try db.withLock { () throws(CouchError) -> String in
            try db.updateInteractive(
                id: id, baseRev: doc.rev, deleted: doc.deleted, body: doc.body,
                attachments: doc.attachments)
        }
        if request.queryValue("batch") == "ok" {
            return Reply.json(202, .object([("ok", true), ("id", .string(id))]))
        }
        return Reply.json(
            try writeStatus(ctx, db, ids: [id]), writeResult(id: id, rev: newRev),
            headers: [("Location", documentLocation(request, db, id))])
    }

    private func deleteDocument(_ ctx: RequestContext, _ db: Database, id: String) throws(CouchError) -> ServerResponse
    {
        let request = ctx.request
        let rev = try baseRevision(request, bodyRev: nil)
        var doc = ParsedDoc()
        doc.deleted = true
        try prepareWrite(&doc, id: id, db: db, user: ctx.user)
        try requireWritableCopies(db, ids: [id])
        let newRev = try db.withLock { () throws(CouchError) -> String in
            guard let entry = db.docs[id], let winner = entry.winner else { throw CouchError.notFound("missing") }
            if rev == nil, winner.deleted { throw CouchError.notFound("deleted") }
            return try db.updateInteractive(id: id, baseRev: rev, deleted: true, body: [:], attachments: [])
        }
        let status = try writeStatus(ctx, db, ids: [id]) == 201 ? 200 : 202
        return Reply.json(status, writeResult(id: id, rev: newRev), headers: [("ETag", "\"\(newRev)\"")])
    }

    private func copyDocument(_ ctx: RequestContext, _ db: Database, id: String) throws(CouchError) -> ServerResponse {
        let request = ctx.request
        guard var destination = request.headers["Destination"], !destination.isEmpty else {
            throw CouchError.badRequest("Destination header is mandatory for COPY.")
        }
        var destRev: String?
        if let q = destination.firstIndex(of: "?") {
            let query = destination[destination.index(after: q)...]
            for pair in query.split(separator: "&") where pair.hasPrefix("rev=") {
                destRev = String(pair.dropFirst(4))
            }
            destination = String(destination[..<q])
        }
        let destID = destination.removingPercentEncoding ?? destination
        try validateDocID(destID, db)
        let sourceRev = request.queryValue("rev")
        let (body, atts): (JSON, [Attachment]) = try db.withLock { () throws(CouchError) -> (JSON, [Attachment]) in
            guard let entry = db.docs[id], let winner = entry.winner else { throw CouchError.notFound("missing") }
            if let sourceRev {
                guard let node = entry.nodes[sourceRev], let body = node.body else {
                    throw CouchError.notFound("missing")
                }
                return (body, node.atts)
            }
            if winner.deleted { throw CouchError.notFound("deleted") }
            return (winner.body ?? [:], winner.atts)
        }
        var doc = ParsedDoc()
        doc.body = body
        try prepareWrite(&doc, id: destID, db: db, user: ctx.user)
        try requireWritableCopies(db, ids: [destID])
        let newRev = try db.withLock { () throws(CouchError) -> String in
            try db.updateInteractive(
                id: destID, baseRev: destRev, deleted: false, body: doc.body,
                attachments: atts.map { .data(name: $0.name, contentType: $0.contentType, data: $0.data) })
        }
        return Reply.json(
            try writeStatus(ctx, db, ids: [destID]), writeResult(id: destID, rev: newRev),
            headers: [("ETag", "\"\(newRev)\""), ("Location", documentLocation(request, db, destID))])
    }

    // MARK: - _local documents

    func localDocumentEndpoint(_ ctx: RequestContext, _ db: Database, id: String) throws(CouchError) -> ServerResponse {
        let request = ctx.request
        switch ctx.method {
        case "GET", "HEAD":
            let doc = db.withLock { db.local[id] }
            guard let doc else { throw CouchError.notFound("missing") }
            let json = JSON.object([("_id", .string(id)), ("_rev", .string("0-\(doc.rev)"))] + doc.body.members)
            let etag = "\"\(Crypto.opaqueToken(json.serialized))\""
            if request.headers["If-None-Match"] == etag { return notModified(etag) }
            return Reply.json(200, json, headers: [("ETag", etag)])
        case "PUT":
            return try putLocal(ctx, db, id: id, json: try request.jsonBody())
        case "DELETE":
            // CouchDB checks only the revision's form: a `_local` document has no conflicts, any
            // well-formed `rev` deletes it (couch_db_updater:increment_local_doc_revs).
            if let rev = try baseRevision(request, bodyRev: nil), parseRev(rev) == nil {
                throw CouchError.badRequest("Invalid rev format")
            }
            try db.withLock { () throws(CouchError) in
                guard db.local[id] != nil else { throw CouchError.notFound("missing") }
                try db.putLocal(id: id, doc: nil)
            }
            let result = writeResult(id: id, rev: "0-0")
            return Reply.json(200, result, headers: [("ETag", "\"\(Crypto.opaqueToken(id + "0-0"))\"")])
        case "COPY":
            throw CouchError.badRequest("Cannot COPY a _local document")
        default:
            throw CouchError.methodNotAllowed("DELETE,GET,HEAD,PUT")
        }
    }

    private func putLocal(_ ctx: RequestContext, _ db: Database, id: String, json: JSON) throws(CouchError)
        -> ServerResponse
    {
        let request = ctx.request
        guard case .object(let pairs) = json else { throw CouchError.badRequest("Document must be a JSON object") }
        var body: [(String, JSON)] = []
        var bodyRev: String?
        var deleted = false
        for (key, value) in pairs {
            switch key {
            case "_id", "_revisions", "_attachments": continue
            case "_rev": bodyRev = value.stringValue
            case "_deleted": deleted = value.boolValue ?? false
            default:
                if key.hasPrefix("_") { throw CouchError(400, "doc_validation", "Bad special document member: \(key)") }
                body.append((key, value))
            }
        }
        let newRev = try Self.nextLocalRevision(after: try baseRevision(request, bodyRev: bodyRev), deleted: deleted)
        try db.withLock { () throws(CouchError) in
            if deleted, db.local[id] == nil { return }
            try db.putLocal(id: id, doc: deleted ? nil : LocalDoc(rev: newRev, body: .object(body)))
        }
        let result = writeResult(id: id, rev: "0-\(newRev)")
        let etag = "\"\(Crypto.opaqueToken(id + "0-\(newRev)" + JSON.object(body).serialized))\""
        return Reply.json(
            deleted ? 200 : 201, result, headers: [("ETag", etag), ("Location", documentLocation(request, db, id))])
    }

    /// The revision CouchDB 3.5 gives a `_local` document written over `rev` (couch_db_updater's
    /// `increment_local_doc_revs`): `_local` documents have no conflicts, so whatever the stored
    /// revision, `0-N` becomes `0-(N+1)`, no revision gives `0-1`, and a deletion `0-0` (even of a document that
    /// is not there). A revision that is not `pos-hash` is 400; one whose position is not 0 or whose hash
    /// is not an integer is CouchDB's 500 `{"error":"error","reason":"Invalid rev format"}`.
    static func nextLocalRevision(after rev: String?, deleted: Bool) throws(CouchError) -> Int {
        let invalid = CouchError(500, "error", "Invalid rev format")
        var base = 0
        if let rev {
            guard let parsed = parseRev(rev) else { throw CouchError.badRequest("Invalid rev format") }
            guard parsed.pos == 0, let n = Int(parsed.hash) else { throw invalid }
            base = n
        }
        if deleted { return 0 }
        let (next, overflow) = base.addingReportingOverflow(1)
        // CouchDB's integers have no bound; past Int.max this store refuses instead of trapping.
        if overflow { throw invalid }
        return next
    }
}
