import Foundation

/// Removes secrets from text that may reach a log or an error description.
enum Redaction {
    static let placeholder = "<redacted>"

    /// JSON members whose values are always secret.
    static let secretFields = [
        "password", "password_sha", "derived_key", "salt", "apikey", "api_key", "token", "access_token",
        "refresh_token", "id_token",
    ]

    /// The value to show for header `name`.
    static func headerValue(name: String, value: String) -> String {
        HTTPFields.displayValue(name: name, value: value)
    }

    /// Redacts `"password":"…"`-style members and `user:password@` in URLs from free text.
    static func redact(_ text: String) -> String {
        var result = text
        for field in secretFields {
            result = replacing(
                pattern: #""\#(field)"\s*:\s*"(?:[^"\\]|\\.)*(?:"|\\?$)"#, in: result,
                with: #""\#(field)":"\#(placeholder)""#)
        }
        result = replacing(
            pattern: #"((?:password|apikey|api_key|access_token|refresh_token)=)[^&\s]*"#, in: result,
            with: "$1" + placeholder)
        result = replacing(pattern: #"(AuthSession=)[^;\s,"]+"#, in: result, with: "$1" + placeholder)
        result = replacing(pattern: #"(://)[^/@\s:]+:[^/@\s]+@"#, in: result, with: "$1" + placeholder + "@")
        return result
    }

    /// A redirect's `Location` as it may be shown: scheme, host, port and path only (no user
    /// information, query or fragment). Nil when it is not a URL.
    static func location(_ location: String) -> String? {
        guard var components = URLComponents(string: location.trimmingCharacters(in: .whitespaces)) else {
            return nil
        }
        components.user = nil
        components.password = nil
        components.query = nil
        components.fragment = nil
        return components.string.map { String($0.prefix(500)) }
    }

    private static func replacing(pattern: String, in text: String, with template: String) -> String {
        guard let regex = try? NSRegularExpression(pattern: pattern, options: [.caseInsensitive]) else { return text }
        let range = NSRange(text.startIndex..., in: text)
        return regex.stringByReplacingMatches(in: text, range: range, withTemplate: template)
    }
}
