import Foundation
import SwiftCouch
import SwiftCouchStore

/// CouchDB's replication protocol between two databases, local or remote: copies every revision
/// the target lacks (conflicts and tombstones included) and records checkpoints on both sides so
/// that the next run starts where this one left off.
///
/// ```swift
/// let replicator = Replicator(
///     source: .remote(client.database("notes")), target: .local(localNotes),
///     options: ReplicationOptions(createTarget: true))
/// Task { for await event in replicator.events() { print(event) } }
/// let summary = try await replicator.run()
/// print(summary.docsWritten)
/// ```
///
/// One-shot (the default): ``run()`` returns once every change the source had when it started
/// reading is on the target and the final checkpoint is written. Continuous
/// (``ReplicationOptions/continuous``): ``run()`` (or ``start()``) follows the source until
/// ``stop(timeout:)``, reconnecting after drops with a backoff.
///
/// See the `Protocol` article of this module for what is written when, what is retried and what
/// the events promise.
public final class Replicator: Sendable {
    /// Where revisions are read.
    public let source: SyncEndpoint
    /// Where revisions are written.
    public let target: SyncEndpoint
    /// How the replication runs.
    public let options: ReplicationOptions
    /// The replication id: the checkpoints are `_local/<replicationID>` on both sides.
    public let replicationID: String
    /// The direction reported in events.
    public let direction: ReplicationDirection

    let hub = EventHub()
    let hooks = LockedBox(ReplicatorHooks())
    private let control = LockedBox(Control())

    struct Control {
        var task: Task<ReplicationSummary, any Error>?
        var stopRequested = false
        var state: ReplicationState = .stopped
    }

    /// Makes a replicator; nothing is sent until ``run()`` or ``start()``.
    public init(source: SyncEndpoint, target: SyncEndpoint, options: ReplicationOptions = .init()) {
        self.source = source
        self.target = target
        self.options = options
        self.replicationID = ReplicationID.make(source: source, target: target, options: options)
        self.direction = options.direction ?? (source.isLocal && !target.isLocal ? .push : .pull)
    }

    /// A new sequence of this replicator's events from now on (each call its own; earlier events are
    /// not replayed). It ends when the replication ends (completed, stopped or failed).
    public func events() -> AsyncStream<ReplicationEvent> { hub.subscribe() }

    /// The current state.
    public var state: ReplicationState { control.current.state }

    func setState(_ state: ReplicationState) {
        control.withLock { $0.state = state }
        hub.emit(.state(state))
    }

    /// Runs the replication in the calling task: one-shot, it returns the counts once the final
    /// checkpoint is written; continuous, it returns when ``stop(timeout:)`` is called (or the task is
    /// cancelled) with the counts so far.
    /// - Throws: `CouchError` saying what failed (the database, the request, CouchDB's
    ///   answer); a one-shot run that fails leaves the last checkpoint written, so the next run
    ///   resumes from there.
    @discardableResult
    public func run() async throws(CouchError) -> ReplicationSummary {
        try options.validate()
        let task = control.withLock { control -> Task<ReplicationSummary, any Error>? in
            guard control.task == nil else { return nil }
            control.stopRequested = false
            let task = Task { [self] () async throws -> ReplicationSummary in
                try await ReplicationDriver(replicator: self).run()
            }
            control.task = task
            return task
        }
        guard let task else {
            throw CouchError.validation("This replicator is already running; make another or wait for it to end.")
        }
        let result = await withTaskCancellationHandler {
            await task.result
        } onCancel: {
            task.cancel()
        }
        control.withLock { $0.task = nil }
        hub.finish()
        switch result {
        case .success(let summary): return summary
        case .failure(let error as CouchError): throw error
        case .failure(let error): throw CouchError(kind: .transport, message: "\(error)", underlying: error)
        }
    }

    /// Starts ``run()`` in a task of its own (for continuous replications an app keeps running);
    /// follow it with ``events()``, end it with ``stop(timeout:)``.
    public func start() {
        Task { [self] in _ = try? await run() }
    }

    /// Stops the replication: the request in flight is cancelled, no checkpoint is written after
    /// it (the last one written stands), the state becomes `stopped`. Returns once the replication
    /// has ended, or after `timeout` seconds at the latest.
    public func stop(timeout: TimeInterval = 10) async {
        let task = control.withLock { control -> Task<ReplicationSummary, any Error>? in
            control.stopRequested = true
            return control.task
        }
        guard let task else { return }
        task.cancel()
        let deadline = Date().addingTimeInterval(timeout)
        while control.current.task != nil, Date() < deadline {
            try? await Task.sleep(nanoseconds: 5_000_000)
        }
    }

    var stopRequested: Bool { control.current.stopRequested }
}

/// A peer was deleted and created again (its `instance_start_time` changed): start over.
struct PeerRecreated: Error {
    /// Which database, in CouchDB's words.
    var reason: String
}

/// What tests may run inside a replication (internal; set before ``Replicator/run()``).
struct ReplicatorHooks: Sendable {
    /// Called after each batch is written and counted, before the checkpoint that may follow it.
    var batchCommitted: (@Sendable () async throws -> Void)?
}

/// Runs sessions: once (one-shot), or again after each transient failure (continuous).
struct ReplicationDriver {
    let replicator: Replicator

    func run() async throws -> ReplicationSummary {
        var backoff = replicator.options.backoff
        var total = ReplicationSummary()
        var recreations = 0
        while true {
            let session = ReplicationSession(replicator: replicator)
            do {
                let summary = try await session.run()
                total.add(summary)
                if !replicator.options.continuous { replicator.hub.emit(.completed(total)) }
                replicator.setState(.stopped)
                return total
            } catch let recreated as PeerRecreated {
                total.add(session.summary)
                // Counted in a row: a session that caught up in between starts the count again.
                recreations = session.caughtUp ? 1 : recreations + 1
                if recreations > 3 {
                    let error = CouchError.validation(
                        "A database of the replication was deleted and created again \(recreations) times in a row "
                            + "(\(recreated.reason)).")
                    replicator.setState(.failed(error))
                    throw error
                }
                replicator.hub.emit(.restarting(reason: recreated.reason))
                continue
            } catch let error as CouchError {
                total.add(session.summary)
                if Task.isCancelled || replicator.stopRequested {
                    replicator.setState(.stopped)
                    return total
                }
                guard replicator.options.continuous, Self.isTransient(error) else {
                    replicator.setState(.failed(error))
                    throw error
                }
                if session.caughtUp { backoff.reset() }
                replicator.setState(.offline)
                let wait = backoff.next(retryAfter: error.retryAfter)
                replicator.hub.emit(
                    .retrying(
                        ReplicationRetry(
                            delay: wait, retryAfter: error.retryAfter, failures: backoff.attempt, error: error)))
                try? await Task.sleep(nanoseconds: UInt64(wait * 1_000_000_000))
                if Task.isCancelled || replicator.stopRequested {
                    replicator.setState(.stopped)
                    return total
                }
            } catch {
                total.add(session.summary)
                if Task.isCancelled || replicator.stopRequested {
                    replicator.setState(.stopped)
                    return total
                }
                let failure = CouchError(kind: .transport, message: "\(error)", underlying: error)
                replicator.setState(.failed(failure))
                throw failure
            }
        }
    }

    /// Errors a retry can fix: a lost connection, a timeout, 408, 429, 5xx.
    static func isTransient(_ error: CouchError) -> Bool {
        if error.kind == .transport { return true }
        guard let status = error.statusCode else { return false }
        return status == 408 || status == 429 || status >= 500
    }
}
