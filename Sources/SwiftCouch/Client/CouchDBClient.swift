import Foundation

/// A client for one CouchDB or Cloudant server.
///
/// ```swift
/// let client = CouchDBClient(url: URL(string: "http://127.0.0.1:5984")!,
///                            credentials: Credentials(username: "admin", password: "password"))
/// // async/await
/// let info = try await client.execute(GetServerInfoOperation()).value
/// // completion handlers on the client's OperationQueue
/// client.add(operation: CreateDatabaseOperation(name: "albums")) { result in print(result) }
/// ```
///
/// The client owns an `OperationQueue` (at most ``Configuration/maximumConcurrentOperations`` at
/// once), an ``InterceptableSession`` (authentication, retries, the network) and a serial
/// callback queue. It is `Sendable`: share one client across your program.
public final class CouchDBClient: Sendable {
    /// The server URL, without credentials.
    public let url: URL
    /// The configuration the client was made with.
    public let configuration: Configuration
    /// The session every operation of this client goes through.
    public let session: InterceptableSession
    /// The client's own queue; ``add(operation:options:completion:)`` puts operations on it.
    public let operationQueue: OperationQueue
    /// Where completion handlers run.
    public let callbackQueue: DispatchQueue
    /// The turns of the async calls (``execute(_:options:)``): at most
    /// ``Configuration/maximumConcurrentOperations`` at once.
    let asyncSlots: ExecutionSlots

    /// Creates a client.
    /// - Parameters:
    ///   - url: the server, e.g. `http://127.0.0.1:5984`. User information in the URL
    ///     (`http://user:pass@host`) is taken as the credentials when `credentials` is nil, and is
    ///     never sent in URLs.
    ///   - credentials: who to authenticate as; nil for anonymous access.
    ///   - configuration: see ``Configuration``; every field has a default.
    public init(url: URL, credentials: Credentials? = nil, configuration: Configuration = Configuration()) {
        var components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        var credentials = credentials
        if credentials == nil, let user = components?.user, let password = components?.password {
            credentials = Credentials(
                username: user.removingPercentEncoding ?? user, password: password.removingPercentEncoding ?? password)
        }
        components?.user = nil
        components?.password = nil
        let cleanURL = components?.url ?? url
        self.url = cleanURL
        self.configuration = configuration
        self.session = InterceptableSession(baseURL: cleanURL, credentials: credentials, configuration: configuration)
        let queue = OperationQueue()
        queue.name = "SwiftCouch.CouchDBClient"
        queue.maxConcurrentOperationCount = max(1, configuration.maximumConcurrentOperations)
        self.operationQueue = queue
        self.asyncSlots = ExecutionSlots(limit: configuration.maximumConcurrentOperations)
        self.callbackQueue = configuration.callbackQueue ?? DispatchQueue(label: "SwiftCouch.callbacks")
    }

    /// Makes a task for `operation` without starting it: add it to any `OperationQueue`, with
    /// dependencies as you like.
    /// - Parameters:
    ///   - operation: the CouchDB call.
    ///   - completion: called exactly once with the result, on ``callbackQueue``.
    ///   - options: this call's timeout, retry policy and extra headers.
    public func task<Op: CouchOperation>(
        for operation: Op, options: CallOptions = CallOptions(),
        completion: @escaping CouchOperationTask<Op>.Completion = { _ in }
    ) -> CouchOperationTask<Op> {
        task(building: { operation }, options: options, completion: completion)
    }

    /// Makes a task whose operation is built when the task starts — after its dependencies have
    /// finished — so it can use their results (for example the revision a previous write returned).
    /// If `builder` throws, the completion receives that error and nothing is sent.
    ///
    /// `options` sets this call's timeout, retry policy and extra headers.
    public func task<Op: CouchOperation>(
        building builder: @escaping @Sendable () throws -> Op, options: CallOptions = CallOptions(),
        completion: @escaping CouchOperationTask<Op>.Completion = { _ in }
    ) -> CouchOperationTask<Op> {
        makeTask(building: builder, callbackQueue: callbackQueue, options: options, completion: completion)
    }

    /// The one place pipeline runs are made: driven by a ``CouchOperationTask`` (``makeTask``), or
    /// without a `Foundation.Operation` (the async API, ``executeAndWait(_:)``).
    func makeRun<Op: CouchOperation>(
        building builder: @escaping @Sendable () throws -> Op, callbackQueue: DispatchQueue?,
        options: CallOptions = CallOptions(), completion: @escaping PipelineRun<Op>.Completion
    ) -> PipelineRun<Op> {
        PipelineRun(
            makeOperation: builder, session: session, callbackQueue: callbackQueue, options: options,
            completion: completion)
    }

    /// The one place tasks are made.
    func makeTask<Op: CouchOperation>(
        building builder: @escaping @Sendable () throws -> Op, callbackQueue: DispatchQueue?,
        options: CallOptions = CallOptions(), completion: @escaping CouchOperationTask<Op>.Completion
    ) -> CouchOperationTask<Op> {
        CouchOperationTask(
            driving: makeRun(building: builder, callbackQueue: callbackQueue, options: options, completion: completion))
    }

    /// Runs `operation` on the client's own queue.
    /// - Returns: the task, to cancel it or to make other tasks depend on it.
    @discardableResult
    /// - Parameters:
    ///   - operation: the CouchDB call.
    ///   - options: this call's timeout, retry policy and extra headers.
    ///   - completion: called exactly once with the result, on ``callbackQueue``.
    public func add<Op: CouchOperation>(
        operation: Op, options: CallOptions = CallOptions(),
        completion: @escaping CouchOperationTask<Op>.Completion = { _ in }
    ) -> CouchOperationTask<Op> {
        let task = task(for: operation, options: options, completion: completion)
        operationQueue.addOperation(task)
        return task
    }

    /// Runs a task made by ``task(for:options:completion:)`` or ``task(building:options:completion:)`` on the
    /// client's own queue.
    public func add(task: Foundation.Operation) {
        operationQueue.addOperation(task)
    }

    /// Runs `operation` and waits for its result, blocking the calling thread.
    ///
    /// For command-line tools and scripts. Never call it on the main thread of an app. It does not
    /// take a slot of the client's queue and its result is not delivered through the callback
    /// queue, so it cannot deadlock when that queue is full or when called from a completion handler.
    public func executeAndWait<Op: CouchOperation>(_ operation: Op) -> Result<CouchResponse<Op.Response>, CouchError> {
        let box = Locked<Result<CouchResponse<Op.Response>, CouchError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let task = makeRun(
            building: { operation }, callbackQueue: nil,
            completion: { result in
                box.withLock { $0 = result }
                done.signal()
            })
        DispatchQueue.global().async { task.start() }
        done.wait()
        return box.current ?? .failure(.cancelled())
    }

    /// Shuts the client down: every request in flight — operations, row streams, feeds,
    /// downloads and uploads — ends with a ``CouchError`` of kind `.cancelled` saying so (and
    /// whether the server may have carried it out), operations still queued are cancelled, and
    /// every later request fails at once. See ``InterceptableSession/shutdown()``.
    public func shutdown() {
        session.shutdown()
        operationQueue.cancelAllOperations()
    }
}
