import Foundation

/// An expression.
indirect enum Expr {
    case number(Double)
    case string(String)
    case template([Expr])  // parts to concatenate
    case regex(String, String)
    case bool(Bool)
    case null
    case undefined
    case this
    case identifier(String)
    case array([Expr?])  // nil: a hole; `.spread` allowed
    case object([Property])
    case function(FunctionNode)
    case unary(String, Expr)
    case update(String, prefix: Bool, Expr)  // ++ / --
    case binary(String, Expr, Expr)
    case logical(String, Expr, Expr)
    case assign(String, Expr, Expr)
    case conditional(Expr, Expr, Expr)
    case call(Expr, [Expr], optional: Bool)
    case new(Expr, [Expr])
    case member(Expr, String, optional: Bool)
    case index(Expr, Expr, optional: Bool)
    case sequence([Expr])
    case spread(Expr)

    enum Property {
        case value(key: PropertyKey, Expr)
        case spread(Expr)
    }

    enum PropertyKey {
        case name(String)
        case computed(Expr)
    }
}

/// A function's parameters and body.
final class FunctionNode {
    let name: String?
    let params: [Pattern]
    let body: [Stmt]
    let isArrow: Bool
    /// An arrow function with an expression body.
    let expressionBody: Expr?

    init(name: String?, params: [Pattern], body: [Stmt], isArrow: Bool, expressionBody: Expr?) {
        self.name = name
        self.params = params
        self.body = body
        self.isArrow = isArrow
        self.expressionBody = expressionBody
    }
}

/// A binding target: a name, or an object or array destructuring pattern, with an optional default.
indirect enum Pattern {
    case name(String, default: Expr?)
    case object([(key: String, target: Pattern)], rest: String?, default: Expr?)
    case array([Pattern?], rest: String?, default: Expr?)
}

/// A statement.
indirect enum Stmt {
    case expression(Expr)
    case declaration(kind: String, [(Pattern, Expr?)])
    case function(FunctionNode)
    case ifElse(Expr, Stmt, Stmt?)
    case block([Stmt])
    case forLoop(init: Stmt?, test: Expr?, update: Expr?, body: Stmt)
    case forIn(declaration: String?, Pattern, Expr, body: Stmt, of: Bool)
    case whileLoop(Expr, Stmt)
    case doWhile(Stmt, Expr)
    case returnValue(Expr?)
    case breakLoop(String?)
    case continueLoop(String?)
    case throwValue(Expr)
    case tryCatch(body: [Stmt], param: Pattern?, handler: [Stmt]?, finalizer: [Stmt]?)
    case switchCase(Expr, [(test: Expr?, body: [Stmt])])
    case labeled(String, Stmt)
    case empty
}

/// A recursive-descent (Pratt, for operators) parser of the JavaScript design documents use.
///
/// Nesting is bounded (`maximumNesting`): deeper source is a syntax error (CouchDB's
/// `compilation_error`), never a stack overflow. Parsing is linear in the source: the one
/// look-ahead (is this `(` an arrow function's parameters?) reads a table of matching brackets
/// made once, instead of scanning to the closing bracket at every `(`.
struct Parser {
    /// The deepest nesting of statements, expressions and patterns the parser accepts, counted
    /// as its recursion goes (a parenthesised expression costs four, a unary operator one).
    static let maximumNesting = 1_000

    private var tokens: [Token]
    private var position = 0
    /// The closing bracket's token index for each opening bracket's (-1: none).
    private let matching: [Int]
    private var nesting: Int
    private var deadline: UInt64 = .max

    init(tokens: [Token], nesting: Int = 0) {
        self.tokens = tokens
        self.nesting = nesting
        var matching = [Int](repeating: -1, count: tokens.count)
        var open: [Int] = []
        for (i, token) in tokens.enumerated() {
            switch token.kind {
            case .punctuator("("), .punctuator("["), .punctuator("{"): open.append(i)
            case .punctuator(")"), .punctuator("]"), .punctuator("}"):
                if let start = open.popLast() { matching[start] = i }
            default: break
            }
        }
        self.matching = matching
    }

