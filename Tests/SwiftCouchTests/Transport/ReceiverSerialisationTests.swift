import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

/// Issue 8 item 13: a cancellation completes the receiver on the cancelling thread while the
/// transport's thread may be delivering a chunk; the receiver must see one callback at a time,
/// and nothing after `complete`.
@Suite("Streams: receiver callbacks are serialised", .ownThreads)
struct ReceiverSerialisationTests {
    /// Streams chunks from a thread of its own until cancelled, as a real transport does.
    struct EndlessTransport: Transport {
        func send(
            _ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void
        ) -> any Cancellable {
            completion(.failure(SimulationError("stream only")))
            return Handle()
        }

        func stream(_ request: HTTPRequest, receiver: any StreamReceiver) -> any StreamingTask {
            let handle = Handle()
            Thread.detachNewThread {
                receiver.receive(
                    head: HTTPResponse(statusCode: 200, headers: ["Content-Type": "application/octet-stream"]))
                while !handle.isCancelled { receiver.receive(chunk: Data(repeating: 1, count: 16)) }
                receiver.complete(error: URLError(.cancelled))
            }
            return handle
        }

        final class Handle: StreamingTask, @unchecked Sendable {
            // @unchecked Sendable: `cancelled` is behind `lock`.
            private let lock = NSLock()
            private var cancelled = false

            var isCancelled: Bool {
                lock.lock()
                defer { lock.unlock() }
                return cancelled
            }

            func cancel() {
                lock.lock()
                cancelled = true
                lock.unlock()
            }
            func pause() {}
            func resume() {}
        }
    }

    /// Records overlapping callbacks and callbacks after `complete`, as a file writer would suffer them.
    final class WatchingReceiver: StreamReceiver, @unchecked Sendable {
        // @unchecked Sendable: the counters are behind `lock`.
        private let lock = NSLock()
        private var inside = 0
        private(set) var overlaps = 0
        private(set) var afterComplete = 0
        private(set) var chunks = 0
        private var completed = false
        let firstChunk = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)

        private func enter() {
            lock.lock()
            inside += 1
            if inside > 1 { overlaps += 1 }
            if completed { afterComplete += 1 }
            lock.unlock()
        }

        private func leave() {
            lock.lock()
            inside -= 1
            lock.unlock()
        }

        var counts: (overlaps: Int, afterComplete: Int) {
            lock.lock()
            defer { lock.unlock() }
            return (overlaps, afterComplete)
        }

        func receive(head: HTTPResponse) {}

        func receive(chunk: Data) {
            enter()
            lock.lock()
            chunks += 1
            let first = chunks == 1
            lock.unlock()
            if first { firstChunk.signal() }
            usleep(200)  // a write to a file
            leave()
        }

        func complete(error: (any Error)?) {
            enter()
            lock.lock()
            completed = true
            lock.unlock()
            usleep(200)  // closing the file
            leave()
            done.signal()
        }
    }

    @Test("Cancelling while chunks arrive: no callback overlaps another, none comes after complete")
    func cancelRacingChunks() throws {
        var configuration = Configuration()
        configuration.transport = EndlessTransport()
        let session = InterceptableSession(
            baseURL: URL(string: "http://couchdb.invalid:5984")!, credentials: nil, configuration: configuration)
        for round in 0..<40 {
            let receiver = WatchingReceiver()
            let request = HTTPRequest(method: .get, url: URL(string: "http://couchdb.invalid:5984/db/doc/file")!)
            let handle = session.stream(request, isIdempotent: true, receiver: receiver)
            #expect(receiver.firstChunk.wait(timeout: .now() + 10) == .success)
            handle.cancel()
            #expect(receiver.done.wait(timeout: .now() + 10) == .success)
            usleep(2_000)  // chunks still on their way would arrive now
            let counts = receiver.counts
            #expect(counts.overlaps == 0, "round \(round)")
            #expect(counts.afterComplete == 0, "round \(round)")
        }
    }
}
