import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Where connections go: one pool per host and port.
struct HostKey: Hashable, Sendable, CustomStringConvertible {
    var host: String
    var port: Int

    var description: String { RequestHead.hostValue(host: host, port: port) }
}

/// Where a response goes: whole to a completion handler, or piece by piece to a receiver.
enum ResponseSink: Sendable {
    case whole(@Sendable (Result<HTTPResponse, any Error>) -> Void)
    case stream(any StreamReceiver)

    /// The last call: the whole response (or the error), or the end of a stream.
    func deliver(_ result: Result<HTTPResponse, any Error>) {
        switch (self, result) {
        case (.whole(let completion), _): completion(result)
        case (.stream(let receiver), .success): receiver.complete(error: nil)
        case (.stream(let receiver), .failure(let error)): receiver.complete(error: error)
        }
    }
}

/// One request on its way through a ``SocketTransport``: queued, then run by one connection's
/// thread, then finished. It is also the handle the caller gets back, to cancel, pause or resume.
///
/// `@unchecked Sendable`: `phase`, `cancelled` and `paused` are only touched under the pool's lock;
/// the rest is immutable.
final class SocketJob: StreamingTask, @unchecked Sendable {
    enum Phase {
        case queued
        case running(SocketConnection)
        case finished
    }

    let request: HTTPRequest
    let key: HostKey
    let target: String
    let sink: ResponseSink
    private let pool: ConnectionPool

    // Guarded by `pool.lock`.
    var phase = Phase.queued
    var cancelled = false
    var paused = false
    /// Whether the caller is writing the request itself, or wrote it (``ConnectionPool/submit(_:)``).
    var callerWrite = CallerWrite.none

    /// A request handed to an idle kept-alive connection is written by the caller's thread, whose
    /// connection thread already waits on the socket: the answer wakes it, with no wake for the
    /// request (one thread hand-off fewer per request).
    enum CallerWrite {
        /// The connection's thread writes the request (a new connection, a queued request, a
        /// streamed body or response, a large body; or the caller found the connection stale,
        /// closed by the server or out of step, and wrote nothing).
        case none
        /// The caller is writing it; the connection's thread waits for the outcome.
        case inProgress
        /// The caller wrote it, or its start.
        case written(CallerWritten)
    }

    /// What the caller wrote.
    struct CallerWritten {
        /// The request head, as written.
        var head: [UInt8]
        /// Bytes of head and body the socket accepted.
        var accepted: Int
        /// Whether that is all of them (otherwise the connection's thread writes the rest).
        var complete: Bool
        /// The `errno` of a failed write (a full socket buffer is not a failure: the rest is left).
        var error: Int32?
        /// When the write ended: the request's timeout counts from there.
        var writtenAt: DispatchTime
    }

    /// The largest request body a caller writes itself (larger ones may fill the socket buffer;
    /// their connection's thread writes them, blocking as it may).
    static let callerWriteLimit = 256 * 1024

    /// Whether the caller may write this request itself on an idle connection: a whole response,
    /// and a body in memory, not too large.
    var mayBeWrittenByCaller: Bool {
        guard case .whole = sink, request.streamedBody == nil else { return false }
        return (request.body?.count ?? 0) <= Self.callerWriteLimit
    }

    /// Whether the response goes to a receiver piece by piece (it may hold its connection long:
    /// a paused row stream, a continuous feed).
    var isStream: Bool {
        if case .stream = sink { return true }
        return false
    }

    /// When the response must be complete (for a stream: its head must have arrived): the
    /// request's ``HTTPRequest/deadline`` counted from when the transport was handed the request.
    /// Nil: no deadline (none set, or not a positive finite number of seconds).
    let deadline: DispatchTime?

    init(request: HTTPRequest, key: HostKey, sink: ResponseSink, pool: ConnectionPool) {
        self.request = request
        self.key = key
        self.target = RequestHead.target(of: request)
        self.sink = sink
        self.pool = pool
        self.deadline = Self.deadline(after: request.deadline)
    }

    /// `seconds` from now, or nil when `seconds` is nil, NaN, infinite, 0 or negative (no deadline).
    static func deadline(after seconds: TimeInterval?) -> DispatchTime? {
        guard let seconds, seconds > 0, seconds.isFinite else { return nil }
        // At most ten years: the sum cannot overflow.
        let nanoseconds = UInt64(min(seconds, 10 * 365 * 86_400) * 1e9)
        return DispatchTime(uptimeNanoseconds: DispatchTime.now().uptimeNanoseconds + nanoseconds)
    }

