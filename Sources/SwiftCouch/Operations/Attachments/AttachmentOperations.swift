import Foundation

/// Paths and checks for attachments: `/{db}/{docid}/{name}`, where a `/` in the name stays a
/// path separator (CouchDB joins the remaining segments back with `/`) and every part is
/// percent-encoded on its own.
enum AttachmentPath {
    static func path(_ database: String, _ documentID: String, _ name: String) -> CouchPath {
        CouchPath(
            segments: CouchPath.document(database, documentID).segments
                + name.split(separator: "/", omittingEmptySubsequences: false).map(String.init))
    }

    static func validate(database: String, documentID: String, name: String, revision: String?) throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(documentID)
        if documentID.hasPrefix("_local/") {
            throw CouchError.validation("_local documents cannot have attachments ('\(documentID)').")
        }
        guard !name.isEmpty else { throw CouchError.validation("Attachment name must not be empty.") }
        if name.hasPrefix("_") {
            throw CouchError.validation("Attachment name '\(name)' must not start with '_' (CouchDB refuses it).")
        }
        let parts = name.split(separator: "/", omittingEmptySubsequences: false)
        if parts.contains(where: \.isEmpty) {
            throw CouchError.validation("Attachment name '\(name)' has an empty part between '/' separators.")
        }
        for part in parts { try CouchValidation.validatePathSegment(String(part), what: "Attachment name part") }
        if let revision { try CouchValidation.validateRevision(revision) }
    }
}

/// `PUT /{db}/{docid}/{attname}?rev=` — adds or replaces one attachment, sending its bytes as
/// they are (any content type, binary safe).
///
/// `revision` is the document's current revision; leave it nil to create a new document that
/// holds only this attachment. The response carries the document's new revision.
public struct PutAttachmentOperation: JSONOperation {
    public typealias Response = DocumentWriteResponse

    /// The database name.
    public var database: String
    /// The id of the document the attachment belongs to.
    public var documentID: String
    /// The attachment's name; may contain `/`.
    public var name: String
    /// The bytes.
    public var body: Data
    /// The MIME type, sent as `Content-Type` and stored with the attachment.
    public var contentType: String?
    /// The document's current revision; nil when the document does not exist yet. Defaults to nil.
    public var revision: String?
    /// Where `revision` is sent. Defaults to `.query` (`?rev=`).
    public var revisionPlacement: RevisionPlacement

    public init(
        database: String, documentID: String, name: String, data: Data, contentType: String,
        revision: String? = nil, revisionPlacement: RevisionPlacement = .query
    ) {
        self.database = database
        self.documentID = documentID
        self.name = name
        self.body = data
        self.contentType = contentType
        self.revision = revision
        self.revisionPlacement = revisionPlacement
    }

    public func validate() throws(CouchError) {
        try AttachmentPath.validate(database: database, documentID: documentID, name: name, revision: revision)
        if contentType?.isEmpty != false { throw CouchError.validation("Attachment content type must not be empty.") }
    }

    public var endpoint: CouchPath { AttachmentPath.path(database, documentID, name) }
    public var method: HTTPMethod { .put }
    public var data: Data? { body }
    public var headers: HTTPFields { revisionPlacement.headers(revision) }
    public var parameters: [URLQueryItem] { revisionPlacement.queryItems(revision) }
}

/// A byte range of an attachment, sent as `Range: bytes=…`.
public enum ByteRange: Sendable, Hashable {
    /// Bytes `from` through `to`, both included (`bytes=0-7`).
    case closed(from: Int, to: Int)
    /// From `from` to the end (`bytes=100-`).
    case from(Int)
    /// The last `count` bytes (`bytes=-500`).
    case suffix(Int)

    var headerValue: String {
        switch self {
        case .closed(let from, let to): return "bytes=\(from)-\(to)"
        case .from(let from): return "bytes=\(from)-"
        case .suffix(let count): return "bytes=-\(count)"
        }
    }

    func validate() throws(CouchError) {
        switch self {
        case .closed(let from, let to) where from < 0 || to < from:
            throw CouchError.validation("Byte range \(from)-\(to) is not a valid range.")
        case .from(let from) where from < 0:
            throw CouchError.validation("Byte range start \(from) must not be negative.")
        case .suffix(let count) where count <= 0:
            throw CouchError.validation("Byte range suffix length must be at least 1 (got \(count)).")
        default: return
        }
    }
}

/// `GET /{db}/{docid}/{attname}` — an attachment's bytes and content type.
///
/// With `range`, CouchDB answers 206 with only those bytes (see the response's `Content-Range`)
/// — but only for attachments it stores uncompressed: text types are stored gzip-encoded and
/// then the whole body comes back with 200. The bytes are delivered decoded.
public struct GetAttachmentOperation: DataOperation {
    /// The database name.
    public var database: String
    /// The id of the document the attachment belongs to.
    public var documentID: String
    /// The attachment's name; may contain `/`.
    public var name: String
    /// Read the attachment as of this document revision (`rev`). Defaults to nil (the current one).
    public var revision: String?
    /// Only these bytes (`Range`). Defaults to nil (all).
    public var range: ByteRange?

