import struct Foundation.Data

/// One piece of an HTTP message as a decoder produces it: the head, then zero or more pieces of
/// body, then the end (with the trailer fields of a chunked body, empty otherwise).
public enum HTTPMessagePart<Head: Sendable>: Sendable {
    case head(Head)
    case body(Data)
    case end(trailers: HTTPHeaders)
}

extension HTTPMessagePart: Equatable where Head: Equatable {}

/// The body-reading state machine shared by the request and the response decoder.
struct MessageDecoderCore: Sendable {
    enum BodyState: Sendable {
        case awaitingHead
        case fixed(remaining: Int)
        case chunked(HTTPChunkedDecoder)
        case untilClose
        case endPending
    }

    enum Step {
        /// A head of this many bytes is at the front of `buffer`.
        case head(length: Int)
        case body(Data)
        case end(trailers: HTTPHeaders)
        case needMore
    }

    let limits: HTTPParserLimits
    let skipsLeadingEmptyLines: Bool
    var buffer = ByteBuffer()
    var scanner = HeadScanner()
    var state: BodyState = .awaitingHead
    var endOfStream = false
    var bodyBytes = 0

    init(limits: HTTPParserLimits, skipsLeadingEmptyLines: Bool) {
        self.limits = limits
        self.skipsLeadingEmptyLines = skipsLeadingEmptyLines
    }

    var isAtMessageBoundary: Bool {
        if case .awaitingHead = state { return true }
        return false
    }

    mutating func step() throws -> Step {
        switch state {
        case .awaitingHead:
            if skipsLeadingEmptyLines {
                while buffer.readableCount > 0 {
                    if buffer[0] == HTTPHeadParser.lf {
                        buffer.consume(1)
                        scanner.reset()
                    } else if buffer[0] == HTTPHeadParser.cr {
                        guard buffer.readableCount >= 2 else { return .needMore }
                        guard buffer[1] == HTTPHeadParser.lf else { break }
                        buffer.consume(2)
                        scanner.reset()
                    } else {
                        break
                    }
                }
            }
            guard let length = try scanner.scan(buffer, limit: limits.maxHeadSize) else {
                if endOfStream, buffer.readableCount > 0 { throw HTTPWireError.unexpectedEndOfStream }
                return .needMore
            }
            return .head(length: length)
        case .fixed(let remaining):
            if remaining == 0 {
                state = .awaitingHead
                return .end(trailers: HTTPHeaders())
            }
            guard buffer.readableCount > 0 else {
                if endOfStream { throw HTTPWireError.unexpectedEndOfStream }
                return .needMore
            }
            let n = min(remaining, buffer.readableCount)
            state = .fixed(remaining: remaining - n)
            return .body(buffer.take(n))
        case .chunked(var decoder):
            let event = try decoder.next(from: &buffer)
            state = .chunked(decoder)
            switch event {
            case .data(let data)?:
                return .body(data)
            case .end(let trailers)?:
                state = .awaitingHead
                return .end(trailers: trailers)
            case nil:
                if endOfStream { throw HTTPWireError.unexpectedEndOfStream }
                return .needMore
            }
        case .untilClose:
            if buffer.readableCount > 0 {
                let n = buffer.readableCount
                if n > limits.maxBodySize - bodyBytes { throw HTTPWireError.bodyTooLarge(limit: limits.maxBodySize) }
                bodyBytes += n
                return .body(buffer.take(n))
            }
            if endOfStream {
                state = .awaitingHead
                return .end(trailers: HTTPHeaders())
            }
            return .needMore
        case .endPending:
            state = .awaitingHead
            return .end(trailers: HTTPHeaders())
        }
    }

    /// Consumes the head just parsed and prepares to read a body framed as `framing`.
    mutating func startBody(headLength: Int, framing: HTTPBodyFraming) throws {
        buffer.consume(headLength)
        bodyBytes = 0
        switch framing {
        case .none:
            state = .endPending
        case .contentLength(let n):
            if n > limits.maxBodySize { throw HTTPWireError.bodyTooLarge(limit: limits.maxBodySize) }
            state = n == 0 ? .endPending : .fixed(remaining: n)
        case .chunked:
            state = .chunked(HTTPChunkedDecoder(limits: limits))
        case .untilClose:
            state = .untilClose
        }
    }
}

