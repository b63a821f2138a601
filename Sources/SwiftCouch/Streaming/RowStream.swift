import Foundation

/// An operation whose response is a list of rows that can be read one at a time as they arrive
/// (`_all_docs`, views, `_find`, `_changes`).
public protocol RowStreamingOperation: CouchOperation {
    /// One row, decoded on its own.
    associatedtype Row: Decodable & Sendable
    /// The member of the response object whose array holds the rows (`"rows"`, `"results"`,
    /// `"docs"`), or nil when the whole response is the array.
    var rowsKey: String? { get }
    /// Whether the response is newline-delimited JSON, one row per line (continuous `_changes`),
    /// instead of one JSON document. Defaults to false.
    var isLineDelimited: Bool { get }
    /// Top-level members a successful response must have besides the rows (`last_seq` for
    /// `_changes`): a stream whose body ends without one fails with a `.decoding` ``CouchError``,
    /// as reading the whole response would. Defaults to none.
    var requiredMetadata: [String] { get }
}

extension RowStreamingOperation {
    public var isLineDelimited: Bool { false }
    public var requiredMetadata: [String] { [] }
}

/// How a streamed body is cut into rows: one JSON document with an array of rows, or one row per
/// line (where a line holding `last_seq` is the feed's closing metadata). No row, line or
/// top-level member may be longer than `maximumElementSize` (nil: no limit).
struct RowFraming: Sendable {
    private var parser: JSONRowStreamParser?
    private var lines: NDJSONSplitter?
    private(set) var lineMetadata: [String: Data] = [:]

    init(rowsKey: String?, lineDelimited: Bool, maximumElementSize: Int? = nil) {
        if lineDelimited {
            lines = NDJSONSplitter(maximumLineLength: maximumElementSize)
        } else {
            parser = JSONRowStreamParser(rowsKey: rowsKey, maximumElementSize: maximumElementSize)
        }
    }

    var metadata: [String: Data] { parser?.metadata ?? lineMetadata }

    /// Whether the body had its rows array (always true for lines, which have none to miss).
    var foundRows: Bool { parser?.foundRows ?? true }

    /// Cuts `chunk` into rows, handing each to `emit` as its bytes (valid only during the call),
    /// after offering it to `leading` (see `JSONRowStreamParser.feed(_:rows:leading:)`).
    mutating func feed(
        _ chunk: Data, rows emit: (UnsafeRawBufferPointer) -> Void,
        leading: ((UnsafeRawBufferPointer) -> Int?)? = nil
    ) throws {
        if parser != nil {
            try parser!.feed(chunk, rows: emit, leading: leading)
            return
        }
        for line in separate(try lines!.feed(chunk)) { line.withUnsafeBytes(emit) }
    }

    mutating func finish() throws {
        if parser != nil { try parser!.finish() }
        if let last = lines?.finish() { _ = separate([last]) }
    }

