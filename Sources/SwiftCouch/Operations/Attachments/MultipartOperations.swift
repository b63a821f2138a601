import Foundation

/// An attachment uploaded as its own MIME part by ``PutMultipartDocumentOperation``.
public struct AttachmentUpload: Sendable, Hashable {
    /// The attachment's name.
    public var name: String
    /// The MIME type.
    public var contentType: String
    /// The bytes, sent as they are (no base64).
    public var data: Data

    public init(name: String, contentType: String, data: Data) {
        self.name = name
        self.contentType = contentType
        self.data = data
    }
}

/// `PUT /{db}/{docid}` with `Content-Type: multipart/related` — writes a document and its
/// attachments in one request, the attachments as raw bytes rather than base64 JSON.
///
/// The first MIME part is the document's JSON with an `_attachments` entry
/// `{"content_type":…,"length":…,"follows":true}` per upload; the uploads follow in the same
/// order. Attachment stubs already in the document (`{"stub":true}`) are kept, so existing
/// attachments survive the update.
public struct PutMultipartDocumentOperation<Document: Encodable & Sendable>: JSONOperation {
    public typealias Response = DocumentWriteResponse

    /// The database name.
    public var database: String
    /// The document id.
    public var id: String
    /// The document body.
    public var document: Document
    /// The attachments to upload, in order.
    public var attachments: [AttachmentUpload]
    /// The revision being updated; nil to create (or when the body carries `_rev`). Defaults to nil.
    public var revision: String?

    private var body: Data?
    private var boundary = MultipartCoding.makeBoundary()

    public init(
        database: String, id: String, document: Document, attachments: [AttachmentUpload], revision: String? = nil
    ) {
        self.database = database
        self.id = id
        self.document = document
        self.attachments = attachments
        self.revision = revision
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(id)
        if let revision { try CouchValidation.validateRevision(revision) }
        guard !attachments.isEmpty else {
            throw CouchError.validation("A multipart write needs at least one attachment; use PutDocumentOperation.")
        }
        var seen = Set<String>()
        for upload in attachments {
            try AttachmentPath.validate(database: database, documentID: id, name: upload.name, revision: nil)
            guard seen.insert(upload.name).inserted else {
                throw CouchError.validation("Attachment '\(upload.name)' is listed twice.")
            }
        }
    }

    public mutating func serialise() throws {
        let encoded = try JSONBody.document(document)
        guard case .object(var members) = try JSONDecoder().decode(JSONValue.self, from: encoded) else {
            throw CouchError.serialisation("A document must encode to a JSON object.")
        }
        // Stubs of other attachments are kept; an upload replaces a stub of the same name.
        let uploaded = Set(attachments.map(\.name))
        let kept = (members.removeValue(forKey: "_attachments")?.objectValue ?? [:]).filter {
            !uploaded.contains($0.key)
        }
        // `_attachments` is written by hand so the `follows` entries keep the order of the parts.
        var json = Data(try JSONBody.encode(JSONValue.object(members)).dropLast())
        if !members.isEmpty { json.append(UInt8(ascii: ",")) }
        json.append(Data("\"_attachments\":{".utf8))
        var entries: [Data] = try kept.sorted { $0.key < $1.key }.map { name, stub in
            try JSONBody.encode(name) + Data(":".utf8) + JSONBody.encode(stub)
        }
        for upload in attachments {
            let follows = Attachment(contentType: upload.contentType, follows: true, length: upload.data.count)
            entries.append(
                try JSONBody.encode(upload.name) + Data(":".utf8) + JSONBody.encode(follows))
        }
        json.append(Data(entries.joined(separator: Data(",".utf8))))
        json.append(Data("}}".utf8))
        var parts = [MIMEPart(headers: ["Content-Type": "application/json"], body: json)]
        for upload in attachments {
            parts.append(
                MIMEPart(
                    headers: [
                        "Content-Type": upload.contentType,
                        "Content-Disposition": "attachment; filename=\(MultipartDisposition.quoted(upload.name))",
                    ], body: upload.data))
        }
        // A random boundary that happens to occur in the bytes would cut a part short: pick another.
        while parts.contains(where: { $0.body.range(of: Data("--\(boundary)".utf8)) != nil }) {
            boundary = MultipartCoding.makeBoundary()
        }
        body = try MultipartCoding.encode(parts, boundary: boundary)
    }

    public var endpoint: CouchPath { .document(database, id) }
    public var method: HTTPMethod { .put }
    public var data: Data? { body }
    public var contentType: String? { "multipart/related; boundary=\"\(boundary)\"" }
    public var parameters: [URLQueryItem] { RevisionPlacement.query.queryItems(revision) }
}

