import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

// The per-task state of ``URLSessionTransport``: the deadline timer, a whole body collected as it
// arrives (and cut off at its limit), and a streamed body handed to its receiver from a bounded
// queue of the transport's own. The delegates only look the state up and hand it what URLSession
// reports, so that a slow receiver never holds up URLSession's delegate queue (on Linux, libcurl
// keeps reading while that queue is held up, and what it reads waits there without bound).

/// A one-shot timer on a Dispatch queue (no thread waits for it) that runs `fire` after `seconds`.
///
/// The timers fire on a serial queue of their own, not a global one: a serial queue gets a thread
/// even when every thread of the global queues is busy (say, with receivers that block), so a
/// deadline is not held up by other work. `fire` must be quick; cancelling a task (which can wait
/// for libcurl's turn) goes to ``cancellations``.
///
/// `@unchecked Sendable`: the source is only touched through its own thread-safe calls.
final class DeadlineTimer: @unchecked Sendable {
    private let source: DispatchSourceTimer
    /// When the timer fires.
    private let fireTime: DispatchTime

    /// Where every deadline fires.
    static let queue = DispatchQueue(label: "SwiftCouch.URLSessionTransport.deadlines")
    /// Where the tasks of expired deadlines are cancelled.
    static let cancellations = DispatchQueue(label: "SwiftCouch.URLSessionTransport.cancellations")

    /// The longest delay a timer is armed for; a longer (or infinite) deadline is no deadline.
    static let longest: TimeInterval = 1e9

    /// A timer for `seconds`, or nil for no deadline: nil, NaN, infinite, zero or less (as the
    /// socket transport reads them), or past ``longest``.
    init?(seconds: TimeInterval?, fire: @escaping @Sendable () -> Void) {
        guard let seconds, seconds.isFinite, seconds > 0, seconds <= Self.longest else { return nil }
        let nanoseconds = Int((seconds * 1e9).rounded())
        source = DispatchSource.makeTimerSource(queue: Self.queue)
        source.setEventHandler(handler: fire)
        fireTime = .now() + .nanoseconds(nanoseconds)
        source.schedule(deadline: fireTime)
        source.resume()
    }

    /// Whether `error` is URLSession's own timeout meeting this deadline (within a quarter of a
    /// second of it): URLSession's idle timer, as long as the deadline, can fire first, and the
    /// error should still say that the deadline passed.
    func explains(_ error: any Error) -> Bool {
        guard (error as? URLError)?.code == .timedOut else { return false }
        return DispatchTime.now().uptimeNanoseconds &+ 250_000_000 >= fireTime.uptimeNanoseconds
    }

    /// Stops the timer; harmless after it fired or was cancelled.
    func cancel() { source.cancel() }

    deinit { source.cancel() }

    /// The error for a response that did not end (`whole`) or whose head did not arrive within
    /// `seconds`.
    static func error(seconds: TimeInterval, whole: Bool) -> URLError {
        let what = whole ? "The response did not complete" : "The response head did not arrive"
        let message =
            "\(what) within its deadline of \(Self.format(seconds)) s (HTTPRequest.deadline, from "
            + "Configuration.requestTimeout); the request was cancelled."
        return URLError(.timedOut, userInfo: [NSLocalizedDescriptionKey: message])
    }

    private static func format(_ seconds: TimeInterval) -> String {
        seconds == seconds.rounded() && abs(seconds) < 1e15 ? String(Int(seconds)) : String(seconds)
    }
}

extension URLSessionTransport {
    /// The `Accept-Encoding` sent when a request names none: URLSession inflates a compressed body
    /// itself, out of the transport's sight (see ``refusal(of:for:)``), so none is asked for.
    static let acceptEncoding = "identity"

