import Foundation

/// Faults on demand: rules that make the TestServer answer some requests with an error, a dropped
/// connection, a delay, a truncated body or a body that is not JSON, so that a client's retry and
/// error handling can be tested.
///
/// Rules are checked in the order they were added; the first rule whose `Match` fits the request
/// and whose `Frequency` fires decides. A faulted request does **not** reach the engine, except
/// for `.delay` (the request then runs normally) and `.truncatedBody` (the request runs, its answer
/// is cut short). Thread-safe.
///
/// ```swift
/// server.faults.failNext(2, with: .tooManyRequests(retryAfter: 1), matching: .path("/db/doc"))
/// server.faults.add(.serviceUnavailable(), .fraction(0.25), matching: .pathPrefix("/db"))
/// server.faults.clear()
/// ```
public final class TestServerFaults: @unchecked Sendable {
    // @unchecked Sendable: all mutable state is guarded by `lock`.

    /// What a faulted request gets.
    public enum Fault: Sendable, Equatable, CustomStringConvertible {
        /// 429 Too Many Requests with Cloudant's JSON body, and `Retry-After` when given (a whole
        /// number of seconds, `1`, or any text, `"nan"`, to see what a client makes of it).
        case tooManyRequests(retryAfter: RetryAfter? = nil)
        /// 500 Internal Server Error with a CouchDB-shaped JSON body.
        case internalServerError
        /// 503 Service Unavailable with a CouchDB-shaped JSON body, and `Retry-After` when given.
        case serviceUnavailable(retryAfter: RetryAfter? = nil)
        /// The connection is closed after the request has been read, without any answer.
        case dropConnection
        /// The request waits this many seconds, then runs and is answered normally.
        case delay(seconds: Double)
        /// The request runs; its answer declares the full `Content-Length` but only half of the
        /// body is sent before the connection closes. (A streamed answer: half of its first chunk.
        /// An answer with fewer than 2 body bytes is replaced by the body `{}` of which 1 byte is sent.)
        case truncatedBody
        /// 200 with `Content-Type: application/json` and a body that is not JSON.
        case invalidJSON
        /// The request runs and is answered normally, as if the connection stayed open (no
        /// `Connection: close`); then, without reading anything more, the server closes the
        /// connection after `seconds`. A request the client sent on it in the meantime meets a reset.
        case replyThenClose(seconds: Double = 0.2)
        /// A 429 (as `tooManyRequests`), then the connection is closed as in `replyThenClose`.
        case tooManyRequestsThenClose(retryAfter: RetryAfter? = nil, seconds: Double = 0.2)
        /// The request runs (a write happens), then the connection is closed without any answer.
        case dropAfterProcessing
        /// The request runs; its response head is sent one byte at a time over `seconds`.
        case slowHead(seconds: Double)
        /// `302 Found` to `location` (another origin, say), without running the request.
        case redirect(location: String)
        /// The request runs; its answer's head (with the full `Content-Length`) is sent at once,
        /// then its body one byte every `seconds`.
        case trickleBody(seconds: Double)
        /// `102 Processing` interim responses, one every `seconds`, `count` times (nil: until the
        /// client goes away), then the request runs and is answered normally.
        case interim(seconds: Double, count: Int? = nil)

        public var description: String {
            switch self {
            case .tooManyRequests(let s): return s.map { "429 (Retry-After: \($0))" } ?? "429"
            case .internalServerError: return "500"
            case .serviceUnavailable(let s): return s.map { "503 (Retry-After: \($0))" } ?? "503"
            case .dropConnection: return "drop"
            case .delay(let s): return "delay \(s)s"
            case .truncatedBody: return "truncate"
            case .invalidJSON: return "invalid-json"
            case .replyThenClose(let s): return "reply, then close after \(s)s"
            case .tooManyRequestsThenClose(_, let s): return "429, then close after \(s)s"
            case .dropAfterProcessing: return "drop after processing"
            case .slowHead(let s): return "slow head over \(s)s"
            case .redirect(let location): return "redirect to \(location)"
            case .trickleBody(let s): return "body one byte every \(s)s"
            case .interim(let s, let n): return "102 Processing every \(s)s" + (n.map { ", \($0) times" } ?? "")
            }
        }
    }

