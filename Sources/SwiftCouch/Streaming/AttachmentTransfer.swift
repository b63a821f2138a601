import Foundation

/// `PUT /{db}/{docid}/{attname}` — uploads an attachment from a file or an `InputStream`, without
/// loading it into memory. Run it with ``CouchDBClient/upload(_:)`` to follow its progress (or
/// like any operation).
///
/// A file is re-sent from its start when the request must be repeated (429, renewed session); an
/// `InputStream` cannot be, so such a request fails with a clear error instead of being retried.
public struct UploadAttachmentOperation: JSONOperation {
    public typealias Response = DocumentWriteResponse

    public var database: String
    public var documentID: String
    /// The attachment name (may contain `/`).
    public var name: String
    /// The document's current revision; nil to create the document with this attachment.
    public var revision: String?
    /// The attachment's content type, e.g. `image/png`.
    public var attachmentContentType: String
    /// Where the bytes come from.
    public var body: StreamedBody

    public init(
        database: String, documentID: String, name: String, revision: String?, contentType: String,
        body: StreamedBody
    ) {
        self.database = database
        self.documentID = documentID
        self.name = name
        self.revision = revision
        self.attachmentContentType = contentType
        self.body = body
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.validateDocumentID(documentID)
        if let revision { try CouchValidation.validateRevision(revision) }
        guard !name.isEmpty else { throw CouchError.validation("Attachment name must not be empty.") }
        guard !attachmentContentType.isEmpty else {
            throw CouchError.validation("The attachment's content type must not be empty.")
        }
        guard body.length >= 0 else { throw CouchError.validation("The body length must not be negative.") }
    }

    public var endpoint: CouchPath { AttachmentPath.path(database, documentID, name) }
    public var method: HTTPMethod { .put }
    public var parameters: [URLQueryItem] { revision.map { [URLQueryItem(name: "rev", value: $0)] } ?? [] }
    public var streamedBody: StreamedBody? { body }
    public var contentType: String? { attachmentContentType }
}

/// Limits of one download (``CouchDBClient/download(_:to:options:)``).
public struct DownloadOptions: Sendable, Hashable {
    /// The most bytes the download may write to its file (after gzip inflation), checked as they
    /// are written: past it the transfer is cancelled and fails with a ``CouchError`` naming the
    /// limit (its ``CouchError/underlying`` a `URLError(.dataLengthExceedsMaximum)`), and the
    /// partial file is removed. Nil (the default) for no limit: an attachment may be as large as
    /// the disk; set it when the server is not trusted.
    public var maximumSize: Int64?
    /// This download's compression-ratio limit (see ``Configuration/maximumDecompressionRatio``),
    /// set on its request, for an attachment known to compress far better than JSON (`.infinity`
    /// lifts the limit; ``maximumSize`` still bounds the file). Nil (the default) for the
    /// configuration's.
    public var maximumDecompressionRatio: Double?
    /// Whether the file receives the body as the server sends it, gzip-encoded or not: the request names
    /// `Accept-Encoding: gzip` itself, so the transport inflates nothing, and
    /// ``AttachmentDownload/contentEncoding`` says which the file holds. For copying an attachment CouchDB stores
    /// gzip-encoded (its text types) as stored, with its digest (the MD5 of the encoded bytes). False (the default):
    /// the file holds the attachment's own bytes.
    public var keepsContentEncoding: Bool

    /// Creates options; every limit defaults to none of its own, and the file holds the attachment's own bytes.
    public init(
        maximumSize: Int64? = nil, maximumDecompressionRatio: Double? = nil, keepsContentEncoding: Bool = false
    ) {
        self.maximumSize = maximumSize
        self.maximumDecompressionRatio = maximumDecompressionRatio
        self.keepsContentEncoding = keepsContentEncoding
    }
}

/// What a download to a file produced.
public struct AttachmentDownload: Sendable, Hashable {
    /// The file the attachment was written to.
    public var file: URL
    /// How many bytes were written.
    public var length: Int64
    /// The attachment's content type.
    public var contentType: String?
    /// The attachment's digest as CouchDB reports it in the `ETag` (base64 MD5), when sent.
    public var etag: String?
    /// The encoding the file is in (`gzip`) when the download kept the body's `Content-Encoding`
    /// (``DownloadOptions/keepsContentEncoding``) and the server sent one; nil when the file holds the attachment's
    /// own bytes.
    public var contentEncoding: String?
}

/// A transfer in progress: its `Foundation.Progress`, a sequence of progress events, and its result.
public final class Transfer<Value: Sendable>: Sendable {
    /// Updated as bytes move: `totalUnitCount` is the size when known, `completedUnitCount` the bytes so far.
    public let progress: Progress
    /// Progress events as bytes move; the sequence ends when the transfer does.
    public let progressEvents: AsyncStream<TransferProgress>
    private let task: Task<Result<Value, CouchError>, Never>
    private let handle: Locked<RequestHandle?>