    /// Stops the request: a queued one never starts; a running one has its connection shut down
    /// (and not reused). The caller gets `URLError(.cancelled)` unless the response was complete.
    func cancel() { pool.cancel(self) }
    /// Stops reading the response body from the socket until `resume()`.
    func pause() { pool.setPaused(self, true) }
    /// Reads the response body again.
    func resume() { pool.setPaused(self, false) }
}

/// The keep-alive pools of one ``SocketTransport``: per host, the connections open, the idle ones
/// and the requests waiting for one. All of it (and every job's state) is behind one lock.
///
/// `@unchecked Sendable`: every mutable property is only touched under `lock`.
final class ConnectionPool: @unchecked Sendable {
    struct Options: Sendable {
        var maximumConnectionsPerHost: Int
        var connectTimeout: TimeInterval
        var idleTimeout: TimeInterval
        /// The most bytes of a request its caller writes (the rest is left to the connection's
        /// thread, as when the socket buffer is full).
        var callerWriteSlice = Int.max
    }

    private struct Host {
        /// Connections (threads) alive for this host, busy or idle.
        var open = 0
        /// Idle connections, most recently used last.
        var idle: [SocketConnection] = []
        /// Requests waiting for a connection, oldest first.
        var waiting: [SocketJob] = []
        /// Connections running a streamed response.
        var streams = 0
    }

    /// How many connections of a host streamed responses may hold at once: all but one, so that
    /// paused row streams and continuous feeds never take every connection from whole requests.
    var streamLimit: Int { max(1, options.maximumConnectionsPerHost - 1) }

    /// Whether `job` may take a connection of `host` now.
    private func mayRun(_ job: SocketJob, on host: Host) -> Bool {
        !job.isStream || host.streams < streamLimit
    }

    /// Counts `job` as running on a connection of `host`.
    private func started(_ job: SocketJob, on host: inout Host) {
        if job.isStream { host.streams += 1 }
    }

    /// What a connection's thread does after a request.
    enum Next {
        /// Runs this request next (it was waiting).
        case run(SocketJob)
        /// Waits in the idle list for a request or the idle timeout.
        case idle
        /// Ends: the connection was closed and no request is waiting.
        case exit
    }

    let options: Options
    private let lock = NSLock()
    private var hosts: [HostKey: Host] = [:]
    private var isShutDown = false
    private var counters = SocketTransport.Statistics()

    init(options: Options) {
        self.options = options
    }

    // MARK: - Callers

