import CouchQuery
import Foundation
import HTTPWire

/// The TestServer's HTTP/1.1 server: POSIX sockets on 127.0.0.1, one thread per connection.
///
/// It reads each request whole (head and body), hands it to `dispatch`, and writes what comes back; a request
/// that `Options.streamsBody` picks (an attachment upload) gets its body as a stream instead
/// (``ServerRequest/bodySource``), read from the socket as the handler asks for it.
/// Keep-alive, pipelining, `Expect: 100-continue`, chunked request bodies and chunked streamed
/// responses are supported. A malformed request gets a CouchDB-shaped 400 and the connection closes.
final class HTTPServer: @unchecked Sendable {
    // @unchecked Sendable: the mutable state (connections, stopping) is only touched under `lock`;
    // everything else is immutable after init.

    /// What to do with a request.
    enum Reply: Sendable {
        /// Answer normally.
        case response(ServerResponse)
        /// Close the connection without answering.
        case drop
        /// Send the head with the full `Content-Length`, half of the body, then close.
        case truncated(ServerResponse)
        /// Answer as if keeping the connection open, then close it after `after` seconds without
        /// reading anything more (a request the client sent meanwhile meets a reset).
        case responseThenClose(ServerResponse, after: Double)
        /// Answer by writing the bytes yourself, for shapes a plain response cannot take (a body
        /// trickled, interim responses): the closure gets the connection's ``RawReplyWriter`` and
        /// returns whether the connection may serve another request.
        case raw(@Sendable (RawReplyWriter) -> Bool)
    }

    /// What a ``Reply/raw(_:)`` reply writes with: the connection's socket, and the head the
    /// server would send. Used only on the connection's thread, during the reply.
    struct RawReplyWriter {
        /// Whether the request asked to keep the connection open.
        let keepAlive: Bool
        /// The request's method (the answer to `HEAD` has no body).
        let method: String
        fileprivate let fd: Int32
        fileprivate let headBytes: (ServerResponse) -> Data
        fileprivate let isStopping: () -> Bool

        /// The head the server would send for `response` as a whole body (with its
        /// `Content-Length`, `Server`, `Date` and `Connection`), and that body: empty for `HEAD`, a
        /// streamed body collected whole.
        func whole(_ response: ServerResponse) -> (head: Data, body: Data) {
            var body = Data()
            switch response.body {
            case .empty: break
            case .data(let data): body = data
            case .stream(let produce):
                let collector = CollectingChunkWriter()
                produce(collector)
                body = collector.data
            }
            var response = response
            response.headers.remove("Transfer-Encoding")
            response.headers.set("Content-Length", String(body.count))
            return (headBytes(response), method == "HEAD" ? Data() : body)
        }

        /// Writes `data` whole. False once the client has gone away.
        func send(_ data: Data) -> Bool {
            data.isEmpty || POSIXSocket.sendAll(fd, data)
        }

        /// Waits `seconds` (in steps, so that a stopping server is not held up). False when the
        /// server is stopping.
        func pause(seconds: Double) -> Bool {
            let end = Date().addingTimeInterval(seconds)
            while true {
                if isStopping() { return false }
                let left = end.timeIntervalSinceNow
                if left <= 0 { return true }
                Thread.sleep(forTimeInterval: min(left, 0.05))
            }
        }
    }

    typealias Dispatch = @Sendable (ServerRequest) -> Reply

    struct Options: Sendable {
        var port: Int = 0
        var maxBodySize: Int = 300 * 1024 * 1024
        var limits = HTTPParserLimits(maxHeadSize: 64 * 1024, maxHeaderCount: 128)
        /// How long to keep retrying when the port is still in use (restarts on the same port).
        var bindRetrySeconds: Double = 3
        /// Close a kept-alive connection that has been idle this long (nil: keep it until the client closes).
        var idleTimeout: Double? = nil
        /// Which requests get their body as a stream (``ServerRequest/bodySource``) rather than read whole before
        /// `dispatch`; nil: none. Whatever the handler leaves unread is read (and dropped) after it answers.
        var streamsBody: (@Sendable (ServerRequest) -> Bool)? = nil
        /// How long a streamed body's reader waits for the client's next bytes before the body counts as cut off.
        var bodyReadTimeout: Double = 60
    }

