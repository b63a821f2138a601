import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The default ``Transport``: its own `URLSession`s (never the shared one), with no cookie storage,
/// no cache and no credential store, so that every client's session state stays its own.
///
/// Whole responses and streamed responses each have a session with a data delegate on a serial
/// delegate queue; the delegates only hand what URLSession reports to the task's state. A whole
/// body is collected as it arrives and the request fails as soon as it passes
/// ``HTTPRequest/maximumResponseBodySize`` (the task is cancelled); a streamed body is queued and
/// handed to its receiver from a thread of the transport's own, at most `maximumStreamReadAhead`
/// bytes ahead of it (see ``init(maximumConnectionsPerHost:maximumStreamReadAhead:)``).
/// ``HTTPRequest/deadline`` is a Dispatch timer that cancels the task and fails the request with
/// `URLError(.timedOut)`; `timeoutInterval`, URLSession's idle timeout, is
/// ``HTTPRequest/timeout``.
///
/// **Compression.** URLSession inflates a compressed body itself, before the transport sees it,
/// whatever `Accept-Encoding` the request names (FoundationNetworking on Linux always has libcurl
/// decode, measured with libcurl 7.88; URLSession on Apple platforms decodes too), and on Linux a
/// gzip body cut short with its framing intact arrives as complete. So the transport asks for
/// `Accept-Encoding: identity` (unless the request names its own) and refuses a response body that
/// comes compressed anyway, with `URLError(.cannotDecodeContentData)`: its length, checksum and
/// inflation ratio (``HTTPRequest/maximumDecompressionRatio``) could not be checked. CouchDB
/// compresses nothing unless asked (attachments stored compressed are inflated by the server).
/// ``SocketTransport`` asks for gzip and inflates and checks it itself.
///
/// Of the ways of driving `URLSession` measured on Linux
/// (`SwiftCouchBenchmarks --urlsession-study`: configurations, completion handlers, upload tasks,
/// data delegates, async calls, body encodings), the configuration below mattered most (about a
/// fifth less client CPU than a stock ephemeral session); completion handlers, cheaper than data
/// delegates there, cannot stop a body at its limit, and async `data(for:)` cannot be made safe
/// against `shutdown()` — FoundationNetworking traps when a task is created on an invalidated
/// session, and `data(for:)` creates its task out of the transport's reach. See docs/BENCHMARKS.md.
public final class URLSessionTransport: Transport {
    private let session: URLSession
    private let wholeBodyDelegate: WholeBodyDelegate
    private let streamingDelegate: StreamingDelegate
    private let streamingSession: URLSession
    private let maximumStreamReadAhead: Int
    /// Set by `shutdown()`: an invalidated URLSession traps when given a task, so requests after
    /// shutdown fail with an error instead.
    private let isShutDown = Locked(false)

    /// The default of `maximumStreamReadAhead`: 32 MiB.
    public static let defaultMaximumStreamReadAhead = 32 << 20

    /// Creates a transport.
    /// - Parameters:
    ///   - maximumConnectionsPerHost: how many connections to open to one server. Defaults to 6.
    ///   - maximumStreamReadAhead: the most bytes of a streamed response (``stream(_:receiver:)``:
    ///     rows, feeds, downloads) held for a receiver that is paused or slower than the network;
    ///     past it the stream fails with `URLError(.dataLengthExceedsMaximum)` saying so, and its
    ///     task is cancelled. URLSession on Linux cannot pause a transfer (libcurl keeps reading),
    ///     so this is what bounds a stream's memory there; on Apple platforms a paused task is also
    ///     suspended, and the limit is rarely reached. Defaults to 32 MiB; values below 64 KiB are
    ///     taken as 64 KiB.
    public init(maximumConnectionsPerHost: Int = 6, maximumStreamReadAhead: Int = defaultMaximumStreamReadAhead) {
        let configuration = URLSessionTransport.configuration(maximumConnectionsPerHost: maximumConnectionsPerHost)
        self.maximumStreamReadAhead = max(64 << 10, maximumStreamReadAhead)
        wholeBodyDelegate = WholeBodyDelegate()
        let wholeQueue = OperationQueue()
        wholeQueue.maxConcurrentOperationCount = 1
        wholeQueue.name = "SwiftCouch.URLSessionTransport.whole"
        session = URLSession(configuration: configuration, delegate: wholeBodyDelegate, delegateQueue: wholeQueue)
        streamingDelegate = StreamingDelegate()
        let delegateQueue = OperationQueue()
        delegateQueue.maxConcurrentOperationCount = 1
        delegateQueue.name = "SwiftCouch.URLSessionTransport.streaming"
        streamingSession = URLSession(
            configuration: configuration, delegate: streamingDelegate, delegateQueue: delegateQueue)
    }

