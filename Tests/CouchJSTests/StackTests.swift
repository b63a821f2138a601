import CouchJS
import Foundation
import TestScheduling
import Testing

/// The interpreter recurses in Swift for every JavaScript call: its depth limit must end a
/// runaway recursion before a small thread stack (512 KiB, a Dispatch worker's) overflows.
@Suite(.cpuBound) struct StackTests {
    @Test func deepRecursionOnASmallStackEndsWithAnError() throws {
        let done = DispatchSemaphore(value: 0)
        let outcome = Locked<String>("")
        let thread = Thread {
            let interpreter = Interpreter()
            do {
                _ = try interpreter.run("function f(n) { return n === 0 ? 0 : 1 + f(n - 1); } f(100000)")
                outcome.set("returned")
            } catch {
                outcome.set("\(type(of: error))")
            }
            done.signal()
        }
        thread.stackSize = 512 * 1024
        thread.start()
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(outcome.value == "JSBudgetExceeded")
    }
}

final class Locked<T>: @unchecked Sendable {
    // @unchecked Sendable: `stored` is only touched under `lock`.
    private let lock = NSLock()
    private var stored: T
    init(_ value: T) { stored = value }
    var value: T {
        lock.lock()
        defer { lock.unlock() }
        return stored
    }
    func set(_ value: T) {
        lock.lock()
        stored = value
        lock.unlock()
    }
}
