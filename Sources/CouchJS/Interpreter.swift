import Foundation

/// A tree-walking interpreter of the JavaScript CouchDB design documents use, with budgets per
/// call into it (steps, bytes allocated, time, call depth and nesting), so that no function can
/// hang, balloon or crash the server: a function past a budget ends with `JSBudgetExceeded`.
public final class Interpreter {
    /// The most evaluation steps one call from Swift may take. Built-ins that copy or scan count
    /// their work too (a step per element, a step per 256 bytes).
    public var stepBudget = 5_000_000
    /// The most bytes one call from Swift may allocate, counted as strings, arrays and objects are
    /// made (what they cost, not what is still held when the call ends).
    public var memoryBudget = 256 << 20
    /// The longest one call from Swift may run, in seconds: a backstop for native work the step
    /// count does not see (steps end a runaway first).
    public var timeBudget: Double = 5
    /// The deepest JavaScript call nesting.
    public var maximumDepth = 200
    /// The deepest nesting of expressions and statements being evaluated, calls included: what
    /// bounds the interpreter's own recursion (the Swift stack), whatever the source's shape.
    public var maximumNesting = 2_000
    /// The longest array `new Array(n)`, `Array.from` or a `length` assignment makes, and the
    /// longest string any operation builds (in UTF-8 bytes): memory stays bounded.
    static let maximumArrayLength = 1_000_000
    static let maximumStringLength = 64 << 20
    /// What one array element and one object cost against `memoryBudget`.
    static let elementCost = MemoryLayout<JSValue>.stride
    static let objectCost = 160
    /// What making a function costs: the function object and the scope it keeps alive (its
    /// `prototype` object is charged apart). A million closures, uncharged, took 2.3 GB.
    static let closureCost = 1_024

    let global: Scope
    var steps = 0
    /// Bytes allocated by the current call (see `memoryBudget`).
    var allocated = 0
    /// Expressions and statements being evaluated (see `maximumNesting`).
    var nesting = 0
    /// When the current call must have ended (uptime nanoseconds).
    private var deadline: UInt64 = .max
    /// Arrays being joined (`join`, `toString`), for cycles.
    var joining: Set<ObjectIdentifier> = []
    /// Whether a call from Swift is running (calls back into the interpreter run within it).
    private var active = false
    /// The label of the loop about to run (`outer: for …`), for its `break`/`continue outer`.
    var pendingLabel: String?
    var depth = 0

    let objectPrototype = JSObject()
    lazy var functionPrototype = JSObject(prototype: objectPrototype)
    lazy var arrayPrototype = JSObject(prototype: objectPrototype)
    lazy var stringPrototype = JSObject(prototype: objectPrototype)
    lazy var numberPrototype = JSObject(prototype: objectPrototype)
    lazy var booleanPrototype = JSObject(prototype: objectPrototype)
    lazy var datePrototype = JSObject(prototype: objectPrototype)
    lazy var regexPrototype = JSObject(prototype: objectPrototype)
    lazy var errorPrototype = JSObject(prototype: objectPrototype)

    /// Lines passed to `log`.
    public private(set) var logs: [String] = []

    /// The built-in objects (made by `init`): Object, Array, their prototypes and methods, Math, JSON…
    /// Many hold each other (`Object.prototype.constructor === Object`), so `deinit` breaks those cycles.
    private var builtins: [JSObject] = []
    /// The scopes functions were made in, other than the global one (a function declared in a
    /// function is bound in the scope it closes over: a cycle). Weak, so that they die as they
    /// would have; `deinit` takes apart the ones still alive then.
    private var closureScopes: [WeakScope] = []
    /// How many `closureScopes` may hold before the dead ones are dropped.
    private var closureScopesCompactAt = 1_024
    /// How many scopes functions were made in may be alive before `collectCycles` looks for garbage.
    private var collectCyclesAt = 256

    /// How many scopes functions were made in are alive (for tests).
    var liveClosureScopeCount: Int { closureScopes.reduce(0) { $0 + ($1.scope == nil ? 0 : 1) } }

    public init() {
        global = Scope(parent: nil, isFunction: true)
        installBuiltins()
        builtins = Self.objectsReachable(
            from: global.boundObjects + [
                objectPrototype, functionPrototype, arrayPrototype, stringPrototype, numberPrototype,
                booleanPrototype, datePrototype, regexPrototype, errorPrototype,
            ])
    }

