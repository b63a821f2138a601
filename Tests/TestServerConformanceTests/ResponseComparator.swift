import CouchQuery
import Foundation
import HTTPWire

/// A response as the replayer received it.
struct ActualResponse: Sendable {
    var status: Int
    var reason: String
    var headers: HTTPHeaders
    var body: Data
}

/// One way the replay differs from the recording, at a JSON Pointer relative to the step.
struct Difference: Sendable, Equatable, CustomStringConvertible {
    var pointer: String
    var message: String
    var description: String { "\(pointer): \(message)" }
}

/// Compares a response with a recorded one as the transcripts README says ("How a replayer
/// should compare"): status exact; headers Content-Type exact, ETag/Location/Set-Cookie/Allow/
/// Accept-Ranges by presence and value; JSON bodies by keys, types (int and float distinct) and
/// values, except `variable` pointers (type and format only); arrays in order except `unordered`
/// ones; base64 bodies byte for byte; ndjson line by line. The recording server's base URL is
/// replaced by the replay server's in expected strings.
struct ResponseComparator {
    var variable: Set<String> = []
    /// Pointer → format name.
    var formats: [String: String] = [:]
    /// Format name → regular expression (nil: type only).
    var patterns: [String: String?] = [:]
    var unordered: Set<String> = []
    var recordedBase = "http://127.0.0.1:5984"
    var actualBase = "http://127.0.0.1:5984"

    init(step: TranscriptStep, patterns: [String: String?], recordedBase: String, actualBase: String) {
        self.variable = step.variable
        self.formats = step.variableFormats
        self.patterns = patterns
        self.unordered = step.unordered
        self.recordedBase = recordedBase
        self.actualBase = actualBase
    }

    init(
        variable: Set<String> = [], formats: [String: String] = [:], patterns: [String: String?] = [:],
        unordered: Set<String> = []
    ) {
        self.variable = variable
        self.formats = formats
        self.patterns = patterns
        self.unordered = unordered
    }

    /// Headers whose presence and value are compared (Content-Type separately).
    static let comparedHeaders = ["ETag", "Location", "Set-Cookie", "Allow", "Accept-Ranges"]

    /// All differences between the recorded `expected` response object and `actual`.
    func compare(expected: JSON, actual: ActualResponse) -> [Difference] {
        var diffs: [Difference] = []
        let expectedStatus = Int(expected["status"]?.intValue ?? 0)
        if actual.status != expectedStatus {
            diffs.append(
                Difference(
                    pointer: "/response/status",
                    message:
                        "expected \(expectedStatus) \(expected["reason"]?.stringValue ?? ""), got \(actual.status) \(actual.reason)"
                        + " with body \(Self.snippet(actual.body))"))
            return diffs
        }
        if let reason = expected["reason"]?.stringValue, reason != actual.reason {
            diffs.append(
                Difference(pointer: "/response/reason", message: "expected \"\(reason)\", got \"\(actual.reason)\""))
        }
        compareHeaders(expected["headers"] ?? .object([]), actual.headers, into: &diffs)
        compareBody(expected, actual, into: &diffs)
        return diffs
    }

    // MARK: - Headers