    private static func configuration(maximumConnectionsPerHost: Int) -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.httpCookieAcceptPolicy = .never
        configuration.urlCache = nil
        configuration.urlCredentialStorage = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpMaximumConnectionsPerHost = max(1, maximumConnectionsPerHost)
        return configuration
    }

    private static func urlRequest(_ request: HTTPRequest) -> URLRequest {
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method.rawValue
        urlRequest.timeoutInterval = request.timeout
        urlRequest.httpShouldHandleCookies = false
        var namesAcceptEncoding = false
        for field in request.headers {
            if field.name.caseInsensitiveEquals("Accept-Encoding") { namesAcceptEncoding = true }
            urlRequest.addValue(field.value, forHTTPHeaderField: field.name)
        }
        if !namesAcceptEncoding { urlRequest.setValue(acceptEncoding, forHTTPHeaderField: "Accept-Encoding") }
        if let streamed = request.streamedBody {
            // URLSession frames a body stream itself (chunked on Linux); adding Content-Length too
            // would make the request ambiguous, and servers rightly refuse that.
            urlRequest.httpBodyStream = streamed.makeInputStream()
        } else {
            urlRequest.httpBody = request.body
        }
        return urlRequest
    }

    static func fields(of response: HTTPURLResponse) -> HTTPFields {
        var headers = HTTPFields()
        for (name, value) in response.allHeaderFields {
            headers.append("\(name)", "\(value)")
        }
        return headers
    }

    /// The error for a request made after `shutdown()`.
    static let shutDownError = CouchError(
        kind: .transport, message: "The client was shut down; make a new CouchDBClient to send more requests.")

    public func send(
        _ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void
    ) -> any Cancellable {
        let urlRequest = Self.urlRequest(request)
        // Created under the lock that `shutdown()` takes, so no task reaches an invalidated session.
        let made = isShutDown.withLock { isShutDown -> URLSessionDataTask? in
            isShutDown ? nil : session.dataTask(with: urlRequest)
        }
        guard let task = made else {
            completion(.failure(Self.shutDownError))
            return WholeBodyStreamingTask(inner: NothingToCancel())
        }
        let transfer = WholeBodyTransfer(request: request, completion: completion)
        wholeBodyDelegate.register(task: task, transfer: transfer)
        transfer.start(task)
        task.resume()
        return DataTaskHandle(task: task)
    }

    public func stream(_ request: HTTPRequest, receiver: any StreamReceiver) -> any StreamingTask {
        let urlRequest = Self.urlRequest(request)
        let made = isShutDown.withLock { isShutDown -> URLSessionDataTask? in
            isShutDown ? nil : streamingSession.dataTask(with: urlRequest)
        }
        guard let task = made else {
            receiver.complete(error: Self.shutDownError)
            return WholeBodyStreamingTask(inner: NothingToCancel())
        }
        let pump = StreamPump(request: request, receiver: receiver, readAheadLimit: maximumStreamReadAhead)
        streamingDelegate.register(task: task, pump: pump)
        pump.start(task)
        task.resume()
        return StreamingTaskHandle(task: task, pump: pump)
    }

    public func shutdown() {
        let first = isShutDown.withLock { isShutDown -> Bool in
            defer { isShutDown = true }
            return !isShutDown
        }
        guard first else { return }
        session.finishTasksAndInvalidate()
        streamingSession.finishTasksAndInvalidate()
    }
}

/// Nothing in flight.
struct NothingToCancel: Cancellable {
    func cancel() {}
}

/// A whole-body task: it can only be cancelled (`URLSessionTask.cancel()` is thread-safe).
///
/// `@unchecked Sendable`: the task reference never changes.
private struct DataTaskHandle: Cancellable, @unchecked Sendable {
    let task: URLSessionTask
    func cancel() { task.cancel() }
}

