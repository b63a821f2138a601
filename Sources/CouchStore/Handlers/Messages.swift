import Foundation
import HTTPWire

/// One request to the engine, in HTTP's terms (as the TestServer receives it): the head parsed, the body read whole
/// or (``bodySource``) handed over as a stream.
public struct ServerRequest: Sendable {
    /// The method as sent (`GET`, `PUT`, `COPY`, ...).
    public var method: String
    /// The path as sent, still percent-encoded, without the query (`/db/a%2Fb`).
    public var rawPath: String
    /// The query string as sent, without the `?`, or nil when there was none.
    public var rawQuery: String?
    public var headers: HTTPHeaders
    public var body: Data
    /// The body still to be read, when the server hands it over as a stream instead of whole (then ``body`` is
    /// empty): a standalone attachment upload is written to the database's file as it is read (see
    /// ``streamsBody(method:pathSegments:contentType:)``); any other request's is read whole first. Nil by default.
    public var bodySource: (any RequestBodySource)?
    /// The largest body the server accepts (its `maxRequestBodySize`, CouchDB's `max_http_request_size`): a
    /// `Content-Encoding: gzip` body is refused 413 `too_large` as soon as it inflates past it. Defaults to
    /// 300 MiB, the TestServer's default; the HTTP server sets its own.
    public var maximumBodySize = 300 * 1024 * 1024

    public init(method: String, rawPath: String, rawQuery: String?, headers: HTTPHeaders, body: Data) {
        self.method = method
        self.rawPath = rawPath
        self.rawQuery = rawQuery
        self.headers = headers
        self.body = body
    }

    /// The path split at `/` and each segment percent-decoded the way CouchDB does it:
    /// `%2F` stays inside its segment and `+` becomes a space. Empty segments are dropped.
    /// `/db/a%2Fb` → `["db", "a/b"]`. A segment that does not decode is kept as sent.
    public var pathSegments: [String] {
        rawPath.split(separator: "/", omittingEmptySubsequences: true).map {
            // Most segments hold neither `%` nor `+`: Foundation's decoding is skipped for them (it costs
            // several microseconds a segment, a tenth of a document GET).
            if !Self.needsDecoding($0) { return String($0) }
            let plusDecoded = $0.replacingOccurrences(of: "+", with: " ")
            return plusDecoded.removingPercentEncoding ?? String($0)
        }
    }

    /// Whether `text` holds a `%` or a `+` (which percent-decoding would change).
    static func needsDecoding(_ text: Substring) -> Bool {
        text.utf8.contains { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "+") }
    }

    /// The query parameters in order, names and values percent-decoded (`+` as a space).
    public var query: [(name: String, value: String)] {
        guard let rawQuery, !rawQuery.isEmpty else { return [] }
        return rawQuery.split(separator: "&", omittingEmptySubsequences: true).map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ s: Substring) -> String {
                if !Self.needsDecoding(s) { return String(s) }
                let plus = s.replacingOccurrences(of: "+", with: " ")
                return plus.removingPercentEncoding ?? plus
            }
            return (name: decode(parts[0]), value: parts.count > 1 ? decode(parts[1]) : "")
        }
    }

    /// The last value of the query parameter `name` (CouchDB uses the last one).
    public func queryValue(_ name: String) -> String? {
        query.last { $0.name == name }?.value
    }
}

/// Something that writes the chunks of a streamed response (continuous `_changes`).
public protocol ChunkWriter: Sendable {
    /// Sends `data` as one chunk. Returns false once the client has gone away; the producer should stop then.
    @discardableResult func write(_ data: Data) -> Bool
    /// Sends `pieces` one after another, as one write where the writer can (a socket: one `sendmsg` over them
    /// all). The default writes each with ``write(_:)``.
    @discardableResult func write(contentsOf pieces: [Data]) -> Bool
    /// How many bytes a producer that reads its body in pieces (an attachment's chunks) should gather for one
    /// ``write(contentsOf:)``: a socket sends long writes more cheaply for the receiver, whose queue then stays
    /// full. The default, 0, asks for no gathering.
    var preferredWriteSize: Int { get }
    /// Ends the body short: the producer met an error after the body began (a stored document that could not
    /// be read), so the response must not look complete. A server closes the connection without the chunked
    /// body's last chunk, as CouchDB aborts such a response; an in-process reader reports an error. The default
    /// does nothing (the body simply ends where the producer stopped).
    func abort()
}

extension ChunkWriter {
    public func abort() {}

    @discardableResult public func write(contentsOf pieces: [Data]) -> Bool {
        for piece in pieces {
            guard write(piece) else { return false }
        }
        return true
    }

    public var preferredWriteSize: Int { 0 }
}

/// The body of a response.
public enum ResponseBody: Sendable {
    /// No body at all (HEAD, 304, 204).
    case empty
    /// A body sent with `Content-Length`.
    case data(Data)
    /// A body sent with `Transfer-Encoding: chunked`; the closure runs on the connection's thread,
    /// may block while it waits for more to send, and returns when the response is complete.
    ///
    /// When the response's headers hold a `Content-Length` (an attachment read from a file), the body is sent
    /// with that length instead, unframed, and the closure must write exactly that many bytes: a server closes the
    /// connection after a body that ends short, so the client sees it cut off, and writes nothing past it.
    case stream(@Sendable (any ChunkWriter) -> Void)
}

/// One HTTP response as a handler builds it.
public struct ServerResponse: Sendable {
    public var status: Int
    /// The reason phrase; nil means the standard phrase for the status as CouchDB sends it
    /// (`Object Not Found` for 404).
    public var reason: String?
    public var headers: HTTPHeaders
    public var body: ResponseBody

    public init(status: Int, reason: String? = nil, headers: HTTPHeaders = HTTPHeaders(), body: ResponseBody = .empty) {
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
    }
}
