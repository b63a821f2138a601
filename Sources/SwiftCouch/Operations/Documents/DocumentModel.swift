import Foundation

/// A document's revision history as `?revs=true` returns it in `_revisions`: the newest
/// revision's generation and the hashes from the newest back.
public struct Revisions: Codable, Sendable, Hashable {
    /// The generation of the newest revision (the `3` of `3-abc`).
    public var start: Int
    /// Revision hashes, newest first.
    public var ids: [String]

    public init(start: Int, ids: [String]) {
        self.start = start
        self.ids = ids
    }

    /// The full revisions, newest first: `["3-c…", "2-b…", "1-a…"]`.
    public var revisions: [String] {
        ids.enumerated().map { "\(start - $0.offset)-\($0.element)" }
    }
}

/// One entry of `_revs_info` (`?revs_info=true`).
public struct RevisionInfo: Codable, Sendable, Hashable {
    /// Whether a revision's body is still stored.
    public struct Status: RawRepresentable, Codable, Sendable, Hashable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        /// The body is stored and can be read with `?rev=`.
        public static let available = Status(rawValue: "available")
        /// The body was compacted away; only the revision id is known.
        public static let missing = Status(rawValue: "missing")
        /// The revision is a deletion.
        public static let deleted = Status(rawValue: "deleted")
        public var description: String { rawValue }
    }

    /// The revision.
    public var rev: String
    /// Whether its body is still available.
    public var status: Status

    public init(rev: String, status: Status) {
        self.rev = rev
        self.status = status
    }
}

/// An error CouchDB reports for one document inside a larger answer (a `_bulk_docs` row, a
/// `_bulk_get` entry): `{"id":…,"rev":…,"error":…,"reason":…}`.
public struct DocumentError: Codable, Sendable, Hashable, Error, CustomStringConvertible {
    /// The document id, when CouchDB names it (nil for an entry that had no id).
    public var id: String?
    /// The revision concerned. CouchDB writes `"undefined"` for a missing document in `_bulk_get`;
    /// that quirk is read as nil.
    public var rev: String?
    /// CouchDB's error string (`conflict`, `forbidden`, `not_found`, `bad_request`, ...).
    public var error: String
    /// CouchDB's explanation, when given.
    public var reason: String?

    public init(id: String?, rev: String?, error: String, reason: String?) {
        self.id = id
        self.rev = rev
        self.error = error
        self.reason = reason
    }

    enum CodingKeys: String, CodingKey { case id, rev, error, reason }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decodeIfPresent(String.self, forKey: .id)
        let rev = try container.decodeIfPresent(String.self, forKey: .rev)
        self.rev = rev == "undefined" ? nil : rev
        error = try container.decode(String.self, forKey: .error)
        reason = try container.decodeIfPresent(String.self, forKey: .reason)
    }

    public var description: String {
        "\(id ?? "<no id>")\(rev.map { "@" + $0 } ?? ""): \(error)\(reason.map { " (\($0))" } ?? "")"
    }
}

/// One revision of a document in an answer that lists several: `{"ok": doc}` (`open_revs`,
/// `_bulk_get`), `{"missing": rev}` (`open_revs`) or `{"error": {…}}` (`_bulk_get`).
public enum DocumentRevisionResult<Document: Decodable & Sendable>: Decodable, Sendable {
    /// The revision was found.
    case found(Document)
    /// The revision does not exist (`open_revs` with a revision list).
    case missing(rev: String)
    /// The revision could not be read (`_bulk_get`: missing document or revision, bad revision).
    case failed(DocumentError)

    enum CodingKeys: String, CodingKey { case ok, missing, error }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        if container.contains(.ok) {
            self = .found(try container.decode(Document.self, forKey: .ok))
        } else if let rev = try container.decodeIfPresent(String.self, forKey: .missing) {
            self = .missing(rev: rev)
        } else if container.contains(.error) {
            self = .failed(try container.decode(DocumentError.self, forKey: .error))
        } else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "Expected one of ok, missing or error"))
        }
    }

    /// The document, when it was found.
    public var document: Document? {
        if case .found(let document) = self { return document }
        return nil
    }
}

extension DocumentRevisionResult: Equatable where Document: Equatable {}

/// Where a write sends the revision it updates: `?rev=` or an `If-Match` header. CouchDB treats
/// them alike; `If-Match` keeps the revision out of URLs and logs.
public enum RevisionPlacement: Sendable, Hashable {
    /// `?rev=…` in the query string.
    case query
    /// `If-Match: …` header.
    case ifMatch
}

