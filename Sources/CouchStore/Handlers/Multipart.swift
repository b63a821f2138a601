import CouchQuery
import CouchGzip
import Foundation
import HTTPWire

/// One MIME part.
struct MIMEPart {
    var headers: HTTPHeaders
    var body: Data
}

/// The bytes of one `"follows": true` attachment of a `multipart/related` upload.
struct FollowedAttachment {
    var contentType: String
    /// The attachment's bytes (decoded when it came gzip-encoded).
    var data: Data
    /// The gzip bytes as sent, when the stub said `"encoding": "gzip"`.
    var encoded: Data?
}

/// Reading and writing the MIME bodies CouchDB uses (`multipart/related` document uploads,
/// `multipart/mixed` `open_revs` answers).
enum MIME {
    /// The `boundary` parameter of a content type.
    static func boundary(_ contentType: String?) -> String? {
        guard let contentType else { return nil }
        for param in contentType.split(separator: ";").dropFirst() {
            let kv = param.split(separator: "=", maxSplits: 1)
            guard kv.count == 2, kv[0].trimmingCharacters(in: .whitespaces).lowercased() == "boundary" else { continue }
            var value = kv[1].trimmingCharacters(in: .whitespaces)
            if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 {
                value = String(value.dropFirst().dropLast())
            }
            return value
        }
        return nil
    }

    /// Splits a multipart body into its parts.
    static func parse(_ body: Data, boundary: String) -> [MIMEPart]? {
        let delimiter = Data(("--" + boundary).utf8)
        var parts: [MIMEPart] = []
        guard var cursor = body.range(of: delimiter)?.upperBound else { return nil }
        while true {
            // After a delimiter: "--" ends the body, otherwise CRLF then the part.
            if body[cursor...].starts(with: Data("--".utf8)) { break }
            guard let lineEnd = body.range(of: Data("\r\n".utf8), in: cursor..<body.endIndex) else { return nil }
            let headerStart = lineEnd.upperBound
            guard let next = body.range(of: Data("\r\n".utf8) + delimiter, in: headerStart..<body.endIndex) else {
                return nil
            }
            let partData = body[headerStart..<next.lowerBound]
            var headers = HTTPHeaders()
            var content = Data(partData)
            if let split = partData.range(of: Data("\r\n\r\n".utf8)) {
                let headerText = String(decoding: partData[partData.startIndex..<split.lowerBound], as: UTF8.self)
                for line in headerText.components(separatedBy: "\r\n") where !line.isEmpty {
                    guard let colon = line.firstIndex(of: ":") else { continue }
                    headers.add(
                        String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
                }
                content = Data(partData[split.upperBound...])
            } else if partData.starts(with: Data("\r\n".utf8)) {
                content = Data(partData.dropFirst(2))
            }
            parts.append(MIMEPart(headers: headers, body: content))
            cursor = next.upperBound
        }
        return parts
    }

    /// The filename of a `Content-Disposition: attachment; filename="x"` header.
    static func filename(_ part: MIMEPart) -> String? {
        guard let disposition = part.headers["Content-Disposition"] else { return nil }
        for param in disposition.split(separator: ";").dropFirst() {
            let kv = param.split(separator: "=", maxSplits: 1)
            guard kv.count == 2, kv[0].trimmingCharacters(in: .whitespaces) == "filename" else { continue }
            var value = kv[1].trimmingCharacters(in: .whitespaces)
            if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 {
                value = String(value.dropFirst().dropLast())
            }
            return value
        }
        return nil
    }
}

extension CouchEngine {
    /// A `multipart/related` document upload: the JSON part, then one part per `"follows": true` attachment.
    /// Returns the document (its `follows` stubs as sent) and the bytes of each following attachment by name.
    ///
    /// As CouchDB's `couch_att`/`couch_db:with_stream`: a part whose stub says `"encoding": "gzip"` (what
    /// CouchDB's replicator pushes for compressible types) is kept as the sender stored it — its digest is
    /// the MD5 of those gzip bytes — and stored decoded, inflated at most to the request's size limit
    /// (413 `too_large` past it, 400 when it is not gzip). A stub `digest` that is not the MD5 of the bytes
    /// received is 400 `content_md5_mismatch`.
    func parseMultipartDocument(_ request: ServerRequest) throws(CouchError) -> (JSON, [String: FollowedAttachment]) {
        guard let boundary = MIME.boundary(request.headers["Content-Type"]),
            let parts = MIME.parse(request.body, boundary: boundary), let first = parts.first
        else {
            throw CouchError.badRequest("Invalid multipart/related body")
        }
        guard let doc = try? JSON.parse(first.body) else { throw CouchError.invalidJSON }
        guard case .object = doc else { throw CouchError.badRequest("Document must be a JSON object") }
        var remaining = Array(parts.dropFirst())
        var followed: [String: FollowedAttachment] = [:]
        // What all the attachments together may inflate to.
        var inflateBudget = request.maximumBodySize
        for (name, spec) in (doc["_attachments"] ?? [:]).members where spec["follows"]?.boolValue == true {
            let index = remaining.firstIndex { MIME.filename($0) == name } ?? remaining.indices.first
            guard let index else { throw CouchError.badRequest("Missing attachment data for \(name)") }
            let part = remaining.remove(at: index)
            if let digest = spec["digest"]?.stringValue, digest.hasPrefix("md5-"),
                Data(base64Encoded: String(digest.dropFirst(4))) != Crypto.md5(part.body)
            {
                throw CouchError(400, "content_md5_mismatch", "Possible message corruption.")
            }
            let contentType =
                spec["content_type"]?.stringValue ?? part.headers["Content-Type"] ?? "application/octet-stream"
            var attachment = FollowedAttachment(contentType: contentType, data: part.body, encoded: nil)
            if spec["encoding"]?.stringValue == "gzip" {
                do {
                    attachment.data = try Gzip.decompress(part.body, maximumSize: max(inflateBudget, 0))
                } catch {
                    if case .outputTooLarge = error {
                        throw CouchError(413, "too_large", "the request entity is too large")
                    }
                    throw CouchError.badRequest("Attachment \(name) is not properly gzipped.")
                }
                attachment.encoded = part.body
                inflateBudget -= attachment.data.count
            }
            followed[name] = attachment
        }
        return (doc, followed)
    }

