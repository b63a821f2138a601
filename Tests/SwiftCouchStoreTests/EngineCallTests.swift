import Foundation
import SwiftCouch
import Testing

@testable import SwiftCouchStore

@Suite("EngineCall: the in-process transport's pause, resume, cancel and single completion")
struct EngineCallTests {
    @Test("A paused call holds the engine's writer until resumed; cancelling releases it with false")
    func pauseResumeCancel() async throws {
        let call = EngineCall()
        call.pause()
        let passed = DispatchSemaphore(value: 0)
        let again = DispatchSemaphore(value: 0)
        let answers = Answers()
        Thread.detachNewThread {
            answers.add(call.waitWhilePaused())
            passed.signal()
            again.wait()
            answers.add(call.waitWhilePaused())
            passed.signal()
        }
        // Held while paused (it can only fail if the pause lets the writer through).
        #expect(passed.wait(timeout: .now() + 0.2) == .timedOut)
        call.resume()
        #expect(passed.wait(timeout: .now() + 30) == .success)
        call.pause()
        again.signal()
        #expect(passed.wait(timeout: .now() + 0.2) == .timedOut)
        call.cancel()
        #expect(passed.wait(timeout: .now() + 30) == .success)
        #expect(answers.values == [true, false])
    }

    @Test("The completion runs once: cancel first, then the engine's answer, is one cancelled error")
    func singleCompletion() {
        let call = EngineCall()
        let answers = Answers()
        call.onFinish { result in
            if case .failure(let error as URLError) = result { answers.add(error.code == .cancelled) }
            if case .success = result { answers.add(false) }
        }
        call.cancel()
        call.finish(.success(.init(statusCode: 200)))
        call.cancel()
        #expect(answers.values == [true])
        #expect(call.isCancelled)
    }
}

/// Where a local store's requests wait: a long-poll feed or a paused stream blocks its thread for as
/// long as it waits, so that thread must never be one Swift concurrency runs tasks on. On Linux a
/// shared concurrent queue runs on those very threads (one a core): two feeds waiting in the engine
/// stalled every task of a 2-core test run for seconds.
@Suite("EngineTransport: requests wait on threads of their own")
struct EngineThreadTests {
    @Test("A request runs on Dispatch's overcommit threads, not on the threads that run tasks")
    func requestsRunOffTheTaskThreads() async throws {
        #if os(Linux)
            let directory = LocalStoreFixture.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: directory) }
            let connection = try EngineConnection(directory: directory)
            defer { connection.close() }
            let transport = EngineTransport(connection: connection)
            let request = HTTPRequest(method: .put, url: URL(string: "http://localhost/threads")!)
            let (status, engineThread) = await withCheckedContinuation { continuation in
                _ = transport.send(request) { result in
                    continuation.resume(returning: ((try? result.get())?.statusCode, Self.threadName()))
                }
            }
            #expect(status == 201)
            let taskThread = await Task.detached { Self.threadName() }.value
            #expect(engineThread.hasSuffix("overcommit"), "the engine answered on \(engineThread)")
            #expect(!taskThread.hasSuffix("overcommit"), "tasks run on \(taskThread): the names tell nothing apart")
        #endif
    }

    /// The calling thread's name as the kernel has it (Dispatch names its threads after their root
    /// queue: `…default-qos` for the threads tasks share, `…qos.overcommit` for a serial queue's).
    static func threadName() -> String {
        let name = try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)
        return name?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "unknown"
    }
}

/// Values recorded from other threads.
private final class Answers: @unchecked Sendable {
    // @unchecked: `recorded` is only touched under `lock`.
    private let lock = NSLock()
    private var recorded: [Bool] = []
    func add(_ value: Bool) { lock.withLock { recorded.append(value) } }
    var values: [Bool] { lock.withLock { recorded } }
}
