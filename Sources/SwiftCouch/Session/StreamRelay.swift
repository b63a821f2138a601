import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Relays one streamed attempt: decides from the head whether the session must see the whole
/// response (a status it may retry or renew on), or whether the body can go straight to the
/// caller's receiver as it arrives.
///
/// `@unchecked Sendable`: `mode` is a `Locked`; the rest is immutable.
final class StreamRelay: StreamReceiver, @unchecked Sendable {
    private enum Mode {
        case awaitingHead
        case buffering(HTTPResponse)
        /// A buffered answer still arriving at its deadline: the transfer is cancelled, and the
        /// attempt ends with the deadline's error.
        case expired
        case forwarding
    }

    /// Statuses the session may act on, so their bodies are read whole first.
    static let sessionStatuses: Set<Int> = [401, 403, 429, 500, 502, 503, 504]
    /// The most of a buffered (error) body kept.
    static let bufferLimit = 1 << 20

    private let session: InterceptableSession
    private let attempt: InterceptableSession.Attempt
    private let request: HTTPRequest
    private let generation: Int?
    private let started: Date
    private let receiver: any StreamReceiver
    private let mode = Locked(Mode.awaitingHead)
    /// The response's deadline, for an answer the session reads whole (a 429 or 503 to a stream
    /// whose body trickles): the transport bounds a stream's head only.
    private let deadline: DispatchTime?

    init(
        session: InterceptableSession, attempt: InterceptableSession.Attempt, request: HTTPRequest, generation: Int?,
        started: Date, receiver: any StreamReceiver
    ) {
        self.session = session
        self.attempt = attempt
        self.request = request
        self.generation = generation
        self.started = started
        self.receiver = receiver
        self.deadline = SocketJob.deadline(after: request.deadline)
    }

    func receive(head: HTTPResponse) {
        if Self.sessionStatuses.contains(head.statusCode) {
            mode.withLock { $0 = .buffering(head) }
            return
        }
        mode.withLock { $0 = .forwarding }
        let arrived = DispatchTime.now().uptimeNanoseconds
        session.queue.async { [self] in
            session.report(.success(head), attempt: attempt, arrivedAt: arrived)
        }
        guard !attempt.handle.isCancelled else { return }
        session.transcript?.log(response: head, for: request, elapsed: Date().timeIntervalSince(started))
        receiver.receive(head: head)
    }

    func receive(chunk: Data) {
        var expired = false
        let forward = mode.withLock { mode -> Bool in
            switch mode {
            case .forwarding: return true
            case .buffering(var response):
                if let deadline, DispatchTime.now() >= deadline {
                    mode = .expired
                    expired = true
                    return false
                }
                if response.body.count < Self.bufferLimit { response.body.append(chunk) }
                mode = .buffering(response)
                return false
            case .expired:
                expired = true
                return false
            case .awaitingHead: return false
            }
        }
        // Again for every chunk that still comes: the transfer may not be tracked yet.
        if expired { attempt.handle.cancelTransfer() }
        if forward, !attempt.handle.isCancelled {
            receiver.receive(chunk: chunk)
            attempt.handle.holdUntilPauseReachesTransfer()
        }
    }

    func complete(error: (any Error)?) {
        let current = mode.current
        switch current {
        case .forwarding:
            // A cancelled request is completed by its handle, with the cancellation (and whether
            // the outcome is unknown), not with the transport's report of the closed connection.
            guard !attempt.handle.isCancelled, attempt.handle.claimCompletion() else { return }
            receiver.complete(error: error.map { session.transportError($0, request: request) })
        case .buffering(let response):
            let result: Result<HTTPResponse, any Error> = error.map { .failure($0) } ?? .success(response)
            session.queue.async { [self] in
                session.received(result, attempt: attempt, request: request, generation: generation, started: started)
            }
        case .expired:
            let seconds = String(format: "%g", request.deadline ?? 0)
            let expired = URLError(
                .timedOut,
                userInfo: [
                    NSLocalizedDescriptionKey:
                        "The response did not complete within its deadline of \(seconds) s (HTTPRequest.deadline, "
                        + "from Configuration.requestTimeout or the call's timeout): an answer the session reads "
                        + "whole (\(Self.sessionStatuses.sorted().map(String.init).joined(separator: ", "))) "
                        + "was still arriving"
                ])
            session.queue.async { [self] in
                session.received(
                    .failure(expired), attempt: attempt, request: request, generation: generation, started: started)
            }
        case .awaitingHead:
            let result: Result<HTTPResponse, any Error> = .failure(error ?? URLError(.badServerResponse))
            session.queue.async { [self] in
                session.received(result, attempt: attempt, request: request, generation: generation, started: started)
            }
        }
    }
}
