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

/// Runs `body` on `queue` (a thread of its own, never one of Swift concurrency's) and returns its
/// value to the awaiting task, through ``handedOff(_:)``.
package func handedOff<Value: Sendable>(on queue: DispatchQueue, _ body: @escaping @Sendable () -> Value) async
    -> Value
{
    await handedOff { deliver in queue.async { deliver(body()) } }
}
