import CouchQuery
import Foundation
import HTTPWire
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// Replays the recorded CouchDB transcripts straight against `ServerEngine.handle` (no HTTP) and compares
/// the answers with the rules of the transcripts' README. Steps that need JavaScript are expected to differ.
struct TranscriptReplayer {
    static let folder: URL? = {
        let candidates = [
            ProcessInfo.processInfo.environment["COUCHDB_TRANSCRIPTS"],
            "/work/shared/couchdb-transcripts",
        ]
        for case let path? in candidates where FileManager.default.fileExists(atPath: path + "/index.json") {
            return URL(fileURLWithPath: path)
        }
        return nil
    }()

    let index: JSON
    let engine: ServerEngine
    var responses: [String: JSON] = [:]
    var cookie = ""

    init(engine: ServerEngine) throws {
        self.engine = engine
        index = try JSON.parse(Data(contentsOf: TranscriptReplayer.folder!.appendingPathComponent("index.json")))
    }

    static func pointer(_ value: JSON, _ pointer: String) -> JSON? {
        var current: JSON? = value
        for raw in pointer.split(separator: "/", omittingEmptySubsequences: false).dropFirst() {
            let token = raw.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
            switch current {
            case .object?: current = current?[token]
            case .array(let items)?:
                guard let i = Int(token), i < items.count else { return nil }
                current = items[i]
            default: return nil
            }
        }
        return current
    }

    func resolve(_ reference: String) -> JSON {
        var ref = reference
        var filter: String?
        if let bar = ref.firstIndex(of: "|") {
            filter = String(ref[ref.index(after: bar)...])
            ref = String(ref[..<bar])
        }
        var value: JSON
        switch ref {
        case "server": value = "http://127.0.0.1:5984"
        case "server_admin": value = "http://admin:password@127.0.0.1:5984"
        case "cookie": value = .string(cookie)
        default:
            let colon = ref.firstIndex(of: ":")!
            let name = String(ref[..<colon])
            value =
                TranscriptReplayer.pointer(responses[name] ?? .null, String(ref[ref.index(after: colon)...])) ?? .null
        }
        var unreserved = CharacterSet.alphanumerics.intersection(
            CharacterSet(charactersIn: Unicode.Scalar(0)...Unicode.Scalar(127)))
        unreserved.insert(charactersIn: "-._~")
        switch filter {
        case "url":
            return .string(
                (value.stringValue ?? value.serialized).addingPercentEncoding(withAllowedCharacters: unreserved)!)
        case "json_url": return .string(value.serialized.addingPercentEncoding(withAllowedCharacters: unreserved)!)
        case "unquote":
            return .string((value.stringValue ?? "").trimmingCharacters(in: CharacterSet(charactersIn: "\"")))
        default: return value
        }
    }

    func substitute(_ text: String) -> String {
        var out = ""
        var rest = Substring(text)
        while let open = rest.range(of: "{{"), let close = rest.range(of: "}}", range: open.upperBound..<rest.endIndex)
        {
            out += rest[..<open.lowerBound]
            let value = resolve(String(rest[open.upperBound..<close.lowerBound]))
            out += value.stringValue ?? value.serialized
            rest = rest[close.upperBound...]
        }
        return out + rest
    }

    func substitute(_ json: JSON) -> JSON {
        switch json {
        case .string(let s):
            if s.hasPrefix("{{"), s.hasSuffix("}}"), s.components(separatedBy: "{{").count == 2 {
                return resolve(String(s.dropFirst(2).dropLast(2)))
            }
            return .string(substitute(s))
        case .array(let items): return .array(items.map(substitute))
        case .object(let pairs): return .object(pairs.map { ($0.0, substitute($0.1)) })
        default: return json
        }
    }

