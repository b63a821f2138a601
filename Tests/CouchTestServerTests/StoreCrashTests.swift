import CouchQuery
import Foundation
import ProcessSpawn
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Crash safety proven: a child process writes (single documents, bulk batches, attachments,
/// `_local` documents, deletions) while compacting, and is killed with SIGKILL at a random moment;
/// the database is reopened and every write the child saw acknowledged must be there, whole.
/// `SWIFTCOUCH_CRASH_ROUNDS` sets the number of kills (CI runs a reduced count).
@Suite(.ownThreads) struct StoreCrashTests {
    static let childVariable = "SWIFTCOUCH_STORE_CRASH_CHILD"

    /// The body every write of document `id` at version `v` has, so any version found can be checked whole.
    static func body(_ id: String, _ v: Int) -> JSON {
        [
            "v": .int(Int64(v)), "check": .string(Crypto.hex(Crypto.md5(Data("\(id)/\(v)".utf8)))),
            "pad": .string(String(repeating: "x", count: (id.count * 37 + v * 11) % 300)),
        ]
    }

    static func attachment(_ id: String, _ v: Int) -> Data {
        Data((0..<(2_000 + (v * 997) % 200_000)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ v &+ id.count) })
    }

    @Test func killedWritersNeverLoseAnAcknowledgedWrite() async throws {
        let rounds = Int(ProcessInfo.processInfo.environment["SWIFTCOUCH_CRASH_ROUNDS"] ?? "") ?? 5
        let dir = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        // What the child saw acknowledged: id → the highest version (-1 for a deletion).
        var acknowledged: [String: (v: Int, rev: String)] = [:]
        var localAcknowledged: [String: Int] = [:]
        var totalAcks = 0
        for round in 0..<rounds {
            // The child is run and waited for on a Dispatch thread: never block Swift concurrency's few threads.
            let killAfter = Double.random(in: 0.3...1.5)
            let lines = try await withCheckedThrowingContinuation { continuation in
                DispatchQueue.global().async {
                    continuation.resume(
                        with: Result { try Self.runChild(dir: dir, round: round, killAfter: killAfter) })
                }
            }
            for line in lines {
                let parts = line.split(separator: " ").map(String.init)
                guard parts.count == 5, parts[0] == "ACK", let v = Int(parts[3]) else { continue }
                totalAcks += 1
                if parts[1] == "local" {
                    localAcknowledged[parts[2]] = max(localAcknowledged[parts[2]] ?? 0, v)
                } else {
                    acknowledged[parts[2]] = (v, parts[4])
                }
            }
            // Reopen in this process: it must open, and hold every acknowledged write whole.
            let engine = try ServerEngine(options: testOptions(dir))
            defer { engine.close() }
            #expect(engine.send("GET", "/crash").status == 200, "round \(round): the database opens")
            for (id, (v, rev)) in acknowledged {
                let answer = engine.send("GET", "/crash/\(id)")
                if answer.status == 404, answer.json["reason"] == "deleted" {
                    // A deletion the child made but was killed before it could report: legitimate only
                    // when the acknowledged revision is an ancestor of (or is) the deleted leaf.
                    let leaves =
                        engine.send(
                            "GET", "/crash/\(id)?open_revs=all&revs=true", headers: [("Accept", "application/json")]
                        ).json.arrayValue ?? []
                    let descends = leaves.contains { leaf in
                        guard let doc = leaf["ok"], let start = doc["_revisions"]?["start"]?.intValue,
                            let ids = doc["_revisions"]?["ids"]?.arrayValue
                        else { return false }
                        return ids.enumerated().contains {
                            "\(Int(start) - $0.offset)-\($0.element.stringValue ?? "")" == rev
                        }
                    }
                    #expect(descends, "round \(round): \(id) is deleted, but not after \(rev) as acknowledged")
                    continue
                }
                if v < 0 {
                    // Deleted and acknowledged: only a later write could bring it back.
                    if answer.status == 200 {
                        let found = Int(answer.json["v"]?.intValue ?? -99)
                        #expect(answer.json["check"] == Self.body(id, found)["check"], "round \(round): \(id) is whole")
                    }
                    continue
                }
                #expect(answer.status == 200, "round \(round): \(id) v\(v) was acknowledged and is missing")
                guard answer.status == 200 else { continue }
                let found = Int(answer.json["v"]?.intValue ?? -1)
                #expect(found >= v, "round \(round): \(id) is at v\(found), v\(v) was acknowledged")
                #expect(answer.json["check"] == Self.body(id, found)["check"], "round \(round): \(id) is whole")
                if answer.json["_attachments"]?["a.bin"] != nil {
                    let data = engine.send("GET", "/crash/\(id)/a.bin").data
                    #expect(
                        Crypto.md5(data) == Crypto.md5(Self.attachment(id, found)),
                        "round \(round): \(id)'s attachment is whole")
                }
            }
            for (id, v) in localAcknowledged {
                let found = Int(engine.send("GET", "/crash/_local/\(id)").json["v"]?.intValue ?? -1)
                #expect(found >= v, "round \(round): _local/\(id) at \(found), \(v) acknowledged")
            }
        }
        #expect(totalAcks > rounds * 5, "the child wrote (acknowledged \(totalAcks) writes)")
    }

    /// Runs the child writer until `killAfter` seconds passed, kills it with SIGKILL, and returns what it printed.
    private static func runChild(dir: URL, round: Int, killAfter: Double) throws -> [String] {
        let process = try ChildProcess.testBinary(
            filter: "storeCrashChild",
            environment: [Self.childVariable: dir.path, "SWIFTCOUCH_STORE_CRASH_ROUND": String(round)],
            standardError: .discard)
        // Kill only once the child is writing (its first acknowledgement), then after a random time.
        let output = process.collectOutput()
        output.wait(until: { $0.contains("ACK") }, timeout: 60)
        Thread.sleep(forTimeInterval: killAfter)
        process.signal(SIGKILL)
        process.wait()
        output.waitForEnd(timeout: 10)
        return output.text.split(separator: "\n").map(String.init)
    }

    /// The child: writes until it is killed. Runs only when the parent test starts it.
    @Test func storeCrashChild() throws {
        guard let path = ProcessInfo.processInfo.environment[Self.childVariable] else { return }
        let round = Int(ProcessInfo.processInfo.environment["SWIFTCOUCH_STORE_CRASH_ROUND"] ?? "") ?? 0
        let engine = try ServerEngine(options: testOptions(URL(fileURLWithPath: path)))
        if engine.send("GET", "/crash").status == 404 { engine.send("PUT", "/crash") }
        let db = try #require(engine.store.database(named: "crash"))
        // Compaction runs again and again beside the writes.
        Thread {
            while true {
                try? db.compact()
                Thread.sleep(forTimeInterval: 0.1)
            }
        }.start()
        func ack(_ kind: String, _ id: String, _ v: Int, _ rev: String = "-") {
            FileHandle.standardOutput.write(Data("ACK \(kind) \(id) \(v) \(rev)\n".utf8))
        }
        var revs: [String: (rev: String, v: Int)] = [:]
        var step = 0
        while true {
            step += 1
            // Writes a few hundred times a second: enough to be killed mid-write, without taking
            // the machine from the tests running beside it.
            Thread.sleep(forTimeInterval: 0.002)
            let id = "r\(round)-\(Int.random(in: 0..<40))"
            let v = (revs[id]?.v ?? 0) + 1
            switch Int.random(in: 0..<10) {
            case 0..<4:
                var body = Self.body(id, v)
                if let rev = revs[id]?.rev { body = .object([("_rev", .string(rev))] + body.members) }
                let answer = engine.send("PUT", "/crash/\(id)", json: body)
                if answer.status == 201, let rev = answer.json["rev"]?.stringValue {
                    revs[id] = (rev, v)
                    ack("doc", id, v, rev)
                }
            case 4..<6:
                // A batch of new documents: one sync for all.
                let ids = (0..<Int.random(in: 1...200)).map { "b\(round)-\(step)-\($0)" }
                let docs = JSON.array(ids.map { .object([("_id", .string($0))] + Self.body($0, 1).members) })
                let answer = engine.send("POST", "/crash/_bulk_docs", json: ["docs": docs])
                if answer.status == 201 {
                    for row in answer.json.arrayValue ?? [] where row["ok"] == true {
                        if let bid = row["id"]?.stringValue, let rev = row["rev"]?.stringValue {
                            ack("doc", bid, 1, rev)
                        }
                    }
                }
            case 6:
                let bytes = Self.attachment(id, v)
                var path = "/crash/\(id)/a.bin"
                if let rev = revs[id]?.rev { path += "?rev=\(rev)" }
                // An attachment upload keeps the body of the revision it edits: write the body first.
                var body = Self.body(id, v)
                if let rev = revs[id]?.rev { body = .object([("_rev", .string(rev))] + body.members) }
                let put = engine.send("PUT", "/crash/\(id)", json: body)
                guard put.status == 201, let rev = put.json["rev"]?.stringValue else { continue }
                revs[id] = (rev, v)
                ack("doc", id, v, rev)
                path = "/crash/\(id)/a.bin?rev=\(rev)"
                let answer = engine.send(
                    "PUT", path, body: bytes, headers: [("Content-Type", "application/octet-stream")])
                if answer.status == 201, let rev = answer.json["rev"]?.stringValue {
                    revs[id] = (rev, v)
                    ack("doc", id, v, rev)
                }
            case 7:
                guard let rev = revs[id]?.rev else { continue }
                let answer = engine.send("DELETE", "/crash/\(id)?rev=\(rev)")
                if answer.status == 200, let rev = answer.json["rev"]?.stringValue {
                    revs[id] = nil
                    ack("doc", id, -1, rev)
                }
            default:
                let lid = "l\(Int.random(in: 0..<5))"
                // Rounds follow each other: their local versions keep growing.
                let version = round * 1_000_000 + step
                let answer = engine.send("PUT", "/crash/_local/\(lid)", json: ["v": .int(Int64(version))])
                if answer.status == 201 { ack("local", lid, version) }
            }
        }
    }
}
