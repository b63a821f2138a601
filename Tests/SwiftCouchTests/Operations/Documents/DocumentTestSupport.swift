import Foundation
import SwiftCouch
import SwiftCouchTesting
import Testing

/// "METHOD /path?query" of a recorded request, as the transcripts write their `path`.
func requestLine(_ request: RecordedRequest?) -> String? {
    request.map { "\($0.method) \($0.path)" + ($0.query.map { "?" + $0 } ?? "") }
}

/// "METHOD /path?query" of a transcript step.
func requestLine(_ step: Transcripts.Step) -> String { "\(step.method) \(step.path)" }

/// The query items of a transcript step's path, sorted, for comparing requests whose parameter
/// order differs from the recorder's.
func sortedQuery(_ path: String) -> [String] {
    guard let mark = path.firstIndex(of: "?") else { return [] }
    return path[path.index(after: mark)...].split(separator: "&").map(String.init).sorted()
}

/// The sorted query items of a request.
func sortedQuery(_ request: RecordedRequest?) -> [String] {
    (request?.query ?? "").split(separator: "&").map(String.init).sorted()
}

/// The recorded request body of a step as JSON.
func recordedRequestJSON(_ step: Transcripts.Step) -> JSONValue? {
    step.requestBody.flatMap { try? JSONDecoder().decode(JSONValue.self, from: $0) }
}