    /// Parses `source`; past `deadline` (uptime nanoseconds) lexing or parsing stops with an error.
    static func parseProgram(_ source: String, deadline: UInt64 = .max) throws(JSSyntaxError) -> [Stmt] {
        var parser = Parser(tokens: try Lexer.tokenize(source, deadline: deadline))
        parser.deadline = deadline
        var statements: [Stmt] = []
        while !parser.atEnd { statements.append(try parser.statement()) }
        return statements
    }

    /// Enters one level of nesting; deeper than `maximumNesting` is a syntax error.
    private mutating func enter() throws(JSSyntaxError) {
        if timedOut {
            throw JSSyntaxError(message: "the source took longer than the time budget to parse", offset: token.offset)
        }
        nesting += 1
        if nesting > Self.maximumNesting {
            throw JSSyntaxError(
                message: "nested too deeply (more than \(Self.maximumNesting) levels)", offset: token.offset)
        }
    }

    // MARK: - Tokens

    private var token: Token { tokens[position] }
    private var atEnd: Bool { token.kind == .end }

    private func peekKind(_ ahead: Int = 1) -> Token.Kind {
        position + ahead < tokens.count ? tokens[position + ahead].kind : .end
    }

    private func isPunct(_ p: String) -> Bool { token.kind == .punctuator(p) }
    private func isKeyword(_ k: String) -> Bool { token.kind == .keyword(k) }

    private mutating func advance() -> Token {
        let t = tokens[position]
        if position < tokens.count - 1 { position += 1 }
        if position & 4095 == 0, deadline != .max, DispatchTime.now().uptimeNanoseconds > deadline {
            timedOut = true
        }
        return t
    }

    /// Set when parsing ran past the deadline; `enter` (called at every statement and
    /// expression) then ends the parse.
    private var timedOut = false

    private mutating func eat(_ p: String) -> Bool {
        if isPunct(p) {
            _ = advance()
            return true
        }
        return false
    }

    private mutating func expect(_ p: String) throws(JSSyntaxError) {
        guard eat(p) else { throw error("Expected '\(p)'") }
    }

    private func error(_ message: String) -> JSSyntaxError {
        JSSyntaxError(message: "\(message), found \(describe(token.kind))", offset: token.offset)
    }

    /// The error for the token at `start`, a position this parser has already read past (`advance`
    /// stays on the end token, so the token is found by its position, never by stepping back one).
    private mutating func error(_ message: String, at start: Int) -> JSSyntaxError {
        position = start
        return error(message)
    }

    private func describe(_ kind: Token.Kind) -> String {
        switch kind {
        case .identifier(let n): return "'\(n)'"
        case .keyword(let k): return "'\(k)'"
        case .number(let n): return "\(n)"
        case .string(let s): return "\"\(s)\""
        case .template: return "template"
        case .regex(let p, _): return "/\(p)/"
        case .punctuator(let p): return "'\(p)'"
        case .end: return "end of input"
        }
    }

    /// Ends a statement: a `;`, or (automatic insertion) a line break, a `}` or the end.
    private mutating func semicolon() throws(JSSyntaxError) {
        if eat(";") { return }
        if isPunct("}") || atEnd || token.newlineBefore { return }
        throw error("Expected ';'")
    }

    private mutating func identifierName() throws(JSSyntaxError) -> String {
        let start = position
        switch advance().kind {
        case .identifier(let name), .keyword(let name): return name
        default:
            throw error("Expected a name", at: start)
        }
    }

    // MARK: - Statements

