// libFuzzer target: CouchJS (lexer, parser, interpreter, built-ins) through its public API, as the TestServer uses
// it for design documents: the input is the source of a function, compiled, then run as a map function over a small
// document, as a validate_doc_update, and as a reduce and rereduce, under the default budgets. Built by .ci/fuzz.
import CouchJS
import CouchQuery

let document: JSON = [
    "_id": "doc1", "_rev": "1-967a00dff5e02add41819138abb3284d", "type": "post", "title": "Hello", "count": 3,
    "ratio": 0.5, "tags": ["a", "b", .null], "nested": ["deep": ["x": [1, 2, 3]]], "flag": true,
]
let userContext: JSON = ["db": "db", "name": "alice", "roles": ["editor"]]
let security: JSON = ["admins": ["names": [], "roles": []], "members": ["names": [], "roles": []]]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCouchJS(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let source = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let server = JSQueryServer(designDocument: ["_id": "_design/fuzz", "views": ["v": ["map": .string(source)]]])
    let function: JSValue
    do {
        function = try server.compile(source)
    } catch {
        _ = error.description
        return 0
    }
    // As a map function: what it emits is collated as a view's rows are.
    if let rows = try? server.map(function, document) {
        _ = rows.sorted { Collation.compare($0.key, $1.key) < 0 }.map { $0.value.serialized }
    }
    // As a validate_doc_update: the thrown object is read as the engine reads it.
    do {
        _ = try server.call(function, [document, .null, userContext, security])
    } catch {
        _ = error.thrownObject?["forbidden"]?.serialized
        _ = error.description
    }
    // As a reduce, then a rereduce of what it gave.
    let keys: [JSON] = [["a", "doc1"], [1, "doc2"], [.null, "doc3"]]
    if let reduced = try? server.reduce(function, keys: keys, values: [1, "two", document], rereduce: false) {
        _ = try? server.reduce(function, keys: nil, values: [reduced, reduced], rereduce: true)
    }
    _ = server.logs.count
    return 0
}
