import CouchTestServer
import Foundation
import ProcessSpawn
import SwiftCouch
import SwiftCouchStore
@testable import SwiftCouchSync
import SwiftCouchTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The replicating process killed with SIGKILL at random points (between a write and its checkpoint
/// among them), then resumed, round after round while the source keeps changing: no change is skipped
/// (the last run ends with the source's trees: a checkpoint ahead of the data would leave documents
/// behind), and no revision is written twice: every revision accepted by a remote target's `_bulk_docs` is
/// recorded by the TestServer's handler, across all the processes, and every revision any process reported
/// written (its `documentWritten` events, printed by the child as they come) must be reported once. Three
/// directions: remote → remote, remote → local and local → remote, the local database in a directory the
/// parent and the children open in turn (a killed child's database must reopen: CouchStore cuts a torn
/// tail). `SWIFTCOUCH_SYNC_KILL_ROUNDS` sets the number of kills per direction (3 by default).
@Suite struct KillEndToEndTests {
    static let childVariable = "SWIFTCOUCH_SYNC_KILL_CHILD"

    enum Direction: String, CaseIterable, Sendable {
        case remoteToRemote, remoteToLocal, localToRemote
    }

    @Test(.serialized, arguments: Direction.allCases)
    func killedReplicationsResumeWithoutLossOrDuplicates(_ direction: Direction) async throws {
        guard !SyncEnvironment.isRealCouchDB else { return }
        let rounds = Int(ProcessInfo.processInfo.environment["SWIFTCOUCH_SYNC_KILL_ROUNDS"] ?? "") ?? 3
        let engine = try ServerEngine()
        let recorder = RecordingHandler(engine: engine)
        let server = try TestServer.start(handler: recorder)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "swiftcouch-sync-kill-\(UUID().uuidString)")
        defer {
            server.stop()
            engine.close()
            try? FileManager.default.removeItem(at: directory)
        }
        let client = server.adminClient()
        defer { client.shutdown() }
        let corpus = CorpusSpec(
            documents: 150, conflictLeaves: [5, 12], bigAttachments: [200_000], textAttachmentBytes: 5_000)
        try await withRemoteDatabases("kill", count: 2, client: client) { endpoints in
            // The local database is opened only while the parent uses it: a child opens it in between.
            func withLocal<T>(_ body: (LocalDatabase) async throws -> T) async throws -> T {
                let local = try await LocalDatabase.open(at: directory, name: "local")
                defer { local.close() }
                return try await body(local)
            }
            let sourceIsLocal = direction == .localToRemote
            let targetIsLocal = direction == .remoteToLocal
            let remoteSource = endpoints[0]
            let remoteTarget = endpoints[1]
            if sourceIsLocal {
                _ = try await withLocal { try await Corpus.build(in: Endpoint($0), spec: corpus) }
            } else {
                _ = try await Corpus.build(in: remoteSource, spec: corpus)
            }
            if targetIsLocal { try await withLocal { _ in } }
            let sourceSpec = sourceIsLocal ? "local:" + directory.path : "remote:" + remoteSource.database
            let targetSpec = targetIsLocal ? "local:" + directory.path : "remote:" + remoteTarget.database
            var kills = 0
            var swept = 0
            var reported: [String] = []  // id@rev of every documentWritten event, every process
            for round in 0..<rounds {
                // The source changes between rounds: new documents and an update.
                let docs: [JSONValue] = (0..<15).map {
                    ["_id": .string("round-\(round)-\($0)"), "round": .int(Int64(round))]
                }
                if sourceIsLocal {
                    try await withLocal { local in
                        _ = try await Endpoint(local).json(.post, ["_bulk_docs"], body: ["docs": .array(docs)])
                    }
                } else {
                    _ = try await remoteSource.json(.post, ["_bulk_docs"], body: ["docs": .array(docs)])
                }
                // Killed after a random number of the child's events (a document written, a checkpoint...),
                // a few milliseconds later: the first round has the corpus to copy, later rounds a little.
                let killAfter = (
                    events: Int.random(in: 1...(round == 0 ? 120 : 12)), delay: Double.random(in: 0...0.01)
                )
                let spec = [server.url.absoluteString, server.adminName, server.adminPassword, sourceSpec, targetSpec]
                let (outcome, sweep) = try await withCheckedThrowingContinuation { continuation in
                    DispatchQueue.global().async {
                        continuation.resume(
                            with: Result { try Self.runChild(spec.joined(separator: "\n"), killAfter: killAfter) })
                    }
                }
                if outcome.contains("CHILD-FAILED") {
                    Issue.record("round \(round): the child's replication failed: \(outcome)")
                }
                if !outcome.contains("CHILD-DONE") { kills += 1 }
                swept += sweep.removed
                #expect(sweep.left.isEmpty, "round \(round): scratch folders left after the sweep: \(sweep.left)")
                reported += outcome.split(separator: "\n").compactMap { line in
                    line.hasPrefix("W ") ? String(line.dropFirst(2)) : nil
                }
                // Let a request the killed process had sent finish on the server before the next process starts.
                try await Task.sleep(nanoseconds: 200_000_000)
            }
            // The last run, uninterrupted, in this process (the local database reopened after the last kill).
            try await withLocal { local in
                let source = sourceIsLocal ? Endpoint(local) : remoteSource
                let target = targetIsLocal ? Endpoint(local) : remoteTarget
                let last = try await replicate(
                    sourceIsLocal ? .local(local) : remoteSource.remote,
                    targetIsLocal ? .local(local) : remoteTarget.remote)
                #expect(last.summary.docWriteFailures == 0)
                reported += last.written
                try await expectIdenticalTrees(source, target, "\(direction): after \(kills) kills in \(rounds) rounds")
            }
            #expect(recorder.repeated.isEmpty, "revisions written twice: \(recorder.repeated.prefix(20))")
            let reportedTwice = Dictionary(grouping: reported, by: { $0 }).filter { $0.value.count > 1 }.keys.sorted()
            #expect(reportedTwice.isEmpty, "revisions reported written twice: \(reportedTwice.prefix(20))")
            #expect(!reported.isEmpty)
            print(
                "KillEndToEndTests \(direction): \(kills) of \(rounds) child processes killed mid-run, "
                    + "\(reported.count) revisions reported written, \(recorder.recorded.count) through a remote _bulk_docs, "
                    + "\(swept) killed copies' scratch folders swept"
            )
        }
    }

    /// Runs the child replication, kills it `killAfter.delay` seconds after its `killAfter.events`-th event
    /// (unless it finished before), and returns what it printed.
    ///
    /// The child's temporary directory is one of its own, removed once it has ended: files the replicator had not
    /// removed yet when it was killed (the attachments of a revision being written) do not outlive the test.
    /// Before that, the directory is swept as the next replicator would sweep it (at any age): the kernel
    /// released a killed child's scratch lock, so its folder must go. Returns the child's output, how many
    /// folders the sweep removed, and the scratch folders left after it.
    private static func runChild(
        _ spec: String, killAfter: (events: Int, delay: Double)
    ) throws -> (String, (removed: Int, left: [String])) {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent(
            "swiftcouch-sync-kill-child-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let process = try ChildProcess.testBinary(
            filter: "replicationKillChild", environment: [childVariable: spec, "TMPDIR": scratch.path],
            standardError: .discard)
        let output = process.collectOutput()
        output.wait(
            until: { $0.contains("CHILD-START") && $0.components(separatedBy: "EV ").count - 1 >= killAfter.events },
            timeout: 60)
        Thread.sleep(forTimeInterval: killAfter.delay)
        process.signal(SIGKILL)
        process.wait()
        output.waitForEnd(timeout: 30)
        let removed = ScratchFolder.removeAbandoned(in: scratch, minimumAge: 0)
        let left = try FileManager.default.contentsOfDirectory(atPath: scratch.path).filter {
            $0.hasPrefix(ScratchFolder.prefix)
        }
        return (output.text, (removed, left))
    }

    /// The child: replicates until it is killed or done. Runs only when the parent test starts it. Prints
    /// `EV <kind>` for each event and `W <id>@<rev>` for each revision written.
    @Test func replicationKillChild() async throws {
        guard let spec = ProcessInfo.processInfo.environment[Self.childVariable] else { return }
        let parts = spec.split(separator: "\n").map(String.init)
        guard parts.count == 5, let url = URL(string: parts[0]) else { return }
        let client = CouchDBClient(url: url, credentials: Credentials(username: parts[1], password: parts[2]))
        var opened: LocalDatabase?
        if let path = parts[3...4].first(where: { $0.hasPrefix("local:") }) {
            opened = try await LocalDatabase.open(at: URL(fileURLWithPath: String(path.dropFirst(6))), name: "local")
        }
        let local = opened
        func endpoint(_ spec: String) -> SyncEndpoint {
            if spec.hasPrefix("local:"), let local { return .local(local) }
            return .remote(client.database(String(spec.drop(while: { $0 != ":" }).dropFirst())))
        }
        let replicator = Replicator(
            source: endpoint(parts[3]), target: endpoint(parts[4]),
            options: ReplicationOptions(batchSize: 7, workers: 2, checkpointInterval: 0))
        let stream = replicator.events()
        let printer = Task {
            for await event in stream {
                let kind = "\(event)".prefix(while: { $0 != "(" })
                var line = "EV \(kind)\n"
                if case .documentWritten(let written) = event { line += "W \(written.id)@\(written.rev)\n" }
                FileHandle.standardOutput.write(Data(line.utf8))
            }
        }
        FileHandle.standardOutput.write(Data("CHILD-START\n".utf8))
        defer {
            printer.cancel()
            local?.close()
        }
        do {
            try await replicator.run()
            await printer.value
            FileHandle.standardOutput.write(Data("CHILD-DONE\n".utf8))
        } catch {
            FileHandle.standardOutput.write(Data("CHILD-FAILED \(error)\n".utf8))
        }
    }
}

/// A value behind a lock.
final class LockedBox<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value { lock.withLock { stored } }
    func mutate(_ change: (inout Value) -> Void) { lock.withLock { change(&stored) } }
}
