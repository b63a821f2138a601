/// An ordered list of HTTP header fields with case-insensitive look-up: the one header type of
/// the package (SwiftCouch calls it `HTTPFields`; the TestServer uses it too).
///
/// Kept as written (order and case) so that a message can be serialised exactly as it was built.
/// Its description and mirror (what `dump` and debuggers show) hide the values of
/// `Authorization`, `Cookie`, `Set-Cookie` and `Proxy-Authorization`.
public struct HTTPHeaders: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral, CustomStringConvertible,
    CustomReflectable
{
    /// The fields as name/value pairs, in order.
    public private(set) var pairs: [Pair]

    /// One header field.
    public struct Pair: Sendable, Hashable {
        public var name: String
        public var value: String

        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    public init() { pairs = [] }

    public init(_ fields: [(String, String)]) {
        pairs = fields.map { Pair(name: $0.0, value: $0.1) }
    }

    init(pairs: [Pair]) { self.pairs = pairs }

    public init(dictionaryLiteral elements: (String, String)...) {
        self.init(elements)
    }

    /// The fields as name/value tuples, in order.
    public var fields: [(name: String, value: String)] { pairs.map { (name: $0.name, value: $0.value) } }

    /// The first value of the field `name`, compared case-insensitively; setting replaces every
    /// value (in the place of the first), and nil removes them all.
    public subscript(name: String) -> String? {
        get { pairs.first { $0.name.caseInsensitiveEquals(name) }?.value }
        set {
            guard let newValue else {
                remove(name)
                return
            }
            guard let index = pairs.firstIndex(where: { $0.name.caseInsensitiveEquals(name) }) else {
                pairs.append(Pair(name: name, value: newValue))
                return
            }
            pairs[index].value = newValue
            // Later copies go; the usual case, a single field, changes in place.
            let rest = (index + 1)..<pairs.endIndex
            if pairs[rest].contains(where: { $0.name.caseInsensitiveEquals(name) }) {
                pairs.replaceSubrange(rest, with: pairs[rest].filter { !$0.name.caseInsensitiveEquals(name) })
            }
        }
    }

    /// Every value of the field `name`, in order.
    public func values(_ name: String) -> [String] {
        pairs.filter { $0.name.caseInsensitiveEquals(name) }.map(\.value)
    }

    public func contains(_ name: String) -> Bool { self[name] != nil }

    /// Makes room for `count` fields, so that adding up to that many allocates nothing more.
    public mutating func reserveCapacity(_ count: Int) { pairs.reserveCapacity(count) }

    /// Appends a field, keeping any earlier ones with the same name.
    public mutating func add(_ name: String, _ value: String) {
        pairs.append(Pair(name: name, value: value))
    }

    /// Appends a field, keeping any earlier ones with the same name (as ``add(_:_:)``).
    public mutating func append(_ name: String, _ value: String) { add(name, value) }

    /// Replaces every field called `name` with one field holding `value`, at the end.
    public mutating func set(_ name: String, _ value: String) {
        remove(name)
        pairs.append(Pair(name: name, value: value))
    }

    public mutating func remove(_ name: String) {
        pairs.removeAll { $0.name.caseInsensitiveEquals(name) }
    }

    public func makeIterator() -> IndexingIterator<[Pair]> { pairs.makeIterator() }

    public var count: Int { pairs.count }

    /// The names whose values are secrets, lowercased.
    public static let secretNames: Set<String> = ["authorization", "cookie", "set-cookie", "proxy-authorization"]

    /// `value`, or `<redacted>` when `name` is a secret header.
    public static func displayValue(name: String, value: String) -> String {
        secretNames.contains(name.lowercased()) ? "<redacted>" : value
    }

    /// The fields with secret values replaced by `<redacted>`.
    public var description: String {
        pairs.map { "\($0.name): \(Self.displayValue(name: $0.name, value: $0.value))" }.joined(separator: ", ")
    }

    public var customMirror: Mirror {
        Mirror(
            self,
            children: pairs.map { (label: $0.name, value: Self.displayValue(name: $0.name, value: $0.value) as Any) },
            displayStyle: .dictionary)
    }
}

extension String {
    /// ASCII case-insensitive comparison, as HTTP field names need.
    @inlinable
    public func caseInsensitiveEquals(_ other: String) -> Bool {
        let a = utf8
        let b = other.utf8
        guard a.count == b.count else { return false }
        for (x, y) in zip(a, b) where x != y {
            let lx = (x >= 65 && x <= 90) ? x + 32 : x
            let ly = (y >= 65 && y <= 90) ? y + 32 : y
            if lx != ly { return false }
        }
        return true
    }
}