    func compareHeaders(_ expected: JSON, _ actual: HTTPHeaders, into diffs: inout [Difference]) {
        let recorded = expected.objectValue ?? []
        func expectedValue(_ name: String) -> (key: String, value: String)? {
            recorded.first { $0.0.lowercased() == name.lowercased() }.map {
                ($0.0, $0.1.stringValue ?? $0.1.serialized)
            }
        }
        // Content-Type: exact, parameters included, except a multipart boundary.
        let expectedType = expectedValue("Content-Type")
        let actualType = actual["Content-Type"]
        let typePointer = "/response/headers/" + JSONPointer.escape(expectedType?.key ?? "Content-Type")
        switch (expectedType, actualType) {
        case (nil, nil): break
        case (let e?, nil):
            diffs.append(Difference(pointer: typePointer, message: "expected \"\(e.value)\", got no Content-Type"))
        case (nil, let a?):
            diffs.append(Difference(pointer: typePointer, message: "expected no Content-Type, got \"\(a)\""))
        case (let e?, let a?):
            if variable.contains(typePointer) {
                let (eBase, aBase) = (Self.withoutBoundary(e.value), Self.withoutBoundary(a))
                if eBase != aBase {
                    diffs.append(
                        Difference(
                            pointer: typePointer, message: "expected \"\(e.value)\" (boundary aside), got \"\(a)\""))
                }
            } else if Self.withoutBoundary(e.value) != Self.withoutBoundary(a) {
                diffs.append(Difference(pointer: typePointer, message: "expected \"\(e.value)\", got \"\(a)\""))
            }
        }
        for name in Self.comparedHeaders {
            let e = expectedValue(name)
            let a = actual.values(name).last.map { name == "Set-Cookie" ? Self.normalizeSetCookie($0) : $0 }
            let pointer = "/response/headers/" + JSONPointer.escape(e?.key ?? name)
            switch (e, a) {
            case (nil, nil): continue
            case (let e?, nil):
                diffs.append(Difference(pointer: pointer, message: "expected header \(name): \(e.value), got none"))
            case (nil, let a?):
                diffs.append(Difference(pointer: pointer, message: "expected no \(name) header, got \(name): \(a)"))
            case (let e?, let a?):
                if variable.contains(pointer) {
                    checkVariable(expected: .string(e.value), actual: .string(a), at: pointer, into: &diffs)
                } else {
                    let wanted = substituteBase(e.value)
                    if wanted != a {
                        diffs.append(Difference(pointer: pointer, message: "expected \"\(wanted)\", got \"\(a)\""))
                    }
                }
            }
        }
    }