    init(
        progress: Progress, events: AsyncStream<TransferProgress>, handle: Locked<RequestHandle?>,
        task: Task<Result<Value, CouchError>, Never>
    ) {
        self.progress = progress
        self.progressEvents = events
        self.handle = handle
        self.task = task
    }

    /// The result, once the transfer has finished.
    public var value: Value {
        get async throws(CouchError) { try await task.value.get() }
    }

    /// Cancels the transfer.
    public func cancel() {
        handle.current?.cancel()
    }
}

extension CouchDBClient {
    /// Uploads an attachment from a file or stream, reporting progress.
    ///
    /// ```swift
    /// let transfer = client.upload(UploadAttachmentOperation(
    ///     database: "media", documentID: "clip", name: "clip.mp4", revision: rev,
    ///     contentType: "video/mp4", body: try .file(url)))
    /// for await event in transfer.progressEvents { print(event.fractionCompleted ?? 0) }
    /// let written = try await transfer.value
    /// ```
    public func upload(_ operation: UploadAttachmentOperation) -> Transfer<DocumentWriteResponse> {
        let total = operation.body.length
        let handle = Locked<RequestHandle?>(nil)
        let limit = session.configuration.maximumResponseBodySize
        return transfer(operation, total: total, handle: handle) { receiver in
            ResponseCollector(operation: operation, total: total, report: receiver, maximumBodySize: limit) {
                handle.current?.cancel()
            }
        }
    }

    /// Downloads an attachment into `file` (replaced if it exists) as it arrives, never holding it
    /// in memory, reporting progress. A download that fails after the file was created removes it:
    /// the file is there, whole, only when the transfer succeeds.
    /// - Parameters:
    ///   - operation: the attachment to read.
    ///   - file: where to write it.
    ///   - options: this download's size and compression-ratio limits. Defaults to none of its own
    ///     (no size limit; the configuration's ratio limit).
    public func download(
        _ operation: GetAttachmentOperation, to file: URL, options: DownloadOptions = DownloadOptions()
    ) -> Transfer<AttachmentDownload> {
        let handle = Locked<RequestHandle?>(nil)
        return transfer(
            operation, total: nil, handle: handle,
            adjust: { request in
                if let ratio = options.maximumDecompressionRatio { request.maximumDecompressionRatio = ratio }
                if options.keepsContentEncoding { request.headers.set("Accept-Encoding", "gzip") }
            },
            makeReceiver: { report in
                FileWriter(
                    file: file, report: report, maximumSize: options.maximumSize,
                    keepsContentEncoding: options.keepsContentEncoding
                ) {
                    handle.current?.cancel()
                }
            })
    }

    private func transfer<Op: CouchOperation, Value: Sendable>(
        _ operation: Op, total: Int64?, handle: Locked<RequestHandle?> = Locked(nil),
        adjust: (inout HTTPRequest) -> Void = { _ in },
        makeReceiver: (ProgressReport) -> some ResultReceiver<Value>
    ) -> Transfer<Value> {
        let progress = Progress(totalUnitCount: total ?? -1)
        let (events, continuation) = AsyncStream<TransferProgress>.makeStream(bufferingPolicy: .bufferingNewest(64))
        let report = ProgressReport(progress: progress, continuation: continuation)
        let receiver = makeReceiver(report)
        var operation = operation
        let preparation: Result<(request: HTTPRequest, isIdempotent: Bool), CouchError> = Result {
            () throws(CouchError) in
            let prepared = try PreparedRequest(preparing: &operation, for: self.session)
            var request = prepared.request
            adjust(&request)
            return (request, prepared.isIdempotent)
        }
        let session = self.session
        let task = Task { () -> Result<Value, CouchError> in
            defer { continuation.finish() }
            let prepared: (request: HTTPRequest, isIdempotent: Bool)
            switch preparation {
            case .success(let value): prepared = value
            case .failure(let error): return .failure(error)
            }
            return await withTaskCancellationHandler {
                await handedOff { deliver in
                    receiver.onFinish(deliver)
                    let started = session.stream(
                        prepared.request, isIdempotent: prepared.isIdempotent, receiver: receiver)
                    handle.withLock { $0 = started }
                    // Given up before the handle was known (a limit passed by the first chunks).
                    if receiver.abandoned { started.cancel() }
                }
            } onCancel: {
                handle.current?.cancel()
            }
        }
        return Transfer(progress: progress, events: events, handle: handle, task: task)
    }
}

