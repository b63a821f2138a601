import CouchQuery
import Foundation

extension Interpreter {
    private func isConstructCall(_ this: JSValue, _ name: String) -> Bool {
        if case .string(let s) = this { return s == "__new__" + name }
        return false
    }

    func method(
        _ object: JSObject, _ name: String, _ body: @escaping (Interpreter, JSValue, [JSValue]) throws -> JSValue
    ) {
        object.properties[name] = .object(makeFunction(name, body))
    }

    private func arg(_ args: [JSValue], _ i: Int) -> JSValue { i < args.count ? args[i] : .undefined }

    func installBuiltins() {
        functionPrototype.className = "Function"
        installObject()
        installFunctionPrototype()
        installArray()
        installString()
        installNumberAndMath()
        installJSON()
        installDate()
        installRegExp()
        installErrors()
        define("NaN", .number(.nan))
        define("Infinity", .number(.infinity))
        define("globalThis", .undefined)
        defineFunction("isNaN") { _, _, args in .bool(args.first?.toNumber().isNaN ?? true) }
        defineFunction("isFinite") { _, _, args in .bool(args.first?.toNumber().isFinite ?? false) }
        defineFunction("parseFloat") { _, _, args in
            let text = (args.first ?? .undefined).toDisplayString().trimmingCharacters(in: .whitespaces)
            var prefix = ""
            for c in text {
                let candidate = prefix + String(c)
                if Double(candidate) != nil || candidate == "-" || candidate == "+" || candidate == "."
                    || candidate.hasSuffix("e") || candidate.hasSuffix("e-") || candidate.hasSuffix("e+")
                {
                    prefix = candidate
                } else {
                    break
                }
            }
            return .number(Double(prefix) ?? .nan)
        }
        defineFunction("parseInt") { interpreter, _, args in
            var text = Substring(interpreter.arg(args, 0).toDisplayString().trimmingCharacters(in: .whitespaces))
            var radix = Int(interpreter.arg(args, 1).toInt32())  // ToInt32: NaN and ±Infinity are 0
            let mayBeHex = radix == 0 || radix == 16
            if radix == 0 { radix = 10 }
            guard (2...36).contains(radix) else { return .number(.nan) }
            var negative = false
            if text.hasPrefix("-") || text.hasPrefix("+") {
                negative = text.hasPrefix("-")
                text.removeFirst()
            }
            if mayBeHex, text.hasPrefix("0x") || text.hasPrefix("0X") {
                text.removeFirst(2)
                radix = 16
            }
            var value = 0.0
            var digits = ""
            for c in text {
                guard
                    let d = c.hexDigitValue
                        ?? (c.isASCII && c.isLetter ? c.asciiValue.map { Int($0 | 0x20) - 87 } : nil),
                    d < radix
                else { break }
                value = value * Double(radix) + Double(d)
                digits.append(c)
            }
            guard !digits.isEmpty else { return .number(.nan) }
            if radix == 10 { value = Double(digits) ?? value }  // correctly rounded
            return .number(negative ? -value : value)
        }
        defineFunction("Boolean") { interpreter, _, args in .bool(interpreter.arg(args, 0).truthy) }
        defineFunction("String") { interpreter, _, args in
            args.isEmpty ? .string("") : .string(try interpreter.toStringValue(args[0]))
        }
        if let string = global.lookup("String")?.object {
            method(string, "fromCharCode") { interpreter, _, args in
                try interpreter.charge(args.count, of: 3)
                return .string(String(utf16CodeUnits: args.map { JSNumber.uint16($0.toNumber()) }, count: args.count))
            }
            string.properties["prototype"] = .object(stringPrototype)
        }
    }

    // MARK: - Object

    private func installObject() {
        let object = makeFunction("Object") { interpreter, _, args in
            if let o = args.first?.object { return .object(o) }
            return .object(interpreter.newObject())
        }
        object.properties["prototype"] = .object(objectPrototype)
        method(object, "keys") { interpreter, _, args in
            guard let o = interpreter.arg(args, 0).object else { return .object(interpreter.newArray([])) }
            try interpreter.chargeKeys(o, each: 32)
            return .object(interpreter.newArray(o.ownKeys.map(JSValue.string)))
        }
        method(object, "values") { interpreter, _, args in
            guard let o = interpreter.arg(args, 0).object else { return .object(interpreter.newArray([])) }
            try interpreter.chargeKeys(o, each: 32)
            return .object(interpreter.newArray(o.ownKeys.map { o.get($0) }))
        }
        method(object, "entries") { interpreter, _, args in
            guard let o = interpreter.arg(args, 0).object else { return .object(interpreter.newArray([])) }
            try interpreter.chargeKeys(o, each: 32 + Interpreter.objectCost + 2 * Interpreter.elementCost)
            return .object(
                interpreter.newArray(o.ownKeys.map { .object(interpreter.newArray([.string($0), o.get($0)])) }))
        }
        method(object, "assign") { interpreter, _, args in
            guard let target = interpreter.arg(args, 0).object else { return interpreter.arg(args, 0) }
            for source in args.dropFirst() {
                if let s = source.object {
                    try interpreter.chargeKeys(s, each: 32 + Interpreter.elementCost)
                    // Through setProperty: an array target grows only as far as it may, counted.
                    for key in s.ownKeys { try interpreter.setProperty(.object(target), key, s.get(key)) }
                }
            }
            return .object(target)
        }
        method(object, "freeze") { interpreter, _, args in interpreter.arg(args, 0) }
        method(object, "create") { interpreter, _, args in
            interpreter.note(bytes: Interpreter.objectCost)
            return .object(JSObject(prototype: interpreter.arg(args, 0).object))
        }
        method(object, "getPrototypeOf") { interpreter, _, args in
            interpreter.arg(args, 0).object?.prototype.map { .object($0) } ?? .null
        }
        method(objectPrototype, "hasOwnProperty") { interpreter, this, args in
            .bool(this.object?.hasOwn(interpreter.arg(args, 0).toKey()) ?? false)
        }
        method(objectPrototype, "toString") { _, this, _ in
            if this.object?.array != nil { return .string(this.toDisplayString()) }
            return .string("[object \(this.object?.className ?? "Object")]")
        }
        method(objectPrototype, "valueOf") { _, this, _ in this }
        define("Object", .object(object))
    }

    private func installFunctionPrototype() {
        method(functionPrototype, "call") { interpreter, this, args in
            try interpreter.invoke(this, this: interpreter.arg(args, 0), Array(args.dropFirst()))
        }
        method(functionPrototype, "apply") { interpreter, this, args in
            let list = interpreter.arg(args, 1).object?.array ?? []
            try interpreter.charge(list.count, of: Interpreter.elementCost)
            return try interpreter.invoke(this, this: interpreter.arg(args, 0), list)
        }
        method(functionPrototype, "bind") { interpreter, this, args in
            guard this.object?.callable != nil else { throw interpreter.typeError("Bind must be called on a function") }
            let f = JSObject(prototype: interpreter.functionPrototype, className: "Function")
            f.callable = .bound(this, this: interpreter.arg(args, 0), args: Array(args.dropFirst()))
            interpreter.note(bytes: Interpreter.objectCost)
            return .object(f)
        }
        method(functionPrototype, "toString") { _, _, _ in .string("function () { [code] }") }
    }

    // MARK: - Array

    private func elements(_ this: JSValue) throws -> JSObject {
        guard let o = this.object, o.array != nil else { throw typeError("not an array") }
        return o
    }