    /// The error for a response whose body arrives compressed (`Content-Encoding` other than
    /// `identity`), or nil when it is not, or has no body.
    ///
    /// URLSession inflates such a body before the transport sees it — FoundationNetworking (Linux)
    /// whatever `Accept-Encoding` the request named (measured with libcurl 7.88), URLSession on
    /// Apple platforms too — and FoundationNetworking reports a gzip body cut short, with its
    /// framing intact, as complete. The compressed length, the trailer's CRC32 and ISIZE and the
    /// inflation ratio cannot be checked, so the body is refused instead of trusted.
    static func refusal(of response: HTTPURLResponse, for request: HTTPRequest) -> URLError? {
        guard let encoding = response.value(forHTTPHeaderField: "Content-Encoding") else { return nil }
        let codings = encoding.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        guard codings.contains(where: { !$0.isEmpty && $0 != "identity" }) else { return nil }
        let status = response.statusCode
        guard request.method != .head, status >= 200, status != 204, status != 304 else { return nil }
        let message =
            "The server sent a compressed body (Content-Encoding: \(encoding)). URLSession inflates such a body "
            + "out of SwiftCouch's sight, so its length and checksum cannot be checked (a body cut short would "
            + "pass as complete): URLSessionTransport asks for none (Accept-Encoding: identity) and refuses it. "
            + "SocketTransport (http) inflates and checks compressed bodies itself."
        return URLError(.cannotDecodeContentData, userInfo: [NSLocalizedDescriptionKey: message])
    }

    /// The error for a body that ended before its `Content-Length` (`received` of `expected` bytes).
    static func cutOff(received: Int, expected: Int) -> URLError {
        URLError(
            .networkConnectionLost,
            userInfo: [
                NSLocalizedDescriptionKey:
                    "The connection closed in the middle of the response (\(received) of \(expected) bytes)"
            ])
    }

    /// Whether `error` is libcurl's own report of a failed transfer (FoundationNetworking gives
    /// those `NSURLErrorUnknown`, "transfer closed with N bytes remaining to read"), not a
    /// cancellation or timeout.
    static func isTransferError(_ error: any Error) -> Bool {
        let error = error as NSError
        return error.domain == NSURLErrorDomain && error.code == NSURLErrorUnknown
    }

    /// The declared `Content-Length` of a response whose body arrives as sent, or nil.
    static func declaredLength(of response: HTTPURLResponse) -> Int? {
        guard response.value(forHTTPHeaderField: "Content-Encoding") == nil,
            let text = response.value(forHTTPHeaderField: "Content-Length"),
            let length = Int(text.trimmingCharacters(in: .whitespaces)), length >= 0
        else { return nil }
        return length
    }
}

// MARK: - Whole bodies

/// One whole-body request: collects the body as URLSession delivers it, fails it as soon as it
/// passes its limit, and completes exactly once, whichever of the response's end, the deadline, the
/// limit or a cancellation comes first.
///
/// `@unchecked Sendable`: the mutable state is only touched under `lock`; `request` is immutable.
final class WholeBodyTransfer: @unchecked Sendable {
    private struct State {
        var completion: (@Sendable (Result<HTTPResponse, any Error>) -> Void)?
        var response: HTTPURLResponse?
        var body = Data()
        var timer: DeadlineTimer?
        var task: URLSessionTask?
    }

    let request: HTTPRequest
    private let state: Locked<State>

    init(request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void) {
        self.request = request
        state = Locked(State(completion: completion))
    }

    /// Starts the deadline for `task` (which the transport resumes next).
    func start(_ task: URLSessionTask) {
        state.withLock { $0.task = task }
        let deadline = request.deadline
        let timer = DeadlineTimer(seconds: deadline) { [weak self] in
            self?.fail(DeadlineTimer.error(seconds: deadline ?? 0, whole: true), cancelLater: true)
        }
        let finished = state.withLock { state -> Bool in
            if state.completion != nil { state.timer = timer }
            return state.completion == nil
        }
        if finished { timer?.cancel() }
    }

