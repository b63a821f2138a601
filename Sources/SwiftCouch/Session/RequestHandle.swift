import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A request in flight through the session; cancelling it ends it with a cancelled error at once.
public final class RequestHandle: Cancellable, @unchecked Sendable {
    // @unchecked Sendable: all mutable state is inside `state`, a `Locked`.
    private struct State {
        var cancelled = false
        var completed = false
        /// Set by `pause()`: applied to the transfer in flight, and to any tracked later (a retry,
        /// or the first attempt when `pause()` came before the transport had started).
        var paused = false
        /// The transfer tracked now has been told to pause (by a call that returned), and no
        /// resume or newer transfer came since: until then a stream's deliveries are held.
        var pauseReachedTransfer = false
        /// Counts the transfers tracked, so that a pause handed to an older one is not taken for
        /// one handed to the transfer tracked now.
        var tracked = 0
        var inFlight: (any Cancellable)?
        var timer: DispatchWorkItem?
        /// An attempt has been handed to the transport and has not ended with a response.
        var transmitting = false
        /// Counts the attempts handed to the transport (see `beginTransmission`).
        var transmission = 0
        /// An earlier attempt ended without a response after it was sent: it may have been carried out.
        var uncertain = false
        /// A response arrived (the server acted on the request, whatever it answered); a
        /// cancellation racing its delivery must not say the request was not carried out.
        var responded = false
    }
    private let state = Locked(State())
    private let completion: @Sendable (Result<HTTPResponse, CouchError>) -> Void
    private let method: String
    private let path: String
    /// The session's register of live requests (for `shutdown()`), if it is one of its requests.
    private let registry: HandleRegistry?

    init(
        request: HTTPRequest, registry: HandleRegistry? = nil,
        completion: @escaping @Sendable (Result<HTTPResponse, CouchError>) -> Void
    ) {
        self.completion = completion
        self.method = request.method.rawValue
        self.path = request.path
        self.registry = registry
    }

    /// Whether `cancel()` was called.
    public var isCancelled: Bool { state.current.cancelled }

    /// Cancels the request: the transport task or the pending retry timer is stopped and the
    /// completion receives a cancelled error, unless it has already been called.
    ///
    /// The error says whether the server may have carried the request out
    /// (``CouchError/isOutcomeUnknown``): true once an attempt was handed to the transport and has
    /// not been answered, or when an earlier attempt was lost after it was sent.
    public func cancel() { cancel(shutDown: false) }

    /// Cancels as ``cancel()``; `shutDown` when the session is shutting down, which the error says.
    func cancel(shutDown: Bool) {
        let (inFlight, timer, unknown) = state.withLock { state -> ((any Cancellable)?, DispatchWorkItem?, Bool) in
            state.cancelled = true
            defer {
                state.inFlight = nil
                state.timer = nil
            }
            return (state.inFlight, state.timer, state.transmitting || state.uncertain || state.responded)
        }
        inFlight?.cancel()
        timer?.cancel()
        var error = CouchError.cancelled(method: method, path: path, outcomeUnknown: unknown)
        if shutDown { error.message = "The client was shut down while the operation was in flight. " + error.message }
        finish(.failure(error))
    }

    /// Called just before an attempt is handed to the transport: the attempt's number, for
    /// ``track(inFlight:transmission:)``, or nil (send nothing) when the request is already
    /// cancelled, so a cancelled request is never sent.
    func beginTransmission() -> Int? {
        state.withLock { state -> Int? in
            guard !state.cancelled else { return nil }
            state.transmitting = true
            state.transmission += 1
            return state.transmission
        }
    }

    /// Called when an attempt ended: `answered` when it provably did nothing or got a response,
    /// `responded` when a response arrived; otherwise it was lost after it was sent.
    func endTransmission(answered: Bool, responded: Bool = false) {
        state.withLock { state in
            state.transmitting = false
            if !answered { state.uncertain = true }
            if responded { state.responded = true }
        }
    }

    /// Whether an attempt was lost after it was sent (so the server may have carried it out).
    var hadUncertainAttempt: Bool { state.current.uncertain }

    /// Calls the completion, the first time only.
    func finish(_ result: Result<HTTPResponse, CouchError>) {
        if claimCompletion() { completion(result) }
    }

    /// Cancels the transfer in flight without completing the request: its attempt ends with
    /// whatever error the transfer's receiver makes of it (a buffered answer past its deadline).
    func cancelTransfer() {
        state.withLock { $0.inFlight }?.cancel()
    }

    /// Marks the request completed without calling the completion (a streamed response that
    /// was delivered straight to its receiver). True the first time only.
    func claimCompletion() -> Bool {
        let first = state.withLock { state -> Bool in
            defer { state.completed = true }
            guard !state.completed else { return false }
            // The transfer's completion closure holds the attempt, which holds this handle: kept,
            // the transfer would keep every completed request alive (a cycle per request).
            state.inFlight = nil
            state.timer = nil
            return true
        }
        if first { registry?.remove(self) }
        return first
    }

