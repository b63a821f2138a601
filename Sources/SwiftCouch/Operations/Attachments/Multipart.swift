import Foundation

/// One part of a MIME multipart body: its headers and its bytes.
public struct MIMEPart: Sendable, Hashable {
    /// The part's headers (`Content-Type`, `Content-Disposition`, `Content-Encoding`, ...).
    public var headers: HTTPFields
    /// The part's bytes, exactly as sent.
    public var body: Data

    public init(headers: HTTPFields, body: Data) {
        self.headers = headers
        self.body = body
    }

    /// The `filename` parameter of `Content-Disposition`, if any.
    public var filename: String? {
        headers["Content-Disposition"].flatMap { MultipartCoding.parameter("filename", in: $0) }
    }
}

/// Writing and reading `multipart/related` and `multipart/mixed` bodies as CouchDB uses them.
public enum MultipartCoding {
    /// Builds a multipart body from `parts`, separated by `boundary`.
    /// - Throws: a `.validation` error when a part header has CR, LF or NUL in its value, or a name
    ///   that is not an HTTP token (it would inject headers or parts).
    public static func encode(_ parts: [MIMEPart], boundary: String) throws(CouchError) -> Data {
        var out = Data()
        for part in parts {
            out.append(Data("--\(boundary)\r\n".utf8))
            for field in part.headers {
                try CouchValidation.validateHeader(name: field.name, value: field.value)
                out.append(Data("\(field.name): \(field.value)\r\n".utf8))
            }
            out.append(Data("\r\n".utf8))
            out.append(part.body)
            out.append(Data("\r\n".utf8))
        }
        out.append(Data("--\(boundary)--".utf8))
        return out
    }

    /// The `boundary` parameter of a `multipart/...` content type, or nil.
    public static func boundary(contentType: String?) -> String? {
        guard let contentType, contentType.lowercased().hasPrefix("multipart/") else { return nil }
        return parameter("boundary", in: contentType)
    }

    /// Splits a multipart body into its parts. Throws when the body does not contain the boundary
    /// or a part's headers do not end.
    public static func decode(_ data: Data, boundary: String) throws(CouchError) -> [MIMEPart] {
        let delimiter = Data("--\(boundary)".utf8)
        let crlf = Data("\r\n".utf8)
        guard var cursor = data.range(of: delimiter)?.upperBound else {
            throw malformed("the boundary '\(boundary)' does not occur in the body")
        }
        var parts: [MIMEPart] = []
        while true {
            // After a delimiter: "--" ends the body; otherwise skip to the end of the line.
            if data[cursor...].starts(with: Data("--".utf8)) { return parts }
            guard let lineEnd = data.range(of: crlf, in: cursor..<data.endIndex) else {
                throw malformed("a boundary line does not end")
            }
            let headerStart = lineEnd.upperBound
            guard let next = data.range(of: crlf + delimiter, in: headerStart..<data.endIndex) else {
                throw malformed("a part has no closing boundary")
            }
            let partBytes = data[headerStart..<next.lowerBound]
            let separator = partBytes.range(of: Data("\r\n\r\n".utf8))
            let headerBytes: Data
            let body: Data
            if partBytes.starts(with: crlf) {
                headerBytes = Data()
                body = Data(partBytes.dropFirst(2))
            } else if let separator {
                headerBytes = Data(partBytes[partBytes.startIndex..<separator.lowerBound])
                body = Data(partBytes[separator.upperBound...])
            } else {
                throw malformed("a part's headers do not end with an empty line")
            }
            parts.append(MIMEPart(headers: headers(headerBytes), body: body))
            cursor = next.upperBound
        }
    }

    private static func headers(_ bytes: Data) -> HTTPFields {
        var fields = HTTPFields()
        for line in String(decoding: bytes, as: UTF8.self).components(separatedBy: "\r\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields.append(
                String(line[..<colon]).trimmingCharacters(in: .whitespaces),
                String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces))
        }
        return fields
    }

    /// The value of parameter `name` in a header value such as `multipart/mixed; boundary="x"`,
    /// unquoted.
    static func parameter(_ name: String, in value: String) -> String? {
        for piece in value.split(separator: ";").dropFirst() {
            let pair = piece.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard pair.count == 2, pair[0].lowercased() == name.lowercased() else { continue }
            var text = pair[1]
            if text.count >= 2, text.hasPrefix("\""), text.hasSuffix("\"") {
                text = String(text.dropFirst().dropLast()).replacingOccurrences(of: "\\\"", with: "\"")
                    .replacingOccurrences(of: "\\\\", with: "\\")
            }
            return text
        }
        return nil
    }

    /// A fresh random boundary.
    static func makeBoundary() -> String { UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased() }

    private static func malformed(_ what: String) -> CouchError {
        CouchError(kind: .decoding, message: "The multipart body is malformed: \(what).")
    }
}