    /// Ends the interpreter without leaking: JavaScript's object graph is full of reference cycles
    /// ARC does not free (a prototype and its constructor, a function and the scope that binds it).
    /// The global scope and the scopes functions were made in let go of what they bind, and the
    /// built-ins of the objects they refer to. Values a host still holds keep their own members
    /// (what they inherit from the built-ins loses its functions: they need this interpreter anyway).
    deinit {
        var pending: [AnyObject] = []
        global.detach(into: &pending)
        for entry in closureScopes { entry.scope?.detach(into: &pending) }
        closureScopes = []
        for object in builtins { object.dropObjectReferences(into: &pending) }
        builtins = []
        Teardown.release(&pending)
    }

    /// Every object reachable from `roots` through properties, elements and prototypes.
    private static func objectsReachable(from roots: [JSObject]) -> [JSObject] {
        var seen = Set<ObjectIdentifier>()
        var found: [JSObject] = []
        var stack = roots
        while let object = stack.popLast() {
            guard seen.insert(ObjectIdentifier(object)).inserted else { continue }
            found.append(object)
            if let prototype = object.prototype { stack.append(prototype) }
            for case .object(let o) in object.properties.values { stack.append(o) }
            for case .object(let o) in object.array ?? [] { stack.append(o) }
        }
        return found
    }

    /// Breaks the cycles left by calls that ended: once `collectCyclesAt` scopes functions were made in
    /// are alive, the ones nothing reaches from the global scope, the built-ins or `roots` any more
    /// (a function declared in a function, bound in the scope it closes over: each a cycle) let go of
    /// what they bind. Only between calls, with every value the host keeps among `roots`: a scope only
    /// the host's values reach would be emptied.
    func collectCycles(roots: [JSValue]) {
        closureScopes.removeAll { $0.scope == nil }
        guard closureScopes.count >= collectCyclesAt else { return }
        var objectsSeen = Set<ObjectIdentifier>()
        var scopesSeen = Set<ObjectIdentifier>()
        var objects = builtins + roots.compactMap(\.object)
        var scopes = [global]
        while true {
            if let object = objects.popLast() {
                guard objectsSeen.insert(ObjectIdentifier(object)).inserted else { continue }
                if let prototype = object.prototype { objects.append(prototype) }
                for case .object(let o) in object.properties.values { objects.append(o) }
                for case .object(let o) in object.array ?? [] { objects.append(o) }
                switch object.callable {
                case .user(_, let scope, let this)?:
                    scopes.append(scope)
                    if case .object(let o)? = this { objects.append(o) }
                case .bound(let target, let this, let args)?:
                    for case .object(let o) in [target, this] + args { objects.append(o) }
                default: break
                }
            } else if let scope = scopes.popLast() {
                guard scopesSeen.insert(ObjectIdentifier(scope)).inserted else { continue }
                objects += scope.boundObjects
                if let parent = scope.parent { scopes.append(parent) }
            } else {
                break
            }
        }
        var pending: [AnyObject] = []
        var reached: [WeakScope] = []
        for entry in closureScopes {
            guard let scope = entry.scope else { continue }
            if scopesSeen.contains(ObjectIdentifier(scope)) {
                reached.append(entry)
            } else {
                scope.detach(into: &pending)
            }
        }
        closureScopes = reached
        collectCyclesAt = max(256, reached.count * 2)
        Teardown.release(&pending)
    }

    /// Notes a scope a function was made in (see `closureScopes`).
    private func noteClosureScope(_ scope: Scope) {
        if scope === global || closureScopes.last?.scope === scope { return }
        closureScopes.append(WeakScope(scope: scope))
        if closureScopes.count >= closureScopesCompactAt {
            closureScopes.removeAll { $0.scope == nil }
            closureScopesCompactAt = max(1_024, closureScopes.count * 2)
        }
    }

    // MARK: - Running code

    /// Runs `source` as a program in the global scope.
    public func run(_ source: String) throws -> JSValue {
        try budgeted { try execute(try parse(source), in: global) }
    }

    /// Evaluates `source` as one expression (a design document function's source is one).
    public func evaluate(_ source: String) throws -> JSValue {
        try budgeted { try execute(try parse("(" + source + "\n)"), in: global) }
    }

    /// Calls a function value with `args`, within the budget.
    public func call(_ function: JSValue, this: JSValue = .undefined, _ args: [JSValue]) throws -> JSValue {
        try budgeted { try invoke(function, this: this, args) }
    }

