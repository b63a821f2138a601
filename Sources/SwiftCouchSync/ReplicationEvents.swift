import Foundation
import SwiftCouch

/// What a replication is doing.
public enum ReplicationState: Sendable, CustomStringConvertible {
    /// Checking both databases and reading the checkpoints.
    case connecting
    /// Copying changes.
    case busy
    /// Caught up; in continuous mode, waiting for new changes.
    case idle
    /// Continuous mode: a peer cannot be reached (or answered 429 or 5xx); retrying after a backoff
    /// (a ``ReplicationEvent/retrying(_:)`` event follows, with the planned wait).
    case offline
    /// Stopped by ``Replicator/stop(timeout:)`` or finished (one-shot).
    case stopped
    /// Ended by an error that retrying cannot fix (a missing database, a refused login, ...).
    case failed(CouchError)

    public var description: String {
        switch self {
        case .connecting: return "connecting"
        case .busy: return "busy"
        case .idle: return "idle"
        case .offline: return "offline"
        case .stopped: return "stopped"
        case .failed(let error): return "failed(\(error.message))"
        }
    }

    /// The state's name, without the error of `failed`.
    public var name: String {
        if case .failed = self { return "failed" }
        return description
    }
}

/// The counts of a replication, named as CouchDB's checkpoint history names them.
public struct ReplicationSummary: Sendable, Hashable, Codable {
    /// Revisions asked about with `_revs_diff`.
    public var missingChecked: Int = 0
    /// Revisions the target lacked.
    public var missingFound: Int = 0
    /// Revisions read from the source.
    public var docsRead: Int = 0
    /// Revisions written to the target.
    public var docsWritten: Int = 0
    /// Revisions the target refused (401, 403, 413, 415, invalid attachment names): skipped.
    public var docWriteFailures: Int = 0
    /// Changes the source reported as still to come when last asked (`pending`), if it said.
    public var pending: Int?

    public init() {}

    enum CodingKeys: String, CodingKey {
        case missingChecked = "missing_checked"
        case missingFound = "missing_found"
        case docsRead = "docs_read"
        case docsWritten = "docs_written"
        case docWriteFailures = "doc_write_failures"
        case pending
    }

    mutating func add(_ other: ReplicationSummary) {
        missingChecked += other.missingChecked
        missingFound += other.missingFound
        docsRead += other.docsRead
        docsWritten += other.docsWritten
        docWriteFailures += other.docWriteFailures
        pending = other.pending ?? pending
    }
}

/// One revision written to the target.
public struct ReplicatedDocument: Sendable, Hashable {
    /// The document id.
    public var id: String
    /// The revision written.
    public var rev: String
    /// Which way it went.
    public var direction: ReplicationDirection
    /// Whether the revision is a tombstone.
    public var deleted: Bool
    /// Whether the source's document had other live leaves when read (so the target has them too,
    /// or soon will).
    public var conflicted: Bool
}

/// A revision the target refused.
public struct DeniedWrite: Sendable, Hashable {
    /// The document id.
    public var id: String
    /// The revision refused.
    public var rev: String?
    /// Which way it was going.
    public var direction: ReplicationDirection
    /// CouchDB's `error` (`forbidden`, `unauthorized`, `too_large`, ...).
    public var error: String
    /// CouchDB's `reason` (a `validate_doc_update`'s message, for example).
    public var reason: String?
}

/// A checkpoint written to both databases.
public struct ReplicationCheckpoint: Sendable, Hashable {
    /// The replication id (the `_local` documents' id without `_local/`).
    public var replicationID: String
    /// The source sequence everything up to which is on the target (opaque).
    public var recordedSequence: CouchSequence
    /// The counts of the session so far.
    public var summary: ReplicationSummary
}

/// A continuous replication's wait before it connects again, after a session ended with a failure
/// that retrying can fix (a lost connection, a timeout, 408, 429, 5xx, once the per-request retries
/// gave up).
public struct ReplicationRetry: Sendable {
    /// How long the replication waits before it connects again, in seconds: the backoff's jittered
    /// wait (``ReplicationBackoff``), and at least the server's ``retryAfter``; never more than the
    /// backoff's `cap`.
    public var delay: TimeInterval
    /// The server's `Retry-After`, in seconds, when the failing response had one (as
    /// `CouchError.retryAfter` reads it, before the backoff's cap).
    public var retryAfter: TimeInterval?
    /// Failed sessions in a row, this one included (the backoff's attempt count).
    public var failures: Int
    /// The failure that ended the session.
    public var error: CouchError
}

/// What a replication reports, in order, to every ``Replicator/events()`` sequence.
public enum ReplicationEvent: Sendable {
    /// The state changed.
    case state(ReplicationState)
    /// The counts after a batch.
    case progress(ReplicationSummary)
    /// A revision was written to the target.
    case documentWritten(ReplicatedDocument)
    /// The target refused a revision; it was skipped and counted in `docWriteFailures`.
    case writeDenied(DeniedWrite)
    /// A checkpoint was written to both databases.
    case checkpoint(ReplicationCheckpoint)
    /// The conflict resolver threw; the replication went on.
    case resolverFailed(ids: [String], message: String)
    /// Continuous mode: the session failed with an error retrying can fix; the state is `offline`
    /// and the replication connects again after the retry's `delay` (unless stopped meanwhile).
    case retrying(ReplicationRetry)
    /// A database of the replication was deleted and created again (its `instance_start_time`
    /// changed), noticed at the latest before the next checkpoint: the session is dropped without
    /// a checkpoint and the replication starts over from the checkpoints the databases now hold
    /// (none on a recreated one: from the start). `reason` says which database.
    case restarting(reason: String)
    /// A one-shot replication finished: sent only after its final checkpoint was written, with the
    /// counts of the whole run (every session, as ``Replicator/run()`` returns them).
    case completed(ReplicationSummary)
}

/// Hands events to every subscriber, in order; events before a subscription are not replayed.
final class EventHub: Sendable {
    private let subscribers = LockedBox<[UUID: AsyncStream<ReplicationEvent>.Continuation]>([:])

    func subscribe() -> AsyncStream<ReplicationEvent> {
        let (stream, continuation) = AsyncStream<ReplicationEvent>.makeStream(bufferingPolicy: .unbounded)
        let key = UUID()
        subscribers.withLock { $0[key] = continuation }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.removeValue(forKey: key) }
        }
        return stream
    }

    func emit(_ event: ReplicationEvent) {
        let targets = subscribers.withLock { Array($0.values) }
        for continuation in targets { continuation.yield(event) }
    }

    /// Ends every subscriber's sequence.
    func finish() {
        let targets = subscribers.withLock { subscribers -> [AsyncStream<ReplicationEvent>.Continuation] in
            defer { subscribers.removeAll() }
            return Array(subscribers.values)
        }
        for continuation in targets { continuation.finish() }
    }
}

/// A value behind a lock.
final class LockedBox<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    @discardableResult
    func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }

    var current: Value { withLock { $0 } }
}
