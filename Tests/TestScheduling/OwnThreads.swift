import Foundation
import Testing

/// Threads of the test process's own, off Swift's cooperative pool, for tests that block or keep a
/// core busy.
///
/// Every test target runs in one process, in parallel, and on a 2-core runner Swift's cooperative
/// pool has two threads. Synchronous tests run on that pool: two of them interpreting a
/// million-deep JavaScript chain, or waiting on a semaphore for a server, leave no thread for any
/// async test, and a `swift test` run was measured with the pool stalled for 66 s at the start and
/// for 10 s later on, so that a call ending at its 1.5 s deadline was resumed 8 s later. A suite
/// with ``Trait/ownThreads`` runs its tests here instead (a task executor preference, so a
/// synchronous test body and everything it awaits run on these threads): they still share the
/// cores, but the operating system shares them fairly, and the pool stays free to resume the
/// async tests.
public final class TestThreadsExecutor: TaskExecutor, @unchecked Sendable {
    // @unchecked Sendable: `jobs` is only touched under `condition`.

    /// The executor of the tests marked ``Trait/ownThreads``: three threads a core (at least six,
    /// as many of these tests wait on a server rather than compute), with 64 MiB stacks.
    public static let shared = TestThreadsExecutor(
        threads: max(6, 3 * ProcessInfo.processInfo.activeProcessorCount), stackSize: 64 << 20)

    /// The executor of the tests marked ``Trait/cpuBound``: one thread a core, so that tests with
    /// wall-clock budgets of their own (a JavaScript function's time budget) never share a core
    /// with more of their kind than the cooperative pool would have let run.
    public static let compute = TestThreadsExecutor(
        threads: ProcessInfo.processInfo.activeProcessorCount, stackSize: 64 << 20)

    /// How many threads run the jobs.
    public let threadCount: Int
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []

    /// Starts `threads` threads, each with a stack of `stackSize` bytes; they live as long as the process.
    public init(threads: Int, stackSize: Int) {
        threadCount = max(1, threads)
        for index in 0..<threadCount {
            let thread = Thread { [unowned self] in
                Thread.current.threadDictionary[Self.marker] = true
                self.work()
            }
            thread.name = "test-threads-\(index)"
            thread.stackSize = stackSize
            thread.start()
        }
    }

    /// Queues a job; one of the threads runs it.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Whether the calling thread is one of this process's test threads.
    public static var isTestThread: Bool { Thread.current.threadDictionary[marker] != nil }

    private static let marker = "SwiftCouchTestThread"

    private func work() {
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

/// A trait that runs each test of a suite (or one test) on a ``TestThreadsExecutor``.
///
/// For synchronous tests, and async tests that create no unstructured task: a `Task {}` such a
/// test starts runs on the cooperative pool, and the test would then time it from threads that
/// the pool's stalls do not stop.
public struct OwnThreadsTrait: SuiteTrait, TestTrait, TestScoping {
    /// The threads the tests run on.
    public let executor: TestThreadsExecutor

    /// Applies to every test of a suite.
    public var isRecursive: Bool { true }

    /// Runs the test with the executor as its task executor preference.
    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        try await withTaskExecutorPreference(executor) {
            try await function()
        }
    }
}

extension Trait where Self == OwnThreadsTrait {
    /// The test blocks (on a semaphore, a server, a child process): it runs on threads of its own
    /// (``TestThreadsExecutor/shared``), leaving Swift's cooperative pool to the async tests.
    public static var ownThreads: Self { OwnThreadsTrait(executor: .shared) }

    /// The test computes for long (a million-deep JavaScript structure): it runs on
    /// ``TestThreadsExecutor/compute``, one thread a core, off the cooperative pool.
    public static var cpuBound: Self { OwnThreadsTrait(executor: .compute) }
}
