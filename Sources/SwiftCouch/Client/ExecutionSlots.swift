import Foundation

/// At most `limit` async calls of a client run at once; the others wait, in order, without a
/// thread: their start is kept and run when a slot frees (``CouchDBClient/execute(_:options:)``).
///
/// A call that gets a slot at once starts on the caller's own thread — no hand-off to a queue's
/// thread — which is what makes the async API cheaper than the `OperationQueue`.
///
/// `@unchecked Sendable`: `running` and `waiting` are only touched under `lock`.
final class ExecutionSlots: @unchecked Sendable {
    private let limit: Int
    private let lock = NSLock()
    private var running = 0
    private var waiting = FIFO<@Sendable () -> Void>()

    init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// Runs `start` now if a slot is free (on this thread), or later, when one is (on a Dispatch
    /// thread). Whoever runs it must call ``release()`` exactly once afterwards.
    func acquire(_ start: @escaping @Sendable () -> Void) {
        lock.lock()
        if running < limit {
            running += 1
            lock.unlock()
            start()
            return
        }
        waiting.append(start)
        lock.unlock()
    }

    /// Frees a slot: the oldest waiting start (if any) takes it.
    func release() {
        lock.lock()
        guard let next = waiting.popFirst() else {
            running -= 1
            lock.unlock()
            return
        }
        lock.unlock()
        // Not on the releasing thread: that one is finishing another call (a connection's thread).
        DispatchQueue.global().async(execute: next)
    }

    /// Calls running and waiting now (for tests).
    var counts: (running: Int, waiting: Int) {
        lock.lock()
        defer { lock.unlock() }
        return (running, waiting.count)
    }
}

/// Whether one async call holds its slot: it is taken when the call starts, given back once when
/// it completes, and a call completed (cancelled) before its turn gives the slot straight back.
/// A value: its owner keeps it under a lock (``AsyncCall``).
struct SlotClaim: Sendable {
    private enum State { case waiting, holding, done }
    private var state = State.waiting

    /// Called when the slot is granted: true if the call is to start (false: it already ended).
    mutating func take() -> Bool {
        guard state == .waiting else { return false }
        state = .holding
        return true
    }

    /// Called when the call completes: true if it held a slot, which must be released.
    mutating func finish() -> Bool {
        defer { state = .done }
        return state == .holding
    }
}