    /// The head: refused when compressed, or when its declared length is past the limit.
    func receive(response: URLResponse) {
        // FoundationNetworking reports every interim `1xx` head too: the deadline runs on.
        guard let http = response as? HTTPURLResponse, !(100..<200).contains(http.statusCode) else { return }
        if let refusal = URLSessionTransport.refusal(of: http, for: request) {
            fail(refusal)
            return
        }
        if let limit = request.maximumResponseBodySize, let length = URLSessionTransport.declaredLength(of: http),
            length > limit
        {
            fail(request.bodyTooLarge(length))
            return
        }
        state.withLock { state in
            if state.completion != nil { state.response = http }
        }
    }

    /// The next piece of the body: kept, or the request failed once the body passes its limit.
    func receive(data: Data) {
        let limit = request.maximumResponseBodySize
        let size = state.withLock { state -> Int? in
            guard state.completion != nil else { return nil }
            if state.body.isEmpty { state.body = data } else { state.body.append(data) }
            guard let limit, state.body.count > limit else { return nil }
            return state.body.count
        }
        if let size { fail(request.bodyTooLarge(size)) }
    }

    /// URLSession's end of the task.
    func complete(error: (any Error)?) {
        let (response, body, timer) = state.withLock { ($0.response, $0.body, $0.timer) }
        if let error, let timer, timer.explains(error) {
            finish(.failure(DeadlineTimer.error(seconds: request.deadline ?? 0, whole: true)))
            return
        }
        if let error {
            if URLSessionTransport.isTransferError(error), let response,
                let expected = URLSessionTransport.declaredLength(of: response), body.count < expected
            {
                finish(.failure(URLSessionTransport.cutOff(received: body.count, expected: expected)))
            } else {
                finish(.failure(error))
            }
            return
        }
        guard let response else {
            finish(.failure(URLError(.badServerResponse)))
            return
        }
        if let expected = URLSessionTransport.declaredLength(of: response), body.count < expected,
            request.method != .head, response.statusCode != 204, response.statusCode != 304
        {
            finish(.failure(URLSessionTransport.cutOff(received: body.count, expected: expected)))
            return
        }
        finish(
            .success(
                HTTPResponse(
                    statusCode: response.statusCode, headers: URLSessionTransport.fields(of: response), body: body)))
    }

    /// Fails the request with `error` (unless it completed already) and cancels its task (later,
    /// on ``DeadlineTimer/cancellations``, when `cancelLater`).
    func fail(_ error: any Error, cancelLater: Bool = false) {
        let task = state.withLock { $0.task }
        guard finish(.failure(error)), let task else { return }
        if cancelLater {
            DeadlineTimer.cancellations.async { task.cancel() }
        } else {
            task.cancel()
        }
    }

    /// Completes the request once; false when it had completed already.
    @discardableResult
    private func finish(_ result: Result<HTTPResponse, any Error>) -> Bool {
        let (completion, timer) = state.withLock {
            state -> ((@Sendable (Result<HTTPResponse, any Error>) -> Void)?, DeadlineTimer?) in
            defer {
                state.completion = nil
                state.timer = nil
                state.body = Data()
                state.response = nil
            }
            return (state.completion, state.timer)
        }
        guard let completion else { return false }
        timer?.cancel()
        completion(result)
        return true
    }
}

// MARK: - Streamed bodies

/// One streamed request: the events URLSession reports, queued and handed to the receiver in order
/// from a serial queue of the stream's own, so that the delegate queue never waits for the receiver.
///
/// A paused stream's chunks wait in the queue (URLSession on Linux cannot stop reading; on Apple
/// platforms the task is suspended as well), and so do chunks that arrive faster than the receiver
/// takes them; once more than `readAheadLimit` bytes wait, the stream fails saying so and its task
/// is cancelled, instead of holding an unbounded response in memory. The deadline covers the head.
///
/// `@unchecked Sendable`: the mutable state is only touched under `lock`; the receiver's calls are
/// made by one draining thread at a time.
final class StreamPump: @unchecked Sendable {
    private enum Event {
        case head(HTTPResponse)
        case chunk(Data)
        case sent(Int64, Int64?)
    }