/// Updates a `Progress` and yields events. `@unchecked Sendable`: `Progress` is thread-safe and
/// the continuation is `Sendable`.
final class ProgressReport: @unchecked Sendable {
    let progress: Progress
    let continuation: AsyncStream<TransferProgress>.Continuation

    init(progress: Progress, continuation: AsyncStream<TransferProgress>.Continuation) {
        self.progress = progress
        self.continuation = continuation
    }

    func update(completed: Int64, total: Int64?) {
        if let total, progress.totalUnitCount != total { progress.totalUnitCount = total }
        progress.completedUnitCount = completed
        continuation.yield(TransferProgress(completedBytes: completed, totalBytes: total))
    }
}

/// A stream receiver that ends with one result.
protocol ResultReceiver<Value>: StreamReceiver {
    associatedtype Value: Sendable
    /// Registers the one callback that receives the result.
    func onFinish(_ callback: @escaping @Sendable (Result<Value, CouchError>) -> Void)
    /// Whether the receiver has given up on the transfer (which is then to be cancelled).
    var abandoned: Bool { get }
}

extension ResultReceiver {
    var abandoned: Bool { false }
}

/// Calls its callback once, whether the result or the callback comes first.
final class FinishGate<Value: Sendable>: Sendable {
    private struct State {
        var result: Result<Value, CouchError>?
        var callback: (@Sendable (Result<Value, CouchError>) -> Void)?
        var delivered = false
    }
    private let state = Locked(State())

    func onFinish(_ callback: @escaping @Sendable (Result<Value, CouchError>) -> Void) {
        deliver { $0.callback = callback }
    }

    func finish(_ result: Result<Value, CouchError>) {
        deliver { if $0.result == nil { $0.result = result } }
    }

    private func deliver(_ change: (inout State) -> Void) {
        let ready = state.withLock {
            state -> (@Sendable (Result<Value, CouchError>) -> Void, Result<Value, CouchError>)? in
            change(&state)
            guard !state.delivered, let callback = state.callback, let result = state.result else { return nil }
            state.delivered = true
            return (callback, result)
        }
        if let (callback, result) = ready { callback(result) }
    }
}

/// Collects a (small) response body for an upload and reports upload progress. The body stops at
/// `maximumBodySize` (``Configuration/maximumResponseBodySize``), as a whole response does.
///
/// `@unchecked Sendable`: `head` and `body` are touched only from the receiver callbacks, which
/// come one at a time; `gaveUp` is behind its lock.
final class ResponseCollector<Op: CouchOperation>: ResultReceiver, @unchecked Sendable {
    private let operation: Op
    private let total: Int64
    private let report: ProgressReport
    private let gate = FinishGate<Op.Response>()
    private var head: HTTPResponse?
    private var body = Data()
    private let maximumBodySize: Int?
    private let cancelTransfer: @Sendable () -> Void
    private let gaveUp = Locked(false)
    private var failure: CouchError?

    init(
        operation: Op, total: Int64, report: ProgressReport, maximumBodySize: Int? = nil,
        cancelTransfer: @escaping @Sendable () -> Void = {}
    ) {
        self.operation = operation
        self.total = total
        self.report = report
        self.maximumBodySize = maximumBodySize
        self.cancelTransfer = cancelTransfer
    }

    var abandoned: Bool { gaveUp.current }

    func onFinish(_ callback: @escaping @Sendable (Result<Op.Response, CouchError>) -> Void) {
        gate.onFinish(callback)
    }

    func sent(bytes sent: Int64, of total: Int64?) {
        report.update(completed: sent, total: total ?? self.total)
    }

    func receive(head: HTTPResponse) { self.head = head }

    func receive(chunk: Data) {
        guard failure == nil else { return }
        if let maximumBodySize, body.count + chunk.count > maximumBodySize {
            let message =
                "The upload's response body exceeds the limit of \(maximumBodySize) bytes"
                + " (Configuration.maximumResponseBodySize); it was not read."
            failure = CouchError(
                kind: .transport, message: message, statusCode: head?.statusCode,
                underlying: URLError(.dataLengthExceedsMaximum, userInfo: [NSLocalizedDescriptionKey: message]),
                isOutcomeUnknown: true)
            body = Data()
            gaveUp.withLock { $0 = true }
            cancelTransfer()
            return
        }
        body.append(chunk)
    }

    func complete(error: (any Error)?) {
        if let failure {
            gate.finish(.failure(failure))
            return
        }
        if let error {
            gate.finish(.failure(error as? CouchError ?? CouchError(kind: .transport, message: "\(error)")))
            return
        }
        guard let head else {
            gate.finish(.failure(CouchError(kind: .transport, message: "The upload got no response.")))
            return
        }
        report.update(completed: total, total: total)
        do {
            let value = try operation.processResponse(
                data: body, httpInfo: HTTPInfo(statusCode: head.statusCode, headers: head.headers))
            gate.finish(.success(value))
        } catch {
            var couchError = error as? CouchError ?? CouchError(kind: .decoding, message: "\(error)")
            if couchError.statusCode == nil { couchError.statusCode = head.statusCode }
            couchError.recordRetryAfter(from: head.headers)
            gate.finish(.failure(couchError))
        }
    }
}

