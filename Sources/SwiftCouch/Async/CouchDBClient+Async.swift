import Foundation

extension CouchDBClient {
    /// Runs `operation` through the pipeline and returns its response.
    ///
    /// The same pipeline as a ``CouchOperationTask`` on the client's queue, run directly (without
    /// the `Foundation.Operation`, whose key-value notifications nothing observes here): at most
    /// ``Configuration/maximumConcurrentOperations`` async calls run at once (the others wait their
    /// turn, in order, without a thread), and a call whose turn has come is prepared and sent from
    /// the calling thread, with no hand-off to a queue's thread.
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
        let box = Locked<PipelineRun<Op>?>(nil)
        let slots = asyncSlots
        let claim = SlotClaim()
        let result = await withTaskCancellationHandler {
            // Unsafe: the pipeline calls its completion exactly once (PipelineTests, OutcomeTests), and
            // a checked continuation costs an allocation and two atomic exchanges more a call.
            await withUnsafeContinuation {
                (continuation: UnsafeContinuation<Result<CouchResponse<Op.Response>, CouchError>, Never>) in
                // No callback queue: the continuation is resumed where the task completes, and
                // hops to this task's executor from there.
                let task = makeRun(
                    building: { operation }, callbackQueue: nil, options: options,
                    completion: { result in
                        if claim.finish() { slots.release() }
                        continuation.resume(returning: result)
                    })
                box.withLock { $0 = task }
                if Task.isCancelled { task.cancel() }
                slots.acquire {
                    if claim.take() {
                        task.start()
                    } else {
                        slots.release()  // cancelled while waiting for its turn
                    }
                }
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
