import Foundation
import SwiftCouch
import Testing

/// Three animals and a design document with a Clouseau (`indexes`) and a Nouveau (`nouveau`) index on their names.
private func writeAnimals(_ client: CouchDBClient, _ db: String) async throws {
    let animals: [JSONValue] = [
        ["_id": "a1", "name": "red fox", "legs": 4],
        ["_id": "a2", "name": "grey fox", "legs": 4],
        ["_id": "a3", "name": "owl", "legs": 2],
    ]
    _ = try await client.value(BulkDocsOperation(database: db, documents: animals))
    let design: JSONValue = [
        "indexes": ["by_name": ["index": "function(doc) { if (doc.name) { index('name', doc.name); } }"]],
        "nouveau": ["by_name": ["index": "function(doc) { if (doc.name) { index('text', 'name', doc.name); } }"]],
    ]
    _ = try await client.value(PutDocumentOperation(database: db, id: "_design/search", document: design))
}

@Suite("End to end: search (Clouseau and Nouveau), where the server has it")
struct SearchEndToEndTests {
    @Test("_search GET and POST, _search_info; skipped with a printed reason when the server has no search")
    func clouseauSearch() async throws {
        try await withDatabase("search") { client, db in
            try await writeAnimals(client, db)
            do {
                let found = try await client.value(
                    SearchOperation<JSONValue>(
                        database: db, designDocument: "search", index: "by_name",
                        query: SearchQuery("name:fox", includeDocs: true)))
                #expect(found.totalRows == 2)
                #expect(Set(found.rows.map(\.id)) == ["a1", "a2"])
                #expect(found.rows.allSatisfy { $0.doc?["legs"] == 4 })
                let byGet = try await client.value(
                    SearchOperation<JSONValue>(
                        database: db, designDocument: "search", index: "by_name", query: SearchQuery("name:owl"),
                        httpMethod: .get))
                #expect(byGet.rows.map(\.id) == ["a3"])
                let info = try await client.value(
                    GetSearchInfoOperation(database: db, designDocument: "search", index: "by_name"))
                #expect(info.name.contains("by_name"))
            } catch let error as CouchError {
                expectUnsupported("_search (Clouseau)", error)
            }
        }
    }

    @Test("_search_analyze; skipped with a printed reason when the server has no search")
    func analyze() async throws {
        let client = E2EEnvironment.shared.client()
        do {
            let tokens = try await client.value(SearchAnalyzeOperation(analyzer: "standard", text: "Red Fox"))
            #expect(tokens.tokens == ["red", "fox"])
        } catch {
            expectUnsupported("_search_analyze", error)
        }
    }

    @Test("_nouveau; skipped with a printed reason when the server has no Nouveau")
    func nouveau() async throws {
        try await withDatabase("nouveau") { client, db in
            try await writeAnimals(client, db)
            do {
                let found = try await client.value(
                    NouveauSearchOperation<JSONValue>(
                        database: db, designDocument: "search", index: "by_name", query: SearchQuery("name:fox")))
                #expect(found.totalHits == 2)
                #expect(Set(found.hits.map(\.id)) == ["a1", "a2"])
            } catch let error as CouchError {
                expectUnsupported("_nouveau", error)
            }
        }
    }

    @Test("Mango text indexes; skipped with a printed reason when the server has no search")
    func mangoText() async throws {
        try await withDatabase("mango-text") { client, db in
            try await writeAnimals(client, db)
            do {
                let created = try await client.value(
                    CreateIndexOperation(
                        database: db, index: .text(fields: [TextIndexField("name", .string)]), name: "text-name"))
                #expect(["created", "exists"].contains(created.result))
                let found = try await client.value(
                    FindOperation<JSONValue>(database: db, selector: ["$text": "fox"]))
                #expect(found.docs.count == 2)
            } catch let error as CouchError {
                expectUnsupported("Mango text indexes", error)
            }
        }
    }
}
