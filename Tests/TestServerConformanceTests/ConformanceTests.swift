import CouchQuery
import CouchTestServer
import Foundation
import TestScheduling
import Testing

/// Totals over every scenario replayed in this run.
final class ConformanceTally: @unchecked Sendable {
    // @unchecked Sendable: all state is guarded by `lock`.
    static let shared = ConformanceTally()
    private let lock = NSLock()
    private var passed = 0
    private var failed = 0
    private var skipped = 0
    private var scenarios = 0

    func add(passed p: Int, failed f: Int, skipped s: Int) {
        lock.lock()
        passed += p
        failed += f
        skipped += s
        scenarios += 1
        lock.unlock()
    }

    func reset() {
        lock.lock()
        (passed, failed, skipped, scenarios) = (0, 0, 0, 0)
        lock.unlock()
    }

    var summary: (line: String, scenarios: Int) {
        lock.lock()
        defer { lock.unlock() }
        return ("Conformance: \(passed) passed, \(failed) failed, \(skipped) skipped", scenarios)
    }
}

/// Prints the `Conformance: N passed, M failed, K skipped` line once every scenario of the suite has run.
struct ConformanceSummaryTrait: SuiteTrait, TestScoping {
    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        ConformanceTally.shared.reset()
        try await function()
        let summary = ConformanceTally.shared.summary
        if summary.scenarios > 0 { print(summary.line) }
    }
}

extension Trait where Self == ConformanceSummaryTrait {
    /// Prints the conformance totals after the suite.
    static var conformanceSummary: Self { Self() }
}

/// Replays every recorded CouchDB 3.5.0 exchange in /work/shared/couchdb-transcripts against an
/// in-process TestServer and compares the answers (see the transcripts README).
@Suite("Transcript conformance", .conformanceSummary, .ownThreads)
struct ConformanceTests {
    @Test func transcriptsAreAvailable() throws {
        let folder = Transcripts.folder()
        guard Transcripts.exists else {
            Issue.record(
                "The CouchDB transcripts are missing: expected \(folder.path)/index.json (repo/../shared/couchdb-transcripts). No scenario was replayed."
            )
            return
        }
        let index = try Transcripts.loadIndex()
        if ProcessInfo.processInfo.environment["CONFORMANCE_SCENARIOS"] == nil {
            #expect(index.scenarios.count == Transcripts.scenarioNames().count)
        }
        #expect(!index.scenarios.isEmpty)
        // Every named expected difference must name a real step, so the list cannot rot silently.
        for difference in ExpectedDifferences.all {
            let scenario = try Transcripts.loadScenario(named: difference.scenario, index: index)
            #expect(
                scenario.steps.contains { $0.name == difference.step },
                "ExpectedDifferences names \(difference.scenario)/\(difference.step), which does not exist")
        }
    }

    @Test("Scenario", arguments: Transcripts.scenarioNames())
    func scenario(_ name: String) throws {
        let index = try Transcripts.loadIndex()
        let scenario = try Transcripts.loadScenario(named: name, index: index)
        // The server runs with CouchDB's own 600,000 PBKDF2 iterations, so `_users` documents are
        // compared exactly as recorded (no expected value is rewritten).
        let server = try TestServer.start()
        defer { server.stop() }
        let results = ScenarioReplayer(scenario: scenario, index: index, port: server.port).run()
        var passed = 0
        var failed = 0
        var skipped = 0
        for (step, outcome) in results {
            switch outcome {
            case .passed:
                passed += 1
            case .failed(let problems):
                failed += 1
                let shown = problems.prefix(12).map { "    " + $0 }.joined(separator: "\n")
                let more = problems.count > 12 ? "\n    … and \(problems.count - 12) more" : ""
                Issue.record(
                    Comment(
                        rawValue:
                            "\(name) step \(step.index) \(step.name) (\(step.request["method"]?.stringValue ?? "") \(step.request["path"]?.stringValue ?? "")) – \(step.description):\n\(shown)\(more)"
                    ))
            case .skipped(let difference, let note):
                skipped += 1
                if let note { print("Conformance note: \(name)/\(step.name) (\(difference.reason)): \(note)") }
            }
        }
        ConformanceTally.shared.add(passed: passed, failed: failed, skipped: skipped)
        print("Conformance \(name): \(passed) passed, \(failed) failed, \(skipped) skipped")
        #expect(results.count == scenario.steps.count)
    }
}
