import Foundation

/// Percent-encoding for URL path segments and query components.
///
/// Only RFC 3986 unreserved characters (`A–Z a–z 0–9 - . _ ~`) are left as they are; everything
/// else, `/`, `+`, `?`, `#`, `%`, space and every non-ASCII byte included, is percent-encoded from
/// its UTF-8 bytes. So a `/` in a document id stays inside the id (`a%2Fb`) and a `+` is not read
/// by CouchDB as a space (`%2B`).
public enum PercentEncoding {
    /// Encodes one path segment or one query name or value.
    public static func encode(_ component: String) -> String {
        var utf8 = component
        return utf8.withUTF8 { bytes -> String in
            // Most names and ids need no encoding at all: returned as they are, nothing copied.
            guard let first = bytes.firstIndex(where: { !isUnreserved($0) }) else { return component }
            var out = [UInt8]()
            out.reserveCapacity(bytes.count + 16)
            out.append(contentsOf: bytes[..<first])
            for byte in bytes[first...] {
                if isUnreserved(byte) {
                    out.append(byte)
                } else {
                    out.append(UInt8(ascii: "%"))
                    out.append(hexDigits[Int(byte >> 4)])
                    out.append(hexDigits[Int(byte & 0x0F)])
                }
            }
            return String(decoding: out, as: UTF8.self)
        }
    }

    private static let hexDigits: [UInt8] = Array("0123456789ABCDEF".utf8)

    private static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
            UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }
}

/// A path on a CouchDB server, kept as unencoded segments and encoded only when a URL is built.
///
/// Build paths from segments, never by string interpolation:
/// `CouchPath(database, "_design", "app", "_view", "by_name")`. A document path keeps the
/// `_design/` and `_local/` prefixes of an id as their own segment, so
/// `CouchPath.document("db", "_design/app")` is `/db/_design/app` and `CouchPath.document("db", "a/b")`
/// is `/db/a%2Fb`.
public struct CouchPath: Sendable, Hashable, CustomStringConvertible {
    /// The segments, not percent-encoded.
    public var segments: [String]

    public init(_ segments: String...) { self.segments = segments }

    public init(segments: [String]) { self.segments = segments }

    /// The server root, `/`.
    public static let root = CouchPath(segments: [])

    /// The path of a document: `/{db}/{id}`, with `_design/` and `_local/` kept as a prefix segment.
    public static func document(_ database: String, _ id: String) -> CouchPath {
        // An id without a leading underscore is one segment: one array, made once.
        guard id.utf8.first == UInt8(ascii: "_") else { return CouchPath(segments: [database, id]) }
        return CouchPath(segments: [database] + documentSegments(id))
    }

    /// The segments of a document id: `["_design", "name"]`, `["_local", "name"]` or `[id]`.
    public static func documentSegments(_ id: String) -> [String] {
        for prefix in ["_design/", "_local/"] where id.hasPrefix(prefix) {
            return [String(prefix.dropLast()), String(id.dropFirst(prefix.count))]
        }
        return [id]
    }

    /// A path with more segments appended.
    public func appending(_ more: String...) -> CouchPath {
        CouchPath(segments: segments + more)
    }

    /// The percent-encoded path, starting with `/`.
    public var encoded: String {
        guard !segments.isEmpty else { return "/" }
        var path = ""
        path.reserveCapacity(segments.reduce(0) { $0 + $1.utf8.count + 1 } + 8)
        for segment in segments {
            path += "/"
            path += PercentEncoding.encode(segment)
        }
        return path
    }

    public var description: String { encoded }
}
