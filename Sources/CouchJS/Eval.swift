import Foundation

extension Interpreter {
    func eval(_ expr: Expr, _ scope: Scope) throws -> JSValue {
        try tick()
        nesting += 1
        defer { nesting -= 1 }
        if nesting > maximumNesting { throw nestedTooDeeply() }
        switch expr {
        case .number(let n): return .number(n)
        case .string(let s): return .string(s)
        case .template(let parts):
            var text = ""
            for part in parts {
                let piece = try toStringValue(try eval(part, scope))
                try chargeString(text.utf8.count + piece.utf8.count)
                text += piece
            }
            return .string(text)
        case .regex(let pattern, let flags): return try makeRegex(pattern, flags)
        case .bool(let b): return .bool(b)
        case .null: return .null
        case .undefined: return .undefined
        case .this: return scope.lookup("this") ?? .undefined
        case .identifier(let name):
            if let value = scope.lookup(name) { return value }
            throw JSThrown(value: makeError("ReferenceError", "\(name) is not defined"))
        case .array(let items):
            var values: [JSValue] = []
            for item in items {
                guard let item else {
                    values.append(.undefined)
                    continue
                }
                if case .spread(let inner) = item {
                    let spread = try iterate(try eval(inner, scope))
                    try charge(spread.count, of: Interpreter.elementCost)
                    values += spread
                } else {
                    values.append(try eval(item, scope))
                }
            }
            return .object(newArray(values))
        case .object(let properties):
            let object = newObject()
            for property in properties {
                switch property {
                case .value(let key, let valueExpr):
                    let name: String
                    switch key {
                    case .name(let n): name = n
                    case .computed(let e): name = try eval(e, scope).toKey()
                    }
                    object.set(name, try eval(valueExpr, scope))
                case .spread(let e):
                    if let source = try eval(e, scope).object {
                        try chargeKeys(source, each: 32 + Interpreter.elementCost)
                        for key in source.ownKeys { object.set(key, source.get(key)) }
                    }
                }
            }
            return .object(object)
        case .function(let node):
            return .object(makeClosure(node, scope, this: node.isArrow ? (scope.lookup("this") ?? .undefined) : nil))
        case .unary(let op, let operandExpr):
            return try unary(op, operandExpr, scope)
        case .update(let op, let prefix, let target):
            let old = try eval(target, scope).toNumber()
            let new = op == "++" ? old + 1 : old - 1
            try assign(target, .number(new), scope)
            return .number(prefix ? new : old)
        case .binary(let op, let left, let right):
            return try binary(op, try eval(left, scope), try eval(right, scope))
        case .logical(let op, let left, let right):
            let l = try eval(left, scope)
            switch op {
            case "&&": return l.truthy ? try eval(right, scope) : l
            case "||": return l.truthy ? l : try eval(right, scope)
            default: return l.isNullish ? try eval(right, scope) : l
            }
        case .assign(let op, let target, let valueExpr):
            if op == "=" {
                let value = try eval(valueExpr, scope)
                try assign(target, value, scope)
                return value
            }
            let current = try eval(target, scope)
            let value: JSValue
            switch op {
            case "&&=": value = current.truthy ? try eval(valueExpr, scope) : current
            case "||=": value = current.truthy ? current : try eval(valueExpr, scope)
            case "??=": value = current.isNullish ? try eval(valueExpr, scope) : current
            default: value = try binary(String(op.dropLast()), current, try eval(valueExpr, scope))
            }
            try assign(target, value, scope)
            return value
        case .conditional(let test, let consequent, let alternate):
            return try eval(test, scope).truthy ? try eval(consequent, scope) : try eval(alternate, scope)
        case .call(let calleeExpr, let argExprs, let optional):
            var this: JSValue = .undefined
            let callee: JSValue
            switch calleeExpr {
            case .member(let objectExpr, let name, let optionalMember):
                this = try eval(objectExpr, scope)
                if optionalMember, this.isNullish { return .undefined }
                callee = try getProperty(this, name)
            case .index(let objectExpr, let keyExpr, let optionalMember):
                this = try eval(objectExpr, scope)
                if optionalMember, this.isNullish { return .undefined }
                callee = try getProperty(this, try eval(keyExpr, scope).toKey())
            default:
                callee = try eval(calleeExpr, scope)
            }
            if optional, callee.isNullish { return .undefined }
            let args = try evalArguments(argExprs, scope)
            if callee.object?.callable == nil {
                throw typeError("\(describeCallee(calleeExpr)) is not a function")
            }
            return try invoke(callee, this: this, args)
        case .new(let calleeExpr, let argExprs):
            return try construct(try eval(calleeExpr, scope), try evalArguments(argExprs, scope))
        case .member(let objectExpr, let name, let optional):
            let object = try eval(objectExpr, scope)
            if optional, object.isNullish { return .undefined }
            return try getProperty(object, name)
        case .index(let objectExpr, let keyExpr, let optional):
            let object = try eval(objectExpr, scope)
            if optional, object.isNullish { return .undefined }
            return try getProperty(object, try eval(keyExpr, scope).toKey())
        case .sequence(let items):
            var last: JSValue = .undefined
            for item in items { last = try eval(item, scope) }
            return last
        case .spread:
            throw JSThrown(value: makeError("SyntaxError", "Unexpected spread"))
        }
    }

