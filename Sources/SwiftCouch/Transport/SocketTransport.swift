import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A ``Transport`` that speaks HTTP/1.1 over plain POSIX sockets, with a keep-alive connection
/// pool and no dependency beyond Foundation — for `http` servers only: CouchDB on loopback, in a
/// cluster network, or behind a proxy that terminates TLS. For `https`, use
/// ``URLSessionTransport``. ``AutomaticTransport`` (the default) picks this transport for `http` on Linux.
///
/// ```swift
/// var configuration = Configuration()
/// configuration.transport = SocketTransport()
/// let client = CouchDBClient(url: URL(string: "http://127.0.0.1:5984")!, credentials: credentials,
///                            configuration: configuration)
/// ```
///
/// It exists because it costs far less CPU per request than `URLSession` on Linux.
///
/// **Connections.** Per host and port, at most `maximumConnectionsPerHost` connections; more
/// requests wait in a queue (no thread blocks for them) and take the first connection that frees
/// up. Streamed responses (row streams, continuous feeds, downloads), which may hold a connection
/// for long while paused, take at most all connections but one, so they never starve other
/// requests. A request waits in the queue at most its timeout; then it fails with
/// `URLError(.timedOut)` saying that no connection became free, how many are busy and with what,
/// and that nothing was sent. Each connection has one thread of its own that runs its requests one after another with
/// blocking socket calls; the response is parsed as it is read and delivered from that thread. An
/// idle connection is kept for `idleTimeout` seconds, then closed. A connection is never reused
/// after `Connection: close`, a body delimited by closing, a protocol error, an incomplete body, a
/// timeout or a cancellation.
///
/// **Stale connections.** A server may close a kept-alive connection while it is idle. Before a
/// pooled connection is used it is checked with one non-blocking peek; a closed one is discarded
/// and the request goes out on a fresh connection, with nothing sent. If the server closes it in
/// the moment between that check and the request, the request is sent again once on a fresh
/// connection when that is known to be safe:
/// - for any method, when the write failed before a single byte of the request was accepted by
///   the socket — the server cannot have read any of it;
/// - for any method, when the server reset the connection (`ECONNRESET`/`EPIPE`) before a single
///   byte of the response arrived. A server closes with a reset when bytes it never read are
///   waiting (it answered the previous request and closed without `Connection: close`, or closed
///   an idle connection as the request arrived); one that read a request and then failed closes
///   in order;
/// - for `GET` and `HEAD` only, when the request was written but the connection closed in order
///   before a single byte of the response arrived. The server may have read the request; only a
///   safe method can be repeated without asking (RFC 9110 §9.2.2). For other methods the error
///   goes to the session (`URLError(.networkConnectionLost)`), whose ``RetryPolicy`` knows whether
///   the operation is idempotent, and which reports the outcome as unknown.
/// A one-shot `InputStream` body is resent only when none of it was read.
///
/// **Errors** are `URLError`s with the codes the session understands: `.cannotConnectToHost`,
/// `.cannotFindHost`, `.networkConnectionLost`, `.timedOut`, `.badServerResponse`, `.cancelled`
/// (and `.cannotDecodeContentData` for a compressed body that does not decode).
///
/// **Timeouts.** `HTTPRequest.timeout` bounds each wait for the socket (connecting, every write
/// and every read), as `URLRequest.timeoutInterval` does: it restarts with every byte. It also
/// bounds, separately, the time spent waiting in the queue for a connection.
/// `HTTPRequest.deadline` bounds the response as a whole, counted from when the transport is
/// handed the request: each read waits at most the smaller of the idle timeout and the time left,
/// so a head or body trickled a byte at a time and `1xx` interim responses sent forever end there
/// with `URLError(.timedOut)` saying so, and the connection is closed. For ``stream(_:receiver:)``
/// only the head counts; the body is bounded by the idle timeout between bytes.
///
/// **Bodies.** A `Data` body is written with the head in one `sendmsg`. A ``StreamedBody`` is read
/// in 64 KiB pieces and sent with `Content-Length` (its length is known), or chunked when its
/// length is negative; upload progress goes to ``StreamReceiver/sent(bytes:of:)``.
///
/// **Compression.** Unless the request names an `Accept-Encoding` of its own, the transport asks
/// for `gzip, deflate` and decodes a `Content-Encoding: gzip` (or `deflate`) body as it arrives,
/// with SwiftCouch's own inflater; the caller sees the decoded bytes and a head without
/// `Content-Encoding` and `Content-Length`, as if the server had sent them plain. A request that
/// names its own `Accept-Encoding` gets the body exactly as sent. With
/// `HTTPRequest.maximumDecompressionRatio`, the body is inflated in 16 KiB pieces of what
/// arrives, and one that has decoded at least a mebibyte and more than that ratio times what it
/// received fails with `URLError(.dataLengthExceedsMaximum)` (a gzip bomb stops early, whole or
/// streamed).
///
/// **Streaming.** ``stream(_:receiver:)`` delivers the head and then each piece of the body as it
/// is read. `pause()` stops reading the socket (the server's sends stall once the socket buffers
/// fill: real back-pressure); `resume()` reads again; `cancel()` closes the connection.
public final class SocketTransport: Transport {
    /// Counters for monitoring and tests.
    public struct Statistics: Sendable, Equatable {
        /// Connections opened so far.
        public var connectionsOpened = 0
        /// Requests written so far (a request sent again on a fresh connection counts twice).
        public var requestsSent = 0
        /// Requests sent on a connection kept alive from an earlier request.
        public var reusedConnections = 0
        /// Pooled connections found closed by the server when they were about to be used.
        public var staleConnectionsDiscarded = 0
        /// Requests sent again on a fresh connection after a kept-alive one failed under them.
        public var staleRetries = 0
        /// Requests written by the calling thread on an idle kept-alive connection, whose own
        /// thread waited on the socket for the answer (no thread woken to send them).
        public var requestsWrittenByCaller = 0
        /// Of those, requests whose socket buffer took only part: the connection's thread wrote
        /// the rest.
        public var callerWritesFinishedByConnection = 0
        /// Connections open now, busy or idle.
        public var openConnections = 0
        /// Connections idle in the pool now.
        public var idleConnections = 0
        /// Requests waiting for a connection now.
        public var queuedRequests = 0