/// An incremental decoder of HTTP/1.x requests (a server reads with it). Feed bytes as they arrive,
/// split anywhere, then call `next()` until it returns nil (it needs more bytes). Pipelined requests
/// come out one after another. Empty lines before a request line are skipped.
public struct HTTPRequestDecoder: Sendable {
    public typealias Part = HTTPMessagePart<HTTPRequestHead>

    var core: MessageDecoderCore

    public init(limits: HTTPParserLimits = HTTPParserLimits()) {
        core = MessageDecoderCore(limits: limits, skipsLeadingEmptyLines: true)
    }

    /// Adds bytes received from the peer.
    public mutating func feed(_ data: Data) { core.buffer.append(data) }

    /// Adds bytes received from the peer.
    public mutating func feed(_ bytes: UnsafeRawBufferPointer) { core.buffer.append(bytes) }

    /// Tells the decoder the peer closed its side: an incomplete message then throws `unexpectedEndOfStream`.
    public mutating func finish() { core.endOfStream = true }

    /// Bytes fed and not yet decoded.
    public var bufferedByteCount: Int { core.buffer.readableCount }

    /// True between messages (before a head, after an end).
    public var isAtMessageBoundary: Bool { core.isAtMessageBoundary }

    /// The framing of the body of the request whose head was returned last.
    public private(set) var currentFraming: HTTPBodyFraming = .none

    /// The next part, or nil when more bytes are needed.
    public mutating func next() throws -> Part? {
        switch try core.step() {
        case .needMore: return nil
        case .body(let data): return .body(data)
        case .end(let trailers): return .end(trailers: trailers)
        case .head(let length):
            let head = try HTTPHeadParser.parseRequestHead(core.buffer.peek(length), limits: core.limits)
            let framing = try HTTPBodyFraming.ofRequest(head)
            try core.startBody(headLength: length, framing: framing)
            currentFraming = framing
            return .head(head)
        }
    }
}

/// An incremental decoder of HTTP/1.x responses (a client reads with it). Before each response,
/// tell it the method of the request it answers (`expectResponse(to:)`, queued for pipelining) so
/// that a response to `HEAD` is read without a body. Interim 1xx responses come out as a head and an
/// end of their own, followed by the final response.
public struct HTTPResponseDecoder: Sendable {
    public typealias Part = HTTPMessagePart<HTTPResponseHead>

    var core: MessageDecoderCore
    var methods: [String] = []
    /// The fields of the last head, whose strings the next head reuses where its bytes are the same.
    var previousFields: [HTTPHeaders.Pair] = []

    public init(limits: HTTPParserLimits = HTTPParserLimits()) {
        core = MessageDecoderCore(limits: limits, skipsLeadingEmptyLines: false)
    }

    /// Queues the method of a request sent, so the matching response is framed correctly. Without
    /// one, a response is framed as an answer to `GET`.
    public mutating func expectResponse(to method: String) { methods.append(method) }

    /// Adds bytes received from the peer.
    public mutating func feed(_ data: Data) { core.buffer.append(data) }

    /// Adds bytes received from the peer.
    public mutating func feed(_ bytes: UnsafeRawBufferPointer) { core.buffer.append(bytes) }

    /// Tells the decoder the peer closed: a body framed by the close ends, anything else incomplete throws.
    public mutating func finish() { core.endOfStream = true }

    /// Bytes fed and not yet decoded.
    public var bufferedByteCount: Int { core.buffer.readableCount }

    /// True between messages (before a head, after an end).
    public var isAtMessageBoundary: Bool { core.isAtMessageBoundary }

    /// The framing of the body of the response whose head was returned last.
    public private(set) var currentFraming: HTTPBodyFraming = .none

    /// The next part, or nil when more bytes are needed.
    public mutating func next() throws -> Part? {
        switch try core.step() {
        case .needMore: return nil
        case .body(let data): return .body(data)
        case .end(let trailers): return .end(trailers: trailers)
        case .head(let length):
            let head = try core.buffer.peek(length).withUnsafeBufferPointer {
                try HTTPHeadParser.parseResponseHead(buffer: $0, limits: core.limits, reusing: previousFields)
            }
            previousFields = head.headers.pairs
            let method: String
            if head.isInformational && head.status != 101 {
                method = methods.first ?? "GET"
            } else {
                method = methods.isEmpty ? "GET" : methods.removeFirst()
            }
            let framing = try HTTPBodyFraming.ofResponse(head, requestMethod: method)
            try core.startBody(headLength: length, framing: framing)
            currentFraming = framing
            return .head(head)
        }
    }
}
