import Foundation
import SwiftCouch

/// `PUT /{db}/{docid}?new_edits=false` with a `multipart/related` body read from a file: a
/// replicated revision (its `_rev` and `_revisions` as the source has them) and the attachments
/// that follow it as raw bytes, streamed from the file, never held in memory.
///
/// The file holds the MIME parts: the document's JSON first, whose `_attachments` lists each
/// attachment either as a stub the target already has or as `follows`, then one part per
/// `follows` attachment in the same order. Safe to repeat (a revision written again changes
/// nothing), so the client's retry policy applies.
public struct PutReplicatedDocumentOperation: JSONOperation {
    public typealias Response = DocumentWriteResponse

    /// The database name.
    public var database: String
    /// The document id.
    public var id: String
    /// The MIME boundary the file's parts are separated by.
    public var boundary: String
    /// The body: the file of MIME parts.
    public var body: StreamedBody

    /// - Throws: `CouchError` when the file cannot be read.
    public init(database: String, id: String, multipartFile: URL, boundary: String) throws(CouchError) {
        self.database = database
        self.id = id
        self.boundary = boundary
        self.body = try .file(multipartFile)
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(id)
        guard !boundary.isEmpty, boundary.count <= 70, !boundary.contains("\"") else {
            throw CouchError.validation("A MIME boundary must have 1 to 70 characters and no quote.")
        }
    }

    public var endpoint: CouchPath { .document(database, id) }
    public var method: HTTPMethod { .put }
    public var parameters: [URLQueryItem] { [URLQueryItem(name: "new_edits", value: "false")] }
    public var streamedBody: StreamedBody? { body }
    public var contentType: String? { "multipart/related; boundary=\"\(boundary)\"" }
    public var isIdempotent: Bool? { true }
}

/// Copies one revision of a document with attachments: the attachments the target lacks are
/// downloaded to temporary files (streamed), a multipart body is spooled to a temporary file
/// from them, and the file is uploaded (streamed) with `new_edits=false`. Memory stays flat in
/// the attachments' sizes.
struct AttachmentCopy {
    let source: SyncEndpoint
    let target: SyncEndpoint

    /// The generation from which attachments must be sent: those with `revpos` above the newest
    /// of `ancestors` (the target's possible ancestors, from `_revs_diff`) that is on the
    /// revision's path. 0 when none is (send every attachment).
    static func sentAbove(_ document: JSONValue, ancestors: [String]?) -> Int64 {
        guard let ancestors, let revisions = document["_revisions"], let start = revisions["start"]?.intValue,
            let ids = revisions["ids"]?.arrayValue?.compactMap(\.stringValue)
        else { return 0 }
        var newest: Int64 = 0
        for ancestor in ancestors {
            let parts = ancestor.split(separator: "-", maxSplits: 1)
            // Both numbers come from peers: a generation from 1 to `start` cannot overflow below.
            guard parts.count == 2, let generation = Int64(parts[0]), generation >= 1, generation <= start else {
                continue
            }
            let index = start - generation
            guard index < Int64(ids.count), ids[Int(index)] == String(parts[1]) else { continue }
            newest = max(newest, generation)
        }
        return newest
    }

