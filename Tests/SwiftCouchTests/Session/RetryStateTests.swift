import Foundation
import Testing

@testable import SwiftCouch

@Suite("RetryState: when and how long to wait")
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
}
