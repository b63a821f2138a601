import Foundation

/// The kind of a Mango index.
public struct MangoIndexType: RawRepresentable, Codable, Sendable, Hashable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// A view-backed index on one or more fields.
    public static let json = MangoIndexType(rawValue: "json")
    /// A full-text index (Cloudant, or CouchDB with the search plugin).
    public static let text = MangoIndexType(rawValue: "text")
    /// A Nouveau full-text index (CouchDB 3.4+).
    public static let nouveau = MangoIndexType(rawValue: "nouveau")
    /// The built-in `_all_docs` index (listed, never created).
    public static let special = MangoIndexType(rawValue: "special")

    public var description: String { rawValue }
}

/// A field of a text index and how it is indexed.
public struct TextIndexField: Codable, Sendable, Hashable {
    /// The kind of value indexed.
    public enum FieldType: String, Codable, Sendable, Hashable {
        case string, number, boolean
    }

    /// The field path.
    public var name: String
    /// The kind of value indexed.
    public var type: FieldType

    public init(_ name: String, _ type: FieldType) {
        self.name = name
        self.type = type
    }
}

/// What a Mango index covers.
public enum IndexDefinition: Sendable, Hashable, Encodable {
    /// A json index on `fields`, optionally only over documents matching
    /// `partialFilterSelector`.
    case json(fields: [SortField], partialFilterSelector: Selector? = nil)
    /// A text index. `fields` nil indexes every field. `defaultField` configures the `$default`
    /// field (`{"enabled": true, "analyzer": "standard"}`), `analyzer` the analyzer (a name or an
    /// object); all optional.
    case text(
        fields: [TextIndexField]? = nil, partialFilterSelector: Selector? = nil, defaultField: JSONValue? = nil,
        analyzer: JSONValue? = nil, indexArrayLengths: Bool? = nil)

    /// The index type sent as `type`.
    public var type: MangoIndexType {
        switch self {
        case .json: return .json
        case .text: return .text
        }
    }

    enum CodingKeys: String, CodingKey {
        case fields, analyzer
        case partialFilterSelector = "partial_filter_selector"
        case defaultField = "default_field"
        case indexArrayLengths = "index_array_lengths"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .json(let fields, let partial):
            try container.encode(fields, forKey: .fields)
            try container.encodeIfPresent(partial, forKey: .partialFilterSelector)
        case .text(let fields, let partial, let defaultField, let analyzer, let lengths):
            try container.encodeIfPresent(fields, forKey: .fields)
            try container.encodeIfPresent(partial, forKey: .partialFilterSelector)
            try container.encodeIfPresent(defaultField, forKey: .defaultField)
            try container.encodeIfPresent(analyzer, forKey: .analyzer)
            try container.encodeIfPresent(lengths, forKey: .indexArrayLengths)
        }
    }

    func validate() throws(CouchError) {
        switch self {
        case .json(let fields, let partial):
            guard !fields.isEmpty else { throw CouchError.validation("A json index needs at least one field.") }
            if fields.contains(where: { $0.field.isEmpty }) {
                throw CouchError.validation("Index field names must not be empty.")
            }
            try partial?.validate("partialFilterSelector")
        case .text(let fields, let partial, _, _, _):
            try CouchValidation.notEmpty(fields, "text index fields")
            try partial?.validate("partialFilterSelector")
        }
    }
}

/// What `_index` answers to a create.
public struct CreateIndexResponse: Codable, Sendable, Equatable {
    /// `created`, or `exists` when an identical index was there already.
    public var result: String
    /// The design document holding the index (`_design/…`).
    public var id: String
    /// The index name.
    public var name: String

    public init(result: String, id: String, name: String) {
        self.result = result
        self.id = id
        self.name = name
    }
}

/// `POST /{db}/_index` — creates a Mango index (json or text).
///
/// Creating an index that exists already answers `result: "exists"`, so this is safe to
/// repeat.
public struct CreateIndexOperation: JSONOperation, IdempotentOperation {
    public typealias Response = CreateIndexResponse

