import Foundation

/// A JavaScript value.
public enum JSValue {
    case undefined
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case object(JSObject)

    var isNullValue: Bool {
        if case .null = self { return true }
        return false
    }

    var isNullish: Bool {
        switch self {
        case .undefined, .null: return true
        default: return false
        }
    }

    var object: JSObject? {
        if case .object(let o) = self { return o }
        return nil
    }

    /// `ToBoolean`.
    public var truthy: Bool {
        switch self {
        case .undefined, .null: return false
        case .bool(let b): return b
        case .number(let n): return !(n == 0 || n.isNaN)
        case .string(let s): return !s.isEmpty
        case .object: return true
        }
    }

    /// `typeof`.
    var typeName: String {
        switch self {
        case .undefined: return "undefined"
        case .null: return "object"
        case .bool: return "boolean"
        case .number: return "number"
        case .string: return "string"
        case .object(let o): return o.callable != nil ? "function" : "object"
        }
    }

    /// `ToString` for display (numbers as JavaScript prints them). An array that contains itself
    /// shows its repeats as empty (as engines do), and the text stops growing at the longest
    /// string the interpreter makes: bounded in time and memory whatever the value.
    public func toDisplayString() -> String {
        if case .object(let o) = self, o.array != nil {
            var visiting: Set<ObjectIdentifier> = []
            var out = ""
            Self.join(o, into: &out, visiting: &visiting)
            return out
        }
        return displayString()
    }

    /// An array's elements joined with commas, nested arrays flattened the same way.
    private static func join(_ array: JSObject, into out: inout String, visiting: inout Set<ObjectIdentifier>) {
        guard let items = array.array, visiting.count < 1_000, visiting.insert(ObjectIdentifier(array)).inserted
        else { return }
        defer { visiting.remove(ObjectIdentifier(array)) }
        for (i, item) in items.enumerated() {
            if out.utf8.count > Interpreter.maximumStringLength { return }
            if i > 0 { out += "," }
            if case .object(let o) = item, o.array != nil {
                join(o, into: &out, visiting: &visiting)
            } else if !item.isNullish {
                out += item.displayString()
            }
        }
    }

    private func displayString() -> String {
        switch self {
        case .undefined: return "undefined"
        case .null: return "null"
        case .bool(let b): return b ? "true" : "false"
        case .number(let n): return Self.format(n)
        case .string(let s): return s
        case .object(let o):
            if o.array != nil { return toDisplayString() }
            if o.callable != nil { return "function () { [code] }" }
            if let date = o.date { return JSDate.iso(date) }
            if let regex = o.regex { return "/\(regex.source)/\(regex.flags)" }
            if o.className == "Error" {
                let name = o.get("name").toDisplayString()
                let message = o.get("message").toDisplayString()
                return message.isEmpty ? name : "\(name): \(message)"
            }
            return "[object Object]"
        }
    }

    /// A number as JavaScript's `Number.prototype.toString()` writes it (shortest round-trip
    /// digits; fixed notation from 1e-6 up to 1e21, exponent notation outside).
    static func format(_ n: Double) -> String {
        if n.isNaN { return "NaN" }
        if n.isInfinite { return n < 0 ? "-Infinity" : "Infinity" }
        if n == 0 { return "0" }
        let sign = n < 0 ? "-" : ""
        let magnitude = abs(n)
        if magnitude == magnitude.rounded(), magnitude < 1e21 { return sign + String(format: "%.0f", magnitude) }
        // Swift's shortest representation, taken apart into digits and a decimal exponent.
        let text = "\(magnitude)"
        var mantissa = text
        var exponent = 0
        if let e = text.firstIndex(where: { $0 == "e" || $0 == "E" }) {
            mantissa = String(text[..<e])
            exponent = Int(text[text.index(after: e)...]) ?? 0
        }
        let parts = mantissa.split(separator: ".", omittingEmptySubsequences: false)
        let integerPart = String(parts[0])
        let fraction = parts.count > 1 ? String(parts[1]) : ""
        var digits = integerPart + fraction
        var point = integerPart.count + exponent  // value = 0.digits × 10^point
        while digits.hasPrefix("0"), digits.count > 1 {
            digits.removeFirst()
            point -= 1
        }
        while digits.hasSuffix("0"), digits.count > 1 { digits.removeLast() }
        let k = digits.count
        if k <= point, point <= 21 { return sign + digits + String(repeating: "0", count: point - k) }
        if 0 < point, point <= 21 {
            let i = digits.index(digits.startIndex, offsetBy: point)
            return sign + digits[..<i] + "." + digits[i...]
        }
        if -6 < point, point <= 0 { return sign + "0." + String(repeating: "0", count: -point) + digits }
        let e = point - 1
        let head = String(digits.prefix(1))
        let rest = digits.dropFirst()
        return sign + head + (rest.isEmpty ? "" : "." + rest) + "e" + (e >= 0 ? "+" : "-") + String(abs(e))
    }

