import Foundation

/// Writes any number of documents through `_bulk_docs` in batches, with a bounded number of
/// batches in flight, and reports one result per document.
///
/// Feed it documents one at a time (``add(_:)`` waits while the maximum number of batches is in
/// flight, so a fast producer cannot run ahead of the server) or as an `AsyncSequence`
/// (``write(contentsOf:)``), then call ``finish()``.
///
/// What it guarantees, whatever the server does:
/// - **One bad document fails alone.** A document CouchDB would refuse in a way that fails the
///   whole request (an `_id` starting with `_` other than `_design/`/`_local/`, an empty `_id`, a
///   body that is not a JSON object) is refused before batching, with the error CouchDB gives
///   (`illegal_docid`, `bad_request`). A batch the server still rejects as a whole (400, 413) is
///   split in halves until the documents at fault are alone, so every other document is written.
/// - **No duplicates.** A document without `_id` gets one on the client (``Options/makeID``)
///   before its first send, so sending it again can never create a second document.
/// - **Resending is safe.** Rows that fail for a reason worth retrying (`too_many_requests`,
///   `timeout`, `unknown_error`, `internal_server_error`, `service_unavailable`), and whole
///   batches whose answer was lost, are sent again with backoff, up to ``Options/rowRetries``
///   times. A resent document answered `conflict` is read back: when the stored revision is the
///   one the lost write made (the next generation after the revision sent, with the same body),
///   the row is the success it was; otherwise the conflict is reported.
/// - Conflicts and validation failures are reported, never retried. Whole-request 429s are retried
///   by the session as for every operation.
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
        /// The delay before the first row retry, doubling each time (at most a minute). Defaults to
        /// 0.1 seconds.
        public var rowRetryDelay: TimeInterval = 0.1
        /// Makes the `_id` of a document that has none (so that resending it cannot duplicate it).
        /// Defaults to a random UUID as 32 lowercase hex digits, like CouchDB's own `random` ids.
        public var makeID: @Sendable () -> String = {
            UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        }

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
    private let dateCoding: DateCoding
    // The two per-document properties are `@exclusivity(unchecked)`: the actor runs one access at
    // a time, and the dynamic checks of the `inout` use were a measurable part of `add`.
    /// Documents waiting for the next batch.
    @exclusivity(unchecked) private var pending = BulkBatch()
    private var inFlight = 0
    private var slotWaiters: [CheckedContinuation<Void, Never>] = []
    /// One per document added, in order (``notWritten`` until known): handed back by ``finish()``
    /// as it is, with no second array.
    @exclusivity(unchecked) private var results: [BulkWriteResult] = []
    private let notWritten = BulkWriteResult.failure(
        DocumentError(id: nil, rev: nil, error: "not_written", reason: nil))
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
        dateCoding = client.configuration.dateCoding
    }

    /// Queues one document; sends a batch when one is full, waiting while the maximum number of
    /// batches is in flight. A document CouchDB would refuse (see the type's documentation) is not
    /// queued: its result is the failure, and the others are unaffected.
    /// - Throws: ``CouchError`` (`.validation`) after ``finish()``.
    public func add(_ document: Document) async throws(CouchError) {
        guard !finished else { throw CouchError.validation("The BulkWriter has finished; make a new one.") }
        let index = results.count
        results.append(notWritten)
        // Dates are written as the client's configuration says (outside the pipeline here).
        if let refusal = Self.prepare(
            document, index: index, makeID: options.makeID, dateCoding: dateCoding, into: &pending)
        {
            results[index] = .failure(refusal)
        }
        if pending.items.count >= options.batchSize { await sendPending() }
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
        if !pending.items.isEmpty { await sendPending() }
        finished = true
        while let batch = batches.popLast() { await batch.value }
        defer { results = [] }
        return results
    }

    // MARK: - Preparing documents

    /// Encodes `document` at the end of `batch`'s bytes and records it in its items, giving it an
    /// `_id` when it has none; or refuses what CouchDB would refuse for the whole request (nothing
    /// is kept).
    static func prepare(
        _ document: Document, index: Int, makeID: () -> String, dateCoding: DateCoding, into batch: inout BulkBatch
    ) -> DocumentError? {
        let body = batch.body
        let mark = body.count
        if !batch.items.isEmpty { body.append(UInt8(ascii: ",")) }
        let start = body.count
        let recorded: DocumentIDAndRev?
        do {
            // Straight into the batch's request body: no `Data` per document, and no copy.
            var sink = body
            recorded = try JSONBody.appendDocument(document, to: &sink, dateCoding: dateCoding)
        } catch {
            body.truncateJSON(to: mark)
            let message = (error as? CouchError)?.message ?? "\(error)"
            return DocumentError(id: nil, rev: nil, error: "bad_request", reason: message)
        }
        // `_id` and `_rev` as the encoder wrote them, or read from the encoded bytes when it could
        // not tell (no second decode of the document either way).
        let meta =
            recorded
            ?? TopLevelStrings.find(.idAndRev, in: body.bytes(in: start..<body.count)).map {
                DocumentIDAndRev(id: $0[0], rev: $0[1])
            }
        guard let meta else {
            body.truncateJSON(to: mark)
            return DocumentError(id: nil, rev: nil, error: "bad_request", reason: "_id and _rev must be strings.")
        }
        let id: String
        if let given = meta.id {
            if let refusal = refusal(ofID: given) {
                body.truncateJSON(to: mark)
                return DocumentError(id: given, rev: nil, error: "illegal_docid", reason: refusal)
            }
            id = given
        } else {
            id = makeID()
            let afterBrace = body.bytes(in: (start + 1)..<body.count)
            let empty = afterBrace.first { !(" \n\r\t".utf8.contains($0)) } == UInt8(ascii: "}")
            var member = Array(#""_id":"#.utf8)
            member.append(contentsOf: JSONBody.stringLiteral(id).utf8)
            if !empty { member.append(UInt8(ascii: ",")) }
            body.insert(member, at: start + 1)
        }
        batch.items.append(
            BulkBatch.Item(index: index, id: id, parentRevision: meta.rev, range: start..<body.count))
        return nil
    }

    /// Why CouchDB refuses `id` in `_bulk_docs` (failing the whole request), or nil.
    static func refusal(ofID id: String) -> String? {
        guard let first = id.utf8.first else { return "Document id must not be empty" }
        guard first == UInt8(ascii: "_") else { return nil }
        for prefix in ["_design/", "_local/"] where id.hasPrefix(prefix) {
            return id.count > prefix.count ? nil : "Document id must not be empty"
        }
        return "Only reserved document ids may start with underscore."
    }

    // MARK: - Writing

    private func sendPending() async {
        while inFlight >= options.maximumBatchesInFlight {
            await withCheckedContinuation { slotWaiters.append($0) }
        }
        var batch = BulkBatch(reservingCapacity: pending.body.count)
        swap(&batch, &pending)
        batch.seal()
        inFlight += 1
        batches.append(
            Task {
                await self.write(batch)
                self.releaseSlot()
            })
    }

    private func releaseSlot() {
        inFlight -= 1
        if !slotWaiters.isEmpty { slotWaiters.removeFirst().resume() }
    }

    /// Writes `batch`, resending what is worth resending, and splitting it when the server
    /// rejects it as a whole.
    private func write(_ batch: BulkBatch) async {
        var remaining = batch
        var attempt = 0
        while !remaining.items.isEmpty {
            let rows: [BulkWriteResult]
            do {
                rows = try await send(remaining)
            } catch {
                if error.statusCode == 400 || error.statusCode == 413 {
                    await isolate(remaining, rejection: error)
                    return
                }
                if error.isOutcomeUnknown, attempt < options.rowRetries {
                    // The batch may have been written: every document has an `_id`, so sending it
                    // again cannot duplicate anything, and conflicts are checked.
                    for index in remaining.items.indices { remaining.items[index].resent = true }
                    attempt += 1
                    await backOff(attempt)
                    continue
                }
                for item in remaining.items {
                    results[item.index] = .failure(
                        DocumentError(id: item.id, rev: nil, error: "request_failed", reason: error.description))
                }
                return
            }
            var retry: [BulkBatch.Item] = []
            var conflicted: [(BulkBatch.Item, BulkWriteResult)] = []
            for (position, item) in remaining.items.enumerated() {
                guard position < rows.count else {
                    results[item.index] = .failure(
                        DocumentError(
                            id: item.id, rev: nil, error: "missing_result", reason: "_bulk_docs returned too few rows"))
                    continue
                }
                let row = rows[position]
                if let failure = row.error, Self.retryableErrors.contains(failure.error), attempt < options.rowRetries {
                    var again = item
                    again.resent = true
                    retry.append(again)
                } else if item.resent, row.error?.error == "conflict" {
                    conflicted.append((item, row))
                } else {
                    results[item.index] = row
                }
            }
            for (item, row) in conflicted {
                results[item.index] =
                    await confirmedWrite(of: item, body: Data(buffer: remaining.body.bytes(in: item.range))) ?? row
            }
            remaining = remaining.subset(retry)
            attempt += 1
            if !remaining.items.isEmpty { await backOff(attempt) }
        }
    }

    private func send(_ batch: BulkBatch) async throws(CouchError) -> [BulkWriteResult] {
        let request = GenericOperation(
            method: .post, path: CouchPath(database, "_bulk_docs"), body: batch.body.data, isIdempotent: false)
        return try await client.value(GenericJSONOperation<[BulkWriteResult]>(request))
    }

    /// A batch rejected as a whole (400, 413): halves are written on their own until the
    /// documents at fault are alone, and they get the server's error.
    private func isolate(_ batch: BulkBatch, rejection: CouchError) async {
        let items = batch.items
        guard items.count > 1 else {
            let item = items[0]
            results[item.index] = .failure(
                DocumentError(
                    id: item.id, rev: nil, error: rejection.error ?? "bad_request",
                    reason: rejection.reason ?? rejection.message))
            return
        }
        let middle = items.count / 2
        await write(batch.subset(items[..<middle]))
        await write(batch.subset(items[middle...]))
    }

    private func backOff(_ attempt: Int) async {
        let delay = Self.retryDelay(attempt: attempt, first: options.rowRetryDelay)
        try? await Task.sleep(nanoseconds: UInt64(delay * 1_000_000_000))
    }

    /// The wait before the `attempt`-th resend: `first × 2^(attempt-1)`, within 0…60 s whatever
    /// the setting (one that is not finite or is negative counts as the default, 0.1 s), so no
    /// ``Options/rowRetryDelay`` or ``Options/rowRetries`` can trap or stall the writer.
    static func retryDelay(attempt: Int, first: TimeInterval) -> TimeInterval {
        let first = first.isFinite && first >= 0 ? first : 0.1
        let delay = first * pow(2, attempt > 1 ? Double(min(attempt - 1, 64)) : 0)
        return delay.isFinite ? min(delay, 60) : 60
    }

    /// The success a resent document's conflict hides, if the stored revision is the one its lost
    /// write made: the next generation after the revision it was sent with (its child, when the
    /// history says so), with the same body.
    private func confirmedWrite(of item: BulkBatch.Item, body: Data) async -> BulkWriteResult? {
        let read = GetDocumentOperation<JSONValue>(database: database, id: item.id, revisions: true)
        guard let stored = try? await client.value(read), case .object(var storedFields) = stored,
            case .string(let storedRevision)? = storedFields["_rev"],
            let sent = try? JSONDecoder().decode(JSONValue.self, from: body), case .object(var sentFields) = sent
        else { return nil }
        // Both generations come from the server: compared without arithmetic that could overflow.
        let parentGeneration = item.parentRevision.flatMap { Int($0.prefix { $0 != "-" }) } ?? 0
        guard let storedGeneration = Int(storedRevision.prefix { $0 != "-" }), storedGeneration >= 1,
            storedGeneration - 1 == parentGeneration
        else { return nil }
        if let parent = item.parentRevision {
            // `_revisions.ids` lists the hashes newest first: the parent must be second.
            guard case .object(let history)? = storedFields["_revisions"], case .array(let ids)? = history["ids"],
                ids.count > 1, ids[1] == .string(String(parent.drop { $0 != "-" }.dropFirst()))
            else { return nil }
        }
        for field in ["_rev", "_revisions"] {
            storedFields[field] = nil
            sentFields[field] = nil
        }
        guard storedFields == sentFields else { return nil }
        return .success(id: item.id, rev: storedRevision)
    }
}