    private func installArray() {
        let array = makeFunction("Array") { interpreter, _, args in
            if args.count == 1, case .number(let n) = args[0] {
                // ECMAScript: a length that is not a uint32 is a RangeError; bounded memory here too.
                guard n >= 0, n == n.rounded(.towardZero), n <= 4_294_967_295 else {
                    throw interpreter.rangeError("Invalid array length")
                }
                let count = try interpreter.checkedArrayLength(n)
                return .object(interpreter.newArray(Array(repeating: .undefined, count: count)))
            }
            return .object(interpreter.newArray(args))
        }
        array.properties["prototype"] = .object(arrayPrototype)
        method(array, "isArray") { interpreter, _, args in .bool(interpreter.arg(args, 0).object?.array != nil) }
        method(array, "from") { interpreter, _, args in
            let source = interpreter.arg(args, 0)
            var items: [JSValue] = []
            if case .string = source {
                items = try interpreter.iterate(source)
            } else if let array = source.object?.array {
                items = array
            } else if let o = source.object {
                // An array-like: ToLength of its length, bounded (a RangeError past the longest array).
                let length = JSNumber.integerOrInfinity(o.get("length").toNumber())
                let count = try interpreter.checkedArrayLength(max(0, length))
                items = (0..<count).map { o.get(String($0)) }
            }
            try interpreter.charge(items.count, of: Interpreter.elementCost)
            if case .object(let f) = interpreter.arg(args, 1), f.callable != nil {
                items = try items.enumerated().map {
                    try interpreter.invoke(.object(f), this: .undefined, [$1, .number(Double($0))])
                }
            }
            return .object(interpreter.newArray(items))
        }
        define("Array", .object(array))
        let p = arrayPrototype
        method(p, "push") { interpreter, this, args in
            let o = try interpreter.elements(this)
            try interpreter.charge(args.count, of: Interpreter.elementCost)
            o.array! += args
            return .number(Double(o.array!.count))
        }
        method(p, "pop") { interpreter, this, _ in
            let o = try interpreter.elements(this)
            return o.array!.popLast() ?? .undefined
        }
        method(p, "shift") { interpreter, this, _ in
            let o = try interpreter.elements(this)
            try interpreter.charge(steps: o.array!.count >> 6)
            return o.array!.isEmpty ? .undefined : o.array!.removeFirst()
        }
        method(p, "unshift") { interpreter, this, args in
            let o = try interpreter.elements(this)
            try interpreter.charge(args.count, of: Interpreter.elementCost)
            try interpreter.charge(steps: o.array!.count >> 6)
            o.array!.insert(contentsOf: args, at: 0)
            return .number(Double(o.array!.count))
        }
        method(p, "slice") { interpreter, this, args in
            let items = try interpreter.elements(this).array!
            let (start, end) = interpreter.range(args, count: items.count)
            try interpreter.charge(end - start, of: Interpreter.elementCost)
            return .object(interpreter.newArray(start < end ? Array(items[start..<end]) : []))
        }
        method(p, "splice") { interpreter, this, args in
            let o = try interpreter.elements(this)
            let count = o.array!.count
            let (start, _) = interpreter.range([interpreter.arg(args, 0)], count: count)
            let deleteCount =
                args.count < 2
                ? count - start : JSNumber.clamped(interpreter.integerArgument(args, 1), 0, count - start)
            try interpreter.charge(deleteCount + max(0, args.count - 2), of: Interpreter.elementCost)
            try interpreter.charge(steps: count >> 6)
            let removed = Array(o.array![start..<(start + deleteCount)])
            o.array!.replaceSubrange(start..<(start + deleteCount), with: args.dropFirst(2))
            return .object(interpreter.newArray(removed))
        }
        method(p, "concat") { interpreter, this, args in
            var items = try interpreter.elements(this).array!
            try interpreter.charge(items.count, of: Interpreter.elementCost)
            for a in args {
                try interpreter.charge(a.object?.array?.count ?? 1, of: Interpreter.elementCost)
                if let other = a.object?.array { items += other } else { items.append(a) }
            }
            return .object(interpreter.newArray(items))
        }
        method(p, "join") { interpreter, this, args in
            let o = try interpreter.elements(this)
            let separator = args.first.map { $0.isUndefinedValue ? "," : $0.toDisplayString() } ?? ","
            return .string(try interpreter.joinArray(o, separator: separator))
        }
        method(p, "toString") { interpreter, this, _ in
            .string(try interpreter.joinArray(try interpreter.elements(this), separator: ","))
        }
        method(p, "reverse") { interpreter, this, _ in
            let o = try interpreter.elements(this)
            try interpreter.charge(steps: o.array!.count >> 6)
            o.array!.reverse()
            return this
        }
        method(p, "fill") { interpreter, this, args in
            let o = try interpreter.elements(this)
            let count = o.array!.count
            let (start, end) = interpreter.range(Array(args.dropFirst()), count: count)
            try interpreter.charge(steps: (end - start) >> 4)
            for i in start..<max(start, end) { o.array![i] = interpreter.arg(args, 0) }
            return this
        }
        method(p, "indexOf") { interpreter, this, args in
            let items = try interpreter.elements(this).array!
            let target = interpreter.arg(args, 0)
            let from = args.count > 1 ? JSNumber.relative(interpreter.integerArgument(args, 1), count: items.count) : 0
            try interpreter.charge(steps: (items.count - from) >> 4)
            return .number(Double(items[from...].firstIndex { interpreter.strictEquals($0, target) } ?? -1))
        }
        method(p, "lastIndexOf") { interpreter, this, args in
            let items = try interpreter.elements(this).array!
            let target = interpreter.arg(args, 0)
            guard !items.isEmpty else { return .number(-1) }
            // fromIndex: negative counts from the end; past the end is the last element.
            let n = args.count > 1 ? interpreter.integerArgument(args, 1) : Double(items.count - 1)
            let last =
                n < 0
                ? JSNumber.clamped(Double(items.count) + n, -1, items.count - 1)
                : JSNumber.clamped(n, -1, items.count - 1)
            guard last >= 0 else { return .number(-1) }
            try interpreter.charge(steps: last >> 4)
            return .number(Double(items[...last].lastIndex { interpreter.strictEquals($0, target) } ?? -1))
        }
        method(p, "includes") { interpreter, this, args in
            let items = try interpreter.elements(this).array!
            let target = interpreter.arg(args, 0)
            try interpreter.charge(steps: items.count >> 4)
            return .bool(
                items.contains {
                    interpreter.strictEquals($0, target)
                        || ($0.toNumber().isNaN && target.toNumber().isNaN && $0.typeName == "number"
                            && target.typeName == "number")
                })
        }
        func callback(_ interpreter: Interpreter, _ args: [JSValue]) throws -> JSValue {
            let f = interpreter.arg(args, 0)
            guard f.object?.callable != nil else {
                throw interpreter.typeError("\(f.toDisplayString()) is not a function")
            }
            return f
        }
        method(p, "forEach") { interpreter, this, args in
            let items = try interpreter.elements(this).array!
            let f = try callback(interpreter, args)
            for (i, item) in items.enumerated() {
                _ = try interpreter.invoke(f, this: .undefined, [item, .number(Double(i)), this])
            }
            return .undefined
        }
        method(p, "map") { interpreter, this, args in
            let items = try interpreter.elements(this).array!
            let f = try callback(interpreter, args)
            try interpreter.charge(items.count, of: Interpreter.elementCost)
            return .object(
                interpreter.newArray(
                    try items.enumerated().map {
                        try interpreter.invoke(f, this: .undefined, [$1, .number(Double($0)), this])
                    }))
        }
        method(p, "filter") { interpreter, this, args in
            let items = try interpreter.elements(this).array!
            let f = try callback(interpreter, args)
            var kept: [JSValue] = []
            for (i, item) in items.enumerated()
            where try interpreter.invoke(f, this: .undefined, [item, .number(Double(i)), this]).truthy {
                kept.append(item)
            }
            return .object(interpreter.newArray(kept))
        }
        for (name, wantsAll) in [("some", false), ("every", true)] {
            method(p, name) { interpreter, this, args in
                let items = try interpreter.elements(this).array!
                let f = try callback(interpreter, args)
                for (i, item) in items.enumerated() {
                    let passed = try interpreter.invoke(f, this: .undefined, [item, .number(Double(i)), this]).truthy
                    if passed != wantsAll { return .bool(!wantsAll) }
                }
                return .bool(wantsAll)
            }
        }
        for (name, wantsIndex) in [("find", false), ("findIndex", true)] {
            method(p, name) { interpreter, this, args in
                let items = try interpreter.elements(this).array!
                let f = try callback(interpreter, args)
                for (i, item) in items.enumerated()
                where try interpreter.invoke(f, this: .undefined, [item, .number(Double(i)), this]).truthy {
                    return wantsIndex ? .number(Double(i)) : item
                }
                return wantsIndex ? .number(-1) : .undefined
            }
        }
        for (name, fromRight) in [("reduce", false), ("reduceRight", true)] {
            method(p, name) { interpreter, this, args in
                var items = try interpreter.elements(this).array!
                if fromRight { items.reverse() }
                let f = try callback(interpreter, args)
                var index = 0
                var accumulator: JSValue
                if args.count > 1 {
                    accumulator = args[1]
                } else {
                    guard !items.isEmpty else {
                        throw interpreter.typeError("Reduce of empty array with no initial value")
                    }
                    accumulator = items[0]
                    index = 1
                }
                while index < items.count {
                    accumulator = try interpreter.invoke(
                        f, this: .undefined, [accumulator, items[index], .number(Double(index)), this])
                    index += 1
                }
                return accumulator
            }
        }
        method(p, "sort") { interpreter, this, args in
            let o = try interpreter.elements(this)
            let compare = interpreter.arg(args, 0)
            // n log n comparisons, each at least a step (a comparator's own steps count too).
            let n = o.array!.count
            try interpreter.charge(n, of: 2 * Interpreter.elementCost)
            try interpreter.charge(steps: n * max(1, Int.bitWidth - n.leadingZeroBitCount))
            var failure: Error?
            let sorted = o.array!.enumerated().sorted { a, b in
                if failure != nil { return false }
                if a.element.isUndefinedValue || b.element.isUndefinedValue {
                    return !a.element.isUndefinedValue && b.element.isUndefinedValue
                }
                let c: Double
                if compare.object?.callable != nil {
                    do {
                        c = try interpreter.invoke(compare, this: .undefined, [a.element, b.element]).toNumber()
                    } catch {
                        failure = error
                        return false
                    }
                } else {
                    c = Double(interpreter.compareStrings(a.element.toDisplayString(), b.element.toDisplayString()))
                }
                return c < 0 || (c == 0 && a.offset < b.offset)  // stable
            }
            if let failure { throw failure }
            o.array = sorted.map(\.element)
            return this
        }
    }