    static func withoutBoundary(_ contentType: String) -> String {
        guard contentType.lowercased().hasPrefix("multipart/") else { return contentType }
        return contentType.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.lowercased().hasPrefix("boundary=") }.joined(separator: "; ")
    }

    /// `AuthSession=<value>; …` with a non-empty value becomes `AuthSession=<cookie>; …`, as recorded.
    static func normalizeSetCookie(_ value: String) -> String {
        guard value.hasPrefix("AuthSession=") else { return value }
        let rest = value.dropFirst("AuthSession=".count)
        let end = rest.firstIndex(of: ";") ?? rest.endIndex
        guard end > rest.startIndex else { return value }
        return "AuthSession=<cookie>" + rest[end...]
    }

    // MARK: - Bodies

    func compareBody(_ expected: JSON, _ actual: ActualResponse, into diffs: inout [Difference]) {
        let encoding = expected["body_encoding"]?.stringValue ?? "empty"
        let pointer = "/response/body"
        switch encoding {
        case "json":
            guard let e = expected["body"] else { return }
            guard let a = try? JSON.parse(actual.body) else {
                diffs.append(
                    Difference(pointer: pointer, message: "expected a JSON body, got \(Self.snippet(actual.body))"))
                return
            }
            compareJSON(e, a, at: pointer, into: &diffs)
        case "ndjson":
            guard let e = expected["body"] else { return }
            var lines: [JSON] = []
            for line in actual.body.split(separator: 0x0A) {
                let trimmed = line.filter { $0 != 0x0D }
                if trimmed.isEmpty { continue }
                guard let value = try? JSON.parse(Data(trimmed)) else {
                    diffs.append(
                        Difference(pointer: pointer, message: "line is not JSON: \(Self.snippet(Data(trimmed)))"))
                    return
                }
                lines.append(value)
            }
            compareJSON(e, .array(lines), at: pointer, into: &diffs)
        case "base64":
            let expectedBytes = Data(base64Encoded: expected["body"]?.stringValue ?? "") ?? Data()
            if variable.contains(pointer) || variable.contains("/response/body_text") {
                // Only the shape is defined: check the text format when there is one.
                for textPointer in ["/response/body_text", pointer] {
                    guard let format = formats[textPointer], let pattern = patterns[format] ?? nil else { continue }
                    let text = String(decoding: actual.body, as: UTF8.self)
                    if !Self.matches(text, pattern) {
                        diffs.append(
                            Difference(
                                pointer: textPointer,
                                message:
                                    "expected text matching \(format) /\(pattern)/, got \(Self.snippet(actual.body))"))
                    }
                }
                return
            }
            if expectedBytes != actual.body {
                let offset =
                    Array(zip(expectedBytes, actual.body)).firstIndex { $0 != $1 }
                    ?? min(expectedBytes.count, actual.body.count)
                diffs.append(
                    Difference(
                        pointer: pointer,
                        message:
                            "bytes differ at offset \(offset) (expected \(expectedBytes.count) bytes, got \(actual.body.count)): "
                            + "expected \(Self.snippet(expectedBytes)), got \(Self.snippet(actual.body))"))
            }
        default:  // "empty"
            if !actual.body.isEmpty {
                diffs.append(
                    Difference(pointer: pointer, message: "expected no body, got \(Self.snippet(actual.body))"))
            }
        }
    }

    // MARK: - JSON

    func compareJSON(_ expected: JSON, _ actual: JSON, at pointer: String, into diffs: inout [Difference]) {
        if variable.contains(pointer) {
            checkVariable(expected: expected, actual: actual, at: pointer, into: &diffs)
            return
        }
        guard Self.typeName(expected) == Self.typeName(actual) else {
            diffs.append(
                Difference(
                    pointer: pointer,
                    message:
                        "expected \(Self.typeName(expected)) \(Self.render(expected)), got \(Self.typeName(actual)) \(Self.render(actual))"
                ))
            return
        }
        switch (expected, actual) {
        case (.object(let e), .object(let a)):
            let expectedKeys = Set(e.map(\.0))
            for (key, value) in e {
                let child = pointer + "/" + JSONPointer.escape(key)
                guard let other = a.last(where: { $0.0 == key })?.1 else {
                    diffs.append(Difference(pointer: child, message: "missing key (expected \(Self.render(value)))"))
                    continue
                }
                compareJSON(value, other, at: child, into: &diffs)
            }
            for (key, value) in a where !expectedKeys.contains(key) {
                diffs.append(
                    Difference(
                        pointer: pointer + "/" + JSONPointer.escape(key),
                        message: "unexpected key (got \(Self.render(value)))"))
            }
        case (.array(let e), .array(let a)):
            guard e.count == a.count else {
                diffs.append(
                    Difference(
                        pointer: pointer,
                        message:
                            "expected \(e.count) items, got \(a.count): expected \(Self.render(expected)), got \(Self.render(actual))"
                    ))
                return
            }
            if unordered.contains(pointer) {
                compareUnordered(e, a, at: pointer, into: &diffs)
            } else {
                for i in 0..<e.count { compareJSON(e[i], a[i], at: pointer + "/\(i)", into: &diffs) }
            }
        case (.string(let e), .string(let a)):
            let wanted = substituteBase(e)
            if wanted != a {
                diffs.append(
                    Difference(
                        pointer: pointer,
                        message: "expected \(Self.render(.string(wanted))), got \(Self.render(actual))"))
            }
        default:
            if expected != actual {
                diffs.append(
                    Difference(
                        pointer: pointer, message: "expected \(Self.render(expected)), got \(Self.render(actual))"))
            }
        }
    }

    /// Multiset comparison: every expected item must match a distinct actual item (variable
    /// pointers inside item `i` are those recorded for expected index `i`).
    func compareUnordered(_ expected: [JSON], _ actual: [JSON], at pointer: String, into diffs: inout [Difference]) {
        var used = Set<Int>()
        for (i, item) in expected.enumerated() {
            let childPointer = pointer + "/\(i)"
            var found = false
            for (j, candidate) in actual.enumerated() where !used.contains(j) {
                var scratch: [Difference] = []
                compareJSON(item, candidate, at: childPointer, into: &scratch)
                if scratch.isEmpty {
                    used.insert(j)
                    found = true
                    break
                }
            }
            if !found {
                diffs.append(
                    Difference(
                        pointer: childPointer,
                        message: "no item matches \(Self.render(item)) (unordered); got \(Self.render(.array(actual)))")
                )
            }
        }
    }

    /// A variable value: same JSON type (int and float distinct unless the format is `number`),
    /// and the format's pattern when it has one.
    func checkVariable(expected: JSON, actual: JSON, at pointer: String, into diffs: inout [Difference]) {
        let format = formats[pointer]
        switch format {
        case "number":
            if actual.doubleValue == nil {
                diffs.append(
                    Difference(pointer: pointer, message: "expected a number (variable), got \(Self.render(actual))"))
            }
            return
        case "integer":
            if case .int = actual { return }
            if case .string(let s) = actual, case .string = expected, !s.isEmpty, s.allSatisfy(\.isASCII),
                s.allSatisfy(\.isNumber)
            {
                return
            }
            diffs.append(
                Difference(pointer: pointer, message: "expected an integer (variable), got \(Self.render(actual))"))
            return
        case "boolean", "string", "null", "array", "object":
            let wanted = format == "boolean" ? "bool" : format!
            if Self.typeName(actual) != wanted {
                diffs.append(
                    Difference(
                        pointer: pointer, message: "expected a \(format!) (variable), got \(Self.render(actual))"))
            }
            return
        default:
            break
        }
        guard Self.typeName(expected) == Self.typeName(actual) else {
            diffs.append(
                Difference(
                    pointer: pointer,
                    message:
                        "expected \(Self.typeName(expected)) (variable\(format.map { ", \($0)" } ?? "")), got \(Self.typeName(actual)) \(Self.render(actual))"
                ))
            return
        }
        if let format, let pattern = patterns[format] ?? nil {
            guard case .string(let s) = actual else { return }
            if !Self.matches(s, pattern) {
                diffs.append(
                    Difference(
                        pointer: pointer, message: "\(Self.render(actual)) does not match format \(format) /\(pattern)/"
                    ))
            }
        }
    }

    // MARK: - Helpers

    func substituteBase(_ s: String) -> String {
        guard recordedBase != actualBase, s.contains("127.0.0.1") || s.contains(recordedBase) else { return s }
        var out = s.replacingOccurrences(of: recordedBase, with: actualBase)
        // URLs with credentials inside (http://admin:password@127.0.0.1:5984).
        if let recordedHost = URL(string: recordedBase).flatMap({ u in u.host.map { "\($0):\(u.port ?? 80)" } }),
            let actualHost = URL(string: actualBase).flatMap({ u in u.host.map { "\($0):\(u.port ?? 80)" } })
        {
            out = out.replacingOccurrences(of: "@" + recordedHost, with: "@" + actualHost)
        }
        return out
    }

    static func typeName(_ value: JSON) -> String {
        switch value {
        case .null: return "null"
        case .bool: return "bool"
        case .int: return "int"
        case .double: return "float"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }

    static func render(_ value: JSON, limit: Int = 300) -> String {
        let text = value.serialized
        return text.count > limit ? String(text.prefix(limit)) + "…" : text
    }

    static func snippet(_ data: Data, limit: Int = 300) -> String {
        if data.isEmpty { return "(empty)" }
        let text = String(decoding: data.prefix(limit), as: UTF8.self)
        return "\"" + text.replacingOccurrences(of: "\n", with: "\\n").replacingOccurrences(of: "\r", with: "\\r")
            + "\""
            + (data.count > limit ? "…(\(data.count) bytes)" : "")
    }

    static func matches(_ text: String, _ pattern: String) -> Bool {
        guard let regex = try? NSRegularExpression(pattern: pattern) else { return false }
        return regex.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
    }
}
