import Foundation

/// The body of a document write: `{"ok":true,"id":"…","rev":"…"}`.
public struct DocumentWriteResponse: Codable, Sendable, Equatable, HTTPStatusRecording {
    public var ok: Bool?
    /// The document id.
    public var id: String
    /// The new revision (absent for `batch=ok` writes, which answer 202 before writing).
    public var rev: String?
    /// True when the server answered `202 Accepted` instead of `201 Created`/`200 OK`: the write
    /// was accepted but is **not yet durable**. On a cluster, fewer than `w` copies of the shard
    /// confirmed it (nodes down or slow), so it may still be lost if those copies fail, and
    /// reads may not see it yet; with `batch=ok`, it was not written yet at all. Read it back
    /// (or wait on `_changes`) before relying on it.
    public var isAccepted: Bool = false

    enum CodingKeys: String, CodingKey { case ok, id, rev }

    public init(ok: Bool?, id: String, rev: String?, isAccepted: Bool = false) {
        self.ok = ok
        self.id = id
        self.rev = rev
        self.isAccepted = isAccepted
    }

    public mutating func record(status: Int) { isAccepted = status == 202 }
}

/// A response value that keeps something of the HTTP status it arrived with (for example
/// ``DocumentWriteResponse/isAccepted`` for a `202 Accepted`). ``JSONOperation``'s default
/// `processResponse` calls it after decoding.
public protocol HTTPStatusRecording {
    /// Called with the response's status code once the body is decoded.
    mutating func record(status: Int)
}

extension RevisionPlacement {
    /// `rev=` when the revision goes in the query string.
    func queryItems(_ revision: String?) -> [URLQueryItem] {
        guard let revision, self == .query else { return [] }
        return [URLQueryItem(name: "rev", value: revision)]
    }

    /// `If-Match:` when the revision goes in a header.
    func headers(_ revision: String?) -> HTTPFields {
        var fields = HTTPFields()
        if let revision, self == .ifMatch { fields["If-Match"] = revision }
        return fields
    }
}

/// `PUT /{db}/{docid}` — creates or updates a document from any `Encodable` value.
///
/// Pass `revision` to update (sent as `?rev=`, or as `If-Match` with `revisionPlacement: .ifMatch`);
/// leave it nil to create, or when the body carries `_rev` itself. The id is percent-encoded as one
/// path segment (`a/b` → `a%2Fb`); `_design/` and `_local/` ids keep their prefix. With `batch`,
/// CouchDB answers 202 before writing and the response has no `rev`. Use
/// ``CouchDocument`` to send `_id`/`_rev`/`_attachments` alongside your own type.
public struct PutDocumentOperation<Document: Encodable & Sendable>: JSONOperation {
    public typealias Response = DocumentWriteResponse

    /// The database name.
    public var database: String
    /// The document id.
    public var id: String
    /// The document body.
    public var document: Document
    /// The revision being updated; nil to create a new document. Defaults to nil.
    public var revision: String?
    /// Ask the server to write later and answer 202 at once (`batch=ok`). Defaults to false.
    public var batch: Bool
    /// How many copies must confirm the write (`w`) on a cluster before it is answered 201;
    /// with fewer the answer is 202 (``DocumentWriteResponse/isAccepted``). Nil (the default)
    /// leaves it to the server (a quorum, on CouchDB).
    public var writeQuorum: Int?
    /// Where `revision` is sent. Defaults to `.query` (`?rev=`).
    public var revisionPlacement: RevisionPlacement

    private var body: Data?

    public init(
        database: String, id: String, document: Document, revision: String? = nil, batch: Bool = false,
        revisionPlacement: RevisionPlacement = .query
    ) {
        self.database = database
        self.id = id
        self.document = document
        self.revision = revision
        self.batch = batch
        self.revisionPlacement = revisionPlacement
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(id)
        if let revision { try CouchValidation.validateRevision(revision) }
        try CouchValidation.validateQuorum(writeQuorum, name: "writeQuorum (w)")
    }

    public mutating func serialise() throws {
        body = try JSONBody.document(document)
    }

    public var endpoint: CouchPath { .document(database, id) }
    public var method: HTTPMethod { .put }
    public var data: Data? { body }
    public var headers: HTTPFields { revisionPlacement.headers(revision) }

    public var parameters: [URLQueryItem] {
        var items = revisionPlacement.queryItems(revision)
        if batch { items.append(URLQueryItem(name: "batch", value: "ok")) }
        if let writeQuorum { items.append(URLQueryItem(name: "w", value: String(writeQuorum))) }
        return items
    }
}