    mutating func statement() throws(JSSyntaxError) -> Stmt {
        try enter()
        defer { nesting -= 1 }
        switch token.kind {
        case .punctuator("{"):
            return .block(try block())
        case .punctuator(";"):
            _ = advance()
            return .empty
        case .keyword("var"), .keyword("let"), .keyword("const"):
            let declaration = try variableDeclaration()
            try semicolon()
            return declaration
        case .keyword("function"):
            _ = advance()
            return .function(try functionRest(requireName: true))
        case .keyword("if"):
            _ = advance()
            try expect("(")
            let test = try expression()
            try expect(")")
            let consequent = try statement()
            var alternate: Stmt?
            if isKeyword("else") {
                _ = advance()
                alternate = try statement()
            }
            return .ifElse(test, consequent, alternate)
        case .keyword("for"):
            return try forStatement()
        case .keyword("while"):
            _ = advance()
            try expect("(")
            let test = try expression()
            try expect(")")
            return .whileLoop(test, try statement())
        case .keyword("do"):
            _ = advance()
            let body = try statement()
            guard isKeyword("while") else { throw error("Expected 'while'") }
            _ = advance()
            try expect("(")
            let test = try expression()
            try expect(")")
            _ = eat(";")
            return .doWhile(body, test)
        case .keyword("return"):
            _ = advance()
            if isPunct(";") || isPunct("}") || atEnd || token.newlineBefore {
                _ = eat(";")
                return .returnValue(nil)
            }
            let value = try expression()
            try semicolon()
            return .returnValue(value)
        case .keyword("break"), .keyword("continue"):
            let isBreak = isKeyword("break")
            _ = advance()
            var label: String?
            if case .identifier(let name) = token.kind, !token.newlineBefore {
                label = name
                _ = advance()
            }
            try semicolon()
            return isBreak ? .breakLoop(label) : .continueLoop(label)
        case .keyword("throw"):
            _ = advance()
            let value = try expression()
            try semicolon()
            return .throwValue(value)
        case .keyword("try"):
            return try tryStatement()
        case .keyword("switch"):
            return try switchStatement()
        case .identifier(let name) where peekKind() == .punctuator(":"):
            _ = advance()
            _ = advance()
            return .labeled(name, try statement())
        default:
            let value = try expression()
            try semicolon()
            return .expression(value)
        }
    }

    private mutating func block() throws(JSSyntaxError) -> [Stmt] {
        try expect("{")
        var statements: [Stmt] = []
        while !isPunct("}") {
            if atEnd { throw error("Expected '}'") }
            statements.append(try statement())
        }
        _ = advance()
        return statements
    }

    private mutating func variableDeclaration() throws(JSSyntaxError) -> Stmt {
        guard case .keyword(let kind) = advance().kind else { throw error("Expected a declaration") }
        var items: [(Pattern, Expr?)] = []
        repeat {
            let target = try bindingTarget()
            var initial: Expr?
            if eat("=") { initial = try assignment() }
            items.append((target, initial))
        } while eat(",")
        return .declaration(kind: kind, items)
    }

    /// A binding name or destructuring pattern (without its default).
    private mutating func bindingTarget() throws(JSSyntaxError) -> Pattern {
        try enter()
        defer { nesting -= 1 }
        if eat("{") {
            var entries: [(key: String, target: Pattern)] = []
            var rest: String?
            while !eat("}") {
                if eat("...") {
                    rest = try identifierName()
                } else {
                    let key = try propertyKeyName()
                    var target: Pattern = .name(key, default: nil)
                    if eat(":") { target = try bindingTarget() }
                    if eat("=") { target = target.withDefault(try assignment()) }
                    entries.append((key, target))
                }
                if !isPunct("}") { try expect(",") }
            }
            return .object(entries, rest: rest, default: nil)
        }
        if eat("[") {
            var items: [Pattern?] = []
            var rest: String?
            while !eat("]") {
                if isPunct(",") {
                    _ = advance()
                    items.append(nil)
                    continue
                }
                if eat("...") {
                    rest = try identifierName()
                } else {
                    var target = try bindingTarget()
                    if eat("=") { target = target.withDefault(try assignment()) }
                    items.append(target)
                }
                if !isPunct("]") { try expect(",") }
            }
            return .array(items, rest: rest, default: nil)
        }
        let start = position
        guard case .identifier(let name) = advance().kind else { throw error("Expected a name", at: start) }
        return .name(name, default: nil)
    }

    private mutating func propertyKeyName() throws(JSSyntaxError) -> String {
        let start = position
        switch advance().kind {
        case .identifier(let n), .keyword(let n), .string(let n): return n
        case .number(let n): return JSValue.number(n).toDisplayString()
        default:
            throw error("Expected a property name", at: start)
        }
    }

