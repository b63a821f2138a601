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
        // The run (for the cancellation handler) and the call's slot, under one lock.
        let call = Locked(AsyncCall())
        let slots = asyncSlots
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
                        // Letting the run go ends the cycle call → run → this closure → call.
                        let heldSlot = call.withLock { call -> Bool in
                            call.run = nil
                            return call.slot.finish()
                        }
                        if heldSlot { slots.release() }
                        continuation.resume(returning: result)
                    })
                call.withLock { $0.run = task }
                if Task.isCancelled { task.cancel() }
                slots.acquire {
                    if call.withLock({ $0.slot.take() }) {
                        task.start()
                    } else {
                        slots.release()  // cancelled while waiting for its turn
                    }
                }
            }
        } onCancel: {
            call.withLock { $0.run }?.cancel()
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

/// What one async call's start, completion and cancellation handler share. Not generic: its lock
/// is compiled once, with no type metadata to look up per call.
struct AsyncCall {
    /// The run, until it completes (for the cancellation handler).
    var run: (any CancellablePipelineRun)?
    var slot = SlotClaim()
}