    /// `slice`-style start and end indices.
    func range(_ args: [JSValue], count: Int) -> (Int, Int) {
        func position(_ v: JSValue, _ fallback: Int) -> Int {
            v.isUndefinedValue ? fallback : JSNumber.relative(v.toNumber(), count: count)
        }
        let start = position(arg(args, 0), 0)
        return (start, max(start, position(arg(args, 1), count)))
    }

    /// An array length from JavaScript, checked against the longest array here (a RangeError).
    func checkedArrayLength(_ n: Double) throws -> Int {
        guard n <= Double(Interpreter.maximumArrayLength) else {
            throw rangeError("Invalid array length: at most \(Interpreter.maximumArrayLength) elements here")
        }
        let count = JSNumber.clamped(n, 0, Interpreter.maximumArrayLength)
        try charge(count, of: Interpreter.elementCost)
        return count
    }

    /// Charges an object's own keys (`each` bytes per key) before they are listed or copied.
    func chargeKeys(_ o: JSObject, each: Int) throws {
        try charge((o.array?.count ?? 0) + o.keyOrder.count, of: each)
    }

    /// `Array.prototype.join` of `array` (empty where it is already being joined: a cycle).
    func joinArray(_ array: JSObject, separator: String) throws -> String {
        guard joining.count < 1_000, joining.insert(ObjectIdentifier(array)).inserted else { return "" }
        defer { joining.remove(ObjectIdentifier(array)) }
        return try join(array.array ?? [], separator: separator)
    }

    /// `Array.prototype.join`: bounded by the longest string, counted as it grows.
    func join(_ items: [JSValue], separator: String) throws -> String {
        var out = ""
        for (i, item) in items.enumerated() {
            var piece = ""
            if let nested = item.object, let elements = nested.array {
                // An array being joined shows as empty where it contains itself, as engines do.
                if joining.count < 1_000, joining.insert(ObjectIdentifier(nested)).inserted {
                    defer { joining.remove(ObjectIdentifier(nested)) }
                    piece = try join(elements, separator: ",")
                }
            } else if !item.isNullish {
                piece = try toStringValue(item)
            }
            let added = piece.utf8.count + (i > 0 ? separator.utf8.count : 0)
            try chargeString(added, total: out.utf8.count + added)
            if i > 0 { out += separator }
            out += piece
        }
        return out
    }

    // MARK: - String

    private func stringValue(_ this: JSValue) -> String {
        if case .string(let s) = this { return s }
        return this.toDisplayString()
    }

