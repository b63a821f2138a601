import CouchQuery
import Foundation

/// The recorded CouchDB transcripts (see /work/shared/couchdb-transcripts/README.md), loaded with
/// the order-preserving `JSON` type so that integers and floats stay apart.
struct TranscriptIndex: Sendable {
    /// `Basic <admin>` → (user, password).
    var credentials: [String: (user: String, password: String)]
    /// Format name → regular expression (nil: type check only).
    var formats: [String: String?]
    /// Scenario names and files, in the index's order.
    var scenarios: [(name: String, file: String)]
    /// The recording server's base URL (`http://127.0.0.1:5984`).
    var recordedFrom: String
}

struct TranscriptStep: Sendable {
    var index: Int
    var name: String
    var description: String
    var request: JSON
    var template: JSON?
    var response: JSON
    var variable: Set<String>
    var variableFormats: [String: String]
    var unordered: Set<String>
}

struct TranscriptScenario: Sendable {
    var name: String
    var description: String
    var steps: [TranscriptStep]
}

enum Transcripts {
    /// `<repo>/../shared/couchdb-transcripts`, found from this file's path (or `$COUCHDB_TRANSCRIPTS`).
    static func folder(filePath: String = #filePath) -> URL {
        if let override = ProcessInfo.processInfo.environment["COUCHDB_TRANSCRIPTS"], !override.isEmpty {
            return URL(fileURLWithPath: override, isDirectory: true)
        }
        let repo = URL(fileURLWithPath: filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        return repo.deletingLastPathComponent().appendingPathComponent("shared/couchdb-transcripts", isDirectory: true)
    }

    static var exists: Bool {
        FileManager.default.fileExists(atPath: folder().appendingPathComponent("index.json").path)
    }

    struct LoadError: Error, CustomStringConvertible {
        var description: String
    }

    static func loadIndex() throws -> TranscriptIndex {
        let json = try JSON.parse(try Data(contentsOf: folder().appendingPathComponent("index.json")))
        var credentials: [String: (user: String, password: String)] = [:]
        for (key, value) in json["credentials"]?.objectValue ?? [] {
            guard let user = value["username"]?.stringValue, let password = value["password"]?.stringValue else {
                continue
            }
            credentials[key] = (user, password)
        }
        var formats: [String: String?] = [:]
        for (key, value) in json["formats"]?.objectValue ?? [] {
            formats[key] = value.stringValue
        }
        let scenarios = (json["scenarios"]?.arrayValue ?? []).compactMap { entry -> (String, String)? in
            guard let name = entry["name"]?.stringValue, let file = entry["file"]?.stringValue else { return nil }
            return (name, file)
        }
        guard !scenarios.isEmpty else { throw LoadError(description: "index.json lists no scenarios") }
        return TranscriptIndex(
            credentials: credentials, formats: formats, scenarios: scenarios,
            recordedFrom: json["recorded_from"]?.stringValue ?? "http://127.0.0.1:5984")
    }

    /// The scenario names in index order (empty when the folder is missing or unreadable).
    /// `$CONFORMANCE_SCENARIOS` (comma-separated names) limits the replay to those scenarios.
    static func scenarioNames() -> [String] {
        guard exists, let index = try? loadIndex() else { return [] }
        let all = index.scenarios.map(\.name)
        guard let only = ProcessInfo.processInfo.environment["CONFORMANCE_SCENARIOS"], !only.isEmpty else { return all }
        let wanted = Set(only.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
        return all.filter { wanted.contains($0) }
    }

    static func loadScenario(named name: String, index: TranscriptIndex) throws -> TranscriptScenario {
        guard let file = index.scenarios.first(where: { $0.name == name })?.file else {
            throw LoadError(description: "no scenario \(name) in index.json")
        }
        let json = try JSON.parse(try Data(contentsOf: folder().appendingPathComponent(file)))
        var steps: [TranscriptStep] = []
        for step in json["steps"]?.arrayValue ?? [] {
            guard let request = step["request"], let response = step["response"] else {
                throw LoadError(description: "\(file): a step without request or response")
            }
            var formats: [String: String] = [:]
            for (pointer, format) in step["variable_formats"]?.objectValue ?? [] {
                if let f = format.stringValue { formats[pointer] = f }
            }
            steps.append(
                TranscriptStep(
                    index: Int(step["index"]?.intValue ?? Int64(steps.count + 1)),
                    name: step["name"]?.stringValue ?? "step\(steps.count + 1)",
                    description: step["description"]?.stringValue ?? "",
                    request: request, template: step["template"], response: response,
                    variable: Set((step["variable"]?.arrayValue ?? []).compactMap(\.stringValue)),
                    variableFormats: formats,
                    unordered: Set((step["unordered"]?.arrayValue ?? []).compactMap(\.stringValue))))
        }
        return TranscriptScenario(name: name, description: json["description"]?.stringValue ?? "", steps: steps)
    }
}

// MARK: - JSON Pointer

enum JSONPointer {
    /// The reference tokens of `pointer` (`/a/b~1c` → `["a", "b/c"]`).
    static func tokens(_ pointer: String) -> [String] {
        guard pointer.hasPrefix("/") else { return [] }
        return pointer.dropFirst().split(separator: "/", omittingEmptySubsequences: false).map {
            $0.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
        }
    }

    static func escape(_ token: String) -> String {
        token.replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1")
    }

    /// The value at `pointer` inside `root`. Object keys that do not match exactly are tried
    /// case-insensitively (header names).
    static func resolve(_ pointer: String, in root: JSON) -> JSON? {
        var current = root
        for token in tokens(pointer) {
            switch current {
            case .object(let pairs):
                if let hit = pairs.last(where: { $0.0 == token }) {
                    current = hit.1
                } else if let hit = pairs.last(where: { $0.0.lowercased() == token.lowercased() }) {
                    current = hit.1
                } else {
                    return nil
                }
            case .array(let items):
                guard let i = Int(token), i >= 0, i < items.count else { return nil }
                current = items[i]
            default:
                return nil
            }
        }
        return current
    }
}
