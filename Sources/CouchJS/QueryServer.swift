import CouchQuery
import Foundation

/// CouchDB's JavaScript query server API on top of the interpreter: design document functions
/// compiled once, then called for map, reduce, `validate_doc_update` and `_changes` filters,
/// with `emit`, `sum`, `log`, `toJSON`, `isArray` and `require` as CouchDB provides them.
///
/// One instance runs one design document's functions; it is not thread-safe (callers hold a
/// lock or make one per use). The functions a host keeps and calls are the ones `compile` made:
/// between calls, what the calls left in reference cycles and nothing else reaches is freed.
public final class JSQueryServer {
    public let interpreter = Interpreter()
    private var emitted: [(JSON, JSON)] = []
    /// What `compile` made: the host may keep and call them, so they stay reachable.
    private var compiled: [JSValue] = []
    /// Calls into `guarded` running (cycles are collected when the outermost ends).
    private var callDepth = 0
    /// The design document, for `require` of its CommonJS modules.
    private let designDocument: JSON?
    private var moduleCache: [String: JSValue] = [:]

    /// Why a function failed: a compilation error, a thrown value, or a runaway.
    public enum Failure: Error, CustomStringConvertible {
        case compilation(String)
        case thrown(JSON?, String)
        case budget(String)

        public var description: String {
            switch self {
            case .compilation(let m): return m
            case .thrown(_, let m): return m
            case .budget(let m): return m
            }
        }

        /// The thrown object, when the function threw one (`{forbidden: …}`, `{unauthorized: …}`).
        public var thrownObject: JSON? {
            if case .thrown(let value, _) = self { return value }
            return nil
        }
    }

    public init(designDocument: JSON? = nil) {
        self.designDocument = designDocument
        interpreter.defineFunction("emit") { [unowned self] interpreter, _, args in
            let key = try interpreter.toJSON(args.first ?? .undefined) ?? .null
            let value = try interpreter.toJSON(args.count > 1 ? args[1] : .undefined) ?? .null
            try interpreter.charge(1, of: 64)
            self.emitted.append((key, value))
            return .undefined
        }
        interpreter.defineFunction("sum") { _, _, args in
            guard let items = args.first?.object?.array else { return .number(0) }
            return .number(items.reduce(0) { $0 + $1.toNumber() })
        }
        interpreter.defineFunction("log") { interpreter, _, args in
            let line = (try? interpreter.toJSON(args.first ?? .undefined)).flatMap { $0 }
            interpreter.log(
                line.map { value in
                    if case .string(let s) = value { return s }
                    return value.serialized
                } ?? "undefined")
            return .undefined
        }
        interpreter.defineFunction("toJSON") { interpreter, _, args in
            .string((try interpreter.toJSON(args.first ?? .undefined))?.serialized ?? "undefined")
        }
        interpreter.defineFunction("isArray") { _, _, args in .bool(args.first?.object?.array != nil) }
        interpreter.defineFunction("require") { [unowned self] interpreter, _, args in
            try self.require((args.first ?? .undefined).toDisplayString(), from: [])
        }
        installRenderingFunctions()
    }

    /// Lines the functions logged with `log`.
    public var logs: [String] { interpreter.logs }

    /// Compiles a design document function's source: it must evaluate to a function.
    public func compile(_ source: String) throws(Failure) -> JSValue {
        do {
            let value = try interpreter.evaluate(source)
            guard value.object?.callable != nil else {
                throw Failure.compilation("Expression does not eval to a function. (\(source.prefix(80)))")
            }
            compiled.append(value)
            return value
        } catch let failure as Failure {
            throw failure
        } catch let syntax as JSSyntaxError {
            throw Failure.compilation("Expression does not eval to a function. \(syntax)")
        } catch {
            throw failure(error)
        }
    }

    private func failure(_ error: Error) -> Failure {
        if let failure = error as? Failure { return failure }
        if let thrown = error as? JSThrown {
            // The thrown value is read with budgets of its own (the call's may be spent), on the
            // interpreter's stack (it may be nested deep).
            interpreter.steps = 0
            interpreter.allocated = 0
            let read = try? interpreter.withBudget { () throws -> (JSON?, String) in
                ((try? interpreter.toJSON(thrown.value)) ?? nil, String(thrown.value.toDisplayString().prefix(10_000)))
            }
            return .thrown(read?.0, read?.1 ?? "an exception")
        }
        if let budget = error as? JSBudgetExceeded { return .budget(budget.description) }
        if let syntax = error as? JSSyntaxError { return .compilation(syntax.description) }
        return .thrown(nil, "\(error)")
    }