        public init() {}
    }

    /// The `Accept-Encoding` sent when a request does not name one (the transport then decodes
    /// what comes back).
    static let acceptEncoding = "gzip, deflate"

    private let pool: ConnectionPool

    /// Creates a transport.
    /// - Parameters:
    ///   - maximumConnectionsPerHost: how many connections to open to one host and port; more
    ///     requests wait for one. Defaults to 6.
    ///   - connectTimeout: how long connecting may take, in seconds (also bounded by the request's
    ///     timeout). Defaults to 10.
    ///   - idleTimeout: how long an idle connection is kept for reuse, in seconds. Defaults to 30.
    public convenience init(
        maximumConnectionsPerHost: Int = 6, connectTimeout: TimeInterval = 10, idleTimeout: TimeInterval = 30
    ) {
        self.init(
            maximumConnectionsPerHost: maximumConnectionsPerHost, connectTimeout: connectTimeout,
            idleTimeout: idleTimeout, callerWriteSlice: .max)
    }

    /// A transport whose callers write at most `callerWriteSlice` bytes of a request themselves
    /// (tests: a socket buffer that takes only part of a request, which loopback's large buffers
    /// never do).
    init(
        maximumConnectionsPerHost: Int = 6, connectTimeout: TimeInterval = 10, idleTimeout: TimeInterval = 30,
        callerWriteSlice: Int
    ) {
        pool = ConnectionPool(
            options: ConnectionPool.Options(
                maximumConnectionsPerHost: max(1, maximumConnectionsPerHost), connectTimeout: connectTimeout,
                idleTimeout: max(0, idleTimeout), callerWriteSlice: max(1, callerWriteSlice)))
    }

    deinit {
        pool.shutdown()
    }

    /// The counters so far, and the connections and queue now.
    public var statistics: Statistics { pool.statistics }

    @discardableResult
    public func send(
        _ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void
    ) -> any Cancellable {
        start(request, sink: .whole(completion))
    }

    public func stream(_ request: HTTPRequest, receiver: any StreamReceiver) -> any StreamingTask {
        start(request, sink: .stream(receiver))
    }

    /// Stops taking requests (new ones fail with `URLError(.cancelled)`), fails those waiting for
    /// a connection, and closes idle connections. Requests already running finish first.
    public func shutdown() {
        pool.shutdown()
    }

    private func start(_ request: HTTPRequest, sink: ResponseSink) -> SocketJob {
        let key: HostKey
        do throws(CouchError) {
            key = try Self.hostKey(for: request)
        } catch {
            let job = SocketJob(request: request, key: HostKey(host: "", port: 0), sink: sink, pool: pool)
            job.phase = .finished
            ConnectionPool.fail(job, error)
            return job
        }
        let job = SocketJob(request: request, key: key, sink: sink, pool: pool)
        pool.submit(job)
        return job
    }

    /// Where `request` goes; an error that says what to do for anything but `http`.
    static func hostKey(for request: HTTPRequest) throws(CouchError) -> HostKey {
        // A prepared request's server was taken apart once per client: no URL made or parsed here.
        if let server = request.server, server.scheme == "http", !server.host.isEmpty {
            return HostKey(host: server.host, port: server.port ?? 80)
        }
        let url = request.url
        let scheme = url.scheme?.lowercased() ?? ""
        guard scheme == "http" else {
            let message =
                scheme == "https"
                ? "SocketTransport speaks plain HTTP only and cannot connect to an https URL (\(url.host ?? "")). "
                    + "Use URLSessionTransport for https (the default AutomaticTransport does), or reach the server over http "
                    + "through a TLS-terminating proxy."
                : "SocketTransport supports only http URLs, not '\(scheme)'."
            throw CouchError(
                kind: .transport, message: message, method: request.method.rawValue, path: request.path)
        }
        var host = url.host ?? ""
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else {
            throw CouchError(
                kind: .transport, message: "The URL names no host.", method: request.method.rawValue,
                path: request.path)
        }
        return HostKey(host: host, port: url.port ?? 80)
    }
}
