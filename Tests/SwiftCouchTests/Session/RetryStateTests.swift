import Foundation
import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

@Suite("RetryState: when and how long to wait", .ownThreads)
struct RetryStateTests {
    let policy = RetryPolicy(maximumRetries: 4, initialDelay: 0.5, multiplier: 2, maximumDelay: 30)

    @Test("429 delays grow exponentially with equal jitter, then stop after the last retry")
    func growingDelays() {
        var state = RetryState(policy: policy)
        var delays: [TimeInterval] = []
        for jitter in [0.0, 1.0, 0.5, 0.0] {
            guard
                case .retry(let delay) = state.decide(
                    after: .response(status: 429, retryAfter: nil), isIdempotent: false, random: { jitter })
            else {
                Issue.record("expected a retry")
                return
            }
            delays.append(delay)
        }
        // base 0.5, 1, 2, 4: delay = base/2 + base/2 * jitter
        #expect(delays == [0.25, 1.0, 1.5, 2.0])
        #expect(zip(delays, delays.dropFirst()).allSatisfy { $0 <= $1 })
        #expect(state.decide(after: .response(status: 429, retryAfter: nil), isIdempotent: false) == .done)
        #expect(state.retries == 4)
    }

    @Test("Retry-After in seconds is honoured and capped at the maximum delay")
    func retryAfterSeconds() {
        var state = RetryState(policy: policy)
        #expect(state.decide(after: .response(status: 429, retryAfter: "3"), isIdempotent: false) == .retry(after: 3))
        #expect(
            state.decide(after: .response(status: 429, retryAfter: "120"), isIdempotent: false) == .retry(after: 30))
    }

    @Test("Retry-After as an HTTP date is honoured")
    func retryAfterDate() {
        var state = RetryState(policy: policy)
        let now = Date(timeIntervalSince1970: 1_700_000_000)  // Tue, 14 Nov 2023 22:13:20 GMT
        let decision = state.decide(
            after: .response(status: 429, retryAfter: "Tue, 14 Nov 2023 22:13:25 GMT"), isIdempotent: false, now: now)
        #expect(decision == .retry(after: 5))
    }

    @Test("5xx and dropped connections are retried only when enabled and only for safe requests")
    func serverErrors() {
        var off = RetryState(policy: policy)
        #expect(off.decide(after: .response(status: 503, retryAfter: nil), isIdempotent: true) == .done)
        #expect(off.decide(after: .connectionLost, isIdempotent: true) == .done)

        var on = policy
        on.retryServerErrors = true
        var unsafe = RetryState(policy: on)
        #expect(unsafe.decide(after: .response(status: 503, retryAfter: nil), isIdempotent: false) == .done)
        #expect(unsafe.decide(after: .connectionLost, isIdempotent: false) == .done)

        for status in [500, 502, 503, 504] {
            var safe = RetryState(policy: on)
            #expect(
                safe.decide(after: .response(status: status, retryAfter: nil), isIdempotent: true, random: { 0 })
                    == .retry(after: 0.25))
        }
        var safe = RetryState(policy: on)
        #expect(safe.decide(after: .connectionLost, isIdempotent: true, random: { 0 }) == .retry(after: 0.25))
        var notRetryable = RetryState(policy: on)
        #expect(notRetryable.decide(after: .response(status: 501, retryAfter: nil), isIdempotent: true) == .done)
    }

    @Test("Successes, client errors and a disabled policy are never retried")
    func noRetry() {
        var state = RetryState(policy: policy)
        for status in [200, 201, 400, 401, 404, 409, 412] {
            #expect(state.decide(after: .response(status: status, retryAfter: nil), isIdempotent: true) == .done)
        }
        var disabled = RetryState(policy: .disabled)
        #expect(disabled.decide(after: .response(status: 429, retryAfter: nil), isIdempotent: true) == .done)
    }

    @Test("Delays never exceed the cap however many retries")
    func cap() {
        var state = RetryState(policy: RetryPolicy(maximumRetries: 20, initialDelay: 1, maximumDelay: 5))
        for _ in 0..<20 {
            guard
                case .retry(let delay) = state.decide(
                    after: .response(status: 429, retryAfter: nil), isIdempotent: false, random: { 1 })
            else {
                Issue.record("expected a retry")
                return
            }
            #expect(delay <= 5)
        }
    }

    /// The delay of the one retry `state` decides after a 429 with `retryAfter`.
    static func delay(_ state: inout RetryState, retryAfter: String?, random: Double = 0.5) -> TimeInterval? {
        guard
            case .retry(let delay) = state.decide(
                after: .response(status: 429, retryAfter: retryAfter), isIdempotent: false, random: { random })
        else { return nil }
        return delay
    }

    @Test("A Retry-After that is not a usable number is ignored or clamped: every delay is finite, 0 or more, capped")
    func hostileRetryAfter() {
        // Not a number of seconds to wait: treated as absent (the backoff's 0.375 s here).
        for value in ["nan", "NaN", "-nan", "inf", "-inf", "infinity", "-5", "-0.5", "garbage", "", "0x", "1e"] {
            var state = RetryState(policy: policy)
            #expect(Self.delay(&state, retryAfter: value) == 0.375, "Retry-After: \(value)")
        }
        // Absurdly long: clamped to the maximum delay.
        for value in ["1e300", "99999999999999999999999999", "\(Int.max)", "1e12", "31"] {
            var state = RetryState(policy: policy)
            #expect(Self.delay(&state, retryAfter: value) == 30, "Retry-After: \(value)")
        }
        var state = RetryState(policy: policy)
        #expect(Self.delay(&state, retryAfter: " 2 ") == 2)
        // A date long past: at once; far ahead: the maximum.
        state = RetryState(policy: policy)
        #expect(Self.delay(&state, retryAfter: "Thu, 01 Jan 1970 00:00:00 GMT") == 0)
        state = RetryState(policy: policy)
        #expect(Self.delay(&state, retryAfter: "Fri, 31 Dec 9999 23:59:59 GMT") == 30)
    }

    @Test("A hostile policy or random source never makes a delay NaN, infinite or negative")
    func hostilePolicies() {
        let policies = [
            RetryPolicy(maximumRetries: 3, initialDelay: .nan),
            RetryPolicy(maximumRetries: 3, initialDelay: -1),
            RetryPolicy(maximumRetries: 3, initialDelay: .infinity),
            RetryPolicy(maximumRetries: 3, initialDelay: 0, multiplier: .infinity),
            RetryPolicy(maximumRetries: 3, initialDelay: 1, multiplier: .nan),
            RetryPolicy(maximumRetries: 3, initialDelay: 1, multiplier: -3),
            RetryPolicy(maximumRetries: 3, maximumDelay: .nan),
            RetryPolicy(maximumRetries: 3, maximumDelay: -5),
            RetryPolicy(maximumRetries: 3, maximumDelay: .infinity),
            RetryPolicy(maximumRetries: 3, initialDelay: .greatestFiniteMagnitude, multiplier: 10),
        ]
        for policy in policies {
            for random in [0, 1, .nan, -1, 2, .infinity] as [Double] {
                for retryAfter in [nil, "nan", "5", "1e300"] as [String?] {
                    var state = RetryState(policy: policy)
                    for _ in 0..<3 {
                        guard let delay = Self.delay(&state, retryAfter: retryAfter, random: random) else {
                            Issue.record("expected a retry")
                            return
                        }
                        #expect(delay.isFinite && delay >= 0 && delay <= 86_400, "\(policy) \(random) \(delay)")
                    }
                }
            }
        }
    }
}
