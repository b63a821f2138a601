import Foundation

extension CouchDBClient {
    /// Runs `operation` on the client's queue and returns its response.
    ///
    /// Cancelling the calling task cancels the HTTP request (or the pending retry) at once.
    /// - Parameters:
    ///   - operation: the CouchDB call.
    ///   - options: this call's timeout, retry policy and extra headers (defaults: the configuration's).
    /// - Throws: ``CouchError`` — `.cancelled` when the task was cancelled.
    @discardableResult
    public func execute<Op: CouchOperation>(_ operation: Op, options: CallOptions = CallOptions())
        async throws(CouchError) -> CouchResponse<Op.Response>
    {
        let box = Locked<CouchOperationTask<Op>?>(nil)
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation {
                (continuation: CheckedContinuation<Result<CouchResponse<Op.Response>, CouchError>, Never>) in
                // No callback queue: the continuation is resumed where the task completes, and
                // hops to this task's executor from there.
                let task = makeTask(
                    building: { operation }, callbackQueue: nil, options: options,
                    completion: { result in continuation.resume(returning: result) })
                box.withLock { $0 = task }
                if Task.isCancelled { task.cancel() }
                operationQueue.addOperation(task)
            }
        } onCancel: {
            box.current?.cancel()
        }
        return try result.get()
    }

    /// Runs `operation` and returns just its decoded value.
    public func value<Op: CouchOperation>(_ operation: Op, options: CallOptions = CallOptions())
        async throws(CouchError) -> Op.Response
    {
        try await execute(operation, options: options).value
    }
}
