import Foundation

/// A design document: views, Mango indexes, filters, validation and the show/list/update
/// functions of a database, as a typed value.
///
/// Read it with `GetDocumentOperation<DesignDocument>(database:design:)` and write it with
/// `PutDocumentOperation(database:design:)`. Members this type does not model (`rewrites`,
/// search `indexes`, `_attachments`, vendor additions) are kept in ``other`` so that reading,
/// changing and writing back never loses them.
public struct DesignDocument: Codable, Sendable, Hashable {
    /// A view's map function: JavaScript (or another query server's) source, or for Mango
    /// indexes (`language: "query"`) a JSON definition.
    public enum MapFunction: Codable, Sendable, Hashable, ExpressibleByStringLiteral {
        /// Source code (`"function(doc) { emit(doc.name, 1) }"`).
        case source(String)
        /// A Mango index definition (`{"fields": {"name": "asc"}, "partial_filter_selector": {}}`).
        case query(JSONValue)

        public init(stringLiteral value: String) { self = .source(value) }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let source = try? container.decode(String.self) {
                self = .source(source)
            } else {
                self = .query(try container.decode(JSONValue.self))
            }
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .source(let source): try container.encode(source)
            case .query(let definition): try container.encode(definition)
            }
        }
    }

    /// A view's reduce function: a built-in (`_count`, `_sum`, `_stats`,
    /// `_approx_count_distinct`) or source code.
    public struct ReduceFunction: RawRepresentable, Codable, Sendable, Hashable, ExpressibleByStringLiteral {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(stringLiteral value: String) { rawValue = value }

        /// Counts the rows (`_count`).
        public static let count = ReduceFunction(rawValue: "_count")
        /// Sums numeric values, or arrays of numbers element-wise (`_sum`).
        public static let sum = ReduceFunction(rawValue: "_sum")
        /// sum, count, min, max and sumsqr of numeric values (`_stats`).
        public static let stats = ReduceFunction(rawValue: "_stats")
        /// Estimates the number of distinct keys (`_approx_count_distinct`).
        public static let approximateCountDistinct = ReduceFunction(rawValue: "_approx_count_distinct")
    }

    /// One view: a map function, an optional reduce function and index options.
    public struct View: Codable, Sendable, Hashable {
        /// The map function.
        public var map: MapFunction
        /// The reduce function. Defaults to nil (a map-only view).
        public var reduce: ReduceFunction?
        /// Index options (for Mango indexes, `{"def": {"fields": [...]}}`). Defaults to nil.
        public var options: JSONValue?

        public init(map: MapFunction, reduce: ReduceFunction? = nil, options: JSONValue? = nil) {
            self.map = map
            self.reduce = reduce
            self.options = options
        }
    }

    /// Design-document-wide options (`options`).
    public struct Options: Codable, Sendable, Hashable {
        /// Whether the views are partitioned (in a partitioned database). Defaults to nil.
        public var partitioned: Bool?
        /// Make `_local_seq` available to map functions (`local_seq`). Defaults to nil.
        public var localSequence: Bool?
        /// Let views index design documents too (`include_design`). Defaults to nil.
        public var includeDesign: Bool?

        public init(partitioned: Bool? = nil, localSequence: Bool? = nil, includeDesign: Bool? = nil) {
            self.partitioned = partitioned
            self.localSequence = localSequence
            self.includeDesign = includeDesign
        }

        enum CodingKeys: String, CodingKey {
            case partitioned
            case localSequence = "local_seq"
            case includeDesign = "include_design"
        }
    }

    /// `_id`, always `_design/<name>`.
    public var id: String
    /// `_rev`: the revision read, or the one an update replaces. Defaults to nil.
    public var rev: String?
    /// The query language: `javascript` (CouchDB's default) or `query` for Mango indexes. Defaults to nil.
    public var language: String?
    /// The views by name. Defaults to nil.
    public var views: [String: View]?
    /// Design-document-wide options. Defaults to nil.
    public var options: Options?
    /// Changes-feed filter functions by name (`filters`). Defaults to nil.
    public var filters: [String: String]?
    /// The function every write is checked with (`validate_doc_update`). Defaults to nil.
    public var validateDocUpdate: String?
    /// Update handlers by name (`updates`). Defaults to nil.
    public var updates: [String: String]?
    /// Show functions by name (`shows`; deprecated in CouchDB 3). Defaults to nil.
    public var shows: [String: String]?
    /// List functions by name (`lists`; deprecated in CouchDB 3). Defaults to nil.
    public var lists: [String: String]?
    /// False to keep the views from being built in the background (`autoupdate`). Defaults to nil.
    public var autoupdate: Bool?
    /// Every other member, kept as it was read (`rewrites`, `indexes`, `_attachments`, ...).
    public var other: [String: JSONValue]

    /// A design document called `name` (with or without the `_design/` prefix).
    public init(
        name: String, rev: String? = nil, language: String? = nil, views: [String: View]? = nil,
        options: Options? = nil, filters: [String: String]? = nil, validateDocUpdate: String? = nil,
        updates: [String: String]? = nil, shows: [String: String]? = nil, lists: [String: String]? = nil,
        autoupdate: Bool? = nil, other: [String: JSONValue] = [:]
    ) {
        id = "_design/" + CouchValidation.designName(name)
        self.rev = rev
        self.language = language
        self.views = views
        self.options = options
        self.filters = filters
        self.validateDocUpdate = validateDocUpdate
        self.updates = updates
        self.shows = shows
        self.lists = lists
        self.autoupdate = autoupdate
        self.other = other
    }

    /// The name without `_design/`.
    public var name: String { CouchValidation.designName(id) }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case id = "_id"
        case rev = "_rev"
        case language, views, options, filters, updates, shows, lists, autoupdate
        case validateDocUpdate = "validate_doc_update"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(String.self, forKey: .id)
        rev = try container.decodeIfPresent(String.self, forKey: .rev)
        language = try container.decodeIfPresent(String.self, forKey: .language)
        views = try container.decodeIfPresent([String: View].self, forKey: .views)
        options = try container.decodeIfPresent(Options.self, forKey: .options)
        filters = try container.decodeIfPresent([String: String].self, forKey: .filters)
        validateDocUpdate = try container.decodeIfPresent(String.self, forKey: .validateDocUpdate)
        updates = try container.decodeIfPresent([String: String].self, forKey: .updates)
        shows = try container.decodeIfPresent([String: String].self, forKey: .shows)
        lists = try container.decodeIfPresent([String: String].self, forKey: .lists)
        autoupdate = try container.decodeIfPresent(Bool.self, forKey: .autoupdate)
        let known = Set(CodingKeys.allCases.map(\.rawValue))
        let all = try decoder.container(keyedBy: DynamicCodingKey.self)
        var other: [String: JSONValue] = [:]
        for key in all.allKeys where !known.contains(key.stringValue) {
            other[key.stringValue] = try all.decode(JSONValue.self, forKey: key)
        }
        self.other = other
    }

    public func encode(to encoder: any Encoder) throws {
        var all = encoder.container(keyedBy: DynamicCodingKey.self)
        for (name, value) in other where CodingKeys(rawValue: name) == nil {
            try all.encode(value, forKey: DynamicCodingKey(name))
        }
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encodeIfPresent(rev, forKey: .rev)
        try container.encodeIfPresent(language, forKey: .language)
        try container.encodeIfPresent(views, forKey: .views)
        try container.encodeIfPresent(options, forKey: .options)
        try container.encodeIfPresent(filters, forKey: .filters)
        try container.encodeIfPresent(validateDocUpdate, forKey: .validateDocUpdate)
        try container.encodeIfPresent(updates, forKey: .updates)
        try container.encodeIfPresent(shows, forKey: .shows)
        try container.encodeIfPresent(lists, forKey: .lists)
        try container.encodeIfPresent(autoupdate, forKey: .autoupdate)
    }
}