    /// Runs `body` as one call into the interpreter: its arguments' conversion, the call and its
    /// result's conversion all on the interpreter's stack and within one set of budgets; whatever
    /// goes wrong (a throw, a budget, a syntax error) is a `Failure`, never a trap.
    private func guarded<T>(_ body: () throws -> T) throws(Failure) -> T {
        callDepth += 1
        defer {
            callDepth -= 1
            if callDepth == 0 {
                interpreter.collectCycles(roots: compiled + Array(moduleCache.values) + providers.map(\.1))
            }
        }
        do {
            return try interpreter.withBudget {
                do {
                    return try body()
                } catch {
                    throw failure(error)
                }
            }
        } catch {
            throw failure(error)
        }
    }

    /// Calls `function` with JSON arguments; returns its result as JSON (nil for `undefined`).
    public func call(_ function: JSValue, _ args: [JSON]) throws(Failure) -> JSON? {
        try guarded { try interpreter.toJSON(try interpreter.call(function, args.map(interpreter.fromJSON))) }
    }

    /// Runs a map function over `doc`; returns what it emitted.
    public func map(_ function: JSValue, _ doc: JSON) throws(Failure) -> [(key: JSON, value: JSON)] {
        emitted = []
        defer { emitted = [] }
        try guarded { _ = try interpreter.call(function, [interpreter.fromJSON(doc)]) }
        return emitted.map { (key: $0.0, value: $0.1) }
    }

    /// Runs a reduce function: `keys` as `[key, id]` pairs (null on rereduce).
    public func reduce(_ function: JSValue, keys: [JSON]?, values: [JSON], rereduce: Bool) throws(Failure) -> JSON {
        try call(function, [keys.map { .array($0) } ?? .null, .array(values), .bool(rereduce)]) ?? .null
    }

    // MARK: - Show, list and update functions

    /// What a show, list or update function answered: status, headers and body bytes.
    public struct Rendered {
        public var code: Int?
        public var headers: [(String, String)] = []
        public var body = Data()
    }

    private var listRows: [JSON] = []
    private var listRowIndex = 0
    private var listStart: JSON?
    private var listChunks: [String] = []
    private var providers: [(String, JSValue)] = []
    private var mimeTypes: [String: [String]] = [
        "html": ["text/html", "application/xhtml+xml"], "text": ["text/plain"], "json": ["application/json"],
        "xml": ["application/xml", "text/xml"], "csv": ["text/csv"],
        "js": ["text/javascript", "application/javascript"],
        "css": ["text/css"], "atom": ["application/atom+xml"], "rss": ["application/rss+xml"],
    ]

    private func installRenderingFunctions() {
        interpreter.defineFunction("start") { [unowned self] interpreter, _, args in
            self.listStart = try interpreter.toJSON(args.first ?? .undefined)
            return .undefined
        }
        interpreter.defineFunction("send") { [unowned self] interpreter, _, args in
            let chunk = try interpreter.toStringValue(args.first ?? .undefined)
            try interpreter.charge(chunk.utf8.count)
            self.listChunks.append(chunk)
            return .undefined
        }
        interpreter.defineFunction("getRow") { [unowned self] interpreter, _, _ in
            guard self.listRowIndex < self.listRows.count else { return .null }
            defer { self.listRowIndex += 1 }
            return interpreter.fromJSON(self.listRows[self.listRowIndex])
        }
        interpreter.defineFunction("provides") { [unowned self] _, _, args in
            if args.count > 1 { self.providers.append(((args[0]).toDisplayString(), args[1])) }
            return .undefined
        }
        interpreter.defineFunction("registerType") { [unowned self] _, _, args in
            guard let name = args.first?.toDisplayString() else { return .undefined }
            self.mimeTypes[name] = args.dropFirst().map { $0.toDisplayString() }
            return .undefined
        }
    }

    /// Runs the first provider (`provides`) whose type `accept` asks for, or the first one.
    private func runProviders(accept: String?) throws -> (String, String)? {
        guard !providers.isEmpty else { return nil }
        let wanted = accept?.lowercased() ?? ""
        let chosen =
            providers.first { name, _ in (mimeTypes[name] ?? []).contains { wanted.contains($0) } } ?? providers[0]
        let value = try interpreter.call(chosen.1, [])
        return (try interpreter.toStringValue(value), mimeTypes[chosen.0]?.first ?? "text/plain")
    }

