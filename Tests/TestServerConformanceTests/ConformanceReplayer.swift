import CouchQuery
import CouchTestServer
import Foundation
import HTTPWire

/// A step whose recorded answer needs JavaScript, which the TestServer does not run. The replayer
/// still sends it and checks that the answer is well-formed (a CouchDB-shaped error unless
/// `mayAccept`), but does not compare it with the recording.
struct ExpectedDifference: Sendable {
    var scenario: String
    var step: String
    var reason: String
    /// True when the TestServer may answer with success (e.g. it stores a design document whose
    /// JavaScript it cannot compile).
    var mayAccept = false
}

enum ExpectedDifferences {
    /// Every step the TestServer answers differently on purpose, with the reason. None since
    /// the TestServer runs JavaScript (CouchJS).
    static let all: [ExpectedDifference] = []

    static func find(scenario: String, step: String) -> ExpectedDifference? {
        all.first { $0.scenario == scenario && $0.step == step }
    }
}

/// The outcome of one step.
enum StepOutcome: Sendable {
    case passed
    case failed([String])
    case skipped(ExpectedDifference, note: String?)
}

/// Replays one scenario against a running TestServer, step by step, in order.
struct ScenarioReplayer {
    let scenario: TranscriptScenario
    let index: TranscriptIndex
    let port: Int
    /// The PBKDF2 iterations the server was started with, when not CouchDB's 600000: recorded
    /// `"iterations": 600000` in pbkdf2 user documents is then expected as this value instead
    /// (a configuration difference, like the base URL).
    var passwordIterations: Int? = nil

    var base: String { "http://127.0.0.1:\(port)" }

    /// The recorded response, adjusted for the replay server's configuration.
    func expectedResponse(_ step: TranscriptStep) -> JSON {
        guard let iterations = passwordIterations else { return step.response }
        func adjust(_ value: JSON) -> JSON {
            switch value {
            case .object(let pairs):
                let isPBKDF2 = pairs.contains { $0.0 == "password_scheme" && $0.1 == "pbkdf2" }
                return .object(
                    pairs.map { key, v in
                        if isPBKDF2, key == "iterations", case .int = v { return (key, .int(Int64(iterations))) }
                        return (key, adjust(v))
                    })
            case .array(let items):
                return .array(items.map(adjust))
            default:
                return value
            }
        }
        return adjust(step.response)
    }

    /// Runs every step; the result has one outcome per step, in order.
    func run() -> [(step: TranscriptStep, outcome: StepOutcome)] {
        var results: [(TranscriptStep, StepOutcome)] = []
        var responses: [String: JSON] = [:]
        var cookie: String?
        let admin = index.credentials["Basic <admin>"] ?? (user: "admin", password: "password")
        for step in scenario.steps {
            var problems: [String] = []
            let resolver = TemplateResolver(
                responses: responses, server: base,
                serverAdmin: "http://\(admin.user):\(admin.password)@127.0.0.1:\(port)", cookie: cookie)
            let request = buildRequest(step, resolver: resolver, cookie: cookie, problems: &problems)
            let actual: ActualResponse
            do {
                actual = try send(request, readFor: step.response["truncated_by_client_after_seconds"]?.doubleValue)
            } catch {
                results.append((step, .failed(problems + ["no response: \(error)"])))
                continue
            }
            responses[step.name] = responseObject(
                actual, encoding: step.response["body_encoding"]?.stringValue ?? "empty")
            for value in actual.headers.values("Set-Cookie") where value.hasPrefix("AuthSession=") {
                let v = value.dropFirst("AuthSession=".count).prefix { $0 != ";" }
                if !v.isEmpty { cookie = String(v) }
            }

            if let expected = ExpectedDifferences.find(scenario: scenario.name, step: step.name) {
                if let problem = checkWellFormed(actual, mayAccept: expected.mayAccept) {
                    results.append((step, .failed(["(expected difference: \(expected.reason)) " + problem])))
                } else {
                    let comparator = ResponseComparator(
                        step: step, patterns: index.formats, recordedBase: index.recordedFrom, actualBase: base)
                    let matches = comparator.compare(expected: expectedResponse(step), actual: actual).isEmpty
                    results.append(
                        (
                            step,
                            .skipped(
                                expected,
                                note: matches ? "now matches the recording: remove it from ExpectedDifferences" : nil)
                        ))
                }
                continue
            }

            let comparator = ResponseComparator(
                step: step, patterns: index.formats, recordedBase: index.recordedFrom, actualBase: base)
            let diffs = comparator.compare(expected: expectedResponse(step), actual: actual)
            if diffs.isEmpty && problems.isEmpty {
                results.append((step, .passed))
            } else {
                results.append((step, .failed(problems + diffs.map(\.description))))
            }
        }
        return results
    }

    struct Request {
        var method: String
        var target: String
        var headers: HTTPHeaders
        var body: Data?
    }

