import Foundation
import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

/// The gate that keeps heavy tests away from tests with wall-clock bounds, checked on a gate of its own
/// (not the shared one, which real tests hold).
@Suite("LoadGate: heavy and timing-sensitive tests never overlap")
struct LoadGateTests {
    /// What ran inside the gate at once, recorded by each task as it entered and left.
    actor Ledger {
        var timingSensitive = 0
        var heavy = 0
        var overlaps: [String] = []
        var entered = 0
        func enter(heavy isHeavy: Bool) {
            entered += 1
            if isHeavy { heavy += 1 } else { timingSensitive += 1 }
            if heavy > 1 { overlaps.append("two heavy tests at once") }
            if heavy > 0, timingSensitive > 0 { overlaps.append("heavy beside \(timingSensitive) timing-sensitive") }
        }
        func leave(heavy isHeavy: Bool) {
            if isHeavy { heavy -= 1 } else { timingSensitive -= 1 }
        }
    }

    @Test("Twenty timing-sensitive and five heavy tasks, interleaved: never a heavy one beside another test")
    func neverOverlap() async {
        let gate = LoadGate()
        let ledger = Ledger()
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<25 {
                let isHeavy = index % 5 == 2
                group.addTask {
                    if isHeavy { await gate.enterHeavy() } else { await gate.enterTimingSensitive() }
                    await ledger.enter(heavy: isHeavy)
                    for _ in 0..<20 { await Task.yield() }
                    await ledger.leave(heavy: isHeavy)
                    if isHeavy { await gate.leaveHeavy() } else { await gate.leaveTimingSensitive() }
                }
            }
        }
        #expect(await ledger.overlaps == [])
        #expect(await ledger.entered == 25, "every task got through: no deadlock")
        let occupancy = await gate.occupancy
        #expect(occupancy.timingSensitive == 0 && !occupancy.heavy)
    }

    @Test("Timing-sensitive tests share the gate with each other")
    func timingSensitiveTestsRunTogether() async {
        let gate = LoadGate()
        await gate.enterTimingSensitive()
        await gate.enterTimingSensitive()
        #expect(await gate.occupancy.timingSensitive == 2)
        await gate.leaveTimingSensitive()
        await gate.leaveTimingSensitive()
    }
}

/// The clock that timing-sensitive bounds count in: stalls of the whole thread pool are not counted,
/// up to a limit, and a body that never ends is still cut off.
@Suite("SchedulerClock: bounds that a stalled thread pool moves, and only so far")
struct SchedulerClockTests {
    @Test("Punctual ticks all count; a late tick counts only its slack; forgiveness stops at the maximum")
    func ledgerArithmetic() {
        let clock = SchedulerClock(tick: .milliseconds(50), slack: .milliseconds(100), maximumForgiven: .seconds(1))
        var ledger = SchedulerClock.Ledger(clock: clock)
        #expect(ledger.nextStep(toward: .milliseconds(120)) == .milliseconds(50))
        ledger.record(step: .milliseconds(50), took: .milliseconds(60))  // 10 ms late: ordinary
        #expect(ledger.counted == .milliseconds(60))
        #expect(ledger.forgiven == .zero)
        #expect(ledger.nextStep(toward: .milliseconds(120)) == .milliseconds(50))
        ledger.record(step: .milliseconds(50), took: .milliseconds(150))  // exactly the slack late: counted
        #expect(ledger.counted == .milliseconds(210))
        #expect(ledger.nextStep(toward: .milliseconds(120)) == nil)

        var stalled = SchedulerClock.Ledger(clock: clock)
        stalled.record(step: .milliseconds(50), took: .milliseconds(750))  // a 700 ms stall: not counted
        #expect(stalled.counted == .milliseconds(50))
        #expect(stalled.forgiven == .milliseconds(700))
        stalled.record(step: .milliseconds(50), took: .milliseconds(850))  // only 300 ms more is forgiven
        #expect(stalled.forgiven == .seconds(1))
        #expect(stalled.counted == .milliseconds(50) + .milliseconds(550))
        stalled.record(step: .milliseconds(50), took: .seconds(5))  // nothing left to forgive
        #expect(stalled.forgiven == .seconds(1))
        #expect(stalled.counted == .milliseconds(600) + .seconds(5))
        #expect(stalled.nextStep(toward: .seconds(5)) == nil)
        // The last step is cut to what remains.
        #expect(SchedulerClock.Ledger(clock: clock).nextStep(toward: .milliseconds(20)) == .milliseconds(20))
    }

    @Test("A body that never ends is cancelled at the bound; one that ends is not; cancelling the caller ends both")
    func boundsCutOffWhatNeverEnds() async {
        let endless = await withSchedulerBound(.milliseconds(300)) { () async throws -> Int in
            try await Task.sleep(for: .seconds(3600))
            return 1
        }
        #expect(endless.exceeded)
        #expect(throws: CancellationError.self) { try endless.result.get() }

        let quick = await withSchedulerBound(.seconds(3600)) { 42 }
        #expect(!quick.exceeded)
        #expect((try? quick.result.get()) == 42)
        #expect(quick.forgiven == .zero)

        let caller = Task {
            await withSchedulerBound(.seconds(3600)) { () async throws -> Int in
                try await Task.sleep(for: .seconds(3600))
                return 1
            }
        }
        caller.cancel()
        let cancelled = await caller.value
        #expect(!cancelled.exceeded)
        #expect(throws: CancellationError.self) { try cancelled.result.get() }
    }

    @Test("becomesTrue: at once when it holds, when another task makes it hold, false when it never does")
    func becomesTrueWaitsForTheCondition() async {
        #expect(await becomesTrue(within: .zero) { true })
        #expect(await !becomesTrue(within: .milliseconds(200)) { false })
        let flag = Locked(false)
        let setter = Task {
            try await Task.sleep(for: .milliseconds(100))
            flag.withLock { $0 = true }
        }
        #expect(await becomesTrue(within: .seconds(3600)) { flag.current })
        _ = try? await setter.value
    }
}

/// Tests marked `.ownThreads` run on the test threads, not on Swift's cooperative pool.
@Suite("Own threads: blocking and busy tests leave the cooperative pool free", .ownThreads)
struct OwnThreadsTests {
    @Test("A synchronous test body runs on a test thread")
    func synchronousBody() {
        #expect(TestThreadsExecutor.isTestThread)
    }

    @Test("An async test body stays on the test threads across suspensions")
    func asyncBody() async throws {
        #expect(TestThreadsExecutor.isTestThread)
        try await Task.sleep(for: .milliseconds(10))
        #expect(TestThreadsExecutor.isTestThread)
        let detached = await Task.detached { TestThreadsExecutor.isTestThread }.value
        #expect(!detached, "a detached task runs on the global pool")
        async let child = TestThreadsExecutor.isTestThread
        #expect(await child, "a child task inherits the preference")
    }

    @Test("A CPU-bound test runs on the compute threads, one a core", .cpuBound)
    func computeThreads() {
        #expect(TestThreadsExecutor.isTestThread)
        #expect(TestThreadsExecutor.compute.threadCount == ProcessInfo.processInfo.activeProcessorCount)
        #expect(TestThreadsExecutor.shared.threadCount >= 6)
    }
}
