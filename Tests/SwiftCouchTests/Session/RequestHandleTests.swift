import Foundation
import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

/// The handle's record of what to cancel. The session hands a request to the transport after
/// leaving its queue, so a transfer can be tracked after its attempt has already ended (answered,
/// and a retry's timer tracked meanwhile): such a late transfer must neither replace the timer nor
/// a later attempt's transfer.
@Suite("Request handle: tracking transfers and timers", .ownThreads)
struct RequestHandleTests {
    /// A transfer that records whether it was cancelled.
    final class Transfer: Cancellable {
        private let state = Locked(false)
        var isCancelled: Bool { state.current }
        func cancel() { state.withLock { $0 = true } }
    }

    func handle() -> RequestHandle {
        RequestHandle(request: HTTPRequest(method: .get, url: URL(string: "http://127.0.0.1:1/db")!)) { _ in }
    }

    @Test func aTransferTrackedForItsAttemptIsCancelled() throws {
        let handle = handle()
        let attempt = try #require(handle.beginTransmission())
        let transfer = Transfer()
        handle.track(inFlight: transfer, transmission: attempt)
        handle.cancel()
        #expect(transfer.isCancelled)
    }

    @Test func aTransferTrackedAfterItsAttemptEndedDoesNotReplaceTheRetryTimer() throws {
        let handle = handle()
        let attempt = try #require(handle.beginTransmission())
        // The answer (a 429) arrives before the sending thread records the transfer …
        handle.endTransmission(answered: true, responded: false)
        let timer = DispatchWorkItem {}
        handle.track(timer: timer)
        // … which it then does.
        let late = Transfer()
        handle.track(inFlight: late, transmission: attempt)
        handle.cancel()
        // Plain values in the expectations: reflecting a DispatchWorkItem on failure crashes.
        let (timerCancelled, lateCancelled) = (timer.isCancelled, late.isCancelled)
        #expect(timerCancelled, "the retry's timer is still what a cancellation stops")
        #expect(!lateCancelled, "the finished transfer was not recorded")
    }

    @Test func aTransferOfAnEarlierAttemptDoesNotReplaceTheCurrentOne() throws {
        let handle = handle()
        let first = try #require(handle.beginTransmission())
        handle.endTransmission(answered: true)
        let second = try #require(handle.beginTransmission())
        #expect(second == first + 1)
        let current = Transfer()
        handle.track(inFlight: current, transmission: second)
        let stale = Transfer()
        handle.track(inFlight: stale, transmission: first)
        handle.cancel()
        let (currentCancelled, staleCancelled) = (current.isCancelled, stale.isCancelled)
        #expect(currentCancelled)
        #expect(!staleCancelled)
    }

    /// A transfer's completion closure holds the session's attempt, which holds the handle: a
    /// handle that kept its transfer after completing kept every request alive (2–3 KB each, seen
    /// as a process growing with every PUT+GET).
    @Test func aCompletedHandleKeepsNoTransfer() throws {
        let handle = handle()
        let attempt = try #require(handle.beginTransmission())
        weak var released: Transfer?
        do {
            let transfer = Transfer()
            released = transfer
            handle.track(inFlight: transfer, transmission: attempt)
        }
        #expect(released != nil, "tracked while the request runs")
        handle.endTransmission(answered: true, responded: true)
        handle.finish(.success(HTTPResponse(statusCode: 200)))
        #expect(released == nil, "the completed handle still holds its transfer")

        // A transfer tracked after the handle completed is not kept, and is told to stop.
        weak var lateReleased: Transfer?
        do {
            let transfer = Transfer()
            lateReleased = transfer
            handle.track(inFlight: transfer, transmission: attempt)
            #expect(transfer.isCancelled)
        }
        #expect(lateReleased == nil)
    }

    @Test func aTransferTrackedAfterTheCancellationIsCancelledAtOnce() throws {
        let handle = handle()
        let attempt = try #require(handle.beginTransmission())
        handle.cancel()
        #expect(handle.beginTransmission() == nil, "a cancelled request is never sent again")
        let transfer = Transfer()
        handle.track(inFlight: transfer, transmission: attempt)
        #expect(transfer.isCancelled)
    }
}
