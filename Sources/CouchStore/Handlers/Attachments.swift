import CouchQuery
import CouchGzip
import Foundation

extension CouchEngine {
    func attachmentEndpoint(_ ctx: RequestContext, _ db: Database, docID: String, name: String) throws(CouchError)
        -> ServerResponse
    {
        switch ctx.method {
        case "GET", "HEAD": return try getAttachment(ctx, db, docID: docID, name: name)
        case "PUT": return try putAttachment(ctx, db, docID: docID, name: name, delete: false)
        case "DELETE": return try putAttachment(ctx, db, docID: docID, name: name, delete: true)
        default: throw CouchError.methodNotAllowed("DELETE,GET,HEAD,PUT")
        }
    }

    private func getAttachment(_ ctx: RequestContext, _ db: Database, docID: String, name: String) throws(CouchError)
        -> ServerResponse
    {
        let request = ctx.request
        let rev = request.queryValue("rev")
        let att: Attachment = try db.withLock { () throws(CouchError) -> Attachment in
            guard let entry = db.docs[docID], let winner = entry.winner else { throw CouchError.notFound("missing") }
            let node: RevNode
            if let rev {
                guard let n = entry.nodes[rev] else { throw CouchError.notFound("missing") }
                node = n
            } else {
                if winner.deleted { throw CouchError.notFound("deleted") }
                node = winner
            }
            guard let att = node.atts.first(where: { $0.name == name }) else {
                throw CouchError.notFound("Document is missing attachment")
            }
            return att
        }
        let etag = "\"\(att.digest.dropFirst(4))\""
        if request.headers["If-None-Match"] == etag { return notModified(etag) }
        var response = ServerResponse(status: 200)
        response.headers.add("Content-Type", att.contentType)
        response.headers.add("ETag", etag)
        response.headers.add("Cache-Control", "must-revalidate")
        let compressible = att.isCompressible
        response.headers.add("Accept-Ranges", compressible ? "none" : "bytes")
        let acceptsGzip = (request.headers["Accept-Encoding"] ?? "").lowercased().split(separator: ",").contains {
            $0.trimmingCharacters(in: .whitespaces).hasPrefix("gzip")
        }
        if case .stored(let blob) = att.bytes, att.length > StoreFile.blobChunkSize {
            return try streamedAttachment(
                request, response, att, blob, gzip: compressible && acceptsGzip, ranged: !compressible)
        }
        if compressible, acceptsGzip {
            response.headers.add("Content-Encoding", "gzip")
            response.body = .data(att.encoded ?? ZlibCompatibleGzip.compress(att.data))
            return response
        }
        if !compressible, let range = request.headers["Range"], let (start, end) = parseRange(range, length: att.length)
        {
            if start > end || start >= att.length {
                return Reply.error(
                    CouchError(416, "requested_range_not_satisfiable", "Requested range not satisfiable"))
            }
            // Read once; bytes that could not be read (a damaged chunk, reported when the request ends) are not
            // the attachment's length, and no range of them is served.
            let data = att.data
            guard data.count == att.length else {
                return Reply.error(CouchError(500, "file_error", "the attachment '\(name)' could not be read"))
            }
            response.status = 206
            response.headers.add("Content-Range", "bytes \(start)-\(end)/\(att.length)")
            response.body = .data(data.subdata(in: (data.startIndex + start)..<(data.startIndex + end + 1)))
            return response
        }
        response.body = .data(att.data)
        return response
    }

