import CouchStore
import Foundation
import SwiftCouch

// The one file of SwiftCouchStore that calls into the engine (CouchStore): opening and closing it,
// answering requests, reading its index of conflicted documents. Everything else goes through
// SwiftCouch's pipeline, which hands its requests to `EngineTransport`.

/// An open engine over one directory.
///
/// The engine does no authentication: every request is answered as the app's own, an admin's
/// (``UserContext/admin``). Headers the session adds for a server (`Authorization`, `Cookie`)
/// are removed before the engine sees them.
final class EngineConnection: Sendable {
    private let engine: CouchEngine
    /// A queue for one request, where it may wait inside the engine (a long-poll or continuous
    /// feed waits in `handle`, a paused stream in its writer): a serial queue of its own, on
    /// Dispatch's overcommit threads, never on the threads Swift concurrency runs tasks on
    /// (``blockingWorkQueue(_:)`` says why a shared concurrent queue is not that).
    func callQueue() -> DispatchQueue { blockingWorkQueue("SwiftCouchStore.engine.call") }

    /// Opens the engine keeping its data in `directory`.
    init(directory: URL) throws(CouchError) {
        var options = CouchEngine.Options()
        options.dataDirectory = directory
        do {
            engine = try CouchEngine(options: options)
        } catch {
            throw CouchError(
                kind: .transport, message: "Could not open the local store at \(directory.path): \(error)",
                underlying: error)
        }
    }

    /// Answers one request (blocking: call it on a ``callQueue()``); `source`, when given, is the body the engine reads as it
    /// goes (an attachment upload from a file), `body` is empty then.
    func handle(_ request: HTTPRequest, body: Data, source: (any RequestBodySource)? = nil) -> ServerResponse {
        var headers = request.headers
        headers.remove("Authorization")
        headers.remove("Cookie")
        // The pipeline never adds `Accept-Encoding` (a network transport does, when it sends): one
        // here was named by the operation itself, which then wants the body as the engine stores it
        // (a gzip-stored attachment's encoded bytes, as a replicator copies them), exactly as the
        // socket transport passes such a body through undecoded.
        var serverRequest = ServerRequest(
            method: request.method.rawValue, rawPath: request.path, rawQuery: request.query, headers: headers,
            body: body)
        serverRequest.bodySource = source
        return engine.handle(serverRequest, user: .admin)
    }

    /// The ids of the conflicted documents of `database`, from the engine's index; nil when there is
    /// no such database.
    func conflictedDocumentIDs(inDatabase database: String) -> [String]? {
        engine.conflictedDocumentIDs(inDatabase: database)
    }

    /// Closes the engine: requests still waiting in it (feeds) end, later ones are answered 503.
    func close() { engine.close() }
}

/// SwiftCouch's network seam, answered in process by the engine: each request is turned into the
/// engine's request value, answered by `CouchEngine.handle` on the connection's queue, and its
/// response (whole or chunked) handed back as the pipeline expects it.
struct EngineTransport: Transport {
    let connection: EngineConnection

    func send(_ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void)
        -> any Cancellable
    {
        let call = EngineCall()
        let limit = request.maximumResponseBodySize
        call.onFinish { completion($0) }
        connection.callQueue().async { [connection] in
            guard !call.isCancelled else { return }
            let body: Data
            var source: (any RequestBodySource)?
            switch Self.requestBody(request) {
            case .success(let (data, streamed)): (body, source) = (data, streamed)
            case .failure(let error): return call.finish(.failure(error))
            }
            let response = connection.handle(request, body: body, source: source)
            var data = Data()
            switch response.body {
            case .empty: break
            case .data(let bytes): data = bytes
            case .stream(let produce):
                let collector = ChunkCollector(call: call) { chunk in
                    data.append(chunk)
                    return limit.map { data.count <= $0 } ?? true
                }
                produce(collector)
                if collector.aborted.value { return call.finish(.failure(Self.aborted(received: data.count))) }
            }
            if let limit, data.count > limit {
                return call.finish(.failure(Self.tooLarge(data.count, limit: limit)))
            }
            if let error = Self.cutShort(response, received: data.count) { return call.finish(.failure(error)) }
            call.finish(.success(HTTPResponse(statusCode: response.status, headers: response.headers, body: data)))
        }
        return call
    }