    /// Writes `document` (read with stubs) to the target with the attachments whose `revpos` is
    /// above `sentAbove` sent as files. Returns the write's answer; throws the write's error.
    func write(_ document: JSONValue, sentAbove: Int64) async throws(CouchError) -> DocumentWriteResponse {
        guard case .object(var members) = document, let id = members["_id"]?.stringValue,
            let rev = members["_rev"]?.stringValue
        else {
            throw CouchError.validation("A replicated revision has no _id or _rev.")
        }
        let attachments = members.removeValue(forKey: "_attachments")?.objectValue ?? [:]
        let scratch = try ScratchFolder()
        defer { scratch.remove() }
        let directory = scratch.url

        // Attachments to send, in name order, downloaded one after another.
        var stubs: [(String, JSONValue)] = []
        var follows: [(name: String, contentType: String, file: URL, spec: JSONValue)] = []
        for (index, name) in attachments.keys.sorted().enumerated() {
            guard let stub = attachments[name] else { continue }
            // A stub only for an attachment known to be older than the target's ancestor; an
            // unknown revpos (absent, or 0 as some replicated writes leave it) is sent.
            let revpos = stub["revpos"]?.intValue ?? 0
            if revpos >= 1 && revpos <= sentAbove {
                stubs.append((name, stub))
                continue
            }
            let file = directory.appendingPathComponent("attachment-\(index)")
            let contentType = stub["content_type"]?.stringValue ?? "application/octet-stream"
            if stub["encoding"]?.stringValue == "gzip" {
                // Stored gzip-encoded (a text type): its digest is the encoded bytes' MD5, so the
                // encoded bytes are what is copied, streamed to the file as the source sends them
                // (`Accept-Encoding: gzip`, nothing inflated).
                let stored = try await source.download(
                    GetAttachmentOperation(database: source.databaseName, documentID: id, name: name, revision: rev),
                    to: file, options: DownloadOptions(keepsContentEncoding: true))
                var spec: [String: JSONValue] = ["follows": true, "content_type": .string(contentType)]
                if let revpos = stub["revpos"] { spec["revpos"] = revpos }
                if stored.contentEncoding == "gzip" {
                    spec["encoding"] = "gzip"
                    spec["encoded_length"] = .int(stored.length)
                    spec["length"] = stub["length"] ?? .null
                    if let digest = stub["digest"] { spec["digest"] = digest }
                } else {
                    // The source sent it decoded (a local store, or a proxy): the target encodes it
                    // again and computes its own digest.
                    spec["length"] = .int(stored.length)
                }
                follows.append((name, contentType, file, .object(spec)))
                continue
            }
            let download = try await source.download(
                GetAttachmentOperation(database: source.databaseName, documentID: id, name: name, revision: rev),
                to: file)
            var spec: [String: JSONValue] = [
                "follows": true, "content_type": .string(contentType), "length": .int(download.length),
            ]
            if let revpos = stub["revpos"] { spec["revpos"] = revpos }
            if let digest = stub["digest"] { spec["digest"] = digest }
            follows.append((name, contentType, file, .object(spec)))
        }

        // Nothing to send (every attachment is on the target already): a JSON write with the stubs,
        // as CouchDB's replicator does. (A multipart body with no attachment part made CouchDB 3.5
        // wait for one: the PUT never finished.)
        if follows.isEmpty {
            members["_attachments"] = .object(Dictionary(uniqueKeysWithValues: stubs))
            let rows = try await target.send(
                BulkDocsOperation(
                    database: target.databaseName, documents: [JSONValue.object(members)], newEdits: false))
            if let failure = rows.first?.error {
                let status = Self.status(of: failure.error)
                var error = CouchError(
                    kind: .http,
                    message:
                        "HTTP \(status) \(failure.error): writing '\(id)' with attachment stubs (\(failure.reason ?? ""))",
                    statusCode: status, error: failure.error, reason: failure.reason)
                error.method = "POST"
                throw error
            }
            return DocumentWriteResponse(ok: true, id: id, rev: rev)
        }

        // The document's JSON with `_attachments` written by hand, so the `follows` entries keep
        // the order of the parts.
        let boundary = "swiftcouchsync-" + UUID().uuidString.replacingOccurrences(of: "-", with: "")
        var json = Data(try JSONValue.object(members).encodedForSync().dropLast())
        json.append(contentsOf: (members.isEmpty ? "" : ",").utf8)
        json.append(contentsOf: #""_attachments":{"#.utf8)
        var entries: [Data] = []
        for (name, stub) in stubs {
            entries.append(try JSONValue.string(name).encodedForSync() + Data(":".utf8) + stub.encodedForSync())
        }
        for follow in follows {
            entries.append(
                try JSONValue.string(follow.name).encodedForSync() + Data(":".utf8) + follow.spec.encodedForSync())
        }
        json.append(Data(entries.joined(separator: Data(",".utf8))))
        json.append(contentsOf: "}}".utf8)

        let spool = directory.appendingPathComponent("body")
        try Self.spool(
            json: json, follows: follows.map { ($0.name, $0.contentType, $0.file) }, boundary: boundary, to: spool)
        return try await target.send(
            PutReplicatedDocumentOperation(
                database: target.databaseName, id: id, multipartFile: spool, boundary: boundary))
    }

    /// The status CouchDB gives a `_bulk_docs` row's error when it is a request's own.
    static func status(of error: String) -> Int {
        switch error {
        case "missing_stub": return 412
        case "forbidden": return 403
        case "unauthorized": return 401
        case "conflict": return 409
        case "too_large", "document_too_large", "attachment_too_large": return 413
        case "unsupported_media_type": return 415
        default: return 400
        }
    }

    /// Writes the MIME parts to `file`, copying each attachment file in 1 MiB chunks.
    static func spool(json: Data, follows: [(String, String, URL)], boundary: String, to file: URL)
        throws(CouchError)
    {
        do {
            guard FileManager.default.createFile(atPath: file.path, contents: nil) else {
                throw CouchError.validation("Could not create \(file.path).")
            }
            let out = try FileHandle(forWritingTo: file)
            defer { try? out.close() }
            try out.write(contentsOf: Data("--\(boundary)\r\nContent-Type: application/json\r\n\r\n".utf8))
            try out.write(contentsOf: json)
            for (name, contentType, attachment) in follows {
                let quoted = name.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(
                    of: "\"", with: "\\\"")
                try out.write(
                    contentsOf: Data(
                        ("\r\n--\(boundary)\r\nContent-Disposition: attachment; filename=\"\(quoted)\"\r\n"
                            + "Content-Type: \(contentType)\r\n\r\n").utf8))
                let input = try FileHandle(forReadingFrom: attachment)
                defer { try? input.close() }
                while let chunk = try input.read(upToCount: 1 << 20), !chunk.isEmpty {
                    try out.write(contentsOf: chunk)
                }
            }
            try out.write(contentsOf: Data("\r\n--\(boundary)--".utf8))
        } catch let error as CouchError {
            throw error
        } catch {
            throw CouchError(
                kind: .transport, message: "Could not spool a multipart body to \(file.path): \(error)",
                underlying: error)
        }
    }
}

extension JSONValue {
    /// Compact JSON text.
    func encodedForSync() throws(CouchError) -> Data {
        do {
            return try JSONEncoder().encode(self)
        } catch {
            throw CouchError.serialisation("Could not encode a document: \(error)", underlying: error)
        }
    }
}
