import Foundation

/// Runs interpreter calls on one thread with a large stack (64 MiB).
///
/// The interpreter recurses in Swift for every JavaScript call and expression: within its depth
/// limit that needs more stack than a Dispatch worker or a small thread has (512 KiB; a debug
/// build's frames are large), so a call from Swift is handed to this thread and waited for.
/// Calls already on it (a function calling back into the interpreter) run in place.
final class StackExecutor: @unchecked Sendable {
    // @unchecked Sendable: `jobs` and every job's `finished` are only touched under `condition`;
    // a job's work runs on the executor's thread while its caller waits.
    static let shared = StackExecutor()

    private final class Job {
        var work: (() -> Void)?
        var finished = false
    }

    private let condition = NSCondition()
    private var jobs: [Job] = []
    private var thread: Thread?

    private init() {
        let thread = Thread { [unowned self] in self.loop() }
        thread.stackSize = 64 << 20
        thread.name = "CouchJS"
        self.thread = thread
        thread.start()
    }

    private func loop() {
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
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

    /// Runs `body` on the large-stack thread and returns (or throws) what it did.
    func run<T>(_ body: () throws -> T) throws -> T {
        if let thread, Thread.current === thread { return try body() }
        var result: Result<T, any Error>?
        let job = Job()
        withoutActuallyEscaping(body) { escapable in
            job.work = { result = Result { try escapable() } }
            condition.lock()
            jobs.append(job)
            condition.broadcast()
            while !job.finished { condition.wait() }
            condition.unlock()
        }
        return try result!.get()
    }
}
