import Foundation

/// Small helpers for JSON text in query parameters.
enum JSONText {
    /// A JSON string literal for `value` (`"a\"b"`).
    static func string(_ value: String) -> String {
        let data = (try? JSONEncoder.couch.encode(value)) ?? Data("\"\"".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}
