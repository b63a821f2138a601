import Foundation
import HTTPWire

/// A minimal blocking HTTP/1.1 client over one TCP connection to 127.0.0.1, for tests that must
/// see exactly what is on the wire: dropped connections, truncated bodies, chunk framing, endless
/// feeds. It adds nothing but `Host` and `Content-Length`, follows no redirects and keeps no cookies.
///
/// Not thread-safe: use one connection from one thread at a time.
public final class RawHTTPConnection {
    /// One response as read from the wire.
    public struct Response: Sendable {
        public var head: HTTPResponseHead
        public var body: Data
        /// How the body was framed (`.contentLength`, `.chunked`, `.untilClose`, `.none`).
        public var framing: HTTPBodyFraming
        /// Trailer fields of a chunked body.
        public var trailers: HTTPHeaders
        /// Interim 1xx responses that came first (e.g. `100 Continue`).
        public var interim: [HTTPResponseHead]
        /// True when the body was cut short by `readFor` (the client stopped reading).
        public var stoppedByClient: Bool

        public var status: Int { head.status }
        public var reason: String { head.reason }
        public var headers: HTTPHeaders { head.headers }
        /// The body as UTF-8 text.
        public var text: String { String(decoding: body, as: UTF8.self) }
    }

    /// Why a response could not be read.
    public enum Failure: Error, Sendable, CustomStringConvertible {
        /// The server closed the connection before a complete head (`received` is what came).
        case closedBeforeResponse(received: Data)
        /// The server closed the connection in the middle of the body.
        case closedMidBody(head: HTTPResponseHead, partialBody: Data)
        /// Nothing arrived within the timeout.
        case timedOut
        /// The bytes are not a valid HTTP response.
        case malformed(HTTPWireError)
        /// The request could not be sent (the server had closed the connection).
        case sendFailed

        public var description: String {
            switch self {
            case .closedBeforeResponse(let d): return "connection closed before a response (\(d.count) bytes received)"
            case .closedMidBody(let h, let b):
                return "connection closed mid-body after \(b.count) bytes (status \(h.status))"
            case .timedOut: return "timed out"
            case .malformed(let e): return "malformed response: \(e)"
            case .sendFailed: return "could not send the request"
            }
        }
    }

    /// The port connected to.
    public let port: Int
    private var fd: Int32
    private var decoder = HTTPResponseDecoder()
    private var timeout: Double
    private var buffer = [UInt8](repeating: 0, count: 64 * 1024)
    /// Bytes received but not yet decoded are kept in the decoder; this records the raw bytes of
    /// the response being read, for `closedBeforeResponse`.
    private var rawHead = Data()

    /// Connects to 127.0.0.1:`port`. `timeout` bounds every wait for bytes (seconds).
    public init(port: Int, timeout: Double = 30) throws {
        self.port = port
        self.timeout = timeout
        self.fd = try POSIXSocket.connect(port: port)
    }

    deinit { close() }

    /// Closes the connection (idempotent).
    public func close() {
        if fd >= 0 {
            POSIXSocket.closeDescriptor(fd)
            fd = -1
        }
    }

    /// Sends raw bytes.
    public func send(_ data: Data) throws {
        guard fd >= 0, POSIXSocket.sendAll(fd, data) else { throw Failure.sendFailed }
    }

    /// Stops sending (the server reads the end of the stream) but keeps reading.
    public func shutdownWrite() {
        if fd >= 0 { POSIXSocket.shutdownWrite(fd) }
    }

    /// Sends a request and reads its response. `Host` is added when missing, and
    /// `Content-Length` when there is a body and neither it nor `Transfer-Encoding` is set.
    /// With `readFor`, the body is read for at most that many seconds and then the connection is
    /// closed (for endless streams); the response then has `stoppedByClient` set. A head that has
    /// not arrived by then is waited for (up to the connection's timeout), and the body is then
    /// read for `readFor` seconds from its arrival.
    public func request(
        method: String, target: String, headers: HTTPHeaders = HTTPHeaders(), body: Data? = nil, readFor: Double? = nil
    ) throws -> Response {
        var headers = headers
        if !headers.contains("Host") { headers.add("Host", "127.0.0.1:\(port)") }
        if let body, !headers.contains("Content-Length"), !headers.contains("Transfer-Encoding") {
            headers.add("Content-Length", String(body.count))
        }
        var out = HTTPRequestHead(method: method, target: target, headers: headers).serialized
        if let body { out.append(body) }
        try send(out)
        return try readResponse(to: method, readFor: readFor)
    }

