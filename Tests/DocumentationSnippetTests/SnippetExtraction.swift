import Foundation

/// Turns the Swift code blocks of the documentation (README.md and the DocC articles) into one
/// Swift file that the compiler checks: each block becomes the body of its own `async throws`
/// function, so every snippet compiles as written inside an `async` function in Swift 6.
///
/// - A block preceded by `<!-- snippet: skip -->` (a `Package.swift` fragment, say) is left out.
/// - `import` lines are gathered at the top of the file.
/// - Names a snippet uses without declaring (`client`, `configuration`, `url` …) come from
///   ``SnippetContext``: the function opens with a local for each of them that the snippet
///   mentions and does not declare itself.
enum SnippetExtraction {
    struct Snippet {
        var source: String
        var line: Int
        var code: String
    }

    /// Locals a snippet may use without declaring them, and how each is declared.
    static let context: [(name: String, declaration: String)] = [
        ("client", "let client = SnippetContext.client"),
        ("configuration", "var configuration = Configuration()"),
        ("url", "let url = SnippetContext.url"),
        ("credentials", "let credentials = SnippetContext.credentials"),
        ("hejira", "let hejira = Album(title: \"Hejira\", year: 1976)"),
        ("remastered", "let remastered = Album(title: \"Hejira (remastered)\", year: 2024)"),
        ("myQueue", "let myQueue = OperationQueue()"),
        ("saved", "let saved: CouchSequence? = nil"),
        ("albums", "let albums: [Album] = []"),
        ("rev", "let rev = \"1-x\""),
        ("destination", "let destination = SnippetContext.destination"),
        ("key", "let key = \"api-key\""),
        ("jwt", "let jwt = \"header.payload.signature\""),
        ("db", "let db = SnippetContext.client.database(\"albums\")"),
    ]

    /// The Swift blocks of one Markdown file, in order.
    static func snippets(in markdown: String, source: String) -> [Snippet] {
        var result: [Snippet] = []
        var current: [String]?
        var start = 0
        var skipNext = false
        for (index, line) in markdown.components(separatedBy: "\n").enumerated() {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if current == nil {
                if trimmed == "<!-- snippet: skip -->" {
                    skipNext = true
                } else if trimmed == "```swift" {
                    current = []
                    start = index + 2
                } else if !trimmed.isEmpty {
                    skipNext = false
                }
            } else if trimmed == "```" {
                if !skipNext {
                    result.append(Snippet(source: source, line: start, code: current!.joined(separator: "\n")))
                }
                current = nil
                skipNext = false
            } else {
                current!.append(line)
            }
        }
        return result
    }

    /// The Swift file that compiles `snippets`.
    static func swiftFile(for snippets: [Snippet]) -> String {
        var imports: Set<String> = ["import Foundation", "import SwiftCouch"]
        var functions: [String] = []
        for (number, snippet) in snippets.enumerated() {
            var body: [String] = []
            for line in snippet.code.components(separatedBy: "\n") {
                if line.hasPrefix("import ") {
                    imports.insert(line.trimmingCharacters(in: .whitespaces))
                } else {
                    body.append(line)
                }
            }
            let code = withoutStringLiterals(body.joined(separator: "\n"))
            var prelude: [String] = []
            for (name, declaration) in context where mentions(code, name) && !declares(code, name) {
                prelude.append("    " + declaration)
            }
            // A snippet may end by declaring what the reader goes on to use (`let client = …`).
            let used = topLevelDeclarations(in: body).map { "    _ = \($0)" }
            let indented = body.map { $0.isEmpty ? "" : "    " + $0 } + used
            functions.append(
                """
                // \(snippet.source), line \(snippet.line)
                func snippet\(number + 1)() async throws {
                \((prelude + indented).joined(separator: "\n"))
                }
                """)
        }
        return """
            // Generated from the documentation's Swift code blocks by SnippetExtraction: do not edit.
            // Regenerate: .ci/update-snippets
            // swift-format-ignore-file
            \(imports.sorted().joined(separator: "\n"))

            \(functions.joined(separator: "\n\n"))

            """
    }

    /// The code with its string literals emptied and its comments removed (a name there is not a use).
    static func withoutStringLiterals(_ code: String) -> String {
        code.replacingOccurrences(of: ##"#"[^\n]*?"#|"(?:[^"\\\n]|\\.)*""##, with: "\"\"", options: .regularExpression)
            .replacingOccurrences(of: "//[^\n]*", with: "", options: .regularExpression)
    }

    /// The names a snippet declares with `let`/`var` at its top level (not indented).
    static func topLevelDeclarations(in lines: [String]) -> [String] {
        lines.compactMap { line -> String? in
            guard let match = line.range(of: #"^(let|var) [A-Za-z_][A-Za-z0-9_]*"#, options: .regularExpression)
            else { return nil }
            return String(line[match].split(separator: " ")[1])
        }
    }

    /// Whether `code` uses `name` (an argument label such as `url:` is not a use).
    static func mentions(_ code: String, _ name: String) -> Bool {
        code.range(of: "(?<![A-Za-z0-9_.])\(name)(?![A-Za-z0-9_]|\\s*:[^:])", options: .regularExpression) != nil
    }

    static func declares(_ code: String, _ name: String) -> Bool {
        code.range(of: "(let|var)\\s+\(name)(?![A-Za-z0-9_])", options: .regularExpression) != nil
    }
}
