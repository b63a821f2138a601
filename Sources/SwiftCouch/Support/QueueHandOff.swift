import Dispatch

/// Awaits the value `start` delivers (once, from any thread) and returns it to the awaiting task.
///
/// The value is handed over through a lock both threads take, not through the continuation alone:
/// a continuation orders the two threads with an atomic inside the concurrency runtime, which
/// ThreadSanitizer does not see when the value arrives before the task has suspended (the task then
/// goes on where it awaited). The value's writes on the delivering thread and its reads after the
/// `await` were reported as a race (`LocalStore.open` in CI; `QueueHandOffTests` reproduces it).
/// The lock makes the order explicit, for one uncontended lock a hand-off.
/// - Parameter start: called at once with `deliver`, which it (or what it starts) calls exactly once.
package func handedOff<Value: Sendable>(_ start: (_ deliver: @escaping @Sendable (Value) -> Void) -> Void) async
    -> Value
{
    let handOff = Locked<Value?>(nil)
    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
        start { value in
            handOff.withLock { $0 = value }
            done.resume()
        }
    }
    // Set before the continuation was resumed, which is before this line runs.
    return handOff.withLock { $0! }
}

/// Runs `body` on `queue` (a ``blockingWorkQueue(_:)`` when `body` may block or take long: a
/// concurrent queue would run it on Swift concurrency's threads) and returns its value to the
/// awaiting task, through ``handedOff(_:)``.
package func handedOff<Value: Sendable>(on queue: DispatchQueue, _ body: @escaping @Sendable () -> Value) async
    -> Value
{
    await handedOff { deliver in queue.async { deliver(body()) } }
}

/// A queue for one piece of work that may block (wait on a lock, a feed, an adapter's own code).
///
/// A serial queue of its own: Dispatch runs serial queues on its overcommit threads, which it makes
/// as they are needed. A concurrent queue, `DispatchQueue.global()` among them, runs on the same
/// threads as Swift concurrency's global executor on Linux (one a core, `default-qos`): work that
/// blocks there takes them from every task of the process, and two long-poll feeds waiting in a
/// local store stalled a 2-core machine's tasks for seconds. Creating a queue is cheap (no thread
/// is made for it); use one per piece of work, not one shared concurrent queue.
package func blockingWorkQueue(_ label: String) -> DispatchQueue {
    DispatchQueue(label: label)
}