    /// Hands `job` to an idle connection, a new one, or the host's queue.
    func submit(_ job: SocketJob) {
        lock.lock()
        if isShutDown {
            job.phase = .finished
            lock.unlock()
            Self.fail(job, ClientSocket.error(.cancelled, "The SocketTransport was shut down"))
            return
        }
        var connection: SocketConnection?
        var start = false
        var callerWrites = false
        var descriptor: Int32 = -1
        modifyHost(job.key) { host in
            if !mayRun(job, on: host) {
                host.waiting.append(job)
            } else if let idle = host.idle.popLast() {
                connection = idle
                started(job, on: &host)
            } else if host.open < options.maximumConnectionsPerHost {
                host.open += 1
                connection = SocketConnection(key: job.key, pool: self)
                started(job, on: &host)
                start = true
            } else {
                host.waiting.append(job)
            }
        }
        if connection == nil, job.request.timeout > 0 {
            // Waiting for a connection is bounded too: by the request's timeout.
            let timeout = job.request.timeout
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [weak self] in
                self?.expire(job, after: timeout)
            }
        }
        if let connection {
            connection.assigned = job
            job.phase = .running(connection)
            if !start, connection.fd >= 0, connection.bell != nil, job.mayBeWrittenByCaller {
                job.callerWrite = .inProgress
                callerWrites = true
                descriptor = connection.fd
            }
        }
        lock.unlock()
        guard let connection else { return }
        if start {
            connection.start()
        } else if callerWrites {
            connection.writeForCaller(job, fd: descriptor)
        } else {
            connection.ring()
        }
    }

    /// Records what the caller wrote of `job` on `connection` (``SocketConnection/writeForCaller(_:fd:)``),
    /// and wakes the connection's thread when it must act before an answer can arrive: it waits for
    /// this record, the caller wrote nothing or not all, the write failed, or the request's timeout
    /// ends before the thread's idle wait would.
    func recordCallerWrite(_ job: SocketJob, on connection: SocketConnection, _ outcome: SocketJob.CallerWrite) {
        lock.lock()
        job.callerWrite = outcome
        var ring = connection.waitsForCaller
        connection.waitsForCaller = false
        switch outcome {
        case .written(let written):
            counters.requestsWrittenByCaller += 1
            if !written.complete, written.error == nil { counters.callerWritesFinishedByConnection += 1 }
            if !written.complete || written.error != nil { ring = true }
            let timeout = job.request.timeout
            if timeout > 0, connection.idleDeadline > written.writtenAt + timeout { ring = true }
            if let deadline = job.deadline, connection.idleDeadline > deadline { ring = true }
        case .none, .inProgress:
            ring = true
        }
        lock.unlock()
        if ring { connection.ring() }
    }

    func cancel(_ job: SocketJob) {
        lock.lock()
        switch job.phase {
        case .finished:
            lock.unlock()
        case .queued:
            job.phase = .finished
            job.cancelled = true
            modifyHost(job.key) { $0.waiting.removeAll { $0 === job } }
            lock.unlock()
            Self.fail(job, ClientSocket.error(.cancelled, "The request was cancelled"))
        case .running(let connection):
            job.cancelled = true
            if connection.fd >= 0 { ClientSocket.shutdownBoth(connection.fd) }
            lock.unlock()
            connection.bell?.ring()
            connection.wake.signal()
        }
    }

    /// Fails `job` if it is still waiting for a connection after `timeout` seconds. Nothing of it
    /// was sent, and the error says so (the session treats it as never sent).
    private func expire(_ job: SocketJob, after timeout: TimeInterval) {
        lock.lock()
        guard case .queued = job.phase else {
            lock.unlock()
            return
        }
        job.phase = .finished
        let host = hosts[job.key]
        let (open, streams) = (host?.open ?? 0, host?.streams ?? 0)
        modifyHost(job.key) { $0.waiting.removeAll { $0 === job } }
        lock.unlock()
        var message =
            "No connection to \(job.key) became free within \(timeout) s (the request's timeout): all \(open) "
            + "connections (maximumConnectionsPerHost \(options.maximumConnectionsPerHost)) are busy"
        if streams > 0 { message += ", \(streams) of them with streamed responses (paused row streams, feeds)" }
        if job.isStream, streams >= streamLimit {
            message += "; streamed responses may hold at most \(streamLimit), one connection is kept for other requests"
        }
        message += ". Nothing was sent."
        Self.fail(job, ClientSocket.neverSent(.timedOut, message))
    }

    func setPaused(_ job: SocketJob, _ paused: Bool) {
        lock.lock()
        job.paused = paused
        var connection: SocketConnection?
        if case .running(let running) = job.phase { connection = running }
        lock.unlock()
        if !paused { connection?.wake.signal() }
    }

    /// Stops taking requests, fails the queued ones, and lets idle connections close. Requests
    /// running finish; their connections close afterwards.
    func shutdown() {
        lock.lock()
        if isShutDown {
            lock.unlock()
            return
        }
        isShutDown = true
        var queued: [SocketJob] = []
        var idle: [SocketConnection] = []
        for key in hosts.keys {
            modifyHost(key) { host in
                queued += host.waiting
                host.waiting.removeAll()
                idle += host.idle
            }
        }
        for job in queued { job.phase = .finished }
        lock.unlock()
        for connection in idle { connection.ring() }
        for job in queued { Self.fail(job, ClientSocket.error(.cancelled, "The SocketTransport was shut down")) }
    }

    var statistics: SocketTransport.Statistics {
        lock.lock()
        defer { lock.unlock() }
        var result = counters
        result.openConnections = hosts.values.reduce(0) { $0 + $1.open }
        result.idleConnections = hosts.values.reduce(0) { $0 + $1.idle.count }
        result.queuedRequests = hosts.values.reduce(0) { $0 + $1.waiting.count }
        return result
    }

    // MARK: - Connection threads

    /// Records the descriptor being connected, so that a cancellation can shut it down. False
    /// when the job was cancelled already (the caller closes `fd` then).
    func register(fd: Int32, connection: SocketConnection, job: SocketJob) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if fd >= 0, job.cancelled { return false }
        connection.fd = fd
        return true
    }

    /// Forgets `connection`'s descriptor and returns it, for the caller to close outside the lock.
    func detach(_ connection: SocketConnection) -> Int32 {
        lock.lock()
        defer { lock.unlock() }
        let fd = connection.fd
        connection.fd = -1
        return fd
    }

    func isCancelled(_ job: SocketJob) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        return job.cancelled
    }

    /// Blocks the connection's thread while `job` is paused (nothing reads the socket, so the
    /// server's writes stall: back-pressure). False when the job was cancelled.
    func waitWhilePaused(_ job: SocketJob, connection: SocketConnection) -> Bool {
        lock.lock()
        while job.paused, !job.cancelled {
            lock.unlock()
            connection.wake.wait()
            lock.lock()
        }
        let cancelled = job.cancelled
        lock.unlock()
        return !cancelled
    }

    func count(_ counter: WritableKeyPath<SocketTransport.Statistics, Int>) {
        lock.lock()
        counters[keyPath: counter] += 1
        lock.unlock()
    }

    /// Ends `job` on `connection` and decides what the connection does next. A connection that is
    /// not `reusable` is detached here (its descriptor is returned in `close`). Returns whether the
    /// job had been cancelled.
    func finished(
        _ job: SocketJob, on connection: SocketConnection, reusable: Bool
    ) -> (next: Next, cancelled: Bool, close: Int32) {
        lock.lock()
        defer { lock.unlock() }
        job.phase = .finished
        connection.assigned = nil
        let keep = reusable && !job.cancelled && !isShutDown && connection.fd >= 0
        var close: Int32 = -1
        if !keep {
            close = connection.fd
            connection.fd = -1
        }
        var next = Next.exit
        modifyHost(job.key) { host in
            if job.isStream { host.streams -= 1 }
            if !isShutDown, let position = host.waiting.firstIndex(where: { mayRun($0, on: host) }) {
                let waiting = host.waiting.remove(at: position)
                waiting.phase = .running(connection)
                connection.assigned = waiting
                started(waiting, on: &host)
                next = .run(waiting)
            } else if keep {
                connection.idleDeadline = .now() + options.idleTimeout
                host.idle.append(connection)
                next = .idle
            } else {
                host.open -= 1
            }
        }
        return (next, job.cancelled, close)
    }

    /// Waits (in the idle list, on the socket and the connection's doorbell) until a request is
    /// assigned, the idle timeout passes, the pool shuts down, or the server closes the idle
    /// connection (or sends bytes no request asked for). A request its caller is writing is
    /// returned once the caller has recorded what it wrote. Nil means the connection left the
    /// pool; its descriptor is returned to close.
    func awaitJob(_ connection: SocketConnection) -> (job: SocketJob?, close: Int32) {
        var stale = false
        while true {
            lock.lock()
            if let job = connection.assigned {
                if case .inProgress = job.callerWrite {
                    connection.waitsForCaller = true
                    lock.unlock()
                    _ = connection.waitIdle(fd: -1, until: .now() + 1)
                    continue
                }
                lock.unlock()
                return (job, -1)
            }
            if isShutDown || stale || DispatchTime.now() >= connection.idleDeadline {
                if stale, !isShutDown { counters.staleConnectionsDiscarded += 1 }
                modifyHost(connection.key) { host in
                    host.idle.removeAll { $0 === connection }
                    host.open -= 1
                }
                let fd = connection.fd
                connection.fd = -1
                lock.unlock()
                return (nil, fd)
            }
            let deadline = connection.idleDeadline
            let fd = connection.fd
            lock.unlock()
            stale = connection.waitIdle(fd: fd, until: deadline)
        }
    }

    // MARK: - Helpers

    /// Mutates the host's state in place (call with the lock held).
    private func modifyHost(_ key: HostKey, _ body: (inout Host) -> Void) {
        body(&hosts[key, default: Host()])
        if let host = hosts[key], host.open == 0, host.waiting.isEmpty, host.idle.isEmpty, host.streams == 0 {
            hosts[key] = nil
        }
    }

    /// Fails `job` off the caller's thread (the caller may hold its own locks).
    static func fail(_ job: SocketJob, _ error: any Error) {
        DispatchQueue.global().async { job.sink.deliver(.failure(error)) }
    }
}
