import Foundation

/// A Mango selector: which documents `_find`, `_explain`, partial indexes and the `_selector`
/// changes filter match.
///
/// Selectors are immutable values built by chaining; every method returns a new selector:
///
/// ```swift
/// let adults = Selector.field("age").greaterThan(30).and(.field("name").regex("^A"))
/// // {"$and":[{"age":{"$gt":30}},{"name":{"$regex":"^A"}}]}
/// ```
///
/// Every operator CouchDB knows is covered: comparison (`$eq $ne $gt $gte $lt $lte`), object
/// (`$exists $type`), array (`$in $nin $size $all $elemMatch $allMatch $keyMapMatch`),
/// miscellaneous (`$mod $regex $beginsWith`) and combination (`$and $or $nor $not`). Each
/// selector encodes to exactly one JSON object with one member, in the order it was built, so
/// its JSON text is predictable. ``raw(_:)`` passes any JSON through unchanged, and a dictionary
/// literal (`["type": "post"]`) is a raw selector too.
public struct Selector: Sendable, Hashable, Codable, CustomStringConvertible, ExpressibleByDictionaryLiteral {
    indirect enum Node: Sendable, Hashable {
        /// `{field: {op: operand}}`, or `{op: operand}` for the element itself.
        case condition(path: String?, op: String, operand: Operand)
        /// `{"$and"|"$or"|"$nor": [selectors]}`.
        case combination(op: String, [Selector])
        /// `{"$not": selector}`.
        case not(Selector)
        /// Any JSON.
        case raw(JSONValue)
    }

    /// The right-hand side of an operator.
    enum Operand: Sendable, Hashable {
        case value(JSONValue)
        case selector(Selector)
    }

    let node: Node

    init(_ node: Node) { self.node = node }

    // MARK: Starting points

    /// The field at `path`: a name, or a dotted path into sub-objects (`"address.city"`).
    /// Use ``field(path:)`` when a name itself contains a dot.
    public static func field(_ path: String) -> Field { Field(path: path) }

    /// The field reached through `components`, each one a literal name (dots in a name are
    /// escaped as CouchDB expects: `["a.b", "c"]` is `a\.b.c`).
    public static func field(path components: [String]) -> Field {
        Field(path: components.map { $0.replacingOccurrences(of: ".", with: "\\.") }.joined(separator: "."))
    }

    /// The value being matched itself, for conditions inside ``Field/elemMatch(_:)``,
    /// ``Field/allMatch(_:)``, ``Field/keyMapMatch(_:)`` and ``Field/not(_:)`` on arrays of scalars:
    /// `Selector.field("tags").elemMatch(.element.equals("dev"))` is
    /// `{"tags":{"$elemMatch":{"$eq":"dev"}}}`.
    public static var element: Field { Field(path: nil) }

    /// Any JSON, sent unchanged.
    public static func raw(_ json: JSONValue) -> Selector { Selector(.raw(json)) }

