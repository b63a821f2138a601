import Foundation

/// Runs interpreter calls on threads with a large stack (128 MiB each), at most 8 at once.
///
/// The interpreter recurses in Swift for every JavaScript call, statement and expression: within
/// its nesting limits that needs more stack than a Dispatch worker or a small thread has (512 KiB).
/// Measured in a debug build (the tests'), a unit of `Interpreter.maximumNesting` takes 8–16 KiB
/// of stack (`eval`'s frame is large): 2,000 units overflowed 16 MiB and fitted in 32 MiB, so
/// 128 MiB leaves four times that (release frames are much smaller; only touched pages are
/// committed). So a call from Swift is handed to one of these threads and waited for. Calls already on one (a function calling back into the interpreter) run in place.
/// Several threads, made as calls need them and kept, so that one slow function (within its
/// budgets) does not hold up other design documents' functions.
final class StackExecutor: @unchecked Sendable {
    // @unchecked Sendable: `jobs`, `threads`, `idle` and every job's `finished` are only touched
    // under `condition`; a job's work runs on an executor thread while its caller waits.
    static let shared = StackExecutor(maximumThreads: 8)

    /// The stack of each thread.
    static let stackSize = 128 << 20
    private static let marker = "CouchJS.StackExecutor"

    private final class Job {
        var work: (() -> Void)?
        var finished = false
    }

    private let condition = NSCondition()
    private var jobs: [Job] = []
    private var threads = 0
    private var idle = 0
    private let maximumThreads: Int

    private init(maximumThreads: Int) { self.maximumThreads = maximumThreads }

    /// Whether the current thread is one of the executor's.
    static var isExecutorThread: Bool { Thread.current.threadDictionary[marker] != nil }

    private func startThread() {
        let thread = Thread { [unowned self] in
            Thread.current.threadDictionary[Self.marker] = true
            self.loop()
        }
        thread.stackSize = Self.stackSize
        thread.name = "CouchJS"
        thread.start()
    }

    private func loop() {
        while true {
            condition.lock()
            idle += 1
            while jobs.isEmpty { condition.wait() }
            idle -= 1
            let job = jobs.removeFirst()
            condition.unlock()
            job.work?()
            job.work = nil  // released before the caller goes on
            condition.lock()
            job.finished = true
            condition.broadcast()
            condition.unlock()
        }
    }

    /// Runs `body` on a large-stack thread and returns (or throws) what it did.
    func run<T>(_ body: () throws -> T) throws -> T {
        if Self.isExecutorThread { return try body() }
        var result: Result<T, any Error>?
        let job = Job()
        withoutActuallyEscaping(body) { escapable in
            job.work = { result = Result { try escapable() } }
            condition.lock()
            jobs.append(job)
            if idle < jobs.count, threads < maximumThreads {
                threads += 1
                startThread()
            }
            condition.broadcast()
            while !job.finished { condition.wait() }
            condition.unlock()
        }
        return try result!.get()
    }
}