    public init(
        database: String, documentID: String, name: String, revision: String? = nil, range: ByteRange? = nil
    ) {
        self.database = database
        self.documentID = documentID
        self.name = name
        self.revision = revision
        self.range = range
    }

    public func validate() throws(CouchError) {
        try AttachmentPath.validate(database: database, documentID: documentID, name: name, revision: revision)
        try range?.validate()
    }

    public var endpoint: CouchPath { AttachmentPath.path(database, documentID, name) }
    public var parameters: [URLQueryItem] { RevisionPlacement.query.queryItems(revision) }

    public var headers: HTTPFields {
        var fields: HTTPFields = ["Accept": "*/*"]
        if let range { fields["Range"] = range.headerValue }
        return fields
    }
}

/// What `HEAD /{db}/{docid}/{attname}` tells about an attachment without downloading it.
public struct AttachmentHead: Sendable, Hashable {
    /// The MIME type.
    public var contentType: String?
    /// The length in bytes (`Content-Length`).
    public var length: Int?
    /// The digest as document stubs write it, `md5-<base64>`, from the ETag (or `Content-MD5`).
    public var digest: String?
    /// Whether byte ranges can be asked for (`Accept-Ranges: bytes`; text attachments are
    /// stored compressed and answer `none`).
    public var acceptsRanges: Bool

    public init(contentType: String?, length: Int?, digest: String?, acceptsRanges: Bool) {
        self.contentType = contentType
        self.length = length
        self.digest = digest
        self.acceptsRanges = acceptsRanges
    }
}

/// `HEAD /{db}/{docid}/{attname}` — an attachment's type, length and digest; nil when the
/// document or the attachment does not exist (404).
public struct HeadAttachmentOperation: CouchOperation {
    public typealias Response = AttachmentHead?

    /// The database name.
    public var database: String
    /// The id of the document the attachment belongs to.
    public var documentID: String
    /// The attachment's name; may contain `/`.
    public var name: String
    /// Ask as of this document revision (`rev`). Defaults to nil.
    public var revision: String?

    public init(database: String, documentID: String, name: String, revision: String? = nil) {
        self.database = database
        self.documentID = documentID
        self.name = name
        self.revision = revision
    }

    public func validate() throws(CouchError) {
        try AttachmentPath.validate(database: database, documentID: documentID, name: name, revision: revision)
    }

    public var endpoint: CouchPath { AttachmentPath.path(database, documentID, name) }
    public var method: HTTPMethod { .head }
    public var parameters: [URLQueryItem] { RevisionPlacement.query.queryItems(revision) }
    public var headers: HTTPFields { ["Accept": "*/*"] }

    public func processResponse(data: Data, httpInfo: HTTPInfo) throws -> AttachmentHead? {
        if httpInfo.statusCode == 404 { return nil }
        try throwIfError(data: data, httpInfo: httpInfo)
        let md5 = httpInfo.headers["Content-MD5"] ?? ETag.unquoted(httpInfo.headers["ETag"])
        return AttachmentHead(
            contentType: httpInfo.headers["Content-Type"],
            length: httpInfo.headers["Content-Length"].flatMap { Int($0) },
            digest: md5.map { "md5-" + $0 },
            acceptsRanges: httpInfo.headers["Accept-Ranges"]?.lowercased() == "bytes")
    }
}

/// `DELETE /{db}/{docid}/{attname}?rev=` — removes one attachment, making a new document revision.
public struct DeleteAttachmentOperation: JSONOperation {
    public typealias Response = DocumentWriteResponse

    /// The database name.
    public var database: String
    /// The id of the document the attachment belongs to.
    public var documentID: String
    /// The attachment's name; may contain `/`.
    public var name: String
    /// The document's current revision.
    public var revision: String
    /// Where `revision` is sent. Defaults to `.query` (`?rev=`).
    public var revisionPlacement: RevisionPlacement

    public init(
        database: String, documentID: String, name: String, revision: String,
        revisionPlacement: RevisionPlacement = .query
    ) {
        self.database = database
        self.documentID = documentID
        self.name = name
        self.revision = revision
        self.revisionPlacement = revisionPlacement
    }

    public func validate() throws(CouchError) {
        try AttachmentPath.validate(database: database, documentID: documentID, name: name, revision: revision)
    }

    public var endpoint: CouchPath { AttachmentPath.path(database, documentID, name) }
    public var method: HTTPMethod { .delete }
    public var headers: HTTPFields { revisionPlacement.headers(revision) }
    public var parameters: [URLQueryItem] { revisionPlacement.queryItems(revision) }
}
