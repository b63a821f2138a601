import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

/// Hostile input is refused before anything is sent: `.`/`..` path segments (which URL
/// normalisation and proxies resolve into another resource) and CR, LF or NUL in any header value.
@Suite("Hostile input: dot segments and header injection are refused, nothing is sent", .ownThreads)
struct HostileInputTests {
    static let ok = SimulatedResponse.json(200, #"{"ok":true}"#)

    /// Runs `operation` against a transport that records requests; returns the error and the count.
    static func refused<Op: CouchOperation>(_ operation: Op) -> (CouchError?, Int) {
        let run = Simulation.run(operation, responses: [ok])
        return (run.error, run.requests.count)
    }

    static func expectRefused<Op: CouchOperation>(
        _ operation: Op, mentioning words: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let (error, sent) = refused(operation)
        #expect(
            error?.kind == .validation, "\(Op.self) was not refused: \(String(describing: error))",
            sourceLocation: sourceLocation)
        #expect(error?.message.contains(words) == true, "\(String(describing: error))", sourceLocation: sourceLocation)
        #expect(sent == 0, "\(Op.self) sent \(sent) requests", sourceLocation: sourceLocation)
    }

    @Test(
        "Document ids '.' and '..' (plain, _design/, _local/) are refused in validate",
        arguments: [
            ".", "..", "_design/..", "_local/.", "_design/.",
        ])
    func dotDocumentIDs(id: String) {
        Self.expectRefused(GetDocumentOperation<JSONValue>(database: "db", id: id), mentioning: "refused")
        Self.expectRefused(
            PutDocumentOperation(database: "db", id: id, document: ["a": 1] as [String: Int]), mentioning: "refused")
        Self.expectRefused(DeleteDocumentOperation(database: "db", id: id, revision: "1-a"), mentioning: "refused")
        #expect(throws: CouchError.self) { try CouchValidation.validateDocumentID(id) }
    }

    @Test("Ids that merely contain dots are fine: 'a.b', '...', '.hidden'")
    func dotsInsideIDs() throws {
        for id in ["a.b", "...", ".hidden", "a/../b"] {
            let run = Simulation.run(GetDocumentOperation<JSONValue>(database: "db", id: id), responses: [Self.ok])
            #expect(run.requests.count == 1)
            #expect(run.requests.first?.path.contains("/../") == false)
        }
    }

    @Test("Attachment names with '.' or '..' parts are refused", arguments: ["..", "../_users", "a/../b", "a/./b"])
    func dotAttachmentNames(name: String) {
        Self.expectRefused(
            GetAttachmentOperation(database: "db", documentID: "doc", name: name), mentioning: "Attachment name")
    }

    @Test("Design document, view and partition names of '..' are refused by the pipeline, whatever the operation")
    func dotDesignAndView() {
        Self.expectRefused(
            QueryViewOperation<JSONValue, JSONValue, JSONValue>(database: "db", design: "..", view: "v"),
            mentioning: "refused")
        Self.expectRefused(
            QueryViewOperation<JSONValue, JSONValue, JSONValue>(database: "db", design: "d", view: ".."),
            mentioning: "refused")
        Self.expectRefused(
            QueryViewOperation<JSONValue, JSONValue, JSONValue>(
                database: "db", design: "d", view: "v", partition: ".."),
            mentioning: "refused")
        Self.expectRefused(GenericOperation(path: CouchPath("db", "..", "_users")), mentioning: "refused")
    }

    @Test(
        "CR, LF or NUL in a header value is refused on every operation, before anything is sent",
        arguments: [
            "a\r\nX-Injected: 1", "a\nb", "a\rb", "a\u{0}b",
        ])
    func headerInjection(value: String) {
        var headers = HTTPFields()
        headers["X-Correlation-ID"] = value
        Self.expectRefused(GenericOperation(path: CouchPath("db"), headers: headers), mentioning: "header")
    }

    @Test("A header name that is not a token is refused")
    func badHeaderName() {
        var headers = HTTPFields()
        headers["X Bad: y"] = "v"
        Self.expectRefused(GenericOperation(path: CouchPath("db"), headers: headers), mentioning: "Header name")
    }

    @Test("A revision with CR/LF (If-Match, ?rev=) is refused in validate")
    func revisionInjection() {
        Self.expectRefused(
            DeleteDocumentOperation(database: "db", id: "doc", revision: "1-a\r\nX-Injected: 1"),
            mentioning: "not of the form")
        Self.expectRefused(
            CopyDocumentOperation(database: "db", id: "a", destination: "b", destinationRevision: "1-a\nb"),
            mentioning: "not of the form")
    }

    @Test("Multipart part headers with CR/LF are refused when the body is built")
    func multipartInjection() {
        let part = MIMEPart(headers: ["Content-Type": "text/plain\r\nX-Injected: 1"], body: Data("x".utf8))
        #expect(throws: CouchError.self) { try MultipartCoding.encode([part], boundary: "b") }
    }
}