    private func describeCallee(_ expr: Expr) -> String {
        switch expr {
        case .identifier(let n): return n
        case .member(let o, let n, _): return describeCallee(o) + "." + n
        default: return "expression"
        }
    }

    func evalArguments(_ exprs: [Expr], _ scope: Scope) throws -> [JSValue] {
        var args: [JSValue] = []
        for e in exprs {
            if case .spread(let inner) = e {
                let spread = try iterate(try eval(inner, scope))
                try charge(spread.count, of: Interpreter.elementCost)
                args += spread
            } else {
                args.append(try eval(e, scope))
            }
        }
        return args
    }

    func assign(_ target: Expr, _ value: JSValue, _ scope: Scope) throws {
        switch target {
        case .identifier(let name):
            // An undeclared name becomes a global, as in sloppy-mode JavaScript.
            if !scope.assign(name, value) { global.declare(name, value) }
        case .member(let objectExpr, let name, _):
            try setProperty(try eval(objectExpr, scope), name, value)
        case .index(let objectExpr, let keyExpr, _):
            let object = try eval(objectExpr, scope)
            try setProperty(object, try eval(keyExpr, scope).toKey(), value)
        default:
            throw JSThrown(value: makeError("SyntaxError", "Invalid assignment target"))
        }
    }

    private func unary(_ op: String, _ operandExpr: Expr, _ scope: Scope) throws -> JSValue {
        switch op {
        case "typeof":
            if case .identifier(let name) = operandExpr, scope.lookup(name) == nil { return .string("undefined") }
            return .string(try eval(operandExpr, scope).typeName)
        case "delete":
            switch operandExpr {
            case .member(let o, let name, _): try eval(o, scope).object?.delete(name)
            case .index(let o, let k, _): try eval(o, scope).object?.delete(try eval(k, scope).toKey())
            default: break
            }
            return .bool(true)
        case "void":
            _ = try eval(operandExpr, scope)
            return .undefined
        default:
            let value = try eval(operandExpr, scope)
            switch op {
            case "!": return .bool(!value.truthy)
            case "-": return .number(-value.toNumber())
            case "+": return .number(value.toNumber())
            case "~": return .number(Double(~value.toInt32()))
            default: throw JSThrown(value: makeError("SyntaxError", "Unknown operator \(op)"))
            }
        }
    }

    /// `ToPrimitive` then `ToString`, calling an object's own `toString` when it has one.
    func toStringValue(_ value: JSValue) throws -> String {
        if case .object(let o) = value, o.array != nil { return try joinArray(o, separator: ",") }
        if case .object(let o) = value, o.array == nil, o.date == nil, o.regex == nil, o.callable == nil,
            case .object(let f) = o.get("toString"), case .user = f.callable
        {
            return try invoke(.object(f), this: value, []).toDisplayString()
        }
        return value.toDisplayString()
    }

