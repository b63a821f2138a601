import Foundation

/// Which revisions `open_revs` asks for.
public enum OpenRevisions: Sendable, Hashable {
    /// Every leaf revision: the winner and all conflicts, deleted leaves included (`open_revs=all`).
    case all
    /// These revisions (`open_revs=["1-a","2-b"]`); each one not found is answered `missing`.
    case revisions([String])

    /// Checks an `open_revs` read: the database, the id, the revisions and the options.
    func validate(database: String, id: String, options: DocumentReadOptions) throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(id)
        try options.validate()
        guard case .revisions(let revs) = self else { return }
        guard !revs.isEmpty else { throw CouchError.validation("open_revs needs at least one revision (or .all).") }
        for rev in revs { try CouchValidation.validateRevision(rev) }
    }

    /// `open_revs` (`all` as it is, a list as JSON) followed by the read options.
    func parameters(_ options: DocumentReadOptions) -> [URLQueryItem] {
        [queryItem] + options.parameters.queryItems
    }

    private var queryItem: URLQueryItem {
        switch self {
        case .all:
            return URLQueryItem(name: "open_revs", value: "all")
        case .revisions(let revs):
            return URLQueryItem(name: "open_revs", value: QueryParameters.jsonText(.array(revs.map(JSONValue.string))))
        }
    }
}

/// `GET /{db}/{docid}?open_revs=…` with `Accept: application/json` — several revisions of a
/// document at once, typically every conflicting leaf (`.all`).
///
/// Each entry is `.found(document)` or, for a requested revision that does not exist,
/// `.missing(rev:)`. The order of `.all` is not defined. To receive attachment bodies as binary
/// MIME parts instead of base64, use ``GetOpenRevisionsMultipartOperation``.
public struct GetOpenRevisionsOperation<Document: Decodable & Sendable>: JSONOperation {
    public typealias Response = [DocumentRevisionResult<Document>]

    /// The database name.
    public var database: String
    /// The document id.
    public var id: String
    /// The revisions to read. Defaults to `.all`.
    public var revisions: OpenRevisions
    /// The read options (`revs`, `latest`, `attachments`, `atts_since`, ...). Defaults to none.
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
    public var headers: HTTPFields { ["Accept": "application/json"] }
    public var parameters: [URLQueryItem] { revisions.parameters(options) }
}
