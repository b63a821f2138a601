import CouchQuery
import Foundation
import HTTPWire

/// A fault rule written as text, as the `TestServer` executable's `--fault` option takes it:
///
/// `KIND[,OPTION=VALUE...]`
///
/// * KIND: `429`, `500`, `503`, `drop`, `truncate`, `invalid-json`, `delay:SECONDS`, and the shapes
///   of real servers and proxies: `reply-then-close:SECONDS` (answer, then close without notice),
///   `429-then-close:SECONDS`, `drop-after` (the request runs, no answer), `slow-head:SECONDS`,
///   `redirect` with `location=URL`, `trickle-body:SECONDS` (the body one byte every SECONDS),
///   `interim:SECONDS` (`102 Processing` every SECONDS, with `count=N` N times, else until the
///   client goes away, then the answer)
/// * `retry-after=VALUE` (429, 503 and 429-then-close): sent as it is, whole seconds or any text
///   without a comma (`retry-after=nan`, `retry-after=-5`, `retry-after=1e300`)
/// * `next=N` (the next N matching requests) or `fraction=F` (0...1); default: every matching request
/// * `path=/exact/path` or `prefix=/path/prefix`, and `method=GET`
///
/// Examples: `429,retry-after=2,next=3`, `503,fraction=0.25,prefix=/db`, `drop,next=1,path=/db/doc,method=GET`.
public struct FaultSpec: Sendable, Equatable {
    public var fault: TestServerFaults.Fault
    public var frequency: TestServerFaults.Frequency
    public var match: TestServerFaults.Match

    public init(
        fault: TestServerFaults.Fault, frequency: TestServerFaults.Frequency = .always,
        match: TestServerFaults.Match = .any
    ) {
        self.fault = fault
        self.frequency = frequency
        self.match = match
    }

    /// Why a spec could not be read.
    public struct ParseError: Error, Sendable, CustomStringConvertible {
        public var message: String
        public var description: String { message }
    }

    /// Reads a spec (see the type's documentation).
    public init(parsing text: String) throws {
        let items = text.split(separator: ",", omittingEmptySubsequences: true).map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        guard let kind = items.first, !kind.isEmpty else { throw ParseError(message: "empty fault spec") }
        var retryAfter: TestServerFaults.RetryAfter?
        var location: String?
        var count: Int?
        var frequency: TestServerFaults.Frequency = .always
        var match = TestServerFaults.Match.any
        for item in items.dropFirst() {
            let parts = item.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { throw ParseError(message: "expected KEY=VALUE in fault spec, got '\(item)'") }
            let (key, value) = (parts[0].lowercased(), parts[1])
            switch key {
            case "retry-after":
                // Any text: hostile values (nan, -5, 1e300) are what some tests need.
                guard !value.isEmpty, !value.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) else {
                    throw ParseError(message: "retry-after must be a value without CR, LF or NUL")
                }
                retryAfter = TestServerFaults.RetryAfter(value)
            case "count":
                guard let n = Int(value), n >= 0 else {
                    throw ParseError(message: "count must be a whole number, 0 or more")
                }
                count = n
            case "next":
                guard let n = Int(value), n > 0 else {
                    throw ParseError(message: "next must be a positive whole number")
                }
                frequency = .next(n)
            case "fraction":
                guard let f = Double(value), f >= 0, f <= 1 else {
                    throw ParseError(message: "fraction must be between 0 and 1")
                }
                frequency = .fraction(f)
            case "path":
                guard value.hasPrefix("/") else { throw ParseError(message: "path must start with /") }
                match.path = value
                match.isPrefix = false
            case "prefix":
                guard value.hasPrefix("/") else { throw ParseError(message: "prefix must start with /") }
                match.path = value
                match.isPrefix = true
            case "method":
                match.method = value.uppercased()
            case "location":
                location = value
            default:
                throw ParseError(message: "unknown fault option '\(key)'")
            }
        }
        let fault: TestServerFaults.Fault
        switch kind.lowercased() {
        case "429": fault = .tooManyRequests(retryAfter: retryAfter)
        case "500": fault = .internalServerError
        case "503": fault = .serviceUnavailable(retryAfter: retryAfter)
        case "drop": fault = .dropConnection
        case "truncate": fault = .truncatedBody
        case "invalid-json", "garbage": fault = .invalidJSON
        case "drop-after": fault = .dropAfterProcessing
        case "redirect":
            guard let location else { throw ParseError(message: "redirect needs location=URL") }
            fault = .redirect(location: location)
        default:
            let (name, argument) = Self.kindWithSeconds(kind.lowercased())
            switch (name, argument) {
            case ("delay", let s?): fault = .delay(seconds: s)
            case ("reply-then-close", let s?): fault = .replyThenClose(seconds: s)
            case ("429-then-close", let s?): fault = .tooManyRequestsThenClose(retryAfter: retryAfter, seconds: s)
            case ("slow-head", let s?): fault = .slowHead(seconds: s)
            case ("trickle-body", let s?) where s > 0: fault = .trickleBody(seconds: s)
            case ("interim", let s?) where s > 0: fault = .interim(seconds: s, count: count)
            default:
                throw ParseError(
                    message:
                        "unknown fault '\(kind)' (expected 429, 500, 503, drop, truncate, invalid-json, delay:SECONDS, "
                        + "reply-then-close:SECONDS, 429-then-close:SECONDS, drop-after, slow-head:SECONDS, redirect, "
                        + "trickle-body:SECONDS or interim:SECONDS; SECONDS more than 0 for the last two)"
                )
            }
        }
        if retryAfter != nil, !(kind == "429" || kind == "503" || kind.lowercased().hasPrefix("429-then-close")) {
            throw ParseError(message: "retry-after applies to 429, 503 and 429-then-close only")
        }
        if location != nil, kind.lowercased() != "redirect" {
            throw ParseError(message: "location applies to redirect only")
        }
        if count != nil, !kind.lowercased().hasPrefix("interim:") {
            throw ParseError(message: "count applies to interim only")
        }
        self.init(fault: fault, frequency: frequency, match: match)
    }

    /// `name:SECONDS` split into its name and a non-negative number of seconds (nil when absent or invalid).
    static func kindWithSeconds(_ kind: String) -> (String, Double?) {
        guard let colon = kind.firstIndex(of: ":") else { return (kind, nil) }
        let seconds = Double(kind[kind.index(after: colon)...]).flatMap { $0 >= 0 && $0.isFinite ? $0 : nil }
        return (String(kind[..<colon]), seconds)
    }
}