    /// Rows, with the closing `{"last_seq":...}` line moved into the metadata.
    private mutating func separate(_ found: [Data]) -> [Data] {
        var rows: [Data] = []
        for line in found {
            if line.starts(with: Data(#"{"last_seq""#.utf8)),
                let object = try? JSONDecoder().decode([String: JSONValue].self, from: line)
            {
                for (key, value) in object {
                    lineMetadata[key] = try? JSONBody.encode(value)
                }
            } else {
                rows.append(line)
            }
        }
        return rows
    }
}

/// The rows of one streamed response, as an `AsyncSequence`, parsed and decoded one by one as the
/// body arrives, so memory stays flat however many rows there are.
///
/// Back-pressure: at most `bufferSize` decoded rows wait for the consumer; beyond that the
/// transfer is paused (the transport stops reading from the connection) until the consumer has
/// taken half of them. Cancelling the consuming task, or leaving the loop early, cancels the
/// request and closes the connection.
///
/// A stream can be iterated once. The response's other top-level members (`total_rows`,
/// `offset`, `update_seq`, `last_seq`, `pending`, `bookmark`, `warning`) are in ``metadata``:
/// those before the rows as soon as the rows start, all of them once the iteration has ended.
///
/// An answer that is not the one expected ends the iteration with a `.decoding` ``CouchError``
/// carrying the status and the start of the body, never with a success: a row, a feed line or
/// the top-level members longer than ``Configuration/maximumStreamedElementSize`` (checked as the
/// bytes arrive, so memory stays bounded whatever the server sends), malformed JSON, a rows member
/// that is not an array, a body without it or without a member the operation requires
/// (``RowStreamingOperation/requiredMetadata``).
public final class CouchRowStream<Row: Decodable & Sendable>: AsyncSequence, Sendable {
    public typealias Element = Row

    private let state: RowStreamState<Row>

    init(
        start: @escaping @Sendable (any StreamReceiver, (RequestHandle) -> Void) -> Void, rowsKey: String?,
        lineDelimited: Bool,
        bufferSize: Int, decoder: JSONDecoder, dateCoding: DateCoding = .iso8601, preflightError: CouchError?,
        limits: RowStreamLimits = RowStreamLimits()
    ) {
        state = RowStreamState(
            start: start, rowsKey: rowsKey, lineDelimited: lineDelimited, bufferSize: Swift.max(2, bufferSize),
            decoder: decoder, dateCoding: dateCoding, preflightError: preflightError, limits: limits)
    }

    /// The response's top-level members other than the rows, as free-form JSON.
    public var metadata: [String: JSONValue] { state.metadata }

    /// The HTTP status of the response, once its head has arrived.
    public var statusCode: Int? { state.statusCode }

    public func makeAsyncIterator() -> Iterator {
        Iterator(owner: IterationOwner(state: state))
    }

    /// Reads the rows. Leaving the loop early cancels the transfer.
    ///
    /// Rows are taken from the stream's buffer in batches (one lock and at most one suspension per
    /// batch, not per row) and handed out one by one. Copies of an iterator share their position.
    public struct Iterator: AsyncIteratorProtocol {
        let owner: IterationOwner<Row>

        /// The next row, nil at the end. Every error thrown is a ``CouchError`` (an error status, a
        /// row that does not decode, a broken transfer, a cancellation). The method is not declared
        /// `throws(CouchError)`: Swift 6.3's compiler crashes on some `catch` patterns around typed
        /// async sequences.
        public mutating func next() async throws -> Row? {
            if let row = owner.nextInBatch() { return row }
            do {
                return try await owner.refill()
            } catch {
                throw CouchError.wrapping(error)
            }
        }
    }
}

/// Owned by the iterator alone: when the iteration is abandoned, the transfer is cancelled. It
/// keeps the consumer's current batch, so that copies of an iterator share one position.
///
/// `@unchecked Sendable`: `batch` and `position` are touched only by the task iterating, and an
/// iterator is used by one task at a time (its `next()` is `mutating`); `state` is Sendable.
final class IterationOwner<Row: Decodable & Sendable>: @unchecked Sendable {
    let state: RowStreamState<Row>
    private var batch: [Row] = []
    private var position = 0

    init(state: RowStreamState<Row>) { self.state = state }
    deinit { state.cancel() }

    /// The next row of the batch in hand, without any lock.
    func nextInBatch() -> Row? {
        guard position < batch.count else { return nil }
        defer { position += 1 }
        return batch[position]
    }

    /// Takes the next batch from the stream and returns its first row (nil at the end).
    func refill() async throws -> Row? {
        batch = []
        position = 0
        batch = try await state.nextBatch()
        guard !batch.isEmpty else { return nil }
        position = 1
        return batch[0]
    }
}

/// What a row stream checks besides the JSON grammar: the size of one element
/// (``Configuration/maximumStreamedElementSize``) and the members a good answer has.
struct RowStreamLimits: Sendable {
    /// The most bytes of one row, line or the top-level members together; nil for no limit.
    var maximumElementSize: Int?
    /// Top-level members a 2xx body must have (``RowStreamingOperation/requiredMetadata``).
    var requiredMetadata: [String] = []
}

/// The buffer between the transport (producer) and the iterator (consumer).
///
/// The producer decodes the rows of each chunk on the transport's thread and appends them under
/// one lock; the consumer takes up to half the buffer at once under one lock. Rows held by the
/// consumer's last batch count as buffered until it comes back for more, so at most `bufferSize`
/// rows (plus one chunk's) are read ahead of the consumer: beyond that the transfer is paused,
/// and it resumes once no more than half of that is left.
///
/// `@unchecked Sendable`: the shared state is in `shared` (a `Locked`); `parser` and `errorBody`
/// are touched only from `StreamReceiver` callbacks, which the transport makes one at a time.
final class RowStreamState<Row: Decodable & Sendable>: StreamReceiver, @unchecked Sendable {
    private struct Shared {
        var rows = FIFO<Row>()
        /// Rows of the batch the consumer is going through (read ahead, not yet consumed).
        var handedOut = 0
        var outcome: Result<Void, CouchError>?
        var waiter: CheckedContinuation<[Row], any Error>?
        var paused = false
        var started = false
        var handle: RequestHandle?
        var statusCode: Int?
        var metadata: [String: Data] = [:]
        var available: Int { rows.count }
        var readAhead: Int { available + handedOut }

        /// Takes the next batch (at most `limit` rows) for the consumer.
        mutating func take(limit: Int) -> [Row] {
            let batch = rows.popFirst(limit)
            handedOut = batch.count
            return batch
        }
    }

    private let shared = Locked(Shared())
    private let start: @Sendable (any StreamReceiver, (RequestHandle) -> Void) -> Void
    private let bufferSize: Int
    private let decoder: JSONDecoder
    /// The rows' decoder when `decoder` is the default one: one ``FastJSONDecoder`` for the whole
    /// stream, reading each row in place in the chunk (Foundation's decoder only for a row it does
    /// not cover, which then gives Foundation's exact value or error).
    private var fastDecoder: FastJSONDecoder?
    private let preflightError: CouchError?
    private var parser: RowFraming
    private var errorBody: Data?
    /// The error response's `Retry-After`, if it had one.
    private var errorRetryAfter: String?
    private let rowsKey: String?
    private let limits: RowStreamLimits
    /// The first bytes of a successful body, quoted in decoding errors as `value()` quotes a body.
    private var bodyExcerpt = Data()
    private static var excerptLength: Int { 2_000 }

    init(
        start: @escaping @Sendable (any StreamReceiver, (RequestHandle) -> Void) -> Void, rowsKey: String?,
        lineDelimited: Bool,
        bufferSize: Int, decoder: JSONDecoder, dateCoding: DateCoding, preflightError: CouchError?,
        limits: RowStreamLimits = RowStreamLimits()
    ) {
        self.start = start
        self.bufferSize = bufferSize
        self.decoder = decoder
        self.fastDecoder = JSONDecoder.isCouchDefault(decoder) ? FastJSONDecoder(dateCoding: dateCoding) : nil
        self.preflightError = preflightError
        self.rowsKey = lineDelimited ? nil : rowsKey
        self.limits = limits
        self.parser = RowFraming(
            rowsKey: rowsKey, lineDelimited: lineDelimited, maximumElementSize: limits.maximumElementSize)
    }

    /// One row from its bytes.
    private func decodeRow(_ bytes: UnsafeRawBufferPointer) throws -> Row {
        guard fastDecoder != nil else { return try decoder.decode(Row.self, from: Data(bytes)) }
        var fast = false
        return try FastJSON.decode(Row.self, from: bytes, reusing: &fastDecoder!, fallback: decoder, usedFast: &fast)
    }

    /// The most rows the consumer takes at once: half the buffer, so the transfer can refill the
    /// other half while the consumer works through them.
    private var batchLimit: Int { Swift.max(1, bufferSize / 2) }

    var metadata: [String: JSONValue] {
        shared.current.metadata.compactMapValues { try? JSONDecoder().decode(JSONValue.self, from: $0) }
    }

    var statusCode: Int? { shared.current.statusCode }

    // MARK: Consumer

    /// The next rows (empty at the end); suspends only when none has arrived yet.
    func nextBatch() async throws -> [Row] {
        let begin = shared.withLock { state -> Bool in
            defer { state.started = true }
            return !state.started
        }
        if begin {
            if let preflightError {
                finish(.failure(preflightError))
            } else {
                // The handle is known before the first chunk can arrive, so rows that fill the
                // buffer at once pause the transfer at once.
                start(self) { handle in shared.withLock { $0.handle = handle } }
            }
        }
        // Rows already here are taken without suspending.
        let (immediate, resumeNow) = shared.withLock { state -> (Result<[Row], any Error>?, Bool) in
            state.handedOut = 0
            return takeOrEnd(&state)
        }
        if resumeNow { applyPause() }
        if let immediate { return try immediate.get() }
        let batch = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let (immediate, resumeNow) = shared.withLock { state -> (Result<[Row], any Error>?, Bool) in
                    let taken = takeOrEnd(&state)
                    if taken.0 == nil { state.waiter = continuation }
                    return taken
                }
                if resumeNow { applyPause() }
                if let immediate { continuation.resume(with: immediate) }
            }
        } onCancel: {
            self.cancel()
        }
        // The producer resumed the waiter after releasing the lock: taking it once orders the rows
        // it made before this task reads them, for ThreadSanitizer too (see `handedOff(_:)`).
        shared.withLock { _ in }
        return batch
    }

