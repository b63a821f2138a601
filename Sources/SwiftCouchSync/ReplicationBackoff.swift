import Foundation

/// The wait before a continuous replication tries again after a lost connection, a 429 or a 5xx:
/// exponential with full jitter (a random wait between zero and `base · 2^attempt`, capped), and
/// at least a server's `Retry-After` (capped too). A value: tested without a network.
public struct ReplicationBackoff: Sendable, Hashable {
    /// The first ceiling, in seconds. Defaults to 0.5.
    public var base: TimeInterval
    /// The largest wait, in seconds (a `Retry-After` above it is cut to it). Defaults to 60.
    public var cap: TimeInterval
    /// Failures in a row so far.
    public private(set) var attempt: Int = 0

    public init(base: TimeInterval = 0.5, cap: TimeInterval = 60) {
        self.base = max(0, base)
        self.cap = max(0, cap)
    }

    /// The wait before the next try, counting one more failure. `random` is a number in `0..<1`
    /// (a test passes a fixed one); `retryAfter` the server's `Retry-After`, in seconds.
    public mutating func next(retryAfter: TimeInterval? = nil, random: Double = Double.random(in: 0..<1))
        -> TimeInterval
    {
        let exponent = min(attempt, 30)
        attempt += 1
        let ceiling = min(cap, base * pow(2, Double(exponent)))
        var wait = ceiling * min(max(random, 0), 1)
        if let retryAfter, retryAfter.isFinite, retryAfter > 0 { wait = max(wait, min(retryAfter, cap)) }
        return wait
    }

    /// Forgets the failures (after a success).
    public mutating func reset() { attempt = 0 }
}