extension TestServerFaults {
    /// Adds the rule a `FaultSpec` describes; returns its id.
    @discardableResult
    public func add(_ spec: FaultSpec) -> Int {
        add(spec.fault, spec.frequency, matching: spec.match)
    }

    /// Reads a spec (see `FaultSpec`) and adds the rule; returns its id.
    @discardableResult
    public func add(spec: String) throws -> Int {
        add(try FaultSpec(parsing: spec))
    }
}

extension TestServerFaults.Fault {
    /// Cloudant's 429 body.
    static let tooManyRequestsReason =
        "You've exceeded your current limit of x requests per second for x class. Please try later."

    /// The answer for the faults that answer by themselves (not drop, delay, truncate).
    var cannedResponse: ServerResponse? {
        switch self {
        case .tooManyRequests(let retryAfter):
            var headers = HTTPHeaders()
            if let retryAfter { headers.add("Retry-After", retryAfter.value) }
            return HTTPServer.errorResponse(
                status: 429, error: "too_many_requests", reason: Self.tooManyRequestsReason, headers: headers)
        case .internalServerError:
            return HTTPServer.errorResponse(
                status: 500, error: "internal_server_error", reason: "Simulated server failure (TestServer fault).")
        case .serviceUnavailable(let retryAfter):
            var headers = HTTPHeaders()
            if let retryAfter { headers.add("Retry-After", retryAfter.value) }
            return HTTPServer.errorResponse(
                status: 503, error: "service_unavailable",
                reason: "Service unavailable, try again later (TestServer fault).", headers: headers)
        case .invalidJSON:
            return ServerResponse(
                status: 200, headers: ["Content-Type": "application/json", "Cache-Control": "must-revalidate"],
                body: .data(Data("<html><body>502 Bad Gateway</body></html>{\"ok\":tru\n".utf8)))
        case .tooManyRequestsThenClose(let retryAfter, _):
            return Self.tooManyRequests(retryAfter: retryAfter).cannedResponse
        case .redirect(let location):
            return ServerResponse(
                status: 302, headers: ["Location": location, "Content-Type": "text/plain"],
                body: .data(Data("Found\n".utf8)))
        case .dropConnection, .delay, .truncatedBody, .replyThenClose, .dropAfterProcessing, .slowHead, .trickleBody,
            .interim:
            return nil
        }
    }
}
