import Foundation

/// Which changes a `_changes` request reports.
public enum ChangesFilter: Sendable, Hashable {
    /// Only these document ids (`filter=_doc_ids`, the ids sent in a `POST` body).
    case documentIDs([String])
    /// Only documents matching a Mango selector (`filter=_selector`, sent in a `POST` body).
    case selector(Selector)
    /// Only design documents (`filter=_design`).
    case design
    /// Only documents the map function of a view emits for (`filter=_view&view=ddoc/view`).
    case view(designDocument: String, view: String)
    /// A filter function of a design document (`filter=ddoc/name`), with the extra query
    /// parameters it reads from `req.query`.
    case custom(designDocument: String, name: String, parameters: [URLQueryItem] = [])

    /// Whether the filter's input goes in a `POST` body.
    var needsBody: Bool {
        switch self {
        case .documentIDs, .selector: return true
        case .design, .view, .custom: return false
        }
    }

    func add(to items: inout QueryParameters) {
        switch self {
        case .documentIDs: items.add("filter", "_doc_ids")
        case .selector: items.add("filter", "_selector")
        case .design: items.add("filter", "_design")
        case .view(let ddoc, let view):
            items.add("filter", "_view")
            items.add("view", CouchValidation.designName(ddoc) + "/" + view)
        case .custom(let ddoc, let name, let parameters):
            items.add("filter", CouchValidation.designName(ddoc) + "/" + name)
            for parameter in parameters { items.add(parameter.name, parameter.value ?? "") }
        }
    }

    func body() throws -> Data? {
        switch self {
        case .documentIDs(let ids): return try JSONBody.encode(["doc_ids": ids])
        case .selector(let selector): return try JSONBody.encode(["selector": selector])
        case .design, .view, .custom: return nil
        }
    }

    func validate() throws(CouchError) {
        switch self {
        case .documentIDs(let ids):
            try CouchValidation.notEmpty(ids, "documentIDs")
            if ids.contains(where: \.isEmpty) { throw CouchError.validation("documentIDs must not contain \"\".") }
        case .selector(let selector): try selector.validate()
        case .design: break
        case .view(let ddoc, let view):
            try CouchValidation.design(ddoc)
            try CouchValidation.notEmpty(view, "view")
        case .custom(let ddoc, let name, let parameters):
            try CouchValidation.design(ddoc)
            try CouchValidation.notEmpty(name, "filter name")
            let reserved: Set = ["filter", "feed", "since", "limit", "include_docs", "style", "view"]
            if let clash = parameters.first(where: { reserved.contains($0.name) || $0.name.isEmpty }) {
                throw CouchError.validation(
                    "Custom filter parameter '\(clash.name)' is empty or clashes with a _changes option.")
            }
        }
    }
}

/// Which revisions each change row lists.
public enum ChangesStyle: String, Sendable, Hashable {
    /// Only the winning revision (the server's default).
    case mainOnly = "main_only"
    /// Every leaf revision, conflicts and deleted leaves included.
    case allDocs = "all_docs"
}

/// One revision in a change row.
public struct ChangeRevision: Codable, Sendable, Hashable {
    public var rev: String
    public init(rev: String) { self.rev = rev }
}

/// One row of the changes feed: a document and where its latest change sits in the history.
public struct Change<Document: Decodable & Sendable>: Decodable, Sendable {
    /// Where this change sits (pass the last one back as `since`).
    public var seq: CouchSequence
    /// The document id.
    public var id: String
    /// The leaf revisions (one, unless ``ChangesStyle/allDocs``).
    public var changes: [ChangeRevision]
    /// Whether the document is deleted.
    public var deleted: Bool
    /// The document, with `includeDocs`. Nil for a deleted document whose tombstone does not
    /// decode as `Document` (a tombstone has only `_id`, `_rev` and `_deleted`).
    public var doc: Document?
    /// What to save once this change is handled, and pass back as `since` to resume right after
    /// it: its ``seq``, or for the last change of a ``ChangesFollower`` batch, the batch's
    /// `last_seq` (which also covers changes a filter left out).
    public internal(set) var checkpoint: CouchSequence

    enum CodingKeys: String, CodingKey {
        case seq, id, changes, deleted, doc
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        seq = try container.decode(CouchSequence.self, forKey: .seq)
        checkpoint = seq
        id = try container.decode(String.self, forKey: .id)
        changes = try container.decode([ChangeRevision].self, forKey: .changes)
        deleted = try container.decodeIfPresent(Bool.self, forKey: .deleted) ?? false
        do {
            doc = try container.decodeIfPresent(Document.self, forKey: .doc)
        } catch  where deleted {
            doc = nil
        }
    }
}

extension Change: Equatable where Document: Equatable {}

