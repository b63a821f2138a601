import Foundation

/// The calls on one database that a remote database (``Database``, from
/// ``CouchDBClient/database(_:)``) and a local one (SwiftCouchStore's `LocalDatabase`) have in
/// common, so that app code can run against either.
///
/// ```swift
/// func rename<Store: DocumentStore>(_ id: String, to title: String, in store: Store) async throws {
///     var album = try await store.get(id, as: Album.self)
///     album.title = title
///     try await store.put(album, id: id, revision: album._rev)
/// }
/// ```
///
/// Every call runs through SwiftCouch's one pipeline (validation first, so a bad id fails
/// before anything is sent; the same ``CouchError`` with CouchDB's status, `error` and `reason`;
/// the client's ``Configuration/dateCoding``). Conforming types are `Sendable` values, safe to use
/// from many tasks at once. The requirements take ``CallOptions``; the extension adds the same
/// calls without them, with CouchDB's defaults.
///
/// Large results: ``allDocsRows(as:range:options:)`` streams `_all_docs`; ``changeFeed(as:options:)``
/// follows the changes feed; attachments go to and from files.
///
/// Conflicts: ``conflictedDocumentIDs(options:)`` lists the documents with conflicting leaves,
/// ``conflictLeaves(of:as:options:)`` reads them, and ``resolveConflicts(of:keeping:options:)`` or
/// ``resolveConflicts(of:merged:options:)`` resolves them in one `_bulk_docs` request (see there
/// for what that guarantees).
public protocol DocumentStore: Sendable {
    /// The database's name.
    var name: String { get }
    /// The client the calls go through: run any other operation on it (`store.client.execute(...)`).
    var client: CouchDBClient { get }

    /// The database's information (`GET /{db}`): document counts, sizes, update sequence.
    func info(options: CallOptions) async throws(CouchError) -> DatabaseInfo

    /// Reads a document as `type`, optionally at `revision`.
    func get<Document: Decodable & Sendable>(
        _ id: String, as type: Document.Type, revision: String?, options: CallOptions
    ) async throws(CouchError) -> Document

    /// Creates or updates a document; give the current `revision` to update.
    func put<Document: Encodable & Sendable>(
        _ document: Document, id: String, revision: String?, options: CallOptions
    ) async throws(CouchError) -> DocumentWriteResponse

    /// Creates a document with an id the database chooses.
    func create<Document: Encodable & Sendable>(_ document: Document, options: CallOptions)
        async throws(CouchError) -> DocumentWriteResponse

    /// Deletes revision `revision` of a document.
    func delete(_ id: String, revision: String, options: CallOptions) async throws(CouchError)
        -> DocumentWriteResponse

    /// Writes many documents in one request (`_bulk_docs`): one result per document, in order
    /// (a conflict is a row's error, not a thrown error).
    func bulk<Document: Encodable & Sendable>(_ documents: [Document], options: CallOptions)
        async throws(CouchError) -> [BulkWriteResult]

    /// `_all_docs`, with the documents when `range.includeDocs` is set.
    func allDocs<Document: Decodable & Sendable>(
        as type: Document.Type, range: KeyRangeOptions, options: CallOptions
    ) async throws(CouchError) -> AllDocsOperation<Document>.Response

    /// `_all_docs` streamed row by row, with back-pressure: for results too large to hold whole.
    func allDocsRows<Document: Decodable & Sendable>(
        as type: Document.Type, range: KeyRangeOptions, options: CallOptions
    ) -> CouchRowStream<AllDocsOperation<Document>.Row>

    /// A Mango query (`_find`).
    func find<Document: Decodable & Sendable>(_ query: MangoQuery, as type: Document.Type, options: CallOptions)
        async throws(CouchError) -> FindOperation<Document>.Response

    /// A view of a design document, its keys and values decoded as `Key` and `Value`.
    func view<Key: Decodable & Sendable, Value: Decodable & Sendable>(
        design: String, view: String, keys: Key.Type, values: Value.Type, query: ViewQueryOptions,
        options: CallOptions
    ) async throws(CouchError) -> QueryViewOperation<Key, Value, JSONValue>.Response