    /// Matches every document (`{}`).
    public static let all = Selector(.raw([:]))

    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self.init(.raw(.object(Dictionary(elements, uniquingKeysWith: { _, last in last }))))
    }

    // MARK: Combinations

    /// All of `selectors` (`$and`).
    public static func and(_ selectors: [Selector]) -> Selector { Selector(.combination(op: "$and", selectors)) }
    /// Any of `selectors` (`$or`).
    public static func or(_ selectors: [Selector]) -> Selector { Selector(.combination(op: "$or", selectors)) }
    /// None of `selectors` (`$nor`).
    public static func nor(_ selectors: [Selector]) -> Selector { Selector(.combination(op: "$nor", selectors)) }
    /// Documents `selector` does not match (`$not`).
    public static func not(_ selector: Selector) -> Selector { Selector(.not(selector)) }

    /// This selector and `other` (`$and`); chained `and`s make one flat `$and` list.
    public func and(_ other: Selector) -> Selector { joined("$and", other) }
    /// This selector or `other` (`$or`); chained `or`s make one flat `$or` list.
    public func or(_ other: Selector) -> Selector { joined("$or", other) }
    /// Neither this selector nor `other` (`$nor`); chained `nor`s make one flat `$nor` list.
    public func nor(_ other: Selector) -> Selector { joined("$nor", other) }
    /// The opposite of this selector (`$not`).
    public func negated() -> Selector { Selector(.not(self)) }

    private func joined(_ op: String, _ other: Selector) -> Selector {
        if case .combination(let existing, let members) = node, existing == op {
            return Selector(.combination(op: op, members + [other]))
        }
        return Selector(.combination(op: op, [self, other]))
    }

    // MARK: JSON

    /// The selector as JSON.
    public var json: JSONValue {
        switch node {
        case .raw(let json): return json
        case .not(let inner): return ["$not": inner.json]
        case .combination(let op, let members): return .object([op: .array(members.map(\.json))])
        case .condition(let path, let op, let operand):
            let value: JSONValue
            switch operand {
            case .value(let json): value = json
            case .selector(let selector): value = selector.json
            }
            let condition: JSONValue = .object([op: value])
            guard let path else { return condition }
            return .object([path: condition])
        }
    }

    public init(from decoder: any Decoder) throws {
        self.init(.raw(try JSONValue(from: decoder)))
    }

    public func encode(to encoder: any Encoder) throws {
        switch node {
        case .raw(let json):
            try json.encode(to: encoder)
        case .not(let inner):
            var container = encoder.container(keyedBy: DynamicCodingKey.self)
            try container.encode(inner, forKey: DynamicCodingKey("$not"))
        case .combination(let op, let members):
            var container = encoder.container(keyedBy: DynamicCodingKey.self)
            try container.encode(members, forKey: DynamicCodingKey(op))
        case .condition(let path, let op, let operand):
            var container = encoder.container(keyedBy: DynamicCodingKey.self)
            guard let path else {
                try operand.encode(into: &container, key: DynamicCodingKey(op))
                return
            }
            var inner = container.nestedContainer(keyedBy: DynamicCodingKey.self, forKey: DynamicCodingKey(path))
            try operand.encode(into: &inner, key: DynamicCodingKey(op))
        }
    }

    /// The JSON text, as sent.
    public var description: String {
        let data = (try? JSONBody.encode(self)) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    /// Problems CouchDB would reject, found before sending (empty combination lists, negative
    /// sizes, a zero divisor, an empty regular expression ...). Nil when there are none.
    var problem: String? {
        switch node {
        case .raw(let json):
            return json.objectValue == nil ? "A selector must be a JSON object." : nil
        case .not(let inner):
            return inner.problem
        case .combination(let op, let members):
            if members.isEmpty { return "\(op) needs at least one selector." }
            return members.lazy.compactMap(\.problem).first
        case .condition(let path, let op, let operand):
            if let path, path.isEmpty { return "A field name must not be empty." }
            switch (op, operand) {
            case (_, .selector(let selector)): return selector.problem
            case ("$size", .value(let value)):
                return (value.intValue ?? -1) < 0 ? "$size needs a non-negative integer." : nil
            case ("$mod", .value(let value)):
                return value[0]?.intValue == 0 ? "$mod needs a non-zero divisor." : nil
            case ("$in", .value(let value)), ("$nin", .value(let value)), ("$all", .value(let value)):
                return value.arrayValue?.isEmpty == false ? nil : "\(op) needs a non-empty list."
            default: return nil
            }
        }
    }

    /// Throws a validation error when ``problem`` finds one.
    func validate(_ name: String = "selector") throws(CouchError) {
        if let problem { throw CouchError.validation("Invalid \(name): \(problem)") }
    }
}

extension Selector.Operand {
    fileprivate func encode(
        into container: inout KeyedEncodingContainer<DynamicCodingKey>, key: DynamicCodingKey
    ) throws {
        switch self {
        case .value(let json): try container.encode(json, forKey: key)
        case .selector(let selector): try container.encode(selector, forKey: key)
        }
    }
}

extension Selector {
    /// A JSON type, for ``Field/type(_:)``.
    public enum JSONType: String, Sendable, Hashable, CaseIterable {
        case null, boolean, number, string, array, object
    }