    private struct State {
        var events: [Event] = []
        var next = 0
        var queuedBytes = 0
        var paused = false
        var draining = false
        /// URLSession's end of the task, delivered once the queue is empty.
        var end: (any Error)??
        /// A failure (cancellation, deadline, refusal, read-ahead limit): delivered next, dropping the queue.
        var failure: (any Error)?
        var completed = false
        var timer: DeadlineTimer?
        var task: URLSessionTask?
        var response: HTTPURLResponse?
        var received = 0
    }

    let request: HTTPRequest
    let body: StreamedBody?
    private let receiver: any StreamReceiver
    private let readAheadLimit: Int
    private let state = Locked(State())
    private let deliveries = DispatchQueue(label: "SwiftCouch.URLSessionTransport.stream")

    init(request: HTTPRequest, receiver: any StreamReceiver, readAheadLimit: Int) {
        self.request = request
        self.body = request.streamedBody
        self.receiver = receiver
        self.readAheadLimit = readAheadLimit
    }

    /// Starts the head's deadline for `task` (which the transport resumes next).
    func start(_ task: URLSessionTask) {
        state.withLock { $0.task = task }
        let deadline = request.deadline
        let timer = DeadlineTimer(seconds: deadline) { [weak self] in
            self?.fail(DeadlineTimer.error(seconds: deadline ?? 0, whole: false), cancelLater: true)
        }
        let done = state.withLock { state -> Bool in
            let done = state.completed || state.failure != nil || state.response != nil || state.end != nil
            if !done { state.timer = timer }
            return done
        }
        if done { timer?.cancel() }
    }

    // MARK: From the delegate

    func receive(response: URLResponse) {
        // FoundationNetworking reports every interim `1xx` head too: the head's deadline runs on.
        if let http = response as? HTTPURLResponse, (100..<200).contains(http.statusCode) { return }
        let timer = state.withLock { state -> DeadlineTimer? in
            defer { state.timer = nil }
            return state.timer
        }
        timer?.cancel()
        guard let http = response as? HTTPURLResponse else { return }
        if let refusal = URLSessionTransport.refusal(of: http, for: request) {
            fail(refusal)
            return
        }
        state.withLock { $0.response = http }
        enqueue(.head(HTTPResponse(statusCode: http.statusCode, headers: URLSessionTransport.fields(of: http))))
    }

    func receive(data: Data) {
        guard !data.isEmpty else { return }
        let overflow = state.withLock { state -> Int? in
            state.received += data.count
            guard !state.completed, state.failure == nil else { return nil }
            if state.queuedBytes + data.count > readAheadLimit { return state.queuedBytes + data.count }
            return nil
        }
        if let overflow {
            fail(readAheadError(overflow))
            return
        }
        enqueue(.chunk(data))
    }

    func sent(bytes: Int64, of total: Int64?) { enqueue(.sent(bytes, total)) }

    func complete(error: (any Error)?) {
        var error = error
        let (timer, start) = state.withLock { state -> (DeadlineTimer?, Bool) in
            if let timeout = error, let timer = state.timer, timer.explains(timeout) {
                error = DeadlineTimer.error(seconds: request.deadline ?? 0, whole: false)
            } else if error.map(URLSessionTransport.isTransferError) ?? true, let response = state.response,
                let expected = URLSessionTransport.declaredLength(of: response), state.received < expected,
                request.method != .head, response.statusCode != 204, response.statusCode != 304
            {
                error = URLSessionTransport.cutOff(received: state.received, expected: expected)
            }
            state.end = .some(error)
            defer { state.timer = nil }
            return (state.timer, startDraining(&state))
        }
        timer?.cancel()
        if start { drainSoon() }
    }

    // MARK: From the handle

    func pause() { state.withLock { $0.paused = true } }

    func resume() {
        let start = state.withLock { state -> Bool in
            state.paused = false
            return startDraining(&state)
        }
        if start { drainSoon() }
    }