    /// Parses within the current call's budgets: its source costs 64 bytes a byte against the
    /// memory budget (what the characters, tokens and tree take), and parsing stops at the deadline.
    private func parse(_ source: String) throws -> [Stmt] {
        try charge(source.utf8.count, of: 64)
        return try Parser.parseProgram(source, deadline: deadline)
    }

    /// Runs `body` as one call from Swift: on a large-stack thread (see `StackExecutor`) with
    /// fresh budgets; within a call already running, in place under that call's budgets. Hosts
    /// convert their arguments and results inside it, so that nothing deep runs on their stack.
    public func withBudget<T>(_ body: () throws -> T) throws -> T {
        try budgeted(body)
    }

    /// Defines a global.
    public func define(_ name: String, _ value: JSValue) { global.declare(name, value) }

    /// Defines a global function implemented in Swift.
    public func defineFunction(_ name: String, _ body: @escaping (Interpreter, JSValue, [JSValue]) throws -> JSValue) {
        global.declare(name, .object(makeFunction(name, body)))
    }

    /// Records a log line (`log()` in design functions, and errors the host notes); the log
    /// keeps the last 1,000 lines of at most 10,000 bytes each.
    public func log(_ line: String) {
        logs.append(line.utf8.count > 10_000 ? String(decoding: line.utf8.prefix(10_000), as: UTF8.self) : line)
        if logs.count > 1_000 { logs.removeFirst(logs.count - 1_000) }
    }

    private func budgeted<T>(_ body: () throws -> T) throws -> T {
        if active { return try body() }
        return try StackExecutor.shared.run { () throws -> T in
            steps = 0
            allocated = 0
            nesting = 0
            depth = 0
            joining = []
            nextClockCheck = 1_024
            let seconds = timeBudget.isFinite ? max(0, min(timeBudget, 86_400)) : 86_400
            deadline = DispatchTime.now().uptimeNanoseconds + UInt64(seconds * 1e9)
            active = true
            defer { active = false }
            return try body()
        }
    }

    func tick() throws {
        steps += 1
        if steps > stepBudget {
            throw JSBudgetExceeded(description: "the function ran more than \(stepBudget) steps (an endless loop?)")
        }
        if allocated > memoryBudget { throw memoryExceeded() }
        if steps >= nextClockCheck {
            // Every 1,024 steps, also when a built-in charged many at once.
            nextClockCheck = steps + 1_024
            try checkTime()
        }
    }

    /// The step count at which `tick` next reads the clock.
    private var nextClockCheck = 1_024

    /// Throws when the current call has run past its time budget (native work checks this).
    func checkTime() throws {
        if DispatchTime.now().uptimeNanoseconds > deadline {
            throw JSBudgetExceeded(description: "the function ran longer than its time budget (\(timeBudget) s)")
        }
    }

    private func memoryExceeded() -> JSBudgetExceeded {
        JSBudgetExceeded(description: "the function allocated more than its memory budget (\(memoryBudget) bytes)")
    }

    /// Counts work a built-in does (`count` steps) before doing it.
    func charge(steps count: Int) throws {
        // Saturates well below Int.max, so that no counter arithmetic can overflow.
        steps = min(steps, Int.max / 4) + min(max(0, count), Int.max / 4)
        try tick()
    }

    /// Counts `count` items of `size` bytes a built-in is about to allocate, before it does:
    /// past the memory budget it throws, and the bytes cost steps (one per 256) too.
    func charge(_ count: Int, of size: Int = 1) throws {
        let (bytes, overflow) = max(0, count).multipliedReportingOverflow(by: max(0, size))
        let limit = max(0, memoryBudget)
        if overflow || bytes > limit - min(max(0, allocated), limit) {
            allocated = Int.max
            throw memoryExceeded()
        }
        allocated += bytes
        try charge(steps: bytes >> 8)
    }

    /// Notes a small allocation that cannot throw where it happens; the next step checks it.
    func note(bytes: Int) { allocated = allocated > Int.max - max(0, bytes) ? Int.max : allocated + max(0, bytes) }

    /// Checks a string about to be made of `bytes` UTF-8 bytes against the longest string.
    /// `total`: the whole string's length when `bytes` are appended to one being built.
    func chargeString(_ bytes: Int, total: Int? = nil) throws {
        guard (total ?? bytes) <= Interpreter.maximumStringLength else {
            throw rangeError("Invalid string length: at most \(Interpreter.maximumStringLength) bytes here")
        }
        try charge(bytes)
    }