    static let serverHeader = "CouchDB/3.5.0 (Erlang OTP/26)"

    /// A CouchDB-shaped error response: `{"error":…,"reason":…}` and a newline.
    static func errorResponse(status: Int, error: String, reason: String, headers: HTTPHeaders = HTTPHeaders())
        -> ServerResponse
    {
        var all: HTTPHeaders = ["Content-Type": "application/json", "Cache-Control": "must-revalidate"]
        for field in headers { all.set(field.name, field.value) }
        let body = JSON.object([("error", .string(error)), ("reason", .string(reason))]).serialized + "\n"
        return ServerResponse(status: status, headers: all, body: .data(Data(body.utf8)))
    }

    let port: Int
    private let listener: Int32
    private let options: Options
    private let dispatch: Dispatch
    private let lock = NSLock()
    private var connections: [Int: Int32] = [:]
    private var nextConnectionID = 0
    private var stopping = false
    private var acceptThreadDone = false
    private let threads = DispatchGroup()

    init(options: Options, dispatch: @escaping Dispatch) throws {
        var attempt: (fd: Int32, port: Int)?
        let deadline = Date().addingTimeInterval(options.port == 0 ? 0 : options.bindRetrySeconds)
        while attempt == nil {
            do {
                attempt = try POSIXSocket.listen(port: options.port)
            } catch let error as SocketError where error.isAddressInUse && Date() < deadline {
                usleep(50_000)
            }
        }
        self.listener = attempt!.fd
        self.port = attempt!.port
        self.options = options
        self.dispatch = dispatch
    }

    /// Starts accepting connections on a thread of its own.
    func start() {
        threads.enter()
        let thread = Thread { [self] in
            acceptLoop()
            threads.leave()
        }
        thread.name = "TestServer accept :\(port)"
        thread.start()
    }

    /// Closes the listener and shuts down every connection (blocked reads and writes return at
    /// once). Threads end on their own; `waitForThreads` joins them.
    func beginStop() {
        let fds: [Int32]
        lock.lock()
        if stopping {
            lock.unlock()
            return
        }
        stopping = true
        fds = Array(connections.values)
        // Wakes the accept thread (accept returns an error); it closes the listener itself.
        POSIXSocket.shutdownBoth(listener)
        for fd in fds { POSIXSocket.shutdownBoth(fd) }
        lock.unlock()
    }

    /// Waits until the accept thread and every connection thread have ended, at most `timeout`
    /// seconds. Returns false when some thread is still running (a stream that ignores failed writes).
    @discardableResult
    func waitForThreads(timeout: Double) -> Bool {
        threads.wait(timeout: .now() + timeout) == .success
    }

    /// `beginStop()` and then `waitForThreads`.
    @discardableResult
    func stop(timeout: Double = 5) -> Bool {
        beginStop()
        return waitForThreads(timeout: timeout)
    }

    private var isStopping: Bool {
        lock.lock()
        defer { lock.unlock() }
        return stopping
    }

    // MARK: - Accepting

    private func acceptLoop() {
        while let fd = POSIXSocket.accept(listener) {
            lock.lock()
            if stopping {
                lock.unlock()
                POSIXSocket.closeDescriptor(fd)
                break
            }
            let id = nextConnectionID
            nextConnectionID += 1
            connections[id] = fd
            threads.enter()
            lock.unlock()
            let thread = Thread { [self] in
                var connection = Connection(fd: fd, server: self)
                connection.run()
                lock.lock()
                connections[id] = nil
                POSIXSocket.closeDescriptor(fd)
                lock.unlock()
                threads.leave()
            }
            thread.name = "TestServer connection \(id)"
            thread.start()
            if isStopping { break }
        }
        lock.lock()
        acceptThreadDone = true
        POSIXSocket.closeDescriptor(listener)
        lock.unlock()
    }

    // MARK: - One connection

    /// The state of one client connection, used only by its own thread.
    /// The longest request line CouchDB 3.5 reads (mochiweb's 8 KiB line buffer), CRLF included.
    static let maximumRequestLineLength = 8_192

    private struct Connection {
        let fd: Int32
        let server: HTTPServer
        var decoder: HTTPRequestDecoder
        var readBuffer: UnsafeMutableRawBufferPointer