    /// One batch of the changes feed since `since` (from the start when nil).
    func changes<Document: Decodable & Sendable>(
        since: CouchSequence?, limit: Int?, includeDocs: Bool, as type: Document.Type, options: CallOptions
    ) async throws(CouchError) -> ChangesOperation<Document>.Response

    /// The changes feed as an `AsyncSequence` (a ``ChangesFollower``): finite, or listening for
    /// new changes for as long as it is iterated (``ChangesFollower/Mode/listen``).
    func changeFeed<Document: Decodable & Sendable>(
        as type: Document.Type, options: ChangesFollower<Document>.Options
    ) -> ChangesFollower<Document>

    /// An attachment's bytes and content type.
    func attachment(_ name: String, of documentID: String, options: CallOptions) async throws(CouchError)
        -> GetAttachmentOperation.Response

    /// Adds or replaces an attachment; without `revision` the document is created with it.
    func putAttachment(
        _ name: String, of documentID: String, data: Data, contentType: String, revision: String?,
        options: CallOptions
    ) async throws(CouchError) -> DocumentWriteResponse

    /// Removes an attachment.
    func deleteAttachment(_ name: String, of documentID: String, revision: String, options: CallOptions)
        async throws(CouchError) -> DocumentWriteResponse

    /// Adds or replaces an attachment with the bytes of `file`; without `revision` the document is
    /// created with it.
    func uploadAttachment(
        _ name: String, of documentID: String, from file: URL, contentType: String, revision: String?
    ) async throws(CouchError) -> DocumentWriteResponse

    /// Writes an attachment into `file` (replaced if it exists; removed again if the download fails).
    func downloadAttachment(
        _ name: String, of documentID: String, to file: URL, options: DownloadOptions
    ) async throws(CouchError) -> AttachmentDownload

    /// The ids of the documents that have conflicts (more than one live leaf), in `_all_docs`
    /// order. How they are found depends on the store: see the conforming type.
    func conflictedDocumentIDs(options: CallOptions) async throws(CouchError) -> [String]
}

// MARK: - The remote database

extension Database: DocumentStore {
    /// The changes feed as an `AsyncSequence`: a ``ChangesFollower`` over this database.
    public func changeFeed<Document: Decodable & Sendable>(
        as type: Document.Type, options: ChangesFollower<Document>.Options = ChangesFollower<Document>.Options()
    ) -> ChangesFollower<Document> {
        ChangesFollower(client: client, database: name, options: options)
    }

    /// Uploads an attachment from `file`, never holding it whole in memory (see
    /// ``CouchDBClient/upload(_:)`` to follow its progress).
    @discardableResult
    public func uploadAttachment(
        _ name: String, of documentID: String, from file: URL, contentType: String, revision: String? = nil
    ) async throws(CouchError) -> DocumentWriteResponse {
        try await client.upload(
            UploadAttachmentOperation(
                database: self.name, documentID: documentID, name: name, revision: revision,
                contentType: contentType, body: .file(file))
        ).value
    }

    /// Downloads an attachment into `file` as it arrives (see ``CouchDBClient/download(_:to:options:)``).
    @discardableResult
    public func downloadAttachment(
        _ name: String, of documentID: String, to file: URL, options: DownloadOptions = DownloadOptions()
    ) async throws(CouchError) -> AttachmentDownload {
        try await client.download(
            GetAttachmentOperation(database: self.name, documentID: documentID, name: name), to: file,
            options: options
        ).value
    }

    /// The ids of the documents that have conflicts, in `_all_docs` order.
    ///
    /// A remote CouchDB keeps no index of them, so this is a scan: `_all_docs` with
    /// `include_docs=true&conflicts=true`, 500 documents a page, keeping only the ids with
    /// `_conflicts`. Its cost grows with the database, so call it rarely on large ones (or keep a
    /// view of your own that emits `doc._conflicts`). Pages are read one after another; a document
    /// written meanwhile may be missed or listed without conflicts any more.
    public func conflictedDocumentIDs(options: CallOptions = CallOptions()) async throws(CouchError) -> [String] {
        var ids: [String] = []
        var range = KeyRangeOptions()
        range.includeDocs = true
        range.conflicts = true
        range.limit = Self.conflictScanPage
        while true {
            let page = try await allDocs(as: ConflictMarker.self, range: range, options: options)
            for row in page.rows where !(row.doc?.conflicts ?? []).isEmpty {
                if let id = row.id { ids.append(id) }
            }
            guard page.rows.count == Self.conflictScanPage, let last = page.rows.last?.id else { return ids }
            range.startKey = .string(last)
            range.skip = 1
        }
    }

