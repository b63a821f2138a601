import struct Foundation.Data

/// Writes HTTP/1.x heads and chunks as bytes. Lines end with CRLF. Header fields are written in
/// order, as given; a CR, LF or NUL inside a name or value is replaced by a space so that a value
/// can never start a new field.
public enum HTTPSerializer {
    /// `METHOD target HTTP/1.1`, the fields, and the empty line.
    public static func serialize(_ head: HTTPRequestHead) -> Data {
        var out: [UInt8] = []
        appendRequestLine(method: head.method, target: head.target, version: head.version, to: &out)
        appendFieldsAndEnd(head.headers, to: &out)
        return Data(out)
    }

    /// Appends `METHOD target HTTP/x.y` and its CRLF to `out`. A head written straight into a
    /// byte buffer with this, ``appendField(name:value:to:)`` and a final CRLF has the bytes
    /// `serialize(_:)` gives for it.
    public static func appendRequestLine(method: String, target: String, version: HTTPVersion, to out: inout [UInt8]) {
        appendSanitized(method, to: &out)
        out.append(0x20)
        appendSanitized(target, to: &out)
        out.append(0x20)
        out += version.description.utf8
        out += [0x0D, 0x0A]
    }

    /// `HTTP/1.1 status reason`, the fields, and the empty line.
    public static func serialize(_ head: HTTPResponseHead) -> Data {
        var out: [UInt8] = []
        out += head.version.description.utf8
        out.append(0x20)
        out += String(head.status).utf8
        out.append(0x20)
        appendSanitized(head.reason, to: &out)
        out += [0x0D, 0x0A]
        appendFieldsAndEnd(head.headers, to: &out)
        return Data(out)
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
        var out: [UInt8] = [0x30, 0x0D, 0x0A]
        appendFieldsAndEnd(trailers, to: &out)
        return Data(out)
    }

    /// Appends `name: value` and its CRLF to `out` (CR, LF and NUL become spaces).
    public static func appendField(name: String, value: String, to out: inout [UInt8]) {
        appendSanitized(name, to: &out)
        out.append(0x3A)
        out.append(0x20)
        appendSanitized(value, to: &out)
        out.append(0x0D)
        out.append(0x0A)
    }

    /// Appends every field, then the empty line that ends a head or a trailer.
    static func appendFieldsAndEnd(_ headers: HTTPHeaders, to out: inout [UInt8]) {
        for field in headers { appendField(name: field.name, value: field.value, to: &out) }
        out += [0x0D, 0x0A]
    }

    /// Appends `s`'s bytes, a CR, LF or NUL written as a space (byte by byte: "\r\n" is one
    /// `Character` but two bytes, and each becomes a space).
    private static func appendSanitized(_ s: String, to out: inout [UInt8]) {
        // A native string's bytes are copied at once and checked in place (every request head
        // goes through here, field by field); a bridged one is read through its view.
        let copied: Void? = s.utf8.withContiguousStorageIfAvailable { bytes in
            let start = out.endIndex
            out.append(contentsOf: bytes)
            guard bytes.contains(where: isForbiddenInHead) else { return }
            for index in start..<out.endIndex where isForbiddenInHead(out[index]) { out[index] = 0x20 }
        }
        if copied != nil { return }
        out += s.utf8.map { isForbiddenInHead($0) ? 0x20 : $0 }
    }

    /// CR, LF and NUL: bytes that would end a line of the head (or confuse a peer) inside a value.
    @inline(__always)
    private static func isForbiddenInHead(_ byte: UInt8) -> Bool { byte == 0x0D || byte == 0x0A || byte == 0 }
}

extension HTTPRequestHead {
    /// The head as bytes (see `HTTPSerializer`).
    public var serialized: Data { HTTPSerializer.serialize(self) }
}

extension HTTPResponseHead {
    /// The head as bytes (see `HTTPSerializer`).
    public var serialized: Data { HTTPSerializer.serialize(self) }
}
