/// Dotted Mango field names (`a.b.c`, with `\.` for a literal dot) and access to them in documents.
enum FieldPath {
    enum Lookup {
        case found(JSON)
        case notFound
        case badPath
    }

    /// Splits a field name into its parts (`mango_util:parse_field/1`).
    static func parse(_ field: String) throws(MangoError) -> [String] {
        let invalid = MangoError(status: 400, error: "invalid_field_name", reason: "Invalid field name: \(field)")
        if !field.contains("\\") {
            let parts = field.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            if parts.contains("") { throw invalid }
            return parts
        }
        var parts: [String] = []
        var current = ""
        var previousBackslash = false
        for ch in field {
            if ch == "." && !previousBackslash {
                parts.append(current)
                current = ""
            } else {
                current.append(ch)
            }
            previousBackslash = ch == "\\"
        }
        parts.append(current)
        if parts.contains("") { throw invalid }
        return parts.map { $0.replacingOccurrences(of: "\\", with: "") }
    }

    /// The value at `path` (`mango_doc:get_field/2`): array elements by decimal index.
    static func get(_ value: JSON, _ path: some Collection<String>) -> Lookup {
        guard let name = path.first else { return .found(value) }
        let rest = path.dropFirst()
        switch value {
        case .object(let pairs):
            guard let v = pairs.first(where: { $0.0 == name })?.1 else { return .notFound }
            return get(v, rest)
        case .array(let items):
            guard let pos = Int(name), pos >= 0, pos < items.count, !name.hasPrefix("+") else { return .badPath }
            return get(items[pos], rest)
        default:
            return .badPath
        }
    }

    /// Sets `path` to `newValue` (`mango_doc:set_field/3`), creating objects as needed.
    static func set(_ target: JSON, _ path: ArraySlice<String>, _ newValue: JSON) -> JSON {
        guard let name = path.first else { return newValue }
        let rest = path.dropFirst()
        switch target {
        case .object(var pairs):
            if let i = pairs.firstIndex(where: { $0.0 == name }) {
                pairs[i].1 = rest.isEmpty ? newValue : set(pairs[i].1, rest, newValue)
            } else {
                pairs.append((name, makeNested(rest, newValue)))
            }
            return .object(pairs)
        case .array(var items):
            guard let pos = Int(name), pos >= 0, pos < items.count else { return target }
            items[pos] = rest.isEmpty ? newValue : set(items[pos], rest, newValue)
            return .array(items)
        default:
            return target
        }
    }

    private static func makeNested(_ path: ArraySlice<String>, _ value: JSON) -> JSON {
        guard let name = path.first else { return value }
        return .object([(name, makeNested(path.dropFirst(), value))])
    }

    /// Erlang order of two paths (lists of binaries).
    static func lessThan(_ a: [String], _ b: [String]) -> Bool {
        for (x, y) in zip(a, b) where x != y { return Collation.compareRaw(x, y) < 0 }
        return a.count < b.count
    }

    /// Projects `fields` out of `doc` (`mango_fields:extract/2`); `nil` keeps the whole document.
    static func extract(_ doc: JSON, _ fields: [String]?) -> JSON {
        guard let fields else { return doc }
        var out = JSON.object([])
        for f in fields {
            guard let path = try? parse(f) else { continue }
            if case .found(let v) = get(doc, path) {
                out = set(out, path[...], v)
            }
        }
        return out
    }
}

/// Constructors for the errors CouchDB's Mango code raises (`mango_error:info/2`).
enum MangoErrors {
    static func invalidSelectorJSON(_ v: JSON) -> MangoError {
        MangoError(
            status: 400, error: "invalid_selector_json",
            reason: "Selector must be a JSON object, not: \(ErlangFormat.w(v))")
    }
    static func missingRequiredKey(_ key: String) -> MangoError {
        MangoError(status: 400, error: "missing_required_key", reason: "Missing required key: \(key)")
    }
    static func invalidKey(_ key: String) -> MangoError {
        MangoError(status: 400, error: "invalid_key", reason: "Invalid key \(key) for this request.")
    }
    static func invalidNonNegInteger(_ v: JSON) -> MangoError {
        MangoError(
            status: 400, error: "invalid_non_neg_integer",
            reason: "\(ErlangFormat.w(v)) is not an integer greater than or equal to zero")
    }
    static func invalidPosInteger(_ v: JSON) -> MangoError {
        MangoError(
            status: 400, error: "invalid_pos_integer",
            reason: "\(ErlangFormat.w(v)) is not an integer greater than zero")
    }
    static func invalidBoolean(_ v: JSON) -> MangoError {
        MangoError(status: 400, error: "invalid_boolean", reason: "Invalid boolean value: \(ErlangFormat.w(v))")
    }
    static func invalidString(_ v: JSON) -> MangoError {
        MangoError(status: 400, error: "invalid_string", reason: "Invalid string: \(ErlangFormat.w(v))")
    }
    static func invalidIndexName(_ v: JSON) -> MangoError {
        MangoError(status: 400, error: "invalid_index_name", reason: "Invalid index name: \(ErlangFormat.w(v))")
    }
    static func invalidBookmark(_ v: JSON) -> MangoError {
        MangoError(status: 400, error: "invalid_bookmark", reason: "Invalid bookmark value: \(v.serialized)")
    }
    static let noUsableIndex = MangoError(
        status: 400, error: "no_usable_index", reason: "No index exists for this sort, try indexing by the sort fields."
    )
    static let noUsableIndexPartitioned = MangoError(
        status: 400, error: "no_usable_index",
        reason: "No partitioned index exists for this sort, try indexing by the sort fields.")
    static let noUsableIndexGlobal = MangoError(
        status: 400, error: "no_usable_index",
        reason: "No global index exists for this sort, try indexing by the sort fields.")
}
