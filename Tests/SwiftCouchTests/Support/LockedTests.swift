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