enum MultipartDisposition {
    /// A quoted-string for a header parameter.
    static func quoted(_ text: String) -> String {
        "\"" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }
}

/// One revision read as a MIME part by ``GetOpenRevisionsMultipartOperation``.
public struct MultipartDocument: Sendable, Hashable {
    /// An attachment received as raw bytes.
    public struct ReceivedAttachment: Sendable, Hashable {
        /// The MIME type.
        public var contentType: String?
        /// The bytes, as sent (still gzip-compressed when `encoding` is `gzip`).
        public var data: Data
        /// The `Content-Encoding` of the part, when CouchDB sent the stored encoding.
        public var encoding: String?
    }

    /// The document's JSON (for a missing revision, `{"missing":"…"}`).
    public var json: Data
    /// The attachments that came as their own parts, by name.
    public var attachments: [String: ReceivedAttachment]
    /// The revision asked for, when CouchDB reports it missing.
    public var missingRevision: String?

    /// Decodes the document's JSON into `type` (``CouchDocument`` gives the metadata and the
    /// attachment stubs; their bytes are in ``attachments``).
    public func decode<T: Decodable>(_ type: T.Type = T.self) throws -> T {
        try JSONDecoder().decode(T.self, from: json)
    }

    /// Reads one top-level part: a JSON document, or a `multipart/related` document with attachments.
    static func read(_ part: MIMEPart) throws(CouchError) -> MultipartDocument {
        if let inner = MultipartCoding.boundary(contentType: part.headers["Content-Type"]) {
            let parts = try MultipartCoding.decode(part.body, boundary: inner)
            guard let first = parts.first else {
                throw CouchError(kind: .decoding, message: "A multipart/related document part is empty.")
            }
            let stubs = (try? JSONDecoder().decode(CouchDocument<JSONValue>.self, from: first.body))?.attachments ?? [:]
            let followNames = stubs.filter { $0.value.follows == true }.map(\.key).sorted()
            var attachments: [String: ReceivedAttachment] = [:]
            for (index, attachment) in parts.dropFirst().enumerated() {
                guard let name = attachment.filename ?? followNames[safe: index] else { continue }
                attachments[name] = ReceivedAttachment(
                    contentType: attachment.headers["Content-Type"], data: attachment.body,
                    encoding: attachment.headers["Content-Encoding"])
            }
            return MultipartDocument(json: first.body, attachments: attachments, missingRevision: nil)
        }
        let missing = (try? JSONDecoder().decode([String: JSONValue].self, from: part.body))?["missing"]?.stringValue
        return MultipartDocument(json: part.body, attachments: [:], missingRevision: missing)
    }
}

extension Array {
    fileprivate subscript(safe index: Int) -> Element? { indices.contains(index) ? self[index] : nil }
}

/// `GET /{db}/{docid}?open_revs=…` with `Accept: multipart/mixed` — several revisions of a
/// document, each as its own MIME part, with attachment bodies as raw bytes (set
/// `options.attachments` to receive them) instead of base64 JSON.
///
/// The replicator's way of reading conflicts with big attachments. Each entry's ``MultipartDocument/json``
/// is the revision's JSON; ``MultipartDocument/attachments`` the bytes that came with it.
public struct GetOpenRevisionsMultipartOperation: CouchOperation {
    public typealias Response = [MultipartDocument]

    /// The database name.
    public var database: String
    /// The document id.
    public var id: String
    /// The revisions to read. Defaults to `.all`.
    public var revisions: OpenRevisions
    /// The read options (`attachments`, `atts_since`, `revs`, `latest`, ...). Defaults to none.
    public var options: DocumentReadOptions

    public init(
        database: String, id: String, revisions: OpenRevisions = .all, options: DocumentReadOptions = .init()
    ) {
        self.database = database
        self.id = id
        self.revisions = revisions
        self.options = options
    }

    public func validate() throws(CouchError) {
        try revisions.validate(database: database, id: id, options: options)
    }

    public var endpoint: CouchPath { .document(database, id) }
    public var headers: HTTPFields { ["Accept": "multipart/mixed"] }
    public var parameters: [URLQueryItem] { revisions.parameters(options) }

    public func processResponse(data: Data, httpInfo: HTTPInfo) throws -> [MultipartDocument] {
        try throwIfError(data: data, httpInfo: httpInfo)
        guard let boundary = MultipartCoding.boundary(contentType: httpInfo.headers["Content-Type"]) else {
            var error = CouchError.http(
                status: httpInfo.statusCode, body: data, method: nil, path: nil, kind: .decoding)
            error.message = "Expected a multipart/mixed response, got \(httpInfo.headers["Content-Type"] ?? "none")."
            throw error
        }
        return try MultipartCoding.decode(data, boundary: boundary).map(MultipartDocument.read)
    }
}