    /// An attachment larger than one chunk of the database's file, answered as it is read: the first chunk it
    /// needs is read now (a damaged one is a 500 before anything is sent), the others one at a time as the client
    /// takes them, so memory holds a chunk or two whatever the attachment's size. `Content-Length` is sent as
    /// CouchDB sends it; a chunk found damaged later ends the body short of it (the connection is closed).
    private func streamedAttachment(
        _ request: ServerRequest, _ head: ServerResponse, _ att: Attachment, _ blob: StoredBlob, gzip: Bool,
        ranged: Bool
    ) throws(CouchError) -> ServerResponse {
        var response = head
        var (start, end) = (0, att.length - 1)
        let gzip = gzip && att.length > ZlibCompatibleGzip.compressionLimit
        if gzip {
            response.headers.add("Content-Encoding", "gzip")
            response.headers.add(
                "Content-Length", String(ZlibCompatibleGzip.StreamEncoder.encodedLength(ofInput: att.length)))
        } else {
            if ranged, let range = request.headers["Range"], let (first, last) = parseRange(range, length: att.length) {
                if first > last || first >= att.length {
                    return Reply.error(
                        CouchError(416, "requested_range_not_satisfiable", "Requested range not satisfiable"))
                }
                response.status = 206
                response.headers.add("Content-Range", "bytes \(first)-\(last)/\(att.length)")
                (start, end) = (first, last)
            }
            response.headers.add("Content-Length", String(end - start + 1))
        }
        let size = StoreFile.blobChunkSize
        let firstIndex = start / size
        let firstChunk: Data
        do throws(StoreFileError) {
            firstChunk = try blob.chunk(firstIndex, digest: att.digest)
        } catch {
            throw CouchError(500, "file_error", "a stored attachment could not be read: \(error)")
        }
        let (length, digest) = (att.length, att.digest)
        response.body = .stream { [start, end] writer in
            var encoder = gzip ? ZlibCompatibleGzip.StreamEncoder(inputLength: length) : nil
            if let header = encoder?.header, !writer.write(header) { return }
            // Chunks gathered beyond the first for one write, as many as the writer prefers, the range spans and the
            // process-wide budget grants: a socket sends them with one `sendmsg` (see ChunkWriter.preferredWriteSize).
            let spanned = end / size - firstIndex + 1
            let extra = GatheredChunks.budget.take(min(writer.preferredWriteSize / size, spanned) - 1)
            defer { GatheredChunks.budget.give(extra) }
            // Gathered chunks are read into buffers kept from one download to the next.
            let buffers = extra > 0 ? ReadBufferPool.chunks : nil
            var index = firstIndex
            var chunk = firstChunk
            var done = false
            while !done {
                var pieces: [Data] = []
                repeat {
                    let chunkStart = index * size
                    let lower = max(start - chunkStart, 0)
                    let upper = min(end + 1 - chunkStart, chunk.count)
                    guard lower < upper else {
                        done = true
                        break
                    }
                    // A slice of the chunk read, not a copy (the whole chunk but at the ends of a range).
                    var piece = chunk[(chunk.startIndex + lower)..<(chunk.startIndex + upper)]
                    if encoder != nil { piece = encoder!.encode(piece) }
                    pieces.append(piece)
                    index += 1
                    // A damaged chunk ends the body short of its Content-Length: the client sees it cut off.
                    guard index * size <= end, let next = try? blob.chunk(index, digest: digest, buffers: buffers)
                    else {
                        done = true
                        break
                    }
                    chunk = next
                } while pieces.count <= extra
                guard writer.write(contentsOf: pieces) else { return }
            }
        }
        return response
    }

    /// Parses a single `bytes=a-b`, `bytes=a-` or `bytes=-n` range.
    private func parseRange(_ header: String, length: Int) -> (Int, Int)? {
        guard header.hasPrefix("bytes="), !header.contains(",") else { return nil }
        let spec = header.dropFirst(6)
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        // A number that is not a byte count (negative, or past Int) makes the header one to ignore.
        if parts[0].isEmpty {
            guard let n = Int(parts[1]), n >= 0 else { return nil }
            return (length - min(n, length), length - 1)
        }
        guard let start = Int(parts[0]), start >= 0 else { return nil }
        let end = parts[1].isEmpty ? length - 1 : min(Int(parts[1]) ?? length - 1, length - 1)
        return (start, end)
    }