        init(fd: Int32, server: HTTPServer) {
            self.fd = fd
            self.server = server
            var limits = server.options.limits
            limits.maxBodySize = server.options.maxBodySize
            self.decoder = HTTPRequestDecoder(limits: limits)
            self.readBuffer = .allocate(byteCount: 256 * 1024, alignment: 16)
        }

        /// Reads more bytes into the decoder. False at end of stream or on an error.
        mutating func readMore() -> Bool {
            let n = POSIXSocket.receive(fd, into: readBuffer)
            if n <= 0 {
                decoder.finish()
                return false
            }
            decoder.feed(UnsafeRawBufferPointer(rebasing: readBuffer[0..<n]))
            return true
        }

        mutating func run() {
            defer { readBuffer.deallocate() }
            while !server.isStopping {
                guard serveOne() else { return }
            }
        }

        /// Reads and answers one request. False when the connection should close.
        mutating func serveOne() -> Bool {
            // The head. An idle kept-alive connection is closed after `idleTimeout`, without notice.
            if let idle = server.options.idleTimeout, decoder.bufferedByteCount == 0 {
                POSIXSocket.setReceiveTimeout(fd, seconds: idle)
            }
            var head: HTTPRequestHead?
            var eof = false
            do {
                while head == nil {
                    if let part = try decoder.next() {
                        guard case .head(let h) = part else { return false }
                        head = h
                    } else {
                        if eof {
                            return false  // closed between requests (or mid-head: nothing to answer)
                        }
                        eof = !readMore()
                        if eof, decoder.isAtMessageBoundary, decoder.bufferedByteCount == 0 { return false }
                    }
                }
            } catch {
                rejectAndClose(error)
                return false
            }
            guard let head else { return false }
            if server.options.idleTimeout != nil { POSIXSocket.setReceiveTimeout(fd, seconds: 0) }

            // CouchDB (mochiweb) reads a request line of at most 8,192 bytes, CRLF included; a longer one gets a
            // bare 400 and the connection closes, before CouchDB sees the request.
            let requestLineLength = head.method.utf8.count + head.target.utf8.count + " HTTP/1.1\r\n".utf8.count + 1
            guard requestLineLength <= HTTPServer.maximumRequestLineLength else {
                let head = HTTPRequestHead(method: "GET", target: "/", version: .http1_1)
                send(ServerResponse(status: 400, headers: ["Content-Length": "0"]), head: head, keepAlive: false)
                lingeringClose()
                return false
            }
            guard head.target.hasPrefix("/") || head.target == "*" || head.target.contains("://") else {
                rejectAndClose(HTTPWireError.invalidStartLine("\(head.method) \(head.target)"))
                return false
            }

            // Expect: 100-continue.
            let hasBody = decoder.currentFraming != .none && decoder.currentFraming != .contentLength(0)
            if let expect = head.headers["Expect"] {
                guard expect.lowercased() == "100-continue" else {
                    send(
                        errorResponse(
                            status: 417, error: "expectation_failed", reason: "Unsupported Expect header: \(expect)"),
                        head: head, keepAlive: false)
                    lingeringClose()
                    return false
                }
                if hasBody, head.version == .http1_1, decoder.bufferedByteCount == 0 {
                    guard POSIXSocket.sendAll(fd, Data("HTTP/1.1 100 Continue\r\n\r\n".utf8)) else { return false }
                }
            }

            let request0 = ServerRequest(
                method: head.method, rawPath: head.path, rawQuery: head.query, headers: head.headers, body: Data())
            if hasBody, let streams = server.options.streamsBody, streams(request0) {
                return serveStreamed(request0, head: head)
            }

            // The body.
            var body = Data()
            if case .contentLength(let n) = decoder.currentFraming { body.reserveCapacity(n) }
            do {
                var ended = false
                reading: while true {
                    switch try decoder.next() {
                    case .body(let data)?: body.append(data)
                    case .end?: break reading
                    case .head?: return false
                    case nil:
                        // After the end of the stream the decoder throws for an incomplete body.
                        if ended { return false }
                        if !readMore() { ended = true }
                    }
                }
            } catch HTTPWireError.unexpectedEndOfStream {
                return false
            } catch {
                rejectAndClose(error)
                return false
            }

            var request = request0
            request.body = body
            request.maximumBodySize = server.options.maxBodySize  // also for the body inflated
            return answer(server.dispatch(request), head: head)
        }