    static let conflictScanPage = 500
}

/// A document's `_conflicts`, and nothing else of it.
private struct ConflictMarker: Decodable, Sendable {
    var conflicts: [String]?
    enum CodingKeys: String, CodingKey { case conflicts = "_conflicts" }
}

// MARK: - Conflicts

extension DocumentStore {
    /// The live leaves of a document: the winning revision first, then its conflicts in CouchDB's
    /// order (the revision that would win next first). One leaf when there are no conflicts.
    ///
    /// Two reads: the winner with `conflicts=true`, then the conflicting leaves with `open_revs`.
    /// A leaf removed between the two is left out. Throws 404 `not_found` when the document does
    /// not exist or is deleted.
    public func conflictLeaves<Document: Decodable & Sendable>(
        of id: String, as type: Document.Type = Document.self, options: CallOptions = CallOptions()
    ) async throws(CouchError) -> [CouchDocument<Document>] {
        let winner = try await client.value(
            GetDocumentOperation<CouchDocument<Document>>(database: name, id: id, conflicts: true), options: options)
        let others = winner.conflicts ?? []
        guard !others.isEmpty else { return [winner] }
        let read = try await client.value(
            GetOpenRevisionsOperation<CouchDocument<Document>>(
                database: name, id: id, revisions: .revisions(others)),
            options: options)
        let leaves = read.compactMap(\.document).filter { !$0.deleted }
        // `_conflicts` is in CouchDB's winning order; keep it.
        let order = Dictionary(others.enumerated().map { ($1, $0) }, uniquingKeysWith: { a, _ in a })
        return [winner] + leaves.sorted { (order[$0.rev ?? ""] ?? .max) < (order[$1.rev ?? ""] ?? .max) }
    }

    /// Resolves a document's conflicts by keeping the leaf `revision` as it is: every other live
    /// leaf is deleted. Returns the kept revision (the document's winner from then on).
    ///
    /// One `_bulk_docs` request holds every deletion (see ``resolveConflicts(of:merged:options:)``
    /// for what that guarantees). Throws a validation error, before writing anything, when
    /// `revision` is not a live leaf of the document, and the first row's error (409 `conflict`
    /// when another writer changed that leaf meanwhile) when a deletion was refused: the others
    /// were applied, so read the leaves again and resolve what is left.
    @discardableResult
    public func resolveConflicts(of id: String, keeping revision: String, options: CallOptions = CallOptions())
        async throws(CouchError) -> DocumentWriteResponse
    {
        let leaves = try await conflictLeaves(of: id, as: JSONValue.self, options: options)
        let revisions = leaves.compactMap(\.rev)
        guard revisions.contains(revision) else {
            throw CouchError.validation(
                "Revision \(revision) is not a live leaf of document '\(id)' (its leaves: "
                    + revisions.joined(separator: ", ") + ").")
        }
        let writes = revisions.filter { $0 != revision }.map { ConflictResolutionWrite<JSONValue>.tombstone(id, $0) }
        try await writeResolution(id: id, writes, options: options)
        return DocumentWriteResponse(ok: true, id: id, rev: revision)
    }