/// `GET /{db}/{docid}` — reads a document into any `Decodable` type (or ``JSONValue``, or
/// ``CouchDocument`` to get `_rev`, `_conflicts`, `_attachments`... next to your own type).
///
/// Every read option CouchDB has is in ``options`` (`revs`, `revs_info`, `conflicts`,
/// `deleted_conflicts`, `attachments`, `atts_since`, `att_encoding_info`, `latest`, `local_seq`,
/// `meta`); `open_revs` returns several revisions and has its own operation,
/// ``GetOpenRevisionsOperation``. A missing or deleted document is a 404 ``CouchError`` whose
/// `reason` is `missing` or `deleted`.
public struct GetDocumentOperation<Document: Decodable & Sendable>: JSONOperation {
    public typealias Response = Document

    /// The database name.
    public var database: String
    /// The document id.
    public var id: String
    /// Read this revision instead of the winning one (`rev`). Defaults to nil.
    public var revision: String?
    /// The read options. Defaults to none.
    public var options: DocumentReadOptions

    public init(database: String, id: String, revision: String? = nil, conflicts: Bool = false, revisions: Bool = false)
    {
        self.init(
            database: database, id: id, revision: revision,
            options: DocumentReadOptions(revisions: revisions, conflicts: conflicts))
    }

    public init(database: String, id: String, revision: String? = nil, options: DocumentReadOptions) {
        self.database = database
        self.id = id
        self.revision = revision
        self.options = options
    }

    /// Include `_conflicts`. Defaults to false. (Same as `options.conflicts`.)
    public var conflicts: Bool {
        get { options.conflicts }
        set { options.conflicts = newValue }
    }

    /// Include `_revisions` (the revision history). Defaults to false. (Same as `options.revisions`.)
    public var revisions: Bool {
        get { options.revisions }
        set { options.revisions = newValue }
    }

    /// How many copies must answer (`r`). (Same as `options.readQuorum`.)
    public var readQuorum: Int? {
        get { options.readQuorum }
        set { options.readQuorum = newValue }
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(id)
        if let revision { try CouchValidation.validateRevision(revision) }
        try options.validate()
    }

    public var endpoint: CouchPath { .document(database, id) }

    public var parameters: [URLQueryItem] {
        var query = QueryParameters()
        query.add("rev", revision)
        query.append(options.parameters)
        return query.queryItems
    }
}

/// A document read as free-form JSON.
public typealias GetJSONDocumentOperation = GetDocumentOperation<JSONValue>

/// `DELETE /{db}/{docid}?rev=` — deletes a document (writes a tombstone revision).
///
/// The revision goes in `?rev=` or, with `revisionPlacement: .ifMatch`, in an `If-Match` header.
public struct DeleteDocumentOperation: JSONOperation {
    public typealias Response = DocumentWriteResponse

    /// The database name.
    public var database: String
    /// The document id.
    public var id: String
    /// The revision being deleted (required by CouchDB).
    public var revision: String
    /// Ask the server to write later and answer 202 at once (`batch=ok`). Defaults to false.
    public var batch: Bool
    /// How many copies must confirm the write (`w`) on a cluster before it is answered 201;
    /// with fewer the answer is 202 (``DocumentWriteResponse/isAccepted``). Nil (the default)
    /// leaves it to the server (a quorum, on CouchDB).
    public var writeQuorum: Int?
    /// Where `revision` is sent. Defaults to `.query` (`?rev=`).
    public var revisionPlacement: RevisionPlacement

    public init(
        database: String, id: String, revision: String, batch: Bool = false,
        revisionPlacement: RevisionPlacement = .query
    ) {
        self.database = database
        self.id = id
        self.revision = revision
        self.batch = batch
        self.revisionPlacement = revisionPlacement
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(id)
        try CouchValidation.validateRevision(revision)
        try CouchValidation.validateQuorum(writeQuorum, name: "writeQuorum (w)")
    }

    public var endpoint: CouchPath { .document(database, id) }
    public var method: HTTPMethod { .delete }
    public var headers: HTTPFields { revisionPlacement.headers(revision) }

    public var parameters: [URLQueryItem] {
        var items = revisionPlacement.queryItems(revision)
        if batch { items.append(URLQueryItem(name: "batch", value: "ok")) }
        if let writeQuorum { items.append(URLQueryItem(name: "w", value: String(writeQuorum))) }
        return items
    }
}
