import struct Foundation.Data

/// Writes HTTP/1.x heads and chunks as bytes. Lines end with CRLF. Header fields are written in
/// order, as given; a CR, LF or NUL inside a name or value is replaced by a space so that a value
/// can never start a new field.
public enum HTTPSerializer {
    /// `METHOD target HTTP/1.1`, the fields, and the empty line.
    public static func serialize(_ head: HTTPRequestHead) -> Data {
        var out = "\(sanitize(head.method)) \(sanitize(head.target)) \(head.version)\r\n"
        appendFields(head.headers, to: &out)
        out += "\r\n"
        return Data(out.utf8)
    }

    /// `HTTP/1.1 status reason`, the fields, and the empty line.
    public static func serialize(_ head: HTTPResponseHead) -> Data {
        var out = "\(head.version) \(head.status) \(sanitize(head.reason))\r\n"
        appendFields(head.headers, to: &out)
        out += "\r\n"
        return Data(out.utf8)
    }

    /// One chunk of a chunked body: size in hex, CRLF, the bytes, CRLF. Empty data gives no bytes
    /// at all (an empty chunk would end the body; use `lastChunk`).
    public static func chunk(_ data: Data) -> Data {
        guard !data.isEmpty else { return Data() }
        var out = Data(String(data.count, radix: 16).utf8)
        out.append(contentsOf: [0x0D, 0x0A])
        out.append(data)
        out.append(contentsOf: [0x0D, 0x0A])
        return out
    }

    /// The chunk header alone (`size CRLF`), for writing a large chunk's data without copying it.
    public static func chunkHeader(size: Int) -> Data {
        Data((String(size, radix: 16) + "\r\n").utf8)
    }

    /// The end of a chunked body: the zero-size chunk, any trailer fields, and the empty line.
    public static func lastChunk(trailers: HTTPHeaders = HTTPHeaders()) -> Data {
        var out = "0\r\n"
        appendFields(trailers, to: &out)
        out += "\r\n"
        return Data(out.utf8)
    }

    static func appendFields(_ headers: HTTPHeaders, to out: inout String) {
        for field in headers {
            out += sanitize(field.name)
            out += ": "
            out += sanitize(field.value)
            out += "\r\n"
        }
    }

    static func sanitize(_ s: String) -> String {
        guard s.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0 }) else { return s }
        // Byte by byte: "\r\n" is one Character but two bytes, and each becomes a space.
        return String(decoding: s.utf8.map { $0 == 0x0D || $0 == 0x0A || $0 == 0 ? 0x20 : $0 }, as: UTF8.self)
    }
}

extension HTTPRequestHead {
    /// The head as bytes (see `HTTPSerializer`).
    public var serialized: Data { HTTPSerializer.serialize(self) }
}

extension HTTPResponseHead {
    /// The head as bytes (see `HTTPSerializer`).
    public var serialized: Data { HTTPSerializer.serialize(self) }
}
