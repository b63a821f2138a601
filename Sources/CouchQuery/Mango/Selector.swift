import Foundation

/// A Mango selector, parsed and normalised the way CouchDB's `mango_selector:normalize/1` does:
/// implicit `$eq` and `$and` made explicit, field names pushed down to the terminal operators as
/// paths (`{"a":{"b":{"$gt":1}}}` → `{"a.b":{"$gt":1}}`), negations pushed down (`$not`, `$nor`,
/// De Morgan).
indirect enum SelectorNode: Sendable {
    /// `{}`: matches everything.
    case empty
    case and([SelectorNode])
    case or([SelectorNode])
    case nor([SelectorNode])
    case not(SelectorNode)
    case elemMatch(SelectorNode)
    case allMatch(SelectorNode)
    case keyMapMatch(SelectorNode)
    /// A terminal operator with its argument (`$eq`, `$gt`, `$in`, `$regex`, `$size` …).
    case op(String, JSON)
    /// `{"$default":{"$text":…}}` (needs a text index).
    case text(JSON)
    /// A field name as written, before normalisation of field names.
    case rawField(String, SelectorNode)
    /// A parsed field path with its condition.
    case field([String], SelectorNode)

    // MARK: Parsing and normalisation

    /// Parses and normalises a selector (the JSON must be an object).
    static func parse(_ json: JSON) throws(MangoError) -> SelectorNode {
        guard case .object(let props) = json else {
            throw MangoErrors.invalidSelectorJSON(json)
        }
        if props.isEmpty { return .empty }
        let ops = try normOps(json)
        let fields = try normFields(ops, path: [])
        let result = try normNegations(fields)
        if case .field(let path, _) = result, path.isEmpty {
            throw MangoError(
                status: 400, error: "invalid_selector",
                reason: "One or more conditions is missing a field name.")
        }
        return result
    }

    static func badArg(_ op: String, _ arg: JSON) -> MangoError {
        MangoError(status: 400, error: "bad_arg", reason: "Bad argument for operator \(op): \(ErlangFormat.w(arg))")
    }

    static let terminalOps: Set<String> = ["$lt", "$lte", "$eq", "$ne", "$gte", "$gt"]

    static func normOps(_ json: JSON) throws(MangoError) -> SelectorNode {
        guard case .object(let props) = json, !props.isEmpty else {
            return .op("$eq", json)
        }
        if props.count > 1 {
            var args: [SelectorNode] = []
            for p in props { args.append(try normOps(.object([p]))) }
            return .and(args)
        }
        let (key, arg) = props[0]
        func list(_ op: String) throws(MangoError) -> [SelectorNode] {
            guard case .array(let items) = arg else { throw badArg(op, arg) }
            var out: [SelectorNode] = []
            for item in items { out.append(try normOps(item)) }
            return out
        }
        func sub(_ op: String) throws(MangoError) -> SelectorNode {
            guard case .object = arg else { throw badArg(op, arg) }
            return try normOps(arg)
        }
        switch key {
        case "$and": return .and(try list(key))
        case "$or": return .or(try list(key))
        case "$nor": return .nor(try list(key))
        case "$not": return .not(try sub(key))
        case "$elemMatch": return .elemMatch(try sub(key))
        case "$allMatch": return .allMatch(try sub(key))
        case "$keyMapMatch": return .keyMapMatch(try sub(key))
        case "$in", "$nin", "$all":
            guard case .array = arg else { throw badArg(key, arg) }
            return .op(key, arg)
        case "$exists":
            guard case .bool = arg else { throw badArg(key, arg) }
            return .op(key, arg)
        case "$type":
            guard case .string = arg else { throw badArg(key, arg) }
            return .op(key, arg)
        case "$mod":
            guard case .array(let items) = arg, items.count == 2, case .int = items[0], case .int = items[1]
            else { throw badArg(key, arg) }
            return .op(key, arg)
        case "$regex":
            guard case .string(let pattern) = arg, MangoRegex.compile(pattern) != nil else { throw badArg(key, arg) }
            return .op(key, arg)
        case "$size":
            guard case .int(let n) = arg, n >= 0 else { throw badArg(key, arg) }
            return .op(key, arg)
        case "$text":
            switch arg {
            case .string, .int, .double, .bool: return .text(arg)
            default: throw badArg(key, arg)
            }
        case "$beginsWith":
            guard case .string = arg else { throw badArg(key, arg) }
            return .op(key, arg)
        case "$default":
            if case .object(let inner) = arg, inner.count == 1, inner[0].0 == "$text" { return .text(inner[0].1) }
            throw MangoError(
                status: 400, error: "bad_field",
                reason: "Invalid field normalization on selector: \(ErlangFormat.w(json))")
        case "$where", "$geoWithin", "$geoIntersects", "$near", "$nearSphere":
            throw MangoError(status: 400, error: "not_supported", reason: "Unsupported operator: \(key)")
        default:
            if terminalOps.contains(key) { return .op(key, arg) }
            if key.hasPrefix("$") {
                throw MangoError(status: 400, error: "invalid_operator", reason: "Invalid operator: \(key)")
            }
            return .rawField(key, try normOps(arg))
        }
    }

    static func normFields(_ node: SelectorNode, path: [String]) throws(MangoError) -> SelectorNode {
        switch node {
        case .empty: return path.isEmpty ? .empty : .field(path, .empty)
        case .and(let args):
            var out: [SelectorNode] = []
            for a in args { out.append(try normFields(a, path: path)) }
            return .and(out)
        case .or(let args):
            var out: [SelectorNode] = []
            for a in args { out.append(try normFields(a, path: path)) }
            return .or(out)
        case .nor(let args):
            var out: [SelectorNode] = []
            for a in args { out.append(try normFields(a, path: path)) }
            return .nor(out)
        case .not(let arg): return .not(try normFields(arg, path: path))
        case .elemMatch(let arg): return .field(path, .elemMatch(try normFields(arg, path: [])))
        case .allMatch(let arg): return .field(path, .allMatch(try normFields(arg, path: [])))
        case .keyMapMatch(let arg): return .field(path, .keyMapMatch(try normFields(arg, path: [])))
        case .text:
            if path.isEmpty { return node }
            throw MangoError(
                status: 400, error: "bad_field",
                reason: "Invalid field normalization on selector: \(ErlangFormat.w(node.json))")
        case .op: return .field(path, node)
        case .rawField(let name, let cond):
            let parts = try FieldPath.parse(name)
            return try normFields(cond, path: path + parts)
        case .field(let parts, let cond):
            return try normFields(cond, path: path + parts)
        }
    }

    static func normNegations(_ node: SelectorNode) throws(MangoError) -> SelectorNode {
        switch node {
        case .not(let arg): return try negate(arg)
        case .nor(let args):
            var out: [SelectorNode] = []
            for a in args { out.append(try negate(a)) }
            return .and(out)
        case .and(let args):
            var out: [SelectorNode] = []
            for a in args { out.append(try normNegations(a)) }
            return .and(out)
        case .or(let args):
            var out: [SelectorNode] = []
            for a in args { out.append(try normNegations(a)) }
            return .or(out)
        case .elemMatch(let arg): return .elemMatch(try normNegations(arg))
        case .allMatch(let arg): return .allMatch(try normNegations(arg))
        case .keyMapMatch(let arg): return .keyMapMatch(try normNegations(arg))
        default: return node
        }
    }

    static func negate(_ node: SelectorNode) throws(MangoError) -> SelectorNode {
        switch node {
        case .not(let arg): return try normNegations(arg)
        case .nor(let args):
            var out: [SelectorNode] = []
            for a in args { out.append(try normNegations(a)) }
            return .or(out)
        case .and(let args):
            var out: [SelectorNode] = []
            for a in args { out.append(try negate(a)) }
            return .or(out)
        case .or(let args):
            var out: [SelectorNode] = []
            for a in args { out.append(try negate(a)) }
            return .and(out)
        case .text:
            throw badArg("$not", node.json)
        case .op(let op, let arg):
            switch op {
            case "$lt": return .op("$gte", arg)
            case "$lte": return .op("$gt", arg)
            case "$eq": return .op("$ne", arg)
            case "$ne": return .op("$eq", arg)
            case "$gte": return .op("$lt", arg)
            case "$gt": return .op("$lte", arg)
            case "$in": return .op("$nin", arg)
            case "$nin": return .op("$in", arg)
            case "$exists": return .op("$exists", .bool(!(arg.boolValue ?? false)))
            default: return .not(node)
            }
        case .elemMatch, .allMatch, .keyMapMatch, .empty: return .not(node)
        case .field(let path, let cond): return .field(path, try negate(cond))
        case .rawField(let name, let cond): return .rawField(name, try negate(cond))
        }
    }

    // MARK: JSON form

    /// The selector as CouchDB prints it (`mango_util:join_keys/1`): field paths joined with `.`.
    var json: JSON {
        switch self {
        case .empty: return .object([])
        case .and(let args): return .object([("$and", .array(args.map(\.json)))])
        case .or(let args): return .object([("$or", .array(args.map(\.json)))])
        case .nor(let args): return .object([("$nor", .array(args.map(\.json)))])
        case .not(let arg): return .object([("$not", arg.json)])
        case .elemMatch(let arg): return .object([("$elemMatch", arg.json)])
        case .allMatch(let arg): return .object([("$allMatch", arg.json)])
        case .keyMapMatch(let arg): return .object([("$keyMapMatch", arg.json)])
        case .op(let op, let arg): return .object([(op, arg)])
        case .text(let arg): return .object([("$default", .object([("$text", arg)]))])
        case .rawField(let name, let cond): return .object([(name, cond.json)])
        case .field(let path, let cond): return .object([(path.joined(separator: "."), cond.json)])
        }
    }

    // MARK: Matching

    /// Whether `document` matches (`mango_selector:match/2`).
    func matches(_ document: JSON) -> Bool {
        if case .empty = self { return true }
        return match(document, raw: false)
    }

    private func compare(_ a: JSON, _ b: JSON, raw: Bool) -> Int {
        raw ? MangoCompare.raw(a, b) : Collation.compare(a, b)
    }

    func match(_ value: JSON, raw: Bool) -> Bool {
        switch self {
        case .empty: return true
        case .and(let args): return args.allSatisfy { $0.match(value, raw: raw) }
        case .or(let args): return args.isEmpty || args.contains { $0.match(value, raw: raw) }
        case .nor(let args): return !args.contains { $0.match(value, raw: raw) }
        case .not(let arg): return !arg.match(value, raw: raw)
        case .elemMatch(let arg):
            guard case .array(let items) = value else { return false }
            return items.contains { arg.match($0, raw: raw) }
        case .allMatch(let arg):
            guard case .array(let items) = value, !items.isEmpty else { return false }
            return items.allSatisfy { arg.match($0, raw: raw) }
        case .keyMapMatch(let arg):
            guard case .object(let pairs) = value else { return false }
            return pairs.contains { arg.match(.string($0.0), raw: raw) }
        case .text: return true
        case .rawField(let name, let cond):
            guard let path = try? FieldPath.parse(name) else { return false }
            return SelectorNode.field(path, cond).match(value, raw: raw)
        case .field(let path, let cond):
            switch FieldPath.get(value, path) {
            case .notFound:
                if case .op("$exists", .bool(false)) = cond { return true }
                return false
            case .badPath: return false
            case .found(let sub):
                return cond.match(sub, raw: path == ["_id"] ? true : raw)
            }
        case .op(let op, let arg):
            return matchOp(op, arg, value, raw: raw)
        }
    }

    private func matchOp(_ op: String, _ arg: JSON, _ value: JSON, raw: Bool) -> Bool {
        switch op {
        case "$lt": return compare(value, arg, raw: raw) < 0
        case "$lte": return compare(value, arg, raw: raw) <= 0
        case "$eq": return compare(value, arg, raw: raw) == 0
        case "$ne": return compare(value, arg, raw: raw) != 0
        case "$gte": return compare(value, arg, raw: raw) >= 0
        case "$gt": return compare(value, arg, raw: raw) > 0
        case "$in":
            guard case .array(let args) = arg, !args.isEmpty else { return false }
            if case .array(let values) = value {
                return args.contains { a in values.contains { compare($0, a, raw: raw) == 0 } }
            }
            return args.contains { compare(value, $0, raw: raw) == 0 }
        case "$nin":
            guard case .array(let args) = arg, !args.isEmpty else { return true }
            if case .array = value { return !matchOp("$in", arg, value, raw: raw) }
            return args.allSatisfy { compare(value, $0, raw: raw) != 0 }
        case "$all":
            guard case .array(let args) = arg, !args.isEmpty else { return false }
            guard case .array(let values) = value else { return false }
            if args.allSatisfy({ a in values.contains(a) }) { return true }
            if args.count == 1, case .array = args[0] { return args[0] == value }
            return false
        case "$exists": return arg.boolValue == true
        case "$type": return arg.stringValue == value.typeName
        case "$mod":
            guard case .int(let v) = value, case .array(let ar) = arg, ar.count == 2,
                case .int(let d) = ar[0], case .int(let r) = ar[1], d != 0
            else { return false }
            if d == -1 { return r == 0 }
            return v % d == r
        case "$beginsWith":
            guard case .string(let s) = value, case .string(let prefix) = arg else { return false }
            return s.utf8.starts(with: prefix.utf8)
        case "$regex":
            guard case .string(let s) = value, case .string(let pattern) = arg,
                let regex = MangoRegex.compile(pattern)
            else { return false }
            return regex.firstMatch(in: s, options: [], range: NSRange(s.startIndex..., in: s)) != nil
        case "$size":
            guard case .array(let items) = value, case .int(let n) = arg else { return false }
            return Int64(items.count) == n
        default: return false
        }
    }

    // MARK: Analysis used by the query planner

    /// Top-level field names the selector mentions (`mango_selector:fields/1`).
    var fieldNames: [String] {
        switch self {
        case .and(let args), .or(let args), .nor(let args): return args.flatMap(\.fieldNames)
        case .field(let path, _): return [path.joined(separator: ".")]
        case .rawField(let name, _): return [name]
        case .not(let arg): return arg.fieldNames
        case .text: return ["$default"]
        default: return []
        }
    }

    /// Whether every document matching the selector must have all `required` fields
    /// (`mango_selector:has_required_fields/2`).
    func hasRequiredFields(_ required: [[String]]) -> Bool {
        if case .empty = self { return required.isEmpty }
        return SelectorNode.requiredRemainder([self], required).isEmpty
    }

    private static func requiredRemainder(_ list: [SelectorNode], _ required: [[String]]) -> [[String]] {
        if required.isEmpty { return [] }
        guard let first = list.first else { return required }
        let rest = Array(list.dropFirst())
        switch first {
        case .empty: return required
        case .and(let args):
            if list.count == 1 { return requiredRemainder(args, required) }
            return requiredRemainder(rest, requiredRemainder(args, required))
        case .or(let args):
            var remainder: [[String]] = []
            for a in args {
                for r in requiredRemainder([a], required) where !remainder.contains(r) { remainder.append(r) }
            }
            return requiredRemainder(rest, remainder)
        case .field(let path, let cond):
            if case .op("$exists", .bool(false)) = cond { return requiredRemainder(rest, required) }
            var r = required
            if let i = r.firstIndex(of: path) { r.remove(at: i) }
            return requiredRemainder(rest, r)
        default:
            return requiredRemainder(rest, required)
        }
    }

    /// Whether `field` is fixed to one value by an `$eq` at the top level (or inside a top `$and`).
    func isConstantField(_ field: [String]) -> Bool {
        switch self {
        case .and(let args): return args.contains { $0.isConstantField(field) }
        case .field(let path, .op(let op, _)) where path == field: return op == "$eq"
        default: return false
        }
    }

    /// Whether this selector contains a `$text` search.
    var isTextSearch: Bool {
        switch self {
        case .text: return true
        case .and(let args), .or(let args), .nor(let args): return args.contains { $0.isTextSearch }
        case .not(let a), .elemMatch(let a), .allMatch(let a), .keyMapMatch(let a): return a.isTextSearch
        case .field(_, let c), .rawField(_, let c): return c.isTextSearch
        default: return false
        }
    }

    /// Field paths a JSON index can restrict (`mango_idx_view:indexable_fields/1`), sorted, unique.
    var indexablePaths: [[String]] {
        switch self {
        case .and(let args):
            var all: [[String]] = []
            for a in args { for p in a.indexablePaths where !all.contains(p) { all.append(p) } }
            return all.sorted { FieldPath.lessThan($0, $1) }
        case .field(let path, .op(let op, _)):
            return ["$lt", "$lte", "$eq", "$gt", "$gte", "$beginsWith", "$exists"].contains(op) ? [path] : []
        default: return []
        }
    }
}

/// Comparison helpers for Mango.
enum MangoCompare {
    /// Erlang term order, used for `_id` (`mango_json:cmp_raw/2`): numbers < atoms (false < null <
    /// true) < objects < arrays < strings; strings by bytes.
    static func raw(_ a: JSON, _ b: JSON) -> Int {
        func rank(_ v: JSON) -> Int {
            switch v {
            case .int, .double: return 0
            case .bool(false): return 1
            case .null: return 2
            case .bool(true): return 3
            case .object: return 4
            case .array(let items): return items.isEmpty ? 5 : 6
            case .string: return 7
            }
        }
        let ra = rank(a)
        let rb = rank(b)
        if ra != rb { return ra < rb ? -1 : 1 }
        if case .string(let x) = a, case .string(let y) = b { return Collation.compareRaw(x, y) }
        return Collation.compare(a, b)
    }
}

/// Regular expressions for `$regex` (PCRE in CouchDB; ICU here through NSRegularExpression).
enum MangoRegex {
    static func compile(_ pattern: String) -> NSRegularExpression? {
        try? NSRegularExpression(pattern: pattern, options: [])
    }
}
