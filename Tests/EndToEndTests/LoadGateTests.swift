import SwiftCouchTestSupport
import Testing

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
