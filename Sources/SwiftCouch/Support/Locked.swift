import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A value guarded by one lock: the only way shared mutable state is kept in SwiftCouch.
///
/// The value and its `pthread_mutex_t` live in one allocation (a `ManagedBuffer` whose header is the
/// value and whose one element is the mutex, at a stable address): making one costs one object,
/// where an `NSLock` beside the value cost three allocations, several made per request.
///
/// A copy of a `Locked` is the same lock and value (the storage is shared, as a class instance's
/// would be). `@unchecked Sendable` is safe because every access to the value goes through
/// `withLock`, which holds the mutex for the whole read or write.
struct Locked<Value>: @unchecked Sendable {
    private let storage: Storage

    init(_ value: Value) {
        storage = unsafeDowncast(Storage.create(minimumCapacity: 1) { _ in Header(value: value) }, to: Storage.self)
        storage.withUnsafeMutablePointerToElements { _ = pthread_mutex_init($0, nil) }
    }

    /// Runs `body` with exclusive access to the value. Never call out to user code or block inside.
    @discardableResult
    func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        try storage.withUnsafeMutablePointers { header, mutex in
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            return try body(&header.pointee.value)
        }
    }

    /// A copy of the current value.
    var current: Value { withLock { $0 } }

    /// The value, and a byte that gives the header a size even when the value has none (`Void`):
    /// a header of no size would share its address with the mutex after it, and every access to
    /// the value would then be an access to the mutex's memory (ThreadSanitizer reports it).
    private struct Header {
        var value: Value
        let nonEmpty: UInt8 = 0
    }

    /// The value (the header, destroyed by `ManagedBuffer`) and the mutex (the element).
    private final class Storage: ManagedBuffer<Header, pthread_mutex_t> {
        deinit {
            _ = withUnsafeMutablePointerToElements { pthread_mutex_destroy($0) }
        }
    }
}