    /// Runs one step; returns the differences found.
    mutating func run(_ step: JSON) -> [String] {
        let recorded = step["request"]!
        let template = step["template"]
        let path = template?["path"]?.stringValue.map(substitute) ?? recorded["path"]!.stringValue!
        var headers = HTTPHeaders()
        headers.add("Host", "127.0.0.1:5984")
        var headerPairs = (recorded["headers"] ?? [:]).members
        for (name, value) in (template?["headers"] ?? [:]).members {
            headerPairs.removeAll { $0.0 == name }
            headerPairs.append((name, value))
        }
        for (name, value) in headerPairs {
            var v = substitute(value.stringValue ?? "")
            if name == "Authorization", let creds = index["credentials"]?[v] {
                let user = creds["username"]!.stringValue!
                let pw = creds["password"]!.stringValue!
                v = "Basic " + Data("\(user):\(pw)".utf8).base64EncodedString()
            }
            if name == "Cookie" { v = v.replacingOccurrences(of: "<cookie>", with: cookie) }
            headers.add(name, v)
        }
        var body = Data()
        if let b = template?["body"] ?? recorded["body"] {
            switch recorded["body_encoding"]?.stringValue {
            case "json": body = substitute(b).data
            case "text": body = Data(substitute(b.stringValue ?? "").utf8)
            case "base64": body = Data(base64Encoded: b.stringValue ?? "") ?? Data()
            default: break
            }
        }
        let parts = path.split(separator: "?", maxSplits: 1)
        let request = ServerRequest(
            method: recorded["method"]!.stringValue!, rawPath: String(parts[0]),
            rawQuery: parts.count > 1 ? String(parts[1]) : nil, headers: headers, body: body)
        let expected = step["response"]!
        let truncated = expected["truncated_by_client_after_seconds"]?.doubleValue
        let response = engine.handle(request)
        var bytes = Data()
        switch response.body {
        case .empty: break
        case .data(let d): bytes = d
        case .stream(let producer):
            let writer = CollectingWriter(limit: truncated ?? 30)
            producer(writer)
            bytes = writer.collected
        }
        var diffs: [String] = []
        let variables = Set((step["variable"]?.arrayValue ?? []).compactMap(\.stringValue))
        let unordered = Set((step["unordered"]?.arrayValue ?? []).compactMap(\.stringValue))
        if Int64(response.status) != expected["status"]?.intValue {
            diffs.append("status \(response.status) != \(expected["status"]!.serialized)")
        }
        // Headers.
        var headerJSON: [(String, JSON)] = []
        for field in response.headers { headerJSON.append((field.name, .string(field.value))) }
        for (name, value) in (expected["headers"] ?? [:]).members {
            let actual = response.headers[name]
            let pointer = "/response/headers/" + name
            switch name {
            case "Content-Length", "Transfer-Encoding": continue
            case "Content-Type":
                if actual != value.stringValue, !variables.contains(pointer) {
                    diffs.append("Content-Type \(actual ?? "nil") != \(value.stringValue!)")
                }
            default:
                guard let actual else {
                    diffs.append("missing header \(name)")
                    continue
                }
                if ["Set-Cookie"].contains(name) || variables.contains(pointer) { continue }
                let expectedValue = value.stringValue!.replacingOccurrences(
                    of: "http://127.0.0.1:5984", with: "http://127.0.0.1:5984")
                if actual != expectedValue { diffs.append("header \(name): \(actual) != \(expectedValue)") }
            }
        }
        for name in ["ETag", "Location", "Set-Cookie", "Allow", "Accept-Ranges"]
        where response.headers[name] != nil && expected["headers"]?[name] == nil {
            diffs.append("unexpected header \(name): \(response.headers[name]!)")
        }
        if let setCookie = response.headers["Set-Cookie"], setCookie.hasPrefix("AuthSession="),
            let value = setCookie.dropFirst("AuthSession=".count).split(
                separator: ";", omittingEmptySubsequences: false
            ).first,
            !value.isEmpty
        {
            cookie = String(value)
        }
        // Body.
        var actualBody: JSON = .null
        switch expected["body_encoding"]?.stringValue {
        case "json":
            guard let parsed = try? JSON.parse(bytes) else {
                diffs.append("body is not JSON: \(String(decoding: bytes.prefix(200), as: UTF8.self))")
                break
            }
            actualBody = parsed
            if !variables.contains("/response/body") {
                compare(expected["body"]!, parsed, "/response/body", variables, unordered, &diffs)
            }
        case "ndjson":
            let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n").compactMap {
                try? JSON.parse(String($0))
            }
            actualBody = .array(lines)
            if !variables.contains("/response/body") {
                compare(expected["body"]!, .array(lines), "/response/body", variables, unordered, &diffs)
            }
        case "base64":
            if !variables.contains("/response/body"), Data(base64Encoded: expected["body"]!.stringValue!) != bytes {
                diffs.append("bytes differ: \(String(decoding: bytes.prefix(300), as: UTF8.self))")
            }
        case "empty":
            break
        default:
            break
        }
        responses[step["name"]!.stringValue!] = .object([
            ("status", .int(Int64(response.status))), ("headers", .object(headerJSON)), ("body", actualBody),
        ])
        return diffs
    }

    func compare(
        _ e: JSON, _ a: JSON, _ pointer: String, _ variables: Set<String>, _ unordered: Set<String>,
        _ diffs: inout [String]
    ) {
        if variables.contains(pointer) {
            if e.typeName != a.typeName
                || (e.intValue != nil)
                    != (a.intValue != nil && { if case .int = a { return true } else { return false } }())
            {
                if case .int = e, case .int = a { return }
                if e.typeName != a.typeName { diffs.append("\(pointer): type \(a.typeName) != \(e.typeName)") }
            }
            return
        }
        switch (e, a) {
        case (.object(let ep), .object(let ap)):
            let ek = Set(ep.map(\.0))
            let ak = Set(ap.map(\.0))
            if ek != ak { diffs.append("\(pointer): keys \(ak.sorted()) != \(ek.sorted())") }
            for (k, v) in ep {
                if let av = a[k] {
                    compare(
                        v, av,
                        pointer + "/"
                            + k.replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1"),
                        variables, unordered, &diffs)
                }
            }
        case (.array(let ei), .array(let ai)):
            if ei.count != ai.count {
                diffs.append("\(pointer): \(ai.count) items != \(ei.count): \(a.serialized.prefix(300))")
                return
            }
            if unordered.contains(pointer) {
                var remaining = ai
                for (index, item) in ei.enumerated() {
                    if let i = remaining.firstIndex(where: { candidate in
                        var d: [String] = []
                        compare(item, candidate, "\(pointer)/\(index)", variables, [], &d)
                        return d.isEmpty
                    }) {
                        remaining.remove(at: i)
                    } else {
                        diffs.append("\(pointer): no match for \(item.serialized.prefix(200))")
                    }
                }
                return
            }
            for (i, (x, y)) in zip(ei, ai).enumerated() {
                compare(x, y, "\(pointer)/\(i)", variables, unordered, &diffs)
            }
        case (.int(let x), .int(let y)):
            if x != y { diffs.append("\(pointer): \(y) != \(x)") }
        default:
            if e != a { diffs.append("\(pointer): \(a.serialized.prefix(200)) != \(e.serialized.prefix(200))") }
        }
    }
}