    private mutating func forStatement() throws(JSSyntaxError) -> Stmt {
        _ = advance()
        try expect("(")
        // for (x in o), for (var x in o), for (const x of a)
        var declarationKind: String?
        let save = position
        if case .keyword(let k) = token.kind, ["var", "let", "const"].contains(k) {
            declarationKind = k
            _ = advance()
        }
        if declarationKind != nil || { if case .identifier = token.kind { return true } else { return false } }()
            || isPunct("{") || isPunct("[")
        {
            if let target = try? bindingTarget(), isKeyword("in") || isKeyword("of") {
                let isOf = isKeyword("of")
                _ = advance()
                let object = try isOf ? assignment() : expression()
                try expect(")")
                return .forIn(declaration: declarationKind, target, object, body: try statement(), of: isOf)
            }
        }
        position = save
        var initial: Stmt?
        if !isPunct(";") {
            if isKeyword("var") || isKeyword("let") || isKeyword("const") {
                initial = try variableDeclaration()
            } else {
                initial = .expression(try expression())
            }
        }
        try expect(";")
        let test = isPunct(";") ? nil : try expression()
        try expect(";")
        let update = isPunct(")") ? nil : try expression()
        try expect(")")
        return .forLoop(init: initial, test: test, update: update, body: try statement())
    }

    private mutating func tryStatement() throws(JSSyntaxError) -> Stmt {
        _ = advance()
        let body = try block()
        var param: Pattern?
        var handler: [Stmt]?
        var finalizer: [Stmt]?
        if isKeyword("catch") {
            _ = advance()
            if eat("(") {
                param = try bindingTarget()
                try expect(")")
            }
            handler = try block()
        }
        if isKeyword("finally") {
            _ = advance()
            finalizer = try block()
        }
        guard handler != nil || finalizer != nil else { throw error("Expected 'catch' or 'finally'") }
        return .tryCatch(body: body, param: param, handler: handler, finalizer: finalizer)
    }

    private mutating func switchStatement() throws(JSSyntaxError) -> Stmt {
        _ = advance()
        try expect("(")
        let discriminant = try expression()
        try expect(")")
        try expect("{")
        var cases: [(test: Expr?, body: [Stmt])] = []
        while !eat("}") {
            var test: Expr?
            if isKeyword("case") {
                _ = advance()
                test = try expression()
            } else if isKeyword("default") {
                _ = advance()
            } else {
                throw error("Expected 'case' or 'default'")
            }
            try expect(":")
            var body: [Stmt] = []
            while !isKeyword("case"), !isKeyword("default"), !isPunct("}") {
                if atEnd { throw error("Expected '}'") }
                body.append(try statement())
            }
            cases.append((test, body))
        }
        return .switchCase(discriminant, cases)
    }

    /// After `function`: an optional name, the parameters and the body.
    private mutating func functionRest(requireName: Bool) throws(JSSyntaxError) -> FunctionNode {
        var name: String?
        if case .identifier(let n) = token.kind {
            name = n
            _ = advance()
        } else if requireName {
            throw error("Expected a function name")
        }
        let params = try parameters()
        let body = try block()
        return FunctionNode(name: name, params: params, body: body, isArrow: false, expressionBody: nil)
    }

    private mutating func parameters() throws(JSSyntaxError) -> [Pattern] {
        try expect("(")
        var params: [Pattern] = []
        while !eat(")") {
            if eat("...") {
                params.append(.array([], rest: try identifierName(), default: nil))  // rest parameter
            } else {
                var target = try bindingTarget()
                if eat("=") { target = target.withDefault(try assignment()) }
                params.append(target)
            }
            if !isPunct(")") { try expect(",") }
        }
        return params
    }

    // MARK: - Expressions

    mutating func expression() throws(JSSyntaxError) -> Expr {
        let first = try assignment()
        guard isPunct(",") else { return first }
        var items = [first]
        while eat(",") { items.append(try assignment()) }
        return .sequence(items)
    }

    /// Whether an arrow function starts here: `x =>` or `( … ) =>`.
    private func arrowAhead() -> Bool {
        if case .identifier = token.kind, peekKind() == .punctuator("=>") { return true }
        guard isPunct("(") else { return false }
        let close = matching[position]
        return close >= 0 && close + 1 < tokens.count && tokens[close + 1].kind == .punctuator("=>")
    }