extension PutDocumentOperation where Document == DesignDocument {
    /// `PUT /{db}/_design/{ddoc}` — creates or updates a design document. Its `rev`, when set,
    /// is sent in the body as `_rev`.
    public init(database: String, design: DesignDocument) {
        self.init(database: database, id: design.id, document: design)
    }
}

extension GetDocumentOperation where Document == DesignDocument {
    /// `GET /{db}/_design/{ddoc}` — reads a design document (`name` with or without `_design/`).
    public init(database: String, design name: String, revision: String? = nil) {
        self.init(database: database, id: "_design/" + CouchValidation.designName(name), revision: revision)
    }
}

extension DeleteDocumentOperation {
    /// `DELETE /{db}/_design/{ddoc}?rev=` — deletes a design document and, at the next
    /// `_view_cleanup`, its indexes.
    public init(database: String, design name: String, revision: String) {
        self.init(database: database, id: "_design/" + CouchValidation.designName(name), revision: revision)
    }
}

/// What `GET /{db}/_design/{ddoc}/_info` says about a design document's view index.
public struct DesignDocumentInfo: Decodable, Sendable, Equatable {
    /// The state of the view index.
    public struct ViewIndex: Decodable, Sendable, Equatable {
        /// Sizes in bytes.
        public struct Sizes: Decodable, Sendable, Equatable {
            public var active: Int?
            public var external: Int?
            public var file: Int?
        }

        /// Whether the index is being compacted.
        public var compactRunning: Bool?
        /// The query language.
        public var language: String?
        /// The purge sequence the index has seen.
        public var purgeSeq: CouchSequence?
        /// The index signature (changes when the view definitions change).
        public var signature: String?
        /// Sizes in bytes.
        public var sizes: Sizes?
        /// The database sequence the index has reached.
        public var updateSeq: CouchSequence?
        /// Whether the index is being updated.
        public var updaterRunning: Bool?
        /// How many clients wait for the index.
        public var waitingClients: Int?
        /// Whether index writes wait for a commit.
        public var waitingCommit: Bool?
        /// The ICU collator versions the index was built with.
        public var collatorVersions: [String]?

        enum CodingKeys: String, CodingKey {
            case language, signature, sizes
            case compactRunning = "compact_running"
            case purgeSeq = "purge_seq"
            case updateSeq = "update_seq"
            case updaterRunning = "updater_running"
            case waitingClients = "waiting_clients"
            case waitingCommit = "waiting_commit"
            case collatorVersions = "collator_versions"
        }
    }

    /// The design document's name (without `_design/`).
    public var name: String
    /// The view index.
    public var viewIndex: ViewIndex

    enum CodingKeys: String, CodingKey {
        case name
        case viewIndex = "view_index"
    }
}

/// `GET /{db}/_design/{ddoc}/_info` — the size and state of a design document's view index.
public struct GetDesignDocumentInfoOperation: JSONOperation {
    public typealias Response = DesignDocumentInfo

    /// The database name.
    public var database: String
    /// The design document's name, without `_design/` (a leading `_design/` is accepted).
    public var design: String

    public init(database: String, design: String) {
        self.database = database
        self.design = design
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.design(design)
    }

    public var endpoint: CouchPath { ViewPath.path(database, design, "_info", partition: nil) }
}