    /// Under the lock: a batch if rows are waiting, the end if the stream is over, else nil (wait).
    /// Also whether the transfer is to resume.
    private func takeOrEnd(_ state: inout Shared) -> (Result<[Row], any Error>?, Bool) {
        if state.available > 0 {
            let batch = state.take(limit: batchLimit)
            var resume = false
            if state.paused, state.readAhead <= bufferSize / 2 {
                state.paused = false
                resume = true
            }
            return (.success(batch), resume)
        }
        switch state.outcome {
        case .success?: return (.success([]), false)
        case .failure(let error)?: return (.failure(error), false)
        case nil:
            var resume = false
            if state.paused {
                // Nothing left to read here: the transfer must go on.
                state.paused = false
                resume = true
            }
            return (nil, resume)
        }
    }

    /// Cancels the transfer; a waiting consumer gets a cancelled error.
    func cancel() {
        let handle = shared.withLock { $0.handle }
        handle?.cancel()
        finish(.failure(.cancelled()))
    }

    /// Tells the transfer whether to pause, from the state wanted *now*, one call at a time: the
    /// producer's pause and the consumer's resume are decided under `shared` but made outside it,
    /// so they can reach the handle in the opposite order; re-reading the state here means the
    /// last call always carries the latest decision (a resume overtaken by its pause would
    /// otherwise leave the transfer paused with an empty buffer: a stream stalled for good).
    private func applyPause() {
        applying.lock()
        defer { applying.unlock() }
        let (handle, paused) = shared.withLock { ($0.handle, $0.paused) }
        if paused { handle?.pause() } else { handle?.resume() }
    }
    private let applying = NSLock()