/// Documents sent together in one `_bulk_docs` request: the request body itself, written as the
/// documents are added (`{"docs":[`, then their bodies separated by commas; ``seal()`` closes it),
/// so it is sent without being copied; and the items that say where each document is in it.
///
/// Not generic over the writer's document type, so that the per-document and per-row code working
/// on it needs no generic metadata.
struct BulkBatch: Sendable {
    /// One document on its way: where its encoded body (with its `_id`) is in the batch's body,
    /// and what resending needs.
    struct Item: Sendable {
        var index: Int
        var id: String
        /// The `_rev` it was sent with (the parent of the revision it makes).
        var parentRevision: String?
        /// The document's JSON in the batch's body.
        var range: Range<Int>
        /// Sent before without a known outcome: a conflict may be with this write itself.
        var resent = false
    }

    private static let opening: StaticString = #"{"docs":["#

    /// The request body: `{"docs":[` and the documents so far; `]}` once sealed. Written only
    /// while the batch is filled (by its one owner); sent without a copy once sealed, and never
    /// written again.
    let body: JSONBuffer
    var items: [Item] = []

    /// An empty batch with room for `capacity` bytes of documents.
    init(reservingCapacity capacity: Int = 0) {
        body = JSONBuffer(capacity: Self.opening.utf8CodeUnitCount + capacity + 2)
        body.appendJSON(UnsafeBufferPointer(start: Self.opening.utf8Start, count: Self.opening.utf8CodeUnitCount))
    }

    /// Closes the body (`]}`): the batch is ready to send.
    mutating func seal() {
        body.append(UInt8(ascii: "]"))
        body.append(UInt8(ascii: "}"))
    }

    /// A sealed batch of some of these items (a resend, a half), with their bodies copied over.
    func subset(_ chosen: some Sequence<Item>) -> BulkBatch {
        var subset = BulkBatch()
        for var item in chosen {
            if !subset.items.isEmpty { subset.body.append(UInt8(ascii: ",")) }
            let start = subset.body.count
            subset.body.appendJSON(body.bytes(in: item.range))
            item.range = start..<subset.body.count
            subset.items.append(item)
        }
        subset.seal()
        return subset
    }
}