    private func installString() {
        let p = stringPrototype
        method(p, "charAt") { interpreter, this, args in
            let s = interpreter.stringValue(this)
            let i = interpreter.integerArgument(args, 0)
            return .string(i >= 0 && i < Double(s.utf16.count) ? s.utf16Unit(at: Int(i)) : "")
        }
        method(p, "charCodeAt") { interpreter, this, args in
            let s = interpreter.stringValue(this)
            let i = interpreter.integerArgument(args, 0)
            guard i >= 0, i < Double(s.utf16.count) else { return .number(.nan) }
            return .number(Double(s.utf16[s.utf16.index(s.utf16.startIndex, offsetBy: Int(i))]))
        }
        method(p, "indexOf") { interpreter, this, args in
            let s = Array(interpreter.stringValue(this).utf16)
            let needle = Array(interpreter.arg(args, 0).toDisplayString().utf16)
            let from = JSNumber.clamped(interpreter.integerArgument(args, 1), 0, s.count)
            try interpreter.charge(steps: (s.count - from) >> 4)
            return .number(Double(Self.find(needle, in: s, from: from) ?? -1))
        }
        method(p, "lastIndexOf") { interpreter, this, args in
            let s = Array(interpreter.stringValue(this).utf16)
            let needle = Array(interpreter.arg(args, 0).toDisplayString().utf16)
            // position: NaN (or absent) is +Infinity; then clamped to 0...length.
            let n = interpreter.arg(args, 1).toNumber()
            let last = JSNumber.clamped(n.isNaN ? .infinity : n, 0, s.count)
            try interpreter.charge(steps: s.count >> 4)
            var i = min(last, s.count - needle.count)
            while i >= 0 {
                if s[i..<(i + needle.count)].elementsEqual(needle) { return .number(Double(i)) }
                i -= 1
            }
            return .number(-1)
        }
        method(p, "includes") { interpreter, this, args in
            .bool(interpreter.stringValue(this).contains(interpreter.arg(args, 0).toDisplayString()))
        }
        method(p, "startsWith") { interpreter, this, args in
            .bool(interpreter.stringValue(this).hasPrefix(interpreter.arg(args, 0).toDisplayString()))
        }
        method(p, "endsWith") { interpreter, this, args in
            .bool(interpreter.stringValue(this).hasSuffix(interpreter.arg(args, 0).toDisplayString()))
        }
        method(p, "slice") { interpreter, this, args in
            let s = interpreter.stringValue(this)
            let (start, end) = interpreter.range(args, count: s.utf16.count)
            return .string(try interpreter.substring(s, start, end))
        }
        method(p, "substring") { interpreter, this, args in
            let s = interpreter.stringValue(this)
            let count = s.utf16.count
            func position(_ v: JSValue, _ fallback: Int) -> Int {
                v.isUndefinedValue ? fallback : JSNumber.clamped(v.toNumber(), 0, count)
            }
            var a = position(interpreter.arg(args, 0), 0)
            var b = position(interpreter.arg(args, 1), count)
            if a > b { swap(&a, &b) }
            return .string(try interpreter.substring(s, a, b))
        }
        method(p, "substr") { interpreter, this, args in
            let s = interpreter.stringValue(this)
            let count = s.utf16.count
            let (start, _) = interpreter.range([interpreter.arg(args, 0)], count: count)
            let length =
                interpreter.arg(args, 1).isUndefinedValue
                ? count - start : JSNumber.clamped(interpreter.integerArgument(args, 1), 0, count - start)
            return .string(try interpreter.substring(s, start, start + length))
        }
        for (name, upper) in [
            ("toLowerCase", false), ("toUpperCase", true), ("toLocaleLowerCase", false), ("toLocaleUpperCase", true),
        ] {
            method(p, name) { interpreter, this, _ in
                let s = interpreter.stringValue(this)
                try interpreter.chargeString(s.utf8.count * 3)
                return .string(upper ? s.uppercased() : s.lowercased())
            }
        }
        method(p, "trim") { interpreter, this, _ in
            .string(interpreter.stringValue(this).trimmingCharacters(in: .whitespacesAndNewlines))
        }
        method(p, "trimStart") { interpreter, this, _ in
            .string(String(interpreter.stringValue(this).drop { $0.isWhitespace }))
        }
        method(p, "trimEnd") { interpreter, this, _ in
            let s = interpreter.stringValue(this)
            return .string(String(s[..<(s.lastIndex { !$0.isWhitespace }.map { s.index(after: $0) } ?? s.startIndex)]))
        }
        method(p, "repeat") { interpreter, this, args in
            let text = interpreter.stringValue(this)
            let count = interpreter.integerArgument(args, 0)
            guard count >= 0, count.isFinite else {
                throw interpreter.rangeError("Invalid count value: \(JSValue.format(count))")
            }
            if text.isEmpty || count == 0 { return .string("") }
            let bytes = Double(text.utf8.count) * count
            guard bytes <= Double(Interpreter.maximumStringLength) else {
                throw interpreter.rangeError(
                    "Invalid string length: at most \(Interpreter.maximumStringLength) bytes here")
            }
            try interpreter.chargeString(Int(bytes))
            return .string(String(repeating: text, count: Int(count)))
        }
        for (name, atStart) in [("padStart", true), ("padEnd", false)] {
            method(p, name) { interpreter, this, args in
                let s = interpreter.stringValue(this)
                // ToLength of maxLength; the fill's UTF-16 units repeated, cut at the length.
                let width = interpreter.integerArgument(args, 0)
                let length = s.utf16.count
                let fill = interpreter.arg(args, 1).isUndefinedValue ? " " : interpreter.arg(args, 1).toDisplayString()
                guard width > Double(length), !fill.isEmpty else { return .string(s) }
                let fillUnits = Array(fill.utf16)
                let bytesPerUnit = (fill.utf8.count + fillUnits.count - 1) / fillUnits.count
                let padBytes = (width - Double(length)) * Double(bytesPerUnit)
                guard padBytes + Double(s.utf8.count) <= Double(Interpreter.maximumStringLength) else {
                    throw interpreter.rangeError(
                        "Invalid string length: at most \(Interpreter.maximumStringLength) bytes here")
                }
                let padLength = Int(width) - length
                try interpreter.chargeString(Int(padBytes) + s.utf8.count)
                var units: [UInt16] = []
                units.reserveCapacity(padLength)
                while units.count < padLength { units += fillUnits.prefix(padLength - units.count) }
                let pad = String(utf16CodeUnits: units, count: units.count)
                return .string(atStart ? pad + s : s + pad)
            }
        }
        method(p, "toString") { interpreter, this, _ in .string(interpreter.stringValue(this)) }
        method(p, "concat") { interpreter, this, args in
            var out = interpreter.stringValue(this)
            for a in args {
                let piece = try interpreter.toStringValue(a)
                try interpreter.chargeString(piece.utf8.count, total: out.utf8.count + piece.utf8.count)
                out += piece
            }
            return .string(out)
        }
        method(p, "split") { interpreter, this, args in
            let s = interpreter.stringValue(this)
            let separator = interpreter.arg(args, 0)
            // ToUint32 of the limit (undefined: 2^32 - 1).
            let limit =
                interpreter.arg(args, 1).isUndefinedValue ? Int(UInt32.max) : Int(interpreter.arg(args, 1).toUint32())
            if limit == 0 { return .object(interpreter.newArray([])) }
            var parts: [String]
            if separator.isUndefinedValue {
                parts = [s]
            } else if let regex = separator.object?.regex {
                parts = []
                let ns = s as NSString
                var last = 0
                try interpreter.eachMatch(regex.expression, in: s) { match in
                    if match.range.length == 0 && (match.range.location == 0 || match.range.location == ns.length) {
                        return true
                    }
                    let piece = ns.substring(with: NSRange(location: last, length: match.range.location - last))
                    try interpreter.charge(1, of: Interpreter.elementCost + piece.utf8.count)
                    parts.append(piece)
                    last = match.range.location + match.range.length
                    return parts.count < limit
                }
                parts.append(ns.substring(from: last))
            } else {
                let sep = separator.toDisplayString()
                // Counted before splitting: at most one part per byte, or per separator found.
                let pieces = sep.isEmpty ? s.utf8.count : Self.count(Array(sep.utf8), in: s) + 1
                try interpreter.charge(min(pieces, limit), of: Interpreter.elementCost + 16)
                try interpreter.charge(steps: s.utf8.count >> 4)
                parts = sep.isEmpty ? s.prefix(limit).map(String.init) : s.components(separatedBy: sep)
            }
            if parts.count > limit { parts = Array(parts.prefix(limit)) }
            return .object(interpreter.newArray(parts.map(JSValue.string)))
        }
        method(p, "replace") { interpreter, this, args in
            try interpreter.replace(
                interpreter.stringValue(this), interpreter.arg(args, 0), interpreter.arg(args, 1), all: false)
        }
        method(p, "replaceAll") { interpreter, this, args in
            try interpreter.replace(
                interpreter.stringValue(this), interpreter.arg(args, 0), interpreter.arg(args, 1), all: true)
        }
        method(p, "match") { interpreter, this, args in
            let s = interpreter.stringValue(this)
            var pattern = interpreter.arg(args, 0)
            if pattern.object?.regex == nil {
                pattern = try interpreter.makeRegex(
                    NSRegularExpression.escapedPattern(for: pattern.toDisplayString()), "")
            }
            let regex = pattern.object!.regex!
            let ns = s as NSString
            if regex.global {
                var found: [JSValue] = []
                try interpreter.eachMatch(regex.expression, in: s) { match in
                    let piece = ns.substring(with: match.range)
                    try interpreter.charge(1, of: Interpreter.elementCost + piece.utf8.count)
                    found.append(.string(piece))
                    return true
                }
                if found.isEmpty { return .null }
                return .object(interpreter.newArray(found))
            }
            return try interpreter.execResult(regex, s, from: 0)
        }
        method(p, "search") { interpreter, this, args in
            let s = interpreter.stringValue(this)
            guard let regex = interpreter.arg(args, 0).object?.regex else {
                return .number(
                    Double(
                        s.range(of: interpreter.arg(args, 0).toDisplayString()).map {
                            s.utf16.distance(from: s.startIndex, to: $0.lowerBound)
                        } ?? -1))
            }
            var found = -1
            try interpreter.eachMatch(regex.expression, in: s) { match in
                found = match.range.location
                return false
            }
            return .number(Double(found))
        }
        method(p, "localeCompare") { interpreter, this, args in
            .number(
                Double(
                    interpreter.compareStrings(
                        interpreter.stringValue(this), interpreter.arg(args, 0).toDisplayString())))
        }
    }