/// Collects a streamed body; says the client went away after `limit` seconds.
final class CollectingWriter: ChunkWriter, @unchecked Sendable {
    // Safe: used from the one thread running the producer.
    var collected = Data()
    let deadline: Date

    init(limit: Double) { deadline = Date().addingTimeInterval(limit) }

    func write(_ data: Data) -> Bool {
        if Date() >= deadline { return false }
        collected.append(data)
        return true
    }
}

@Suite(.serialized, .ownThreads) struct EngineTranscriptTests {
    /// Steps that need a JavaScript engine (or numbers we cannot reproduce).
    static let expectedDifferences: Set<String> = [
        "views/s05", "views/s06", "views/s08", "views/s09", "views/s10", "views/s12", "views/s13",
        "views/s14", "views/s15", "views/s16", "views/s17", "views/s19", "views/s20", "views/s21", "views/s22",
        "views/s23", "views/s24", "partitioned/s11",
    ]

    @Test func replayAllScenarios() throws {
        guard let folder = TranscriptReplayer.folder else { return }
        var options = ServerEngine.Options()
        options.passwordIterations = 600_000
        let engine = try ServerEngine(options: options)
        let index = try JSON.parse(Data(contentsOf: folder.appendingPathComponent("index.json")))
        var failures: [String] = []
        var passed = 0
        var total = 0
        for scenario in index["scenarios"]!.arrayValue! {
            let file = folder.appendingPathComponent(scenario["file"]!.stringValue!)
            let json = try JSON.parse(Data(contentsOf: file))
            var replayer = try TranscriptReplayer(engine: engine)
            for step in json["steps"]!.arrayValue! {
                total += 1
                let key = scenario["name"]!.stringValue! + "/" + step["name"]!.stringValue!
                let diffs = replayer.run(step)
                if diffs.isEmpty {
                    passed += 1
                } else if !EngineTranscriptTests.expectedDifferences.contains(key) {
                    failures.append(
                        "\(key) [\(step["request"]!["method"]!.stringValue!) \(step["request"]!["path"]!.stringValue!)]: "
                            + diffs.joined(separator: "; "))
                }
            }
        }
        print("TRANSCRIPTS: \(passed)/\(total) steps match")
        for f in failures { print("  FAIL " + f) }
        #expect(failures.isEmpty)
    }
}
