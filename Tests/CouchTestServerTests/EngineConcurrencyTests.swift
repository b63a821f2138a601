import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

@Suite(.ownThreads) struct EngineConcurrencyTests {
    /// 64 clients × 200 mixed operations: no write is lost, every read sees the latest revision of its own document.
    @Test func manyClientsNeverLoseWrites() throws {
        let engine = try ServerEngine(options: testOptions())
        engine.send("PUT", "/db")
        engine.send("PUT", "/db2")
        let clients = 64
        let operations = 200
        let problems = ProblemLog()
        DispatchQueue.concurrentPerform(iterations: clients) { client in
            let id = "doc-\(client)"
            var rev: String?
            var count = 0
            for op in 0..<operations {
                switch op % 5 {
                case 0, 1, 2:
                    var body: JSON = ["n": .int(Int64(count)), "client": .int(Int64(client))]
                    if let rev { body = body.setting("_rev", .string(rev)) }
                    let reply = engine.send("PUT", "/db/\(id)", json: body)
                    guard reply.status == 201, let newRev = reply.json["rev"]?.stringValue else {
                        problems.add("client \(client) op \(op): \(reply.status) \(reply.text)")
                        return
                    }
                    rev = newRev
                    count += 1
                case 3:
                    let reply = engine.send("GET", "/db/\(id)")
                    if let rev, reply.json["_rev"]?.stringValue != rev {
                        problems.add("client \(client) read \(reply.json["_rev"]?.serialized ?? "nil") expected \(rev)")
                    }
                default:
                    if op % 10 == 4 {
                        engine.send("GET", "/db/_changes?limit=5")
                    } else {
                        engine.send("POST", "/db2/_bulk_docs", json: ["docs": [["c": .int(Int64(client))]]])
                    }
                }
            }
        }
        #expect(problems.entries.isEmpty, "\(problems.entries.prefix(5))")
        let info = engine.send("GET", "/db").json
        #expect(info["doc_count"] == .int(Int64(clients)))
        // 120 writes per client.
        #expect(info["update_seq"]?.stringValue.flatMap(SequenceToken.decode) == clients * 120)
        #expect(engine.send("GET", "/db2").json["doc_count"] == .int(Int64(clients * 20)))
        for client in 0..<clients {
            #expect(engine.send("GET", "/db/doc-\(client)").json["n"] == 119)
        }
    }
}

/// Collects problems from many threads.
final class ProblemLog: @unchecked Sendable {
    // Safe: `list` only touched under `lock`.
    private let lock = NSLock()
    private var list: [String] = []

    func add(_ s: String) {
        lock.lock()
        list.append(s)
        lock.unlock()
    }

    var entries: [String] {
        lock.lock()
        defer { lock.unlock() }
        return list
    }
}