/// What a one-response `_changes` request answers.
public struct ChangesResponse<Document: Decodable & Sendable>: Decodable, Sendable {
    /// The changes, in the feed's order.
    public var results: [Change<Document>]
    /// Where the next request should continue (`since`).
    public var lastSeq: CouchSequence
    /// How many more changes there are after ``lastSeq`` (CouchDB 2+).
    public var pending: Int?

    enum CodingKeys: String, CodingKey {
        case results, pending
        case lastSeq = "last_seq"
    }
}

extension ChangesResponse: Equatable where Document: Equatable {}

/// `GET /{db}/_changes` (or `POST` for the `_doc_ids` and `_selector` filters) — the changes
/// made to a database, as one response (`feed=normal`, or `longpoll` to wait for the next one).
///
/// Documents, with ``includeDocs``, decode as `Document` (``JSONValue`` for free-form JSON).
/// Page through history by passing ``ChangesResponse/lastSeq`` back as ``since``.
public struct ChangesOperation<Document: Decodable & Sendable>: JSONOperation, IdempotentOperation {
    public typealias Response = ChangesResponse<Document>

    /// The database.
    public var database: String
    /// Answer at once (`normal`) or wait for a change (`longpoll`). Defaults to `.normal`.
    public var feed: FeedMode
    /// Start after this sequence (``CouchSequence/now`` for only new changes). Defaults to nil
    /// (from the beginning).
    public var since: CouchSequence?
    /// At most this many rows. Defaults to nil (all).
    public var limit: Int?
    /// Newest first. Defaults to false.
    public var descending: Bool
    /// Include each document in its row. Defaults to false.
    public var includeDocs: Bool
    /// With ``includeDocs``: include `_conflicts` in each document. Defaults to false.
    public var conflicts: Bool
    /// With ``includeDocs``: include attachment bodies inline (base64). Defaults to false.
    public var attachments: Bool
    /// With ``includeDocs``: include the encoding of compressed attachments. Defaults to false.
    public var attachmentEncodingInfo: Bool
    /// Which revisions each row lists. Defaults to nil (the server's `main_only`).
    public var style: ChangesStyle?
    /// Which changes to report. Defaults to nil (all).
    public var filter: ChangesFilter?
    /// Compute a real sequence only every N rows (faster on clusters; the others are null).
    /// Defaults to nil (every row).
    public var seqInterval: Int?
    /// With `longpoll`: send a newline every N milliseconds while waiting. Defaults to nil.
    public var heartbeat: Int?
    /// With `longpoll`: give up waiting after N milliseconds. Defaults to nil (the server's 60 s).
    public var timeout: Int?

    private var body: Data?

    public init(
        database: String, feed: FeedMode = .normal, since: CouchSequence? = nil, limit: Int? = nil,
        descending: Bool = false, includeDocs: Bool = false, conflicts: Bool = false, attachments: Bool = false,
        attachmentEncodingInfo: Bool = false, style: ChangesStyle? = nil, filter: ChangesFilter? = nil,
        seqInterval: Int? = nil, heartbeat: Int? = nil, timeout: Int? = nil
    ) {
        self.database = database
        self.feed = feed
        self.since = since
        self.limit = limit
        self.descending = descending
        self.includeDocs = includeDocs
        self.conflicts = conflicts
        self.attachments = attachments
        self.attachmentEncodingInfo = attachmentEncodingInfo
        self.style = style
        self.filter = filter
        self.seqInterval = seqInterval
        self.heartbeat = heartbeat
        self.timeout = timeout
    }

    private var feedParameters: FeedParameters {
        FeedParameters(feed: feed, since: since, timeout: timeout, heartbeat: heartbeat)
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try feedParameters.validate()
        try CouchValidation.nonNegative(limit, "limit")
        try CouchValidation.positive(seqInterval, "seqInterval")
        if !includeDocs, conflicts || attachments || attachmentEncodingInfo {
            throw CouchError.validation("conflicts, attachments and attachmentEncodingInfo need includeDocs.")
        }
        try filter?.validate()
    }

    public mutating func serialise() throws { body = try filter?.body() }

    public var endpoint: CouchPath { CouchPath(database, "_changes") }
    public var method: HTTPMethod { filter?.needsBody == true ? .post : .get }
    public var data: Data? { body }

    public var parameters: [URLQueryItem] {
        var items = QueryParameters()
        feedParameters.add(to: &items)
        items.flag("descending", descending)
        items.add("limit", limit)
        items.flag("include_docs", includeDocs)
        items.flag("conflicts", conflicts)
        items.flag("attachments", attachments)
        items.flag("att_encoding_info", attachmentEncodingInfo)
        items.add("style", style?.rawValue)
        filter?.add(to: &items)
        items.add("seq_interval", seqInterval)
        return items.queryItems
    }
}