    func binary(_ op: String, _ l: JSValue, _ r: JSValue) throws -> JSValue {
        switch op {
        case "+":
            let lp = try primitive(l)
            let rp = try primitive(r)
            if case .string = lp { return try concatenate(l, r) }
            if case .string = rp { return try concatenate(l, r) }
            return .number(lp.toNumber() + rp.toNumber())
        case "-": return .number(l.toNumber() - r.toNumber())
        case "*": return .number(l.toNumber() * r.toNumber())
        case "/": return .number(l.toNumber() / r.toNumber())
        case "%":
            let a = l.toNumber()
            let b = r.toNumber()
            return .number(a.truncatingRemainder(dividingBy: b))
        case "**": return .number(pow(l.toNumber(), r.toNumber()))
        case "==": return .bool(try looseEquals(l, r))
        case "!=": return .bool(try !looseEquals(l, r))
        case "===": return .bool(strictEquals(l, r))
        case "!==": return .bool(!strictEquals(l, r))
        case "<", ">", "<=", ">=":
            let lp = try primitive(l)
            let rp = try primitive(r)
            if case .string(let a) = lp, case .string(let b) = rp {
                let c = compareStrings(a, b)
                switch op {
                case "<": return .bool(c < 0)
                case ">": return .bool(c > 0)
                case "<=": return .bool(c <= 0)
                default: return .bool(c >= 0)
                }
            }
            let a = lp.toNumber()
            let b = rp.toNumber()
            if a.isNaN || b.isNaN { return .bool(false) }
            switch op {
            case "<": return .bool(a < b)
            case ">": return .bool(a > b)
            case "<=": return .bool(a <= b)
            default: return .bool(a >= b)
            }
        case "&": return .number(Double(l.toInt32() & r.toInt32()))
        case "|": return .number(Double(l.toInt32() | r.toInt32()))
        case "^": return .number(Double(l.toInt32() ^ r.toInt32()))
        case "<<": return .number(Double(l.toInt32() << (r.toInt32() & 31)))
        case ">>": return .number(Double(l.toInt32() >> (r.toInt32() & 31)))
        case ">>>": return .number(Double(UInt32(bitPattern: l.toInt32()) >> UInt32(r.toInt32() & 31)))
        case "instanceof":
            guard case .object(let constructor) = r, let prototype = constructor.get("prototype").object else {
                throw typeError("Right-hand side of 'instanceof' is not callable")
            }
            var current = l.object?.prototype
            while let p = current {
                if p === prototype { return .bool(true) }
                current = p.prototype
            }
            return .bool(false)
        case "in":
            guard case .object(let o) = r else { throw typeError("Cannot use 'in' operator to search for a key") }
            return .bool(o.has(l.toKey()))
        default:
            throw JSThrown(value: makeError("SyntaxError", "Unknown operator \(op)"))
        }
    }

    /// String concatenation, bounded in length (memory).
    private func concatenate(_ l: JSValue, _ r: JSValue) throws -> JSValue {
        let left = try toStringValue(l)
        let right = try toStringValue(r)
        try chargeString(left.utf8.count + right.utf8.count)
        return .string(left + right)
    }

    /// Compares strings by UTF-16 code units, as JavaScript does.
    func compareStrings(_ a: String, _ b: String) -> Int {
        var x = a.utf16.makeIterator()
        var y = b.utf16.makeIterator()
        while true {
            switch (x.next(), y.next()) {
            case (nil, nil): return 0
            case (nil, _): return -1
            case (_, nil): return 1
            case (let p?, let q?): if p != q { return p < q ? -1 : 1 }
            }
        }
    }

    /// `ToPrimitive` (hint number; dates and plain objects become strings, arrays their join).
    func primitive(_ value: JSValue) throws -> JSValue {
        guard case .object(let o) = value else { return value }
        if let date = o.date { return .number(date) }
        if o.array != nil { return .string(try joinArray(o, separator: ",")) }
        return .string(value.toDisplayString())
    }

    func strictEquals(_ l: JSValue, _ r: JSValue) -> Bool {
        switch (l, r) {
        case (.undefined, .undefined), (.null, .null): return true
        case (.bool(let a), .bool(let b)): return a == b
        case (.number(let a), .number(let b)): return a == b
        case (.string(let a), .string(let b)): return a == b
        case (.object(let a), .object(let b)): return a === b
        default: return false
        }
    }

    func looseEquals(_ l: JSValue, _ r: JSValue) throws -> Bool {
        if l.isNullish || r.isNullish { return l.isNullish && r.isNullish }
        switch (l, r) {
        case (.object(let a), .object(let b)): return a === b
        case (.object, _): return try looseEquals(try primitive(l), r)
        case (_, .object): return try looseEquals(l, try primitive(r))
        case (.string(let a), .string(let b)): return a == b
        case (.bool, _), (_, .bool), (.number, _), (_, .number): return l.toNumber() == r.toNumber()
        default: return strictEquals(l, r)
        }
    }

    func makeRegex(_ pattern: String, _ flags: String) throws -> JSValue {
        // A compiled expression costs more than its text: charged as a few objects.
        try charge(pattern.utf8.count + 4 * Interpreter.objectCost)
        let object = JSObject(prototype: regexPrototype, className: "RegExp")
        do {
            object.regex = try JSRegex(source: pattern, flags: flags)
        } catch {
            throw JSThrown(value: makeError("SyntaxError", "Invalid regular expression: /\(pattern)/"))
        }
        object.set("lastIndex", .number(0))
        object.set("source", .string(pattern))
        object.set("global", .bool(flags.contains("g")))
        return .object(object)
    }
}