    /// Pauses a streamed transfer (back-pressure), now or as soon as it starts.
    public func pause() {
        state.withLock { $0.paused = true }
        applyPause()
    }

    /// Resumes a paused streamed transfer.
    public func resume() {
        state.withLock { state in
            state.paused = false
            state.pauseReachedTransfer = false
        }
        applyPause()
    }

    /// Hands the transfer in flight the pause state wanted *now*, one call at a time: a `pause()`
    /// and a `resume()` racing on two threads can reach the transport in either order, and the
    /// later one re-reads the state, so the transport never stays paused after the last call was
    /// a resume (which would stall the stream for good).
    private func applyPause() {
        Self.applying.withLock { _ in
            let (paused, inFlight, tracked) = state.withLock { ($0.paused, $0.inFlight, $0.tracked) }
            let task = inFlight as? any StreamingTask
            if paused { task?.pause() } else { task?.resume() }
            guard paused, inFlight != nil else { return }
            state.withLock { state in
                // Still the same transfer, still to be paused: the pause has reached it.
                if state.paused, state.tracked == tracked { state.pauseReachedTransfer = true }
            }
        }
    }
    /// One lock for every handle's ``applyPause()``: pauses and resumes are rare next to requests,
    /// which then make no lock of their own (an `NSLock` cost two allocations per request).
    private static let applying = Locked(())

    /// Called by a stream's relay after each chunk: while the consumer has paused the transfer
    /// but the pause has not reached the transport's task yet (the transport started delivering
    /// before `stream` returned and the task is not tracked, or it is tracked and the call that
    /// pauses it has not returned: the thread making it may be descheduled for milliseconds), the
    /// delivering thread waits, so nothing more is read before the task is paused. Bounded: 5 s
    /// at most per chunk.
    func holdUntilPauseReachesTransfer() {
        let deadline = DispatchTime.now() + 5
        while DispatchTime.now() < deadline {
            let waiting = state.withLock { state in state.paused && !state.pauseReachedTransfer && !state.cancelled }
            guard waiting else { return }
            usleep(1_000)
        }
    }

    /// Records the pending retry timer to cancel; cancels it straight away when the handle is
    /// already cancelled.
    func track(timer: DispatchWorkItem) {
        track(inFlight: nil, timer: timer, transmission: nil)
    }

    /// Records the transfer of attempt `transmission` (from ``beginTransmission()``) to cancel or
    /// pause; cancels it straight away when the handle is already cancelled or completed (a
    /// completed handle keeps no transfer: see ``claimCompletion()``). The session may hand
    /// a request to the transport after leaving its queue, so the transfer can be tracked after
    /// its attempt has ended: it is then left alone (finished, and not to replace a retry's timer
    /// or a later attempt's transfer).
    func track(inFlight: any Cancellable, transmission: Int) {
        track(inFlight: inFlight, timer: nil, transmission: transmission)
    }

    private func track(inFlight: (any Cancellable)?, timer: DispatchWorkItem?, transmission: Int?) {
        let (cancelled, paused) = state.withLock { state -> (Bool, Bool) in
            if !state.cancelled {
                // Completed: nothing more is wanted of the transfer, and keeping it would make a cycle.
                if state.completed { return (true, false) }
                if let transmission, !state.transmitting || state.transmission != transmission {
                    return (false, false)
                }
                state.inFlight = inFlight
                state.timer = timer
                state.tracked += 1
                state.pauseReachedTransfer = false
            }
            return (state.cancelled, state.paused)
        }
        if cancelled {
            inFlight?.cancel()
            timer?.cancel()
        } else if paused {
            applyPause()
        }
    }
}

/// The requests of a session still in flight, so that `shutdown()` reaches every one of them
/// (streams, downloads and feeds included), and none starts after it.
final class HandleRegistry: @unchecked Sendable {
    // @unchecked Sendable: all state is behind `state`.
    private struct State {
        var live: [ObjectIdentifier: RequestHandle] = [:]
        var shutDown = false
    }
    private let state = Locked(State())

    /// Registers `handle`; false once the session is shut down (it must not start).
    func add(_ handle: RequestHandle) -> Bool {
        state.withLock { state -> Bool in
            guard !state.shutDown else { return false }
            state.live[ObjectIdentifier(handle)] = handle
            return true
        }
    }

    func remove(_ handle: RequestHandle) {
        state.withLock { _ = $0.live.removeValue(forKey: ObjectIdentifier(handle)) }
    }

    /// Marks the session shut down and returns the requests in flight.
    func shutDown() -> [RequestHandle] {
        state.withLock { state -> [RequestHandle] in
            state.shutDown = true
            defer { state.live = [:] }
            return Array(state.live.values)
        }
    }
}
