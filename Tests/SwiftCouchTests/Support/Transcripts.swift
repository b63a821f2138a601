import Foundation
import SwiftCouch
import SwiftCouchTesting
import Testing

/// Reads steps of the real CouchDB 3.5.0 transcripts in ../shared/couchdb-transcripts.
enum Transcripts {
    /// The transcripts folder: beside the repository, as CI lays it out.
    static let folder: URL = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<4 { url.deleteLastPathComponent() }  // Support, SwiftCouchTests, Tests, repo
        return url.deletingLastPathComponent().appendingPathComponent("shared/couchdb-transcripts")
    }()

    struct Step {
        let json: [String: Any]
        var request: [String: Any] { json["request"] as! [String: Any] }
        var response: [String: Any] { json["response"] as! [String: Any] }
        var path: String { request["path"] as! String }
        var method: String { request["method"] as! String }
        var status: Int { response["status"] as! Int }

        /// The request body as sent (JSON compact, text or base64), if any.
        var requestBody: Data? {
            Transcripts.body(encoding: request["body_encoding"] as? String, body: request["body"])
        }

        /// The recorded response as a canned simulated response.
        var simulated: SimulatedResponse {
            var headers = HTTPFields()
            for (name, value) in (response["headers"] as? [String: String]) ?? [:] { headers[name] = value }
            let body =
                Transcripts.body(encoding: response["body_encoding"] as? String, body: response["body"]) ?? Data()
            return SimulatedResponse(status: status, headers: headers, body: body)
        }

        /// The recorded response body parsed as free-form JSON.
        var responseJSON: JSONValue? {
            guard let data = Transcripts.body(encoding: response["body_encoding"] as? String, body: response["body"])
            else { return nil }
            return try? JSONDecoder().decode(JSONValue.self, from: data)
        }
    }

    static func body(encoding: String?, body: Any?) -> Data? {
        guard let body, !(body is NSNull) || encoding == "json" else { return nil }
        switch encoding {
        case "json":
            return try? JSONSerialization.data(
                withJSONObject: body, options: [.fragmentsAllowed, .withoutEscapingSlashes])
        case "text": return Data((body as? String ?? "").utf8)
        case "base64": return Data(base64Encoded: body as? String ?? "")
        case "ndjson":
            let lines = (body as? [Any] ?? []).compactMap {
                try? JSONSerialization.data(withJSONObject: $0, options: [.fragmentsAllowed])
            }
            return lines.reduce(into: Data()) { $0 += $1 + Data("\n".utf8) }
        default: return nil
        }
    }

    /// The step called `name` in `scenario` (e.g. `documents`, `put1`). Records an issue and
    /// returns nil when the transcripts or the step are missing, so no test passes without them.
    static func step(_ scenario: String, _ name: String, sourceLocation: SourceLocation = #_sourceLocation) -> Step? {
        let file = folder.appendingPathComponent("\(scenario).json")
        guard let data = try? Data(contentsOf: file),
            let root = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let steps = root["steps"] as? [[String: Any]]
        else {
            Issue.record("Transcript \(file.path) is missing or unreadable", sourceLocation: sourceLocation)
            return nil
        }
        guard let step = steps.first(where: { $0["name"] as? String == name }) else {
            Issue.record("No step \(name) in \(scenario).json", sourceLocation: sourceLocation)
            return nil
        }
        return Step(json: step)
    }
}
