import Foundation
import SwiftCouch
import SwiftCouchTesting
import SwiftCouchTestSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

@Suite("ChangesFollower: only transient faults are retried")
struct ChangesFollowerEndTests {
    static func follower(
        _ responder: CountingResponder, mode: ChangesFollower<JSONValue>.Mode = .finite,
        configure: (inout ChangesFollower<JSONValue>.Options) -> Void = { _ in }
    ) -> ChangesFollower<JSONValue> {
        var options = ChangesFollower<JSONValue>.Options(mode: mode, batchSize: 2)
        options.initialBackoff = 0.001
        options.maximumBackoff = 0.01
        configure(&options)
        return ChangesFollower(client: responder.client(), database: "db", options: options)
    }

    static let deep = String(repeating: "[", count: 1_000_000) + String(repeating: "]", count: 1_000_000)

    @Test(
        "A feed without last_seq, a line nested 1,000,000 deep, or a wrong shape ends the follower with .decoding",
        arguments: [
            #"{"results":[],"pending":0}"#, #"{"results":[{"seq":"1","id":"a","changes":[]}],"pending":0}"#,
            #"{"results":[\#(deep)],"last_seq":"1"}"#, #"{"results":{},"last_seq":"1"}"#, "not json",
        ])
    func undecodableAnswer(body: String) async {
        for mode in [ChangesFollower<JSONValue>.Mode.finite, .listen] {
            let responder = CountingResponder { _, _ in .json(200, body) }
            let (count, error) = await drain(Self.follower(responder, mode: mode))
            #expect(count == 0)
            #expect((error as? CouchError)?.kind == .decoding, "\(mode): \(String(describing: error))")
            #expect(responder.requests == 1, "\(mode): \(responder.requests) requests")
        }
    }

    @Test("A status retrying cannot fix (405, 409, 413, a redirect) ends the follower with it")
    func permanentStatuses() async {
        for status in [405, 409, 413, 301] {
            let responder = CountingResponder { _, _ in .json(status, #"{"error":"x","reason":"y"}"#) }
            let (_, error) = await drain(Self.follower(responder))
            #expect((error as? CouchError)?.statusCode == status, "\(status): \(String(describing: error))")
            #expect(responder.requests == 1, "\(status): \(responder.requests) requests")
        }
    }

    @Test("Transient faults (a lost connection, 429, 500, 503, 408) are still retried, then the feed is read")
    func transientFaultsRetried() async {
        let responder = CountingResponder { index, _ in
            switch index {
            case 0: return .failure(URLError(.networkConnectionLost))
            case 1: return .json(429, #"{"error":"too_many_requests","reason":"slow down"}"#)
            case 2: return .json(500, #"{"error":"unknown_error","reason":"x"}"#)
            case 3: return .json(503, #"{"error":"unavailable","reason":"x"}"#)
            case 4: return .json(408, #"{"error":"timeout","reason":"x"}"#)
            default:
                return .json(200, #"{"results":[{"seq":"1","id":"a","changes":[{"rev":"1-a"}]}],"last_seq":"1"}"#)
            }
        }
        let (count, error) = await drain(Self.follower(responder))
        #expect(error == nil, "\(String(describing: error))")
        #expect(count == 1)
    }

    @Test("A full batch whose last_seq is the since it was asked from does not advance: an error, not a loop")
    func feedThatDoesNotAdvance() async {
        let responder = CountingResponder { _, _ in
            .json(
                200,
                #"{"results":[{"seq":"5","id":"a","changes":[]},{"seq":"5","id":"b","changes":[]}],"last_seq":"5","pending":3}"#
            )
        }
        let (count, error) = await drain(
            Self.follower(responder) { $0.since = CouchSequence("5") })
        #expect((error as? CouchError)?.kind == .decoding, "\(String(describing: error))")
        #expect(count <= 2)
        #expect(responder.requests == 1)
    }

    @Test("Backoff settings that are not finite or are huge do not trap (the delay is clamped)")
    func absurdBackoff() async {
        for (initial, maximum) in [(Double.nan, 1.0), (0.001, Double.infinity), (-5, 1e300), (0.002, -1)] {
            let responder = CountingResponder { index, _ in
                index == 0
                    ? .failure(URLError(.networkConnectionLost))
                    : .json(200, #"{"results":[],"last_seq":"1","pending":0}"#)
            }
            let follower = Self.follower(responder) {
                $0.initialBackoff = initial
                $0.maximumBackoff = maximum
            }
            let (_, error) = await drain(follower, within: 30)
            #expect(error == nil, "\(initial), \(maximum): \(String(describing: error))")
        }
    }

    @Test("Continuous: an undecodable line ends the follower; an empty answer is reopened after a backoff")
    func continuous() async {
        let broken = CountingResponder { _, _ in .json(200, "{\"seq\":\"1\",\"id\":\"a\",\"changes\":[{]}\n") }
        let (_, error) = await drain(
            Self.follower(broken, mode: .listen) { $0.continuous = true })
        #expect((error as? CouchError)?.kind == .decoding, "\(String(describing: error))")
        #expect(broken.requests == 1)

        // A server that ends every continuous response at once, empty: reopened, but not in a
        // tight loop (the backoff grows to its maximum, 0.2 s here).
        let empty = CountingResponder { _, _ in .json(200, "\n") }
        let (_, stopped) = await drain(
            Self.follower(empty, mode: .listen) {
                $0.continuous = true
                $0.maximumBackoff = 0.2
            }, within: 1.5)
        #expect(stopped != nil && (stopped as? CouchError)?.kind != .decoding, "\(String(describing: stopped))")
        #expect(empty.requests < 100, "\(empty.requests) requests in 1.5 s")
    }

    @Test("Listening: a server answering every long-poll at once with no change is not asked in a tight loop")
    func emptyLongPolls() async {
        let empty = CountingResponder { _, _ in .json(200, #"{"results":[],"last_seq":"1","pending":0}"#) }
        let (_, stopped) = await drain(
            Self.follower(empty, mode: .listen) { $0.maximumBackoff = 0.2 }, within: 1.5)
        #expect(stopped != nil && (stopped as? CouchError)?.kind != .decoding, "\(String(describing: stopped))")
        #expect(empty.requests < 100, "\(empty.requests) requests in 1.5 s")
    }
}
