import Foundation

/// Follows a database's `_changes` feed and never silently stops.
///
/// Iterate it (`for try await change in follower`) to receive every change at least once, in the
/// order the server sends them — which is not write order: a database of several shards (CouchDB
/// 3's default, and every cluster) interleaves its shards. Requests are made as the consumer asks for more (a slow consumer does not make the
/// follower buffer more than one batch). After a transient fault — a network error, a lost
/// connection, a server restart, a timeout (also `408`), a `429` or a 5xx — the follower waits
/// (exponential backoff with full jitter) and resumes from the last sequence it saw, so nothing is
/// skipped. Anything retrying cannot fix ends the iteration with its ``CouchError``: any other
/// 4xx (a 401 after the session's own renewal and replay) or 3xx, and an answer that cannot be
/// right — one that does not decode (`.decoding`: malformed JSON, a batch without `last_seq`, a
/// row or line past ``Configuration/maximumStreamedElementSize``), a body past a size or
/// compression limit, or a full batch whose `last_seq` is the sequence it was asked from (a feed
/// that does not advance).
///
/// A continuous feed (``Options/continuous``) lives as long as the server keeps it open: one
/// kept alive by heartbeats may last forever, which is what following means; one that stalls
/// (no byte, not even a heartbeat) ends at the request timeout between bytes and is reopened, as is a
/// response the server ends; one that ends without delivering a change is reopened after a
/// backoff, so a server that closes every feed at once is not asked again in a tight loop. In the
/// same way, a long-poll answered with no change sooner than CouchDB would answer one (under a
/// second, or half of ``Options/longPollTimeout``) is followed by a backoff before the next.
///
/// **Checkpoints and the delivery guarantee.** Every change carries its own
/// ``Change/checkpoint``: save it once the change is handled, and pass it as ``Options/since``
/// later to resume right after that change. Resuming from a saved checkpoint never skips a
/// change, and never delivers the checkpointed change again. Delivery is still *at least once*,
/// not exactly once: a change handled but not yet checkpointed when the process stops is
/// delivered again, and CouchDB itself may repeat changes after a resume on a cluster (a shard
/// copy that answers from an earlier position) — so make handling a change idempotent (a
/// document's latest revision is what matters, and it is the same when seen twice).
///
/// ``lastProcessedSequence`` is the follower's own, coarser checkpoint: the sequence up to which
/// the consumer has finished with every change, where a change counts as finished only when the
/// consumer asks for the next one. Saved right after handling a change it is one change behind
/// (that change comes again on resume); use the change's ``Change/checkpoint`` instead.
///
/// ```swift
/// let follower = ChangesFollower<Album>(client: client, database: "albums",
///                                      options: .init(mode: .listen, since: savedSequence, includeDocs: true))
/// for try await change in follower {
///     handle(change)
///     save(change.checkpoint)
/// }
/// ```
public final class ChangesFollower<Document: Decodable & Sendable>: AsyncSequence, Sendable {
    public typealias Element = Change<Document>

    /// Whether to stop at the end of the feed or wait for more forever.
    public enum Mode: Sendable, Hashable {
        /// Follow forever (long-poll requests), waiting for new changes.
        case listen
        /// Stop when the feed has no more changes (normal requests).
        case finite
    }

    /// How the follower reads the feed. Every option has a default.
    public struct Options: Sendable {
        /// ``Mode/listen`` or ``Mode/finite``. Defaults to ``Mode/listen``.
        public var mode: Mode = .listen
        /// Where to start: nil for the beginning, ``CouchSequence/now`` for new changes only, or
        /// a sequence saved from ``ChangesFollower/lastProcessedSequence``. Defaults to nil.
        public var since: CouchSequence? = nil
        /// Changes per request (`limit`). Defaults to 1,000.
        public var batchSize: Int = 1_000
        /// Include each document (`include_docs`). Defaults to false.
        public var includeDocs: Bool = false
        /// Which changes (`filter`). Defaults to nil (all).
        public var filter: ChangesFilter? = nil
        /// `style=all_docs` for every leaf revision. Defaults to nil (CouchDB's `main_only`).
        public var style: ChangesStyle? = nil
        /// How long one long-poll waits for a change before answering empty, in milliseconds.
        /// Defaults to 55,000 (under common 60-second proxy timeouts).
        public var longPollTimeout: Int = 55_000
        /// How often the server sends a keep-alive newline while waiting, in milliseconds.
        /// Defaults to nil (CouchDB then uses `timeout` alone).
        public var heartbeat: Int? = nil
        /// In ``Mode/listen``, read one long-lived `feed=continuous` response (newline-delimited
        /// rows, streamed with back-pressure) instead of repeated long-polls. Defaults to false.
        public var continuous: Bool = false
        /// The first backoff after an error, in seconds. Defaults to 0.1.
        public var initialBackoff: TimeInterval = 0.1
        /// The longest backoff, in seconds. Defaults to 60.
        public var maximumBackoff: TimeInterval = 60