    /// A response value (a string, or `{code, headers, body, json, base64}`) as bytes and headers.
    private func rendered(_ value: JSON?, defaultType: String) -> Rendered {
        var out = Rendered()
        switch value {
        case .string(let text)?:
            out.body = Data(text.utf8)
            out.headers = [("Content-Type", defaultType)]
        case .object?:
            let object = value!
            // A status HTTP can carry (100...599); any other is ignored.
            if case .int(let code)? = object["code"], (100...599).contains(code) { out.code = Int(code) }
            for (name, header) in object["headers"]?.objectValue ?? [] {
                out.headers.append((name, header.stringValue ?? header.serialized))
            }
            if let json = object["json"] {
                out.body = Data(json.serialized.utf8)
                if !out.headers.contains(where: { $0.0.lowercased() == "content-type" }) {
                    out.headers.append(("Content-Type", "application/json"))
                }
            } else if case .string(let base64)? = object["base64"] {
                out.body = Data(base64Encoded: base64) ?? Data()
            } else if case .string(let text)? = object["body"] {
                out.body = Data(text.utf8)
            }
            if !out.headers.contains(where: { $0.0.lowercased() == "content-type" }) {
                out.headers.append(("Content-Type", defaultType))
            }
        default:
            out.headers = [("Content-Type", defaultType)]
        }
        return out
    }

    /// Runs a show function: `fn(doc, req)`.
    public func show(_ function: JSValue, doc: JSON?, req: JSON) throws(Failure) -> Rendered {
        providers = []
        return try guarded {
            let result = try interpreter.call(
                function, [interpreter.fromJSON(doc ?? .null), interpreter.fromJSON(req)])
            if result.isUndefinedValue || result.isNullValue,
                let (body, type) = try runProviders(accept: req["headers"]?["Accept"]?.stringValue)
            {
                var out = Rendered()
                out.body = Data(body.utf8)
                out.headers = [("Content-Type", type)]
                return out
            }
            return rendered(try interpreter.toJSON(result), defaultType: "text/html; charset=utf-8")
        }
    }

    /// Runs a list function over view rows: `fn(head, req)` with `start`, `send` and `getRow`.
    public func list(_ function: JSValue, head: JSON, req: JSON, rows: [JSON]) throws(Failure) -> Rendered {
        listRows = rows
        listRowIndex = 0
        listStart = nil
        listChunks = []
        providers = []
        defer {
            listRows = []
            listChunks = []
        }
        return try guarded {
            let result = try interpreter.call(function, [interpreter.fromJSON(head), interpreter.fromJSON(req)])
            if let (body, type) = try runProviders(accept: req["headers"]?["Accept"]?.stringValue) {
                listChunks.append(body)
                if listStart == nil { listStart = ["headers": ["Content-Type": .string(type)]] }
            }
            if case .string(let tail) = result { listChunks.append(tail) }
            var out = rendered(listStart ?? [:], defaultType: "text/html; charset=utf-8")
            out.body = Data(listChunks.joined().utf8)
            return out
        }
    }

    /// Runs an update function: `fn(doc, req)` answers `[newDoc or null, response]`.
    public func update(_ function: JSValue, doc: JSON?, req: JSON) throws(Failure) -> (doc: JSON?, response: Rendered) {
        try guarded {
            let result = try interpreter.call(
                function, [interpreter.fromJSON(doc ?? .null), interpreter.fromJSON(req)])
            guard case .array(let pair)? = try interpreter.toJSON(result), pair.count == 2 else {
                throw Failure.thrown(nil, "An update function must return [doc, response].")
            }
            // CouchDB saves only an object (chttpd_show:send_doc_update_response matches `{NewJsonDoc}`);
            // `null` or any other value saves nothing and answers 200. No `cond ? nil : pair[0]` here:
            // JSON is ExpressibleByNilLiteral, so that `nil` was `JSON.null`, which then was "saved".
            var newDoc: JSON?
            if case .object = pair[0] { newDoc = pair[0] }
            return (newDoc, rendered(pair[1], defaultType: "text/html; charset=utf-8"))
        }
    }

    /// `require(path)` of a CommonJS module stored in the design document.
    private func require(_ path: String, from base: [String]) throws -> JSValue {
        var parts = path.hasPrefix(".") ? base : []
        for segment in path.split(separator: "/") {
            switch segment {
            case ".": continue
            case "..": if !parts.isEmpty { parts.removeLast() }
            default: parts.append(String(segment))
            }
        }
        let key = parts.joined(separator: "/")
        if let cached = moduleCache[key] { return cached }
        var node = designDocument
        for part in parts { node = node?[part] }
        guard case .string(let source)? = node else {
            throw JSThrown(
                value: interpreter.makeError(
                    "Error", "require('\(path)') error: the module is not in the design document"))
        }
        let module = interpreter.newObject()
        let exports = interpreter.newObject()
        module.set("exports", .object(exports))
        let wrapper = try interpreter.evaluate("function (module, exports, require) {\n" + source + "\n}")
        let directory = Array(parts.dropLast())
        let localRequire = interpreter.makeFunction("require") { [unowned self] interpreter, _, args in
            try self.require((args.first ?? .undefined).toDisplayString(), from: directory)
        }
        moduleCache[key] = .object(exports)
        _ = try interpreter.call(wrapper, [.object(module), .object(exports), .object(localRequire)])
        let result = module.get("exports")
        moduleCache[key] = result
        return result
    }
}