/// Writes a downloaded body to a file as it arrives and reports download progress; stops at
/// `maximumSize` (cancelling the transfer), and removes the file when the download fails.
///
/// `@unchecked Sendable`: its state is touched only from the receiver callbacks, which come one
/// at a time; `gaveUp` is behind its lock.
final class FileWriter: ResultReceiver, @unchecked Sendable {
    private let file: URL
    private let report: ProgressReport
    private let gate = FinishGate<AttachmentDownload>()
    private var handle: FileHandle?
    private var head: HTTPResponse?
    private var errorBody: Data?
    private var written: Int64 = 0
    private var expected: Int64?
    private var failure: CouchError?
    private let maximumSize: Int64?
    private let keepsContentEncoding: Bool
    private let cancelTransfer: @Sendable () -> Void
    private let gaveUp = Locked(false)

    init(
        file: URL, report: ProgressReport, maximumSize: Int64? = nil, keepsContentEncoding: Bool = false,
        cancelTransfer: @escaping @Sendable () -> Void = {}
    ) {
        self.file = file
        self.report = report
        self.maximumSize = maximumSize
        self.keepsContentEncoding = keepsContentEncoding
        self.cancelTransfer = cancelTransfer
    }

    var abandoned: Bool { gaveUp.current }

    func onFinish(_ callback: @escaping @Sendable (Result<AttachmentDownload, CouchError>) -> Void) {
        gate.onFinish(callback)
    }

    func receive(head: HTTPResponse) {
        self.head = head
        guard (200..<300).contains(head.statusCode) else {
            errorBody = Data()
            return
        }
        expected = head.headers["Content-Length"].flatMap { Int64($0) }
        guard FileManager.default.createFile(atPath: file.path, contents: nil),
            let handle = FileHandle(forWritingAtPath: file.path)
        else {
            failure = CouchError(kind: .transport, message: "Cannot write the download to \(file.path).")
            return
        }
        self.handle = handle
        report.update(completed: 0, total: expected)
    }

    func receive(chunk: Data) {
        if errorBody != nil {
            if errorBody!.count < 1 << 20 { errorBody!.append(chunk) }
            return
        }
        guard failure == nil, let handle else { return }
        if let maximumSize, written + Int64(chunk.count) > maximumSize {
            // Checked before writing: the file never holds more than the limit.
            let message =
                "The download exceeds its limit of \(maximumSize) bytes (DownloadOptions.maximumSize): more than"
                + " \(written + Int64(chunk.count)) bytes arrived. The transfer was cancelled and the partial file"
                + " removed."
            failure = CouchError(
                kind: .transport, message: message, statusCode: head?.statusCode, method: "GET",
                underlying: URLError(.dataLengthExceedsMaximum, userInfo: [NSLocalizedDescriptionKey: message]))
            discardFile()
            gaveUp.withLock { $0 = true }
            cancelTransfer()
            return
        }
        do {
            try handle.write(contentsOf: chunk)
            written += Int64(chunk.count)
            report.update(completed: written, total: expected)
        } catch {
            failure = CouchError(kind: .transport, message: "Writing \(file.path) failed: \(error)", underlying: error)
        }
    }

    /// Closes and removes the file written so far (a failed download leaves nothing behind).
    private func discardFile() {
        guard let handle else { return }
        try? handle.close()
        self.handle = nil
        try? FileManager.default.removeItem(at: file)
    }

    func complete(error: (any Error)?) {
        if let failure {
            // Ours comes first: the transport's error is the cancellation it caused.
            discardFile()
            gate.finish(.failure(failure))
            return
        }
        if let error {
            discardFile()
            gate.finish(.failure(error as? CouchError ?? CouchError(kind: .transport, message: "\(error)")))
            return
        }
        try? handle?.close()
        if let head, let errorBody {
            var failure = CouchError.http(status: head.statusCode, body: errorBody, method: "GET", path: nil)
            failure.recordRetryAfter(from: head.headers)
            gate.finish(.failure(failure))
        } else if let head {
            gate.finish(
                .success(
                    AttachmentDownload(
                        file: file, length: written, contentType: head.headers["Content-Type"],
                        etag: head.headers["ETag"],
                        contentEncoding: keepsContentEncoding
                            ? head.headers["Content-Encoding"]?.lowercased() : nil)))
        } else {
            gate.finish(.failure(CouchError(kind: .transport, message: "The download got no response.")))
        }
    }
}