        public init(
            mode: Mode = .listen, since: CouchSequence? = nil, batchSize: Int = 1_000, includeDocs: Bool = false,
            filter: ChangesFilter? = nil
        ) {
            self.mode = mode
            self.since = since
            self.batchSize = batchSize
            self.includeDocs = includeDocs
            self.filter = filter
        }
    }

    /// Statuses that end the follow: retrying cannot change them. Every other 3xx and 4xx but
    /// `408` and `429` ends it too (see ``isTransient(_:)``).
    public static var terminalStatuses: Set<Int> { [400, 401, 403, 404] }

    /// Whether the follower retries after `error`: only transient faults — a transport error
    /// (a lost connection, a refused connection, a timeout) other than a size or compression
    /// limit, `408`, `429` and 5xx statuses.
    public static func isTransient(_ error: CouchError) -> Bool {
        if let status = error.statusCode {
            return status == 408 || status == 429 || (500..<600).contains(status)
        }
        guard error.kind == .transport else { return false }
        // A body past maximumResponseBodySize or a compression limit is the same body next time.
        if let urlError = error.underlying as? URLError, urlError.code == .dataLengthExceedsMaximum { return false }
        if let inner = error.underlying as? CouchError { return isTransient(inner) }
        return true
    }

    /// The longest backoff the follower ever waits, whatever ``Options/maximumBackoff`` says: an hour.
    static var backoffCap: TimeInterval { 3_600 }

    /// The ceiling of the `attempt`-th backoff (from 1): `initial × 2^(attempt-1)`, at most `maximum`,
    /// with settings that are not finite or are negative read as their defaults (0.1 s, 60 s) and
    /// the result within 0…``backoffCap``, so no setting can trap or wait for ever.
    static func backoffCeiling(attempt: Int, initial: TimeInterval, maximum: TimeInterval) -> TimeInterval {
        let initial = initial.isFinite && initial >= 0 ? initial : 0.1
        let maximum = maximum.isFinite && maximum >= 0 ? Swift.min(maximum, backoffCap) : 60
        let exponent = attempt > 1 ? Double(Swift.min(attempt - 1, 64)) : 0
        let grown = initial * pow(2, exponent)
        return grown.isFinite ? Swift.min(grown, maximum) : maximum
    }

    private struct State {
        /// Where the next request starts (the last batch's `last_seq`).
        var since: CouchSequence?
        /// See ``ChangesFollower/lastProcessedSequence``.
        var processed: CouchSequence?
        /// The current batch and the index of the next change to hand out.
        var batch: [Change<Document>] = []
        var position = 0
        var finished = false
        /// Consecutive failed requests, for the backoff.
        var errors = 0
        /// The open continuous feed, if any.
        var feed: CouchRowStream<Change<Document>>.Iterator?
        /// The change handed out last from a continuous feed.
        var lastHanded: CouchSequence?
        /// Whether the open continuous feed has delivered a change.
        var feedDelivered = false
    }

    private let client: CouchDBClient
    private let database: String
    private let options: Options
    private let state: Locked<State>
    /// Called with each error the follower recovers from (for logging); nil by default.
    private let onRetry: (@Sendable (CouchError, TimeInterval) -> Void)?