    /// The request to send: the recorded one with the template resolved against this replay's
    /// own responses, credentials and cookie filled in.
    func buildRequest(_ step: TranscriptStep, resolver: TemplateResolver, cookie: String?, problems: inout [String])
        -> Request
    {
        let recorded = step.request
        let template = step.template
        var target = recorded["path"]?.stringValue ?? "/"
        if let t = template?["path"]?.stringValue {
            do {
                target = try resolver.resolveText(t)
            } catch {
                problems.append("/template/path: \(error) (sent the recorded path)")
            }
        }
        var fields: [(String, String)] = (recorded["headers"]?.objectValue ?? []).map {
            ($0.0, $0.1.stringValue ?? $0.1.serialized)
        }
        for (name, value) in template?["headers"]?.objectValue ?? [] {
            guard let text = value.stringValue else { continue }
            do {
                let resolved = try resolver.resolveText(text)
                if let i = fields.firstIndex(where: { $0.0.lowercased() == name.lowercased() }) {
                    fields[i].1 = resolved
                } else {
                    fields.append((name, resolved))
                }
            } catch {
                problems.append("/template/headers/\(name): \(error) (sent the recorded value)")
            }
        }
        var headers = HTTPHeaders()
        for (name, value) in fields {
            var value = value
            if name.lowercased() == "authorization", let credentials = index.credentials[value] {
                value = "Basic " + Data("\(credentials.user):\(credentials.password)".utf8).base64EncodedString()
            }
            if name.lowercased() == "cookie", value.contains("<cookie>") {
                if let cookie {
                    value = value.replacingOccurrences(of: "<cookie>", with: cookie)
                } else {
                    problems.append("/request/headers/Cookie: no AuthSession cookie has been set by an earlier step")
                }
            }
            headers.add(name, value)
        }
        if !headers.contains("Accept-Encoding") { headers.add("Accept-Encoding", "identity") }

        var body: Data?
        let encoding = recorded["body_encoding"]?.stringValue
        var bodyValue = recorded["body"]
        if let t = template?["body"] {
            do {
                bodyValue = try resolver.resolve(t)
            } catch {
                problems.append("/template/body: \(error) (sent the recorded body)")
            }
        }
        switch encoding {
        case "json": body = bodyValue.map { $0.data }
        case "text": body = Data((bodyValue?.stringValue ?? "").utf8)
        case "base64": body = Data(base64Encoded: bodyValue?.stringValue ?? "") ?? Data()
        default: body = nil
        }
        return Request(method: recorded["method"]?.stringValue ?? "GET", target: target, headers: headers, body: body)
    }

    func send(_ request: Request, readFor: Double?) throws -> ActualResponse {
        let connection = try RawHTTPConnection(port: port, timeout: 30)
        defer { connection.close() }
        let response = try connection.request(
            method: request.method, target: request.target, headers: request.headers, body: request.body,
            readFor: readFor)
        return ActualResponse(
            status: response.status, reason: response.reason, headers: response.headers, body: response.body)
    }

    /// The response as an object like the recorded ones, for `{{step:/pointer}}` references.
    func responseObject(_ actual: ActualResponse, encoding: String) -> JSON {
        var headers: [(String, JSON)] = []
        for field in actual.headers { headers.append((field.name, .string(field.value))) }
        var pairs: [(String, JSON)] = [
            ("status", .int(Int64(actual.status))), ("reason", .string(actual.reason)), ("headers", .object(headers)),
        ]
        switch encoding {
        case "json":
            pairs.append(
                ("body", (try? JSON.parse(actual.body)) ?? .string(String(decoding: actual.body, as: UTF8.self))))
        case "ndjson":
            let lines = actual.body.split(separator: 0x0A).compactMap { try? JSON.parse(Data($0)) }
            pairs.append(("body", .array(lines)))
        case "base64":
            pairs.append(("body", .string(actual.body.base64EncodedString())))
            pairs.append(("body_text", .string(String(decoding: actual.body, as: UTF8.self))))
        default:
            break
        }
        return .object(pairs)
    }

    /// Nil when the answer is acceptable for a step that is not compared: a CouchDB-shaped error
    /// (`{"error": string, "reason": string}`), or any well-formed success when allowed.
    func checkWellFormed(_ actual: ActualResponse, mayAccept: Bool) -> String? {
        if actual.status < 400 {
            return mayAccept
                ? nil
                : "expected a CouchDB-shaped error, got status \(actual.status) \(ResponseComparator.snippet(actual.body))"
        }
        guard let json = try? JSON.parse(actual.body), json["error"]?.stringValue != nil,
            json["reason"]?.stringValue != nil
        else {
            return
                "status \(actual.status) without a CouchDB-shaped error body: \(ResponseComparator.snippet(actual.body))"
        }
        return nil
    }
}
