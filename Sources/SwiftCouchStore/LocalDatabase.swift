import Foundation
import SwiftCouch

/// One database of a ``LocalStore``, on this device: the calls of a remote database handle
/// (`DocumentStore`), answered in process by CouchDB's engine.
///
/// ```swift
/// let notes = try await LocalDatabase.open(at: directory)
/// let written = try await notes.put(Note(text: "offline"), id: "first")
/// for try await change in notes.changeFeed(as: Note.self) { print(change.id) }
/// ```
///
/// A value: cheap to copy, `Sendable`, safe to use from many tasks at once (each database has its
/// own lock in the engine; calls run on the engine's threads, never blocking Swift concurrency's).
/// Errors are `CouchError`s with CouchDB's status, `error` and `reason`, exactly as a remote
/// database answers; invalid names, ids and revisions are refused before the engine sees them.
public struct LocalDatabase: DocumentStore {
    /// The store the database belongs to.
    public let store: LocalStore
    /// The database's name.
    public let name: String

    /// The store's in-process client: run any SwiftCouch operation against this database with it.
    public var client: CouchDBClient { store.client }

    /// The remote-style handle every call goes through.
    private var handle: Database { store.client.database(name) }

    init(store: LocalStore, name: String) {
        self.store = store
        self.name = name
    }

    /// Opens (creating when needed) the store in `directory` and its database `name`: for an app
    /// with one local database. Close it with ``close()``.
    /// - Parameters:
    ///   - directory: a file URL of a directory for the store alone.
    ///   - name: the database's name. Defaults to `"local"`.
    ///   - configuration: see ``LocalStore/open(at:configuration:)``.
    public static func open(at directory: URL, name: String = "local", configuration: Configuration = Configuration())
        async throws(CouchError) -> LocalDatabase
    {
        let store = try await LocalStore.open(at: directory, configuration: configuration)
        do {
            return try await store.database(name)
        } catch {
            store.close()
            throw error
        }
    }

    /// Closes the database's store (and so every handle of it): see ``LocalStore/close()``.
    public func close() { store.close() }

    // MARK: DocumentStore

    public func info(options: CallOptions = CallOptions()) async throws(CouchError) -> DatabaseInfo {
        try await handle.info(options: options)
    }

    public func get<Document: Decodable & Sendable>(
        _ id: String, as type: Document.Type = Document.self, revision: String? = nil,
        options: CallOptions = CallOptions()
    ) async throws(CouchError) -> Document {
        try await handle.get(id, as: type, revision: revision, options: options)
    }

    @discardableResult
    public func put<Document: Encodable & Sendable>(
        _ document: Document, id: String, revision: String? = nil, options: CallOptions = CallOptions()
    ) async throws(CouchError) -> DocumentWriteResponse {
        try await handle.put(document, id: id, revision: revision, options: options)
    }

    @discardableResult
    public func create<Document: Encodable & Sendable>(_ document: Document, options: CallOptions = CallOptions())
        async throws(CouchError) -> DocumentWriteResponse
    {
        try await handle.create(document, options: options)
    }

    @discardableResult
    public func delete(_ id: String, revision: String, options: CallOptions = CallOptions()) async throws(CouchError)
        -> DocumentWriteResponse
    {
        try await handle.delete(id, revision: revision, options: options)
    }

    @discardableResult
    public func bulk<Document: Encodable & Sendable>(_ documents: [Document], options: CallOptions = CallOptions())
        async throws(CouchError) -> [BulkWriteResult]
    {
        try await handle.bulk(documents, options: options)
    }

    public func allDocs<Document: Decodable & Sendable>(
        as type: Document.Type = JSONValue.self, range: KeyRangeOptions = KeyRangeOptions(),
        options: CallOptions = CallOptions()
    ) async throws(CouchError) -> AllDocsOperation<Document>.Response {
        try await handle.allDocs(as: type, range: range, options: options)
    }

    public func allDocsRows<Document: Decodable & Sendable>(
        as type: Document.Type = JSONValue.self, range: KeyRangeOptions = KeyRangeOptions(),
        options: CallOptions = CallOptions()
    ) -> CouchRowStream<AllDocsOperation<Document>.Row> {
        handle.allDocsRows(as: type, range: range, options: options)
    }

