import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import Testing

@Suite("Idempotency is a property of the operation's kind", .ownThreads)
struct IdempotencyKindTests {
    @Test("IdempotentOperation kinds say true; writes that could duplicate say false or leave it to the pipeline")
    func kinds() throws {
        #expect(FindOperation<JSONValue>(database: "db", selector: .field("a").equals(1)).isIdempotent == true)
        #expect(DeleteDatabaseOperation(name: "db").isIdempotent == true)
        #expect(
            KeyPageOperation(AllDocsOperation<JSONValue>(database: "db"), pageSize: 5).isIdempotent == true)
        #expect(
            QueryViewOperation<JSONValue, JSONValue, JSONValue>(database: "db", design: "d", view: "v")
                .isIdempotent == true)
        #expect(CreateDocumentOperation(database: "db", document: ["a": 1] as JSONValue).isIdempotent == false)
        #expect(GetDocumentOperation<JSONValue>(database: "db", id: "a").isIdempotent == nil)  // judged: GET
        #expect(BulkDocsOperation(database: "db", documents: [["a": 1] as JSONValue]).isIdempotent == false)
    }
}