    static func find(_ needle: [UInt16], in haystack: [UInt16], from: Int) -> Int? {
        if needle.isEmpty { return min(from, haystack.count) }
        guard needle.count <= haystack.count else { return nil }
        var i = from
        while i + needle.count <= haystack.count {
            if haystack[i..<(i + needle.count)].elementsEqual(needle) { return i }
            i += 1
        }
        return nil
    }

    /// How many times `needle` (UTF-8 bytes, not empty) occurs in `text`, without overlaps.
    static func count(_ needle: [UInt8], in text: String) -> Int {
        guard !needle.isEmpty else { return 0 }
        var found = 0
        var text = text
        text.withUTF8 { bytes in
            var i = 0
            while i + needle.count <= bytes.count {
                if bytes[i] == needle[0], bytes[i..<(i + needle.count)].elementsEqual(needle) {
                    found += 1
                    i += needle.count
                } else {
                    i += 1
                }
            }
        }
        return found
    }

    /// A substring by UTF-16 offsets (`0 <= start <= end <= utf16.count`), counted against the budgets.
    func substring(_ s: String, _ start: Int, _ end: Int) throws -> String {
        guard start < end else { return "" }
        let units = s.utf16
        let from = units.index(units.startIndex, offsetBy: start)
        let to = units.index(from, offsetBy: end - start)
        try chargeString((end - start) * 3)
        if let text = String(units[from..<to]) { return text }
        return String(utf16CodeUnits: Array(units[from..<to]), count: end - start)  // a surrogate cut in half
    }

    /// Calls `body` with each match of `expression` in `s`, one at a time (nothing collected
    /// first), while it answers true; a step per match, and what `body` throws ends the search.
    func eachMatch(
        _ expression: NSRegularExpression, in s: String, from start: Int = 0,
        _ body: (NSTextCheckingResult) throws -> Bool
    ) throws {
        var failure: Error?
        let length = (s as NSString).length
        guard start <= length else { return }
        try charge(steps: (length - start) >> 6)
        withoutActuallyEscaping(body) { body in
            // Progress reports come during a long match (catastrophic backtracking): the time
            // budget ends it there.
            expression.enumerateMatches(
                in: s, options: .reportProgress, range: NSRange(location: start, length: length - start)
            ) { match, _, stop in
                guard let match else {
                    do { try self.checkTime() } catch {
                        failure = error
                        stop.pointee = true
                    }
                    return
                }
                do {
                    try self.tick()
                    if try !body(match) { stop.pointee = true }
                } catch {
                    failure = error
                    stop.pointee = true
                }
            }
        }
        if let failure { throw failure }
    }

    func replace(_ s: String, _ pattern: JSValue, _ replacement: JSValue, all: Bool) throws -> JSValue {
        let ns = s as NSString
        var out = ""
        var last = 0
        var every = all
        /// One match at `range` (UTF-16) with its groups: the text before it, then its replacement.
        func replaceMatch(_ range: NSRange, _ groups: [JSValue]) throws -> Bool {
            let before = ns.substring(with: NSRange(location: last, length: range.location - last))
            try chargeString(before.utf8.count, total: out.utf8.count + before.utf8.count)
            out += before
            let piece: String
            if replacement.object?.callable != nil {
                piece = try invoke(
                    replacement, this: .undefined, groups + [.number(Double(range.location)), .string(s)]
                )
                .toDisplayString()
            } else {
                piece = Self.expand(replacement.toDisplayString(), groups: groups)
            }
            try chargeString(piece.utf8.count, total: out.utf8.count + piece.utf8.count)
            out += piece
            last = range.location + range.length
            return every
        }
        if let regex = pattern.object?.regex {
            every = regex.global || all
            try eachMatch(regex.expression, in: s) { match in
                let groups: [JSValue] = (0..<match.numberOfRanges).map {
                    let r = match.range(at: $0)
                    return r.location == NSNotFound ? .undefined : .string(ns.substring(with: r))
                }
                return try replaceMatch(match.range, groups)
            }
        } else {
            // A string pattern is matched literally (an empty one matches before every unit).
            let needle = pattern.toDisplayString()
            let needleUnits = Array(needle.utf16)
            let units = Array(s.utf16)
            try charge(steps: units.count >> 4)
            var from = 0
            while let i = Self.find(needleUnits, in: units, from: from) {
                try tick()
                guard try replaceMatch(NSRange(location: i, length: needleUnits.count), [.string(needle)]) else {
                    break
                }
                from = i + max(1, needleUnits.count)
                if from > units.count { break }
            }
        }
        let rest = ns.substring(from: last)
        try chargeString(rest.utf8.count, total: out.utf8.count + rest.utf8.count)
        out += rest
        return .string(out)
    }

    /// `$&`, `$1`…`$99` and `$$` in a replacement string.
    static func expand(_ template: String, groups: [JSValue]) -> String {
        var out = ""
        var chars = Array(template)[...]
        while let c = chars.popFirst() {
            guard c == "$", let next = chars.first else {
                out.append(c)
                continue
            }
            if next == "$" {
                out.append("$")
                chars.removeFirst()
            } else if next == "&" {
                out += groups.first?.toDisplayString() ?? ""
                chars.removeFirst()
            } else if let d = next.wholeNumberValue {
                chars.removeFirst()
                var index = d
                if let d2 = chars.first?.wholeNumberValue, index * 10 + d2 < groups.count {
                    index = index * 10 + d2
                    chars.removeFirst()
                }
                if index > 0, index < groups.count {
                    out += groups[index].isUndefinedValue ? "" : groups[index].toDisplayString()
                } else {
                    out += "$" + String(d)
                }
            } else {
                out.append(c)
            }
        }
        return out
    }

