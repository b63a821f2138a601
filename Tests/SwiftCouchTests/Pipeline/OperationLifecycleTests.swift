import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

@Suite("OperationLifecycle: phases and exactly-once completion", .ownThreads)
struct OperationLifecycleTests {
    @Test("start, complete, finish")
    func normal() {
        var life = OperationLifecycle()
        #expect(life.start() == .run)
        #expect(life.phase == .executing)
        let r1 = life.claimCompletion()
        #expect(r1)
        let r2 = life.claimCompletion()
        #expect(!r2)
        #expect(life.finish() == (true, true))
        #expect(life.finish() == (false, false))
        #expect(life.start() == .ignore)
    }

    @Test("cancelled before start: reported once, start finishes it")
    func cancelledBeforeStart() {
        var life = OperationLifecycle()
        let r3 = life.cancel()
        #expect(r3)
        let r4 = life.claimCompletion()
        #expect(r4)
        #expect(life.start() == .finishCancelled)
        let r5 = life.claimCompletion()
        #expect(!r5)
        let r6 = life.cancel()
        #expect(!r6)
    }

    @Test("cancel after completion reports nothing")
    func cancelAfterCompletion() {
        var life = OperationLifecycle()
        _ = life.start()
        let r7 = life.claimCompletion()
        #expect(r7)
        let r8 = life.cancel()
        #expect(!r8)
        _ = life.finish()
        let r9 = life.cancel()
        #expect(!r9)
    }

    @Test("once handed to the session, a cancel is reported by the session's handle, not by the task")
    func cancelAfterSending() {
        var life = OperationLifecycle()
        _ = life.start()
        let sending = life.beginSending()
        #expect(sending)
        let report = life.cancel()
        #expect(!report)
        #expect(life.isCancelled)
        let claimed = life.claimCompletion()
        #expect(claimed)
    }

    @Test("cancelled before sending: nothing may be sent")
    func cancelBeforeSending() {
        var life = OperationLifecycle()
        _ = life.start()
        let report = life.cancel()
        #expect(report)
        let sending = life.beginSending()
        #expect(!sending)
    }
}

private func == (lhs: (wasExecuting: Bool, changed: Bool), rhs: (Bool, Bool)) -> Bool {
    lhs.wasExecuting == rhs.0 && lhs.changed == rhs.1
}
