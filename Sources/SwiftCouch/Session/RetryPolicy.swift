import Foundation

/// When and how SwiftCouch repeats a request that the server turned away.
///
/// `429 Too Many Requests` is retried for every method: the server did not act on the request.
/// `500`, `502`, `503`, `504` and dropped connections are retried only when
/// ``retryServerErrors`` is on, and then only for requests that are safe to repeat (`GET`, `HEAD`,
/// and writes that carry a revision); never for a `POST` that could create a second document.
///
/// Delays grow exponentially with "equal jitter": the n-th retry waits between half and all of
/// `initialDelay × multiplier^(n-1)`, capped at ``maximumDelay``. A `Retry-After` header (seconds
/// or an HTTP date) is honoured instead, capped the same way. A `Retry-After` that is not a number
/// of seconds to wait (`nan`, `inf`, `-5`, text that is neither a number nor a date) counts as
/// absent; one far too long (`1e300`, a date in the year 9999) is capped. Every delay is finite and
/// at least 0, whatever the header or the policy's own numbers (a NaN or negative `maximumDelay`
/// caps at 0, an infinite one at a day).
public struct RetryPolicy: Sendable, Hashable {
    /// How many times one request may be retried after its first attempt. Defaults to 4.
    public var maximumRetries: Int = 4
    /// The delay before the first retry, before jitter. Defaults to 0.25 seconds.
    public var initialDelay: TimeInterval = 0.25
    /// How much each delay grows over the previous one. Defaults to 2.
    public var multiplier: Double = 2
    /// The longest one delay may be, `Retry-After` included. Defaults to 30 seconds.
    public var maximumDelay: TimeInterval = 30
    /// Whether `429 Too Many Requests` is retried. Defaults to true.
    public var retryTooManyRequests: Bool = true
    /// Whether 500, 502, 503, 504 and dropped connections are retried (safe requests only). Defaults to false.
    public var retryServerErrors: Bool = false

    /// Creates a policy; every parameter has the default documented on its property.
    public init(
        maximumRetries: Int = 4, initialDelay: TimeInterval = 0.25, multiplier: Double = 2,
        maximumDelay: TimeInterval = 30, retryTooManyRequests: Bool = true, retryServerErrors: Bool = false
    ) {
        self.maximumRetries = maximumRetries
        self.initialDelay = initialDelay
        self.multiplier = multiplier
        self.maximumDelay = maximumDelay
        self.retryTooManyRequests = retryTooManyRequests
        self.retryServerErrors = retryServerErrors
    }

    /// The default policy: 429 retried up to 4 times, from 0.25 s doubling, at most 30 s a delay.
    public static let `default` = RetryPolicy()

    /// Never retry.
    public static let disabled = RetryPolicy(maximumRetries: 0, retryTooManyRequests: false)

    /// Statuses retried when ``retryServerErrors`` is on.
    public static let retryableServerStatuses: Set<Int> = [500, 502, 503, 504]
}

/// What happened to one attempt, as far as retrying is concerned.
enum AttemptOutcome: Equatable {
    /// A response with this status (and its `Retry-After` header, if any).
    case response(status: Int, retryAfter: String?)
    /// The connection failed or dropped before a response arrived.
    case connectionLost
}

/// The retry state of one request: a small value type, driven by the session, tested on its own.
struct RetryState {
    /// What to do after an attempt.
    enum Decision: Equatable {
        case retry(after: TimeInterval)
        case done
    }

    let policy: RetryPolicy
    /// How many retries have been scheduled so far.
    private(set) var retries = 0

    init(policy: RetryPolicy) { self.policy = policy }

    /// Decides whether to try again after `outcome`.
    /// - Parameters:
    ///   - isIdempotent: whether the request is safe to repeat (for 5xx and dropped connections).
    ///   - now: the current time, for `Retry-After` dates.
    ///   - random: a uniform random number in `0...1`; injectable so tests are deterministic.
    mutating func decide(
        after outcome: AttemptOutcome, isIdempotent: Bool, now: Date = Date(),
        random: () -> Double = { Double.random(in: 0...1) }
    ) -> Decision {
        guard retries < policy.maximumRetries else { return .done }
        var retryAfter: String?
        switch outcome {
        case .response(429, let header):
            guard policy.retryTooManyRequests else { return .done }
            retryAfter = header
        case .response(let status, let header):
            guard policy.retryServerErrors, isIdempotent, RetryPolicy.retryableServerStatuses.contains(status) else {
                return .done
            }
            retryAfter = header
        case .connectionLost:
            guard policy.retryServerErrors, isIdempotent else { return .done }
        }
        retries += 1
        let cap = Self.cap(policy.maximumDelay)
        if let retryAfter, let seconds = RetryState.parseRetryAfter(retryAfter, now: now) {
            return .retry(after: Self.bounded(seconds, cap: cap))
        }
        // Any NaN (0 × ∞, a NaN policy or random number) ends as the cap: never a timer that
        // cannot fire, never a retry at once in a loop.
        let base = Self.bounded(policy.initialDelay * pow(policy.multiplier, Double(retries - 1)), cap: cap)
        let jitter = random()
        return .retry(after: Self.bounded(base / 2 + base / 2 * (jitter.isNaN ? 1 : min(max(jitter, 0), 1)), cap: cap))
    }

    /// The longest delay a policy allows: its `maximumDelay` when that is a finite number of
    /// seconds, 0 when it is NaN or negative, a day when it is infinite.
    static func cap(_ maximumDelay: TimeInterval) -> TimeInterval {
        guard !maximumDelay.isNaN, maximumDelay > 0 else { return 0 }
        return min(maximumDelay, 86_400)
    }

    /// `delay` within `0...cap` (`cap` from ``cap(_:)``): negative is 0, NaN and +∞ are `cap`.
    static func bounded(_ delay: TimeInterval, cap: TimeInterval) -> TimeInterval {
        if delay.isNaN { return cap }
        return min(max(delay, 0), cap)
    }

    /// Reads `Retry-After` as delta-seconds or as an HTTP date; nil when it is neither, or a
    /// number that is not a time to wait (NaN, infinite, negative).
    static func parseRetryAfter(_ value: String, now: Date) -> TimeInterval? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Double(trimmed) {
            // "nan", "inf" and "-5" are Doubles too: a peer that sends them said nothing usable. A
            // huge whole number is a huge finite Double (capped by the caller).
            return seconds.isFinite && seconds >= 0 ? seconds : nil
        }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: trimmed) else { return nil }
        return date.timeIntervalSince(now)
    }
}