    private mutating func arrowFunction() throws(JSSyntaxError) -> Expr {
        var params: [Pattern]
        if case .identifier(let name) = token.kind {
            _ = advance()
            params = [.name(name, default: nil)]
        } else {
            params = try parameters()
        }
        try expect("=>")
        if isPunct("{") {
            return .function(
                FunctionNode(name: nil, params: params, body: try block(), isArrow: true, expressionBody: nil))
        }
        let body = try assignment()
        return .function(FunctionNode(name: nil, params: params, body: [], isArrow: true, expressionBody: body))
    }

    mutating func assignment() throws(JSSyntaxError) -> Expr {
        try enter()
        defer { nesting -= 1 }
        if arrowAhead() { return try arrowFunction() }
        let target = try conditional()
        if case .punctuator(let op) = token.kind,
            ["=", "+=", "-=", "*=", "/=", "%=", "**=", "<<=", ">>=", ">>>=", "&=", "|=", "^=", "&&=", "||=", "??="]
                .contains(op)
        {
            switch target {
            case .identifier, .member, .index: break
            default: throw error("Invalid assignment target")
            }
            _ = advance()
            return .assign(op, target, try assignment())
        }
        return target
    }

    private mutating func conditional() throws(JSSyntaxError) -> Expr {
        let test = try binary(0)
        guard eat("?") else { return test }
        let consequent = try assignment()
        try expect(":")
        return .conditional(test, consequent, try assignment())
    }

    private static let precedence: [String: Int] = [
        "??": 1, "||": 2, "&&": 3, "|": 4, "^": 5, "&": 6, "==": 7, "!=": 7, "===": 7, "!==": 7, "<": 8, ">": 8,
        "<=": 8, ">=": 8, "instanceof": 8, "in": 8, "<<": 9, ">>": 9, ">>>": 9, "+": 10, "-": 10, "*": 11, "/": 11,
        "%": 11, "**": 12,
    ]

    private func binaryOperator() -> String? {
        switch token.kind {
        case .punctuator(let p) where Self.precedence[p] != nil: return p
        case .keyword("instanceof"): return "instanceof"
        case .keyword("in"): return "in"
        default: return nil
        }
    }

    private mutating func binary(_ minimum: Int) throws(JSSyntaxError) -> Expr {
        try enter()
        defer { nesting -= 1 }
        var left = try unary()
        // Each operator in a chain nests the tree one deeper (`a + b + c` is `(a + b) + c`).
        var chain = 0
        defer { nesting -= chain }
        while let op = binaryOperator(), let level = Self.precedence[op], level > minimum {
            try enter()
            chain += 1
            _ = advance()
            // `**` is right-associative.
            let right = try binary(op == "**" ? level - 1 : level)
            if op == "&&" || op == "||" || op == "??" {
                left = .logical(op, left, right)
            } else {
                left = .binary(op, left, right)
            }
        }
        return left
    }

    private mutating func unary() throws(JSSyntaxError) -> Expr {
        try enter()
        defer { nesting -= 1 }
        switch token.kind {
        case .punctuator(let p) where ["!", "-", "+", "~"].contains(p):
            _ = advance()
            return .unary(p, try unary())
        case .punctuator(let p) where p == "++" || p == "--":
            _ = advance()
            return .update(p, prefix: true, try unary())
        case .keyword(let k) where ["typeof", "void", "delete"].contains(k):
            _ = advance()
            return .unary(k, try unary())
        default:
            let value = try postfix()
            if case .punctuator(let p) = token.kind, p == "++" || p == "--", !token.newlineBefore {
                _ = advance()
                return .update(p, prefix: false, value)
            }
            return value
        }
    }

    private mutating func arguments() throws(JSSyntaxError) -> [Expr] {
        try expect("(")
        var args: [Expr] = []
        while !eat(")") {
            if eat("...") {
                args.append(.spread(try assignment()))
            } else {
                args.append(try assignment())
            }
            if !isPunct(")") { try expect(",") }
        }
        return args
    }