    /// Resolves a document's conflicts with a merge: `merged` is written as a new revision on top
    /// of the current winner, and every other live leaf is deleted. Returns the merge's revision.
    ///
    /// The merge and the deletions go in one `_bulk_docs` request, the merge first. That is as
    /// atomic as CouchDB allows: CouchDB 3 has no `all_or_nothing`, so each row succeeds or fails
    /// on its own (409 `conflict` when another writer changed that leaf since it was read); the
    /// request is one write of the document on its shard. A row that fails leaves a valid state —
    /// the merge already wins, only some leaves remain — and the error says which: read the leaves
    /// again and resolve what is left. Throws 404 `not_found` when the document is missing or
    /// deleted.
    @discardableResult
    public func resolveConflicts<Document: Encodable & Sendable>(
        of id: String, merged: Document, options: CallOptions = CallOptions()
    ) async throws(CouchError) -> DocumentWriteResponse {
        let leaves = try await conflictLeaves(of: id, as: JSONValue.self, options: options)
        let revisions = leaves.compactMap(\.rev)
        guard let winner = revisions.first else {
            throw CouchError.validation("Document '\(id)' has no live revision to merge onto.")
        }
        let writes =
            [ConflictResolutionWrite.merge(CouchDocument(id: id, rev: winner, body: merged))]
            + revisions.dropFirst().map { ConflictResolutionWrite<Document>.tombstone(id, $0) }
        let results = try await writeResolution(id: id, writes, options: options)
        guard case .success(_, let rev) = results.first else {
            throw CouchError.validation("The merge of document '\(id)' was not written.")
        }
        return DocumentWriteResponse(ok: true, id: id, rev: rev)
    }

    /// Writes a resolution in one `_bulk_docs` request; throws the first row's error.
    @discardableResult
    private func writeResolution<Document: Encodable & Sendable>(
        id: String, _ writes: [ConflictResolutionWrite<Document>], options: CallOptions
    ) async throws(CouchError) -> [BulkWriteResult] {
        guard !writes.isEmpty else { return [] }
        let results = try await bulk(writes, options: options)
        for result in results {
            guard case .failure(let failure) = result else { continue }
            let status = Self.status(ofRowError: failure.error)
            var error = CouchError(
                kind: .http,
                message: "HTTP \(status) \(failure.error): resolving the conflicts of '\(id)', the write of "
                    + "\(failure.rev ?? "its leaf") failed (\(failure.reason ?? "")). The request's other writes "
                    + "were applied: read the leaves again and resolve what is left.",
                statusCode: status, error: failure.error, reason: failure.reason)
            error.method = "POST"
            throw error
        }
        return results
    }

    /// The HTTP status CouchDB gives a document error of a `_bulk_docs` row when it is a request's own.
    private static func status(ofRowError error: String) -> Int {
        switch error {
        case "conflict": return 409
        case "forbidden": return 403
        case "unauthorized": return 401
        case "not_found": return 404
        case "bad_request": return 400
        default: return 500
        }
    }
}

/// One row of a conflict resolution's `_bulk_docs`: the merge, or the deletion of a leaf.
private enum ConflictResolutionWrite<Document: Encodable & Sendable>: Encodable, Sendable {
    case merge(CouchDocument<Document>)
    case tombstone(String, String)

    func encode(to encoder: any Encoder) throws {
        switch self {
        case .merge(let document):
            try document.encode(to: encoder)
        case .tombstone(let id, let rev):
            try CouchDocument(id: id, rev: rev, deleted: true, body: JSONValue.object([:])).encode(to: encoder)
        }
    }
}

// MARK: - The calls with their defaults

extension DocumentStore {
    /// The database's information (`GET /{db}`).
    public func info() async throws(CouchError) -> DatabaseInfo { try await info(options: CallOptions()) }

    /// Reads a document as `type`, optionally at `revision`.
    public func get<Document: Decodable & Sendable>(
        _ id: String, as type: Document.Type = Document.self, revision: String? = nil
    ) async throws(CouchError) -> Document {
        try await get(id, as: type, revision: revision, options: CallOptions())
    }

    /// Creates or updates a document; give the current `revision` to update.
    @discardableResult
    public func put<Document: Encodable & Sendable>(_ document: Document, id: String, revision: String? = nil)
        async throws(CouchError) -> DocumentWriteResponse
    {
        try await put(document, id: id, revision: revision, options: CallOptions())
    }

    /// Creates a document with an id the database chooses.
    @discardableResult
    public func create<Document: Encodable & Sendable>(_ document: Document) async throws(CouchError)
        -> DocumentWriteResponse
    {
        try await create(document, options: CallOptions())
    }

    /// Deletes revision `revision` of a document.
    @discardableResult
    public func delete(_ id: String, revision: String) async throws(CouchError) -> DocumentWriteResponse {
        try await delete(id, revision: revision, options: CallOptions())
    }

    /// Writes many documents in one request (`_bulk_docs`).
    @discardableResult
    public func bulk<Document: Encodable & Sendable>(_ documents: [Document]) async throws(CouchError)
        -> [BulkWriteResult]
    {
        try await bulk(documents, options: CallOptions())
    }