/// The read options of `GET /{db}/{docid}` that `open_revs` and `_bulk_get` share.
public struct DocumentReadOptions: Sendable, Hashable {
    /// Include `_revisions`, the revision history (`revs`). Defaults to false.
    public var revisions: Bool
    /// Include `_revs_info`, each revision with whether its body is still stored (`revs_info`).
    /// Defaults to false.
    public var revisionsInfo: Bool
    /// Include `_conflicts`, the conflicting leaf revisions (`conflicts`). Defaults to false.
    public var conflicts: Bool
    /// Include `_deleted_conflicts` (`deleted_conflicts`). Defaults to false.
    public var deletedConflicts: Bool
    /// Inline attachment bodies as base64 `data` instead of stubs (`attachments`). Defaults to false.
    public var attachments: Bool
    /// Inline only the attachments changed since these revisions (`atts_since`). Defaults to nil.
    public var attachmentsSince: [String]?
    /// Add `encoding` and `encoded_length` to attachment stubs (`att_encoding_info`). Defaults to false.
    public var attachmentEncodingInfo: Bool
    /// With `rev`/`open_revs`, answer the newest leaf descending from it instead (`latest`).
    /// Defaults to false.
    public var latest: Bool
    /// Include `_local_seq`, the document's update sequence (`local_seq`). Defaults to false.
    public var localSequence: Bool
    /// Shorthand for `conflicts`, `deleted_conflicts` and `revs_info` together (`meta`).
    /// Defaults to false.
    public var meta: Bool
    /// How many copies of the document must answer (`r`) on a cluster: more is slower, fewer may
    /// read a copy that has not seen the latest write yet (`r=1`). Nil (the default) leaves it to
    /// the server (a quorum, on CouchDB).
    public var readQuorum: Int?

    public init(
        revisions: Bool = false, revisionsInfo: Bool = false, conflicts: Bool = false, deletedConflicts: Bool = false,
        attachments: Bool = false, attachmentsSince: [String]? = nil, attachmentEncodingInfo: Bool = false,
        latest: Bool = false, localSequence: Bool = false, meta: Bool = false
    ) {
        self.revisions = revisions
        self.revisionsInfo = revisionsInfo
        self.conflicts = conflicts
        self.deletedConflicts = deletedConflicts
        self.attachments = attachments
        self.attachmentsSince = attachmentsSince
        self.attachmentEncodingInfo = attachmentEncodingInfo
        self.latest = latest
        self.localSequence = localSequence
        self.meta = meta
    }

    func validate() throws(CouchError) {
        if let readQuorum, readQuorum < 1 {
            throw CouchError.validation("readQuorum (r) must be at least 1, not \(readQuorum).")
        }
        if let attachmentsSince {
            guard !attachmentsSince.isEmpty else {
                throw CouchError.validation("attachmentsSince must list at least one revision (or be nil).")
            }
            for rev in attachmentsSince { try CouchValidation.validateRevision(rev) }
        }
    }

    var parameters: QueryParameters {
        var query = QueryParameters()
        query.flag("revs", revisions)
        query.flag("revs_info", revisionsInfo)
        query.flag("conflicts", conflicts)
        query.flag("deleted_conflicts", deletedConflicts)
        query.flag("attachments", attachments)
        query.addJSON("atts_since", attachmentsSince.map { .array($0.map(JSONValue.string)) })
        query.flag("att_encoding_info", attachmentEncodingInfo)
        query.flag("latest", latest)
        query.flag("local_seq", localSequence)
        query.flag("meta", meta)
        query.add("r", readQuorum.map(String.init))
        return query
    }
}

