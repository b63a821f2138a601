import Foundation

/// The body of a document write: `{"ok":true,"id":"…","rev":"…"}`.
public struct DocumentWriteResponse: Codable, Sendable, Equatable {
    public var ok: Bool?
    /// The document id.
    public var id: String
    /// The new revision (absent for `batch=ok` writes, which answer 202 before writing).
    public var rev: String?

    public init(ok: Bool?, id: String, rev: String?) {
        self.ok = ok
        self.id = id
        self.rev = rev
    }
}

/// `PUT /{db}/{docid}` — creates or updates a document from any `Encodable` value.
///
/// Pass `revision` to update (sent as `?rev=`); leave it nil to create. The id is percent-encoded
/// as one path segment (`a/b` → `a%2Fb`); `_design/` and `_local/` ids keep their prefix.
public struct PutDocumentOperation<Document: Encodable & Sendable>: JSONOperation {
    public typealias Response = DocumentWriteResponse

    public var database: String
    public var id: String
    public var document: Document
    /// The revision being updated; nil to create a new document. Defaults to nil.
    public var revision: String?
    /// Ask the server to write later and answer 202 at once (`batch=ok`). Defaults to false.
    public var batch: Bool

    private var body: Data?

    public init(database: String, id: String, document: Document, revision: String? = nil, batch: Bool = false) {
        self.database = database
        self.id = id
        self.document = document
        self.revision = revision
        self.batch = batch
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(id)
        if let revision { try CouchValidation.validateRevision(revision) }
    }

    public mutating func serialise() throws {
        body = try JSONEncoder.couch.encode(document)
        guard body?.first == UInt8(ascii: "{") else {
            throw CouchError.serialisation(
                "A document must encode to a JSON object, not \(Document.self) as a scalar or array.")
        }
    }

    public var endpoint: CouchPath { .document(database, id) }
    public var method: HTTPMethod { .put }
    public var data: Data? { body }

    public var parameters: [URLQueryItem] {
        var items: [URLQueryItem] = []
        if let revision { items.append(URLQueryItem(name: "rev", value: revision)) }
        if batch { items.append(URLQueryItem(name: "batch", value: "ok")) }
        return items
    }
}

/// `GET /{db}/{docid}` — reads a document into any `Decodable` type (or ``JSONValue``).
public struct GetDocumentOperation<Document: Decodable & Sendable>: JSONOperation {
    public typealias Response = Document

    public var database: String
    public var id: String
    /// Read this revision instead of the winning one. Defaults to nil.
    public var revision: String?
    /// Include `_conflicts`. Defaults to false.
    public var conflicts: Bool
    /// Include `_revisions` (the revision history). Defaults to false.
    public var revisions: Bool

    public init(database: String, id: String, revision: String? = nil, conflicts: Bool = false, revisions: Bool = false)
    {
        self.database = database
        self.id = id
        self.revision = revision
        self.conflicts = conflicts
        self.revisions = revisions
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(id)
        if let revision { try CouchValidation.validateRevision(revision) }
    }

    public var endpoint: CouchPath { .document(database, id) }

    public var parameters: [URLQueryItem] {
        var items: [URLQueryItem] = []
        if let revision { items.append(URLQueryItem(name: "rev", value: revision)) }
        if conflicts { items.append(URLQueryItem(name: "conflicts", value: "true")) }
        if revisions { items.append(URLQueryItem(name: "revs", value: "true")) }
        return items
    }
}

/// A document read as free-form JSON.
public typealias GetJSONDocumentOperation = GetDocumentOperation<JSONValue>

/// `DELETE /{db}/{docid}?rev=` — deletes a document (writes a tombstone revision).
public struct DeleteDocumentOperation: JSONOperation {
    public typealias Response = DocumentWriteResponse

    public var database: String
    public var id: String
    /// The revision being deleted (required by CouchDB).
    public var revision: String

    public init(database: String, id: String, revision: String) {
        self.database = database
        self.id = id
        self.revision = revision
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(id)
        try CouchValidation.validateRevision(revision)
    }

    public var endpoint: CouchPath { .document(database, id) }
    public var method: HTTPMethod { .delete }
    public var parameters: [URLQueryItem] { [URLQueryItem(name: "rev", value: revision)] }
}
