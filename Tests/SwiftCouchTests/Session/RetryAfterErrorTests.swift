import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

/// `CouchError.retryAfter`: the wait a 429 (or 503) asked for, read from `Retry-After` by the one
/// parser the retry policy uses, checked before it becomes a delay.
@Suite("CouchError.retryAfter: the server's Retry-After on the error", .ownThreads)
struct RetryAfterErrorTests {
    /// A 429 answered once, with no retry by the session, carrying `header` (none when nil).
    static func tooManyRequests(retryAfter header: String?) -> CouchError? {
        var headers = HTTPFields()
        if let header { headers["Retry-After"] = header }
        var configuration = Configuration()
        configuration.retryPolicy = .disabled
        let run = Simulation.run(
            GetDocumentOperation<JSONValue>(database: "db", id: "doc"),
            responses: [.json(429, #"{"error":"too_many_requests","reason":"slow down"}"#, headers: headers)],
            configuration: configuration)
        return run.error
    }

    static func httpDate(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }

    @Test("Delta-seconds: Retry-After: 7 is 7 seconds")
    func deltaSeconds() throws {
        let error = try #require(Self.tooManyRequests(retryAfter: "7"))
        #expect(error.statusCode == 429)
        #expect(error.retryAfter == 7)
        #expect(error.description.hasSuffix("; the server asked to wait 7 s before trying again"), "\(error)")
        #expect(!error.description.contains("Retry-After"))
    }

    @Test("An HTTP date: the time until it (a date past is 0)")
    func httpDate() throws {
        let future = try #require(Self.tooManyRequests(retryAfter: Self.httpDate(Date().addingTimeInterval(120))))
        let wait = try #require(future.retryAfter)
        #expect(wait > 100 && wait <= 120, "\(wait)")
        #expect(future.description.contains("; the server asked to wait 1"), "\(future)")
        let past = try #require(Self.tooManyRequests(retryAfter: Self.httpDate(Date().addingTimeInterval(-600))))
        #expect(past.retryAfter == 0)
    }

    @Test(
        "Garbage, NaN, infinity and negative numbers are no wait; a huge one is cut to a day",
        arguments: [
            ("soon", nil), ("nan", nil), ("inf", nil), ("-5", nil), ("", nil), ("1e300", 86_400.0),
            ("999999999999", 86_400.0), ("Fri, 31 Dec 9999 23:59:59 GMT", 86_400.0),
        ] as [(String, Double?)])
    func unusable(header: String, expected: Double?) throws {
        let error = try #require(Self.tooManyRequests(retryAfter: header))
        #expect(error.statusCode == 429)
        #expect(error.retryAfter == expected, "Retry-After: \(header)")
        #expect(error.description.contains("asked to wait") == (expected != nil), "\(error)")
        if expected == 86_400 { #expect(error.description.contains("wait 86400 s"), "\(error)") }
        #expect(CouchError.maximumRetryAfter == 86_400)
    }

    @Test("The description says how long the server asked to wait, whatever the value (it is settable)")
    func described() {
        var error = CouchError.validation("bad")
        #expect(!error.description.contains("wait"))
        for (value, text) in [
            (2.5, "wait 2.5 s"), (0, "wait 0 s"), (.infinity, "wait inf s"), (-.infinity, "wait -inf s"),
            (.nan, "wait nan s"), (1e300, "wait 1000000"), (-3, "wait -3 s"),
        ] as [(Double, String)] {
            error.retryAfter = value
            #expect(error.description.contains(text), "\(value): \(error.description.prefix(120))")
        }
    }

    @Test("No header, no wait; an error without a response has none either")
    func absent() throws {
        let error = try #require(Self.tooManyRequests(retryAfter: nil))
        #expect(error.retryAfter == nil)
        #expect(CouchError.validation("bad").retryAfter == nil)
    }

    @Test("A 503 carries it too")
    func serviceUnavailable() throws {
        var configuration = Configuration()
        configuration.retryPolicy = .disabled
        let run = Simulation.run(
            GetDocumentOperation<JSONValue>(database: "db", id: "doc"),
            responses: [
                .json(503, #"{"error":"service_unavailable","reason":"later"}"#, headers: ["Retry-After": "3"])
            ],
            configuration: configuration)
        #expect(run.error?.statusCode == 503)
        #expect(run.error?.retryAfter == 3)
    }
}