    /// `_all_docs`, with the documents when `range.includeDocs` is set.
    public func allDocs<Document: Decodable & Sendable>(
        as type: Document.Type = JSONValue.self, range: KeyRangeOptions = KeyRangeOptions()
    ) async throws(CouchError) -> AllDocsOperation<Document>.Response {
        try await allDocs(as: type, range: range, options: CallOptions())
    }

    /// `_all_docs` streamed row by row, with back-pressure.
    public func allDocsRows<Document: Decodable & Sendable>(
        as type: Document.Type = JSONValue.self, range: KeyRangeOptions = KeyRangeOptions()
    ) -> CouchRowStream<AllDocsOperation<Document>.Row> {
        allDocsRows(as: type, range: range, options: CallOptions())
    }

    /// A Mango query (`_find`) with fields, sort, limit, bookmark and index choice.
    public func find<Document: Decodable & Sendable>(_ query: MangoQuery, as type: Document.Type = JSONValue.self)
        async throws(CouchError) -> FindOperation<Document>.Response
    {
        try await find(query, as: type, options: CallOptions())
    }

    /// A Mango query (`_find`) with a selector alone.
    public func find<Document: Decodable & Sendable>(_ selector: Selector, as type: Document.Type = JSONValue.self)
        async throws(CouchError) -> FindOperation<Document>.Response
    {
        try await find(MangoQuery(selector: selector), as: type, options: CallOptions())
    }

    /// A view of a design document.
    public func view<Key: Decodable & Sendable, Value: Decodable & Sendable>(
        design: String, view: String, keys: Key.Type = JSONValue.self, values: Value.Type = JSONValue.self,
        query: ViewQueryOptions = ViewQueryOptions()
    ) async throws(CouchError) -> QueryViewOperation<Key, Value, JSONValue>.Response {
        try await self.view(
            design: design, view: view, keys: keys, values: values, query: query, options: CallOptions())
    }

    /// One batch of the changes feed since `since` (from the start when nil).
    public func changes<Document: Decodable & Sendable>(
        since: CouchSequence? = nil, limit: Int? = nil, includeDocs: Bool = false,
        as type: Document.Type = JSONValue.self
    ) async throws(CouchError) -> ChangesOperation<Document>.Response {
        try await changes(since: since, limit: limit, includeDocs: includeDocs, as: type, options: CallOptions())
    }

    /// An attachment's bytes and content type.
    public func attachment(_ name: String, of documentID: String) async throws(CouchError)
        -> GetAttachmentOperation.Response
    {
        try await attachment(name, of: documentID, options: CallOptions())
    }

    /// Adds or replaces an attachment; without `revision` the document is created with it.
    @discardableResult
    public func putAttachment(
        _ name: String, of documentID: String, data: Data, contentType: String, revision: String? = nil
    ) async throws(CouchError) -> DocumentWriteResponse {
        try await putAttachment(
            name, of: documentID, data: data, contentType: contentType, revision: revision, options: CallOptions())
    }

    /// Removes an attachment.
    @discardableResult
    public func deleteAttachment(_ name: String, of documentID: String, revision: String) async throws(CouchError)
        -> DocumentWriteResponse
    {
        try await deleteAttachment(name, of: documentID, revision: revision, options: CallOptions())
    }

    /// The ids of the documents that have conflicts.
    public func conflictedDocumentIDs() async throws(CouchError) -> [String] {
        try await conflictedDocumentIDs(options: CallOptions())
    }
}

extension DocumentStore {
    /// The changes feed as an `AsyncSequence`, with the follower's default options (listening from
    /// the start of the feed).
    public func changeFeed<Document: Decodable & Sendable>(as type: Document.Type) -> ChangesFollower<Document> {
        changeFeed(as: type, options: ChangesFollower<Document>.Options())
    }

    /// Writes an attachment into `file`, with no size limit of its own.
    @discardableResult
    public func downloadAttachment(_ name: String, of documentID: String, to file: URL) async throws(CouchError)
        -> AttachmentDownload
    {
        try await downloadAttachment(name, of: documentID, to: file, options: DownloadOptions())
    }
}