    // MARK: - Numbers and Math

    private func installNumberAndMath() {
        let number = makeFunction("Number") { interpreter, _, args in
            .number(args.isEmpty ? 0 : interpreter.arg(args, 0).toNumber())
        }
        number.properties["prototype"] = .object(numberPrototype)
        number.properties["MAX_SAFE_INTEGER"] = .number(9_007_199_254_740_991)
        number.properties["MIN_SAFE_INTEGER"] = .number(-9_007_199_254_740_991)
        number.properties["EPSILON"] = .number(Double.ulpOfOne)
        number.properties["MAX_VALUE"] = .number(Double.greatestFiniteMagnitude)
        number.properties["POSITIVE_INFINITY"] = .number(.infinity)
        number.properties["NEGATIVE_INFINITY"] = .number(-.infinity)
        method(number, "isInteger") { interpreter, _, args in
            guard case .number(let n) = interpreter.arg(args, 0) else { return .bool(false) }
            return .bool(n.isFinite && n.rounded() == n)
        }
        method(number, "isFinite") { interpreter, _, args in
            guard case .number(let n) = interpreter.arg(args, 0) else { return .bool(false) }
            return .bool(n.isFinite)
        }
        method(number, "isNaN") { interpreter, _, args in
            guard case .number(let n) = interpreter.arg(args, 0) else { return .bool(false) }
            return .bool(n.isNaN)
        }
        define("Number", .object(number))
        method(numberPrototype, "toFixed") { interpreter, this, args in
            let digits = interpreter.integerArgument(args, 0)
            guard digits >= 0, digits <= 100 else {
                throw interpreter.rangeError("toFixed() digits argument must be between 0 and 100")
            }
            let n = this.toNumber()
            guard n.isFinite, abs(n) < 1e21 else { return .string(JSValue.format(n)) }
            return .string(String(format: "%.\(Int(digits))f", n))
        }
        method(numberPrototype, "toPrecision") { interpreter, this, args in
            let n = this.toNumber()
            if interpreter.arg(args, 0).isUndefinedValue || !n.isFinite { return .string(JSValue.format(n)) }
            let precision = interpreter.integerArgument(args, 0)
            guard precision >= 1, precision <= 100 else {
                throw interpreter.rangeError("toPrecision() argument must be between 1 and 100")
            }
            let p = Int(precision)
            if n == 0 { return .string(p == 1 ? "0" : "0." + String(repeating: "0", count: p - 1)) }
            let (mantissa, exponent) = Self.exponential(n, digits: p - 1)
            if exponent < -6 || exponent >= p {
                return .string(mantissa + "e" + (exponent >= 0 ? "+" : "-") + String(abs(exponent)))
            }
            return .string(String(format: "%.\(max(0, p - 1 - exponent))f", n))
        }
        method(numberPrototype, "toExponential") { interpreter, this, args in
            let n = this.toNumber()
            guard n.isFinite else { return .string(JSValue.format(n)) }
            let digits = interpreter.integerArgument(args, 0)
            guard digits >= 0, digits <= 100 else {
                throw interpreter.rangeError("toExponential() argument must be between 0 and 100")
            }
            var (mantissa, exponent) = Self.exponential(n, digits: Int(digits))
            if interpreter.arg(args, 0).isUndefinedValue {
                // As many digits as the number needs.
                (mantissa, exponent) = Self.exponential(n, digits: 16)
                if mantissa.contains(".") {
                    while mantissa.hasSuffix("0") { mantissa.removeLast() }
                    if mantissa.hasSuffix(".") { mantissa.removeLast() }
                }
            }
            return .string(mantissa + "e" + (exponent >= 0 ? "+" : "-") + String(abs(exponent)))
        }
        method(numberPrototype, "toString") { interpreter, this, args in
            let radix = interpreter.arg(args, 0).isUndefinedValue ? 10 : interpreter.integerArgument(args, 0)
            guard radix >= 2, radix <= 36 else {
                throw interpreter.rangeError("toString() radix must be between 2 and 36")
            }
            let n = this.toNumber()
            if radix != 10, n.isFinite, n == n.rounded(), abs(n) < 9e15 {
                return .string(String(Int64(n), radix: Int(radix)))
            }
            return .string(JSValue.format(n))
        }
        method(numberPrototype, "valueOf") { _, this, _ in this }
        method(booleanPrototype, "toString") { _, this, _ in .string(this.toDisplayString()) }

        let math = newObject()
        math.className = "Math"
        for (name, value) in [
            ("PI", Double.pi), ("E", M_E), ("LN2", M_LN2), ("LN10", M_LN10), ("SQRT2", 2.0.squareRoot()),
            ("LOG2E", M_LOG2E), ("LOG10E", M_LOG10E),
        ] {
            math.properties[name] = .number(value)
        }
        let unaryFunctions: [(String, (Double) -> Double)] = [
            ("floor", { $0.rounded(.down) }), ("ceil", { $0.rounded(.up) }), ("abs", { abs($0) }),
            ("sqrt", { $0.squareRoot() }), ("round", Self.round),
            ("trunc", { $0.rounded(.towardZero) }),
            ("sign", { $0 > 0 ? 1 : $0 < 0 ? -1 : $0 }), ("log", { Foundation.log($0) }),
            ("exp", { Foundation.exp($0) }),
            ("log10", { Foundation.log10($0) }), ("log2", { Foundation.log2($0) }), ("sin", { Foundation.sin($0) }),
            ("cos", { Foundation.cos($0) }), ("tan", { Foundation.tan($0) }), ("atan", { Foundation.atan($0) }),
            ("asin", { Foundation.asin($0) }), ("acos", { Foundation.acos($0) }), ("cbrt", { Foundation.cbrt($0) }),
        ]
        for (name, f) in unaryFunctions {
            method(math, name) { interpreter, _, args in .number(f(interpreter.arg(args, 0).toNumber())) }
        }
        method(math, "atan2") { interpreter, _, args in
            .number(Foundation.atan2(interpreter.arg(args, 0).toNumber(), interpreter.arg(args, 1).toNumber()))
        }
        method(math, "pow") { interpreter, _, args in
            .number(Foundation.pow(interpreter.arg(args, 0).toNumber(), interpreter.arg(args, 1).toNumber()))
        }
        method(math, "max") { _, _, args in
            let values = args.map { $0.toNumber() }
            if values.contains(where: \.isNaN) { return .number(.nan) }
            return .number(values.max() ?? -.infinity)
        }
        method(math, "min") { _, _, args in
            let values = args.map { $0.toNumber() }
            if values.contains(where: \.isNaN) { return .number(.nan) }
            return .number(values.min() ?? .infinity)
        }
        method(math, "random") { _, _, _ in .number(Double.random(in: 0..<1)) }
        define("Math", .object(math))
    }

    // MARK: - JSON