    // MARK: - Statements

    enum Completion {
        case normal
        case breakLoop(String?)
        case continueLoop(String?)
        case returnValue(JSValue)
    }

    /// Runs statements; returns the value of the last expression statement (for `evaluate`).
    func execute(_ statements: [Stmt], in scope: Scope) throws -> JSValue {
        hoist(statements, in: scope)
        var last: JSValue = .undefined
        for statement in statements {
            if case .expression(let e) = statement {
                try tick()
                last = try eval(e, scope)
                continue
            }
            switch try exec(statement, scope) {
            case .normal: continue
            case .returnValue(let v): return v
            case .breakLoop, .continueLoop: return last
            }
        }
        return last
    }

    /// Declares function declarations (and `var` names) before a body runs, as JavaScript does.
    func hoist(_ statements: [Stmt], in scope: Scope) {
        for statement in statements {
            switch statement {
            case .function(let node):
                if let name = node.name { scope.declareVar(name, .object(makeClosure(node, scope))) }
            case .declaration(let kind, let items) where kind == "var":
                for (pattern, _) in items { for name in pattern.names { scope.declareVar(name, nil) } }
            default: break
            }
        }
    }

    func execBlock(_ statements: [Stmt], _ scope: Scope) throws -> Completion {
        let inner = Scope(parent: scope)
        hoist(statements, in: inner)
        for statement in statements {
            let completion = try exec(statement, inner)
            if case .normal = completion { continue }
            return completion
        }
        return .normal
    }