    // MARK: Producer (StreamReceiver)

    func receive(head: HTTPResponse) {
        shared.withLock { $0.statusCode = head.statusCode }
        if !(200..<300).contains(head.statusCode) {
            errorBody = Data()
            errorRetryAfter = head.headers["Retry-After"]
        }
    }

    func receive(chunk: Data) {
        if errorBody != nil {
            if errorBody!.count < 1 << 20 { errorBody!.append(chunk) }
            return
        }
        if bodyExcerpt.count < Self.excerptLength {
            bodyExcerpt.append(chunk.prefix(Self.excerptLength - bodyExcerpt.count))
        }
        var decoded: [Row] = []
        var failure: CouchError?
        /// One row, from its bytes.
        func take(_ element: UnsafeRawBufferPointer, _ decode: () throws -> Row) {
            do {
                decoded.append(try decode())
            } catch {
                // Quoted as transcripts are: passwords, keys and tokens redacted.
                let text = Redaction.redact(String(decoding: element.prefix(500), as: UTF8.self))
                failure = CouchError(
                    kind: .decoding, message: "A row is not a valid \(Row.self): \(error); row: \(text)",
                    statusCode: shared.current.statusCode, underlying: error)
            }
        }
        do {
            // With the fast decoder, a row found whole in the chunk is parsed once: the decoder's
            // strict parse also finds where it ends, so the framing does not scan it first.
            let leading: ((UnsafeRawBufferPointer) -> Int?)? =
                fastDecoder == nil
                ? nil
                : { rest in
                    guard failure == nil else { return nil }
                    var length = 0
                    if let row = self.fastDecoder!.decodeLeadingValue(Row.self, from: rest, length: &length) {
                        decoded.append(row)
                        return length
                    }
                    guard length > 0 else { return nil }
                    // A row the fast path does not cover: Foundation's exact value or error.
                    let element = UnsafeRawBufferPointer(rebasing: rest[0..<length])
                    take(element) { try self.decoder.decode(Row.self, from: Data(element)) }
                    return length
                }
            try parser.feed(
                chunk,
                rows: { element in
                    guard failure == nil else { return }
                    take(element) { try self.decodeRow(element) }
                }, leading: leading)
        } catch {
            failParsing(error)
            return
        }
        if let failure {
            finish(.failure(failure))
            shared.current.handle?.cancel()
            return
        }
        let metadata = parser.metadata
        let (waiter, batch, pause) = shared.withLock {
            state -> (CheckedContinuation<[Row], any Error>?, [Row], Bool) in
            state.metadata = metadata
            guard state.outcome == nil else { return (nil, [], false) }
            state.rows.append(contentsOf: decoded)
            var batch: [Row] = []
            var waiter: CheckedContinuation<[Row], any Error>?
            if let pending = state.waiter, state.available > 0 {
                batch = state.take(limit: batchLimit)
                waiter = pending
                state.waiter = nil
            }
            var pause = false
            if !state.paused, state.readAhead >= bufferSize {
                state.paused = true
                pause = true
            }
            return (waiter, batch, pause)
        }
        if pause { applyPause() }
        waiter?.resume(returning: batch)
    }

