import Foundation

/// The key-range options shared by `_all_docs`, `_design_docs`, `_local_docs` and views.
///
/// Keys are JSON (``JSONValue`` literals: `"a"`, `["2024", 1]`, `nil`; or `try JSONValue(encoding:)`
/// for a typed key) and are sent JSON-encoded (`start_key=%22a%22`). With ``keys`` set, the
/// operation `POST`s `{"keys": [...]}` and the rows follow the order of the keys. Every option is
/// nil by default, which leaves the server's default in place.
public struct KeyRangeOptions: Sendable, Hashable {
    /// Only rows with exactly this key (`key`). Defaults to nil.
    public var key: JSONValue?
    /// Only rows with these keys, in this order (`keys`, sent in a `POST` body). Defaults to nil.
    public var keys: [JSONValue]?
    /// Rows from this key on (`start_key`). Defaults to nil.
    public var startKey: JSONValue?
    /// Among rows with `startKey`, start at this document id (`start_key_doc_id`). Defaults to nil.
    public var startKeyDocID: String?
    /// Rows up to this key (`end_key`). Defaults to nil.
    public var endKey: JSONValue?
    /// Among rows with `endKey`, stop at this document id (`end_key_doc_id`). Defaults to nil.
    public var endKeyDocID: String?
    /// Whether `endKey` itself is included (`inclusive_end`). Defaults to nil (the server's: true).
    public var inclusiveEnd: Bool?
    /// Rows in reverse order (`descending`); then `startKey` must be the larger key. Defaults to nil.
    public var descending: Bool?
    /// At most this many rows (`limit`). Defaults to nil (all).
    public var limit: Int?
    /// Skip this many rows first (`skip`). Defaults to nil (0). Prefer `startKey` paging for big skips.
    public var skip: Int?
    /// Include each row's document as `doc` (`include_docs`). Defaults to nil (false).
    public var includeDocs: Bool?
    /// With `includeDocs`, add `_conflicts` to each document (`conflicts`). Defaults to nil.
    public var conflicts: Bool?
    /// With `includeDocs`, inline attachment bodies as base64 (`attachments`). Defaults to nil.
    public var attachments: Bool?
    /// With `includeDocs`, add encoding details to attachment stubs (`att_encoding_info`). Defaults to nil.
    public var attachmentEncodingInfo: Bool?
    /// Add the database's `update_seq` to the response (`update_seq`). Defaults to nil.
    public var updateSeq: Bool?

    public init(
        key: JSONValue? = nil, keys: [JSONValue]? = nil, startKey: JSONValue? = nil, startKeyDocID: String? = nil,
        endKey: JSONValue? = nil, endKeyDocID: String? = nil, inclusiveEnd: Bool? = nil, descending: Bool? = nil,
        limit: Int? = nil, skip: Int? = nil, includeDocs: Bool? = nil, conflicts: Bool? = nil,
        attachments: Bool? = nil, attachmentEncodingInfo: Bool? = nil, updateSeq: Bool? = nil
    ) {
        self.key = key
        self.keys = keys
        self.startKey = startKey
        self.startKeyDocID = startKeyDocID
        self.endKey = endKey
        self.endKeyDocID = endKeyDocID
        self.inclusiveEnd = inclusiveEnd
        self.descending = descending
        self.limit = limit
        self.skip = skip
        self.includeDocs = includeDocs
        self.conflicts = conflicts
        self.attachments = attachments
        self.attachmentEncodingInfo = attachmentEncodingInfo
        self.updateSeq = updateSeq
    }

    func validate() throws(CouchError) {
        try CouchValidation.nonNegative(limit, "limit")
        try CouchValidation.nonNegative(skip, "skip")
        if let keys {
            guard !keys.isEmpty else { throw CouchError.validation("keys must not be empty (or be nil).") }
            if key != nil || startKey != nil || endKey != nil {
                throw CouchError.validation("keys cannot be combined with key, startKey or endKey.")
            }
        }
        if key != nil, startKey != nil || endKey != nil {
            throw CouchError.validation("key selects one key; do not combine it with startKey or endKey.")
        }
        if includeDocs != true {
            for (name, value) in [("conflicts", conflicts), ("attachments", attachments)]
            where value == true {
                throw CouchError.validation("\(name) only applies to included documents; set includeDocs too.")
            }
            if attachmentEncodingInfo == true {
                throw CouchError.validation(
                    "attachmentEncodingInfo only applies to included documents; set includeDocs too.")
            }
        }
    }

    /// The options as fields; `keys` only when asked (it goes in a `POST` body, not the query).
    func parameters(includingKeys: Bool) -> QueryParameters {
        var query = QueryParameters()
        query.addJSON("key", key)
        if includingKeys { query.addJSON("keys", keys.map(JSONValue.array)) }
        query.addJSON("start_key", startKey)
        query.add("start_key_doc_id", startKeyDocID)
        query.addJSON("end_key", endKey)
        query.add("end_key_doc_id", endKeyDocID)
        query.add("inclusive_end", inclusiveEnd)
        query.add("descending", descending)
        query.add("skip", skip)
        query.add("limit", limit)
        query.add("include_docs", includeDocs)
        query.add("conflicts", conflicts)
        query.add("attachments", attachments)
        query.add("att_encoding_info", attachmentEncodingInfo)
        query.add("update_seq", updateSeq)
        return query
    }
}