    /// A field (or the element itself) that conditions are applied to. Every method returns a
    /// ``Selector``.
    public struct Field: Sendable, Hashable {
        /// The field path, or nil for the matched value itself (``Selector/element``).
        public let path: String?

        func condition(_ op: String, _ value: JSONValue) -> Selector {
            Selector(.condition(path: path, op: op, operand: .value(value)))
        }

        func condition(_ op: String, _ selector: Selector) -> Selector {
            Selector(.condition(path: path, op: op, operand: .selector(selector)))
        }

        /// Equal to `value` (`$eq`).
        public func equals(_ value: JSONValue) -> Selector { condition("$eq", value) }
        /// Not equal to `value` (`$ne`).
        public func notEquals(_ value: JSONValue) -> Selector { condition("$ne", value) }
        /// Greater than `value` in CouchDB's collation (`$gt`).
        public func greaterThan(_ value: JSONValue) -> Selector { condition("$gt", value) }
        /// Greater than or equal to `value` (`$gte`).
        public func greaterThanOrEqual(_ value: JSONValue) -> Selector { condition("$gte", value) }
        /// Less than `value` (`$lt`).
        public func lessThan(_ value: JSONValue) -> Selector { condition("$lt", value) }
        /// Less than or equal to `value` (`$lte`).
        public func lessThanOrEqual(_ value: JSONValue) -> Selector { condition("$lte", value) }

        /// The field exists (or, with `false`, does not) (`$exists`).
        public func exists(_ exists: Bool = true) -> Selector { condition("$exists", .bool(exists)) }
        /// The value has this JSON type (`$type`).
        public func type(_ type: JSONType) -> Selector { condition("$type", .string(type.rawValue)) }

        /// The value is one of `values`, or an array sharing an element with them (`$in`).
        public func `in`(_ values: [JSONValue]) -> Selector { condition("$in", .array(values)) }
        /// The value is none of `values` (`$nin`).
        public func notIn(_ values: [JSONValue]) -> Selector { condition("$nin", .array(values)) }
        /// The value is an array of exactly `count` elements (`$size`).
        public func size(_ count: Int) -> Selector { condition("$size", .int(Int64(count))) }
        /// The value is an array containing all of `values` (`$all`).
        public func all(_ values: [JSONValue]) -> Selector { condition("$all", .array(values)) }
        /// The value is an array with at least one element matching `selector` (`$elemMatch`).
        public func elemMatch(_ selector: Selector) -> Selector { condition("$elemMatch", selector) }
        /// The value is an array whose every element matches `selector` (`$allMatch`).
        public func allMatch(_ selector: Selector) -> Selector { condition("$allMatch", selector) }
        /// The value is an object with at least one key matching `selector` (`$keyMapMatch`).
        public func keyMapMatch(_ selector: Selector) -> Selector { condition("$keyMapMatch", selector) }

        /// The value is an integer whose remainder by `divisor` is `remainder` (`$mod`).
        public func mod(divisor: Int, remainder: Int) -> Selector {
            condition("$mod", [.int(Int64(divisor)), .int(Int64(remainder))])
        }
        /// The value is a string matching the Erlang (PCRE) regular expression `pattern` (`$regex`).
        public func regex(_ pattern: String) -> Selector { condition("$regex", .string(pattern)) }
        /// The value is a string starting with `prefix` (`$beginsWith`, CouchDB 3.4+); unlike
        /// `$regex` it can use an index.
        public func beginsWith(_ prefix: String) -> Selector { condition("$beginsWith", .string(prefix)) }

        /// The value does not match `condition`, written on ``Selector/element``
        /// (`Selector.field("age").not(.element.greaterThan(30))` is `{"age":{"$not":{"$gt":30}}}`).
        public func not(_ condition: Selector) -> Selector { self.condition("$not", condition) }

        /// Any operator, for ones this type does not name yet: `{field: {op: operand}}`.
        public func matching(operator op: String, _ operand: JSONValue) -> Selector { condition(op, operand) }
    }
}
