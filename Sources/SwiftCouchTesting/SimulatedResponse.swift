import Foundation
import SwiftCouch

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A canned answer for ``SimulatedTransport``: a status, headers and body — or a failure.
public struct SimulatedResponse: Sendable {
    enum Outcome: Sendable {
        case response(HTTPResponse)
        case failure(any Error)
    }

    let outcome: Outcome
    /// How long to wait before answering. Defaults to 0.
    public var delay: TimeInterval

    /// A response with any status, headers and body. The status is honoured as given.
    public init(status: Int, headers: HTTPFields = HTTPFields(), body: Data = Data(), delay: TimeInterval = 0) {
        outcome = .response(HTTPResponse(statusCode: status, headers: headers, body: body))
        self.delay = delay
    }

    /// A response whose body is `json` (as text), with `Content-Type: application/json`.
    public static func json(
        _ status: Int, _ json: String, headers: HTTPFields = HTTPFields(), delay: TimeInterval = 0
    ) -> SimulatedResponse {
        var headers = headers
        if headers["Content-Type"] == nil { headers["Content-Type"] = "application/json" }
        return SimulatedResponse(status: status, headers: headers, body: Data(json.utf8), delay: delay)
    }

    /// No response at all: the transport fails with `error` (for example
    /// `URLError(.networkConnectionLost)` for a dropped connection).
    public static func failure(_ error: any Error, delay: TimeInterval = 0) -> SimulatedResponse {
        SimulatedResponse(outcome: .failure(error), delay: delay)
    }

    private init(outcome: Outcome, delay: TimeInterval) {
        self.outcome = outcome
        self.delay = delay
    }
}

/// A request as the simulated transport received it, to assert on.
public struct RecordedRequest: Sendable, CustomStringConvertible {
    /// The full request.
    public var request: HTTPRequest
    /// The method, e.g. `PUT`.
    public var method: String { request.method.rawValue }
    /// The percent-encoded path without the query, e.g. `/db/a%2Fb`.
    public var path: String { request.path }
    /// The percent-encoded query without `?`, or nil.
    public var query: String? { request.query }
    /// The query parameters, decoded, in order.
    public var queryItems: [URLQueryItem] {
        URLComponents(url: request.url, resolvingAgainstBaseURL: false)?.queryItems ?? []
    }
    /// The request headers.
    public var headers: HTTPFields { request.headers }
    /// The body bytes, if any.
    public var body: Data? { request.body }
    /// The body parsed as JSON, if it is JSON.
    public var bodyJSON: JSONValue? {
        guard let body else { return nil }
        return try? JSONDecoder().decode(JSONValue.self, from: body)
    }
    /// The value of one decoded query parameter.
    public func queryValue(_ name: String) -> String? {
        queryItems.last { $0.name == name }?.value
    }

    public var description: String { "\(method) \(path)\(query.map { "?" + $0 } ?? "")" }
}

/// A `Transport` (SwiftCouch's network seam) that answers from a script instead of the network, recording every request.
///
/// Give it a list of responses (served in order; when the list runs out every further request
/// fails with a transport error that says so) or a closure that answers each request.
public final class SimulatedTransport: Transport, @unchecked Sendable {
    // @unchecked Sendable: mutable state is in `state`, guarded by `lock`.
    private struct State {
        var script: [SimulatedResponse]
        var recorded: [RecordedRequest] = []
    }
    private let lock = NSLock()
    private var state: State
    private let responder: (@Sendable (HTTPRequest) -> SimulatedResponse)?

    /// Answers requests with `responses`, one each, in order.
    public init(responses: [SimulatedResponse]) {
        state = State(script: responses)
        responder = nil
    }

    /// Answers every request by calling `responder`.
    public init(responder: @escaping @Sendable (HTTPRequest) -> SimulatedResponse) {
        state = State(script: [])
        self.responder = responder
    }

    /// Every request received so far, in order.
    public var requests: [RecordedRequest] {
        lock.lock()
        defer { lock.unlock() }
        return state.recorded
    }

    /// Adds responses to the end of the script.
    public func enqueue(_ responses: SimulatedResponse...) {
        lock.lock()
        state.script.append(contentsOf: responses)
        lock.unlock()
    }