    private func putAttachment(_ ctx: RequestContext, _ db: Database, docID: String, name: String, delete: Bool)
        throws(CouchError) -> ServerResponse
    {
        let request = ctx.request
        if docID.hasPrefix("_local/") {
            throw CouchError.badRequest("Attachments are not supported on _local documents")
        }
        try validateDocID(docID, db)
        var rev = request.queryValue("rev")
        if let ifMatch = request.headers["If-Match"] {
            rev = ifMatch.trimmingCharacters(in: CharacterSet(charactersIn: "\" "))
        }
        if name.hasPrefix("_") {
            throw CouchError.badRequest("Attachment name '\(name)' starts with prohibited character '_'")
        }
        let contentType = request.headers["Content-Type"] ?? "application/octet-stream"
        var body = request.body
        try prepareWriteAccess(docID, db, ctx.user)
        try requireWritableCopies(db, ids: [docID])
        var upload: (attachment: Attachment, writer: AttachmentStreamWriter)?
        if !delete, let source = request.bodySource {
            if let streamed = try streamUpload(
                source, db, docID: docID, rev: rev, name: name, contentType: contentType,
                limit: request.maximumBodySize)
            {
                upload = streamed
            } else {
                var whole = request
                try whole.readWholeBody()
                body = whole.body
            }
        }
        let newRev = try db.withLock { () throws(CouchError) -> String in
            // The streamed chunks are given up when this write fails (not written after all).
            var committed = false
            defer { if !committed { upload?.writer.abandon() } }
            let entry = db.docs[docID]
            var baseBody: JSON = [:]
            var atts: [Attachment] = []
            if let rev {
                guard let entry, let node = entry.nodes[rev], entry.isLeaf(rev) else { throw CouchError.conflict }
                if !node.deleted {
                    baseBody = node.body ?? [:]
                    atts = node.atts
                }
            } else if let entry, let winner = entry.winner, !winner.deleted {
                if delete { throw CouchError.conflict }
                throw CouchError.conflict
            } else if delete {
                throw CouchError.notFound("missing")
            }
            var inputs: [AttachmentInput]
            if delete {
                guard atts.contains(where: { $0.name == name }) else {
                    throw CouchError.notFound("Document is missing attachment")
                }
                inputs = atts.filter { $0.name != name }.map { .keep($0) }
            } else if var attachment = upload?.attachment {
                if let stored = db.blobs[attachment.digest], stored.file === db.file,
                    stored.length == attachment.length
                {
                    // Stored once by digest: the same bytes are there already, the upload's chunks are not needed.
                    upload?.writer.abandon()
                    attachment.bytes = .stored(stored)
                }
                inputs = [.uploaded(attachment)]
                inputs += atts.filter { $0.name != name }.map { .keep($0) }
            } else {
                inputs = [.data(name: name, contentType: contentType, data: body)]
                inputs += atts.filter { $0.name != name }.map { .keep($0) }
            }
            let rev = try db.updateInteractive(
                id: docID, baseRev: rev, deleted: false, body: baseBody, attachments: inputs)
            committed = true
            return rev
        }
        let result = writeResult(id: docID, rev: newRev)
        let durable = try writeStatus(ctx, db, ids: [docID]) == 201
        if delete { return Reply.json(durable ? 200 : 202, result) }
        let location =
            documentLocation(request, db, docID) + "/"
            + name.split(separator: "/", omittingEmptySubsequences: false).map { encodePathSegment(String($0)) }.joined(
                separator: "/")
        return Reply.json(durable ? 201 : 202, result, headers: [("Location", location)])
    }

