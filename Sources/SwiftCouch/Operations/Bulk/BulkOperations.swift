import Foundation

/// The outcome of one document in a `_bulk_docs` write: its new revision, or why it failed.
public enum BulkWriteResult: Decodable, Sendable, Hashable {
    /// The document was written: its id and new revision.
    case success(id: String, rev: String)
    /// The document was not written (`conflict`, `forbidden`, `unauthorized`, ...); the others may
    /// have been.
    case failure(DocumentError)

    enum CodingKeys: String, CodingKey { case id, rev, error }

    public init(from decoder: any Decoder) throws {
        if let reader = FastJSONObjectReader(decoder), let result = Self.read(reader) {
            self = result
            return
        }
        let container = try decoder.container(keyedBy: CodingKeys.self)
        if container.contains(.error) {
            self = .failure(try DocumentError(from: decoder))
        } else {
            self = .success(
                id: try container.decode(String.self, forKey: .id), rev: try container.decode(String.self, forKey: .rev)
            )
        }
    }

    /// A success read without a keyed container (see ``FastJSONObjectReader``); nil for anything else,
    /// which the container reads.
    static func read(_ reader: FastJSONObjectReader) -> Self? {
        guard !reader.contains(CodingKeys.error), let id = reader.string(CodingKeys.id),
            let rev = reader.string(CodingKeys.rev)
        else { return nil }
        return .success(id: id, rev: rev)
    }

    /// The document id (nil only for a failure that names none).
    public var id: String? {
        switch self {
        case .success(let id, _): return id
        case .failure(let error): return error.id
        }
    }

    /// The new revision, on success.
    public var rev: String? {
        if case .success(_, let rev) = self { return rev }
        return nil
    }

    /// The error, on failure.
    public var error: DocumentError? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

/// `POST /{db}/_bulk_docs` — creates, updates and deletes many documents in one request.
///
/// Each document is written on its own: the response has one ``BulkWriteResult`` per document,
/// in order, and a conflict on one does not stop the others. Give `_id`/`_rev`/`_deleted` in
/// the documents themselves (``CouchDocument`` does that for your own types). A request-level
/// problem (an illegal `_id`, a body CouchDB refuses) fails the whole request with a
/// ``CouchError``. `newEdits: false` stores the given revisions as they are (replication) and
/// CouchDB answers with an empty list. `allOrNothing` is sent as asked, but CouchDB 3 refuses it
/// with 417 `not_implemented`, reported as a ``CouchError``.
public struct BulkDocsOperation<Document: Encodable & Sendable>: JSONOperation {
    public typealias Response = [BulkWriteResult]

    /// The database name.
    public var database: String
    /// The documents to write.
    public var documents: [Document]
    /// False to store revisions as given instead of making new ones (`new_edits`). Defaults to true.
    public var newEdits: Bool
    /// Ask for an atomic write of all documents (`all_or_nothing`); CouchDB 1.x only. Defaults to false.
    public var allOrNothing: Bool

    private var body: Data?

    public init(database: String, documents: [Document], newEdits: Bool = true, allOrNothing: Bool = false) {
        self.database = database
        self.documents = documents
        self.newEdits = newEdits
        self.allOrNothing = allOrNothing
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        guard !documents.isEmpty else { throw CouchError.validation("_bulk_docs needs at least one document.") }
    }

