import Foundation

/// A token of JavaScript source.
struct Token: Equatable {
    enum Kind: Equatable {
        case identifier(String)
        case keyword(String)
        case number(Double)
        case string(String)
        case template([TemplatePart])
        case regex(pattern: String, flags: String)
        case punctuator(String)
        case end
    }

    enum TemplatePart: Equatable {
        case text(String)
        case code(String)
    }

    var kind: Kind
    /// A line break comes before this token (for automatic semicolon insertion).
    var newlineBefore: Bool
    var offset: Int
}

/// An error in JavaScript source: what CouchDB reports as a compilation error.
public struct JSSyntaxError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public var offset: Int
    public var description: String { "SyntaxError: \(message) (at \(offset))" }
}

/// Splits JavaScript source into tokens.
struct Lexer {
    static let keywords: Set<String> = [
        "var", "let", "const", "function", "return", "if", "else", "for", "while", "do", "break", "continue",
        "new", "delete", "typeof", "instanceof", "in", "of", "this", "null", "true", "false", "undefined", "throw",
        "try", "catch", "finally", "switch", "case", "default", "void",
    ]

    /// Punctuators of more than one character, longest first.
    private static let punctuators: [(String, [Character])] = [
        ">>>=", "...", "===", "!==", "**=", "<<=", ">>=", ">>>", "=>", "==", "!=", "<=", ">=", "&&", "||", "??",
        "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "**", "<<", ">>", "?.",
    ].map { ($0, Array($0)) }
    private static let punctuatorStarts = Set(punctuators.map { $0.1[0] })
    private static let punctuatorSeconds = Set(punctuators.map { $0.1[1] })

    private let chars: [Character]
    private var index = 0
    private var tokens: [Token] = []

    init(_ source: String) { chars = Array(source) }

    static func tokenize(_ source: String, deadline: UInt64 = .max) throws(JSSyntaxError) -> [Token] {
        var lexer = Lexer(source)
        lexer.deadline = deadline
        return try lexer.run()
    }

    private var deadline: UInt64 = .max

    private var current: Character? { index < chars.count ? chars[index] : nil }
    private func peek(_ ahead: Int = 1) -> Character? {
        index + ahead < chars.count ? chars[index + ahead] : nil
    }

    /// Whether a `/` here starts a regular expression (no value just before it).
    private var regexAllowed: Bool {
        guard let last = tokens.last else { return true }
        switch last.kind {
        case .number, .string, .template, .regex, .identifier: return false
        case .keyword(let word): return !["this", "null", "true", "false", "undefined"].contains(word)
        case .punctuator(let p): return ![")", "]", "}", "++", "--"].contains(p)
        case .end: return true
        }
    }

    private mutating func run() throws(JSSyntaxError) -> [Token] {
        var newline = false
        while let c = current {
            if c == "\n" || c == "\r" || c == "\u{2028}" || c == "\u{2029}" {
                newline = true
                index += 1
                continue
            }
            if c.isWhitespace {
                index += 1
                continue
            }
            if c == "/", peek() == "/" {
                while let d = current, d != "\n" { index += 1 }
                continue
            }
            if c == "/", peek() == "*" {
                index += 2
                while index < chars.count, !(chars[index] == "*" && peek() == "/") {
                    if chars[index] == "\n" { newline = true }
                    index += 1
                }
                index += 2
                continue
            }
            let start = index
            let kind = try scan()
            tokens.append(Token(kind: kind, newlineBefore: newline, offset: start))
            if tokens.count & 4095 == 0, deadline != .max, DispatchTime.now().uptimeNanoseconds > deadline {
                throw JSSyntaxError(message: "the source took longer than the time budget to read", offset: start)
            }
            newline = false
        }
        tokens.append(Token(kind: .end, newlineBefore: true, offset: chars.count))
        return tokens
    }

    private mutating func scan() throws(JSSyntaxError) -> Token.Kind {
        let c = current!
        if c.isLetter || c == "_" || c == "$" {
            var name = ""
            while let d = current, d.isLetter || d.isNumber || d == "_" || d == "$" {
                name.append(d)
                index += 1
            }
            return Self.keywords.contains(name) ? .keyword(name) : .identifier(name)
        }
        if c.isNumber || (c == "." && (peek()?.isNumber ?? false)) { return try number() }
        if c == "\"" || c == "'" { return .string(try string(quote: c)) }
        if c == "`" { return try template() }
        if c == "/", regexAllowed { return try regex() }
        if let next = peek(), Self.punctuatorStarts.contains(c), Self.punctuatorSeconds.contains(next) {
            for (p, characters) in Self.punctuators where matches(characters) {
                index += characters.count
                return .punctuator(p)
            }
        }
        if "{}()[];,<>+-*/%&|^!~?:=.".contains(c) {
            index += 1
            return .punctuator(String(c))
        }
        throw JSSyntaxError(message: "Unexpected character '\(c)'", offset: index)
    }

    private func matches(_ text: [Character]) -> Bool {
        guard index + text.count <= chars.count else { return false }
        for (i, ch) in text.enumerated() where chars[index + i] != ch { return false }
        return true
    }