    private func installJSON() {
        let json = newObject()
        json.className = "JSON"
        method(json, "parse") { interpreter, _, args in
            let text = interpreter.arg(args, 0).toDisplayString()
            try interpreter.charge(text.utf8.count, of: 8)  // what the parsed values may take
            do {
                return interpreter.fromJSON(try JSON.parse(Data(text.utf8)))
            } catch {
                throw JSThrown(value: interpreter.makeError("SyntaxError", "JSON.parse: \(error)"))
            }
        }
        method(json, "stringify") { interpreter, _, args in
            // toJSON counts what it converts: about the compact text's size.
            let before = interpreter.allocated
            guard let value = try interpreter.toJSON(interpreter.arg(args, 0)) else { return .undefined }
            try interpreter.chargeString(0, total: interpreter.allocated - before)
            let indentArgument = interpreter.arg(args, 2)
            var indent = ""
            if case .number(let n) = indentArgument {
                indent = String(repeating: " ", count: JSNumber.clamped(n, 0, 10))
            } else if case .string(let s) = indentArgument {
                indent = String(s.prefix(10))
            }
            if indent.isEmpty { return .string(value.serialized) }
            var out = ""
            try interpreter.pretty(value, indent: indent, level: 0, into: &out)
            return .string(out)
        }
        define("JSON", .object(json))
    }

    /// `JSON.stringify` with an indent, counted against the budgets as the text grows.
    func pretty(_ value: JSON, indent: String, level: Int, into out: inout String) throws {
        func append(_ text: String) throws {
            try chargeString(text.utf8.count, total: out.utf8.count + text.utf8.count)
            out += text
        }
        let pad = String(repeating: indent, count: level + 1)
        switch value {
        case .array(let items) where !items.isEmpty:
            try append("[\n")
            for (i, item) in items.enumerated() {
                try append((i > 0 ? ",\n" : "") + pad)
                try pretty(item, indent: indent, level: level + 1, into: &out)
            }
            try append("\n" + String(repeating: indent, count: level) + "]")
        case .object(let members) where !members.isEmpty:
            try append("{\n")
            for (i, (key, member)) in members.enumerated() {
                try append((i > 0 ? ",\n" : "") + pad + JSON.string(key).serialized + ": ")
                try pretty(member, indent: indent, level: level + 1, into: &out)
            }
            try append("\n" + String(repeating: indent, count: level) + "}")
        default:
            try append(value.serialized)
        }
    }

    /// `Math.round`: half rounds up (toward +Infinity), -0 and -0.5...-0 stay -0.
    static func round(_ x: Double) -> Double {
        guard x.isFinite else { return x }
        let floor = x.rounded(.down)
        let r = x - floor >= 0.5 ? floor + 1 : floor
        return r == 0 && x.sign == .minus ? -0.0 : r
    }

    /// A finite, non-zero number as `d.ddd` (`digits` after the point) and its decimal exponent.
    static func exponential(_ n: Double, digits: Int) -> (String, Int) {
        let text = String(format: "%.\(digits)e", n)
        guard let e = text.firstIndex(of: "e") else { return (text, 0) }
        return (String(text[..<e]), Int(text[text.index(after: e)...]) ?? 0)
    }

    /// A JSON value as a JavaScript value (objects keep their key order).
    public func fromJSON(_ json: JSON) -> JSValue {
        switch json {
        case .null: return .null
        case .bool(let b): return .bool(b)
        case .int(let i): return .number(Double(i))
        case .double(let d): return .number(d)
        case .string(let s): return .string(s)
        case .array(let items): return .object(newArray(items.map(fromJSON)))
        case .object(let members):
            let object = newObject()
            for (key, value) in members { object.set(key, fromJSON(value)) }
            return .object(object)
        }
    }

    /// A JavaScript value as JSON, as `JSON.stringify` sees it (nil for `undefined` and functions).
    public func toJSON(_ value: JSValue, depth: Int = 0) throws -> JSON? {
        if depth > 200 { throw typeError("Converting circular structure to JSON") }
        try charge(steps: 0)
        note(bytes: 8)
        switch value {
        case .undefined: return nil
        case .null: return .null
        case .bool(let b): return .bool(b)
        case .number(let n):
            guard n.isFinite else { return .null }
            if n == n.rounded(), abs(n) < 9.007_199_254_740_992e15 { return .int(Int64(n)) }
            return .double(n)
        case .string(let s):
            try charge(s.utf8.count + 2)
            return .string(s)
        case .object(let o):
            if o.callable != nil { return nil }
            if let date = o.date { return .string(JSDate.iso(date)) }
            if case .object(let f) = o.get("toJSON"), f.callable != nil {
                return try toJSON(try invoke(.object(f), this: value, []), depth: depth + 1)
            }
            if let array = o.array { return .array(try array.map { try toJSON($0, depth: depth + 1) ?? .null }) }
            var members: [(String, JSON)] = []
            try chargeKeys(o, each: 32)
            for key in o.ownKeys {
                if let v = try toJSON(o.get(key), depth: depth + 1) { members.append((key, v)) }
            }
            return .object(members)
        }
    }

    // MARK: - Date

    private func installDate() {
        let date = makeFunction("Date") { interpreter, this, args in
            var time = Date().timeIntervalSince1970 * 1000
            if args.count == 1 {
                if case .string(let s) = args[0] {
                    time = JSDate.parse(s) ?? .nan
                } else {
                    time = JSDate.timeClip(args[0].object?.date ?? args[0].toNumber())
                }
            } else if args.count > 1 {
                time = JSDate.utc(args.map { $0.toNumber() })
            }
            guard interpreter.isConstructCall(this, "Date") else { return .string(JSDate.iso(time)) }
            interpreter.note(bytes: Interpreter.objectCost)
            let object = JSObject(prototype: interpreter.datePrototype, className: "Date")
            object.date = time
            return .object(object)
        }
        date.properties["prototype"] = .object(datePrototype)
        method(date, "UTC") { _, _, args in .number(JSDate.utc(args.map { $0.toNumber() })) }
        method(date, "now") { _, _, _ in .number((Date().timeIntervalSince1970 * 1000).rounded(.down)) }
        method(date, "parse") { interpreter, _, args in
            .number(JSDate.parse(interpreter.arg(args, 0).toDisplayString()) ?? .nan)
        }
        define("Date", .object(date))
        let p = datePrototype
        func time(_ this: JSValue) -> Double { this.object?.date ?? .nan }
        method(p, "getTime") { _, this, _ in .number(time(this)) }
        method(p, "valueOf") { _, this, _ in .number(time(this)) }
        method(p, "toISOString") { _, this, _ in .string(JSDate.iso(time(this))) }
        method(p, "toJSON") { _, this, _ in .string(JSDate.iso(time(this))) }
        method(p, "toString") { _, this, _ in .string(JSDate.iso(time(this))) }
        let parts: [(String, Calendar.Component, Int)] = [
            ("FullYear", .year, 0), ("Month", .month, -1), ("Date", .day, 0), ("Hours", .hour, 0),
            ("Minutes", .minute, 0), ("Seconds", .second, 0),
        ]
        for (name, component, offset) in parts {
            let read: (JSValue) -> JSValue = { this in
                let t = time(this)
                guard t.isFinite else { return .number(.nan) }
                var calendar = Calendar(identifier: .gregorian)
                calendar.timeZone = TimeZone(identifier: "UTC")!
                return .number(
                    Double(calendar.component(component, from: Date(timeIntervalSince1970: t / 1000)) + offset))
            }
            method(p, "get" + name) { _, this, _ in read(this) }
            method(p, "getUTC" + name) { _, this, _ in read(this) }
        }
        method(p, "getDay") { _, this, _ in
            let t = time(this)
            guard t.isFinite else { return .number(.nan) }
            var calendar = Calendar(identifier: .gregorian)
            calendar.timeZone = TimeZone(identifier: "UTC")!
            return .number(Double(calendar.component(.weekday, from: Date(timeIntervalSince1970: t / 1000)) - 1))
        }
        method(p, "getMilliseconds") { _, this, _ in
            let t = time(this)
            return .number(
                t.isFinite
                    ? (t.truncatingRemainder(dividingBy: 1000) + 1000).truncatingRemainder(dividingBy: 1000) : .nan)
        }
        method(p, "getTimezoneOffset") { _, _, _ in .number(0) }
    }

