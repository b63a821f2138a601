import Foundation
import HTTPWire

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// One keep-alive connection and the thread that runs its requests, one at a time, with blocking
/// socket calls: write the request, read the response into a reusable buffer, parse it
/// incrementally with HTTPWire, deliver it — then take the next waiting request or wait idle.
///
/// `@unchecked Sendable`: `fd`, `assigned` and `idleDeadline` are only changed under the pool's
/// lock (the connection's own thread also reads `fd` without it, as only that thread sets it); the
/// decoder and buffers are touched only by the connection's thread.
final class SocketConnection: @unchecked Sendable {
    let key: HostKey
    private let pool: ConnectionPool
    private let hostValue: String
    /// Signalled when a paused response resumes (and, without a doorbell, when a request is
    /// assigned to the idle connection).
    let wake = DispatchSemaphore(value: 0)
    /// Rung when the idle connection's thread must act: a request for it to write, a shutdown.
    /// While idle the thread waits on it and on the socket, so a request its caller wrote needs no
    /// ring (its answer wakes the thread). Nil when no pipe could be made: the thread then waits on
    /// `wake`, and writes every request itself.
    let bell = Doorbell()

    // Guarded by the pool's lock.
    var fd: Int32 = -1
    var assigned: SocketJob?
    var idleDeadline = DispatchTime.now()
    /// The thread waits for the caller to record what it wrote of the assigned request.
    var waitsForCaller = false

    // Owned by the connection's thread.
    private var decoder = HTTPResponseDecoder()
    private var timeoutInForce: TimeInterval = -1
    private static let readBufferSize = 128 * 1024
    private static let uploadPieceSize = 64 * 1024

    init(key: HostKey, pool: ConnectionPool) {
        self.key = key
        self.pool = pool
        self.hostValue = RequestHead.hostValue(host: key.host, port: key.port)
    }

    /// Starts the connection's thread with the request already assigned.
    func start() {
        let thread = Thread { [self] in run() }
        thread.name = "SwiftCouch.SocketTransport \(key)"
        thread.start()
    }

