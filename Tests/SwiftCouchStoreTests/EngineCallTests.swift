import Foundation
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

/// Values recorded from other threads.
private final class Answers: @unchecked Sendable {
    // @unchecked: `recorded` is only touched under `lock`.
    private let lock = NSLock()
    private var recorded: [Bool] = []
    func add(_ value: Bool) { lock.withLock { recorded.append(value) } }
    var values: [Bool] { lock.withLock { recorded } }
}