    // MARK: - RegExp and errors

    private func installRegExp() {
        let regexp = makeFunction("RegExp") { interpreter, _, args in
            if let existing = interpreter.arg(args, 0).object?.regex {
                return try interpreter.makeRegex(
                    existing.source, args.count > 1 ? interpreter.arg(args, 1).toDisplayString() : existing.flags)
            }
            let flags = interpreter.arg(args, 1).isUndefinedValue ? "" : interpreter.arg(args, 1).toDisplayString()
            return try interpreter.makeRegex(interpreter.arg(args, 0).toDisplayString(), flags)
        }
        regexp.properties["prototype"] = .object(regexPrototype)
        define("RegExp", .object(regexp))
        method(regexPrototype, "test") { interpreter, this, args in
            guard let object = this.object, let regex = object.regex else {
                throw interpreter.typeError("not a RegExp")
            }
            let s = interpreter.arg(args, 0).toDisplayString()
            let from = regex.global ? JSNumber.clamped(object.get("lastIndex").toNumber(), 0, Int.max) : 0
            let result = try interpreter.execResult(regex, s, from: from)
            if regex.global {
                let end =
                    result.object.map {
                        JSNumber.clamped($0.get("index").toNumber(), 0, Int(Int32.max))
                            + ($0.array?.first?.toDisplayString().utf16.count ?? 0)
                    } ?? 0
                object.set("lastIndex", .number(Double(end)))
            }
            return .bool(!result.isNullish)
        }
        method(regexPrototype, "exec") { interpreter, this, args in
            guard let object = this.object, let regex = object.regex else {
                throw interpreter.typeError("not a RegExp")
            }
            let s = interpreter.arg(args, 0).toDisplayString()
            let from = regex.global ? JSNumber.clamped(object.get("lastIndex").toNumber(), 0, Int.max) : 0
            let result = try interpreter.execResult(regex, s, from: from)
            if regex.global {
                let end =
                    result.object.map {
                        JSNumber.clamped($0.get("index").toNumber(), 0, Int(Int32.max))
                            + ($0.array?.first?.toDisplayString().utf16.count ?? 0)
                    } ?? 0
                object.set("lastIndex", .number(Double(end)))
            }
            return result
        }
        method(regexPrototype, "toString") { _, this, _ in .string(this.toDisplayString()) }
    }

    /// One match as `exec` returns it (an array of the groups with `index` and `input`), or null.
    func execResult(_ regex: JSRegex, _ s: String, from: Int) throws -> JSValue {
        let ns = s as NSString
        var first: NSTextCheckingResult?
        try eachMatch(regex.expression, in: s, from: from) { match in
            first = match
            return false
        }
        guard let match = first else { return .null }
        let groups: [JSValue] = (0..<match.numberOfRanges).map {
            let r = match.range(at: $0)
            return r.location == NSNotFound ? .undefined : .string(ns.substring(with: r))
        }
        let array = newArray(groups)
        array.set("index", .number(Double(match.range.location)))
        array.set("input", .string(s))
        return .object(array)
    }

    private func installErrors() {
        errorPrototype.set("name", .string("Error"))
        errorPrototype.set("message", .string(""))
        method(errorPrototype, "toString") { _, this, _ in .string(this.toDisplayString()) }
        for name in ["Error", "TypeError", "RangeError", "SyntaxError", "ReferenceError"] {
            let prototype = name == "Error" ? errorPrototype : JSObject(prototype: errorPrototype)
            prototype.set("name", .string(name))
            let constructor = makeFunction(name) { interpreter, _, args in
                interpreter.note(bytes: Interpreter.objectCost)
                let error = JSObject(prototype: prototype, className: "Error")
                if !interpreter.arg(args, 0).isUndefinedValue {
                    error.set("message", .string(interpreter.arg(args, 0).toDisplayString()))
                }
                return .object(error)
            }
            constructor.properties["prototype"] = .object(prototype)
            prototype.properties["constructor"] = .object(constructor)
            define(name, .object(constructor))
        }
    }
}

/// Dates as JavaScript writes and reads them.
enum JSDate {
    static func iso(_ time: Double) -> String {
        guard time.isFinite else { return "Invalid Date" }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: Date(timeIntervalSince1970: time / 1000))
    }

    /// `TimeClip`: NaN outside ±8.64e15 ms (±100,000,000 days), else an integer.
    static func timeClip(_ time: Double) -> Double {
        guard time.isFinite, abs(time) <= 8.64e15 else { return .nan }
        return JSNumber.integerOrInfinity(time) + 0  // -0 is +0
    }

    /// `Date.UTC(year, month[, day, hours, minutes, seconds, ms])` and the constructor's
    /// components, as ECMAScript's MakeDay and MakeTime compute them (in doubles: no component,
    /// however large, NaN or infinite, traps; the result is clipped).
    static func utc(_ components: [Double]) -> Double {
        func part(_ i: Int, _ fallback: Double) -> Double { i < components.count ? components[i] : fallback }
        let parts = [part(0, .nan), part(1, 0), part(2, 1), part(3, 0), part(4, 0), part(5, 0), part(6, 0)]
        guard parts.allSatisfy(\.isFinite) else { return .nan }
        let i = parts.map { JSNumber.integerOrInfinity($0) }
        var year = i[0]
        if (0...99).contains(year) { year += 1900 }
        // MakeDay: days from 1970-01-01 to the first of the month, then the day.
        let y = year + (i[1] / 12).rounded(.down)
        let m = i[1] - (i[1] / 12).rounded(.down) * 12 + 1  // 1...12
        guard abs(y) < 1e9 else { return .nan }
        let yy = m <= 2 ? y - 1 : y
        let era = (yy / 400).rounded(.down)
        let yoe = yy - era * 400
        let mp = m > 2 ? m - 3 : m + 9
        let doy = ((153 * mp + 2) / 5).rounded(.down)
        let doe = yoe * 365 + (yoe / 4).rounded(.down) - (yoe / 100).rounded(.down) + doy
        let day = era * 146_097 + doe - 719_468 + i[2] - 1
        let time = i[3] * 3_600_000 + i[4] * 60_000 + i[5] * 1_000 + i[6]
        return timeClip(day * 86_400_000 + time)
    }

    static func parse(_ text: String) -> Double? {
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = TimeZone(identifier: "UTC")
        for options: ISO8601DateFormatter.Options in [
            [.withInternetDateTime, .withFractionalSeconds], [.withInternetDateTime], [.withFullDate],
        ] {
            formatter.formatOptions = options
            if let date = formatter.date(from: text) { return timeClip((date.timeIntervalSince1970 * 1000).rounded()) }
        }
        // "YYYY-MM-DDTHH:MM:SS" without a zone is read as UTC here.
        if text.count == 19, let date = formatter.date(from: text + "Z") {
            return timeClip(date.timeIntervalSince1970 * 1000)
        }
        return nil
    }
}
