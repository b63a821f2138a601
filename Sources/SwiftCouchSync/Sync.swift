import Foundation
import SwiftCouch

/// Two-way sync between a local database and a remote one: a pull replication (remote → local)
/// and a push replication (local → remote) run side by side, with one state and one event stream.
///
/// ```swift
/// var options = ReplicationOptions(continuous: true)
/// options.conflictResolver = { batch in
///     for id in batch.conflictedIDs {
///         let leaves = try await batch.database.conflictLeaves(of: id, as: JSONValue.self)
///         try await batch.database.resolveConflicts(of: id, keeping: leaves[0].rev!)
///     }
/// }
/// let sync = Sync(local: .local(notes), remote: .remote(client.database("notes")), options: options)
/// Task { for await event in sync.events() { print(event.direction, event.event) } }
/// sync.start()
/// // later
/// await sync.stop()
/// ```
///
/// The conflict resolver is called on the pulled side only (after each pulled batch, with the
/// batch's conflicted ids on the local database); a resolution is an ordinary local write, which
/// the push carries to the remote side, so the conflict is gone on both after the next sync.
public final class Sync: Sendable {
    /// The replication from the remote database to the local one.
    public let pull: Replicator
    /// The replication from the local database to the remote one.
    public let push: Replicator

    /// Makes the two replications with `options` (the resolver used by the pull only).
    public init(local: SyncEndpoint, remote: SyncEndpoint, options: ReplicationOptions = .init()) {
        var pullOptions = options
        pullOptions.direction = .pull
        var pushOptions = options
        pushOptions.direction = .push
        pushOptions.conflictResolver = nil
        pull = Replicator(source: remote, target: local, options: pullOptions)
        push = Replicator(source: local, target: remote, options: pushOptions)
    }

    /// The counts of both directions.
    public struct Summary: Sendable, Hashable {
        /// Remote → local.
        public var pull: ReplicationSummary
        /// Local → remote.
        public var push: ReplicationSummary
    }

    /// One event of either direction.
    public struct Event: Sendable {
        /// Which replication reported it.
        public var direction: ReplicationDirection
        /// What it reported.
        public var event: ReplicationEvent
    }

    /// Both directions' events from now on, in the order each reported them; ends when both ended.
    public func events() -> AsyncStream<Event> {
        let pulled = pull.events()
        let pushed = push.events()
        let (stream, continuation) = AsyncStream<Event>.makeStream(bufferingPolicy: .unbounded)
        let task = Task {
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await event in pulled { continuation.yield(Event(direction: .pull, event: event)) }
                }
                group.addTask {
                    for await event in pushed { continuation.yield(Event(direction: .push, event: event)) }
                }
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// The state of both together: `failed` if either failed, else `offline` if either is offline,
    /// `connecting` or `busy` if either is, `idle` when both are idle (or one idle and one
    /// stopped), `stopped` when both are stopped.
    public var state: ReplicationState { Self.combined(pull.state, push.state) }

    static func combined(_ first: ReplicationState, _ second: ReplicationState) -> ReplicationState {
        let states = [first, second]
        if let failed = states.first(where: { $0.name == "failed" }) { return failed }
        for name in ["offline", "connecting", "busy", "idle"] where states.contains(where: { $0.name == name }) {
            return states.first { $0.name == name } ?? first
        }
        return .stopped
    }

    /// Runs both directions at once. One-shot: returns both counts when both have finished (each
    /// with its final checkpoint written). Continuous: returns when stopped.
    /// - Throws: the first direction's error; the other direction is stopped then.
    @discardableResult
    public func run() async throws(CouchError) -> Summary {
        let pull = self.pull
        let push = self.push
        let result: Result<Summary, CouchError> = await withTaskGroup(
            of: (ReplicationDirection, Result<ReplicationSummary, CouchError>).self
        ) { group in
            group.addTask { (.pull, await Result(awaiting: { () async throws(CouchError) in try await pull.run() })) }
            group.addTask { (.push, await Result(awaiting: { () async throws(CouchError) in try await push.run() })) }
            var summary = Summary(pull: ReplicationSummary(), push: ReplicationSummary())
            var failure: CouchError?
            for await (direction, outcome) in group {
                switch outcome {
                case .success(let counts):
                    if direction == .pull { summary.pull = counts } else { summary.push = counts }
                case .failure(let error):
                    if failure == nil {
                        failure = error
                        await pull.stop()
                        await push.stop()
                    }
                }
            }
            if let failure { return .failure(failure) }
            return .success(summary)
        }
        return try result.get()
    }

    /// Starts ``run()`` in a task of its own; end it with ``stop(timeout:)``.
    public func start() {
        Task { [self] in _ = try? await run() }
    }

    /// Stops both directions (see ``Replicator/stop(timeout:)``).
    public func stop(timeout: TimeInterval = 10) async {
        async let first: Void = pull.stop(timeout: timeout)
        async let second: Void = push.stop(timeout: timeout)
        _ = await (first, second)
    }
}

extension Result where Failure == CouchError {
    /// The result of an async call with typed throws.
    init(awaiting body: () async throws(CouchError) -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}