    func exec(_ statement: Stmt, _ scope: Scope) throws -> Completion {
        try tick()
        nesting += 1
        defer { nesting -= 1 }
        if nesting > maximumNesting { throw nestedTooDeeply() }
        switch statement {
        case .expression(let e):
            _ = try eval(e, scope)
            return .normal
        case .declaration(let kind, let items):
            for (pattern, initial) in items {
                let value = try initial.map { try eval($0, scope) } ?? .undefined
                if kind == "var" {
                    if initial != nil || !pattern.isSimpleName { try bind(pattern, value, scope, kind: "var") }
                } else {
                    try bind(pattern, value, scope, kind: kind)
                }
            }
            return .normal
        case .function:
            return .normal  // hoisted
        case .ifElse(let test, let consequent, let alternate):
            if try eval(test, scope).truthy { return try exec(consequent, scope) }
            if let alternate { return try exec(alternate, scope) }
            return .normal
        case .block(let statements):
            return try execBlock(statements, scope)
        case .forLoop(let initial, let test, let update, let body):
            let myLabel = takeLabel()
            let loopScope = Scope(parent: scope)
            if let initial { _ = try exec(initial, loopScope) }
            while true {
                if let test, try !eval(test, loopScope).truthy { break }
                switch try exec(body, Scope(parent: loopScope)) {
                case .breakLoop(let label) where label == nil || label == myLabel: return .normal
                case .breakLoop(let label): return .breakLoop(label)
                case .returnValue(let v): return .returnValue(v)
                case .continueLoop(let label) where label != nil && label != myLabel: return .continueLoop(label)
                default: break
                }
                if let update { _ = try eval(update, loopScope) }
            }
            return .normal
        case .forIn(let declaration, let pattern, let objectExpr, let body, let isOf):
            let myLabel = takeLabel()
            let subject = try eval(objectExpr, scope)
            var items: [JSValue] = []
            if isOf {
                items = try iterate(subject)
            } else if let object = subject.object {
                let keys = forInKeys(object)
                try charge(keys.count, of: Interpreter.elementCost + 32)
                items = keys.map(JSValue.string)
            } else if case .string(let s) = subject {
                try charge(s.utf16.count, of: Interpreter.elementCost + 16)
                items = (0..<s.utf16.count).map { .string(String($0)) }
            }
            for item in items {
                let iterationScope = Scope(parent: scope)
                if let declaration {
                    try bind(pattern, item, iterationScope, kind: declaration == "var" ? "let" : declaration)
                    if declaration == "var" { for name in pattern.names { scope.declareVar(name, item) } }
                } else {
                    try assignPattern(pattern, item, scope)
                }
                switch try exec(body, iterationScope) {
                case .breakLoop(let label) where label == nil || label == myLabel: return .normal
                case .breakLoop(let label): return .breakLoop(label)
                case .returnValue(let v): return .returnValue(v)
                case .continueLoop(let label) where label != nil && label != myLabel: return .continueLoop(label)
                default: break
                }
            }
            return .normal
        case .whileLoop(let test, let body):
            let myLabel = takeLabel()
            while try eval(test, scope).truthy {
                switch try exec(body, scope) {
                case .breakLoop(let label) where label == nil || label == myLabel: return .normal
                case .breakLoop(let label): return .breakLoop(label)
                case .returnValue(let v): return .returnValue(v)
                case .continueLoop(let label) where label != nil && label != myLabel: return .continueLoop(label)
                default: break
                }
            }
            return .normal
        case .doWhile(let body, let test):
            let myLabel = takeLabel()
            repeat {
                switch try exec(body, scope) {
                case .breakLoop(let label) where label == nil || label == myLabel: return .normal
                case .breakLoop(let label): return .breakLoop(label)
                case .returnValue(let v): return .returnValue(v)
                case .continueLoop(let label) where label != nil && label != myLabel: return .continueLoop(label)
                default: break
                }
            } while try eval(test, scope).truthy
            return .normal
        case .returnValue(let e):
            return .returnValue(try e.map { try eval($0, scope) } ?? .undefined)
        case .breakLoop(let label):
            return .breakLoop(label)
        case .continueLoop(let label):
            return .continueLoop(label)
        case .throwValue(let e):
            throw JSThrown(value: try eval(e, scope))
        case .tryCatch(let body, let param, let handler, let finalizer):
            var completion: Completion = .normal
            var pending: Error?
            do {
                completion = try execBlock(body, scope)
            } catch let budget as JSBudgetExceeded {
                throw budget  // a budget run out is not JavaScript's to catch
            } catch {
                // What JavaScript threw, or a host error (a syntax error in a `require`d module) as one.
                let thrown =
                    error as? JSThrown
                    ?? JSThrown(value: makeError(error is JSSyntaxError ? "SyntaxError" : "Error", "\(error)"))
                if let handler {
                    let catchScope = Scope(parent: scope)
                    if let param { try bind(param, thrown.value, catchScope, kind: "let") }
                    do {
                        completion = try execBlock(handler, catchScope)
                    } catch {
                        pending = error
                    }
                } else {
                    pending = thrown
                }
            }
            if let finalizer {
                let after = try execBlock(finalizer, scope)
                if case .normal = after {} else { return after }
            }
            if let pending { throw pending }
            return completion
        case .switchCase(let discriminantExpr, let cases):
            let discriminant = try eval(discriminantExpr, scope)
            let switchScope = Scope(parent: scope)
            var matched: Int?
            for (i, c) in cases.enumerated() {
                if let test = c.test, strictEquals(discriminant, try eval(test, switchScope)) {
                    matched = i
                    break
                }
            }
            if matched == nil { matched = cases.firstIndex { $0.test == nil } }
            guard let start = matched else { return .normal }
            for c in cases[start...] {
                for statement in c.body {
                    switch try exec(statement, switchScope) {
                    case .normal: continue
                    case .breakLoop(nil): return .normal
                    case let other: return other
                    }
                }
            }
            return .normal
        case .labeled(let label, let body):
            pendingLabel = label
            defer { pendingLabel = nil }
            switch try exec(body, scope) {
            case .breakLoop(label): return .normal
            case .continueLoop(label): return .normal
            case let other: return other
            }
        case .empty:
            return .normal
        }
    }

    func nestedTooDeeply() -> JSBudgetExceeded {
        JSBudgetExceeded(description: "expressions and calls nested more than \(maximumNesting) deep")
    }

    /// The label given to the loop starting now (and no other).
    private func takeLabel() -> String? {
        defer { pendingLabel = nil }
        return pendingLabel
    }

    func forInKeys(_ object: JSObject) -> [String] {
        var keys: [String] = []
        var seen = Set<String>()
        var current: JSObject? = object
        while let o = current, o !== objectPrototype, o !== arrayPrototype, o !== functionPrototype {
            for key in o.ownKeys where !seen.contains(key) {
                seen.insert(key)
                keys.append(key)
            }
            current = o.prototype
        }
        return keys
    }

    /// The values `for … of` visits.
    func iterate(_ value: JSValue) throws -> [JSValue] {
        switch value {
        case .string(let s):
            try charge(s.utf8.count, of: Interpreter.elementCost + 16)
            return s.map { .string(String($0)) }
        case .object(let o) where o.array != nil: return o.array!
        default: throw typeError("\(value.typeName) is not iterable")
        }
    }

