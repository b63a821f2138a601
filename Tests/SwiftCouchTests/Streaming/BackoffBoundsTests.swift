import Foundation
import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

/// Issue 24: no number — a setting, an attempt count — becomes a delay that traps
/// (`UInt64(NaN)`, `0...NaN`, `UInt64(1e21)`) or waits for ever.
@Suite("Retry delays in streams are clamped whatever the numbers", .ownThreads)
struct BackoffBoundsTests {
    static let absurd: [Double] = [.nan, .infinity, -.infinity, -1, 0, 1e-300, 1e12, 1e300, .greatestFiniteMagnitude]

    @Test("ChangesFollower's backoff ceiling is finite, within 0…1 h, for any settings and attempt")
    func followerCeiling() {
        for initial in Self.absurd + [0.1] {
            for maximum in Self.absurd + [60] {
                for attempt in [Int.min, -1, 0, 1, 2, 63, 64, 65, 1_000_000, Int.max] {
                    let ceiling = ChangesFollower<JSONValue>.backoffCeiling(
                        attempt: attempt, initial: initial, maximum: maximum)
                    #expect(ceiling.isFinite && ceiling >= 0 && ceiling <= 3_600, "\(initial) \(maximum) \(attempt)")
                    // What the follower then sleeps must fit UInt64 nanoseconds.
                    #expect(ceiling * 1_000_000_000 < Double(UInt64.max))
                }
            }
        }
        #expect(ChangesFollower<JSONValue>.backoffCeiling(attempt: 1, initial: 0.1, maximum: 60) == 0.1)
        #expect(ChangesFollower<JSONValue>.backoffCeiling(attempt: 4, initial: 0.1, maximum: 60) == 0.8)
        #expect(ChangesFollower<JSONValue>.backoffCeiling(attempt: 40, initial: 0.1, maximum: 60) == 60)
    }

    @Test("BulkWriter's resend delay is finite, within 0…60 s, for any setting and attempt")
    func bulkWriterDelay() {
        for first in Self.absurd + [0.1] {
            for attempt in [Int.min, -1, 0, 1, 2, 63, 64, 65, 1_000_000, Int.max] {
                let delay = BulkWriter<JSONValue>.retryDelay(attempt: attempt, first: first)
                #expect(delay.isFinite && delay >= 0 && delay <= 60, "\(first) \(attempt)")
            }
        }
        #expect(BulkWriter<JSONValue>.retryDelay(attempt: 1, first: 0.1) == 0.1)
        #expect(BulkWriter<JSONValue>.retryDelay(attempt: 3, first: 0.1) == 0.4)
    }

    @Test("Only transient faults count as transient")
    func transientFaults() {
        #expect(ChangesFollower<JSONValue>.isTransient(CouchError(kind: .transport, message: "lost")))
        for status in [408, 429, 500, 502, 503, 504, 599] {
            #expect(ChangesFollower<JSONValue>.isTransient(CouchError(kind: .http, message: "", statusCode: status)))
        }
        for status in [200, 301, 304, 400, 401, 403, 404, 405, 409, 412, 413, 415, 600] {
            #expect(!ChangesFollower<JSONValue>.isTransient(CouchError(kind: .http, message: "", statusCode: status)))
        }
        for kind in [CouchError.Kind.decoding, .validation, .serialisation, .authentication, .adapter, .cancelled] {
            #expect(!ChangesFollower<JSONValue>.isTransient(CouchError(kind: kind, message: "")))
        }
        let limit = CouchError(kind: .transport, message: "too big", underlying: URLError(.dataLengthExceedsMaximum))
        #expect(!ChangesFollower<JSONValue>.isTransient(limit))
    }
}