    /// Writes a streamed attachment upload into the database's file as it is read (``AttachmentStreamWriter``): the
    /// revision it applies to is checked first (a conflict is answered before any byte is read), then the body is
    /// read and written chunk by chunk, its digest and length computed on the way. Nil for a database kept in memory
    /// (the body is then read whole). A body that cannot be read whole (cut short, malformed, too slow) writes
    /// nothing visible and is a 400 `bad_request`; one past the server's body limit is 413 `too_large`.
    private func streamUpload(
        _ source: any RequestBodySource, _ db: Database, docID: String, rev: String?, name: String,
        contentType: String, limit: Int
    ) throws(CouchError) -> (attachment: Attachment, writer: AttachmentStreamWriter)? {
        let file: StoreFile? = try db.withLock { () throws(CouchError) -> StoreFile? in
            let entry = db.docs[docID]
            if let rev {
                guard let entry, entry.nodes[rev] != nil, entry.isLeaf(rev) else { throw CouchError.conflict }
            } else if let winner = entry?.winner, !winner.deleted {
                throw CouchError.conflict
            }
            return db.file
        }
        guard let file else { return nil }
        let writer = AttachmentStreamWriter(file: file)
        do {
            while let piece = try source.read(upTo: StoreFile.blobChunkSize) {
                guard writer.length + piece.count <= limit else {
                    throw CouchError(413, "too_large", "the request entity is too large")
                }
                try writer.write(piece)
            }
            let blob = try writer.finish()
            var attachment = Attachment(
                name: name, contentType: contentType, revpos: 0, digest: writer.identityDigest, length: writer.length,
                bytes: .stored(blob))
            if attachment.isCompressible { attachment.digest = try AttachmentStreamWriter.gzipDigest(of: blob) }
            return (attachment, writer)
        } catch {
            writer.abandon()
            if let error = error as? CouchError { throw error }
            if let error = error as? StoreFileError {
                throw CouchError(500, "file_error", "the attachment could not be written: \(error)")
            }
            throw CouchError(400, "bad_request", "the attachment's body could not be read whole: \(error)")
        }
    }

    /// Design documents (and their attachments) need a database admin.
    private func prepareWriteAccess(_ docID: String, _ db: Database, _ user: UserContext) throws(CouchError) {
        if docID.hasPrefix("_design/") {
            let security = db.withLock { db.security }
            if !isDatabaseAdmin(security, user) {
                throw CouchError(401, "unauthorized", "You are not a db or server admin.")
            }
        }
    }
}

extension StoredBlob {
    /// The bytes of the `index`th chunk of the attachment whose digest is `digest` (its chunks name it, or the
    /// blob's ``tag`` when it has one), checksum verified. Every chunk
    /// but the last holds `StoreFile.blobChunkSize` bytes (as `Database.storeNodes` writes them); a chunk of another
    /// size, or of another attachment, is reported as damage.
    /// - Parameter buffers: where the chunk's buffer comes from (see ``ReadBufferPool``); nil: its own.
    func chunk(_ index: Int, digest: String, buffers: ReadBufferPool? = nil) throws(StoreFileError) -> Data {
        let name = file.url.lastPathComponent
        guard chunks.indices.contains(index) else {
            throw StoreFileError(description: "\(name): an attachment has no chunk \(index)")
        }
        // Read as Data and sliced, not copied: a download sends these bytes as they were read.
        let (kind, payload) = try file.readData(at: chunks[index], buffers: buffers)
        guard kind == .blob, let digestLength = payload.first, payload.count > Int(digestLength),
            payload.dropFirst().prefix(Int(digestLength)).elementsEqual((tag ?? digest).utf8.prefix(255))
        else {
            throw StoreFileError(description: "\(name): no chunk of attachment \(digest) at \(chunks[index])")
        }
        let bytes = payload.dropFirst(1 + Int(digestLength))
        let expected =
            index == chunks.count - 1 ? length - index * StoreFile.blobChunkSize : StoreFile.blobChunkSize
        guard bytes.count == expected else {
            throw StoreFileError(
                description: "\(name): an attachment chunk of \(bytes.count) bytes where \(expected) were expected")
        }
        return bytes
    }
}

/// How many attachment chunks downloads gather beyond the one each always holds (see
/// ``ChunkWriter/preferredWriteSize``): at most ``limit`` across the process, so that many downloads at once
/// hold at most that much more than one chunk each.
final class GatheredChunks: @unchecked Sendable {
    // Safe: `used` is only touched under `lock`.
    static let budget = GatheredChunks(limit: 64)
    let limit: Int
    private let lock = NSLock()
    private var used = 0

    init(limit: Int) { self.limit = limit }

    /// Takes up to `wanted` chunks of the budget; returns how many were granted (0 when it is spent).
    func take(_ wanted: Int) -> Int {
        lock.withLock {
            let granted = max(min(wanted, limit - used), 0)
            used += granted
            return granted
        }
    }

    func give(_ count: Int) {
        lock.withLock { used -= count }
    }
}