/// Pause, resume and cancel for a streamed task.
///
/// Pausing stops the task's ``StreamPump`` from handing chunks to the receiver; what arrives
/// meanwhile waits in the pump, up to the transport's `maximumStreamReadAhead`. On Linux the task
/// itself is never suspended: FoundationNetworking cannot pause a transfer in flight. Its
/// `suspend()` takes the transfer out of libcurl and `resume()` puts it back as a new transfer,
/// which sends the request again and delivers the body again from its start (measured here: an
/// 8 MiB stream paused and resumed every 50 chunks reached the server as 19 requests and delivered
/// 76 MB); and a `suspend()` that the task's completion overtakes traps in
/// `_NativeProtocol.stopLoading()`. So URLSession streams on Linux have no back-pressure on the
/// network (README, Limitations), only a bounded queue; `AutomaticTransport` sends `http` over
/// ``SocketTransport`` there. On Apple platforms, `suspend()` and `resume()` pause and continue the
/// transfer as well; nested calls are balanced here, so that one `resume()` undoes any number of
/// `pause()`s.
///
/// `@unchecked Sendable`: `URLSessionTask` is thread-safe; `suspended` is a `Locked`.
final class StreamingTaskHandle: StreamingTask, @unchecked Sendable {
    private let task: URLSessionTask
    private let pump: StreamPump
    private let suspended = Locked(false)

    init(task: URLSessionTask, pump: StreamPump) {
        self.task = task
        self.pump = pump
    }

    func pause() {
        pump.pause()
        #if !canImport(FoundationNetworking)
            suspended.withLock { suspended in
                guard !suspended else { return }
                suspended = true
                task.suspend()
            }
        #endif
    }

    func resume() {
        #if !canImport(FoundationNetworking)
            suspended.withLock { suspended in
                guard suspended else { return }
                suspended = false
                task.resume()
            }
        #endif
        pump.resume()
    }

    /// Ends the stream with `URLError(.cancelled)` (queued chunks are dropped) and cancels the task.
    func cancel() { pump.fail(URLError(.cancelled)) }
}

/// The whole-body session's delegate: routes each task's head, body and end to its
/// ``WholeBodyTransfer``. Redirects are never followed (the 3xx response is the answer, which the
/// session reports as an error).
///
/// It does not offer a new body stream: when libcurl resends a request with a body on a fresh
/// connection after a reused one was reset, FoundationNetworking (Linux) can rewind only stream
/// bodies and traps when given one for a `httpBody` request; without one, that resend waits for
/// the request's timeout and fails with it (outcome unknown). The socket transport, the default
/// for `http` on Linux, resends such requests itself.
///
/// `@unchecked Sendable`: the transfer table is a `Locked`.
private final class WholeBodyDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private let transfers = Locked<[Int: WholeBodyTransfer]>([:])

    func register(task: URLSessionTask, transfer: WholeBodyTransfer) {
        transfers.withLock { $0[task.taskIdentifier] = transfer }
    }

    private func transfer(for task: URLSessionTask) -> WholeBodyTransfer? {
        transfers.withLock { $0[task.taskIdentifier] }
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        transfer(for: dataTask)?.receive(response: response)
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        transfer(for: dataTask)?.receive(data: data)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let transfer = transfers.withLock { $0.removeValue(forKey: task.taskIdentifier) }
        transfer?.complete(error: error)
    }
}

/// Routes a streaming session's delegate calls to each task's ``StreamPump``.
///
/// `@unchecked Sendable`: the pump table is a `Locked`; URLSession calls the delegate on its
/// serial delegate queue.
private final class StreamingDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private let pumps = Locked<[Int: StreamPump]>([:])

    func register(task: URLSessionTask, pump: StreamPump) {
        pumps.withLock { $0[task.taskIdentifier] = pump }
    }

    private func pump(for task: URLSessionTask) -> StreamPump? {
        pumps.withLock { $0[task.taskIdentifier] }
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)  // never followed: see WholeBodyDelegate
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask,
        needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void
    ) {
        let body = pump(for: task)?.body
        completionHandler(body?.isRepeatable == true ? body?.makeInputStream() : nil)
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64,
        totalBytesExpectedToSend: Int64
    ) {
        pump(for: task)?.sent(bytes: totalBytesSent, of: totalBytesExpectedToSend > 0 ? totalBytesExpectedToSend : nil)
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        pump(for: dataTask)?.receive(response: response)
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        pump(for: dataTask)?.receive(data: data)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let pump = pumps.withLock { $0.removeValue(forKey: task.taskIdentifier) }
        pump?.complete(error: error)
    }
}