    /// Creates a follower.
    /// - Parameters:
    ///   - client: the client whose session the feed goes through.
    ///   - database: the database to follow.
    ///   - options: the mode (finite or listen), where to start, filters and batch sizes.
    ///   - onRetry: called with each error the follower recovers from and the backoff
    ///     it waits, for logging or metrics. Defaults to nil.
    public init(
        client: CouchDBClient, database: String, options: Options = Options(),
        onRetry: (@Sendable (CouchError, TimeInterval) -> Void)? = nil
    ) {
        self.client = client
        self.database = database
        var options = options
        options.batchSize = Swift.max(1, options.batchSize)
        self.options = options
        self.state = Locked(State(since: options.since, processed: options.since))
        self.onRetry = onRetry
    }

    /// The sequence up to which every change has been handed to the consumer and the consumer
    /// has asked for the next one; resume from it with ``Options/since``.
    public var lastProcessedSequence: CouchSequence? { state.current.processed }

    public func makeAsyncIterator() -> Iterator { Iterator(follower: self) }

    /// Reads the feed as the consumer asks.
    public struct Iterator: AsyncIteratorProtocol {
        let follower: ChangesFollower

        public mutating func next() async throws -> Change<Document>? {
            try await follower.next()
        }
    }

    private func next() async throws -> Change<Document>? {
        if options.continuous, options.mode == .listen { return try await nextContinuous() }
        state.withLock { state in
            // The change handed out before this call has been processed; after the last one of a
            // batch, everything up to the batch's `last_seq` has.
            if state.position > 0 {
                state.processed =
                    state.position == state.batch.count ? state.since : state.batch[state.position - 1].seq
            }
        }
        while true {
            if let change = popBuffered() { return change }
            if state.current.finished { return nil }
            try Task.checkCancellation()
            try await fetchBatch()
        }
    }

    /// Continuous mode: one streamed response, reopened from the last sequence when it ends or fails.
    private func nextContinuous() async throws -> Change<Document>? {
        state.withLock { state in
            if let handed = state.lastHanded { state.processed = handed }
        }
        while true {
            if state.current.finished { return nil }
            try Task.checkCancellation()
            var feed = state.withLock { state -> CouchRowStream<Change<Document>>.Iterator in
                if let open = state.feed { return open }
                var base = ChangesOperation<Document>(
                    database: database, since: state.since, includeDocs: options.includeDocs, style: options.style,
                    filter: options.filter)
                base.heartbeat = options.heartbeat ?? 30_000
                let stream = client.rows(ContinuousChangesOperation(base), bufferSize: options.batchSize)
                let iterator = stream.makeAsyncIterator()
                state.feed = iterator
                state.feedDelivered = false
                return iterator
            }
            do {
                if let change = try await feed.next() {
                    state.withLock { state in
                        state.errors = 0
                        state.since = change.seq
                        state.lastHanded = change.seq
                        state.feedDelivered = true
                    }
                    return change
                }
                // The server ended the response (its timeout): reopen from where it stopped; after
                // a backoff when it delivered nothing (a server that ends every feed at once).
                let delivered = state.withLock { state -> Bool in
                    state.feed = nil
                    return state.feedDelivered
                }
                if !delivered { try await backOff() }
            } catch let error as CouchError {
                state.withLock { $0.feed = nil }
                try await recover(from: error)
            }
        }
    }

    /// Ends the follow unless `error` is transient; then waits out a jittered backoff.
    private func recover(from error: CouchError) async throws {
        if error.kind == .cancelled { throw error }
        guard Self.isTransient(error) else {
            state.withLock { $0.finished = true }
            throw error
        }
        try await backOff(after: error)
    }

    /// Waits the next backoff (full jitter), telling `onRetry` about `error` if there is one.
    private func backOff(after error: CouchError? = nil) async throws {
        let attempt = state.withLock { state -> Int in
            state.errors += 1
            return state.errors
        }
        let ceiling = Self.backoffCeiling(
            attempt: attempt, initial: options.initialBackoff, maximum: options.maximumBackoff)
        let delay = Double.random(in: 0...Swift.max(ceiling, 0.001))
        if let error { onRetry?(error, delay) }
        try await Task.sleep(nanoseconds: UInt64(delay * 1_000_000_000))
    }