    func complete(error: (any Error)?) {
        if let error {
            let couchError =
                (error as? CouchError)
                ?? CouchError(
                    kind: .transport, message: "The stream broke: \(error)", underlying: error)
            finish(.failure(couchError))
            return
        }
        if let errorBody {
            let status = shared.current.statusCode ?? 0
            var failure = CouchError.http(status: status, body: errorBody, method: nil, path: nil)
            failure.retryAfter = CouchError.retryAfterSeconds(errorRetryAfter)
            finish(.failure(failure))
            return
        }
        do {
            try parser.finish()
        } catch {
            failParsing(error)
            return
        }
        let metadata = parser.metadata
        shared.withLock { $0.metadata = metadata }
        // A body that parsed but is not the answer expected fails as `value()` would.
        if let rowsKey, !parser.foundRows {
            finish(.failure(wrongAnswer("has no \"\(rowsKey)\" array")))
            return
        }
        if let missing = limits.requiredMetadata.first(where: { metadata[$0] == nil }) {
            finish(.failure(wrongAnswer("has no \"\(missing)\" member")))
            return
        }
        finish(.success(()))
    }

    /// A `.decoding` error for a body that is not the answer expected, with its status and the
    /// start of the body (CouchDB's `error` and `reason` when it is an error object).
    private func wrongAnswer(_ what: String, underlying: (any Error)? = nil) -> CouchError {
        let status = shared.current.statusCode ?? 0
        var error = CouchError.http(status: status, body: bodyExcerpt, method: nil, path: nil, kind: .decoding)
        if error.bodyText == nil, error.error == nil {
            error.bodyText = String(decoding: bodyExcerpt, as: UTF8.self)
        }
        error.message = "The streamed response (HTTP \(status)) \(what)"
        error.underlying = underlying
        return error
    }