    /// `ToNumber`.
    public func toNumber() -> Double {
        switch self {
        case .undefined: return .nan
        case .null: return 0
        case .bool(let b): return b ? 1 : 0
        case .number(let n): return n
        case .string(let s):
            let t = s.trimmingCharacters(in: .whitespacesAndNewlines)
            if t.isEmpty { return 0 }
            if t.hasPrefix("0x") || t.hasPrefix("0X") {
                return UInt64(t.dropFirst(2), radix: 16).map(Double.init) ?? .nan
            }
            if t == "Infinity" || t == "+Infinity" { return .infinity }
            if t == "-Infinity" { return -.infinity }
            guard t.allSatisfy({ "0123456789+-.eE".contains($0) }) else { return .nan }
            return Double(t) ?? .nan
        case .object(var o):
            // An array of one element is its element's number: a loop, not a recursion, so that a
            // million nested arrays (or an array holding itself) cannot overflow the stack. Past
            // the nesting `toDisplayString` shows (1,000), the text is empty, so the number is 0.
            for _ in 0..<1_000 {
                if let date = o.date { return date }
                guard let array = o.array else { return .nan }
                if array.isEmpty { return 0 }
                if array.count > 1 { return .nan }
                guard case .object(let inner) = array[0] else { return array[0].toNumber() }
                o = inner
            }
            return 0
        }
    }

    /// `ToInt32`.
    func toInt32() -> Int32 { JSNumber.int32(toNumber()) }

    /// `ToUint32`.
    func toUint32() -> UInt32 { JSNumber.uint32(toNumber()) }

    /// `ToPropertyKey`.
    func toKey() -> String { toDisplayString() }
}

/// A JavaScript object: properties in insertion order, and what makes it special (an array's
/// elements, a function, a date, a regular expression).
public final class JSObject {
    var properties: [String: JSValue] = [:]
    var keyOrder: [String] = []
    var prototype: JSObject?
    var className = "Object"
    /// An array's elements.
    var array: [JSValue]?
    var callable: Callable?
    /// A date's time value (milliseconds since 1970).
    var date: Double?
    var regex: JSRegex?

    /// Whether this user function's `prototype` object is still to be made: it is made when first
    /// asked for. Made with the function, it and the function (its `constructor`) would hold each
    /// other: a reference cycle ARC never frees, for every function a design document's code makes
    /// (each `forEach` callback of each document mapped).
    var prototypeOnDemand = false

    init(prototype: JSObject? = nil, className: String = "Object") {
        self.prototype = prototype
        self.className = className
    }

    /// Makes the `prototype` of a user function: `{constructor: f}`, inheriting from the
    /// `Object.prototype` that `Function.prototype` inherits from.
    private func makePrototypeOnDemand() {
        prototypeOnDemand = false
        let made = JSObject(prototype: prototype?.prototype)
        made.set("constructor", .object(self))
        properties["prototype"] = .object(made)
    }

    /// Lets go of the objects this one refers to through its properties and elements, keeping its
    /// other members (a string `name`, the prototype it inherits from): how an ending interpreter
    /// breaks the cycles among its built-ins without emptying what a host may still read of them.
    func dropObjectReferences(into pending: inout [AnyObject]) {
        if let items = array, items.contains(where: { $0.object != nil }) {
            for case .object(let o) in items { pending.append(o) }
            array = items.map { $0.object == nil ? $0 : .undefined }
        }
        for (key, value) in properties {
            guard case .object(let o) = value else { continue }
            pending.append(o)
            properties[key] = .undefined
        }
    }

    deinit {
        var pending: [AnyObject] = []
        detach(into: &pending)
        Teardown.release(&pending)
    }

