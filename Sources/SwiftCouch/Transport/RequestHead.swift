import Foundation
import HTTPWire

/// How a request body is delimited on the wire.
enum RequestBodyFraming: Equatable, Sendable {
    /// No body and no `Content-Length` (GET, HEAD, DELETE without a body).
    case none
    /// `Content-Length: n` and exactly `n` bytes.
    case contentLength(Int64)
    /// `Transfer-Encoding: chunked` (a streamed body of unknown length).
    case chunked

    /// The framing of `request`'s body: its length when known (a `Data` body, a file, a stream
    /// with a declared length), chunked for a stream of unknown (negative) length, and
    /// `Content-Length: 0` for a `POST`, `PUT` or `PATCH` without a body.
    static func of(_ request: HTTPRequest) -> RequestBodyFraming {
        if let streamed = request.streamedBody {
            return streamed.length >= 0 ? .contentLength(streamed.length) : .chunked
        }
        if let body = request.body { return .contentLength(Int64(body.count)) }
        switch request.method.rawValue {
        case "POST", "PUT", "PATCH": return .contentLength(0)
        default: return .none
        }
    }
}

/// Builds the bytes of an HTTP/1.1 request head in one buffer (one write), from the request's own
/// fields plus `Host`, the body framing and `Accept-Encoding`.
enum RequestHead {
    /// The origin-form target of `request`: from the encoded path and query it was built from
    /// when it has them (every request the pipeline prepares), else taken from its URL.
    static func target(of request: HTTPRequest) -> String {
        guard let encoded = request.encodedTarget else { return target(of: request.url) }
        return encoded.query.map { encoded.path + "?" + $0 } ?? encoded.path
    }

    /// The origin-form target of `url` (`/db/doc?rev=1-a`), still percent-encoded, without the
    /// fragment; `/` when the URL has no path.
    static func target(of url: URL) -> String {
        let string = url.absoluteString
        guard let schemeEnd = string.range(of: "://") else { return "/" }
        let rest = string[schemeEnd.upperBound...]
        guard let start = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) else { return "/" }
        var target = rest[start...]
        if let hash = target.firstIndex(of: "#") { target = target[..<hash] }
        if target.isEmpty { return "/" }
        if target.first == "?" { return "/" + target }
        return String(target)
    }

    /// The `Host` value for `host` and `port`: the port is left out when it is 80, and an IPv6
    /// literal is bracketed.
    static func hostValue(host: String, port: Int) -> String {
        let name = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        return port == 80 ? name : "\(name):\(port)"
    }

    /// Fields the transport writes itself; the request's own copies are left out.
    private static func isFramingField(_ name: String) -> Bool {
        name.caseInsensitiveEquals("Content-Length") || name.caseInsensitiveEquals("Transfer-Encoding")
    }

    /// Whether `request` names its own `Accept-Encoding` (the transport then adds none and decodes
    /// nothing).
    static func namesAcceptEncoding(_ request: HTTPRequest) -> Bool {
        request.headers.pairs.contains { $0.name.caseInsensitiveEquals("Accept-Encoding") }
    }

    /// The head as bytes, written by `HTTPWire`'s serializer (the one the TestServer uses): request
    /// line, `Host` (unless the request names one), the request's fields in order, the framing
    /// field, `Accept-Encoding` (unless the request names one) and the empty line. CR, LF and NUL
    /// inside a name or value become spaces, so that no value can start a field of its own.
    static func bytes(
        for request: HTTPRequest, target: String, host: String, framing: RequestBodyFraming,
        acceptEncoding: String
    ) -> [UInt8] {
        var hasHost = false
        var hasAcceptEncoding = false
        for field in request.headers {
            if isFramingField(field.name) { continue }
            if field.name.caseInsensitiveEquals("Host") { hasHost = true }
            if field.name.caseInsensitiveEquals("Accept-Encoding") { hasAcceptEncoding = true }
        }
        // Written straight into one buffer (no intermediate fields, string or `Data`).
        var out: [UInt8] = []
        out.reserveCapacity(512)
        HTTPSerializer.appendRequestLine(
            method: request.method.rawValue, target: target, version: .http1_1, to: &out)
        if !hasHost { HTTPSerializer.appendField(name: "Host", value: host, to: &out) }
        for field in request.headers where !isFramingField(field.name) {
            HTTPSerializer.appendField(name: field.name, value: field.value, to: &out)
        }
        switch framing {
        case .none: break
        case .contentLength(let length):
            HTTPSerializer.appendField(name: "Content-Length", value: String(length), to: &out)
        case .chunked: HTTPSerializer.appendField(name: "Transfer-Encoding", value: "chunked", to: &out)
        }
        if !hasAcceptEncoding { HTTPSerializer.appendField(name: "Accept-Encoding", value: acceptEncoding, to: &out) }
        out += [0x0D, 0x0A]
        return out
    }
}
