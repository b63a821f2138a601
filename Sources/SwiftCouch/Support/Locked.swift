import Foundation

/// A value guarded by one lock: the only way shared mutable state is kept in SwiftCouch.
///
/// `@unchecked Sendable` is safe because every access to `value` goes through `withLock`,
/// which holds `lock` for the whole read or write.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    /// Runs `body` with exclusive access to the value. Never call out to user code or block inside.
    @discardableResult
    func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }

    /// A copy of the current value.
    var current: Value { withLock { $0 } }
}