    /// Hands the objects and scopes this one holds to `pending`, and lets go of them.
    func detach(into pending: inout [AnyObject]) {
        if let items = array {
            for case .object(let o) in items { pending.append(o) }
            array = nil
        }
        if !properties.isEmpty {
            for case .object(let o) in properties.values { pending.append(o) }
            properties = [:]
        }
        if let prototype {
            pending.append(prototype)
            self.prototype = nil
        }
        switch callable {
        case .user(_, let scope, let thisValue)?:
            pending.append(scope)
            if case .object(let o)? = thisValue { pending.append(o) }
            callable = nil
        case .bound(let target, let this, let args)?:
            for case .object(let o) in [target, this] + args { pending.append(o) }
            callable = nil
        default: break
        }
    }

    func get(_ key: String) -> JSValue {
        if prototypeOnDemand, key == "prototype" { makePrototypeOnDemand() }
        if let array {
            if key == "length" { return .number(Double(array.count)) }
            if let i = JSNumber.arrayIndex(key) { return i < array.count ? array[i] : .undefined }
        }
        var object: JSObject? = self
        while let o = object {
            if let v = o.properties[key] { return v }
            object = o.prototype
        }
        return .undefined
    }

    func hasOwn(_ key: String) -> Bool {
        if prototypeOnDemand, key == "prototype" { return true }
        if let array, key == "length" || JSNumber.arrayIndex(key).map({ $0 < array.count }) == true { return true }
        return properties[key] != nil
    }

    func has(_ key: String) -> Bool {
        var object: JSObject? = self
        while let o = object {
            if o.hasOwn(key) { return true }
            object = o.prototype
        }
        return false
    }

    /// Sets a property. An array grows to at most `Interpreter.maximumArrayLength` elements here:
    /// the interpreter's `setProperty` checks the length and charges the growth first.
    func set(_ key: String, _ value: JSValue) {
        if array != nil {
            if key == "length" {
                let n = JSNumber.clamped(value.toNumber(), 0, Interpreter.maximumArrayLength)
                if n < array!.count {
                    array!.removeLast(array!.count - n)
                } else {
                    array! += Array(repeating: .undefined, count: n - array!.count)
                }
                return
            }
            if let i = JSNumber.arrayIndex(key), i < Interpreter.maximumArrayLength {
                if i >= array!.count { array! += Array(repeating: .undefined, count: i - array!.count + 1) }
                array![i] = value
                return
            }
        }
        if prototypeOnDemand, key == "prototype" {
            // Not enumerable, as the one made on demand would have been.
            prototypeOnDemand = false
            properties[key] = value
            return
        }
        if properties[key] == nil { keyOrder.append(key) }
        properties[key] = value
    }

    func delete(_ key: String) {
        if key == "prototype" { prototypeOnDemand = false }
        if array != nil, let i = JSNumber.arrayIndex(key), i < array!.count {
            array![i] = .undefined
            return
        }
        if properties.removeValue(forKey: key) != nil { keyOrder.removeAll { $0 == key } }
    }

    /// Own enumerable keys, in JavaScript's order (integer keys first, ascending).
    var ownKeys: [String] {
        if let array { return array.indices.map(String.init) + keyOrder }
        let integers = keyOrder.compactMap { key -> (Int, String)? in
            guard let i = JSNumber.arrayIndex(key) else { return nil }
            return (i, key)
        }.sorted { $0.0 < $1.0 }.map(\.1)
        let names = keyOrder.filter { JSNumber.arrayIndex($0) == nil }
        return integers + names
    }
}

/// A compiled regular expression.
final class JSRegex {
    let source: String
    let flags: String
    let expression: NSRegularExpression
    var global: Bool { flags.contains("g") }

    init(source: String, flags: String) throws {
        self.source = source
        self.flags = flags
        var options: NSRegularExpression.Options = []
        if flags.contains("i") { options.insert(.caseInsensitive) }
        if flags.contains("m") { options.insert(.anchorsMatchLines) }
        if flags.contains("s") { options.insert(.dotMatchesLineSeparators) }
        expression = try NSRegularExpression(pattern: source, options: options)
    }
}

/// What a function does when called.
enum Callable {
    case user(FunctionNode, Scope, thisValue: JSValue?)
    case native(name: String, (_ interpreter: Interpreter, _ this: JSValue, _ args: [JSValue]) throws -> JSValue)
    /// `Function.prototype.bind`'s result: held as data, not captured by a Swift closure, so that
    /// a chain of bound functions is released one at a time (`Teardown`).
    case bound(JSValue, this: JSValue, args: [JSValue])
}

