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

    public func validate() throws(CouchError) {
        if let limit, limit < 0 { throw CouchError.validation("limit must not be negative (got \(limit)).") }
        if let skip, skip < 0 { throw CouchError.validation("skip must not be negative (got \(skip)).") }
    }

    public var endpoint: CouchPath { CouchPath("_all_dbs") }

    public var parameters: [URLQueryItem] {
        var items: [URLQueryItem] = []
        if descending { items.append(URLQueryItem(name: "descending", value: "true")) }
        if let limit { items.append(URLQueryItem(name: "limit", value: String(limit))) }
        if let skip { items.append(URLQueryItem(name: "skip", value: String(skip))) }
        if let startKey { items.append(URLQueryItem(name: "start_key", value: JSONText.string(startKey))) }
        if let endKey { items.append(URLQueryItem(name: "end_key", value: JSONText.string(endKey))) }
        return items
    }
}
