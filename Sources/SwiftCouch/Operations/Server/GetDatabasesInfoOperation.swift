import Foundation

/// One row of `_dbs_info`: a database name with its info, or the error for a name that does not
/// exist.
public struct DatabaseInfoRow: Decodable, Sendable, Equatable {
    /// The database name asked for.
    public var key: String
    /// Its info; nil when ``error`` is set.
    public var info: DatabaseInfo?
    /// Why there is no info (`not_found`), when there is none.
    public var error: String?
}

/// `GET /_dbs_info` (a range of names) or `POST /_dbs_info` (a list of names) — the info of many
/// databases in one request.
///
/// With ``keys`` set the request is a `POST` with `{"keys": [...]}` and the range options are not
/// allowed; a name that does not exist gives a row with `error: "not_found"`. Server admins
/// only on CouchDB 3.
public struct GetDatabasesInfoOperation: JSONOperation, IdempotentOperation {
    public typealias Response = [DatabaseInfoRow]

    /// The databases to describe, in this order (sent as a `POST`). Defaults to nil: a range of
    /// all databases, chosen by the options below.
    public var keys: [String]?
    /// Return rows in reverse name order. Defaults to false.
    public var descending: Bool
    /// At most this many rows. Defaults to nil (all).
    public var limit: Int?
    /// Skip this many rows first. Defaults to nil.
    public var skip: Int?
    /// Start at this name (inclusive). Defaults to nil.
    public var startKey: String?
    /// Stop at this name (inclusive). Defaults to nil.
    public var endKey: String?

    private var body: Data?

    /// Info about every database in a name range.
    public init(
        descending: Bool = false, limit: Int? = nil, skip: Int? = nil, startKey: String? = nil, endKey: String? = nil
    ) {
        self.descending = descending
        self.limit = limit
        self.skip = skip
        self.startKey = startKey
        self.endKey = endKey
    }

    /// Info about the named databases.
    public init(keys: [String]) {
        self.init()
        self.keys = keys
    }

    public func validate() throws(CouchError) {
        try range.validate()
        guard let keys else { return }
        try CouchValidation.notEmpty(keys, "keys")
        guard range.isDefault else {
            throw CouchError.validation(
                "keys cannot be combined with descending, limit, skip, startKey or endKey in _dbs_info.")
        }
    }

    public mutating func serialise() throws {
        body = try keys.map { try JSONBody.encode(["keys": $0]) }
    }

    public var endpoint: CouchPath { CouchPath("_dbs_info") }
    public var method: HTTPMethod { keys == nil ? .get : .post }
    public var data: Data? { body }

    public var parameters: [URLQueryItem] { keys == nil ? range.parameters.queryItems : [] }

    private var range: DatabaseNameRange {
        DatabaseNameRange(descending: descending, limit: limit, skip: skip, startKey: startKey, endKey: endKey)
    }
}