    func stream(_ request: HTTPRequest, receiver: any StreamReceiver) -> any StreamingTask {
        let call = EngineCall()
        call.onFinish { result in
            if case .failure(let error) = result {
                receiver.complete(error: error)
            } else {
                receiver.complete(error: nil)
            }
        }
        connection.callQueue().async { [connection] in
            guard !call.isCancelled else { return }
            let body: Data
            var source: (any RequestBodySource)?
            switch Self.requestBody(request) {
            case .success(let (data, streamed)): (body, source) = (data, streamed)
            case .failure(let error): return call.finish(.failure(error))
            }
            let response = connection.handle(request, body: body, source: source)
            guard call.waitWhilePaused() else { return }
            receiver.receive(head: HTTPResponse(statusCode: response.status, headers: response.headers))
            switch response.body {
            case .empty:
                break
            case .data(let bytes):
                // Handed over in pieces, so a download writes its file as it goes and can pause.
                var offset = 0
                while offset < bytes.count {
                    guard call.waitWhilePaused() else { return }
                    let end = min(offset + Self.pieceSize, bytes.count)
                    receiver.receive(chunk: bytes.subdata(in: offset..<end))
                    offset = end
                }
            case .stream(let produce):
                var received = 0
                let collector = ChunkCollector(call: call) { chunk in
                    received += chunk.count
                    receiver.receive(chunk: chunk)
                    return true
                }
                produce(collector)
                if collector.aborted.value { return call.finish(.failure(Self.aborted(received: received))) }
                if let error = Self.cutShort(response, received: received) { return call.finish(.failure(error)) }
            }
            call.finish(.success(HTTPResponse(statusCode: response.status)))
        }
        return call
    }

    /// The size of the pieces a whole body is streamed in.
    static let pieceSize = 256 * 1024

    /// The request's body: in memory, or read from its file or stream. An attachment upload's file or stream is
    /// handed to the engine as a body source, read as the engine writes it to the database's file; any other
    /// request's body is read whole here.
    static func requestBody(_ request: HTTPRequest) -> Result<(Data, (any RequestBodySource)?), any Error> {
        if let body = request.body { return .success((body, nil)) }
        guard let streamed = request.streamedBody else { return .success((Data(), nil)) }
        guard let stream = streamed.makeInputStream() else {
            return .failure(
                CouchError(kind: .transport, message: "The request's body stream was already read; it cannot be sent."))
        }
        let segments = request.path.split(separator: "/").map { $0.removingPercentEncoding ?? String($0) }
        if ServerRequest.streamsBody(
            method: request.method.rawValue, pathSegments: segments, contentType: request.headers["Content-Type"])
        {
            return .success((Data(), InputStreamBodySource(stream, length: streamed.length)))
        }
        stream.open()
        defer { stream.close() }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = stream.read(&buffer, maxLength: buffer.count)
            if count < 0 {
                return .failure(
                    CouchError(
                        kind: .transport,
                        message: "Reading the request's body failed: \(stream.streamError.map { "\($0)" } ?? "")",
                        underlying: stream.streamError))
            }
            if count == 0 { break }
            data.append(contentsOf: buffer[0..<count])
        }
        return .success((data, nil))
    }

    /// The error for a streamed body that ended short of its `Content-Length` (a stored attachment whose chunk
    /// could not be read after the answer began), as a cut-off HTTP body is an error; nil when it is whole.
    static func cutShort(_ response: ServerResponse, received: Int) -> CouchError? {
        guard case .stream = response.body, let declared = response.headers["Content-Length"].flatMap({ Int($0) }),
            received < declared
        else { return nil }
        return CouchError(
            kind: .transport,
            message: "The response body ended after \(received) of its \(declared) bytes (the engine could not read"
                + " the rest).")
    }

    /// The error for a streamed body its producer cut short (a stored document it could not read once the
    /// answer had begun), as an HTTP client sees a chunked body that ends without its last chunk.
    static func aborted(received: Int) -> CouchError {
        CouchError(
            kind: .transport,
            message: "The response body was cut short after \(received) bytes (the engine could not read the rest).")
    }

    static func tooLarge(_ size: Int, limit: Int) -> URLError {
        URLError(
            .dataLengthExceedsMaximum,
            userInfo: [
                NSLocalizedDescriptionKey:
                    "The response body (at least \(size) bytes) exceeds the limit of \(limit) bytes"
                    + " (Configuration.maximumResponseBodySize)."
            ])
    }
}