    // MARK: - Bindings

    func bind(_ pattern: Pattern, _ value: JSValue, _ scope: Scope, kind: String) throws {
        switch pattern {
        case .name(let name, let defaultValue):
            let v = value.isUndefinedValue && defaultValue != nil ? try eval(defaultValue!, scope) : value
            if kind == "var" { scope.declareVar(name, v) } else { scope.declare(name, v) }
        case .object(let entries, let rest, let defaultValue):
            let v = value.isUndefinedValue && defaultValue != nil ? try eval(defaultValue!, scope) : value
            guard let object = try toObject(v) else { throw typeError("Cannot destructure \(v.toDisplayString())") }
            for (key, target) in entries { try bind(target, object.get(key), scope, kind: kind) }
            if let rest {
                let copy = newObject()
                for key in object.ownKeys where !entries.contains(where: { $0.key == key }) {
                    copy.set(key, object.get(key))
                }
                if kind == "var" { scope.declareVar(rest, .object(copy)) } else { scope.declare(rest, .object(copy)) }
            }
        case .array(let items, let rest, let defaultValue):
            let v = value.isUndefinedValue && defaultValue != nil ? try eval(defaultValue!, scope) : value
            let elements = v.isNullish ? [] : try iterate(v)
            for (i, item) in items.enumerated() {
                if let item { try bind(item, i < elements.count ? elements[i] : .undefined, scope, kind: kind) }
            }
            if let rest {
                let remaining = Array(elements.dropFirst(items.count))
                let array = JSValue.object(newArray(remaining))
                if kind == "var" { scope.declareVar(rest, array) } else { scope.declare(rest, array) }
            }
        }
    }

    func assignPattern(_ pattern: Pattern, _ value: JSValue, _ scope: Scope) throws {
        if case .name(let name, _) = pattern {
            if !scope.assign(name, value) { global.declare(name, value) }
            return
        }
        try bind(pattern, value, scope, kind: "let")
    }

    // MARK: - Objects

    func newObject() -> JSObject {
        note(bytes: Interpreter.objectCost)
        return JSObject(prototype: objectPrototype)
    }

    func newArray(_ items: [JSValue]) -> JSObject {
        note(bytes: Interpreter.objectCost + items.count * Interpreter.elementCost)
        let array = JSObject(prototype: arrayPrototype, className: "Array")
        array.array = items
        return array
    }

    func makeFunction(_ name: String, _ body: @escaping (Interpreter, JSValue, [JSValue]) throws -> JSValue) -> JSObject
    {
        note(bytes: Interpreter.objectCost)
        let f = JSObject(prototype: functionPrototype, className: "Function")
        f.callable = .native(name: name, body)
        return f
    }

    func makeClosure(_ node: FunctionNode, _ scope: Scope, this: JSValue? = nil) -> JSObject {
        note(bytes: Interpreter.closureCost)
        let f = JSObject(prototype: functionPrototype, className: "Function")
        f.callable = .user(node, scope, thisValue: node.isArrow ? (this ?? .undefined) : nil)
        if !node.isArrow {
            // Its `prototype` object is made when first asked for (see `JSObject.prototypeOnDemand`).
            note(bytes: Interpreter.objectCost)
            f.prototypeOnDemand = true
        }
        noteClosureScope(scope)
        return f
    }

    func makeError(_ type: String, _ message: String) -> JSValue {
        note(bytes: Interpreter.objectCost)
        let error = JSObject(prototype: errorPrototype, className: "Error")
        error.set("name", .string(type))
        error.set("message", .string(message))
        return .object(error)
    }

    func typeError(_ message: String) -> JSThrown { JSThrown(value: makeError("TypeError", message)) }

    /// The object a primitive's properties are looked up on.
    func toObject(_ value: JSValue) throws -> JSObject? {
        switch value {
        case .object(let o): return o
        case .string(let s):
            note(bytes: Interpreter.objectCost)
            let wrapper = JSObject(prototype: stringPrototype, className: "String")
            wrapper.properties["length"] = .number(Double(s.utf16.count))
            return wrapper
        case .number: return numberPrototype
        case .bool: return booleanPrototype
        case .undefined, .null: return nil
        }
    }

