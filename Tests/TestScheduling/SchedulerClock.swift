import Foundation

/// Time that counts only while this process's tasks are scheduled on time.
///
/// Every test target runs in one process, and on a 2-core runner Swift's cooperative thread pool
/// has two threads. A synchronous test that keeps both busy for seconds (parsing, digesting,
/// waiting on a semaphore) delays every async test: a call that ended at its 1.5 s deadline on a
/// Dispatch thread is only resumed once a pool thread is free, and a wall-clock bound of 6.5 s
/// measures that test, not the code. A watchdog counting this clock ticks every `tick`; a tick
/// that comes late by more than `slack` shows the pool was not running tasks, and its lateness is
/// not counted. So a call that never ends still fails its bound (the ticks are punctual then),
/// while a stall of the whole pool moves the bound by its length, up to `maximumForgiven`.
public struct SchedulerClock: Sendable {
    /// How often the clock looks.
    public var tick: Duration
    /// Lateness of a tick up to this is ordinary scheduling and counts as time.
    public var slack: Duration
    /// At most this much stalled time is ever discounted: a pool blocked for good still fails.
    public var maximumForgiven: Duration

    /// A clock ticking every 50 ms, forgiving ticks late by more than 100 ms, up to 120 s in all
    /// (a stall of 75 s was seen under ThreadSanitizer).
    public init(
        tick: Duration = .milliseconds(50), slack: Duration = .milliseconds(100),
        maximumForgiven: Duration = .seconds(120)
    ) {
        self.tick = tick
        self.slack = slack
        self.maximumForgiven = maximumForgiven
    }

    /// Sleeps until `duration` of scheduled time has passed, or until `stop` holds (it is looked at
    /// before every tick); returns how much stalled time it discounted. Throws `CancellationError`
    /// when the task is cancelled.
    @discardableResult
    public func sleep(for duration: Duration, until stop: () -> Bool = { false }) async throws -> Duration {
        let clock = ContinuousClock()
        var ledger = Ledger(clock: self)
        while !stop(), let step = ledger.nextStep(toward: duration) {
            let before = clock.now
            try await clock.sleep(for: step)
            ledger.record(step: step, took: clock.now - before)
        }
        return ledger.forgiven
    }

    /// The clock's arithmetic: time counted and stalls forgiven, tick by tick.
    public struct Ledger: Sendable, Equatable {
        /// Scheduled time so far.
        public private(set) var counted = Duration.zero
        /// Stalled time not counted so far.
        public private(set) var forgiven = Duration.zero
        private let tick: Duration
        private let slack: Duration
        private let maximumForgiven: Duration

        /// An empty ledger for `clock`'s settings.
        public init(clock: SchedulerClock) {
            tick = clock.tick
            slack = clock.slack
            maximumForgiven = clock.maximumForgiven
        }

        /// The next sleep toward `duration`, nil once it has been counted.
        public func nextStep(toward duration: Duration) -> Duration? {
            counted < duration ? min(tick, duration - counted) : nil
        }

        /// A sleep of `step` that took `took`: lateness past the slack is forgiven, up to the maximum.
        public mutating func record(step: Duration, took: Duration) {
            let late = took - step
            guard late > slack, forgiven < maximumForgiven else {
                counted += took
                return
            }
            let discounted = min(late, maximumForgiven - forgiven)
            forgiven += discounted
            counted += took - discounted
        }
    }
}

/// How a ``withSchedulerBound(_:_:)`` call ended.
public struct BoundedOutcome<T: Sendable>: Sendable {
    /// The body's result (a `CancellationError` or the body's own error when it was cut off).
    public var result: Result<T, any Error>
    /// Whether the bound passed first and the body was cancelled.
    public var exceeded: Bool
    /// The stalled time the bound was moved by.
    public var forgiven: Duration
}

/// Runs `body`, and cancels it when it has not ended within `bound` of ``SchedulerClock`` time
/// (or when the calling task is cancelled).
public func withSchedulerBound<T: Sendable>(
    _ bound: Duration, clock: SchedulerClock = SchedulerClock(), _ body: @escaping @Sendable () async throws -> T
) async -> BoundedOutcome<T> {
    let task = Task { try await body() }
    let watchdog = Task { () -> Duration? in
        guard let forgiven = try? await clock.sleep(for: bound) else { return nil }
        task.cancel()
        return forgiven
    }
    let result = await withTaskCancellationHandler {
        await task.result
    } onCancel: {
        task.cancel()
    }
    watchdog.cancel()
    let fired = await watchdog.value
    return BoundedOutcome(result: result, exceeded: fired != nil, forgiven: fired ?? .zero)
}

/// Whether `condition` came to hold within `bound` of ``SchedulerClock`` time, looking every tick
/// (when the task is cancelled: whether it holds then).
public func becomesTrue(
    within bound: Duration, clock: SchedulerClock = SchedulerClock(), _ condition: @Sendable () -> Bool
) async -> Bool {
    _ = try? await clock.sleep(for: bound, until: condition)
    return condition()
}

/// Iterates `sequence` until it ends or throws, for at most `seconds` (then the iteration is
/// cancelled): the elements taken and the error, if any. A sequence that would loop forever
/// shows up as a `.cancelled` error here instead of a hung test. The default bound is generous:
/// in a full parallel run on a loaded machine, a test that ends at once may take many seconds.
public func drain<S: AsyncSequence & Sendable>(_ sequence: S, within seconds: Double = 60) async -> (
    elements: Int, error: (any Error)?
) where S.Element: Sendable {
    // Scheduler time: a test process whose cooperative pool is held by other tests for a minute
    // (seen under ThreadSanitizer) does not count against the bound.
    let outcome = await withSchedulerBound(.seconds(seconds)) { () async -> (Int, (any Error)?) in
        var count = 0
        do {
            for try await _ in sequence { count += 1 }
            return (count, nil)
        } catch {
            return (count, error)
        }
    }
    switch outcome.result {
    case .success(let ended): return ended
    case .failure(let error): return (0, error)
    }
}