    /// A `Retry-After` value as sent: a whole number of seconds (`.tooManyRequests(retryAfter: 2)`)
    /// or any text (`.tooManyRequests(retryAfter: "nan")`, `"-5"`, `"1e300"`, an HTTP date).
    public struct RetryAfter: Sendable, Equatable, CustomStringConvertible, ExpressibleByIntegerLiteral,
        ExpressibleByStringLiteral
    {
        /// The header's value, exactly as sent.
        public var value: String

        /// The value `text`, as it is.
        public init(_ text: String) { value = text }
        /// A whole number of seconds.
        public init(seconds: Int) { value = String(seconds) }
        public init(integerLiteral seconds: Int) { self.init(seconds: seconds) }
        public init(stringLiteral text: String) { self.init(text) }

        public var description: String { value }
    }

    /// Which requests a rule applies to.
    public struct Match: Sendable, Equatable, CustomStringConvertible {
        /// The path to compare with, as sent (still percent-encoded). With a `?` it is compared
        /// with path and query together; without, with the path alone. Nil matches every path.
        public var path: String?
        /// Whether `path` is a prefix rather than the whole path.
        public var isPrefix: Bool
        /// The method (`GET`, ...), or nil for any method.
        public var method: String?

        public init(path: String? = nil, isPrefix: Bool = false, method: String? = nil) {
            self.path = path
            self.isPrefix = isPrefix
            self.method = method
        }

        /// Every request.
        public static let any = Match()

        /// Requests for exactly this path (optionally only with this method).
        public static func path(_ path: String, method: String? = nil) -> Match {
            Match(path: path, isPrefix: false, method: method)
        }

        /// Requests whose path starts with `prefix` (optionally only with this method).
        public static func pathPrefix(_ prefix: String, method: String? = nil) -> Match {
            Match(path: prefix, isPrefix: true, method: method)
        }

        /// Every request with this method.
        public static func method(_ method: String) -> Match {
            Match(method: method)
        }

        /// Whether a request with this method, raw path and raw query fits.
        public func matches(method: String, rawPath: String, rawQuery: String?) -> Bool {
            if let m = self.method, m.uppercased() != method.uppercased() { return false }
            guard let path else { return true }
            let subject = path.contains("?") ? rawPath + (rawQuery.map { "?" + $0 } ?? "") : rawPath
            return isPrefix ? subject.hasPrefix(path) : subject == path
        }

        public var description: String {
            let m = method.map { "\($0) " } ?? ""
            guard let path else { return m.isEmpty ? "any request" : "\(m)any path" }
            return isPrefix ? "\(m)\(path)*" : "\(m)\(path)"
        }
    }

    /// How often a rule fires among the requests it matches.
    public enum Frequency: Sendable, Equatable {
        /// The next `n` matching requests, then the rule is removed.
        case next(Int)
        /// This share (0...1) of matching requests, chosen by a generator seeded from the server's
        /// fault seed: the same seed, rules and requests give the same choices every run.
        case fraction(Double)
        /// Every matching request.
        case always
    }

    /// One rule, with how often it has fired.
    public struct Rule: Sendable, Equatable, Identifiable {
        public let id: Int
        public var fault: Fault
        public var frequency: Frequency
        public var match: Match
        /// For `.next(n)`: how many more requests it will fault.
        public var remaining: Int?
        /// How many matching requests it has seen so far.
        public var seen: Int
        /// How many requests it has faulted so far.
        public var fired: Int
        /// The generator stream of a `.fraction` rule.
        let stream: UInt64
    }

    private let lock = NSLock()
    private var _rules: [Rule] = []
    private var nextID = 1
    private var addedSinceReset: UInt64 = 0
    private var _seed: UInt64
    private var _triggered = 0

    /// Creates an empty set of rules; `seed` drives `.fraction` rules.
    public init(seed: UInt64 = 0) {
        _seed = seed
    }