    /// The database.
    public var database: String
    /// What to index.
    public var index: IndexDefinition
    /// The design document to put it in (with or without `_design/`). Defaults to nil (a
    /// generated name).
    public var designDocument: String?
    /// The index name. Defaults to nil (a generated name).
    public var name: String?
    /// In a partitioned database, whether the index is partitioned. Defaults to nil (as the
    /// database is).
    public var partitioned: Bool?

    private var body: Data?

    public init(
        database: String, index: IndexDefinition, designDocument: String? = nil, name: String? = nil,
        partitioned: Bool? = nil
    ) {
        self.database = database
        self.index = index
        self.designDocument = designDocument
        self.name = name
        self.partitioned = partitioned
    }

    private struct Body: Encodable {
        var index: IndexDefinition
        var ddoc: String?
        var name: String?
        var type: MangoIndexType
        var partitioned: Bool?
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try index.validate()
        if let designDocument { try CouchValidation.design(designDocument) }
        if let name { try CouchValidation.notEmpty(name, "name") }
    }

    public mutating func serialise() throws {
        body = try JSONBody.encode(
            Body(index: index, ddoc: designDocument, name: name, type: index.type, partitioned: partitioned))
    }

    public var endpoint: CouchPath { CouchPath(database, "_index") }
    public var method: HTTPMethod { .post }
    public var data: Data? { body }
}

/// A Mango index as `_index` lists it (and `_explain` names it).
public struct MangoIndex: Decodable, Sendable, Equatable {
    /// Its design document (`_design/…`); nil for the special `_all_docs` index.
    public var ddoc: String?
    /// Its name.
    public var name: String
    /// Its kind.
    public var type: MangoIndexType
    /// Whether it is partitioned (absent for the special index).
    public var partitioned: Bool?
    /// Its definition as stored (`{"fields": [{"age": "asc"}], "partial_filter_selector": …}`).
    public var def: JSONValue

    /// The indexed field names, in order.
    public var fieldNames: [String] {
        (def["fields"]?.arrayValue ?? []).compactMap { field in
            field.stringValue ?? field.objectValue?.keys.first
        }
    }
}

/// What `GET /{db}/_index` answers.
public struct IndexList: Decodable, Sendable, Equatable {
    /// How many indexes there are.
    public var totalRows: Int
    /// The indexes, the special `_all_docs` one first.
    public var indexes: [MangoIndex]

    enum CodingKeys: String, CodingKey {
        case indexes
        case totalRows = "total_rows"
    }
}

/// `GET /{db}/_index` — the database's Mango indexes.
public struct ListIndexesOperation: JSONOperation {
    public typealias Response = IndexList

    /// The database.
    public var database: String
    /// At most this many indexes. Defaults to nil (all).
    public var limit: Int?
    /// Skip this many first. Defaults to nil.
    public var skip: Int?

    public init(database: String, limit: Int? = nil, skip: Int? = nil) {
        self.database = database
        self.limit = limit
        self.skip = skip
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.nonNegative(limit, "limit")
        try CouchValidation.nonNegative(skip, "skip")
    }

    public var endpoint: CouchPath { CouchPath(database, "_index") }

    public var parameters: [URLQueryItem] {
        var items = QueryParameters()
        items.add("limit", limit)
        items.add("skip", skip)
        return items.queryItems
    }
}

/// `DELETE /{db}/_index/{ddoc}/{type}/{name}` — deletes a Mango index.
public struct DeleteIndexOperation: JSONOperation, IdempotentOperation {
    public typealias Response = OKResponse

    /// The database.
    public var database: String
    /// The index's design document, with or without `_design/`.
    public var designDocument: String
    /// The index name.
    public var name: String
    /// The index type. Defaults to `.json`.
    public var type: MangoIndexType

    public init(database: String, designDocument: String, name: String, type: MangoIndexType = .json) {
        self.database = database
        self.designDocument = designDocument
        self.name = name
        self.type = type
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.design(designDocument)
        try CouchValidation.notEmpty(name, "name")
        try CouchValidation.notEmpty(type.rawValue, "type")
    }

    public var endpoint: CouchPath {
        CouchPath(database, "_index", CouchValidation.designName(designDocument), type.rawValue, name)
    }
    public var method: HTTPMethod { .delete }
}