        /// Answers a request whose body the handler reads as it goes: the decoder moves into the body source for
        /// the handler's reads and back afterwards, once the rest of the body (what the handler left) is read and
        /// dropped. A body that could not be read whole (cut off, malformed) closes the connection after the answer.
        private mutating func serveStreamed(_ request0: ServerRequest, head: HTTPRequestHead) -> Bool {
            var declared: Int?
            if case .contentLength(let length) = decoder.currentFraming { declared = length }
            let source = ConnectionBodySource(
                fd: fd, decoder: decoder, buffer: readBuffer, declaredLength: declared,
                timeout: server.options.bodyReadTimeout)
            var request = request0
            request.bodySource = source
            request.maximumBodySize = server.options.maxBodySize
            let reply = server.dispatch(request)
            if case .raw = reply {
                // A reply that writes itself may run the handler only now (interim responses first).
                let keep = answer(reply, head: head)
                let whole = source.drain()
                decoder = source.takeDecoder()
                return keep && whole
            }
            let whole = source.drain()
            decoder = source.takeDecoder()
            guard whole else {
                if case .response(var response) = reply {
                    response.headers.set("Connection", "close")
                    _ = answer(.response(response), head: head)
                }
                return false
            }
            return answer(reply, head: head)
        }

        /// Writes `reply`. False when the connection should close.
        private mutating func answer(_ reply: Reply, head: HTTPRequestHead) -> Bool {
            var keepAlive = head.keepAlive
            switch reply {
            case .drop:
                return false
            case .truncated(let response):
                sendTruncated(response, head: head)
                return false
            case .response(let response):
                if response.headers.connectionTokens.contains("close") { keepAlive = false }
                let sent = send(response, head: head, keepAlive: keepAlive)
                return sent && keepAlive && !server.isStopping
            case .responseThenClose(let response, let seconds):
                send(response, head: head, keepAlive: head.keepAlive)
                Thread.sleep(forTimeInterval: seconds)
                POSIXSocket.resetOnClose(fd)
                return false
            case .raw(let write):
                let connection = self
                let server = self.server
                let writer = RawReplyWriter(
                    keepAlive: keepAlive, method: head.method, fd: fd,
                    headBytes: { [keepAlive] in
                        connection.responseHead($0, request: head, keepAlive: keepAlive).serialized
                    },
                    isStopping: { server.isStopping })
                return write(writer) && keepAlive && !server.isStopping
            }
        }

        func errorResponse(status: Int, error: String, reason: String) -> ServerResponse {
            HTTPServer.errorResponse(status: status, error: error, reason: reason)
        }

        /// Answers a request that could not be read with 400 (413 when too large) and closes.
        func rejectAndClose(_ error: Error) {
            let response: ServerResponse
            if case HTTPWireError.bodyTooLarge = error {
                response = errorResponse(status: 413, error: "too_large", reason: "the request entity is too large")
            } else {
                let reason = (error as? HTTPWireError)?.description ?? "\(error)"
                response = errorResponse(status: 400, error: "bad_request", reason: reason)
            }
            let head = HTTPRequestHead(method: "GET", target: "/", version: .http1_1)
            send(response, head: head, keepAlive: false)
            lingeringClose()
        }

        /// Stops writing, then reads (and drops) what the client still sends for a moment, so that
        /// closing does not reset the connection before the client has read the answer.
        func lingeringClose() {
            POSIXSocket.shutdownWrite(fd)
            POSIXSocket.setReceiveTimeout(fd, seconds: 0.5)
            var scratch = [UInt8](repeating: 0, count: 16 * 1024)
            var total = 0
            while total < 8 * 1024 * 1024 {
                let n = scratch.withUnsafeMutableBytes { POSIXSocket.receive(fd, into: $0) }
                if n <= 0 { break }
                total += n
            }
        }

