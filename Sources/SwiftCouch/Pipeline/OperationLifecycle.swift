/// The life of one ``CouchOperationTask``: a small value type, tested on its own.
///
/// `pending → executing → finished`, with cancellation possible at any point, and the completion
/// handler released exactly once whatever the order of events.
struct OperationLifecycle: Equatable {
    enum Phase: Equatable {
        case pending
        case executing
        case finished
    }

    /// What `start()` must do.
    enum StartAction: Equatable {
        /// Run the operation.
        case run
        /// It was cancelled before starting: report cancellation (if not reported yet) and finish.
        case finishCancelled
        /// Already started or finished: do nothing.
        case ignore
    }

    private(set) var phase: Phase = .pending
    private(set) var isCancelled = false
    /// Whether the completion handler has been claimed.
    private(set) var completionClaimed = false
    /// Whether the request has been handed to the session (see ``beginSending()``).
    private(set) var handedToSession = false

    mutating func start() -> StartAction {
        guard phase == .pending else { return .ignore }
        phase = .executing
        return isCancelled ? .finishCancelled : .run
    }

    /// Marks the operation cancelled. Returns true when the caller should report cancellation now.
    mutating func cancel() -> Bool {
        guard phase != .finished else { return false }
        isCancelled = true
        return !completionClaimed && !handedToSession
    }

    /// The request is about to be handed to the session. False when the operation is already
    /// cancelled: then nothing is sent. After this, a cancellation is reported by the session's
    /// request handle, which knows whether the request may have reached the server.
    mutating func beginSending() -> Bool {
        guard phase == .executing, !isCancelled else { return false }
        handedToSession = true
        return true
    }

    /// Claims the completion handler: true the first time only.
    mutating func claimCompletion() -> Bool {
        guard !completionClaimed else { return false }
        completionClaimed = true
        return true
    }

    /// Moves to finished. Returns whether the phase changed (the caller then posts KVO changes).
    mutating func finish() -> (wasExecuting: Bool, changed: Bool) {
        let wasExecuting = phase == .executing
        guard phase != .finished else { return (false, false) }
        phase = .finished
        return (wasExecuting, true)
    }
}