    /// Reads the next response, framed as an answer to `method`.
    public func readResponse(to method: String, readFor: Double? = nil) throws -> Response {
        decoder.expectResponse(to: method)
        rawHead = Data()
        var head: HTTPResponseHead?
        var interim: [HTTPResponseHead] = []
        var body = Data()
        var deadline = readFor.map { Date().addingTimeInterval($0) }
        var ended = false
        while true {
            let part: HTTPResponseDecoder.Part?
            do {
                part = try decoder.next()
            } catch HTTPWireError.unexpectedEndOfStream {
                if let head { throw Failure.closedMidBody(head: head, partialBody: body) }
                throw Failure.closedBeforeResponse(received: rawHead)
            } catch let error as HTTPWireError {
                throw Failure.malformed(error)
            }
            switch part {
            case .head(let h)?:
                if h.isInformational && h.status != 101 {
                    interim.append(h)
                } else {
                    head = h
                }
            case .body(let data)?:
                body.append(data)
            case .end(let trailers)?:
                if let head {
                    return Response(
                        head: head, body: body, framing: decoder.currentFraming, trailers: trailers, interim: interim,
                        stoppedByClient: false)
                }
            case nil:
                if ended {
                    if let head { throw Failure.closedMidBody(head: head, partialBody: body) }
                    throw Failure.closedBeforeResponse(received: rawHead)
                }
                let wait: Double
                if let readFor, let current = deadline {
                    wait = current.timeIntervalSinceNow
                    if wait <= 0, head == nil {
                        // The head is late (a loaded machine): wait for it as for any response,
                        // then read the body for `readFor` from then on.
                        let n = receive(timeout: timeout)
                        if n == -2 { throw Failure.timedOut }
                        if n == 0 { ended = true }
                        deadline = Date().addingTimeInterval(readFor)
                        continue
                    }
                    if wait <= 0 {
                        close()
                        guard let head else { throw Failure.timedOut }
                        return Response(
                            head: head, body: body, framing: decoder.currentFraming, trailers: HTTPHeaders(),
                            interim: interim, stoppedByClient: true)
                    }
                } else {
                    wait = timeout
                }
                let n = receive(timeout: min(wait, timeout))
                if n == -2 {
                    if deadline != nil { continue }
                    throw Failure.timedOut
                }
                if n == 0 { ended = true }
            }
        }
    }

    /// Reads one interim (1xx) response, e.g. the `100 Continue` a server sends after a request
    /// head with `Expect: 100-continue`, before the body is sent.
    public func readInterimResponse() throws -> HTTPResponseHead {
        var interim: HTTPResponseHead?
        var ended = false
        while true {
            let part: HTTPResponseDecoder.Part?
            do {
                part = try decoder.next()
            } catch HTTPWireError.unexpectedEndOfStream {
                throw Failure.closedBeforeResponse(received: rawHead)
            } catch let error as HTTPWireError {
                throw Failure.malformed(error)
            }
            switch part {
            case .head(let h)?:
                guard h.isInformational else {
                    throw Failure.malformed(.invalidStartLine("expected an interim response, got \(h.status)"))
                }
                interim = h
            case .body?:
                continue
            case .end?:
                if let interim { return interim }
            case nil:
                if ended { throw Failure.closedBeforeResponse(received: rawHead) }
                let n = receive(timeout: timeout)
                if n == -2 { throw Failure.timedOut }
                if n == 0 { ended = true }
            }
        }
    }

    /// Reads into the decoder: the byte count, 0 at end of stream, -2 on timeout.
    private func receive(timeout: Double) -> Int {
        guard fd >= 0 else {
            decoder.finish()
            return 0
        }
        POSIXSocket.setReceiveTimeout(fd, seconds: max(timeout, 0.001))
        let n = buffer.withUnsafeMutableBytes { POSIXSocket.receive(fd, into: $0) }
        if n > 0 {
            let chunk = buffer.withUnsafeBytes { Data($0[0..<n]) }
            if rawHead.count < 64 * 1024 { rawHead.append(chunk) }
            decoder.feed(chunk)
            return n
        }
        if n < 0, errno == EAGAIN || errno == EWOULDBLOCK { return -2 }
        decoder.finish()
        return 0
    }
}