        /// The head to send for `response`: reason, `Server`, `Date`, `Connection`.
        func responseHead(_ response: ServerResponse, request: HTTPRequestHead, keepAlive: Bool) -> HTTPResponseHead {
            var headers = response.headers
            if !headers.contains("Server") { headers.add("Server", HTTPServer.serverHeader) }
            if !headers.contains("Date") { headers.add("Date", httpDate()) }
            headers.remove("Connection")
            if !keepAlive {
                headers.add("Connection", "close")
            } else if request.version == .http1_0 {
                headers.add("Connection", "keep-alive")
            }
            let version: HTTPVersion = request.version == .http1_0 ? .http1_0 : .http1_1
            return HTTPResponseHead(
                version: version, status: response.status, reason: response.reason, headers: headers)
        }

        /// Writes `response`. False when the connection cannot be reused (the peer
        /// went away, or a stream had to be delimited by closing).
        @discardableResult
        func send(_ response: ServerResponse, head request: HTTPRequestHead, keepAlive: Bool) -> Bool {
            let isHead = request.method == "HEAD"
            let status = response.status
            let noBodyStatus = (100..<200).contains(status) || status == 204 || status == 304
            var response = response
            response.headers.remove("Transfer-Encoding")
            switch response.body {
            case .empty:
                if status == 204 || (100..<200).contains(status) {
                    response.headers.remove("Content-Length")
                } else if !response.headers.contains("Content-Length") {
                    response.headers.add("Content-Length", "0")
                }
                let out = responseHead(response, request: request, keepAlive: keepAlive).serialized
                return POSIXSocket.sendAll(fd, out)
            case .data(let data):
                if isHead || noBodyStatus {
                    if status == 204 || (100..<200).contains(status) {
                        response.headers.remove("Content-Length")
                    } else if !response.headers.contains("Content-Length") {
                        response.headers.add("Content-Length", String(data.count))
                    }
                    let out = responseHead(response, request: request, keepAlive: keepAlive).serialized
                    return POSIXSocket.sendAll(fd, out)
                }
                response.headers.set("Content-Length", String(data.count))
                var out = responseHead(response, request: request, keepAlive: keepAlive).serialized
                if data.count <= 64 * 1024 {
                    out.append(data)
                    return POSIXSocket.sendAll(fd, out)
                }
                return POSIXSocket.sendAll(fd, out) && POSIXSocket.sendAll(fd, data)
            case .stream(let produce):
                if let declared = response.headers["Content-Length"], !noBodyStatus {
                    return sendStream(produce, length: declared, response, head: request, keepAlive: keepAlive)
                }
                response.headers.remove("Content-Length")
                if isHead || noBodyStatus {
                    if !noBodyStatus { response.headers.add("Transfer-Encoding", "chunked") }
                    let out = responseHead(response, request: request, keepAlive: keepAlive).serialized
                    return POSIXSocket.sendAll(fd, out)
                }
                let chunked = request.version != .http1_0
                if chunked { response.headers.add("Transfer-Encoding", "chunked") }
                let out = responseHead(response, request: request, keepAlive: keepAlive && chunked).serialized
                guard POSIXSocket.sendAll(fd, out) else { return false }
                let writer = SocketChunkWriter(fd: fd, chunked: chunked)
                produce(writer)
                guard chunked, writer.isOpen else { return false }
                return POSIXSocket.sendAll(fd, HTTPSerializer.lastChunk())
            }
        }

        /// Writes a streamed body of a length known in advance (an attachment read from a file): the head with its
        /// `Content-Length`, then the producer's chunks as they are, with no chunked framing. A producer that stops
        /// short of that length (a read that failed after the head was sent) leaves the connection to be closed, so
        /// the client sees a body cut short, never a shorter body taken as whole; bytes past it are not sent.
        private func sendStream(
            _ produce: @Sendable (any ChunkWriter) -> Void, length declared: String, _ response: ServerResponse,
            head request: HTTPRequestHead, keepAlive: Bool
        ) -> Bool {
            guard let length = Int(declared), length >= 0 else {
                var response = response
                response.headers.remove("Content-Length")
                return send(response, head: request, keepAlive: keepAlive)
            }
            let out = responseHead(response, request: request, keepAlive: keepAlive).serialized
            guard POSIXSocket.sendAll(fd, out) else { return false }
            if request.method == "HEAD" { return true }
            let writer = SocketChunkWriter(fd: fd, chunked: false, length: length)
            produce(writer)
            return writer.isOpen && writer.isComplete
        }

