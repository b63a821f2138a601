import Foundation

extension CouchDBClient {
    /// A handle on one database, with the common calls by name.
    ///
    /// ```swift
    /// let albums = client.database("albums")
    /// let blue = try await albums.get("blue", as: Album.self)
    /// ```
    public func database(_ name: String) -> Database { Database(client: self, name: name) }
}

/// The common calls on one database, by name: a thin layer over the operations, which it builds
/// and runs through the client's one pipeline (validation first, so a bad name or id fails before
/// anything is sent). For everything else, run an operation: `client.execute(SomeOperation(...))`.
///
/// A value: cheap to make, `Sendable`, holding the client and the database's name.
public struct Database: Sendable {
    /// The client the calls go through.
    public let client: CouchDBClient
    /// The database's name.
    public let name: String

    /// Makes a handle; ``CouchDBClient/database(_:)`` reads better.
    public init(client: CouchDBClient, name: String) {
        self.client = client
        self.name = name
    }

    // MARK: The database

    /// Creates the database (`PUT /{db}`); `partitioned` for a partitioned database.
    @discardableResult
    public func create(partitioned: Bool? = nil, options: CallOptions = CallOptions()) async throws(CouchError)
        -> CreateDatabaseOperation.Response
    {
        try await client.value(CreateDatabaseOperation(name: name, partitioned: partitioned), options: options)
    }

    /// Deletes the database and every document in it (`DELETE /{db}`).
    @discardableResult
    public func delete(options: CallOptions = CallOptions()) async throws(CouchError)
        -> DeleteDatabaseOperation.Response
    {
        try await client.value(DeleteDatabaseOperation(name: name), options: options)
    }

    /// The database's information (`GET /{db}`): document counts, sizes, update sequence.
    public func info(options: CallOptions = CallOptions()) async throws(CouchError) -> GetDatabaseInfoOperation.Response
    {
        try await client.value(GetDatabaseInfoOperation(name: name), options: options)
    }

    // MARK: Documents

    /// Reads a document (`GET /{db}/{id}`) as `type`, optionally at `revision`.
    public func get<Document: Decodable & Sendable>(
        _ id: String, as type: Document.Type = Document.self, revision: String? = nil,
        options: CallOptions = CallOptions()
    ) async throws(CouchError) -> Document {
        try await client.value(
            GetDocumentOperation<Document>(database: name, id: id, revision: revision), options: options)
    }

    /// Creates or updates a document (`PUT /{db}/{id}`); give the current `revision` to update.
    @discardableResult
    public func put<Document: Encodable & Sendable>(
        _ document: Document, id: String, revision: String? = nil, options: CallOptions = CallOptions()
    ) async throws(CouchError) -> PutDocumentOperation<Document>.Response {
        try await client.value(
            PutDocumentOperation(database: name, id: id, document: document, revision: revision), options: options)
    }

    /// Creates a document with an id the server chooses (`POST /{db}`). A `POST` is never resent
    /// after its answer was lost: the error then says the outcome is unknown.
    @discardableResult
    public func create<Document: Encodable & Sendable>(_ document: Document, options: CallOptions = CallOptions())
        async throws(CouchError) -> CreateDocumentOperation<Document>.Response
    {
        try await client.value(CreateDocumentOperation(database: name, document: document), options: options)
    }

    /// Deletes revision `revision` of a document (`DELETE /{db}/{id}?rev=`).
    @discardableResult
    public func delete(_ id: String, revision: String, options: CallOptions = CallOptions()) async throws(CouchError)
        -> DeleteDocumentOperation.Response
    {
        try await client.value(DeleteDocumentOperation(database: name, id: id, revision: revision), options: options)
    }

    /// Writes many documents in one request (`POST /{db}/_bulk_docs`): one result per document, in
    /// order (a conflict is a row's error, not a thrown error). For any number of documents with
    /// batching and resends, use a ``BulkWriter``.
    public func bulk<Document: Encodable & Sendable>(_ documents: [Document], options: CallOptions = CallOptions())
        async throws(CouchError) -> BulkDocsOperation<Document>.Response
    {
        try await client.value(BulkDocsOperation(database: name, documents: documents), options: options)
    }

    // MARK: Queries

