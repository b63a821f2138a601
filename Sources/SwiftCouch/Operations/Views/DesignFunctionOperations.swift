import Foundation

/// `GET /{db}/_design/{ddoc}/_show/{func}[/{docid}]` — runs a show function and returns what it
/// renders (any content type). Show functions are deprecated in CouchDB 3 but still served.
public struct ShowFunctionOperation: DataOperation {
    /// The database name.
    public var database: String
    /// The design document's name, without `_design/`.
    public var design: String
    /// The show function's name.
    public var function: String
    /// The document to render; nil to call the function with `null`. Defaults to nil.
    public var documentID: String?
    /// Parameters for the function, as it reads them from `req.query` (free-form by nature).
    /// Defaults to none.
    public var query: [URLQueryItem]
    /// The `Accept` header, which the function may use to pick a format. Defaults to `*/*`.
    public var accept: String

    public init(
        database: String, design: String, function: String, documentID: String? = nil, query: [URLQueryItem] = [],
        accept: String = "*/*"
    ) {
        self.database = database
        self.design = design
        self.function = function
        self.documentID = documentID
        self.query = query
        self.accept = accept
    }

    public func validate() throws(CouchError) {
        try ViewPath.validate(database: database, design: design, view: function, partition: nil)
        if let documentID { try CouchValidation.validateDocumentID(documentID) }
    }

    public var endpoint: CouchPath {
        let path = ViewPath.path(database, design, "_show", function, partition: nil)
        return CouchPath(segments: path.segments + (documentID.map(CouchPath.documentSegments) ?? []))
    }

    public var parameters: [URLQueryItem] { query }
    public var headers: HTTPFields { ["Accept": accept] }
}

/// `GET /{db}/_design/{ddoc}/_list/{func}/{view}` — runs a list function over a view's rows and
/// returns what it renders. The view may live in another design document (`viewDesign`). With
/// `keys` the query is sent as `POST`. Deprecated in CouchDB 3 but still served.
public struct ListFunctionOperation: DataOperation, IdempotentOperation {
    /// The database name.
    public var database: String
    /// The design document holding the list function, without `_design/`.
    public var design: String
    /// The list function's name.
    public var function: String
    /// The view whose rows are listed.
    public var view: String
    /// The design document holding the view, when not `design`. Defaults to nil.
    public var viewDesign: String?
    /// The view query options. Defaults to none.
    public var options: ViewQueryOptions
    /// Extra parameters for the function (`req.query`). Defaults to none.
    public var query: [URLQueryItem]
    /// The `Accept` header. Defaults to `*/*`.
    public var accept: String

    private var body: Data?

    public init(
        database: String, design: String, function: String, view: String, viewDesign: String? = nil,
        options: ViewQueryOptions = .init(), query: [URLQueryItem] = [], accept: String = "*/*"
    ) {
        self.database = database
        self.design = design
        self.function = function
        self.view = view
        self.viewDesign = viewDesign
        self.options = options
        self.query = query
        self.accept = accept
    }

    public func validate() throws(CouchError) {
        try ViewPath.validate(database: database, design: design, view: view, partition: nil)
        try CouchValidation.notEmpty(function, "List function name")
        if let viewDesign { try CouchValidation.design(viewDesign) }
        try options.validate()
    }

    public mutating func serialise() throws { body = try RowQueryRequest.body(keys: options.keys) }

    public var endpoint: CouchPath {
        var path = ViewPath.path(database, design, "_list", function, partition: nil)
        if let viewDesign { path.segments.append(CouchValidation.designName(viewDesign)) }
        path.segments.append(view)
        return path
    }

    public var method: HTTPMethod { body == nil ? .get : .post }
    public var data: Data? { body }
    public var parameters: [URLQueryItem] { options.parameters(includingKeys: false).queryItems + query }
    public var headers: HTTPFields { ["Accept": accept] }
}

/// `POST /{db}/_design/{ddoc}/_update/{func}` or `PUT /{db}/_design/{ddoc}/_update/{func}/{docid}`
/// — runs an update handler, which may write a document and renders a response.
///
/// Without a document id the handler gets `null` and may create a document (`POST`); with one it
/// gets that document (`PUT`). The new revision and id, when the handler wrote, are in the
/// response headers `X-Couch-Update-NewRev` and `X-Couch-Id` (see ``CouchResponse/headers``).
public struct UpdateHandlerOperation: DataOperation {
    /// The database name.
    public var database: String
    /// The design document's name, without `_design/`.
    public var design: String
    /// The update function's name.
    public var function: String
    /// The document to update; nil to call the handler with `null`. Defaults to nil.
    public var documentID: String?
    /// The request body the handler reads (`req.body`). Defaults to nil.
    public var body: Data?
    /// The body's content type. Defaults to `application/json`.
    public var bodyContentType: String
    /// Parameters for the handler (`req.query`). Defaults to none.
    public var query: [URLQueryItem]

    public init(
        database: String, design: String, function: String, documentID: String? = nil, body: Data? = nil,
        contentType: String = "application/json", query: [URLQueryItem] = []
    ) {
        self.database = database
        self.design = design
        self.function = function
        self.documentID = documentID
        self.body = body
        self.bodyContentType = contentType
        self.query = query
    }

    public func validate() throws(CouchError) {
        try ViewPath.validate(database: database, design: design, view: function, partition: nil)
        if let documentID { try CouchValidation.validateDocumentID(documentID) }
    }

    public var endpoint: CouchPath {
        let path = ViewPath.path(database, design, "_update", function, partition: nil)
        return CouchPath(segments: path.segments + (documentID.map(CouchPath.documentSegments) ?? []))
    }

    public var method: HTTPMethod { documentID == nil ? .post : .put }
    public var data: Data? { body }
    public var contentType: String? { body == nil ? nil : bodyContentType }
    public var parameters: [URLQueryItem] { query }
    public var headers: HTTPFields { ["Accept": "*/*"] }
}