    /// The seed of `.fraction` rules.
    public var seed: UInt64 {
        lock.lock()
        defer { lock.unlock() }
        return _seed
    }

    /// The rules in force, in the order they are checked.
    public var rules: [Rule] {
        lock.lock()
        defer { lock.unlock() }
        return _rules
    }

    /// How many requests have been faulted since the server started (or `clear()`).
    public var triggeredCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return _triggered
    }

    /// Adds a rule and returns its id (for `remove(_:)`).
    @discardableResult
    public func add(_ fault: Fault, _ frequency: Frequency = .always, matching match: Match = .any) -> Int {
        lock.lock()
        defer { lock.unlock() }
        let id = nextID
        nextID += 1
        var remaining: Int?
        if case .next(let n) = frequency { remaining = max(0, n) }
        let rule = Rule(
            id: id, fault: fault, frequency: frequency, match: match, remaining: remaining, seen: 0, fired: 0,
            stream: addedSinceReset)
        addedSinceReset += 1
        if remaining != 0 { _rules.append(rule) }
        return id
    }

    /// Faults the next `count` requests that fit `match`.
    @discardableResult
    public func failNext(_ count: Int = 1, with fault: Fault, matching match: Match = .any) -> Int {
        add(fault, .next(count), matching: match)
    }

    /// Faults a share (0...1) of the requests that fit `match`, deterministically from the seed.
    @discardableResult
    public func failFraction(_ fraction: Double, with fault: Fault, matching match: Match = .any) -> Int {
        add(fault, .fraction(fraction), matching: match)
    }

    /// Faults every request that fits `match`, until the rule is removed.
    @discardableResult
    public func failAlways(with fault: Fault, matching match: Match = .any) -> Int {
        add(fault, .always, matching: match)
    }

    /// Removes one rule.
    public func remove(_ id: Int) {
        lock.lock()
        defer { lock.unlock() }
        _rules.removeAll { $0.id == id }
    }

    /// Removes every rule and sets the triggered count back to 0. Rules added afterwards draw the
    /// same `.fraction` choices as on a fresh server with the same seed.
    public func clear() {
        lock.lock()
        defer { lock.unlock() }
        _rules.removeAll()
        _triggered = 0
        addedSinceReset = 0
    }

    /// `clear()`, and a new seed for `.fraction` rules.
    public func reset(seed: UInt64) {
        lock.lock()
        _seed = seed
        lock.unlock()
        clear()
    }

    /// The fault for a request, if a rule fires for it (and counts it).
    public func fault(forMethod method: String, rawPath: String, rawQuery: String?) -> Fault? {
        lock.lock()
        defer { lock.unlock() }
        var index = 0
        while index < _rules.count {
            var rule = _rules[index]
            guard rule.match.matches(method: method, rawPath: rawPath, rawQuery: rawQuery) else {
                index += 1
                continue
            }
            let draw = rule.seen
            rule.seen += 1
            let fires: Bool
            switch rule.frequency {
            case .always:
                fires = true
            case .next:
                fires = (rule.remaining ?? 0) > 0
                if fires { rule.remaining = (rule.remaining ?? 1) - 1 }
            case .fraction(let share):
                fires = Self.unitValue(seed: _seed, stream: rule.stream, index: UInt64(draw)) < share
            }
            if fires {
                rule.fired += 1
                _triggered += 1
            }
            if rule.remaining == 0 {
                _rules.remove(at: index)
            } else {
                _rules[index] = rule
                index += 1
            }
            if fires { return rule.fault }
        }
        return nil
    }

    /// A number in [0, 1) that depends only on its arguments (SplitMix64).
    static func unitValue(seed: UInt64, stream: UInt64, index: UInt64) -> Double {
        var z = seed &+ (stream &+ 1) &* 0x9E37_79B9_7F4A_7C15 &+ index &* 0xD1B5_4A32_D192_ED03
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z = z ^ (z >> 31)
        return Double(z >> 11) / Double(1 << 53)
    }
}