    private func run() {
        ThreadRole.markConnectionThread()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.readBufferSize, alignment: 16)
        defer { buffer.deallocate() }
        var next = pool.awaitJob(self).job
        while let job = next {
            next = nil
            let (result, reusable) = perform(job, buffer: buffer)
            let after = pool.finished(job, on: self, reusable: reusable)
            if after.close >= 0 { ClientSocket.close(after.close) }
            switch result {
            case .failure where after.cancelled:
                job.sink.deliver(.failure(ClientSocket.error(.cancelled, "The request was cancelled")))
            default:
                job.sink.deliver(result)
            }
            switch after.next {
            case .run(let waiting):
                next = waiting
            case .idle:
                let waited = pool.awaitJob(self)
                if waited.close >= 0 { ClientSocket.close(waited.close) }
                next = waited.job
            case .exit:
                next = nil
            }
        }
        let fd = pool.detach(self)
        if fd >= 0 { ClientSocket.close(fd) }
    }

    /// Wakes the idle connection's thread.
    func ring() {
        if let bell {
            bell.ring()
        } else {
            wake.signal()
        }
    }

    /// Waits idle: on the socket (when `fd` is not negative) and the doorbell, or on `wake` when
    /// there is no doorbell. True when the socket is readable.
    func waitIdle(fd: Int32, until deadline: DispatchTime) -> Bool {
        guard let bell else {
            _ = wake.wait(timeout: deadline)
            return false
        }
        return ClientSocket.waitIdle(fd, bell: bell, until: deadline)
    }

    /// Runs on the caller's thread: writes `job` (assigned to this idle connection, whose thread
    /// waits on the socket) without blocking, after the same check for a stale connection the
    /// thread makes, and records what was written (nothing, `.none`, when the connection is stale:
    /// the thread then handles it as its own check would have). A full socket buffer leaves the
    /// rest to the connection's thread.
    func writeForCaller(_ job: SocketJob, fd: Int32) {
        guard ClientSocket.isIdleAndOpen(fd) else {
            pool.recordCallerWrite(job, on: self, .none)
            return
        }
        let request = job.request
        let head = RequestHead.bytes(
            for: request, target: job.target, host: hostValue, framing: RequestBodyFraming.of(request),
            acceptEncoding: SocketTransport.acceptEncoding)
        let body = request.body ?? Data()
        let slice = pool.options.callerWriteSlice
        var accepted = 0
        let failed = head.withUnsafeBytes { headBytes in
            body.withUnsafeBytes { bodyBytes in
                ClientSocket.sendAll(
                    fd, Self.bytes(0..<min(slice, head.count + body.count), of: [headBytes, bodyBytes]),
                    nonBlocking: true
                ) {
                    accepted += $0
                }
            }
        }
        let full = failed == EAGAIN || failed == EWOULDBLOCK
        let written = SocketJob.CallerWritten(
            head: head, accepted: accepted, complete: failed == nil && accepted == head.count + body.count,
            error: full ? nil : failed, writtenAt: .now())
        pool.recordCallerWrite(job, on: self, .written(written))
    }

    private func closeSocket() {
        let fd = pool.detach(self)
        if fd >= 0 { ClientSocket.close(fd) }
    }

    // MARK: - One request

    /// What went wrong in one attempt, and whether the request may be sent again on a fresh
    /// connection.
    private struct Failure: Error {
        var error: any Error
        /// Nothing of the request reached the socket: any method may be resent.
        var nothingSent = false
        /// Nothing of the response arrived (the head was not delivered).
        var nothingReceived = false
        /// The peer reset the connection (`ECONNRESET`/`EPIPE`) rather than closing it in order.
        var peerReset = false

        /// Whether the request provably never reached the server, or repeating it is harmless, so
        /// it may be sent again on a fresh connection after this failure on a reused one.
        ///
        /// - Nothing of it was written: any method.
        /// - The kept-alive connection was reset before any byte of an answer: any method. A server
        ///   (or proxy) that closes a connection whose received bytes it has not read makes the
        ///   kernel answer with a reset; one that read the request and then failed closes in order
        ///   (end of stream). This is the shape of "answer, then close without `Connection: close`"
        ///   and of idle keep-alive connections closed under the request.
        /// - It ended without any answer: GET and HEAD only, which have no effect to repeat. Any other
        ///   method is not resent here: the server may have carried it out (the session decides,
        ///   with the operation's idempotency, and says the outcome is unknown).
        func allowsResend(method: HTTPMethod) -> Bool {
            if nothingSent { return true }
            guard nothingReceived else { return false }
            return peerReset || method == .get || method == .head
        }
    }

    /// Runs `job`: at most two attempts, the second only on a fresh connection after a kept-alive
    /// one failed in a way that proves (or, for GET and HEAD, makes it harmless) that the server
    /// did not act on the first (``Failure/allowsResend(method:)``). Returns the result and
    /// whether the connection can be reused.
    private func perform(
        _ job: SocketJob, buffer: UnsafeMutableRawBufferPointer
    ) -> (Result<HTTPResponse, any Error>, Bool) {
        let request = job.request
        let framing = RequestBodyFraming.of(request)
        // Written by the caller (recorded under the pool's lock, which this thread took since).
        var callerWritten: SocketJob.CallerWritten?
        if case .written(let written) = job.callerWrite { callerWritten = written }
        let head =
            callerWritten?.head
            ?? RequestHead.bytes(
                for: request, target: job.target, host: hostValue, framing: framing,
                acceptEncoding: SocketTransport.acceptEncoding)
        var body = BodySource(request: request)
        var attempt = 0
        while true {
            attempt += 1
            let prewritten = attempt == 1 ? callerWritten : nil
            if pool.isCancelled(job) {
                return (.failure(ClientSocket.error(.cancelled, "The request was cancelled")), fd >= 0)
            }
            if prewritten == nil, let deadline = job.deadline, DispatchTime.now() >= deadline {
                // Its deadline passed while it waited (for a connection, or before this resend):
                // nothing of it was written.
                let error = Self.deadlineError(job, headOnly: false)
                return (.failure(ClientSocket.neverSent(.timedOut, error.localizedDescription)), fd >= 0)
            }
            var reused = false
            if prewritten != nil, fd >= 0 {
                // The caller checked the connection before writing on it.
                reused = true
                pool.count(\.reusedConnections)
            } else if fd >= 0 {
                if ClientSocket.isIdleAndOpen(fd) {
                    reused = true
                    pool.count(\.reusedConnections)
                } else {
                    closeSocket()
                    pool.count(\.staleConnectionsDiscarded)
                }
            }
            if fd < 0 {
                do throws(URLError) {
                    var timeout = min(
                        pool.options.connectTimeout, request.timeout > 0 ? request.timeout : .greatestFiniteMagnitude)
                    if let deadline = job.deadline { timeout = min(timeout, Self.seconds(until: deadline)) }
                    _ = try ClientSocket.connect(host: key.host, port: key.port, timeout: timeout) { fd in
                        pool.register(fd: fd, connection: self, job: job)
                    }
                } catch {
                    closeSocket()
                    return (
                        .failure(
                            pool.isCancelled(job) ? ClientSocket.error(.cancelled, "The request was cancelled") : error),
                        false
                    )
                }
                pool.count(\.connectionsOpened)
                decoder = HTTPResponseDecoder()
                timeoutInForce = -1
            }
            var timeout = request.timeout
            if let prewritten, timeout > 0 {
                // The timeout counts from the caller's write: this thread may have woken late (more
                // than 10 ms late: the usual answer wakes it at once, and the descriptor's timeout is
                // then left as it is, with no system call).
                let now = DispatchTime.now().uptimeNanoseconds
                let since = prewritten.writtenAt.uptimeNanoseconds
                let waited = now > since ? TimeInterval(now - since) / 1e9 : 0
                if waited > 0.01 { timeout = max(0.001, timeout - waited) }
            }
            if timeoutInForce != timeout {
                ClientSocket.setTimeouts(fd, seconds: timeout)
                timeoutInForce = timeout
            }
            pool.count(\.requestsSent)
            do throws(Failure) {
                let response = try exchange(
                    job, head: head, framing: framing, body: &body, buffer: buffer, prewritten: prewritten)
                return (.success(response.response), response.reusable)
            } catch {
                closeSocket()
                let cancelled = pool.isCancelled(job)
                if cancelled { return (.failure(ClientSocket.error(.cancelled, "The request was cancelled")), false) }
                if reused, attempt == 1, body.canResend, error.allowsResend(method: request.method) {
                    pool.count(\.staleRetries)
                    continue
                }
                return (.failure(error.error), false)
            }
        }
    }

    /// Writes the request (what the caller has not written of it) and reads the response on the
    /// open socket.
    private func exchange(
        _ job: SocketJob, head: [UInt8], framing: RequestBodyFraming, body: inout BodySource,
        buffer: UnsafeMutableRawBufferPointer, prewritten: SocketJob.CallerWritten?
    ) throws(Failure) -> (response: HTTPResponse, reusable: Bool) {
        decoder.expectResponse(to: job.request.method.rawValue)
        var writeFailure: Failure?
        do throws(Failure) {
            if let prewritten {
                if let code = prewritten.error {
                    throw writeError(code, nothingSent: prewritten.accepted == 0)
                }
                if !prewritten.complete {
                    try write(job, head: head, framing: framing, body: &body, skipping: prewritten.accepted)
                }
            } else {
                try write(job, head: head, framing: framing, body: &body)
            }
        } catch {
            if !(error.error is URLError) || (error.error as? URLError)?.code == .timedOut { throw error }
            // The server may have answered early (a 413, a 401) and closed: read what it sent.
            writeFailure = error
        }
        do throws(Failure) {
            let (response, reusable) = try read(job, buffer: buffer)
            return (response, reusable && writeFailure == nil)
        } catch {
            if let writeFailure { throw writeFailure }
            throw error
        }
    }

    // MARK: - Writing

    /// Writes the request head and body, less the first `skipping` bytes (written by the caller).
    private func write(
        _ job: SocketJob, head: [UInt8], framing: RequestBodyFraming, body: inout BodySource, skipping: Int = 0
    ) throws(Failure) {
        var receiver: (any StreamReceiver)?
        if case .stream(let streamReceiver) = job.sink { receiver = streamReceiver }
        var accepted = skipping
        let failed: Int32?
        if let data = job.request.body, job.request.streamedBody == nil {
            let headCount = head.count
            failed = head.withUnsafeBytes { headBytes in
                data.withUnsafeBytes { bodyBytes in
                    ClientSocket.sendAll(
                        fd, Self.bytes(skipping..<headCount + data.count, of: [headBytes, bodyBytes])
                    ) { accepted += $0 }
                }
            }
            if failed == nil, let receiver, !data.isEmpty {
                receiver.sent(bytes: Int64(max(0, accepted - headCount)), of: Int64(data.count))
            }
        } else {
            failed = head.withUnsafeBytes {
                ClientSocket.sendAll(fd, Self.bytes(skipping..<head.count, of: [$0])) { accepted += $0 }
            }
        }
        if let failed { throw writeError(failed, nothingSent: accepted == 0) }
        guard job.request.streamedBody != nil else { return }
        try writeStreamedBody(job, framing: framing, body: &body, receiver: receiver)
    }

    /// The bytes at `range` of `pieces` taken as one run (what a caller writes, what is left).
    static func bytes(_ range: Range<Int>, of pieces: [UnsafeRawBufferPointer]) -> [UnsafeRawBufferPointer] {
        // All of them (the usual write): the pieces as they are.
        if range.lowerBound <= 0, range.upperBound >= pieces.reduce(0, { $0 + $1.count }) { return pieces }
        var result: [UnsafeRawBufferPointer] = []
        var start = 0
        for piece in pieces {
            let lower = max(range.lowerBound - start, 0)
            let upper = min(range.upperBound - start, piece.count)
            if lower < upper { result.append(UnsafeRawBufferPointer(rebasing: piece[lower..<upper])) }
            start += piece.count
        }
        return result
    }

    private func writeStreamedBody(
        _ job: SocketJob, framing: RequestBodyFraming, body: inout BodySource, receiver: (any StreamReceiver)?
    ) throws(Failure) {
        guard let stream = body.open() else {
            throw Failure(
                error: CouchError(
                    kind: .transport,
                    message: "The request body is an InputStream that was already read; it cannot be sent again.",
                    method: job.request.method.rawValue, path: job.request.path))
        }
        defer { stream.close() }
        let declared: Int64? = if case .contentLength(let length) = framing { length } else { nil }
        let piece = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.uploadPieceSize, alignment: 16)
        defer { piece.deallocate() }
        var sent: Int64 = 0
        while true {
            var limit = piece.count
            if let declared { limit = Int(min(Int64(limit), declared - sent)) }
            var count = 0
            if limit > 0 {
                count = stream.read(piece.baseAddress!.assumingMemoryBound(to: UInt8.self), maxLength: limit)
            }
            if count < 0 {
                let reason = stream.streamError.map { "\($0)" } ?? "unknown error"
                throw Failure(
                    error: CouchError(
                        kind: .transport, message: "Reading the request body failed: \(reason)",
                        method: job.request.method.rawValue, path: job.request.path))
            }
            if count == 0 {
                if let declared, sent < declared {
                    throw Failure(
                        error: CouchError(
                            kind: .transport,
                            message: "The request body ended after \(sent) of its declared \(declared) bytes.",
                            method: job.request.method.rawValue, path: job.request.path))
                }
                if declared == nil {
                    let last = HTTPSerializer.lastChunk()
                    if let failed = last.withUnsafeBytes({ ClientSocket.sendAll(fd, [$0]) { _ in } }) {
                        throw writeError(failed, nothingSent: false)
                    }
                }
                return
            }
            let data = UnsafeRawBufferPointer(rebasing: piece[0..<count])
            let failed: Int32?
            if declared == nil {
                let size = HTTPSerializer.chunkHeader(size: count)
                let crlf: [UInt8] = [0x0D, 0x0A]
                failed = size.withUnsafeBytes { sizeBytes in
                    crlf.withUnsafeBytes { ClientSocket.sendAll(fd, [sizeBytes, data, $0]) { _ in } }
                }
            } else {
                failed = ClientSocket.sendAll(fd, [data]) { _ in }
            }
            if let failed { throw writeError(failed, nothingSent: false) }
            sent += Int64(count)
            receiver?.sent(bytes: sent, of: declared)
        }
    }

    private func writeError(_ code: Int32, nothingSent: Bool) -> Failure {
        if code == EAGAIN || code == EWOULDBLOCK {
            return Failure(error: ClientSocket.error(.timedOut, "Sending the request timed out"))
        }
        return Failure(
            error: ClientSocket.error(.networkConnectionLost, "The connection was lost while sending", errno: code),
            nothingSent: nothingSent, nothingReceived: true, peerReset: code == ECONNRESET || code == EPIPE)
    }

    // MARK: - Reading

    private func read(
        _ job: SocketJob, buffer: UnsafeMutableRawBufferPointer
    ) throws(Failure) -> (HTTPResponse, Bool) {
        var receiver: (any StreamReceiver)?
        if case .stream(let streamReceiver) = job.sink { receiver = streamReceiver }
        let decodes = !RequestHead.namesAcceptEncoding(job.request)
        var inflater: GzipInflater?
        var compressedBytes = 0
        var decodedBytes = 0
        var received = 0
        var finalHead: HTTPResponseHead?
        var finalFields = HTTPFields()
        var interim = false
        var body = Data()
        /// The body's `Content-Length` (nil: unknown), reserved when its first piece is not all of it.
        var expectedLength: Int?
        var endOfStream = false
        while true {
            do {
                while let part = try decoder.next() {
                    switch part {
                    case .head(let head):
                        if head.isInformational {
                            interim = true
                            continue
                        }
                        finalHead = head
                        finalFields = Self.fields(head)
                        if receiver != nil, job.deadline != nil, timeoutInForce != job.request.timeout {
                            // A stream's deadline ended with its head: its body is bounded by the
                            // idle timeout alone.
                            ClientSocket.setTimeouts(fd, seconds: job.request.timeout)
                            timeoutInForce = job.request.timeout
                        }
                        inflater = nil
                        if decodes, decoder.currentFraming != .none, let encoding = head.headers["Content-Encoding"],
                            let gzip = GzipInflater(contentEncoding: encoding)
                        {
                            inflater = gzip
                            finalFields["Content-Encoding"] = nil
                            finalFields["Content-Length"] = nil
                        }
                        if let receiver {
                            receiver.receive(head: HTTPResponse(statusCode: head.status, headers: finalFields))
                        } else if case .contentLength(let length) = decoder.currentFraming {
                            if let limit = job.request.maximumResponseBodySize, length > limit, inflater == nil {
                                throw Failure(error: job.request.bodyTooLarge(length))
                            }
                            expectedLength = length
                        }
                    case .body(let wireData):
                        if interim { continue }
                        var data = wireData
                        if inflater != nil {
                            data = try Self.inflate(
                                wireData, with: &inflater!, ratio: job.request.maximumDecompressionRatio,
                                compressed: &compressedBytes, decoded: &decodedBytes)
                            if data.isEmpty { continue }
                        }
                        guard let receiver else {
                            if !body.isEmpty {
                                body.append(data)
                            } else if let length = expectedLength, data.count < length {
                                // The first of several pieces: room for all of them at once.
                                body.reserveCapacity(min(length, 64 << 20))
                                body.append(data)
                            } else {
                                // A body read in one piece (most): that piece is the body, not a copy.
                                body = data
                            }
                            // Checked as it grows, inflated: a gzip bomb stops at the limit.
                            if let limit = job.request.maximumResponseBodySize, body.count > limit {
                                throw Failure(error: job.request.bodyTooLarge())
                            }
                            continue
                        }
                        receiver.receive(chunk: data)
                        if !pool.waitWhilePaused(job, connection: self) {
                            throw Failure(error: ClientSocket.error(.cancelled, "The request was cancelled"))
                        }
                    case .end:
                        if interim {
                            interim = false
                            continue
                        }
                        guard let head = finalHead else { continue }
                        if inflater != nil, compressedBytes > 0 { try inflater!.finish() }
                        let reusable =
                            head.keepAlive && !endOfStream && decoder.currentFraming != .untilClose
                            && decoder.bufferedByteCount == 0
                            && !(job.request.headers["Connection"]?.lowercased().contains("close") ?? false)
                        let response = HTTPResponse(statusCode: head.status, headers: finalFields, body: body)
                        return (response, reusable)
                    }
                }
            } catch let failure as Failure {
                throw failure
            } catch HTTPWireError.unexpectedEndOfStream {
                throw Failure(
                    error: ClientSocket.error(
                        .networkConnectionLost, "The connection closed in the middle of the response"),
                    nothingReceived: finalHead == nil && received == 0)
            } catch let error as GzipError {
                throw Failure(
                    error: ClientSocket.error(.cannotDecodeContentData, "The response body does not decode: \(error)"))
            } catch {
                throw Failure(
                    error: ClientSocket.error(.badServerResponse, "The server's response is not valid HTTP: \(error)"))
            }
            if endOfStream {
                throw Failure(
                    error: ClientSocket.error(
                        .networkConnectionLost,
                        received == 0
                            ? "The server closed the connection without answering"
                            : "The connection closed in the middle of the response"),
                    nothingReceived: received == 0)
            }
            // The deadline bounds the whole response (a stream's head only): interim responses and
            // bytes trickled one at a time count against it, where the idle timeout restarts.
            let deadline = finalHead == nil || receiver == nil ? job.deadline : nil
            if let deadline { try waitNoLongerThan(deadline, job: job, headOnly: receiver != nil) }
            switch ClientSocket.receive(fd, into: buffer) {
            case .bytes(let count):
                received += count
                decoder.feed(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            case .endOfStream:
                endOfStream = true
                decoder.finish()
            case .failed(let code):
                if code == EAGAIN || code == EWOULDBLOCK {
                    if let deadline, Self.seconds(until: deadline) < Self.deadlineSlack {
                        throw Failure(error: Self.deadlineError(job, headOnly: receiver != nil))
                    }
                    throw Failure(error: ClientSocket.error(.timedOut, "The request timed out"))
                }
                throw Failure(
                    error: ClientSocket.error(.networkConnectionLost, "Reading the response failed", errno: code),
                    nothingReceived: received == 0, peerReset: code == ECONNRESET || code == EPIPE)
            }
        }
    }

    static func fields(_ head: HTTPResponseHead) -> HTTPFields { head.headers }

    // MARK: - Bounds

    /// How much later than the idle timeout's end the deadline may fall before the socket's
    /// timeout is shortened to it (no system call per read while a response arrives briskly).
    static let deadlineSlack: TimeInterval = 0.05

    /// Seconds from now until `deadline` (0 once it passed).
    static func seconds(until deadline: DispatchTime) -> TimeInterval {
        let now = DispatchTime.now().uptimeNanoseconds
        let end = deadline.uptimeNanoseconds
        return end > now ? TimeInterval(end - now) / 1e9 : 0
    }

    /// Before a read: throws once `deadline` passed; otherwise makes the read's wait end no later
    /// than it (the socket's timeout is the smaller of the idle timeout and the time left).
    private func waitNoLongerThan(_ deadline: DispatchTime, job: SocketJob, headOnly: Bool) throws(Failure) {
        let left = Self.seconds(until: deadline)
        guard left > 0 else { throw Failure(error: Self.deadlineError(job, headOnly: headOnly)) }
        // 0 (or less) in force: no timeout at all.
        if timeoutInForce > 0, timeoutInForce <= left + Self.deadlineSlack { return }
        let idle = job.request.timeout > 0 ? job.request.timeout : TimeInterval.greatestFiniteMagnitude
        // Never 0: a zero socket timeout means none.
        let wait = max(min(idle, left), 0.001)
        ClientSocket.setTimeouts(fd, seconds: wait)
        timeoutInForce = wait
    }

    /// The error for a response that missed its deadline.
    static func deadlineError(_ job: SocketJob, headOnly: Bool) -> URLError {
        let seconds = String(format: "%g", job.request.deadline ?? 0)
        let what =
            headOnly
            ? "The response's head did not arrive within its deadline of \(seconds) s"
            : "The response did not complete within its deadline of \(seconds) s"
        return ClientSocket.error(
            .timedOut,
            what + " (HTTPRequest.deadline, from Configuration.requestTimeout or the call's timeout: it bounds the "
                + "whole response, however slowly its bytes or interim responses arrive)")
    }

    /// The size of the pieces a compressed read is inflated in when a ratio is checked: one piece
    /// of a bomb inflates to at most about 1,032 times as much (16.5 MiB) before the check.
    static let inflatePieceSize = 16 * 1024

    /// Inflates `wire`, counting compressed and decoded bytes; with a `ratio`, in pieces checked
    /// one by one: once a mebibyte was decoded, more than `ratio` times the bytes received fails
    /// with `URLError(.dataLengthExceedsMaximum)` (a gzip bomb), before the rest is inflated.
    static func inflate(
        _ wire: Data, with inflater: inout GzipInflater, ratio: Double?, compressed: inout Int, decoded: inout Int
    ) throws -> Data {
        guard let ratio, wire.count > inflatePieceSize else {
            compressed += wire.count
            let output = try inflater.feed(wire)
            decoded += output.count
            if let ratio { try checkRatio(ratio, compressed: compressed, decoded: decoded) }
            return output
        }
        var output = Data()
        var start = wire.startIndex
        while start < wire.endIndex {
            let end = min(start + inflatePieceSize, wire.endIndex)
            compressed += end - start
            let piece = try inflater.feed(wire[start..<end])
            decoded += piece.count
            try checkRatio(ratio, compressed: compressed, decoded: decoded)
            if output.isEmpty { output = piece } else { output.append(piece) }
            start = end
        }
        return output
    }

    private static func checkRatio(_ ratio: Double, compressed: Int, decoded: Int) throws(Failure) {
        guard decoded >= 1 << 20, Double(decoded) > ratio * Double(max(compressed, 1)) else { return }
        throw Failure(
            error: URLError(
                .dataLengthExceedsMaximum,
                userInfo: [
                    NSLocalizedDescriptionKey:
                        "The compressed response body inflates more than \(String(format: "%g", ratio)) times "
                        + "(\(decoded) bytes from \(compressed)) past the limit "
                        + "Configuration.maximumDecompressionRatio = \(String(format: "%g", ratio)): a gzip bomb? "
                        + "It was not read further."
                ]))
    }
}

/// The request body as the connection writes it: a file is reopened for every attempt, a
/// one-shot `InputStream` is taken once.
struct BodySource {
    private let streamed: StreamedBody?
    private var taken = false

    init(request: HTTPRequest) {
        streamed = request.streamedBody
    }

    /// Whether the body can be written (again) from its start.
    var canResend: Bool { streamed == nil || streamed?.isRepeatable == true || !taken }

    /// An open stream at the start of the body, or nil when a one-shot stream was taken already.
    mutating func open() -> InputStream? {
        guard let streamed, streamed.isRepeatable || !taken else { return nil }
        taken = true
        guard let stream = streamed.makeInputStream() else { return nil }
        stream.open()
        return stream
    }
}