/// A lexical scope.
final class Scope {
    private var bindings: [String: JSValue] = [:]
    private(set) var parent: Scope?
    /// Function scopes take `var` declarations.
    let isFunction: Bool

    init(parent: Scope?, isFunction: Bool = false) {
        self.parent = parent
        self.isFunction = isFunction
    }

    deinit {
        var pending: [AnyObject] = []
        detach(into: &pending)
        Teardown.release(&pending)
    }

    /// Hands the objects and scopes this one holds to `pending`, and lets go of them.
    func detach(into pending: inout [AnyObject]) {
        for case .object(let o) in bindings.values { pending.append(o) }
        bindings = [:]
        if let parent {
            pending.append(parent)
            self.parent = nil
        }
    }

    /// The objects this scope binds.
    var boundObjects: [JSObject] { bindings.values.compactMap(\.object) }

    func lookup(_ name: String) -> JSValue? {
        var scope: Scope? = self
        while let s = scope {
            if let v = s.bindings[name] { return v }
            scope = s.parent
        }
        return nil
    }

    func declare(_ name: String, _ value: JSValue) { bindings[name] = value }

    /// Declares `name` in the nearest function scope (for `var` and function declarations).
    func declareVar(_ name: String, _ value: JSValue?) {
        var scope = self
        while !scope.isFunction, let parent = scope.parent { scope = parent }
        if let value {
            scope.bindings[name] = value
        } else if scope.bindings[name] == nil {
            scope.bindings[name] = .undefined
        }
    }

    /// Assigns to the nearest binding of `name`; false when there is none.
    func assign(_ name: String, _ value: JSValue) -> Bool {
        var scope: Scope? = self
        while let s = scope {
            if s.bindings[name] != nil {
                s.bindings[name] = value
                return true
            }
            scope = s.parent
        }
        return false
    }

    var root: Scope {
        var scope = self
        while let parent = scope.parent { scope = parent }
        return scope
    }
}

/// A weak reference to a scope (see `Interpreter.closureScopes`).
struct WeakScope {
    weak var scope: Scope?
}

/// Releases what a dying object or scope held one at a time instead of recursively: a chain of a
/// million arrays (`a = [a]` in a loop) or closures would otherwise overflow the stack as Swift
/// releases it, on whichever thread drops the last reference, whichever way it is dropped (an
/// assignment, an element or property overwritten or deleted, an array shortened, a scope or
/// interpreter ending, a result thrown away).
///
/// The first dying object on a thread drains a queue: it lets go of what it held one reference at
/// a time, and each object or scope that dies of it (its `deinit`, called from here) only hands
/// what it held to the same queue and returns. The stack stays a few frames deep, and nothing is
/// taken apart that is still referenced elsewhere (an earlier version took an object apart only
/// when `isKnownUniquelyReferenced` said so, and released it whole otherwise; the check saw a
/// transient second reference while the parent's elements were being released, and a million
/// nested arrays were released recursively: SIGSEGV).
enum Teardown {
    /// The queue of the drain running on this thread, if one is.
    private final class Queue {
        var items: [AnyObject] = []
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    /// Lets go of `held` (what a dying object or scope held), iteratively.
    static func release(_ held: inout [AnyObject]) {
        guard !held.isEmpty else { return }
        if let running = pthread_getspecific(key) {
            // Called from a `deinit` the running drain below caused: queue, do not recurse.
            Unmanaged<Queue>.fromOpaque(running).takeUnretainedValue().items.append(contentsOf: held)
            held = []
            return
        }
        let queue = Queue()
        swap(&queue.items, &held)  // `held` must not keep them alive while they are released
        pthread_setspecific(key, Unmanaged.passUnretained(queue).toOpaque())
        defer { pthread_setspecific(key, nil) }
        while true {
            // The popped reference dies at the end of the iteration, outside any access to the
            // queue: a `deinit` it causes appends to the queue.
            var next: AnyObject? = queue.items.popLast()
            if next == nil { break }
            next = nil
        }
    }
}

/// A value thrown by JavaScript (`throw`), or an error the interpreter raises as JavaScript would.
public struct JSThrown: Error, @unchecked Sendable {
    // @unchecked Sendable: the value never leaves the thread of the interpreter that threw it
    // (callers turn it into JSON there).
    public let value: JSValue
}

/// The interpreter ran out of its step or depth budget (a `while (true) {}`, a runaway recursion).
public struct JSBudgetExceeded: Error, CustomStringConvertible {
    public let description: String
}
