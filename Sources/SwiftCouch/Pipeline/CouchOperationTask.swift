import Foundation

/// The `Foundation.Operation` that runs one ``CouchOperation`` through the pipeline.
///
/// Make one with ``CouchDBClient/add(operation:completion:)`` (runs on the client's queue) or
/// ``CouchDBClient/task(for:completion:)`` (add it to any `OperationQueue` you own; dependencies
/// with `addDependency(_:)` work as in Foundation). A task built with
/// ``CouchDBClient/task(building:completion:)`` makes its operation only when it starts, after its
/// dependencies have finished, so it can use their ``result``.
///
/// The completion handler runs exactly once — on success, on every error and on cancellation —
/// on the client's callback queue, and the task is marked finished after it returns, so
/// dependent tasks see everything it did.
public final class CouchOperationTask<Operation: CouchOperation>: Foundation.Operation, @unchecked Sendable {
    // @unchecked Sendable: mutable state lives in `state` (a `Locked`); the rest is immutable.

    /// What the completion handler receives.
    public typealias Completion = @Sendable (Result<CouchResponse<Operation.Response>, CouchError>) -> Void

    private struct State {
        var lifecycle = OperationLifecycle()
        var result: Result<CouchResponse<Operation.Response>, CouchError>?
        var handle: RequestHandle?
    }

    private let state = Locked(State())
    private let makeOperation: @Sendable () throws -> Operation
    private let session: InterceptableSession
    private let requestTimeout: TimeInterval
    private let callbackQueue: DispatchQueue
    private let completion: Completion

    init(
        makeOperation: @escaping @Sendable () throws -> Operation, session: InterceptableSession,
        requestTimeout: TimeInterval, callbackQueue: DispatchQueue, completion: @escaping Completion
    ) {
        self.makeOperation = makeOperation
        self.session = session
        self.requestTimeout = requestTimeout
        self.callbackQueue = callbackQueue
        self.completion = completion
        super.init()
    }

    /// The result, once the operation has completed (set before the completion handler runs).
    public var result: Result<CouchResponse<Operation.Response>, CouchError>? { state.current.result }

    public override var isAsynchronous: Bool { true }
    public override var isExecuting: Bool { state.current.lifecycle.phase == .executing }
    public override var isFinished: Bool { state.current.lifecycle.phase == .finished }

    public override func start() {
        let action = state.withLock { $0.lifecycle.start() }
        switch action {
        case .ignore:
            return
        case .finishCancelled:
            willChangeValue(forKey: "isExecuting")
            didChangeValue(forKey: "isExecuting")
            complete(.failure(.cancelled()))
        case .run:
            willChangeValue(forKey: "isExecuting")
            didChangeValue(forKey: "isExecuting")
            run()
        }
    }

    public override func cancel() {
        super.cancel()
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
        // 1. validate
        do {
            try operation.validate()
        } catch {
            complete(.failure(error))
            return
        }
        // 2. serialise
        do {
            try operation.serialise()
        } catch {
            complete(
                .failure(Self.couchError(error, kind: .serialisation, message: "Building the request body failed")))
            return
        }
        // 3. endpoint, parameters, method, data, content type, headers
        let endpoint = operation.endpoint
        let parameters = operation.parameters
        let method = operation.method
        let body = operation.data
        let contentType = operation.contentType
        var headers = operation.headers
        let request: HTTPRequest
        do {
            if headers["Accept"] == nil { headers["Accept"] = "application/json" }
            if let contentType, body != nil { headers["Content-Type"] = contentType }
            let url = try Self.url(base: session.baseURL, path: endpoint, parameters: parameters)
            request = HTTPRequest(method: method, url: url, headers: headers, body: body, timeout: requestTimeout)
        } catch {
            complete(.failure(error))
            return
        }
        // 4. the session; 5. processResponse
        let prepared = operation
        let isIdempotent =
            prepared.isIdempotent
            ?? RequestSafety.isSafeToRepeat(method: method, parameters: parameters, headers: headers)
        let handle = session.send(request, isIdempotent: isIdempotent) { [weak self] result in
            guard let self else { return }
            switch result {
            case .failure(let error):
                self.complete(.failure(Self.located(error, request: request)))
            case .success(let response):
                let info = HTTPInfo(statusCode: response.statusCode, headers: response.headers)
                do {
                    let value = try prepared.processResponse(data: response.body, httpInfo: info)
                    self.complete(
                        .success(
                            CouchResponse(value: value, statusCode: response.statusCode, headers: response.headers)))
                } catch {
                    var couchError = Self.couchError(error, kind: .decoding, message: "Reading the response failed")
                    if couchError.statusCode == nil { couchError.statusCode = response.statusCode }
                    self.complete(.failure(Self.located(couchError, request: request)))
                }
            }
        }
        let cancelled = state.withLock { state -> Bool in
            state.handle = handle
            return state.lifecycle.isCancelled
        }
        if cancelled { handle.cancel() }
    }

    /// 6. completion: exactly once, then the task finishes.
    private func complete(_ result: Result<CouchResponse<Operation.Response>, CouchError>) {
        deliver(result) { [self] in
            let (wasExecuting, changed) = state.withLock { $0.lifecycle.finish() }
            guard changed else { return }
            willChangeValue(forKey: "isFinished")
            if wasExecuting { willChangeValue(forKey: "isExecuting") }
            if wasExecuting { didChangeValue(forKey: "isExecuting") }
            didChangeValue(forKey: "isFinished")
        }
    }

    /// Calls the completion handler on the callback queue if it has not been called yet; then `after`.
    private func deliver(
        _ result: Result<CouchResponse<Operation.Response>, CouchError>, after: (@Sendable () -> Void)? = nil
    ) {
        let claimed = state.withLock { state -> Bool in
            guard state.lifecycle.claimCompletion() else { return false }
            state.result = result
            return true
        }
        let completion = self.completion
        callbackQueue.async {
            if claimed { completion(result) }
            after?()
        }
    }

    // MARK: - Helpers

    /// Builds the URL from the base, the encoded path segments and the encoded query.
    static func url(base: URL, path: CouchPath, parameters: [URLQueryItem]) throws(CouchError) -> URL {
        guard var components = URLComponents(url: base, resolvingAgainstBaseURL: false) else {
            throw CouchError.validation("The server URL \(base) is not a valid URL.")
        }
        components.user = nil
        components.password = nil
        let basePath =
            components.percentEncodedPath.hasSuffix("/")
            ? String(components.percentEncodedPath.dropLast()) : components.percentEncodedPath
        components.percentEncodedPath = basePath + path.encoded
        if parameters.isEmpty {
            components.percentEncodedQuery = nil
        } else {
            components.percentEncodedQuery = parameters.map {
                PercentEncoding.encode($0.name) + "=" + PercentEncoding.encode($0.value ?? "")
            }.joined(separator: "&")
        }
        guard let url = components.url else {
            throw CouchError.validation("Could not build a URL for \(path).")
        }
        return url
    }

    static func couchError(_ error: any Error, kind: CouchError.Kind, message: String) -> CouchError {
        if let couchError = error as? CouchError { return couchError }
        return CouchError(kind: kind, message: "\(message): \(error)", underlying: error)
    }

    /// Fills in the method and path of an error that lacks them.
    static func located(_ error: CouchError, request: HTTPRequest) -> CouchError {
        var error = error
        if error.method == nil { error.method = request.method.rawValue }
        if error.path == nil { error.path = request.path }
        return error
    }
}
