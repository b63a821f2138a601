import Foundation
import SwiftCouch
import SwiftCouchStore

/// One side of a replication: a database of a CouchDB or Cloudant server, or a local database.
///
/// Both kinds are spoken to the same way: through SwiftCouch's operations (`_changes`,
/// `_revs_diff`, `_bulk_get`, `_bulk_docs`, `_local` documents), over HTTP for a remote database
/// and in process for a local one (a `LocalDatabase`'s own client). There is no
/// second code path for local databases.
///
/// ```swift
/// let remote = SyncEndpoint.remote(client.database("notes"))
/// let local = SyncEndpoint.local(try await LocalDatabase.open(at: directory, name: "notes"))
/// ```
public enum SyncEndpoint: Sendable {
    /// A database of a server, reached through its client.
    case remote(Database)
    /// A database of a `LocalStore` on this device.
    case local(LocalDatabase)

    /// The client the endpoint's requests go through.
    public var client: CouchDBClient {
        switch self {
        case .remote(let database): return database.client
        case .local(let database): return database.client
        }
    }

    /// The database's name.
    public var databaseName: String {
        switch self {
        case .remote(let database): return database.name
        case .local(let database): return database.name
        }
    }

    /// The endpoint as a `DocumentStore` (for reading conflicts and resolving them).
    public var store: any DocumentStore {
        switch self {
        case .remote(let database): return database
        case .local(let database): return database
        }
    }

    /// Whether the endpoint is a local database.
    public var isLocal: Bool {
        if case .local = self { return true }
        return false
    }

    /// What identifies the endpoint in a replication id: for a remote database the server's scheme,
    /// host, port and path and the database's name (never a user name, password, cookie or
    /// token: the client's URL carries none); for a local one the store directory's standardised
    /// path and the database's name.
    public var identity: String {
        switch self {
        case .remote(let database):
            return Self.normalised(database.client.url) + "|" + database.name
        case .local(let database):
            return "local:" + database.store.directory.standardizedFileURL.path + "|" + database.name
        }
    }

    /// `scheme://host:port/path`, lower-cased scheme and host, the default port written out, no
    /// user information, no query, no trailing slash.
    static func normalised(_ url: URL) -> String {
        let components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        let scheme = (components?.scheme ?? "http").lowercased()
        let host = (components?.host ?? "").lowercased()
        let port = components?.port ?? (scheme == "https" ? 443 : 80)
        var path = components?.path ?? ""
        while path.hasSuffix("/") { path.removeLast() }
        return "\(scheme)://\(host):\(port)\(path)"
    }

    /// A short description for messages (no credentials).
    var label: String {
        switch self {
        case .remote(let database): return Self.normalised(database.client.url) + "/" + database.name
        case .local(let database): return "local database '\(database.name)'"
        }
    }
}

extension SyncEndpoint {
    /// Tries per request, as CouchDB's replicator (`retries_per_request`, 5).
    static let attemptsPerRequest = 5

    /// Runs `operation` on the endpoint's client, trying again after a transient failure (a lost
    /// connection or answer, a timeout, 408, 429, 5xx) up to ``attemptsPerRequest`` times with a
    /// jittered backoff, waiting at least the server's `Retry-After` (at most 5 s a wait). Every
    /// request of a replication is safe to repeat: reads, `_revs_diff`, writes of fixed revisions
    /// (`new_edits=false`), and checkpoint PUTs (a 409 after a lost answer is read back, see the
    /// session).
    func send<Op: CouchOperation>(_ operation: Op, options: CallOptions = CallOptions()) async throws(CouchError)
        -> Op.Response
    {
        try await retrying { () async throws(CouchError) -> Op.Response in
            try await client.value(operation, options: options)
        }
    }

    /// Downloads an attachment to `file`, with the retries of ``send(_:options:)``.
    func download(
        _ operation: GetAttachmentOperation, to file: URL, options: DownloadOptions = DownloadOptions()
    ) async throws(CouchError) -> AttachmentDownload {
        try await retrying { () async throws(CouchError) -> AttachmentDownload in
            try await client.download(operation, to: file, options: options).value
        }
    }

    /// Runs `call` up to ``attemptsPerRequest`` times while it fails transiently (lost answers, drops, 408/429/5xx),
    /// waiting between attempts with backoff and jitter, at least the server's `Retry-After` (capped at 5 s).
    private func retrying<T>(_ call: () async throws(CouchError) -> T) async throws(CouchError) -> T {
        var backoff = ReplicationBackoff(base: 0.2, cap: 5)
        var attempt = 1
        while true {
            do {
                return try await call()
            } catch {
                guard attempt < Self.attemptsPerRequest, ReplicationDriver.isTransient(error), !Task.isCancelled
                else { throw error }
                attempt += 1
                let wait = backoff.next(retryAfter: error.retryAfter)
                try? await Task.sleep(nanoseconds: UInt64(wait * 1_000_000_000))
            }
        }
    }
}
