import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A small integer per thread, in one pthread key: read on every request, so no allocation and no
/// dictionary look-up (`Thread.current.threadDictionary` costs both). Zero until set.
///
/// `@unchecked Sendable`: the key is created once and never changed; each thread reads and writes
/// only its own slot.
final class ThreadSlot: @unchecked Sendable {
    private var key = pthread_key_t()

    init() {
        pthread_key_create(&key, nil)
    }

    /// A slot whose non-zero value is an object retained for it
    /// (`Unmanaged.passRetained(object).toOpaque()`), released when its thread ends.
    init(holdingObjects: Void) {
        // The closure captures nothing, so it is a C function pointer on every platform (its
        // argument is optional on Linux, not on Darwin; `releaseObject` takes either).
        pthread_key_create(&key) { pointer in ThreadSlot.releaseObject(pointer) }
    }

    private static func releaseObject(_ pointer: UnsafeMutableRawPointer?) {
        guard let pointer else { return }
        Unmanaged<AnyObject>.fromOpaque(pointer).release()
    }

    /// This thread's value.
    var value: Int {
        get { pthread_getspecific(key).map { Int(bitPattern: $0) } ?? 0 }
        set { pthread_setspecific(key, UnsafeRawPointer(bitPattern: newValue)) }
    }
}

/// What SwiftCouch's own threads are, so the session can tell a thread it may run its work on
/// directly (one that holds no lock of anyone else's) from a foreign one.
enum ThreadRole {
    private static let slot = ThreadSlot()

    /// Marks the current thread as one of the socket transport's connection threads.
    static func markConnectionThread() { slot.value = 1 }

    /// Whether the current thread is a socket transport's connection thread.
    static var isConnectionThread: Bool { slot.value == 1 }
}
