import Foundation
import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The socket transport's deadline and decompression ratio on hostile numbers, without a network.
@Suite("SocketTransport: deadline and decompression ratio arithmetic", .ownThreads)
struct TransportBoundsUnitTests {
    @Test("A deadline that is NaN, infinite, 0 or negative is none; an absurd one is capped, never a trap")
    func hostileDeadlines() {
        for seconds in [nil, .nan, -.nan, .infinity, -.infinity, 0, -5, -.greatestFiniteMagnitude] as [TimeInterval?] {
            #expect(SocketJob.deadline(after: seconds) == nil, "\(String(describing: seconds))")
        }
        let now = DispatchTime.now().uptimeNanoseconds
        for seconds in [1e12, .greatestFiniteMagnitude, Double(Int.max), 1e-300] {
            let deadline = SocketJob.deadline(after: seconds)
            #expect(deadline != nil, "\(seconds)")
            #expect((deadline?.uptimeNanoseconds ?? 0) >= now, "\(seconds)")
        }
        let one = SocketJob.deadline(after: 1)?.uptimeNanoseconds ?? 0
        #expect(one >= now + 900_000_000 && one <= now + 60_000_000_000)
        #expect(SocketConnection.seconds(until: DispatchTime(uptimeNanoseconds: 1)) == 0)
    }

    @Test("Inflating checks the ratio piece by piece once a mebibyte was decoded; ordinary bodies pass")
    func ratio() throws {
        // 64 gzip members of a mebibyte of zeros (about 64 KiB) in one read: stopped after the
        // first 16 KiB piece, not inflated whole.
        let member = Gzip.compress(Data(count: 1 << 20))
        var bomb = Data()
        for _ in 0..<64 { bomb.append(member) }
        var inflater = try #require(GzipInflater(contentEncoding: "gzip"))
        var compressed = 0
        var decoded = 0
        #expect(throws: (any Error).self) {
            _ = try SocketConnection.inflate(
                bomb, with: &inflater, ratio: 200, compressed: &compressed, decoded: &decoded)
        }
        #expect(decoded >= 1 << 20)
        #expect(decoded <= 17 << 20)  // one piece's worth at most
        // Under a mebibyte: no check (a small body cannot be a bomb).
        var small = try #require(GzipInflater(contentEncoding: "gzip"))
        (compressed, decoded) = (0, 0)
        let smallOutput = try SocketConnection.inflate(
            Gzip.compress(Data(count: 500_000)), with: &small, ratio: 2, compressed: &compressed, decoded: &decoded)
        #expect(smallOutput.count == 500_000)
        // Text of an ordinary ratio, in one large read: whole, in order.
        // (JSON-like rows with varying numbers compress some 5-10 times, as CouchDB's answers do.)
        var text = Data()
        var state: UInt64 = 42
        while text.count < 1_500_000 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            text.append(contentsOf: Array(#"{"id":"doc-\#(state >> 40)","value":\#(state % 100_000)},"#.utf8))
        }
        var ordinary = try #require(GzipInflater(contentEncoding: "gzip"))
        (compressed, decoded) = (0, 0)
        let output = try SocketConnection.inflate(
            Gzip.compress(text), with: &ordinary, ratio: 200, compressed: &compressed, decoded: &decoded)
        #expect(output == text)
        #expect(decoded == text.count)
        // No ratio: the bomb inflates whole.
        var unlimited = try #require(GzipInflater(contentEncoding: "gzip"))
        (compressed, decoded) = (0, 0)
        let all = try SocketConnection.inflate(
            bomb.prefix(member.count * 20), with: &unlimited, ratio: nil, compressed: &compressed, decoded: &decoded)
        #expect(all.count == 20 << 20)
    }
}

/// URLSessionTransport's deadline timer on hostile numbers, and the timeout it names.
@Suite("URLSessionTransport: deadline timer", .ownThreads)
struct DeadlineTimerTests {
    @Test("No timer for a deadline that is NaN, infinite, zero, negative or absurd, as the socket transport reads it")
    func hostileDeadlines() {
        for seconds in [nil, .nan, .infinity, -.infinity, 0, -5, 1e10, .greatestFiniteMagnitude] as [TimeInterval?] {
            #expect(DeadlineTimer(seconds: seconds) {} == nil, "\(String(describing: seconds))")
        }
    }

    @Test("URLSession's own timeout at the deadline is the deadline; other errors and early timeouts are not")
    func urlSessionTimeoutAtTheDeadline() throws {
        let due = try #require(DeadlineTimer(seconds: 0.01) {})
        Thread.sleep(forTimeInterval: 0.02)
        #expect(due.explains(URLError(.timedOut)))
        #expect(!due.explains(URLError(.networkConnectionLost)))
        let later = try #require(DeadlineTimer(seconds: 60) {})
        #expect(!later.explains(URLError(.timedOut)))
        due.cancel()
        later.cancel()
    }
}