    private mutating func number() throws(JSSyntaxError) -> Token.Kind {
        let start = index
        if current == "0", let x = peek(), "xXoObB".contains(x) {
            index += 2
            var digits = ""
            while let d = current, d.isHexDigit {
                digits.append(d)
                index += 1
            }
            let radix = "xX".contains(x) ? 16 : "oO".contains(x) ? 8 : 2
            guard let value = UInt64(digits, radix: radix) else {
                throw JSSyntaxError(message: "Invalid number", offset: start)
            }
            return .number(Double(value))
        }
        var text = ""
        while let d = current, d.isNumber || d == "." || d == "_" {
            if d != "_" { text.append(d) }
            index += 1
        }
        if let e = current, e == "e" || e == "E" {
            text.append("e")
            index += 1
            if let s = current, s == "+" || s == "-" {
                text.append(s)
                index += 1
            }
            while let d = current, d.isNumber {
                text.append(d)
                index += 1
            }
        }
        guard let value = Double(text) else { throw JSSyntaxError(message: "Invalid number \(text)", offset: start) }
        return .number(value)
    }

    private mutating func escape() throws(JSSyntaxError) -> String {
        index += 1  // the backslash
        guard let e = current else { throw JSSyntaxError(message: "Unterminated string", offset: index) }
        index += 1
        switch e {
        case "n": return "\n"
        case "t": return "\t"
        case "r": return "\r"
        case "b": return "\u{8}"
        case "f": return "\u{c}"
        case "v": return "\u{b}"
        case "0" where !(current?.isNumber ?? false): return "\0"
        case "\n": return ""
        case "x":
            let hex = String(chars[index..<min(index + 2, chars.count)])
            index += 2
            guard let v = UInt32(hex, radix: 16), let u = Unicode.Scalar(v) else {
                throw JSSyntaxError(message: "Invalid escape", offset: index)
            }
            return String(Character(u))
        case "u":
            var hex = ""
            if current == "{" {
                index += 1
                while let d = current, d != "}" {
                    hex.append(d)
                    index += 1
                }
                index += 1
            } else {
                hex = String(chars[index..<min(index + 4, chars.count)])
                index += 4
            }
            guard let v = UInt32(hex, radix: 16) else { throw JSSyntaxError(message: "Invalid escape", offset: index) }
            // A surrogate pair written as two escapes.
            if (0xD800...0xDBFF).contains(v), current == "\\", peek() == "u" {
                let low = String(chars[(index + 2)..<min(index + 6, chars.count)])
                if let l = UInt32(low, radix: 16), (0xDC00...0xDFFF).contains(l) {
                    index += 6
                    let scalar = 0x10000 + ((v - 0xD800) << 10) + (l - 0xDC00)
                    return Unicode.Scalar(scalar).map { String(Character($0)) } ?? "\u{FFFD}"
                }
            }
            return Unicode.Scalar(v).map { String(Character($0)) } ?? "\u{FFFD}"
        default: return String(e)
        }
    }

    private mutating func string(quote: Character) throws(JSSyntaxError) -> String {
        let start = index
        index += 1
        var text = ""
        while true {
            guard let c = current else { throw JSSyntaxError(message: "Unterminated string", offset: start) }
            if c == quote {
                index += 1
                return text
            }
            if c == "\\" {
                text += try escape()
                continue
            }
            if c == "\n" { throw JSSyntaxError(message: "Unterminated string", offset: start) }
            text.append(c)
            index += 1
        }
    }

    private mutating func template() throws(JSSyntaxError) -> Token.Kind {
        let start = index
        index += 1
        var parts: [Token.TemplatePart] = []
        var text = ""
        while true {
            guard let c = current else { throw JSSyntaxError(message: "Unterminated template", offset: start) }
            if c == "`" {
                index += 1
                parts.append(.text(text))
                return .template(parts)
            }
            if c == "\\" {
                text += try escape()
                continue
            }
            if c == "$", peek() == "{" {
                parts.append(.text(text))
                text = ""
                index += 2
                var depth = 1
                var code = ""
                while let d = current {
                    if d == "{" { depth += 1 }
                    if d == "}" {
                        depth -= 1
                        if depth == 0 { break }
                    }
                    code.append(d)
                    index += 1
                }
                index += 1
                parts.append(.code(code))
                continue
            }
            text.append(c)
            index += 1
        }
    }

    private mutating func regex() throws(JSSyntaxError) -> Token.Kind {
        let start = index
        index += 1
        var pattern = ""
        var inClass = false
        while true {
            guard let c = current, c != "\n" else {
                throw JSSyntaxError(message: "Unterminated regular expression", offset: start)
            }
            if c == "\\" {
                pattern.append(c)
                index += 1
                if let d = current {
                    pattern.append(d)
                    index += 1
                }
                continue
            }
            if c == "[" { inClass = true }
            if c == "]" { inClass = false }
            if c == "/", !inClass {
                index += 1
                break
            }
            pattern.append(c)
            index += 1
        }
        var flags = ""
        while let f = current, f.isLetter {
            flags.append(f)
            index += 1
        }
        return .regex(pattern: pattern, flags: flags)
    }
}