        /// Sends the head declaring the whole body, then half of it, and stops.
        func sendTruncated(_ response: ServerResponse, head request: HTTPRequestHead) {
            var response = response
            response.headers.remove("Transfer-Encoding")
            if case .stream(let produce) = response.body, response.headers.contains("Content-Length") {
                // A body of known length (an attachment): cut like a whole one.
                let collector = CollectingChunkWriter()
                produce(collector)
                response.body = .data(collector.data)
            }
            switch response.body {
            case .stream(let produce):
                response.headers.remove("Content-Length")
                response.headers.add("Transfer-Encoding", "chunked")
                let out = responseHead(response, request: request, keepAlive: false).serialized
                guard POSIXSocket.sendAll(fd, out) else { return }
                produce(SocketChunkWriter(fd: fd, chunked: true, truncateFirstChunk: true))
            case .empty, .data:
                var data = Data()
                if case .data(let d) = response.body { data = d }
                if data.count < 2 { data = Data("{}".utf8) }
                response.headers.set("Content-Length", String(data.count))
                var out = responseHead(response, request: request, keepAlive: false).serialized
                if request.method != "HEAD" { out.append(data.prefix(data.count / 2)) }
                _ = POSIXSocket.sendAll(fd, out)
            }
        }
    }
}

/// A request body read from the connection's socket as the handler asks for it (``ServerRequest/bodySource``): the
/// connection's decoder is lent to it for the request, each read waits at most the body read timeout for the
/// client's next bytes, and a body that ends before its `Content-Length` (or its last chunk) is an error.
final class ConnectionBodySource: RequestBodySource, @unchecked Sendable {
    // @unchecked Sendable: every member is touched only under `lock` (the handler reads on the connection's thread).
    private let fd: Int32
    private var decoder: HTTPRequestDecoder
    private let buffer: UnsafeMutableRawBufferPointer
    let declaredLength: Int?
    private let lock = NSLock()
    private var leftover = Data()
    private var ended = false
    private var failure: (any Error)?
    /// Set once the decoder went back to the connection: a handler that runs later (a reply that answers in its own
    /// way) finds the body gone, never an empty one.
    private var returned = false

    /// Why a streamed body could not be read whole.
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    init(
        fd: Int32, decoder: HTTPRequestDecoder, buffer: UnsafeMutableRawBufferPointer, declaredLength: Int?,
        timeout: Double
    ) {
        self.fd = fd
        self.decoder = decoder
        self.buffer = buffer
        self.declaredLength = declaredLength
        POSIXSocket.setReceiveTimeout(fd, seconds: timeout)
    }

    func read(upTo maximum: Int) throws -> Data? {
        lock.lock()
        defer { lock.unlock() }
        if returned { throw Failure(description: "the body was read and dropped before the request was answered") }
        guard maximum > 0 else { return Data() }
        while leftover.isEmpty {
            if let failure { throw failure }
            if ended { return nil }
            do {
                switch try decoder.next() {
                case .body(let data)?:
                    leftover = data
                case .end?:
                    ended = true
                case .head?:
                    throw Failure(description: "a request head where its body was expected")
                case nil:
                    let n = POSIXSocket.receive(fd, into: buffer)
                    if n > 0 {
                        decoder.feed(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                    } else if n == 0 {
                        decoder.finish()  // the decoder now throws for a body cut short
                    } else {
                        throw Failure(description: "the client sent nothing more within the body read timeout")
                    }
                }
            } catch HTTPWireError.bodyTooLarge(let limit) {
                failure = CouchError(413, "too_large", "the request entity is too large (over \(limit) bytes)")
            } catch HTTPWireError.unexpectedEndOfStream {
                failure = Failure(description: "the connection closed before the end of the body")
            } catch {
                failure = error
            }
        }
        let count = min(maximum, leftover.count)
        let piece = leftover.prefix(count)
        leftover = leftover.count == count ? Data() : Data(leftover.dropFirst(count))
        return Data(piece)
    }

    /// Reads (and drops) whatever the handler left of the body. True when the body was read whole.
    func drain() -> Bool {
        while (try? read(upTo: Int.max)) ?? nil != nil {}
        lock.lock()
        defer { lock.unlock() }
        return ended && failure == nil
    }

    /// The connection's decoder, back for the next request (the body read timeout is lifted).
    func takeDecoder() -> HTTPRequestDecoder {
        lock.lock()
        defer { lock.unlock() }
        POSIXSocket.setReceiveTimeout(fd, seconds: 0)
        returned = true
        return decoder
    }
}

/// Collects the chunks of a streamed response (for replies that send a body their own way).
final class CollectingChunkWriter: ChunkWriter, @unchecked Sendable {
    // @unchecked Sendable: `collected` is guarded by `lock`.
    private let lock = NSLock()
    private var collected = Data()

