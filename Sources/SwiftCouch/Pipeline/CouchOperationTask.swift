import Foundation

/// The `Foundation.Operation` that runs one ``CouchOperation`` through the pipeline.
///
/// Make one with ``CouchDBClient/add(operation:options:completion:)`` (runs on the client's queue) or
/// ``CouchDBClient/task(for:options:completion:)`` (add it to any `OperationQueue` you own; dependencies
/// with `addDependency(_:)` work as in Foundation). A task built with
/// ``CouchDBClient/task(building:options:completion:)`` makes its operation only when it starts, after its
/// dependencies have finished, so it can use their ``result``.
///
/// The completion handler runs exactly once — on success, on every error and on cancellation —
/// on the client's callback queue, and the task is marked finished after it returns, so
/// dependent tasks see everything it did.
public final class CouchOperationTask<Operation: CouchOperation>: Foundation.Operation, @unchecked Sendable {
    // @unchecked Sendable: its state lives in `pipeline` (behind a lock); the rest is immutable.

    /// What the completion handler receives.
    public typealias Completion = @Sendable (Result<CouchResponse<Operation.Response>, CouchError>) -> Void

    /// The pipeline this task drives (the async API drives the same one without a task).
    private let pipeline: PipelineRun<Operation>

    /// The task that drives `pipeline` (not started yet, and driven by nothing else).
    init(driving pipeline: PipelineRun<Operation>) {
        self.pipeline = pipeline
        super.init()
        pipeline.phaseObserver = self
    }

    /// The result, once the operation has completed (set before the completion handler runs).
    public var result: Result<CouchResponse<Operation.Response>, CouchError>? { pipeline.result }

    public override var isAsynchronous: Bool { true }
    public override var isExecuting: Bool { pipeline.phase == .executing }
    public override var isFinished: Bool { pipeline.phase == .finished }

    public override func start() {
        pipeline.start()
    }

    public override func cancel() {
        super.cancel()
        pipeline.cancel()
    }
}

extension CouchOperationTask: PipelinePhaseObserver {
    func pipelineStartedExecuting() {
        willChangeValue(forKey: "isExecuting")
        didChangeValue(forKey: "isExecuting")
    }

    func pipelineFinished(wasExecuting: Bool) {
        willChangeValue(forKey: "isFinished")
        if wasExecuting { willChangeValue(forKey: "isExecuting") }
        if wasExecuting { didChangeValue(forKey: "isExecuting") }
        didChangeValue(forKey: "isFinished")
    }
}

/// What a ``PipelineRun`` tells the `Foundation.Operation` driving it, so that the operation posts
/// its KVO changes (an `OperationQueue` watches them) after each change of phase.
protocol PipelinePhaseObserver: AnyObject, Sendable {
    /// The run moved from pending to executing.
    func pipelineStartedExecuting()
    /// The run moved to finished, after its completion handler returned.
    func pipelineFinished(wasExecuting: Bool)
}

/// One operation driven through the pipeline, exactly once: validate, serialise, the request's
/// parts, the session, processResponse, the completion handler. ``CouchOperationTask`` (a
/// `Foundation.Operation`, for `OperationQueue`s) and the async API both run their operations
/// through it; the async API without the `Foundation.Operation` and its key-value notifications,
/// which nothing observes there.
///
/// `@unchecked Sendable`: mutable state lives in `state` (a `Locked`) or under its lock
/// (`storedResult`); `phaseObserver` is set once, before the run can start; the rest is immutable.
final class PipelineRun<Operation: CouchOperation>: @unchecked Sendable {
    typealias Completion = @Sendable (Result<CouchResponse<Operation.Response>, CouchError>) -> Void

    /// The lifecycle and the handle, under one lock. Of a type outside this generic class (a type
    /// nested here would be generic too), so the lock's code is compiled once for every operation
    /// type and no type metadata is looked up at run time to use it.
    private let state = Locked(PipelineRunState())
    /// The result, once claimed, for a ``CouchOperationTask`` to read (guarded by `state`'s lock;
    /// kept only when a task drives the run). Kept as `Any` so that freeing a run needs no
    /// metadata of its generic result type (the async API never stores one).
    private var storedResult: Any?
    private let makeOperation: @Sendable () throws -> Operation
    private let session: InterceptableSession
    /// Where the completion handler runs; nil: on the thread that completes the run (the async
    /// API, whose continuation hops to the caller's executor anyway — one thread hand-off fewer).
    private let callbackQueue: DispatchQueue?
    private let completion: Completion
    private let options: CallOptions
    /// The `Foundation.Operation` to tell of phase changes (none for the async API).
    weak var phaseObserver: (any PipelinePhaseObserver)?

    init(
        makeOperation: @escaping @Sendable () throws -> Operation, session: InterceptableSession,
        callbackQueue: DispatchQueue?, options: CallOptions, completion: @escaping Completion
    ) {
        self.makeOperation = makeOperation
        self.options = options
        self.session = session
        self.callbackQueue = callbackQueue
        self.completion = completion
    }

    var result: Result<CouchResponse<Operation.Response>, CouchError>? {
        state.withLock { _ in storedResult as? Result<CouchResponse<Operation.Response>, CouchError> }
    }
    var phase: OperationLifecycle.Phase { state.current.lifecycle.phase }

