import Foundation

/// `GET /_all_dbs` — the names of all databases, in order, optionally one page of them.
///
/// Server admins only on CouchDB 3 (others get 401 "You are not a server admin.").
public struct ListDatabasesOperation: JSONOperation {
    public typealias Response = [String]

    /// Return names in reverse order. Defaults to false.
    public var descending: Bool = false
    /// At most this many names. Defaults to nil (all).
    public var limit: Int?
    /// Skip this many names first. Defaults to nil.
    public var skip: Int?
    /// Start at this name (inclusive). Defaults to nil.
    public var startKey: String?
    /// Stop at this name (inclusive). Defaults to nil.
    public var endKey: String?

    public init(
        descending: Bool = false, limit: Int? = nil, skip: Int? = nil, startKey: String? = nil, endKey: String? = nil
    ) {
        self.descending = descending
        self.limit = limit
        self.skip = skip
        self.startKey = startKey
        self.endKey = endKey
    }

    public func validate() throws(CouchError) { try range.validate() }

    public var endpoint: CouchPath { CouchPath("_all_dbs") }

    public var parameters: [URLQueryItem] { range.parameters.queryItems }

    private var range: DatabaseNameRange {
        DatabaseNameRange(descending: descending, limit: limit, skip: skip, startKey: startKey, endKey: endKey)
    }
}

/// The paging options `_all_dbs` and `_dbs_info` share.
struct DatabaseNameRange {
    var descending: Bool
    var limit: Int?
    var skip: Int?
    var startKey: String?
    var endKey: String?

    var isDefault: Bool { !descending && limit == nil && skip == nil && startKey == nil && endKey == nil }

    func validate() throws(CouchError) {
        try CouchValidation.nonNegative(limit, "limit")
        try CouchValidation.nonNegative(skip, "skip")
    }

    var parameters: QueryParameters {
        var items = QueryParameters()
        items.flag("descending", descending)
        items.add("limit", limit)
        items.add("skip", skip)
        items.addJSON("start_key", startKey.map(JSONValue.string))
        items.addJSON("end_key", endKey.map(JSONValue.string))
        return items
    }
}