    public mutating func serialise() throws {
        // Every document encoded straight into the body: no `Data` per document, no copy at the end.
        var out = Data(capacity: documents.count * 256 + 64)
        out.append(contentsOf: #"{"docs":["#.utf8)
        for (index, document) in documents.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            do {
                try JSONBody.appendDocument(document, to: &out)
            } catch let error as CouchError {
                throw CouchError.serialisation("Document \(index): \(error.message)")
            }
        }
        out.append(UInt8(ascii: "]"))
        if !newEdits { out.append(contentsOf: #","new_edits":false"#.utf8) }
        if allOrNothing { out.append(contentsOf: #","all_or_nothing":true"#.utf8) }
        out.append(UInt8(ascii: "}"))
        body = out
    }

    public var endpoint: CouchPath { CouchPath(database, "_bulk_docs") }
    public var method: HTTPMethod { .post }
    public var data: Data? { body }
    /// Replicated writes (`newEdits: false`) store fixed revisions, so they are safe to repeat.
    public var isIdempotent: Bool? { !newEdits }

    /// Reads the rows; a non-2xx answer whose body is a list of rows (417 for `all_or_nothing`)
    /// becomes a ``CouchError`` carrying the first row's `error` and `reason`.
    public func processResponse(data: Data, httpInfo: HTTPInfo) throws -> [BulkWriteResult] {
        if !httpInfo.isSuccess, let rows = try? JSONDecoder().decode([DocumentError].self, from: data),
            let first = rows.first
        {
            var error = CouchError.http(status: httpInfo.statusCode, body: nil, method: nil, path: nil)
            error.error = first.error
            error.reason = first.reason
            error.message += " \(first.error): \(first.reason ?? "") (\(rows.count) documents, none written)"
            throw error
        }
        try throwIfError(data: data, httpInfo: httpInfo)
        return try decodeResponse(data, httpInfo: httpInfo)
    }
}

/// One document revision to read with ``BulkGetOperation``.
public struct BulkGetItem: Encodable, Sendable, Hashable {
    /// The document id.
    public var id: String
    /// The revision to read. Defaults to nil (the winning revision).
    public var rev: String?
    /// Inline only the attachments changed since these revisions (`atts_since`). Defaults to nil.
    public var attachmentsSince: [String]?

    public init(id: String, rev: String? = nil, attachmentsSince: [String]? = nil) {
        self.id = id
        self.rev = rev
        self.attachmentsSince = attachmentsSince
    }

    enum CodingKeys: String, CodingKey {
        case id, rev
        case attachmentsSince = "atts_since"
    }
}

/// The answer of `_bulk_get`: one result per requested item, in order.
public struct BulkGetResponse<Document: Decodable & Sendable>: Decodable, Sendable {
    /// The revisions read for one requested item.
    public struct Result: Decodable, Sendable {
        /// The id asked for (nil when the item had none).
        public var id: String?
        /// One entry per revision: `.found(document)` or `.failed(error)`.
        public var docs: [DocumentRevisionResult<Document>]

        public init(id: String?, docs: [DocumentRevisionResult<Document>]) {
            self.id = id
            self.docs = docs
        }
    }

    /// One result per requested item, in order.
    public var results: [Result]

    public init(results: [Result]) { self.results = results }

    /// Every document found, in order.
    public var documents: [Document] { results.flatMap { $0.docs.compactMap(\.document) } }
}

/// `POST /{db}/_bulk_get` — reads many documents (or given revisions) in one request.
///
/// Every item gets a result, in order, each with `.found(document)` or `.failed(error)`:
/// a missing document is `not_found` (CouchDB's `"rev":"undefined"` is read as a nil `rev`), a
/// malformed revision `bad_request`. A read, so safe to retry.
public struct BulkGetOperation<Document: Decodable & Sendable>: JSONOperation, IdempotentOperation {
    public typealias Response = BulkGetResponse<Document>

    /// The database name.
    public var database: String
    /// The documents and revisions to read.
    public var items: [BulkGetItem]
    /// The read options (`revs`, `latest`, `attachments`, ...). Defaults to none.
    public var options: DocumentReadOptions

    private var body: Data?

    public init(database: String, items: [BulkGetItem], options: DocumentReadOptions = .init()) {
        self.database = database
        self.items = items
        self.options = options
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        guard !items.isEmpty else { throw CouchError.validation("_bulk_get needs at least one item.") }
        for item in items {
            try CouchValidation.validateDocumentID(item.id)
            if let rev = item.rev { try CouchValidation.validateRevision(rev) }
        }
        try options.validate()
    }

    public mutating func serialise() throws { body = try JSONBody.encode(["docs": items]) }

    public var endpoint: CouchPath { CouchPath(database, "_bulk_get") }
    public var method: HTTPMethod { .post }
    public var data: Data? { body }
    public var headers: HTTPFields { ["Accept": "application/json"] }
    public var parameters: [URLQueryItem] { options.parameters.queryItems }
}