    /// Ends the stream with `error` (unless it ended already): queued chunks are dropped, the
    /// receiver is completed next, and the task is cancelled (later, on
    /// ``DeadlineTimer/cancellations``, when `cancelLater`).
    func fail(_ error: any Error, cancelLater: Bool = false) {
        let (task, timer, start) = state.withLock { state -> (URLSessionTask?, DeadlineTimer?, Bool) in
            guard !state.completed, state.failure == nil else { return (nil, nil, false) }
            state.failure = error
            state.events = []
            state.next = 0
            state.queuedBytes = 0
            defer { state.timer = nil }
            return (state.task, state.timer, startDraining(&state))
        }
        timer?.cancel()
        if start { drainSoon() }
        if let task {
            if cancelLater {
                DeadlineTimer.cancellations.async { task.cancel() }
            } else {
                task.cancel()
            }
        }
    }

    // MARK: Delivery

    private func enqueue(_ event: Event) {
        let start = state.withLock { state -> Bool in
            guard !state.completed, state.failure == nil else { return false }
            state.events.append(event)
            if case .chunk(let data) = event { state.queuedBytes += data.count }
            return startDraining(&state)
        }
        if start { drainSoon() }
    }

    /// Whether a drain is to start now (one at a time): something can be delivered and none runs.
    private func startDraining(_ state: inout State) -> Bool {
        guard !state.draining, !state.completed, Self.nextDelivery(&state, peek: true) != nil else { return false }
        state.draining = true
        return true
    }

    /// Runs a drain on the stream's own serial queue (a serial queue gets a thread even when the
    /// global queues' are all busy, and one stream's slow receiver holds up no other stream).
    private func drainSoon() {
        deliveries.async { [self] in drain() }
    }

    private enum Delivery {
        case event(Event)
        case complete((any Error)?)
    }

    /// What to deliver next (taken unless `peek`): a failure first, then the queue (chunks only
    /// when not paused), then the end.
    private static func nextDelivery(_ state: inout State, peek: Bool) -> Delivery? {
        if state.completed { return nil }
        if let failure = state.failure {
            if !peek { state.completed = true }
            return .complete(failure)
        }
        if state.next < state.events.count {
            let event = state.events[state.next]
            if case .chunk(let data) = event {
                if state.paused { return nil }
                if !peek { state.queuedBytes -= data.count }
            }
            if !peek {
                state.next += 1
                if state.next == state.events.count || state.next > 1_024 && state.next * 2 > state.events.count {
                    state.events.removeFirst(state.next)
                    state.next = 0
                }
            }
            return .event(event)
        }
        if let end = state.end {
            if !peek { state.completed = true }
            return .complete(end)
        }
        return nil
    }

    private func drain() {
        while true {
            let delivery = state.withLock { state -> Delivery? in
                guard let delivery = Self.nextDelivery(&state, peek: false) else {
                    state.draining = false
                    return nil
                }
                return delivery
            }
            switch delivery {
            case nil:
                return
            case .event(.head(let head)):
                receiver.receive(head: head)
            case .event(.chunk(let data)):
                receiver.receive(chunk: data)
            case .event(.sent(let bytes, let total)):
                receiver.sent(bytes: bytes, of: total)
            case .complete(let error):
                state.withLock { state in
                    state.task = nil
                    state.response = nil
                }
                receiver.complete(error: error)
            }
        }
    }

    private func readAheadError(_ bytes: Int) -> URLError {
        let message =
            "The stream's receiver fell behind by more than \(readAheadLimit) bytes (\(bytes) bytes were "
            + "waiting; URLSessionTransport's maximumStreamReadAhead): URLSession on Linux "
            + "cannot pause a transfer, so the stream was cancelled instead of holding the response in memory. "
            + "Page large reads (client.pages), raise the limit, or use SocketTransport (http)."
        return URLError(.dataLengthExceedsMaximum, userInfo: [NSLocalizedDescriptionKey: message])
    }
}
