import struct Foundation.Data

/// An incremental decoder of `Transfer-Encoding: chunked` bodies: feed it bytes as they arrive,
/// in pieces of any size, and take out data and, at the end, the trailer fields.
///
/// Chunk extensions are ignored. Lines may end with CRLF or a bare LF.
public struct HTTPChunkedDecoder: Sendable {
    /// What the decoder produced.
    public enum Event: Sendable, Equatable {
        /// Some body bytes (a chunk, or part of one).
        case data(Data)
        /// The last chunk and the trailer section have been read.
        case end(trailers: HTTPHeaders)
    }

    enum State: Sendable {
        case size
        case data(remaining: Int)
        case dataEnd
        case trailers
        case done
    }

    let limits: HTTPParserLimits
    var state: State = .size
    var total = 0
    private var buffer = ByteBuffer()

    public init(limits: HTTPParserLimits = HTTPParserLimits()) {
        self.limits = limits
    }

    /// Whether the final chunk and trailers have been read.
    public var isComplete: Bool {
        if case .done = state { return true }
        return false
    }

    /// Bytes fed but not yet decoded (after the end: bytes that follow the body).
    public var bufferedByteCount: Int { buffer.readableCount }

    /// Adds bytes received from the peer.
    public mutating func feed(_ data: Data) { buffer.append(data) }

    /// The next event, or nil when more bytes are needed (or the body is complete).
    public mutating func next() throws -> Event? {
        var local = ByteBuffer()
        swap(&local, &buffer)
        defer { swap(&local, &buffer) }
        return try next(from: &local)
    }

    /// The next event decoded from `buffer`, consuming what it uses.
    mutating func next(from buffer: inout ByteBuffer) throws -> Event? {
        while true {
            switch state {
            case .done:
                return nil
            case .size:
                guard let lf = buffer.firstIndex(of: HTTPHeadParser.lf) else {
                    if buffer.readableCount > limits.maxChunkLineSize {
                        throw HTTPWireError.invalidChunk("chunk-size line too long")
                    }
                    return nil
                }
                if lf > limits.maxChunkLineSize { throw HTTPWireError.invalidChunk("chunk-size line too long") }
                let line = Array(buffer.peek(lf))
                buffer.consume(lf + 1)
                let size = try Self.parseSizeLine(line)
                if size > limits.maxBodySize - total { throw HTTPWireError.bodyTooLarge(limit: limits.maxBodySize) }
                total += size
                state = size == 0 ? .trailers : .data(remaining: size)
            case .data(let remaining):
                guard buffer.readableCount > 0 else { return nil }
                let n = min(remaining, buffer.readableCount)
                let data = buffer.take(n)
                state = remaining - n == 0 ? .dataEnd : .data(remaining: remaining - n)
                return .data(data)
            case .dataEnd:
                guard buffer.readableCount >= 1 else { return nil }
                if buffer[0] == HTTPHeadParser.lf {
                    buffer.consume(1)
                } else if buffer[0] == HTTPHeadParser.cr {
                    guard buffer.readableCount >= 2 else { return nil }
                    guard buffer[1] == HTTPHeadParser.lf else {
                        throw HTTPWireError.invalidChunk("missing CRLF after chunk data")
                    }
                    buffer.consume(2)
                } else {
                    throw HTTPWireError.invalidChunk("missing CRLF after chunk data")
                }
                state = .size
            case .trailers:
                var scanner = HeadScanner()
                let bare: Int?
                // An empty trailer section is just a line ending.
                if buffer.readableCount >= 1, buffer[0] == HTTPHeadParser.lf {
                    bare = 1
                } else if buffer.readableCount >= 2, buffer[0] == HTTPHeadParser.cr, buffer[1] == HTTPHeadParser.lf {
                    bare = 2
                } else {
                    bare = nil
                }
                if let bare {
                    buffer.consume(bare)
                    state = .done
                    return .end(trailers: HTTPHeaders())
                }
                guard let length = try scanner.scan(buffer, limit: limits.maxHeadSize) else { return nil }
                let bytes = buffer.peek(length)
                let trailers = try HTTPHeadParser.parseFieldLines(bytes, limits: limits)
                buffer.consume(length)
                state = .done
                return .end(trailers: trailers)
            }
        }
    }

    static func parseSizeLine(_ line: [UInt8]) throws -> Int {
        var bytes = line[...]
        if bytes.last == HTTPHeadParser.cr { bytes = bytes.dropLast() }
        if let semicolon = bytes.firstIndex(of: UInt8(ascii: ";")) { bytes = bytes[..<semicolon] }
        while let l = bytes.last, l == HTTPHeadParser.space || l == HTTPHeadParser.tab { bytes = bytes.dropLast() }
        guard !bytes.isEmpty else { throw HTTPWireError.invalidChunk("empty chunk size") }
        guard bytes.count <= 15 else { throw HTTPWireError.invalidChunk("chunk size too large") }
        var size = 0
        for b in bytes {
            let digit: Int
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = Int(b - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = Int(b - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = Int(b - UInt8(ascii: "A") + 10)
            default: throw HTTPWireError.invalidChunk("invalid chunk size \(HTTPHeadParser.text(line[...]))")
            }
            size = size * 16 + digit
        }
        return size
    }
}