/// When a view query brings the index up to date (`update`).
public enum ViewUpdate: String, Sendable, Hashable {
    /// Update the index before answering (`update=true`, the default).
    case beforeResponse = "true"
    /// Answer from the index as it is (`update=false`): fast, maybe stale.
    case never = "false"
    /// Answer from the index as it is, then update it (`update=lazy`).
    case afterResponse = "lazy"
}

/// Every option of a view query: the shared ``KeyRangeOptions`` plus the view-only ones.
///
/// The key-range options can be read and set directly (`options.limit = 10`).
@dynamicMemberLookup
public struct ViewQueryOptions: Sendable, Hashable {
    /// The key-range options (`key`, `keys`, `start_key`, `limit`, `include_docs`, ...).
    public var range: KeyRangeOptions
    /// Group reduce results by key (`group`). Defaults to nil (false).
    public var group: Bool?
    /// Group array keys by their first N elements (`group_level`). Defaults to nil.
    public var groupLevel: Int?
    /// Whether to run the reduce function (`reduce`). Defaults to nil (true when the view has one).
    public var reduce: Bool?
    /// When to bring the index up to date (`update`). Defaults to nil (`.beforeResponse`).
    public var update: ViewUpdate?
    /// Answer from a stable set of shard copies (`stable`). Defaults to nil (false).
    public var stable: Bool?
    /// Whether rows are sorted (`sorted`); false can be faster with `keys`. Defaults to nil (true).
    public var sorted: Bool?

    public init(
        key: JSONValue? = nil, keys: [JSONValue]? = nil, startKey: JSONValue? = nil, startKeyDocID: String? = nil,
        endKey: JSONValue? = nil, endKeyDocID: String? = nil, inclusiveEnd: Bool? = nil, descending: Bool? = nil,
        limit: Int? = nil, skip: Int? = nil, group: Bool? = nil, groupLevel: Int? = nil, reduce: Bool? = nil,
        includeDocs: Bool? = nil, conflicts: Bool? = nil, attachments: Bool? = nil,
        attachmentEncodingInfo: Bool? = nil, update: ViewUpdate? = nil, stable: Bool? = nil, sorted: Bool? = nil,
        updateSeq: Bool? = nil
    ) {
        range = KeyRangeOptions(
            key: key, keys: keys, startKey: startKey, startKeyDocID: startKeyDocID, endKey: endKey,
            endKeyDocID: endKeyDocID, inclusiveEnd: inclusiveEnd, descending: descending, limit: limit, skip: skip,
            includeDocs: includeDocs, conflicts: conflicts, attachments: attachments,
            attachmentEncodingInfo: attachmentEncodingInfo, updateSeq: updateSeq)
        self.group = group
        self.groupLevel = groupLevel
        self.reduce = reduce
        self.update = update
        self.stable = stable
        self.sorted = sorted
    }

    /// Reads and writes the key-range options directly.
    public subscript<T>(dynamicMember keyPath: WritableKeyPath<KeyRangeOptions, T>) -> T {
        get { range[keyPath: keyPath] }
        set { range[keyPath: keyPath] = newValue }
    }

    func validate() throws(CouchError) {
        try range.validate()
        try CouchValidation.nonNegative(groupLevel, "groupLevel")
        if reduce == false, group == true || groupLevel != nil {
            throw CouchError.validation("group and groupLevel need the reduce step; do not set reduce to false.")
        }
        if group == false, groupLevel != nil {
            throw CouchError.validation("groupLevel groups results; do not set group to false with it.")
        }
        if reduce == true, range.includeDocs == true {
            throw CouchError.validation("includeDocs is invalid for reduced results; set reduce to false.")
        }
    }

    func parameters(includingKeys: Bool) -> QueryParameters {
        var query = range.parameters(includingKeys: includingKeys)
        query.add("group", group)
        query.add("group_level", groupLevel)
        query.add("reduce", reduce)
        query.add("update", update?.rawValue)
        query.add("stable", stable)
        query.add("sorted", sorted)
        return query
    }
}

/// How the row-query operations send their options: `GET` with a query string, or `POST` with
/// `{"keys": [...]}` when keys are given (the other options stay in the query string).
enum RowQueryRequest {
    static func body(keys: [JSONValue]?) throws -> Data? {
        guard let keys else { return nil }
        return try JSONBody.encode(["keys": JSONValue.array(keys)])
    }

    static func body(queries: [QueryParameters]) throws -> Data {
        try JSONBody.encode(["queries": JSONValue.array(queries.map(\.jsonObject))])
    }

    static func validate(queries count: Int) throws(CouchError) {
        guard count > 0 else { throw CouchError.validation("queries must list at least one query.") }
    }
}
