import Foundation

/// A request body the engine reads as it uses it, instead of whole: what a server (or the in-process transport)
/// hands over for a request whose body may be large, so that an attachment of any size is written to the database's
/// file with memory bounded by a chunk or two.
///
/// Reads happen on the thread answering the request. A source that reads a connection bounds each read with the
/// connection's read deadline and throws when it passes.
public protocol RequestBodySource: AnyObject, Sendable {
    /// The body's length when it was declared in advance (`Content-Length`); nil for a body of unknown length
    /// (`Transfer-Encoding: chunked`, a stream).
    var declaredLength: Int? { get }

    /// The next bytes of the body, at most `maximum` of them and at least one while any remain; nil once the whole
    /// body was read. Throws when the body cannot be read whole: the client went away or stopped sending before its
    /// end (a body cut short), the body's framing is malformed, or the read deadline passed.
    func read(upTo maximum: Int) throws -> Data?
}

extension ServerRequest {
    /// Whether the engine reads this request's body as a stream (``bodySource``) rather than whole: a standalone
    /// attachment upload (`PUT /db/doc/name`, `PUT /db/_design/ddoc/name`) and a `multipart/related` document upload
    /// (`PUT /db/doc`, what CouchDB's replicator sends documents with attachments as). A server may leave every other
    /// body whole; the engine reads a source it gets for any other request whole before answering.
    public static func streamsBody(method: String, pathSegments segments: [String], contentType: String?) -> Bool {
        guard method == "PUT", segments.count >= 2, !segments[0].hasPrefix("_") else { return false }
        let design = segments[1] == "_design"
        if design ? segments.count == 3 : segments.count == 2 {
            let multipart = (contentType ?? "").lowercased().hasPrefix("multipart/related")
            return multipart && (design || !segments[1].hasPrefix("_"))
        }
        if design { return segments.count >= 4 && !segments[3].hasPrefix("_") }
        return !segments[1].hasPrefix("_")
    }

    /// Reads the whole of ``bodySource`` into ``body`` (at most ``maximumBodySize`` bytes) and clears the source.
    mutating func readWholeBody() throws(CouchError) {
        guard let source = bodySource else { return }
        bodySource = nil
        var data = Data()
        if let length = source.declaredLength, length <= maximumBodySize { data.reserveCapacity(length) }
        do {
            while let piece = try source.read(upTo: 256 * 1024) {
                guard data.count + piece.count <= maximumBodySize else {
                    throw CouchError(413, "too_large", "the request entity is too large")
                }
                data.append(piece)
            }
        } catch let error as CouchError {
            throw error
        } catch {
            throw CouchError(400, "bad_request", "the request body could not be read: \(error)")
        }
        body = data
    }
}
