import Foundation
import SwiftCouchTesting
import Testing

@testable import SwiftCouch

/// A transport that answers every request from a thread of its own, marked as the socket
/// transport marks its connection threads, and records on which thread each request was handed
/// to it and answered.
private final class ThreadRecordingTransport: Transport, @unchecked Sendable {
    // @unchecked Sendable: the logs are thread-safe; nothing else is mutable.
    let handedOver = EventLog<ObjectIdentifier>()
    let answered = EventLog<ObjectIdentifier>()

    func send(_ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void)
        -> any Cancellable
    {
        handedOver.append(ObjectIdentifier(Thread.current))
        Thread.detachNewThread { [self] in
            ThreadRole.markConnectionThread()
            answered.append(ObjectIdentifier(Thread.current))
            completion(
                .success(
                    HTTPResponse(
                        statusCode: 200, headers: ["Content-Type": "application/json"], body: Data(#"{"ok":true}"#.utf8)
                    )))
        }
        return Nothing()
    }

    func shutdown() {}

    private struct Nothing: Cancellable {
        func cancel() {}
    }
}

/// Records the thread `serialise` and `processResponse` run on.
private struct ThreadRecordingOperation: JSONOperation {
    typealias Response = OKResponse
    let serialised: EventLog<ObjectIdentifier>
    let processed: EventLog<ObjectIdentifier>

    mutating func serialise() throws { serialised.append(ObjectIdentifier(Thread.current)) }
    var endpoint: CouchPath { CouchPath("db", "doc") }

    func processResponse(data: Data, httpInfo: HTTPInfo) throws -> OKResponse {
        processed.append(ObjectIdentifier(Thread.current))
        return try JSONDecoder().decode(OKResponse.self, from: data)
    }
}

@Suite("Thread hand-offs: a request crosses as few threads as the design allows")
struct HandOffTests {
    @Test(
        "execute: the thread that prepares the request hands it to the transport; processResponse runs where it answered"
    )
    func executeHasNoSessionHops() async throws {
        let transport = ThreadRecordingTransport()
        var configuration = Configuration()
        configuration.transport = transport
        configuration.authentication = .basic
        let client = CouchDBClient(
            url: URL(string: "http://couch.invalid")!, credentials: Credentials(username: "u", password: "p"),
            configuration: configuration)
        defer { client.shutdown() }
        let serialised = EventLog<ObjectIdentifier>()
        let processed = EventLog<ObjectIdentifier>()
        for _ in 0..<20 {
            let value = try await client.value(ThreadRecordingOperation(serialised: serialised, processed: processed))
            #expect(value.ok)
        }
        // Before: the request went to the session's queue (another thread) on its way to the
        // transport, and the answer went to that queue and then to the callback queue.
        #expect(serialised.all == transport.handedOver.all, "no hop between preparing and sending")
        #expect(processed.all == transport.answered.all, "no hop between the answer and processResponse")
        #expect(processed.all.count == 20)
    }

    @Test("Completion handlers still run on the client's callback queue")
    func completionHandlersKeepTheirQueue() {
        let transport = ThreadRecordingTransport()
        var configuration = Configuration()
        let callbacks = DispatchQueue(label: "test.callbacks")
        let key = DispatchSpecificKey<Bool>()
        callbacks.setSpecific(key: key, value: true)
        configuration.transport = transport
        configuration.callbackQueue = callbacks
        let client = CouchDBClient(url: URL(string: "http://couch.invalid")!, configuration: configuration)
        defer { client.shutdown() }
        let onQueue = EventLog<Bool>()
        let done = DispatchSemaphore(value: 0)
        client.add(
            operation: ThreadRecordingOperation(serialised: EventLog(), processed: EventLog())
        ) { result in
            onQueue.append(DispatchQueue.getSpecific(key: key) == true && (try? result.get()) != nil)
            done.signal()
        }
        #expect(waitFor(done))
        #expect(onQueue.all == [true])
    }
}