/// A document with CouchDB's metadata (`_id`, `_rev`, `_deleted`, `_attachments`, `_conflicts`,
/// ...) next to your own `Codable` body, read from and written to the same JSON object.
///
/// Your type keeps only its own fields; the wrapper adds the rest:
/// ```swift
/// struct Album: Codable, Sendable { var title: String }
/// let op = GetDocumentOperation<CouchDocument<Album>>(database: "music", id: "blue",
///                                                   options: DocumentReadOptions(conflicts: true))
/// let doc = try await client.execute(op).value
/// print(doc.rev, doc.conflicts ?? [], doc.title)   // body fields via dynamic member lookup
/// ```
/// When written (`PUT`, `_bulk_docs`), the metadata that is set is added to the body's members;
/// read-only metadata (`_conflicts`, `_revs_info`, `_local_seq`, ...) is never sent. With a
/// ``JSONValue`` body, the body still holds every member read, underscore ones included, but only
/// the wrapper's properties are written back.
@dynamicMemberLookup
public struct CouchDocument<Body: Sendable>: Sendable {
    /// `_id`. Nil when the server should generate it (`POST /{db}`, `_bulk_docs`).
    public var id: String?
    /// `_rev`: the revision read, or the revision a write updates.
    public var rev: String?
    /// `_deleted`: true for a tombstone (and to delete through `_bulk_docs`).
    public var deleted: Bool
    /// `_attachments`: stubs when read, inline data or stubs to keep when written.
    public var attachments: [String: Attachment]?
    /// `_revisions` (`?revs=true`); written with `new_edits=false` to give the history.
    public var revisions: Revisions?
    /// `_conflicts` (`?conflicts=true`): the losing leaf revisions. Read only.
    public var conflicts: [String]?
    /// `_deleted_conflicts` (`?deleted_conflicts=true`). Read only.
    public var deletedConflicts: [String]?
    /// `_revs_info` (`?revs_info=true`). Read only.
    public var revisionsInfo: [RevisionInfo]?
    /// `_local_seq` (`?local_seq=true`), opaque. Read only.
    public var localSequence: JSONValue?
    /// Your fields.
    public var body: Body

    public init(
        id: String? = nil, rev: String? = nil, deleted: Bool = false, attachments: [String: Attachment]? = nil,
        revisions: Revisions? = nil, body: Body
    ) {
        self.id = id
        self.rev = rev
        self.deleted = deleted
        self.attachments = attachments
        self.revisions = revisions
        self.body = body
    }

    /// Reads and writes the body's fields as if they were the document's own.
    public subscript<T>(dynamicMember keyPath: WritableKeyPath<Body, T>) -> T {
        get { body[keyPath: keyPath] }
        set { body[keyPath: keyPath] = newValue }
    }

    /// Reads the body's read-only (`let`) fields as if they were the document's own.
    public subscript<T>(dynamicMember keyPath: KeyPath<Body, T>) -> T {
        body[keyPath: keyPath]
    }

    enum MetaKeys: String, CodingKey {
        case id = "_id"
        case rev = "_rev"
        case deleted = "_deleted"
        case attachments = "_attachments"
        case revisions = "_revisions"
        case conflicts = "_conflicts"
        case deletedConflicts = "_deleted_conflicts"
        case revisionsInfo = "_revs_info"
        case localSequence = "_local_seq"
    }
}

extension CouchDocument: Decodable where Body: Decodable {
    public init(from decoder: any Decoder) throws {
        let meta = try decoder.container(keyedBy: MetaKeys.self)
        id = try meta.decodeIfPresent(String.self, forKey: .id)
        rev = try meta.decodeIfPresent(String.self, forKey: .rev)
        deleted = try meta.decodeIfPresent(Bool.self, forKey: .deleted) ?? false
        attachments = try meta.decodeIfPresent([String: Attachment].self, forKey: .attachments)
        revisions = try meta.decodeIfPresent(Revisions.self, forKey: .revisions)
        conflicts = try meta.decodeIfPresent([String].self, forKey: .conflicts)
        deletedConflicts = try meta.decodeIfPresent([String].self, forKey: .deletedConflicts)
        revisionsInfo = try meta.decodeIfPresent([RevisionInfo].self, forKey: .revisionsInfo)
        localSequence = try meta.decodeIfPresent(JSONValue.self, forKey: .localSequence)
        body = try Body(from: decoder)
    }
}

extension CouchDocument: Encodable where Body: Encodable {
    /// Writes the body's members and then the metadata that is set (`_id`, `_rev`, `_deleted`,
    /// `_attachments`, `_revisions`). The body must encode as a JSON object.
    public func encode(to encoder: any Encoder) throws {
        if let json = body as? JSONValue {
            guard case .object(let members) = json else {
                throw EncodingError.invalidValue(
                    json, .init(codingPath: encoder.codingPath, debugDescription: "A document body must be an object"))
            }
            var container = encoder.container(keyedBy: DynamicCodingKey.self)
            for (name, value) in members where MetaKeys(rawValue: name) == nil {
                try container.encode(value, forKey: DynamicCodingKey(name))
            }
        } else {
            try body.encode(to: encoder)
        }
        var meta = encoder.container(keyedBy: MetaKeys.self)
        try meta.encodeIfPresent(id, forKey: .id)
        try meta.encodeIfPresent(rev, forKey: .rev)
        if deleted { try meta.encode(true, forKey: .deleted) }
        try meta.encodeIfPresent(attachments, forKey: .attachments)
        try meta.encodeIfPresent(revisions, forKey: .revisions)
    }
}

extension CouchDocument: Equatable where Body: Equatable {}