    private func popBuffered() -> Change<Document>? {
        state.withLock { state in
            guard state.position < state.batch.count else { return nil }
            defer { state.position += 1 }
            return state.batch[state.position]
        }
    }

    private func fetchBatch() async throws {
        let since = state.current.since
        var operation = ChangesOperation<Document>(
            database: database, feed: options.mode == .listen ? .longpoll : .normal, since: since,
            limit: options.batchSize, includeDocs: options.includeDocs, style: options.style, filter: options.filter)
        if options.mode == .listen {
            // CouchDB ignores `timeout` when `heartbeat` is set, and refuses both together here.
            if let heartbeat = options.heartbeat {
                operation.heartbeat = heartbeat
            } else {
                operation.timeout = options.longPollTimeout
            }
        }
        // A long-poll answered with no change sooner than CouchDB would (it waits for a change or
        // its timeout) is asked again only after a backoff: a server or proxy that answers every
        // long-poll at once, empty, is not asked in a tight loop.
        let soonest = options.heartbeat == nil ? Swift.min(1, Double(options.longPollTimeout) / 2_000) : 1
        let asked = DispatchTime.now()
        var answeredTooSoon = false
        do {
            let response = try await client.value(operation)
            // Changes that end where they started cannot be right: asking again would bring the
            // same batch, for ever.
            if let since, response.lastSeq == since, !response.results.isEmpty {
                throw CouchError(
                    kind: .decoding,
                    message:
                        "The changes feed does not advance: a batch of \(response.results.count) changes ended at"
                        + " last_seq \(since), the sequence it was asked from.")
            }
            var results = response.results
            // The last change of a batch resumes after everything the batch covered.
            if !results.isEmpty { results[results.count - 1].checkpoint = response.lastSeq }
            let waited = Double(DispatchTime.now().uptimeNanoseconds - asked.uptimeNanoseconds) / 1e9
            answeredTooSoon = options.mode == .listen && results.isEmpty && waited < soonest
            state.withLock { state in
                if !answeredTooSoon { state.errors = 0 }
                state.batch = results
                state.position = 0
                state.since = response.lastSeq
                if response.results.isEmpty { state.processed = response.lastSeq }
                let caughtUp = (response.pending ?? 0) == 0 || response.results.count < options.batchSize
                if options.mode == .finite, caughtUp {
                    state.finished = true
                }
            }
        } catch {
            try await recover(from: CouchError.wrapping(error))
        }
        if answeredTooSoon { try await backOff() }
    }
}

/// `GET /{db}/_changes?feed=continuous` — the changes feed as one long-lived response of
/// newline-delimited changes, for ``CouchDBClient/rows(_:bufferSize:options:)`` (which streams it with
/// back-pressure). Every option of the wrapped ``ChangesOperation`` applies; its `feed` is
/// replaced by `continuous`. Set `heartbeat` so idle connections stay open, or `timeout` to end.
public struct ContinuousChangesOperation<Document: Decodable & Sendable>: RowStreamingOperation, WrappingOperation,
    IdempotentOperation
{
    public typealias Response = Data
    public typealias Row = Change<Document>

    /// The feed's options.
    public var base: ChangesOperation<Document>

    public init(_ base: ChangesOperation<Document>) {
        var base = base
        base.feed = .normal
        self.base = base
    }

    public func validate() throws(CouchError) { try base.validate() }
    public mutating func serialise() throws { try base.serialise() }
    /// The feed's options as sent (with `feed=continuous`).
    public var wrapped: ChangesOperation<Document> { base }
    public var parameters: [URLQueryItem] {
        [URLQueryItem(name: "feed", value: "continuous")] + base.parameters.filter { $0.name != "feed" }
    }
    public var rowsKey: String? { nil }
    public var isLineDelimited: Bool { true }

    /// Read as a whole (without ``CouchDBClient/rows(_:bufferSize:options:)``), the body's raw bytes.
    public func processResponse(data: Data, httpInfo: HTTPInfo) throws -> Data {
        try throwIfError(data: data, httpInfo: httpInfo)
        return data
    }
}
