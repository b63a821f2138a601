import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The default ``Transport``: its own `URLSession`s (never the shared one), with no cookie storage,
/// no cache and no credential store, so that every client's session state stays its own.
///
/// Whole responses use completion-handler data tasks with `httpBody`; streamed responses use a
/// second session with a data delegate and a serial delegate queue, so bodies arrive chunk by
/// chunk, in order. Of the ways of driving `URLSession` measured on Linux
/// (`SwiftCouchBenchmarks --urlsession-study`: configurations, completion handlers, upload tasks,
/// data delegates, async calls, body encodings), the configuration below mattered most (about a
/// fifth less client CPU than a stock ephemeral session); of the rest, only async `data(for:)` was
/// cheaper (about 7%), and it cannot be made safe against `shutdown()` — FoundationNetworking
/// traps when a task is created on an invalidated session, and `data(for:)` creates its task out
/// of the transport's reach. See docs/BENCHMARKS.md.
public final class URLSessionTransport: Transport {
    private let session: URLSession
    private let streamingDelegate: StreamingDelegate
    private let streamingSession: URLSession
    /// Set by `shutdown()`: an invalidated URLSession traps when given a task, so requests after
    /// shutdown fail with an error instead.
    private let isShutDown = Locked(false)

    /// Creates a transport.
    /// - Parameter maximumConnectionsPerHost: how many connections to open to one server. Defaults to 6.
    public init(maximumConnectionsPerHost: Int = 6) {
        let configuration = URLSessionTransport.configuration(maximumConnectionsPerHost: maximumConnectionsPerHost)
        session = URLSession(configuration: configuration, delegate: WholeBodyDelegate(), delegateQueue: nil)
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
        for field in request.headers {
            urlRequest.addValue(field.value, forHTTPHeaderField: field.name)
        }
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
        let handler: @Sendable (Data?, URLResponse?, (any Error)?) -> Void = { data, response, error in
            if let error {
                completion(.failure(error))
                return
            }
            guard let http = response as? HTTPURLResponse else {
                completion(.failure(URLError(.badServerResponse)))
                return
            }
            if let limit = request.maximumResponseBodySize, let data, data.count > limit {
                completion(.failure(request.bodyTooLarge(data.count)))
                return
            }
            completion(
                .success(
                    HTTPResponse(statusCode: http.statusCode, headers: Self.fields(of: http), body: data ?? Data())))
        }
        // Created under the lock that `shutdown()` takes, so no task reaches an invalidated session.
        let made = isShutDown.withLock { isShutDown -> URLSessionDataTask? in
            isShutDown ? nil : session.dataTask(with: urlRequest, completionHandler: handler)
        }
        guard let task = made else {
            completion(.failure(Self.shutDownError))
            return WholeBodyStreamingTask(inner: NothingToCancel())
        }
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
        streamingDelegate.register(task: task, receiver: receiver, body: request.streamedBody)
        task.resume()
        return StreamingTaskHandle(task: task)
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
/// On Linux, pausing does nothing: FoundationNetworking cannot pause a transfer in flight. Its
/// `suspend()` takes the transfer out of libcurl and `resume()` puts it back as a new transfer,
/// which sends the request again and delivers the body again from its start (measured here: an
/// 8 MiB stream paused and resumed every 50 chunks reached the server as 19 requests and delivered
/// 76 MB); and a `suspend()` that the task's completion overtakes traps in
/// `_NativeProtocol.stopLoading()`. So URLSession streams on Linux have no back-pressure (README,
/// Limitations); `AutomaticTransport` sends `http` over ``SocketTransport`` there. On Apple
/// platforms, `suspend()` and `resume()` pause and continue the transfer; nested calls are
/// balanced here, so that one `resume()` undoes any number of `pause()`s.
///
/// `@unchecked Sendable`: `URLSessionTask` is thread-safe; `suspended` is a `Locked`.
final class StreamingTaskHandle: StreamingTask, @unchecked Sendable {
    private let task: URLSessionTask
    private let suspended = Locked(false)

    init(task: URLSessionTask) {
        self.task = task
    }

    func pause() {
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
    }

    func cancel() { task.cancel() }
}

/// The whole-body session's delegate: redirects are never followed (the 3xx response is the
/// answer, which the session reports as an error).
///
/// It does not offer a new body stream: when libcurl resends a request with a body on a fresh
/// connection after a reused one was reset, FoundationNetworking (Linux) can rewind only stream
/// bodies and traps when given one for a `httpBody` request; without one, that resend waits for
/// the request's timeout and fails with it (outcome unknown). The socket transport, the default
/// for `http` on Linux, resends such requests itself.
private final class WholeBodyDelegate: NSObject, URLSessionTaskDelegate, Sendable {
    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }
}

/// Routes a streaming session's delegate calls to each task's receiver.
///
/// `@unchecked Sendable`: the receiver table is a `Locked`; URLSession calls the delegate on its
/// serial delegate queue.
private final class StreamingDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private struct Entry {
        let receiver: any StreamReceiver
        let body: StreamedBody?
    }
    private let entries = Locked<[Int: Entry]>([:])

    func register(task: URLSessionTask, receiver: any StreamReceiver, body: StreamedBody?) {
        entries.withLock { $0[task.taskIdentifier] = Entry(receiver: receiver, body: body) }
    }

    private func receiver(for task: URLSessionTask) -> (any StreamReceiver)? {
        entries.withLock { $0[task.taskIdentifier]?.receiver }
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
        let body = entries.withLock { $0[task.taskIdentifier]?.body }
        completionHandler(body?.isRepeatable == true ? body?.makeInputStream() : nil)
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64,
        totalBytesExpectedToSend: Int64
    ) {
        receiver(for: task)?.sent(
            bytes: totalBytesSent, of: totalBytesExpectedToSend > 0 ? totalBytesExpectedToSend : nil)
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        if let http = response as? HTTPURLResponse {
            receiver(for: dataTask)?.receive(
                head: HTTPResponse(statusCode: http.statusCode, headers: URLSessionTransport.fields(of: http)))
        }
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        receiver(for: dataTask)?.receive(chunk: data)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let entry = entries.withLock { $0.removeValue(forKey: task.taskIdentifier) }
        entry?.receiver.complete(error: error)
    }
}