    private mutating func postfix() throws(JSSyntaxError) -> Expr {
        var value: Expr
        // Each member access or call in a chain nests the tree one deeper (`a.b.c` is `(a.b).c`).
        var chain = 0
        defer { nesting -= chain }
        if isKeyword("new") {
            _ = advance()
            var callee = try primary()
            while true {
                try enter()
                chain += 1
                if eat(".") {
                    callee = .member(callee, try identifierName(), optional: false)
                } else if isPunct("[") {
                    _ = advance()
                    let key = try expression()
                    try expect("]")
                    callee = .index(callee, key, optional: false)
                } else {
                    break
                }
            }
            value = .new(callee, isPunct("(") ? try arguments() : [])
        } else {
            value = try primary()
        }
        while true {
            try enter()
            chain += 1
            if eat(".") {
                value = .member(value, try identifierName(), optional: false)
            } else if eat("?.") {
                if isPunct("(") {
                    value = .call(value, try arguments(), optional: true)
                } else if eat("[") {
                    let key = try expression()
                    try expect("]")
                    value = .index(value, key, optional: true)
                } else {
                    value = .member(value, try identifierName(), optional: true)
                }
            } else if isPunct("[") {
                _ = advance()
                let key = try expression()
                try expect("]")
                value = .index(value, key, optional: false)
            } else if isPunct("(") {
                value = .call(value, try arguments(), optional: false)
            } else if case .template(let parts) = token.kind {
                // A tagged template is not supported; treat as an error.
                _ = parts
                throw error("Tagged templates are not supported")
            } else {
                return value
            }
        }
    }

    private mutating func primary() throws(JSSyntaxError) -> Expr {
        try enter()
        defer { nesting -= 1 }
        let start = position
        let t = advance()
        switch t.kind {
        case .number(let n): return .number(n)
        case .string(let s): return .string(s)
        case .template(let parts):
            var exprs: [Expr] = []
            for part in parts {
                switch part {
                case .text(let text): exprs.append(.string(text))
                case .code(let code):
                    var inner = Parser(tokens: try Lexer.tokenize(code, deadline: deadline), nesting: nesting)
                    inner.deadline = deadline
                    exprs.append(try inner.expression())
                }
            }
            return .template(exprs)
        case .regex(let pattern, let flags): return .regex(pattern, flags)
        case .identifier(let name): return .identifier(name)
        case .keyword("true"): return .bool(true)
        case .keyword("false"): return .bool(false)
        case .keyword("null"): return .null
        case .keyword("undefined"): return .undefined
        case .keyword("this"): return .this
        case .keyword("function"): return .function(try functionRest(requireName: false))
        case .punctuator("("):
            let inner = try expression()
            try expect(")")
            return inner
        case .punctuator("["):
            var items: [Expr?] = []
            while !eat("]") {
                if isPunct(",") {
                    _ = advance()
                    items.append(nil)
                    continue
                }
                items.append(eat("...") ? .spread(try assignment()) : try assignment())
                if !isPunct("]") { try expect(",") }
            }
            return .array(items)
        case .punctuator("{"):
            var properties: [Expr.Property] = []
            while !eat("}") {
                if eat("...") {
                    properties.append(.spread(try assignment()))
                } else {
                    var key: Expr.PropertyKey
                    var shorthandName: String?
                    if eat("[") {
                        key = .computed(try assignment())
                        try expect("]")
                    } else {
                        if case .identifier(let n) = token.kind { shorthandName = n }
                        key = .name(try propertyKeyName())
                    }
                    if eat(":") {
                        properties.append(.value(key: key, try assignment()))
                    } else if isPunct("(") {
                        let params = try parameters()
                        let body = try block()
                        var name: String?
                        if case .name(let n) = key { name = n }
                        properties.append(
                            .value(
                                key: key,
                                .function(
                                    FunctionNode(
                                        name: name, params: params, body: body, isArrow: false, expressionBody: nil)
                                )))
                    } else if let shorthandName {
                        properties.append(.value(key: key, .identifier(shorthandName)))
                    } else {
                        throw error("Expected ':'")
                    }
                }
                if !isPunct("}") { try expect(",") }
            }
            return .object(properties)
        default:
            throw error("Unexpected token", at: start)
        }
    }
}

extension Pattern {
    func withDefault(_ value: Expr) -> Pattern {
        switch self {
        case .name(let n, _): return .name(n, default: value)
        case .object(let e, let r, _): return .object(e, rest: r, default: value)
        case .array(let i, let r, _): return .array(i, rest: r, default: value)
        }
    }
}