    /// One `open_revs` entry as a MIME part: plain JSON, or `multipart/related` with the attachment bytes.
    func openRevsPart(_ result: JSON, entry: DocEntry?, node: RevNode?, attachments: Bool) -> Data {
        guard attachments, entry != nil, let node, !node.atts.isEmpty, let doc = result["ok"] else {
            return Data("Content-Type: application/json\r\n\r\n".utf8) + (result["ok"] ?? result).data
        }
        let inner = Crypto.hex(Crypto.randomBytes(16))
        // As CouchDB's send_docs_multipart: every attachment follows, and compressible ones go
        // as stored, gzip-encoded, with `encoding` and `encoded_length` in their stubs.
        var stubs: [(String, JSON)] = []
        var bodies: [(Attachment, Data, Bool)] = []
        for att in node.atts {
            var stub: [(String, JSON)] = [
                ("content_type", .string(att.contentType)), ("revpos", .int(Int64(att.revpos))),
                ("digest", .string(att.digest)), ("length", .int(Int64(att.length))), ("follows", true),
            ]
            if att.isCompressible {
                let encoded = att.encoded ?? ZlibCompatibleGzip.compress(att.data)
                stub += [("encoding", "gzip"), ("encoded_length", .int(Int64(encoded.count)))]
                bodies.append((att, encoded, true))
            } else {
                bodies.append((att, att.data, false))
            }
            stubs.append((att.name, .object(stub)))
        }
        var out = Data("Content-Type: multipart/related; boundary=\"\(inner)\"\r\n\r\n".utf8)
        out += Data("--\(inner)\r\nContent-Type: application/json\r\n\r\n".utf8)
        out += doc.setting("_attachments", .object(stubs)).data
        for (att, body, gzipped) in bodies {
            var head = "\r\n--\(inner)\r\nContent-Disposition: attachment; filename=\"\(att.name)\"\r\n"
            head += "Content-Type: \(att.contentType)\r\n"
            if gzipped { head += "Content-Encoding: gzip\r\n" }
            head += "Content-Length: \(body.count)\r\n\r\n"
            out += Data(head.utf8)
            out += body
        }
        out += Data("\r\n--\(inner)--".utf8)
        return out
    }
}