    /// `_all_docs` (`GET /{db}/_all_docs`): every document's id and revision, in id order, with the
    /// documents themselves when `range.includeDocs` is set. For large databases, stream with
    /// ``allDocsRows(as:range:options:)`` or page with `client.pages`.
    public func allDocs<Document: Decodable & Sendable>(
        as type: Document.Type = JSONValue.self, range: KeyRangeOptions = KeyRangeOptions(),
        options: CallOptions = CallOptions()
    ) async throws(CouchError) -> AllDocsOperation<Document>.Response {
        try await client.value(AllDocsOperation<Document>(database: name, options: range), options: options)
    }

    /// `_all_docs` streamed row by row, with back-pressure (see ``CouchDBClient/rows(_:bufferSize:options:)``).
    public func allDocsRows<Document: Decodable & Sendable>(
        as type: Document.Type = JSONValue.self, range: KeyRangeOptions = KeyRangeOptions(),
        options: CallOptions = CallOptions()
    ) -> CouchRowStream<AllDocsOperation<Document>.Row> {
        client.rows(AllDocsOperation<Document>(database: name, options: range), options: options)
    }

    /// A Mango query (`POST /{db}/_find`).
    public func find<Document: Decodable & Sendable>(
        _ selector: Selector, as type: Document.Type = JSONValue.self, options: CallOptions = CallOptions()
    ) async throws(CouchError) -> FindOperation<Document>.Response {
        try await client.value(FindOperation<Document>(database: name, selector: selector), options: options)
    }

    /// A Mango query with fields, sort, limit, bookmark and index choice (`POST /{db}/_find`).
    public func find<Document: Decodable & Sendable>(
        _ query: MangoQuery, as type: Document.Type = JSONValue.self, options: CallOptions = CallOptions()
    ) async throws(CouchError) -> FindOperation<Document>.Response {
        try await client.value(FindOperation<Document>(database: name, query: query), options: options)
    }

    /// A view (`GET /{db}/_design/{design}/_view/{view}`), its keys and values decoded as `Key` and
    /// `Value` (use ``JSONValue`` for free-form ones).
    public func view<Key: Decodable & Sendable, Value: Decodable & Sendable>(
        design: String, view: String, keys: Key.Type = JSONValue.self, values: Value.Type = JSONValue.self,
        query: ViewQueryOptions = ViewQueryOptions(), options: CallOptions = CallOptions()
    ) async throws(CouchError) -> QueryViewOperation<Key, Value, JSONValue>.Response {
        try await client.value(
            QueryViewOperation<Key, Value, JSONValue>(database: name, design: design, view: view, options: query),
            options: options)
    }

    /// One batch of the changes feed (`GET /{db}/_changes`) since `since` (from the start when nil).
    /// To follow the feed, resuming after errors, use a ``ChangesFollower``.
    public func changes<Document: Decodable & Sendable>(
        since: CouchSequence? = nil, limit: Int? = nil, includeDocs: Bool = false,
        as type: Document.Type = JSONValue.self, options: CallOptions = CallOptions()
    ) async throws(CouchError) -> ChangesOperation<Document>.Response {
        try await client.value(
            ChangesOperation<Document>(database: name, since: since, limit: limit, includeDocs: includeDocs),
            options: options)
    }

    // MARK: Attachments

    /// An attachment's bytes and content type (`GET /{db}/{id}/{name}`). For large attachments,
    /// download to a file with `client.download`.
    public func attachment(_ name: String, of documentID: String, options: CallOptions = CallOptions())
        async throws(CouchError) -> GetAttachmentOperation.Response
    {
        try await client.value(
            GetAttachmentOperation(database: self.name, documentID: documentID, name: name), options: options)
    }

    /// Adds or replaces an attachment (`PUT /{db}/{id}/{name}?rev=`); without `revision` the
    /// document is created with it.
    @discardableResult
    public func putAttachment(
        _ name: String, of documentID: String, data: Data, contentType: String, revision: String? = nil,
        options: CallOptions = CallOptions()
    ) async throws(CouchError) -> PutAttachmentOperation.Response {
        try await client.value(
            PutAttachmentOperation(
                database: self.name, documentID: documentID, name: name, data: data, contentType: contentType,
                revision: revision), options: options)
    }

    /// Removes an attachment (`DELETE /{db}/{id}/{name}?rev=`).
    @discardableResult
    public func deleteAttachment(
        _ name: String, of documentID: String, revision: String, options: CallOptions = CallOptions()
    ) async throws(CouchError) -> DeleteAttachmentOperation.Response {
        try await client.value(
            DeleteAttachmentOperation(database: self.name, documentID: documentID, name: name, revision: revision),
            options: options)
    }
}