    public func find<Document: Decodable & Sendable>(
        _ query: MangoQuery, as type: Document.Type = JSONValue.self, options: CallOptions = CallOptions()
    ) async throws(CouchError) -> FindOperation<Document>.Response {
        try await handle.find(query, as: type, options: options)
    }

    public func view<Key: Decodable & Sendable, Value: Decodable & Sendable>(
        design: String, view: String, keys: Key.Type = JSONValue.self, values: Value.Type = JSONValue.self,
        query: ViewQueryOptions = ViewQueryOptions(), options: CallOptions = CallOptions()
    ) async throws(CouchError) -> QueryViewOperation<Key, Value, JSONValue>.Response {
        try await handle.view(design: design, view: view, keys: keys, values: values, query: query, options: options)
    }

    public func changes<Document: Decodable & Sendable>(
        since: CouchSequence? = nil, limit: Int? = nil, includeDocs: Bool = false,
        as type: Document.Type = JSONValue.self, options: CallOptions = CallOptions()
    ) async throws(CouchError) -> ChangesOperation<Document>.Response {
        try await handle.changes(since: since, limit: limit, includeDocs: includeDocs, as: type, options: options)
    }

    /// The changes feed as an `AsyncSequence`. In `.listen` a wait for the next
    /// change holds one of the engine's threads (not a Swift concurrency thread) until a change
    /// comes, the long-poll times out, or the store closes.
    public func changeFeed<Document: Decodable & Sendable>(
        as type: Document.Type, options: ChangesFollower<Document>.Options = ChangesFollower<Document>.Options()
    ) -> ChangesFollower<Document> {
        handle.changeFeed(as: type, options: options)
    }

    public func attachment(_ name: String, of documentID: String, options: CallOptions = CallOptions())
        async throws(CouchError) -> GetAttachmentOperation.Response
    {
        try await handle.attachment(name, of: documentID, options: options)
    }

    @discardableResult
    public func putAttachment(
        _ name: String, of documentID: String, data: Data, contentType: String, revision: String? = nil,
        options: CallOptions = CallOptions()
    ) async throws(CouchError) -> DocumentWriteResponse {
        try await handle.putAttachment(
            name, of: documentID, data: data, contentType: contentType, revision: revision, options: options)
    }

    @discardableResult
    public func deleteAttachment(
        _ name: String, of documentID: String, revision: String, options: CallOptions = CallOptions()
    ) async throws(CouchError) -> DocumentWriteResponse {
        try await handle.deleteAttachment(name, of: documentID, revision: revision, options: options)
    }

    /// Adds or replaces an attachment with the bytes of `file`. The file is read a piece at a time as the engine
    /// writes it to the database's file in chunks (its digest computed on the way), so memory stays bounded by a
    /// chunk or two whatever the file's size; nothing is written when the file cannot be read whole.
    @discardableResult
    public func uploadAttachment(
        _ name: String, of documentID: String, from file: URL, contentType: String, revision: String? = nil
    ) async throws(CouchError) -> DocumentWriteResponse {
        try await handle.uploadAttachment(
            name, of: documentID, from: file, contentType: contentType, revision: revision)
    }

    @discardableResult
    public func downloadAttachment(
        _ name: String, of documentID: String, to file: URL, options: DownloadOptions = DownloadOptions()
    ) async throws(CouchError) -> AttachmentDownload {
        try await handle.downloadAttachment(name, of: documentID, to: file, options: options)
    }

    /// The ids of the documents that have conflicts, in `_all_docs` order, read from the engine's
    /// index of conflicted documents, kept as revisions are written and purged: no scan, whatever
    /// the database's size.
    public func conflictedDocumentIDs(options: CallOptions = CallOptions()) async throws(CouchError) -> [String] {
        try CouchValidation.validateDatabaseName(name)
        return try await store.conflictedDocumentIDs(inDatabase: name)
    }

    // MARK: Maintenance

    /// Compacts the database (`_compact`) and returns once the compaction has finished: old
    /// revisions' bodies and attachments are dropped (their ids stay in the revision tree).
    public func compact() async throws(CouchError) {
        _ = try await client.value(CompactDatabaseOperation(database: name))
        while try await info().compactRunning == true {
            try? await Task.sleep(nanoseconds: 10_000_000)
        }
    }
}
