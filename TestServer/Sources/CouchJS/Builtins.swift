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
            var text = interpreter.arg(args, 0).toDisplayString().trimmingCharacters(in: .whitespaces)
            var radix = Int(interpreter.arg(args, 1).toNumber().isFinite ? interpreter.arg(args, 1).toNumber() : 10)
            if radix == 0 { radix = 10 }
            var negative = false
            if text.hasPrefix("-") || text.hasPrefix("+") {
                negative = text.hasPrefix("-")
                text.removeFirst()
            }
            if radix == 16 || args.count < 2, text.lowercased().hasPrefix("0x") {
                text.removeFirst(2)
                radix = 16
            }
            let digits = text.prefix { Int(String($0), radix: radix) != nil }
            guard !digits.isEmpty, let value = Double(exactly: Int64(digits, radix: radix) ?? 0) else {
                return .number(.nan)
            }
            return .number(negative ? -value : value)
        }
        defineFunction("Boolean") { interpreter, _, args in .bool(interpreter.arg(args, 0).truthy) }
        defineFunction("String") { interpreter, _, args in
            args.isEmpty ? .string("") : .string(try interpreter.toStringValue(args[0]))
        }
        if let string = global.lookup("String")?.object {
            method(string, "fromCharCode") { _, _, args in
                .string(
                    String(
                        utf16CodeUnits: args.map { UInt16(truncatingIfNeeded: Int($0.toNumber())) }, count: args.count))
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
            return .object(interpreter.newArray(o.ownKeys.map(JSValue.string)))
        }
        method(object, "values") { interpreter, _, args in
            guard let o = interpreter.arg(args, 0).object else { return .object(interpreter.newArray([])) }
            return .object(interpreter.newArray(o.ownKeys.map { o.get($0) }))
        }
        method(object, "entries") { interpreter, _, args in
            guard let o = interpreter.arg(args, 0).object else { return .object(interpreter.newArray([])) }
            return .object(
                interpreter.newArray(o.ownKeys.map { .object(interpreter.newArray([.string($0), o.get($0)])) }))
        }
        method(object, "assign") { interpreter, _, args in
            guard let target = interpreter.arg(args, 0).object else { return interpreter.arg(args, 0) }
            for source in args.dropFirst() {
                if let s = source.object { for key in s.ownKeys { target.set(key, s.get(key)) } }
            }
            return .object(target)
        }
        method(object, "freeze") { interpreter, _, args in interpreter.arg(args, 0) }
        method(object, "create") { interpreter, _, args in
            .object(JSObject(prototype: interpreter.arg(args, 0).object))
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
            return try interpreter.invoke(this, this: interpreter.arg(args, 0), list)
        }
        method(functionPrototype, "bind") { interpreter, this, args in
            let bound = interpreter.arg(args, 0)
            let preset = Array(args.dropFirst())
            return .object(
                interpreter.makeFunction("bound") { interpreter, _, more in
                    try interpreter.invoke(this, this: bound, preset + more)
                })
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
                // Bounded memory: no array of more than a million holes at once.
                guard n >= 0, n <= Double(Interpreter.maximumArrayLength), n == n.rounded() else {
                    throw JSThrown(value: interpreter.makeError("RangeError", "Invalid array length"))
                }
                return .object(interpreter.newArray(Array(repeating: .undefined, count: Int(n))))
            }
            return .object(interpreter.newArray(args))
        }
        array.properties["prototype"] = .object(arrayPrototype)
        method(array, "isArray") { interpreter, _, args in .bool(interpreter.arg(args, 0).object?.array != nil) }
        method(array, "from") { interpreter, _, args in
            let source = interpreter.arg(args, 0)
            var items = (try? interpreter.iterate(source)) ?? []
            if items.isEmpty, let o = source.object, case .number(let n) = o.get("length") {
                items = (0..<max(0, Int(n))).map { o.get(String($0)) }
            }
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
            o.array! += args
            return .number(Double(o.array!.count))
        }
        method(p, "pop") { interpreter, this, _ in
            let o = try interpreter.elements(this)
            return o.array!.popLast() ?? .undefined
        }
        method(p, "shift") { interpreter, this, _ in
            let o = try interpreter.elements(this)
            return o.array!.isEmpty ? .undefined : o.array!.removeFirst()
        }
        method(p, "unshift") { interpreter, this, args in
            let o = try interpreter.elements(this)
            o.array!.insert(contentsOf: args, at: 0)
            return .number(Double(o.array!.count))
        }
        method(p, "slice") { interpreter, this, args in
            let items = try interpreter.elements(this).array!
            let (start, end) = interpreter.range(args, count: items.count)
            return .object(interpreter.newArray(start < end ? Array(items[start..<end]) : []))
        }
        method(p, "splice") { interpreter, this, args in
            let o = try interpreter.elements(this)
            let count = o.array!.count
            let (start, _) = interpreter.range([interpreter.arg(args, 0)], count: count)
            let deleteCount =
                args.count < 2 ? count - start : max(0, min(Int(interpreter.arg(args, 1).toNumber()), count - start))
            let removed = Array(o.array![start..<(start + deleteCount)])
            o.array!.replaceSubrange(start..<(start + deleteCount), with: args.dropFirst(2))
            return .object(interpreter.newArray(removed))
        }
        method(p, "concat") { interpreter, this, args in
            var items = try interpreter.elements(this).array!
            for a in args {
                if let other = a.object?.array { items += other } else { items.append(a) }
            }
            return .object(interpreter.newArray(items))
        }
        method(p, "join") { interpreter, this, args in
            let items = try interpreter.elements(this).array!
            let separator = args.first.map { $0.isUndefinedValue ? "," : $0.toDisplayString() } ?? ","
            return .string(
                try items.map { $0.isNullish ? "" : try interpreter.toStringValue($0) }.joined(separator: separator))
        }
        method(p, "toString") { interpreter, this, _ in
            .string(
                try interpreter.elements(this).array!.map { $0.isNullish ? "" : $0.toDisplayString() }.joined(
                    separator: ","))
        }
        method(p, "reverse") { interpreter, this, _ in
            let o = try interpreter.elements(this)
            o.array!.reverse()
            return this
        }
        method(p, "indexOf") { interpreter, this, args in
            let items = try interpreter.elements(this).array!
            let target = interpreter.arg(args, 0)
            return .number(Double(items.firstIndex { interpreter.strictEquals($0, target) } ?? -1))
        }
        method(p, "lastIndexOf") { interpreter, this, args in
            let items = try interpreter.elements(this).array!
            let target = interpreter.arg(args, 0)
            return .number(Double(items.lastIndex { interpreter.strictEquals($0, target) } ?? -1))
        }
        method(p, "includes") { interpreter, this, args in
            let items = try interpreter.elements(this).array!
            let target = interpreter.arg(args, 0)
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
        func clamp(_ v: JSValue, _ fallback: Int) -> Int {
            if v.isUndefinedValue { return fallback }
            let n = v.toNumber()
            if n.isNaN { return 0 }
            let i = n < 0 ? max(0, count + Int(max(n, -1e15))) : min(count, Int(min(n, 1e15)))
            return i
        }
        return (clamp(arg(args, 0), 0), clamp(arg(args, 1), count))
    }

    // MARK: - String

    private func stringValue(_ this: JSValue) -> String {
        if case .string(let s) = this { return s }
        return this.toDisplayString()
    }

    private func installString() {
        let p = stringPrototype
        method(p, "charAt") { interpreter, this, args in
            let units = Array(interpreter.stringValue(this).utf16)
            let i = Int(interpreter.arg(args, 0).toNumber().isNaN ? 0 : interpreter.arg(args, 0).toNumber())
            return .string(i >= 0 && i < units.count ? String(utf16CodeUnits: [units[i]], count: 1) : "")
        }
        method(p, "charCodeAt") { interpreter, this, args in
            let units = Array(interpreter.stringValue(this).utf16)
            let i = Int(interpreter.arg(args, 0).toNumber().isNaN ? 0 : interpreter.arg(args, 0).toNumber())
            return .number(i >= 0 && i < units.count ? Double(units[i]) : .nan)
        }
        method(p, "indexOf") { interpreter, this, args in
            let s = Array(interpreter.stringValue(this).utf16)
            let needle = Array(interpreter.arg(args, 0).toDisplayString().utf16)
            let from = max(0, Int(interpreter.arg(args, 1).toNumber().isNaN ? 0 : interpreter.arg(args, 1).toNumber()))
            return .number(Double(Self.find(needle, in: s, from: from) ?? -1))
        }
        method(p, "lastIndexOf") { interpreter, this, args in
            let s = Array(interpreter.stringValue(this).utf16)
            let needle = Array(interpreter.arg(args, 0).toDisplayString().utf16)
            var found = -1
            var from = 0
            while let i = Self.find(needle, in: s, from: from) {
                found = i
                from = i + 1
            }
            return .number(Double(found))
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
            let units = Array(interpreter.stringValue(this).utf16)
            let (start, end) = interpreter.range(args, count: units.count)
            return .string(start < end ? String(utf16CodeUnits: Array(units[start..<end]), count: end - start) : "")
        }
        method(p, "substring") { interpreter, this, args in
            let units = Array(interpreter.stringValue(this).utf16)
            func clamp(_ v: JSValue, _ fallback: Int) -> Int {
                if v.isUndefinedValue { return fallback }
                let n = v.toNumber()
                return n.isNaN ? 0 : max(0, min(units.count, Int(max(-1, min(n, 1e15)))))
            }
            var a = clamp(interpreter.arg(args, 0), 0)
            var b = clamp(interpreter.arg(args, 1), units.count)
            if a > b { swap(&a, &b) }
            return .string(String(utf16CodeUnits: Array(units[a..<b]), count: b - a))
        }
        method(p, "substr") { interpreter, this, args in
            let units = Array(interpreter.stringValue(this).utf16)
            let (start, _) = interpreter.range([interpreter.arg(args, 0)], count: units.count)
            let length =
                interpreter.arg(args, 1).isUndefinedValue
                ? units.count : Int(max(0, interpreter.arg(args, 1).toNumber()))
            let end = min(units.count, start + length)
            return .string(start < end ? String(utf16CodeUnits: Array(units[start..<end]), count: end - start) : "")
        }
        method(p, "toLowerCase") { interpreter, this, _ in .string(interpreter.stringValue(this).lowercased()) }
        method(p, "toUpperCase") { interpreter, this, _ in .string(interpreter.stringValue(this).uppercased()) }
        method(p, "toLocaleLowerCase") { interpreter, this, _ in .string(interpreter.stringValue(this).lowercased()) }
        method(p, "toLocaleUpperCase") { interpreter, this, _ in .string(interpreter.stringValue(this).uppercased()) }
        method(p, "trim") { interpreter, this, _ in
            .string(interpreter.stringValue(this).trimmingCharacters(in: .whitespacesAndNewlines))
        }
        method(p, "trimStart") { interpreter, this, _ in
            .string(String(interpreter.stringValue(this).drop { $0.isWhitespace }))
        }
        method(p, "trimEnd") { interpreter, this, _ in
            var s = interpreter.stringValue(this)
            while s.last?.isWhitespace == true { s.removeLast() }
            return .string(s)
        }
        method(p, "repeat") { interpreter, this, args in
            let text = interpreter.stringValue(this)
            let count = interpreter.arg(args, 0).toNumber()
            guard count >= 0, count.isFinite, Double(text.utf8.count) * count <= Double(Interpreter.maximumStringLength)
            else { throw JSThrown(value: interpreter.makeError("RangeError", "Invalid string length")) }
            return .string(String(repeating: text, count: Int(count)))
        }
        method(p, "padStart") { interpreter, this, args in
            let s = interpreter.stringValue(this)
            let width = Int(interpreter.arg(args, 0).toNumber())
            let fill = args.count > 1 ? interpreter.arg(args, 1).toDisplayString() : " "
            guard s.count < width, !fill.isEmpty else { return .string(s) }
            var pad = ""
            while pad.count < width - s.count { pad += fill }
            return .string(String(pad.prefix(width - s.count)) + s)
        }
        method(p, "toString") { interpreter, this, _ in .string(interpreter.stringValue(this)) }
        method(p, "concat") { interpreter, this, args in
            .string(interpreter.stringValue(this) + args.map { $0.toDisplayString() }.joined())
        }
        method(p, "split") { interpreter, this, args in
            let s = interpreter.stringValue(this)
            let separator = interpreter.arg(args, 0)
            var parts: [String]
            if separator.isUndefinedValue {
                parts = [s]
            } else if let regex = separator.object?.regex {
                parts = []
                let ns = s as NSString
                var last = 0
                for match in regex.expression.matches(in: s, range: NSRange(location: 0, length: ns.length))
                where !(match.range.length == 0 && (match.range.location == 0 || match.range.location == ns.length)) {
                    parts.append(ns.substring(with: NSRange(location: last, length: match.range.location - last)))
                    last = match.range.location + match.range.length
                }
                parts.append(ns.substring(from: last))
            } else {
                let sep = separator.toDisplayString()
                parts = sep.isEmpty ? s.map(String.init) : s.components(separatedBy: sep)
            }
            if args.count > 1, !args[1].isUndefinedValue {
                parts = Array(parts.prefix(max(0, Int(args[1].toNumber()))))
            }
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
                let matches = regex.expression.matches(in: s, range: NSRange(location: 0, length: ns.length))
                if matches.isEmpty { return .null }
                return .object(interpreter.newArray(matches.map { .string(ns.substring(with: $0.range)) }))
            }
            return interpreter.execResult(regex, s, from: 0)
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
            let ns = s as NSString
            return .number(
                Double(
                    regex.expression.firstMatch(in: s, range: NSRange(location: 0, length: ns.length))?.range.location
                        ?? -1))
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
            if Array(haystack[i..<(i + needle.count)]) == needle { return i }
            i += 1
        }
        return nil
    }

    func replace(_ s: String, _ pattern: JSValue, _ replacement: JSValue, all: Bool) throws -> JSValue {
        let ns = s as NSString
        var matches: [NSTextCheckingResult]
        if let regex = pattern.object?.regex {
            let found = regex.expression.matches(in: s, range: NSRange(location: 0, length: ns.length))
            matches = regex.global || all ? found : Array(found.prefix(1))
        } else {
            let escaped = try NSRegularExpression(
                pattern: NSRegularExpression.escapedPattern(for: pattern.toDisplayString()))
            let found = escaped.matches(in: s, range: NSRange(location: 0, length: ns.length))
            matches = all ? found : Array(found.prefix(1))
        }
        var out = ""
        var last = 0
        for match in matches {
            out += ns.substring(with: NSRange(location: last, length: match.range.location - last))
            let groups: [JSValue] = (0..<match.numberOfRanges).map {
                let r = match.range(at: $0)
                return r.location == NSNotFound ? .undefined : .string(ns.substring(with: r))
            }
            if replacement.object?.callable != nil {
                out += try invoke(
                    replacement, this: .undefined, groups + [.number(Double(match.range.location)), .string(s)]
                )
                .toDisplayString()
            } else {
                out += Self.expand(replacement.toDisplayString(), groups: groups)
            }
            last = match.range.location + match.range.length
        }
        out += ns.substring(from: last)
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
            let digits = max(
                0, min(100, Int(interpreter.arg(args, 0).toNumber().isNaN ? 0 : interpreter.arg(args, 0).toNumber())))
            return .string(String(format: "%.\(digits)f", this.toNumber()))
        }
        method(numberPrototype, "toString") { interpreter, this, args in
            let radix = Int(interpreter.arg(args, 0).isUndefinedValue ? 10 : interpreter.arg(args, 0).toNumber())
            let n = this.toNumber()
            if radix != 10, n.isFinite, n == n.rounded(), abs(n) < 9e15 {
                return .string(String(Int64(n), radix: radix))
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
            ("sqrt", { $0.squareRoot() }), ("round", { ($0 + 0.5).rounded(.down) }),
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
            do {
                return interpreter.fromJSON(try JSON.parse(Data(interpreter.arg(args, 0).toDisplayString().utf8)))
            } catch {
                throw JSThrown(value: interpreter.makeError("SyntaxError", "JSON.parse: \(error)"))
            }
        }
        method(json, "stringify") { interpreter, _, args in
            guard let value = try interpreter.toJSON(interpreter.arg(args, 0)) else { return .undefined }
            let indent = interpreter.arg(args, 2)
            if case .number(let n) = indent, n > 0 {
                return .string(Self.pretty(value, indent: String(repeating: " ", count: Int(min(n, 10))), level: 0))
            }
            if case .string(let s) = indent, !s.isEmpty { return .string(Self.pretty(value, indent: s, level: 0)) }
            return .string(value.serialized)
        }
        define("JSON", .object(json))
    }

    static func pretty(_ value: JSON, indent: String, level: Int) -> String {
        let pad = String(repeating: indent, count: level + 1)
        let close = String(repeating: indent, count: level)
        switch value {
        case .array(let items) where !items.isEmpty:
            return "[\n" + items.map { pad + pretty($0, indent: indent, level: level + 1) }.joined(separator: ",\n")
                + "\n" + close + "]"
        case .object(let members) where !members.isEmpty:
            return "{\n"
                + members.map {
                    pad + JSON.string($0.0).serialized + ": " + pretty($0.1, indent: indent, level: level + 1)
                }
                .joined(separator: ",\n") + "\n" + close + "}"
        default:
            return value.serialized
        }
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
        switch value {
        case .undefined: return nil
        case .null: return .null
        case .bool(let b): return .bool(b)
        case .number(let n):
            guard n.isFinite else { return .null }
            if n == n.rounded(), abs(n) < 9.007_199_254_740_992e15 { return .int(Int64(n)) }
            return .double(n)
        case .string(let s): return .string(s)
        case .object(let o):
            if o.callable != nil { return nil }
            if let date = o.date { return .string(JSDate.iso(date)) }
            if case .object(let f) = o.get("toJSON"), f.callable != nil {
                return try toJSON(try invoke(.object(f), this: value, []), depth: depth + 1)
            }
            if let array = o.array { return .array(try array.map { try toJSON($0, depth: depth + 1) ?? .null }) }
            var members: [(String, JSON)] = []
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
                    time = args[0].object?.date ?? args[0].toNumber()
                }
            } else if args.count > 1 {
                var components = DateComponents()
                components.timeZone = TimeZone(identifier: "UTC")
                components.year = Int(args[0].toNumber())
                components.month = Int(args[1].toNumber()) + 1
                components.day = args.count > 2 ? Int(args[2].toNumber()) : 1
                components.hour = args.count > 3 ? Int(args[3].toNumber()) : 0
                components.minute = args.count > 4 ? Int(args[4].toNumber()) : 0
                components.second = args.count > 5 ? Int(args[5].toNumber()) : 0
                var calendar = Calendar(identifier: .gregorian)
                calendar.timeZone = TimeZone(identifier: "UTC")!
                time = (calendar.date(from: components)?.timeIntervalSince1970 ?? .nan) * 1000
                if args.count > 6 { time += args[6].toNumber() }
            }
            guard interpreter.isConstructCall(this, "Date") else { return .string(JSDate.iso(time)) }
            let object = JSObject(prototype: interpreter.datePrototype, className: "Date")
            object.date = time
            return .object(object)
        }
        date.properties["prototype"] = .object(datePrototype)
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
            let from = regex.global ? Int(object.get("lastIndex").toNumber()) : 0
            let result = interpreter.execResult(regex, s, from: from)
            if regex.global {
                let end =
                    result.object.map {
                        Int($0.get("index").toNumber()) + ($0.array?.first?.toDisplayString().utf16.count ?? 0)
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
            let from = regex.global ? Int(object.get("lastIndex").toNumber()) : 0
            let result = interpreter.execResult(regex, s, from: from)
            if regex.global {
                let end =
                    result.object.map {
                        Int($0.get("index").toNumber()) + ($0.array?.first?.toDisplayString().utf16.count ?? 0)
                    } ?? 0
                object.set("lastIndex", .number(Double(end)))
            }
            return result
        }
        method(regexPrototype, "toString") { _, this, _ in .string(this.toDisplayString()) }
    }

    /// One match as `exec` returns it (an array of the groups with `index` and `input`), or null.
    func execResult(_ regex: JSRegex, _ s: String, from: Int) -> JSValue {
        let ns = s as NSString
        guard from <= ns.length,
            let match = regex.expression.firstMatch(in: s, range: NSRange(location: from, length: ns.length - from))
        else { return .null }
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

    static func parse(_ text: String) -> Double? {
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = TimeZone(identifier: "UTC")
        for options: ISO8601DateFormatter.Options in [
            [.withInternetDateTime, .withFractionalSeconds], [.withInternetDateTime], [.withFullDate],
        ] {
            formatter.formatOptions = options
            if let date = formatter.date(from: text) { return (date.timeIntervalSince1970 * 1000).rounded() }
        }
        // "YYYY-MM-DDTHH:MM:SS" without a zone is read as UTC here.
        if text.count == 19, let date = formatter.date(from: text + "Z") { return date.timeIntervalSince1970 * 1000 }
        return nil
    }
}
