import Foundation

/// `POST /{db}` — creates a document with an id the server generates (a UUID), unless the body
/// has its own `_id`.
///
/// Not idempotent: a retried `POST` may create a second document, so the pipeline never repeats
/// it after a dropped connection. Prefer ``PutDocumentOperation`` with an id you choose when you
/// need safe retries. The new id is in the response's `id` (and the `Location` header).
public struct CreateDocumentOperation<Document: Encodable & Sendable>: JSONOperation {
    public typealias Response = DocumentWriteResponse

    /// The database name.
    public var database: String
    /// The document body.
    public var document: Document
    /// Ask the server to write later and answer 202 at once (`batch=ok`). Defaults to false.
    public var batch: Bool
    /// How many copies must confirm the write (`w`) on a cluster before it is answered 201;
    /// with fewer the answer is 202 (``DocumentWriteResponse/isAccepted``). Nil (the default)
    /// leaves it to the server (a quorum, on CouchDB).
    public var writeQuorum: Int?

    private var body: Data?

    public init(database: String, document: Document, batch: Bool = false) {
        self.database = database
        self.document = document
        self.batch = batch
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateQuorum(writeQuorum, name: "writeQuorum (w)")
    }

    public mutating func serialise() throws { body = try JSONBody.document(document) }

    public var endpoint: CouchPath { CouchPath(database) }
    public var method: HTTPMethod { .post }
    public var data: Data? { body }
    public var isIdempotent: Bool? { false }

    public var parameters: [URLQueryItem] {
        (batch ? [URLQueryItem(name: "batch", value: "ok")] : [])
            + (writeQuorum.map { [URLQueryItem(name: "w", value: String($0))] } ?? [])
    }
}

/// What `HEAD /{db}/{docid}` tells about a document without reading it.
public struct DocumentHead: Sendable, Hashable {
    /// The `ETag` header without its quotes.
    public var etag: String
    /// The current (winning) revision, taken from the ETag; nil for `_local` documents, whose
    /// ETags are opaque.
    public var revision: String?
    /// The size of the JSON body a `GET` would return (`Content-Length`), when sent.
    public var contentLength: Int?

    public init(etag: String, revision: String?, contentLength: Int?) {
        self.etag = etag
        self.revision = revision
        self.contentLength = contentLength
    }
}

/// `HEAD /{db}/{docid}` — whether a document exists, and its current revision, without its body.
///
/// The response is nil when the document does not exist or is deleted (404): "not there" is an
/// answer to this question, not an error. A `HEAD` response has no body, so a deleted document
/// cannot be told from one that never existed; use ``GetDocumentOperation`` for that. Other
/// failures (401, 403, a missing database's 404 included) are thrown as ``CouchError``: a 404 for
/// a missing *database* is not distinguishable here either, so check the database first when in doubt.
public struct HeadDocumentOperation: CouchOperation {
    public typealias Response = DocumentHead?

    /// The database name.
    public var database: String
    /// The document id.
    public var id: String
    /// Ask about this revision instead of the winning one (`rev`). Defaults to nil.
    public var revision: String?

    public init(database: String, id: String, revision: String? = nil) {
        self.database = database
        self.id = id
        self.revision = revision
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(id)
        if let revision { try CouchValidation.validateRevision(revision) }
    }

    public var endpoint: CouchPath { .document(database, id) }
    public var method: HTTPMethod { .head }
    public var parameters: [URLQueryItem] { revision.map { [URLQueryItem(name: "rev", value: $0)] } ?? [] }

    public func processResponse(data: Data, httpInfo: HTTPInfo) throws -> DocumentHead? {
        if httpInfo.statusCode == 404 { return nil }
        try throwIfError(data: data, httpInfo: httpInfo)
        let etag = ETag.unquoted(httpInfo.headers["ETag"]) ?? ""
        let isRevision = (try? CouchValidation.validateRevision(etag)) != nil && !id.hasPrefix("_local/")
        return DocumentHead(
            etag: etag, revision: isRevision ? etag : nil,
            contentLength: httpInfo.headers["Content-Length"].flatMap { Int($0) })
    }
}

/// Reading `ETag` headers.
enum ETag {
    /// The value without surrounding quotes (and without a weak `W/` prefix).
    static func unquoted(_ value: String?) -> String? {
        guard var value = value?.trimmingCharacters(in: .whitespaces) else { return nil }
        if value.hasPrefix("W/") { value.removeFirst(2) }
        if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") {
            value = String(value.dropFirst().dropLast())
        }
        return value
    }
}

/// `COPY /{db}/{docid}` — copies a document to another id in the same database, attachments
/// included, without downloading it.
///
/// The target goes in the `Destination` header (percent-encoded, as CouchDB decodes it); to
/// overwrite an existing target give its current revision as `destinationRevision` (sent as
/// `Destination: id?rev=…`). `sourceRevision` copies an older revision of the source (`?rev=`).
public struct CopyDocumentOperation: JSONOperation, IdempotentOperation {
    public typealias Response = DocumentWriteResponse

    /// The database name.
    public var database: String
    /// The id of the document to copy.
    public var id: String
    /// The id to copy to.
    public var destination: String
    /// The current revision of `destination` when it exists and is to be overwritten. Defaults to nil.
    public var destinationRevision: String?
    /// The revision of the source to copy. Defaults to nil (the winning revision).
    public var sourceRevision: String?
    /// Ask the server to write later and answer 202 at once (`batch=ok`). Defaults to false.
    public var batch: Bool

    public init(
        database: String, id: String, destination: String, destinationRevision: String? = nil,
        sourceRevision: String? = nil, batch: Bool = false
    ) {
        self.database = database
        self.id = id
        self.destination = destination
        self.destinationRevision = destinationRevision
        self.sourceRevision = sourceRevision
        self.batch = batch
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(id)
        try CouchValidation.validateDocumentID(destination)
        if let destinationRevision { try CouchValidation.validateRevision(destinationRevision) }
        if let sourceRevision { try CouchValidation.validateRevision(sourceRevision) }
        if destination == id, destinationRevision == nil {
            throw CouchError.validation("Copying '\(id)' onto itself needs destinationRevision.")
        }
    }

    public var endpoint: CouchPath { .document(database, id) }
    public var method: HTTPMethod { .copy }
    /// COPY writes one fixed id, so repeating it never makes a second document (at worst a 409).

    public var parameters: [URLQueryItem] {
        var query = QueryParameters()
        query.add("rev", sourceRevision)
        if batch { query.add("batch", "ok") }
        return query.queryItems
    }

    public var headers: HTTPFields {
        var value = PercentEncoding.encode(destination)
        if let destinationRevision { value += "?rev=" + destinationRevision }
        return ["Destination": value]
    }
}