/// A request body read from an `InputStream` (a file being uploaded) as the engine asks for it, which must deliver
/// exactly its declared length: a stream that ends short of it, or goes past it, is an error the engine answers
/// without writing anything.
final class InputStreamBodySource: RequestBodySource, @unchecked Sendable {
    // @unchecked Sendable: every member is touched only under `lock`.
    private let stream: InputStream
    let declaredLength: Int?
    private let lock = NSLock()
    private var buffer = [UInt8](repeating: 0, count: 256 * 1024)
    private var received = 0
    private var opened = false
    private var done = false

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    init(_ stream: InputStream, length: Int64) {
        self.stream = stream
        self.declaredLength = length >= 0 ? Int(length) : nil
    }

    deinit {
        if opened { stream.close() }
    }

    func read(upTo maximum: Int) throws -> Data? {
        lock.lock()
        defer { lock.unlock() }
        guard !done else { return nil }
        if !opened {
            stream.open()
            opened = true
        }
        let count = stream.read(&buffer, maxLength: min(max(maximum, 1), buffer.count))
        if count < 0 {
            done = true
            throw Failure(description: "reading the body failed: \(stream.streamError.map { "\($0)" } ?? "")")
        }
        if count == 0 {
            done = true
            if let declaredLength, received < declaredLength {
                throw Failure(description: "the body ended after \(received) of its \(declaredLength) bytes")
            }
            return nil
        }
        received += count
        if let declaredLength, received > declaredLength {
            done = true
            throw Failure(description: "the body is longer than its declared \(declaredLength) bytes")
        }
        return Data(buffer[0..<count])
    }
}

/// Writes a streamed response's chunks for the engine, stopping once the call is cancelled (or the
/// consumer says so).
private struct ChunkCollector: ChunkWriter, @unchecked Sendable {
    // @unchecked: `deliver` runs only on the one thread the engine's producer runs on.
    let call: EngineCall
    let deliver: (Data) -> Bool
    /// Set when the producer cut the body short.
    let aborted = Flag()

    final class Flag: @unchecked Sendable {
        // @unchecked: set and read on the producer's one thread.
        var value = false
    }

    func write(_ data: Data) -> Bool {
        guard call.waitWhilePaused() else { return false }
        return deliver(data)
    }

    func abort() { aborted.value = true }
}

/// One request in the engine: cancelled at most once, finished exactly once, paused and resumed by
/// the stream's consumer.
final class EngineCall: StreamingTask, @unchecked Sendable {
    // @unchecked: every member is only touched under `condition`.
    private let condition = NSCondition()
    private var cancelled = false
    private var paused = false
    private var finished = false
    private var completion: (@Sendable (Result<HTTPResponse, any Error>) -> Void)?

    func onFinish(_ completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void) {
        condition.withLock { self.completion = completion }
    }

    var isCancelled: Bool { condition.withLock { cancelled } }

    /// Waits while the consumer has paused; false once the call is cancelled.
    func waitWhilePaused() -> Bool {
        condition.withLock {
            while paused && !cancelled { condition.wait() }
            return !cancelled
        }
    }

    /// Delivers the result, once (a cancelled call has already delivered its error).
    func finish(_ result: Result<HTTPResponse, any Error>) {
        let deliver = condition.withLock { () -> (@Sendable (Result<HTTPResponse, any Error>) -> Void)? in
            guard !finished else { return nil }
            finished = true
            defer { completion = nil }
            return completion
        }
        deliver?(result)
    }

    func cancel() {
        condition.withLock {
            cancelled = true
            condition.broadcast()
        }
        finish(.failure(URLError(.cancelled)))
    }

    func pause() { condition.withLock { paused = true } }

    func resume() {
        condition.withLock {
            paused = false
            condition.broadcast()
        }
    }
}
