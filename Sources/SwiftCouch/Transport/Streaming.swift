import Foundation

/// Receives a response as it arrives: the head, then the body in pieces, then the end.
///
/// Calls come in order (`receive(head:)`, any number of `receive(chunk:)`, one `complete`), never
/// concurrently, but on no particular thread.
public protocol StreamReceiver: AnyObject, Sendable {
    /// The status and headers (the `body` of the response is empty).
    func receive(head: HTTPResponse)
    /// The next piece of the body.
    func receive(chunk: Data)
    /// The body is complete (`error` nil), or the transfer failed.
    func complete(error: (any Error)?)
    /// Upload progress: `sent` bytes of the request body out of `total` (when known). Defaults to
    /// doing nothing.
    func sent(bytes sent: Int64, of total: Int64?)
}

extension StreamReceiver {
    public func sent(bytes sent: Int64, of total: Int64?) {}
}

/// Hands a receiver its callbacks one at a time, whichever threads they come from, and nothing
/// after `complete(error:)`: a cancellation that completes the receiver on the cancelling thread
/// waits for a chunk the transport's thread is delivering (say, writing to a download's file)
/// instead of racing it. Re-entrant: a receiver that cancels its own transfer from inside a
/// callback is completed at once, on that thread.
final class SerialReceiver: StreamReceiver, @unchecked Sendable {
    // @unchecked Sendable: `completed` is only touched under `lock`.
    private let lock = NSRecursiveLock()
    private var completed = false
    private let inner: any StreamReceiver

    init(_ inner: any StreamReceiver) { self.inner = inner }

    private func deliver(_ call: () -> Void) {
        lock.lock()
        defer { lock.unlock() }
        if !completed { call() }
    }

    func receive(head: HTTPResponse) { deliver { inner.receive(head: head) } }
    func receive(chunk: Data) { deliver { inner.receive(chunk: chunk) } }
    func sent(bytes sent: Int64, of total: Int64?) { deliver { inner.sent(bytes: sent, of: total) } }

    func complete(error: (any Error)?) {
        deliver {
            completed = true
            inner.complete(error: error)
        }
    }
}

/// A streamed transfer that can be paused (back-pressure: the transport stops reading from the
/// connection, so the server's sends block) and resumed.
///
/// Calls are not balanced: `pause()` on a paused transfer and `resume()` on a running one do
/// nothing, and the last call made decides (the session makes them one at a time).
public protocol StreamingTask: Cancellable {
    /// Stops delivering chunks until `resume()`; chunks already on their way may still arrive.
    func pause()
    /// Delivers chunks again.
    func resume()
}

extension Transport {
    /// The default streaming: sends the request with ``send(_:completion:)`` and delivers the
    /// whole body as one chunk. Transports that can do better (``URLSessionTransport``) override it.
    public func stream(_ request: HTTPRequest, receiver: any StreamReceiver) -> any StreamingTask {
        let cancellable = send(request) { result in
            switch result {
            case .success(let response):
                receiver.receive(head: HTTPResponse(statusCode: response.statusCode, headers: response.headers))
                if !response.body.isEmpty { receiver.receive(chunk: response.body) }
                receiver.complete(error: nil)
            case .failure(let error):
                receiver.complete(error: error)
            }
        }
        return WholeBodyStreamingTask(inner: cancellable)
    }
}

/// A `StreamingTask` over a transfer that cannot pause.
struct WholeBodyStreamingTask: StreamingTask {
    let inner: any Cancellable
    func cancel() { inner.cancel() }
    func pause() {}
    func resume() {}
}