    public func send(
        _ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void
    ) -> any Cancellable {
        lock.lock()
        state.recorded.append(RecordedRequest(request: request))
        let next: SimulatedResponse? = state.script.isEmpty ? nil : state.script.removeFirst()
        lock.unlock()
        let answer =
            responder?(request) ?? next
            ?? .failure(SimulationError("No simulated response left for \(request.method) \(request.path)"))
        let once = AnswerOnce()
        let work = DispatchWorkItem {
            guard once.claim() else { return }
            switch answer.outcome {
            case .response(let response): completion(.success(response))
            case .failure(let error): completion(.failure(error))
            }
        }
        let cancellable = SimulatedCancellable(work: work, once: once) {
            completion(.failure(URLError(.cancelled)))
        }
        if answer.delay > 0 {
            DispatchQueue.global().asyncAfter(deadline: .now() + answer.delay, execute: work)
        } else {
            DispatchQueue.global().async(execute: work)
        }
        return cancellable
    }
}

/// An error raised by the simulation itself (not by the simulated server).
public struct SimulationError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Lets exactly one of "answer" and "cancel" happen. `@unchecked Sendable`: the flag is behind a lock.
private final class AnswerOnce: @unchecked Sendable {
    private let lock = NSLock()
    private var claimed = false

    func claim() -> Bool {
        lock.lock()
        defer { lock.unlock() }
        let first = !claimed
        claimed = true
        return first
    }
}

/// `@unchecked Sendable`: `DispatchWorkItem.cancel()` is thread-safe; the rest is immutable.
private final class SimulatedCancellable: Cancellable, @unchecked Sendable {
    private let work: DispatchWorkItem
    private let once: AnswerOnce
    private let onCancel: @Sendable () -> Void

    init(work: DispatchWorkItem, once: AnswerOnce, onCancel: @escaping @Sendable () -> Void) {
        self.work = work
        self.once = once
        self.onCancel = onCancel
    }

    func cancel() {
        guard once.claim() else { return }
        work.cancel()
        onCancel()
    }
}

/// What a simulated run produced: the completion handler's result and the requests sent.
public struct SimulationResult<Response: Sendable>: Sendable {
    /// Exactly what the completion handler received.
    public var result: Result<CouchResponse<Response>, CouchError>
    /// Every request that reached the transport (login and retries included), in order.
    public var requests: [RecordedRequest]
    /// The last request sent (the one whose response became the result).
    public var request: RecordedRequest? { requests.last }
    /// The decoded value, or nil on failure.
    public var value: Response? { try? result.get().value }
    /// The error, or nil on success.
    public var error: CouchError? {
        if case .failure(let error) = result { return error }
        return nil
    }
}

/// Runs operations through the real SwiftCouch pipeline against canned responses: no network.
///
/// ```swift
/// let run = Simulation.run(GetDocumentOperation<Album>(database: "db", id: "a/b"),
///                          response: .json(200, #"{"_id":"a/b","_rev":"1-x","title":"Blue"}"#))
/// #expect(run.request?.path == "/db/a%2Fb")
/// #expect(run.value?.title == "Blue")
/// ```
public enum Simulation {
    /// The base URL simulated clients use.
    public static let serverURL = URL(string: "http://couchdb.invalid:5984")!

    /// Makes a client whose network is `transport`.
    public static func client(
        transport: SimulatedTransport, credentials: Credentials? = nil, configuration: Configuration = Configuration()
    ) -> CouchDBClient {
        var configuration = configuration
        configuration.transport = transport
        return CouchDBClient(url: serverURL, credentials: credentials, configuration: configuration)
    }

    /// Runs `operation` against `responses` (served in order: several are needed when the
    /// operation retries or logs in) and waits for the completion handler.
    public static func run<Op: CouchOperation>(
        _ operation: Op, responses: [SimulatedResponse], credentials: Credentials? = nil,
        configuration: Configuration = Configuration()
    ) -> SimulationResult<Op.Response> {
        let transport = SimulatedTransport(responses: responses)
        let client = client(transport: transport, credentials: credentials, configuration: configuration)
        let result = client.executeAndWait(operation)
        return SimulationResult(result: result, requests: transport.requests)
    }

    /// Runs `operation` against one canned response.
    public static func run<Op: CouchOperation>(
        _ operation: Op, response: SimulatedResponse, credentials: Credentials? = nil,
        configuration: Configuration = Configuration()
    ) -> SimulationResult<Op.Response> {
        run(operation, responses: [response], credentials: credentials, configuration: configuration)
    }

    /// Runs `operation` against a canned status, headers and body.
    public static func run<Op: CouchOperation>(
        _ operation: Op, status: Int, headers: HTTPFields = ["Content-Type": "application/json"], body: Data
    ) -> SimulationResult<Op.Response> {
        run(operation, response: SimulatedResponse(status: status, headers: headers, body: body))
    }
}
