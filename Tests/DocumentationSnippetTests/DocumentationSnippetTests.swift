import Foundation
import Testing

/// The documentation's Swift snippets are compiled: `Snippets.swift` is generated from them, and
/// this test fails when the documentation changed and the file was not regenerated.
@Suite("Documentation snippets")
struct DocumentationSnippetTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// README.md, then the DocC articles, in a stable order.
    static func documents() throws -> [(name: String, text: String)] {
        var names = ["README.md"]
        for catalog in [
            "Sources/SwiftCouch/SwiftCouch.docc", "Sources/SwiftCouchTesting/SwiftCouchTesting.docc",
            "Sources/SwiftCouchStore/SwiftCouchStore.docc", "Sources/SwiftCouchSync/SwiftCouchSync.docc",
        ] {
            let directory = root.appendingPathComponent(catalog)
            let files = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
            names += files.filter { $0.hasSuffix(".md") }.sorted().map { "\(catalog)/\($0)" }
        }
        return try names.map { name in
            (name, try String(contentsOf: root.appendingPathComponent(name), encoding: .utf8))
        }
    }

    @Test("Snippets.swift is generated from the current documentation (so every snippet compiles)")
    func snippetsAreCurrent() throws {
        let snippets = try Self.documents().flatMap { SnippetExtraction.snippets(in: $0.text, source: $0.name) }
        #expect(snippets.count >= 7, "the README alone has seven compiled Swift snippets")
        let expected = SnippetExtraction.swiftFile(for: snippets)
        let file = Self.root.appendingPathComponent("Tests/DocumentationSnippetTests/Snippets.swift")
        let committed = (try? String(contentsOf: file, encoding: .utf8)) ?? ""
        if committed != expected, ProcessInfo.processInfo.environment["SWIFTCOUCH_UPDATE_SNIPPETS"] == "1" {
            try expected.write(to: file, atomically: true, encoding: .utf8)
            return
        }
        #expect(
            committed == expected,
            """
            The documentation's Swift snippets changed: regenerate Tests/DocumentationSnippetTests/Snippets.swift with \
            .ci/update-snippets (it empties the file, runs this test with SWIFTCOUCH_UPDATE_SNIPPETS=1, builds).
            """)
    }

    @Test("Extraction: skip markers, imports gathered, context declared only when used and not declared")
    func extraction() {
        let markdown = """
            <!-- snippet: skip -->
            ```swift
            .package(url: "x")
            ```
            text
            ```swift
            import SwiftCouchTesting
            let client = CouchDBClient(url: url)
            print(configuration)
            ```
            """
        let snippets = SnippetExtraction.snippets(in: markdown, source: "T.md")
        #expect(snippets.count == 1)
        #expect(snippets.first?.line == 7)
        let file = SnippetExtraction.swiftFile(for: snippets)
        #expect(file.contains("import SwiftCouchTesting\n"))
        #expect(file.contains("let url = SnippetContext.url"))
        #expect(file.contains("var configuration = Configuration()"))
        #expect(!file.contains("let client = SnippetContext.client"))
        #expect(!file.contains(".package("))
    }
}
