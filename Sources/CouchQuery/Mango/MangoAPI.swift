/// An error a Mango request ends with: the HTTP status and CouchDB's `error` and `reason` strings.
public struct MangoError: Error, Sendable, Equatable {
    /// HTTP status code (400, 404, 500 …).
    public var status: Int
    /// CouchDB's `error` string, e.g. `"invalid_operator"`.
    public var error: String
    /// CouchDB's `reason` string.
    public var reason: String

    /// Creates an error.
    public init(status: Int, error: String, reason: String) {
        self.status = status
        self.error = error
        self.reason = reason
    }
}

/// A live document as the Mango engine sees it.
public struct MangoDocument: Sendable {
    /// The document id.
    public var id: String
    /// The winning revision's body, including `_id` and `_rev`.
    public var body: JSON
    /// The document's conflicting revisions (for `"conflicts": true`).
    public var conflicts: [String]

    /// Creates a document.
    public init(id: String, body: JSON, conflicts: [String]) {
        self.id = id
        self.body = body
        self.conflicts = conflicts
    }
}

/// The result of `POST /{db}/_index`.
public struct MangoIndexCreation: Sendable {
    /// The full design document to save (with `_id`, and `_rev` when it updates an existing one);
    /// `nil` when the index already exists.
    public var designDocumentToSave: JSON?
    /// The response body (`{"result":"created","id":…,"name":…}`).
    public var response: JSON

    /// Creates a result.
    public init(designDocumentToSave: JSON?, response: JSON) {
        self.designDocumentToSave = designDocumentToSave
        self.response = response
    }
}

/// The result of `DELETE /{db}/_index/{ddoc}/json/{name}`.
public struct MangoIndexDeletion: Sendable {
    /// The id of the design document that held the index.
    public var designDocumentID: String
    /// The design document without the index (with its `_id` and `_rev`); `nil` means delete it.
    public var updated: JSON?
    /// The response body (`{"ok":true}`).
    public var response: JSON

    /// Creates a result.
    public init(designDocumentID: String, updated: JSON?, response: JSON) {
        self.designDocumentID = designDocumentID
        self.updated = updated
        self.response = response
    }
}

/// A parsed and normalised Mango selector.
public struct MangoSelector: Sendable {
    let node: SelectorNode

    /// Parses and normalises `selector`; throws CouchDB's 400 errors for invalid operators.
    public init(_ selector: JSON) throws(MangoError) {
        self.node = try SelectorNode.parse(selector)
    }

    /// Whether `document` matches the selector.
    public func matches(_ document: JSON) -> Bool {
        node.matches(document)
    }

    /// The normalised selector as CouchDB prints it in `_explain`.
    public var normalized: JSON { node.json }
}

/// CouchDB's Mango query engine: JSON indexes, `_find`, `_explain` and selector matching, with
/// no HTTP or storage of its own (the caller passes design documents and documents in).
public enum Mango {
    /// `POST /{db}/_index`
    public static func createIndex(requestBody: JSON, designDocuments: [JSON], partitionedDatabase: Bool)
        throws(MangoError) -> MangoIndexCreation
    {
        try MangoIndexes.create(
            requestBody: requestBody, designDocuments: designDocuments,
            partitionedDatabase: partitionedDatabase)
    }

    /// `GET /{db}/_index`: the whole response body `{"total_rows":N,"indexes":[...]}`, including the
    /// special `_all_docs` index.
    public static func listIndexes(designDocuments: [JSON]) -> JSON {
        MangoIndexes.list(designDocuments: designDocuments, partitionedDatabase: false)
    }

    /// `GET /{db}/_index` for a database that may be partitioned (indexes in design documents
    /// without `options.partitioned` inherit the database's setting).
    public static func listIndexes(designDocuments: [JSON], partitionedDatabase: Bool) -> JSON {
        MangoIndexes.list(designDocuments: designDocuments, partitionedDatabase: partitionedDatabase)
    }

    /// `DELETE /{db}/_index/{ddoc}/json/{name}`
    public static func deleteIndex(designDocuments: [JSON], designDocumentID: String, type: String, name: String)
        throws(MangoError) -> MangoIndexDeletion
    {
        try MangoIndexes.delete(
            designDocuments: designDocuments, designDocumentID: designDocumentID,
            type: type, name: name, partitionedDatabase: false)
    }

    /// `POST /{db}/_find`. `documents` are every live document of the database (or partition),
    /// ordered by id, design documents included (the engine filters them out).
    public static func find(
        requestBody: JSON, databaseName: String, designDocuments: [JSON],
        documents: [MangoDocument], partition: String?
    ) throws(MangoError) -> JSON {
        try MangoFind.find(
            requestBody: requestBody, databaseName: databaseName, designDocuments: designDocuments,
            documents: documents, partition: partition, partitionedDatabase: nil)
    }

    /// `POST /{db}/_find` on a database whose partitioned flag is known (needed for the
    /// partitioned default of indexes and the wording of `no_usable_index` errors).
    public static func find(
        requestBody: JSON, databaseName: String, designDocuments: [JSON],
        documents: [MangoDocument], partition: String?, partitionedDatabase: Bool
    )
        throws(MangoError) -> JSON
    {
        try MangoFind.find(
            requestBody: requestBody, databaseName: databaseName, designDocuments: designDocuments,
            documents: documents, partition: partition, partitionedDatabase: partitionedDatabase)
    }

    /// `POST /{db}/_explain`
    public static func explain(requestBody: JSON, databaseName: String, designDocuments: [JSON], partition: String?)
        throws(MangoError) -> JSON
    {
        try MangoFind.explain(
            requestBody: requestBody, databaseName: databaseName,
            designDocuments: designDocuments, partition: partition, partitionedDatabase: nil)
    }

    /// `POST /{db}/_explain` on a database whose partitioned flag is known.
    public static func explain(
        requestBody: JSON, databaseName: String, designDocuments: [JSON], partition: String?,
        partitionedDatabase: Bool
    ) throws(MangoError) -> JSON {
        try MangoFind.explain(
            requestBody: requestBody, databaseName: databaseName,
            designDocuments: designDocuments, partition: partition,
            partitionedDatabase: partitionedDatabase)
    }
}
