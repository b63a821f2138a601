import Foundation
import SwiftCouch

/// What the documentation's snippets may use without declaring it (see `SnippetExtraction`).
/// The snippets are compiled, never run: nothing here talks to a server.
enum SnippetContext {
    static let url = URL(string: "http://127.0.0.1:5984")!
    static let credentials = Credentials(username: "admin", password: "password")
    static let client = CouchDBClient(url: url, credentials: credentials)
    static let destination = FileManager.default.temporaryDirectory.appendingPathComponent("cover.png")
}

/// The document type of the README's tour.
struct Album: Codable, Sendable {
    var _id: String?
    var _rev: String?
    var title: String
    var year: Int
}

// Functions the snippets call to stand for the app's own code.
func show<T>(_ rows: T) {}
func remember(_ token: String?) {}
func apply<T>(_ change: T) {}
func save<T>(_ checkpoint: T) {}