    func start() {
        let action = state.withLock { $0.lifecycle.start() }
        switch action {
        case .ignore:
            return
        case .finishCancelled:
            phaseObserver?.pipelineStartedExecuting()
            complete(.failure(.cancelled()))
        case .run:
            phaseObserver?.pipelineStartedExecuting()
            run()
        }
    }

    func cancel() {
        let (report, handle) = state.withLock { ($0.lifecycle.cancel(), $0.handle) }
        handle?.cancel()
        if report {
            deliver(.failure(.cancelled()))
        }
    }

    // MARK: - The pipeline

    private func run() {
        var operation: Operation
        do {
            operation = try makeOperation()
        } catch {
            complete(.failure(Self.couchError(error, kind: .validation, message: "Building the operation failed")))
            return
        }
        // 1. validate, 2. serialise, 3. endpoint, parameters, method, data, content type, headers
        let prepared: PreparedRequest
        do {
            prepared = try PreparedRequest(preparing: &operation, for: session, options: options)
        } catch {
            complete(.failure(error))
            return
        }
        let isIdempotent = prepared.isIdempotent
        let request = (consume prepared).request
        // What an error names: the request itself is given up to the session below.
        let method = request.method.rawValue
        let path = request.path
        // A task cancelled up to here has reported its cancellation and sends nothing; from here on
        // a cancellation goes through the request handle, which says whether the request was sent.
        guard state.withLock({ $0.lifecycle.beginSending() }) else {
            complete(.failure(.cancelled(method: method, path: path)))
            return
        }
        // 4. the session; 5. processResponse
        let ready = operation
        let dateCoding = session.configuration.dateCoding
        // The run is held strongly until the session completes (it always does, exactly once): the
        // completion handler is called even when nobody else keeps the run or its task. The cycle
        // this makes (run → handle → this closure → run) ends when the completion is claimed,
        // which lets the handle go.
        let handle = session.send(consume request, isIdempotent: isIdempotent, fromPipeline: true) {
            [self] result in
            switch result {
            case .failure(let error):
                self.complete(.failure(Self.located(error, method: method, path: path)))
            case .success(let response):
                let info = HTTPInfo(statusCode: response.statusCode, headers: response.headers)
                do {
                    // Dates are read as the client's configuration says.
                    let value = try DateCoding.with(dateCoding) {
                        try ready.processResponse(data: response.body, httpInfo: info)
                    }
                    self.complete(
                        .success(
                            CouchResponse(value: value, statusCode: response.statusCode, headers: response.headers)))
                } catch {
                    var couchError = Self.couchError(error, kind: .decoding, message: "Reading the response failed")
                    if couchError.statusCode == nil { couchError.statusCode = response.statusCode }
                    couchError.recordRetryAfter(from: response.headers)
                    self.complete(.failure(Self.located(couchError, method: method, path: path)))
                }
            }
        }
        let cancelled = state.withLock { state -> Bool in
            // Completed already (on this thread, or another's): nothing left to cancel, and kept,
            // the handle would keep this run alive through its completion handler.
            if !state.lifecycle.completionClaimed { state.handle = handle }
            return state.lifecycle.isCancelled
        }
        if cancelled { handle.cancel() }
    }

    /// 6. completion: exactly once, then the task finishes.
    private func complete(_ result: Result<CouchResponse<Operation.Response>, CouchError>) {
        deliver(result, thenFinish: true)
    }

    /// Calls the completion handler on the callback queue if it has not been called yet; then,
    /// with `thenFinish`, marks the run finished (after the handler returned).
    private func deliver(_ result: Result<CouchResponse<Operation.Response>, CouchError>, thenFinish: Bool = false) {
        let keepsResult = phaseObserver != nil
        let claimed = state.withLock { state -> Bool in
            guard state.lifecycle.claimCompletion() else { return false }
            state.handle = nil
            if keepsResult { storedResult = result }
            return true
        }
        guard let callbackQueue else {
            // Here, on this thread: no closure to make (the async API's case, once per call).
            if claimed { completion(result) }
            if thenFinish { finish() }
            return
        }
        callbackQueue.async { [self] in
            if claimed { completion(result) }
            if thenFinish { finish() }
        }
    }

    /// Moves the run to finished and tells the `Foundation.Operation` driving it, if any.
    private func finish() {
        let (wasExecuting, changed) = state.withLock { $0.lifecycle.finish() }
        guard changed else { return }
        phaseObserver?.pipelineFinished(wasExecuting: wasExecuting)
    }

    // MARK: - Helpers

    static func couchError(_ error: any Error, kind: CouchError.Kind, message: String) -> CouchError {
        if let couchError = error as? CouchError { return couchError }
        return CouchError(kind: kind, message: "\(message): \(error)", underlying: error)
    }

    /// Fills in the method and path of an error that lacks them.
    static func located(_ error: CouchError, method: String, path: String) -> CouchError {
        var error = error
        if error.method == nil { error.method = method }
        if error.path == nil { error.path = path }
        return error
    }
}

/// A ``PipelineRun``'s state under its lock.
struct PipelineRunState {
    var lifecycle = OperationLifecycle()
    var handle: RequestHandle?
}

/// A run as the async API's cancellation handler sees it, whatever its operation's type.
protocol CancellablePipelineRun: AnyObject, Sendable {
    func cancel()
}

extension PipelineRun: CancellablePipelineRun {}