    private func failParsing(_ error: any Error) {
        if let streamError = error as? JSONStreamError, let limit = streamError.exceededLimit {
            finish(
                .failure(
                    wrongAnswer(
                        "has an element larger than Configuration.maximumStreamedElementSize (\(limit) bytes): "
                            + "\(streamError.message); it was not read", underlying: error)))
        } else {
            finish(.failure(wrongAnswer("is not the JSON expected: \(error)", underlying: error)))
        }
        shared.current.handle?.cancel()
    }

    private func finish(_ outcome: Result<Void, CouchError>) {
        let waiter = shared.withLock { state -> CheckedContinuation<[Row], any Error>? in
            guard state.outcome == nil else { return nil }
            state.outcome = outcome
            defer { state.waiter = nil }
            return state.available == 0 ? state.waiter : nil
        }
        guard let waiter else { return }
        switch outcome {
        case .success: waiter.resume(returning: [])
        case .failure(let error): waiter.resume(throwing: error)
        }
    }
}

extension CouchDBClient {
    /// Streams the rows of `operation` as they arrive: parsed and decoded one at a time, with
    /// back-pressure, through the same pipeline (validate → serialise → endpoint … → session with
    /// authentication and retries) as every other operation.
    ///
    /// ```swift
    /// for try await row in client.rows(AllDocumentsOperation(database: "albums", includeDocs: true)) {
    ///     print(row.id)
    /// }
    /// ```
    /// - Parameters:
    ///   - operation: the query whose rows to stream.
    ///   - bufferSize: how many decoded rows may wait for the consumer before the transfer
    ///     pauses. Defaults to 256.
    ///   - options: this call's timeout, retry policy and extra headers.
    public func rows<Op: RowStreamingOperation>(
        _ operation: Op, bufferSize: Int = 256, options: CallOptions = CallOptions()
    ) -> CouchRowStream<Op.Row> {
        var operation = operation
        let prepared: PreparedRequest
        do {
            prepared = try PreparedRequest(preparing: &operation, for: session, options: options)
        } catch {
            return CouchRowStream(
                start: { _, _ in }, rowsKey: operation.rowsKey, lineDelimited: operation.isLineDelimited,
                bufferSize: bufferSize, decoder: JSONDecoder(), preflightError: error)
        }
        let session = self.session
        return CouchRowStream(
            start: { receiver, attach in
                session.stream(
                    prepared.request, isIdempotent: prepared.isIdempotent, receiver: receiver, beforeStart: attach)
            }, rowsKey: operation.rowsKey, lineDelimited: operation.isLineDelimited, bufferSize: bufferSize,
            decoder: DateCoding.with(session.configuration.dateCoding) { JSONDecoder.couch },
            dateCoding: session.configuration.dateCoding, preflightError: nil,
            limits: RowStreamLimits(
                maximumElementSize: session.configuration.maximumStreamedElementSize,
                requiredMetadata: operation.requiredMetadata))
    }
}

extension AllDocsOperation: RowStreamingOperation {
    public var rowsKey: String? { "rows" }
}

extension QueryViewOperation: RowStreamingOperation {
    public typealias Row = ViewRow<Key, Value, Doc>
    public var rowsKey: String? { "rows" }
}

extension FindOperation: RowStreamingOperation {
    public typealias Row = Document
    public var rowsKey: String? { "docs" }
}

extension ChangesOperation: RowStreamingOperation {
    public typealias Row = Change<Document>
    public var rowsKey: String? { "results" }
    public var requiredMetadata: [String] { ["last_seq"] }
}