    func getProperty(_ value: JSValue, _ key: String) throws -> JSValue {
        switch value {
        case .object(let o): return o.get(key)
        case .string(let s):
            if key == "length" { return .number(Double(s.utf16.count)) }
            if let i = JSNumber.arrayIndex(key) { return i < s.utf16.count ? .string(s.utf16Unit(at: i)) : .undefined }
            return stringPrototype.get(key)
        case .number: return numberPrototype.get(key)
        case .bool: return booleanPrototype.get(key)
        case .undefined, .null:
            throw typeError("Cannot read properties of \(value.toDisplayString()) (reading '\(key)')")
        }
    }

    func setProperty(_ target: JSValue, _ key: String, _ value: JSValue) throws {
        guard case .object(let o) = target else {
            if target.isNullish {
                throw typeError("Cannot set properties of \(target.toDisplayString()) (setting '\(key)')")
            }
            return
        }
        if let array = o.array {
            // Growth by `length` or by an index past the end: bounded, and counted before it happens.
            var newCount: Int?
            if key == "length" {
                let n = value.toNumber()
                guard n >= 0, n == n.rounded(.towardZero), n <= 4_294_967_295 else {
                    throw rangeError("Invalid array length")
                }
                newCount = JSNumber.clamped(n, 0, Int.max)
            } else if let i = JSNumber.arrayIndex(key) {
                newCount = i + 1
            }
            if let newCount, newCount > array.count {
                guard newCount <= Interpreter.maximumArrayLength else {
                    throw rangeError("Invalid array length: at most \(Interpreter.maximumArrayLength) elements here")
                }
                try charge(newCount - array.count, of: Interpreter.elementCost)
            }
        }
        o.set(key, value)
    }

    // MARK: - Calls

    func invoke(_ function: JSValue, this: JSValue, _ args: [JSValue]) throws -> JSValue {
        guard case .object(let f) = function, let callable = f.callable else {
            throw typeError("\(function.toDisplayString()) is not a function")
        }
        depth += 1
        defer { depth -= 1 }
        if depth > maximumDepth { throw JSBudgetExceeded(description: "calls nested more than \(maximumDepth) deep") }
        switch callable {
        case .bound(let target, let boundThis, let preset):
            try charge(preset.count + args.count, of: Interpreter.elementCost)
            return try invoke(target, this: boundThis, preset + args)
        case .native(_, let body):
            return try body(self, this, args)
        case .user(let node, let closure, let boundThis):
            let scope = Scope(parent: closure, isFunction: true)
            if !node.isArrow {
                scope.declare("this", this)
                scope.declare("arguments", .object(newArray(args)))
            } else if let boundThis {
                _ = boundThis
            }
            for (i, param) in node.params.enumerated() {
                if case .array(let items, let rest?, nil) = param, items.isEmpty {
                    scope.declare(rest, .object(newArray(Array(args.dropFirst(i)))))
                    continue
                }
                try bind(param, i < args.count ? args[i] : .undefined, scope, kind: "let")
            }
            if let body = node.expressionBody { return try eval(body, scope) }
            hoist(node.body, in: scope)
            for statement in node.body {
                if case .returnValue(let v) = try exec(statement, scope) { return v }
            }
            return .undefined
        }
    }

    func construct(_ constructor: JSValue, _ args: [JSValue]) throws -> JSValue {
        guard case .object(let f) = constructor, f.callable != nil else {
            throw typeError("\(constructor.toDisplayString()) is not a constructor")
        }
        if case .native(let name, let body) = f.callable! {
            // Built-in constructors build their own objects.
            return try body(self, .string("__new__" + name), args)
        }
        note(bytes: Interpreter.objectCost)
        let instance = JSObject(prototype: f.get("prototype").object ?? objectPrototype)
        let result = try invoke(constructor, this: .object(instance), args)
        if case .object = result { return result }
        return .object(instance)
    }
}

extension JSValue {
    var isUndefinedValue: Bool {
        if case .undefined = self { return true }
        return false
    }
}

extension Pattern {
    var names: [String] {
        switch self {
        case .name(let n, _): return [n]
        case .object(let entries, let rest, _): return entries.flatMap(\.target.names) + (rest.map { [$0] } ?? [])
        case .array(let items, let rest, _): return items.compactMap { $0 }.flatMap(\.names) + (rest.map { [$0] } ?? [])
        }
    }

    var isSimpleName: Bool {
        if case .name(_, nil) = self { return true }
        return false
    }
}
