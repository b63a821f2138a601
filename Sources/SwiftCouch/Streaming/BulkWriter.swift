import Foundation

/// Writes any number of documents through `_bulk_docs` in batches, with a bounded number of
/// batches in flight, and reports one result per document.
///
/// Feed it documents one at a time (``add(_:)`` waits while the maximum number of batches is in
/// flight, so a fast producer cannot run ahead of the server) or as an `AsyncSequence`
/// (``write(contentsOf:)``), then call ``finish()``. Rows that fail for a reason worth retrying
/// (`too_many_requests`, `timeout`, `unknown_error`, `internal_server_error`,
/// `service_unavailable`) are sent again in a later batch, with backoff, up to
/// ``Options/rowRetries`` times; conflicts and validation failures are reported, never retried.
/// Whole-request 429s are retried by the session as for every operation.
///
/// ```swift
/// let writer = BulkWriter<Album>(client: client, database: "albums")
/// for album in albums { try await writer.add(album) }
/// let results = try await writer.finish()   // one BulkWriteResult per album, in order
/// ```
public actor BulkWriter<Document: Encodable & Sendable> {
    /// How the writer batches and retries.
    public struct Options: Sendable {
        /// Documents per `_bulk_docs` request. Defaults to 500.
        public var batchSize: Int = 500
        /// Requests in flight at once. Defaults to 4.
        public var maximumBatchesInFlight: Int = 4
        /// How many times a row that failed for a retryable reason is written again. Defaults to 3.
        public var rowRetries: Int = 3
        /// The delay before the first row retry, doubling each time. Defaults to 0.1 seconds.
        public var rowRetryDelay: TimeInterval = 0.1

        public init(batchSize: Int = 500, maximumBatchesInFlight: Int = 4, rowRetries: Int = 3) {
            self.batchSize = batchSize
            self.maximumBatchesInFlight = maximumBatchesInFlight
            self.rowRetries = rowRetries
        }
    }

    /// Row errors worth writing again.
    public static var retryableErrors: Set<String> {
        ["too_many_requests", "timeout", "unknown_error", "internal_server_error", "service_unavailable"]
    }

    private let client: CouchDBClient
    private let database: String
    private let options: Options
    private var pending: [(index: Int, document: Document)] = []
    private var count = 0
    private var inFlight = 0
    private var slotWaiters: [CheckedContinuation<Void, Never>] = []
    private var results: [Int: BulkWriteResult] = [:]
    private var batches: [Task<Void, Never>] = []
    private var finished = false

    /// Creates a writer for `database`.
    public init(client: CouchDBClient, database: String, options: Options = Options()) {
        self.client = client
        self.database = database
        var options = options
        options.batchSize = max(1, options.batchSize)
        options.maximumBatchesInFlight = max(1, options.maximumBatchesInFlight)
        options.rowRetries = max(0, options.rowRetries)
        self.options = options
    }

    /// Queues one document; sends a batch when one is full, waiting while the maximum number of
    /// batches is in flight.
    /// - Throws: ``CouchError`` (`.validation`) after ``finish()``.
    public func add(_ document: Document) async throws(CouchError) {
        guard !finished else { throw CouchError.validation("The BulkWriter has finished; make a new one.") }
        pending.append((count, document))
        count += 1
        if pending.count >= options.batchSize { await sendPending() }
    }

    /// Queues every document of `documents`, then finishes and returns the results.
    public func write<S: AsyncSequence & Sendable>(contentsOf documents: S) async throws -> [BulkWriteResult]
    where S.Element == Document {
        for try await document in documents { try await add(document) }
        return try await finish()
    }

    /// Sends what is left, waits for every batch, and returns one result per document, in the
    /// order they were added. A document whose request failed as a whole (after the session's
    /// retries) gets a failure with error `request_failed` and the ``CouchError``'s description.
    public func finish() async throws(CouchError) -> [BulkWriteResult] {
        guard !finished else { throw CouchError.validation("The BulkWriter has already finished.") }
        if !pending.isEmpty { await sendPending() }
        finished = true
        while let batch = batches.popLast() { await batch.value }
        return (0..<count).map {
            results[$0] ?? .failure(DocumentError(id: nil, rev: nil, error: "not_written", reason: nil))
        }
    }

    private func sendPending() async {
        while inFlight >= options.maximumBatchesInFlight {
            await withCheckedContinuation { slotWaiters.append($0) }
        }
        let batch = pending
        pending = []
        inFlight += 1
        batches.append(Task { await self.write(batch) })
    }

    private func write(_ batch: [(index: Int, document: Document)]) async {
        var remaining = batch
        var attempt = 0
        while !remaining.isEmpty {
            let rows: [BulkWriteResult]
            do {
                rows = try await client.value(
                    BulkDocsOperation(database: database, documents: remaining.map(\.document)))
            } catch {
                for item in remaining {
                    results[item.index] = .failure(
                        DocumentError(id: nil, rev: nil, error: "request_failed", reason: error.description))
                }
                break
            }
            var retry: [(index: Int, document: Document)] = []
            for (item, row) in zip(remaining, rows) {
                if let failure = row.error, Self.retryableErrors.contains(failure.error), attempt < options.rowRetries {
                    retry.append(item)
                } else {
                    results[item.index] = row
                }
            }
            for item in remaining.dropFirst(rows.count) {
                results[item.index] = .failure(
                    DocumentError(
                        id: nil, rev: nil, error: "missing_result", reason: "_bulk_docs returned too few rows"))
            }
            remaining = retry
            attempt += 1
            if !remaining.isEmpty {
                let delay = options.rowRetryDelay * pow(2, Double(attempt - 1))
                try? await Task.sleep(nanoseconds: UInt64(delay * 1_000_000_000))
            }
        }
        inFlight -= 1
        if !slotWaiters.isEmpty { slotWaiters.removeFirst().resume() }
    }
}
