import Foundation
import SwiftCouch
import SwiftCouchTesting
import Testing

/// Small helpers for the server-side operation tests.
enum OpsFixtures {
    /// Parses JSON bytes (nil when absent or not JSON).
    static func json(_ data: Data?) -> JSONValue? {
        guard let data else { return nil }
        return try? JSONDecoder().decode(JSONValue.self, from: data)
    }

    /// Parses JSON text.
    static func json(_ text: String) -> JSONValue? { json(Data(text.utf8)) }

    /// The JSON text of `value` with sorted keys, so it can be compared exactly.
    static func sortedText<T: Encodable>(_ value: T) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    /// `METHOD /path?query` of a recorded request.
    static func line(_ request: RecordedRequest?) -> String? {
        request.map { "\($0.method) \($0.path)" + ($0.query.map { "?" + $0 } ?? "") }
    }

    /// `METHOD /path?query` of a transcript step's request.
    static func line(_ step: Transcripts.Step) -> String { "\(step.method) \(step.path)" }

    /// Runs an operation that must fail validation, and checks nothing was sent.
    static func expectInvalid<Op: CouchOperation>(
        _ operation: Op, containing text: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let run = Simulation.run(operation, responses: [])
        #expect(run.error?.kind == .validation, sourceLocation: sourceLocation)
        #expect(
            run.error?.message.contains(text) == true, "\(run.error?.message ?? "no error")",
            sourceLocation: sourceLocation)
        #expect(run.requests.isEmpty, sourceLocation: sourceLocation)
    }
}
