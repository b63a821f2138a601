import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The default ``Transport``: each request goes to the transport that serves its URL best.
///
/// - On Linux, plain `http` goes over a ``SocketTransport`` — about half the client CPU of
///   `URLSession` per request, and real back-pressure for streamed responses: FoundationNetworking
///   reads a response ahead of its delegate and cannot pause a transfer in flight, so a
///   `URLSession` stream on Linux is not flow-controlled. `https` (and any other scheme) goes over a ``URLSessionTransport``.
///   When an HTTP proxy is configured in the environment (`http_proxy`, `HTTP_PROXY`, `all_proxy`
///   or `ALL_PROXY`), every request goes over `URLSession`, which honours it.
/// - On Apple platforms every request goes over a ``URLSessionTransport``.
///
/// Each underlying transport is created on first use, so a client that only talks `https` opens
/// no socket pool and one that only talks `http` on Linux makes no `URLSession`. To choose a
/// transport yourself, set ``Configuration/transport``.
public final class AutomaticTransport: Transport {
    private struct State {
        var socket: SocketTransport?
        var urlSession: URLSessionTransport?
        var isShutDown = false
    }
    private let state = Locked(State())
    private let maximumConnectionsPerHost: Int
    private let socketsForHTTP: Bool

    /// Creates the transport.
    /// - Parameter maximumConnectionsPerHost: how many connections either transport opens to one
    ///   server. Defaults to 6.
    public convenience init(maximumConnectionsPerHost: Int = 6) {
        self.init(
            maximumConnectionsPerHost: maximumConnectionsPerHost,
            environment: ProcessInfo.processInfo.environment)
    }

    init(maximumConnectionsPerHost: Int, environment: [String: String]) {
        self.maximumConnectionsPerHost = max(1, maximumConnectionsPerHost)
        #if canImport(FoundationNetworking)
            let proxied = ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"].contains {
                !(environment[$0] ?? "").isEmpty
            }
            socketsForHTTP = !proxied
        #else
            socketsForHTTP = false
        #endif
    }

    /// The name of the transport that carries requests for `url`: `"socket"` or `"urlsession"`.
    public func transportName(for url: URL) -> String {
        usesSocket(url) ? "socket" : "urlsession"
    }

    private func usesSocket(_ url: URL) -> Bool {
        socketsForHTTP && url.scheme?.lowercased() == "http"
    }

    /// The transport for `request`, created on first use; nil after `shutdown()`.
    private func transport(for request: HTTPRequest) -> (any Transport)? {
        let socket = socketsForHTTP && request.scheme == "http"
        return state.withLock { state -> (any Transport)? in
            guard !state.isShutDown else { return nil }
            if socket {
                if state.socket == nil {
                    state.socket = SocketTransport(maximumConnectionsPerHost: maximumConnectionsPerHost)
                }
                return state.socket
            }
            if state.urlSession == nil {
                state.urlSession = URLSessionTransport(maximumConnectionsPerHost: maximumConnectionsPerHost)
            }
            return state.urlSession
        }
    }

    @discardableResult
    public func send(
        _ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void
    ) -> any Cancellable {
        guard let transport = transport(for: request) else {
            completion(.failure(URLSessionTransport.shutDownError))
            return WholeBodyStreamingTask(inner: NothingToCancel())
        }
        return transport.send(request, completion: completion)
    }

    public func stream(_ request: HTTPRequest, receiver: any StreamReceiver) -> any StreamingTask {
        guard let transport = transport(for: request) else {
            receiver.complete(error: URLSessionTransport.shutDownError)
            return WholeBodyStreamingTask(inner: NothingToCancel())
        }
        return transport.stream(request, receiver: receiver)
    }

    /// Shuts down whichever transports were created; later requests fail.
    public func shutdown() {
        let (socket, urlSession) = state.withLock { state -> (SocketTransport?, URLSessionTransport?) in
            state.isShutDown = true
            return (state.socket, state.urlSession)
        }
        socket?.shutdown()
        urlSession?.shutdown()
    }
}
