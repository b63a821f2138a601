import CouchQuery
import Foundation

/// Resolves `{{…}}` references in a step's template against the replay's own earlier responses.
///
/// `{{name:/pointer}}` is the value at the pointer inside the response object of the earlier step
/// `name`; `{{server}}`, `{{server_admin}}` and `{{cookie}}` are built in. `|url`, `|json_url` and
/// `|unquote` filter the value. A string that is exactly one reference becomes the referenced
/// value with its own JSON type.
struct TemplateResolver {
    /// Response objects (`{"status":…,"headers":{…},"body":…}`) of earlier steps, by step name.
    var responses: [String: JSON]
    /// Base URL of the server under test, no trailing slash.
    var server: String
    /// The same with the admin credentials inside.
    var serverAdmin: String
    /// The current AuthSession cookie value.
    var cookie: String?

    struct Unresolved: Error, CustomStringConvertible {
        var reference: String
        var why: String
        var description: String { "cannot resolve {{\(reference)}}: \(why)" }
    }

    /// Resolves every string inside `value`.
    func resolve(_ value: JSON) throws -> JSON {
        switch value {
        case .string(let s): return try resolveString(s)
        case .array(let items): return .array(try items.map(resolve))
        case .object(let pairs): return .object(try pairs.map { ($0.0, try resolve($0.1)) })
        default: return value
        }
    }

    /// Resolves one string: a whole-string reference keeps the referenced JSON type; otherwise
    /// each reference is replaced by its text.
    func resolveString(_ s: String) throws -> JSON {
        let parts = Self.split(s)
        if parts.count == 1, case .reference(let ref) = parts[0] {
            return try value(of: ref)
        }
        var out = ""
        for part in parts {
            switch part {
            case .literal(let text): out += text
            case .reference(let ref): out += Self.text(of: try value(of: ref))
            }
        }
        return .string(out)
    }

    /// Resolves a string and returns it as text (paths, header values).
    func resolveText(_ s: String) throws -> String {
        Self.text(of: try resolveString(s))
    }

    enum Part: Equatable {
        case literal(String)
        case reference(String)
    }

    /// Splits at `{{` … `}}`.
    static func split(_ s: String) -> [Part] {
        var parts: [Part] = []
        var rest = Substring(s)
        while let open = rest.range(of: "{{") {
            guard let close = rest.range(of: "}}", range: open.upperBound..<rest.endIndex) else { break }
            if open.lowerBound > rest.startIndex { parts.append(.literal(String(rest[..<open.lowerBound]))) }
            parts.append(.reference(String(rest[open.upperBound..<close.lowerBound])))
            rest = rest[close.upperBound...]
        }
        if !rest.isEmpty { parts.append(.literal(String(rest))) }
        return parts
    }

    /// The value of one reference (`name:/pointer|filter`), filter applied.
    func value(of reference: String) throws -> JSON {
        var expression = reference
        var filter: String?
        if let bar = reference.lastIndex(of: "|") {
            expression = String(reference[..<bar])
            filter = String(reference[reference.index(after: bar)...])
        }
        let raw: JSON
        switch expression {
        case "server": raw = .string(server)
        case "server_admin": raw = .string(serverAdmin)
        case "cookie":
            guard let cookie else {
                throw Unresolved(reference: reference, why: "no AuthSession cookie has been set yet")
            }
            raw = .string(cookie)
        default:
            guard let colon = expression.firstIndex(of: ":") else {
                throw Unresolved(reference: reference, why: "not of the form name:/pointer")
            }
            let name = String(expression[..<colon])
            let pointer = String(expression[expression.index(after: colon)...])
            guard let response = responses[name] else {
                throw Unresolved(reference: reference, why: "no earlier step called \(name) has a response")
            }
            guard let found = JSONPointer.resolve(pointer, in: response) else {
                throw Unresolved(reference: reference, why: "\(pointer) is not in the response of \(name)")
            }
            raw = found
        }
        switch filter {
        case nil: return raw
        case "url": return .string(Self.percentEncode(Self.text(of: raw)))
        case "json_url": return .string(Self.percentEncode(raw.serialized))
        case "unquote":
            var text = Self.text(of: raw)
            if text.count >= 2, text.hasPrefix("\""), text.hasSuffix("\"") {
                text = String(text.dropFirst().dropLast())
            }
            return .string(text)
        default:
            throw Unresolved(reference: reference, why: "unknown filter \(filter!)")
        }
    }

    /// A string as itself, anything else as compact JSON.
    static func text(of value: JSON) -> String {
        if case .string(let s) = value { return s }
        return value.serialized
    }

    /// Percent-encodes everything but RFC 3986 unreserved characters.
    static func percentEncode(_ s: String) -> String {
        var out = ""
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = String(byte, radix: 16, uppercase: true)
                out += "%" + (hex.count == 1 ? "0" + hex : hex)
            }
        }
        return out
    }
}