    var data: Data {
        lock.lock()
        defer { lock.unlock() }
        return collected
    }

    @discardableResult
    func write(_ data: Data) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        collected.append(data)
        return true
    }
}

/// Writes the chunks of a streamed response straight to the socket.
final class SocketChunkWriter: ChunkWriter, @unchecked Sendable {
    // @unchecked Sendable: `open` is guarded by `lock`; writes are serialised by the same lock.
    private let fd: Int32
    private let chunked: Bool
    private let truncateFirstChunk: Bool
    /// The body's declared length, when it has one: no more is sent.
    private let length: Int?
    private let lock = NSLock()
    private var open = true
    private var written = 0

    init(fd: Int32, chunked: Bool, truncateFirstChunk: Bool = false, length: Int? = nil) {
        self.fd = fd
        self.chunked = chunked
        self.truncateFirstChunk = truncateFirstChunk
        self.length = length
    }

    var isOpen: Bool {
        lock.lock()
        defer { lock.unlock() }
        return open
    }

    /// Whether a body of declared length was sent whole (always true without one).
    var isComplete: Bool {
        lock.lock()
        defer { lock.unlock() }
        return length.map { written == $0 } ?? true
    }

    @discardableResult
    func write(_ data: Data) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard open else { return false }
        if data.isEmpty { return true }
        if let length {
            // Never past the declared length: what the producer sends beyond it is a fault, not body.
            guard written + data.count <= length else {
                open = false
                return false
            }
            written += data.count
        }
        if truncateFirstChunk {
            var out = HTTPSerializer.chunkHeader(size: data.count)
            out.append(data.prefix(max(1, data.count / 2)))
            _ = POSIXSocket.sendAll(fd, out)
            POSIXSocket.shutdownBoth(fd)
            open = false
            return false
        }
        let ok: Bool
        if !chunked {
            ok = POSIXSocket.sendAll(fd, data)
        } else if data.count <= 64 * 1024 {
            ok = POSIXSocket.sendAll(fd, HTTPSerializer.chunk(data))
        } else {
            ok =
                POSIXSocket.sendAll(fd, HTTPSerializer.chunkHeader(size: data.count)) && POSIXSocket.sendAll(fd, data)
                && POSIXSocket.sendAll(fd, Data([0x0D, 0x0A]))
        }
        if !ok { open = false }
        return ok
    }

    /// An attachment's chunks gathered up to 16 MiB are sent with one `sendmsg`: with 1 MiB sends and a read of
    /// the file between them, the client took 10-15 % more CPU per MiB to receive the same bytes.
    var preferredWriteSize: Int { chunked || truncateFirstChunk ? 0 : 16 << 20 }

    /// Sends `pieces` with one `sendmsg` (a body of declared length, unframed); the others one at a time.
    @discardableResult
    func write(contentsOf pieces: [Data]) -> Bool {
        guard !chunked, !truncateFirstChunk, pieces.count > 1 else {
            for piece in pieces {
                guard write(piece) else { return false }
            }
            return true
        }
        lock.lock()
        defer { lock.unlock() }
        guard open else { return false }
        let count = pieces.reduce(0) { $0 + $1.count }
        if let length {
            guard written + count <= length else {
                open = false
                return false
            }
            written += count
        }
        let ok = POSIXSocket.sendAll(fd, pieces)
        if !ok { open = false }
        return ok
    }

    /// Cuts the body short (the producer failed after it began): nothing more is sent and the connection is
    /// closed without the last chunk, so the client sees an incomplete body, as CouchDB aborts one.
    func abort() {
        lock.lock()
        defer { lock.unlock() }
        guard open else { return }
        open = false
        POSIXSocket.shutdownBoth(fd)
    }
}
