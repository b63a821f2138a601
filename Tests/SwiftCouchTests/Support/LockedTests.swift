import Foundation
import Testing

@testable import SwiftCouch

@Suite("Locked: the one lock type")
struct LockedTests {
    /// Many threads through one lock, counting in a box the lock alone guards: under
    /// ThreadSanitizer (`.ci/run` runs these tests with it) any access the lock does not order
    /// is reported. `Void` as the value is the case a header of no size once made fail: the value's
    /// address was the mutex's, so each access to it was an unordered access to the mutex.
    @Test("Void and non-empty values: every access is ordered by the lock", arguments: [true, false])
    func accessesAreOrdered(voidValue: Bool) {
        final class Counter: @unchecked Sendable { var count = 0 }
        let counter = Counter()
        let empty = Locked(())
        let number = Locked(0)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<2_000 {
                if voidValue {
                    empty.withLock { _ in counter.count += 1 }
                } else {
                    number.withLock { $0 += 1 }
                }
            }
        }
        if voidValue {
            #expect(empty.withLock { _ in counter.count } == 16_000)
        } else {
            #expect(number.current == 16_000)
        }
    }
}

@Suite("handedOff: a value made on a queue, returned to a task")
struct QueueHandOffTests {
    /// An object built on the queue (its stored properties written there) and read by the task
    /// after the `await`, many times: under ThreadSanitizer every write must be ordered before the
    /// read. Handed over through the continuation alone, `LocalStore.open`'s store was reported as
    /// a race in CI (the runtime's ordering is invisible to TSan when the task resumes where it
    /// awaited).
    @Test func theValueIsOrderedBeforeTheTaskReadsIt() async {
        final class Made: @unchecked Sendable {
            var first: Int
            var second: [Int]
            init(_ n: Int) {
                first = n
                second = [n, n + 1]
            }
        }
        var total = 0
        for n in 0..<2_000 {
            let made = await handedOff(on: .global()) { Made(n) }
            total += made.first + made.second[1]
        }
        #expect(total == (0..<2_000).reduce(0) { $0 + 2 * $1 + 1 })
    }
}
