import Foundation

/// Takes part in every request the session sends: the public extension point of
/// ``InterceptableSession``, narrow by design.
///
/// An adapter may change the **headers** of a request before **each attempt** — add a
/// correlation id, or put in a token your app got elsewhere (`try await myAuth.token()`). It runs
/// after the built-in authentication has decided the attempt may go (after the login, when one is
/// needed) and just before the transport. It cannot change the method, URL or body, and it cannot
/// remove or replace what the built-in authentication sets (the `Cookie` of cookie authentication,
/// the `Authorization` of Basic, IAM and bearer authentication): those are applied again after
/// every adapter. So single-flight login, proactive renewal, 429 backoff and the rule never to
/// resend what could be duplicated hold whatever an adapter does. With no credentials configured,
/// an adapter may set `Authorization` itself (custom authentication).
///
/// Adapters run in the order of ``Configuration/adapters``, on no particular thread, never on the
/// session's queue (which is not blocked while they run). The login request (`POST /_session`, the
/// IAM token request) carries credentials and is not adapted. An adapter that throws fails the
/// operation with a ``CouchError`` of kind `.adapter`; that attempt was not sent. An adapter that
/// does not return within the request's timeout fails it the same way. Header values are checked
/// like every header (no CR, LF or NUL), and the framing headers (`Host`, `Content-Length`,
/// `Transfer-Encoding`, `Connection`) are refused.
///
/// ```swift
/// struct CorrelationID: RequestAdapter {
///     func adapt(_ headers: inout HTTPFields, context: RequestAdapterContext) async throws {
///         headers["X-Correlation-ID"] = UUID().uuidString
///     }
/// }
/// ```
public protocol RequestAdapter: Sendable {
    /// Changes the headers of one attempt of a request.
    /// - Parameters:
    ///   - headers: the attempt's headers, to change in place.
    ///   - context: which attempt of which request this is.
    func adapt(_ headers: inout HTTPFields, context: RequestAdapterContext) async throws
}

/// What a ``RequestAdapter`` knows about the attempt it adapts.
public struct RequestAdapterContext: Sendable {
    /// 1 for the first attempt, 2 for the first retry (after a 429, a renewed session, a dropped
    /// connection), and so on.
    public var attempt: Int
    /// Whether sending the request more than once is harmless.
    public var isIdempotent: Bool
    /// The HTTP method.
    public var method: HTTPMethod
    /// The percent-encoded path, without the query.
    public var path: String
    /// The operation's type name (`GetDocumentOperation<Album>`), nil for requests made without an
    /// operation.
    public var operation: String?

    public init(attempt: Int, isIdempotent: Bool, method: HTTPMethod, path: String, operation: String? = nil) {
        self.attempt = attempt
        self.isIdempotent = isIdempotent
        self.method = method
        self.path = path
        self.operation = operation
    }
}

/// Runs the adapters of a configuration over one attempt's headers (see ``RequestAdapter``).
enum AdapterChain {
    /// Headers an adapter may not set: they frame the message, which the transport owns.
    static let framingHeaders = ["Host", "Content-Length", "Transfer-Encoding", "Connection"]

    /// The adapted headers, with the built-in authentication's headers (`protected`) put back and
    /// every value checked; throws a `.adapter` ``CouchError`` saying what went wrong.
    static func adapt(
        _ headers: HTTPFields, adapters: [any RequestAdapter], context: RequestAdapterContext, protected: [String]
    ) async throws(CouchError) -> HTTPFields {
        var adapted = headers
        for adapter in adapters {
            let before = adapted
            do {
                try await adapter.adapt(&adapted, context: context)
            } catch {
                throw failure("The request adapter \(type(of: adapter)) failed: \(error)", context, underlying: error)
            }
            for name in framingHeaders where adapted[name] != before[name] {
                throw failure("The request adapter \(type(of: adapter)) may not set the \(name) header.", context)
            }
        }
        for name in protected { adapted[name] = headers[name] }
        for field in adapted {
            do {
                try CouchValidation.validateHeader(name: field.name, value: field.value)
            } catch {
                throw failure("A request adapter set an invalid header: \(error.message)", context)
            }
        }
        return adapted
    }

    static func failure(_ message: String, _ context: RequestAdapterContext, underlying: (any Error)? = nil)
        -> CouchError
    {
        CouchError(
            kind: .adapter, message: message + " This attempt was not sent.", method: context.method.rawValue,
            path: context.path, underlying: underlying)
    }
}

/// Runs adapters on Dispatch queues of their own instead of Swift's cooperative thread pool, so
/// that callers blocking pool threads (``CouchDBClient/executeAndWait(_:)`` called from async
/// code, say) cannot starve the adapters their own requests wait for, and an adapter that blocks
/// cannot starve the pool. Each job gets a ``blockingWorkQueue(_:)``: a shared concurrent queue
/// would run on the pool's own threads on Linux.
@available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, *)
final class AdapterExecutor: TaskExecutor {
    static let shared = AdapterExecutor()

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        blockingWorkQueue("SwiftCouch.adapters").async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

extension AdapterChain {
    /// Starts `work` on the adapters' own executor where the platform has task executors.
    static func start(_ work: @escaping @Sendable () async -> Void) {
        if #available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, *) {
            Task(executorPreference: AdapterExecutor.shared) { await work() }
        } else {
            Task { await work() }
        }
    }
}
