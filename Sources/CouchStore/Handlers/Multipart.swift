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
    /// The attachment already written to the database's file (a streamed upload: `data` and `encoded` are empty):
    /// its digest, length, chunks and, when it came gzip-encoded, the chunks of the gzip bytes.
    var uploaded: Attachment?
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

    /// As CouchDB's `couch_att:write_streamed_attachment`: a following attachment whose stub gives its length
    /// (`encoded_length` for a gzip-encoded one, else `length`) must arrive with exactly that many bytes.
    static func checkLength(_ received: Int, _ spec: JSON) throws(CouchError) {
        let declared =
            spec["encoding"]?.stringValue == "gzip" ? spec["encoded_length"] ?? spec["length"] : spec["length"]
        guard let expected = declared?.intValue else { return }
        if received < expected { throw CouchError.badRequest("attachment shorter than expected") }
        if received > expected { throw CouchError.badRequest("attachment longer than expected") }
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
            try MIME.checkLength(part.body.count, spec)
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

    /// ``parseMultipartDocument(_:)`` for a body read as a stream (``ServerRequest/bodySource``) into a database with
    /// a file: the JSON part is read whole, each following attachment is written to the file as it is read
    /// (``AttachmentStreamWriter``), decoded on the way when it came gzip-encoded (the gzip bytes are written too:
    /// they give the digest), so no attachment is ever whole in memory. The same checks and errors; the writers are
    /// returned so that a write that fails afterwards gives their chunks up. Nil for a database without a file.
    func parseMultipartDocumentStreamed(_ request: ServerRequest, _ db: Database) throws(CouchError) -> (
        JSON, [String: FollowedAttachment], [AttachmentStreamWriter]
    )? {
        guard let source = request.bodySource, let file = db.withLock({ db.file }) else { return nil }
        guard let boundary = MIME.boundary(request.headers["Content-Type"]) else {
            throw CouchError.badRequest("Invalid multipart/related body")
        }
        var reader = MIMEStreamReader(source: source, boundary: boundary)
        var writers: [AttachmentStreamWriter] = []
        do {
            guard try reader.nextPart() != nil else { throw CouchError.badRequest("Invalid multipart/related body") }
            var first = Data()
            while let piece = try reader.readBody(upTo: 1 << 20) {
                guard first.count + piece.count <= request.maximumBodySize else {
                    throw CouchError(413, "too_large", "the request entity is too large")
                }
                first.append(piece)
            }
            guard let doc = try? JSON.parse(first) else { throw CouchError.invalidJSON }
            guard case .object = doc else { throw CouchError.badRequest("Document must be a JSON object") }
            var remaining = (doc["_attachments"] ?? [:]).members.filter { $0.1["follows"]?.boolValue == true }
            var followed: [String: FollowedAttachment] = [:]
            var budget = request.maximumBodySize
            while !remaining.isEmpty, let headers = try reader.nextPart() {
                let part = MIMEPart(headers: headers, body: Data())
                let index = remaining.firstIndex { $0.0 == MIME.filename(part) } ?? 0
                let (name, spec) = remaining.remove(at: index)
                let gzip = spec["encoding"]?.stringValue == "gzip"
                let writer = AttachmentStreamWriter(file: file)
                writers.append(writer)
                let encodedWriter = gzip ? AttachmentStreamWriter(file: file) : nil
                if let encodedWriter { writers.append(encodedWriter) }
                var inflater = GzipInflater(format: .gzip, maximumSize: max(budget, 0))
                while let piece = try reader.readBody(upTo: StoreFile.blobChunkSize) {
                    if let encodedWriter {
                        try encodedWriter.write(piece)
                        do {
                            try writer.write(try inflater.feed(piece))
                        } catch let error as GzipError {
                            if case .outputTooLarge = error {
                                throw CouchError(413, "too_large", "the request entity is too large")
                            }
                            throw CouchError.badRequest("Attachment \(name) is not properly gzipped.")
                        }
                    } else {
                        guard writer.length + piece.count <= budget else {
                            throw CouchError(413, "too_large", "the request entity is too large")
                        }
                        try writer.write(piece)
                    }
                }
                if gzip {
                    do {
                        try inflater.finish()
                    } catch {
                        throw CouchError.badRequest("Attachment \(name) is not properly gzipped.")
                    }
                }
                try MIME.checkLength(encodedWriter?.length ?? writer.length, spec)
                let received = encodedWriter?.identityDigest ?? writer.identityDigest
                if let digest = spec["digest"]?.stringValue, digest.hasPrefix("md5-"), digest != received {
                    throw CouchError(400, "content_md5_mismatch", "Possible message corruption.")
                }
                let contentType =
                    spec["content_type"]?.stringValue ?? headers["Content-Type"] ?? "application/octet-stream"
                let blob = try writer.finish()
                var attachment = Attachment(
                    name: name, contentType: contentType, revpos: 0, digest: writer.identityDigest,
                    length: writer.length, bytes: .stored(blob))
                if let encodedWriter {
                    attachment.received = .stored(try encodedWriter.finish())
                    attachment.digest = received
                    budget -= writer.length
                } else if attachment.isCompressible {
                    attachment.digest = try AttachmentStreamWriter.gzipDigest(of: blob)
                }
                followed[name] = FollowedAttachment(contentType: contentType, data: Data(), uploaded: attachment)
            }
            // What follows (more parts, the closing delimiter) is read and dropped.
            while try reader.nextPart() != nil {}
            return (doc, followed, writers)
        } catch {
            for writer in writers.reversed() { writer.abandon() }
            if let error = error as? CouchError { throw error }
            if let error = error as? StoreFileError {
                throw CouchError(500, "file_error", "the attachment could not be written: \(error)")
            }
            if error is MIMEStreamReader.Malformed { throw CouchError.badRequest("Invalid multipart/related body") }
            throw CouchError(400, "bad_request", "the request body could not be read whole: \(error)")
        }
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

/// Reads a `multipart/related` body part by part from a ``RequestBodySource``, never holding more than a piece of
/// it: each part's headers (at most 64 KiB), then its bytes in pieces up to the next delimiter.
struct MIMEStreamReader {
    private let source: any RequestBodySource
    /// `CRLF--boundary`: what ends a part (the body is read as if it began with a CRLF, so the first delimiter
    /// needs none).
    private let delimiter: [UInt8]
    private var buffer: [UInt8] = [0x0D, 0x0A]
    private var sourceEnded = false
    /// Whether the current part's bytes were read up to its delimiter.
    private var partEnded = true
    private var finished = false

    struct Malformed: Error, CustomStringConvertible {
        let description: String
    }

    init(source: any RequestBodySource, boundary: String) {
        self.source = source
        self.delimiter = Array(("\r\n--" + boundary).utf8)
        // The preamble (before the first delimiter) is read as a part of its own and dropped.
        self.partEnded = false
    }

    /// Reads more of the body into the buffer; false at its end.
    private mutating func fill() throws -> Bool {
        guard !sourceEnded else { return false }
        guard let piece = try source.read(upTo: 256 * 1024) else {
            sourceEnded = true
            return false
        }
        buffer.append(contentsOf: piece)
        return true
    }

    /// The next bytes of the current part (at most `maximum`), nil at its end.
    mutating func readBody(upTo maximum: Int) throws -> Data? {
        guard !partEnded else { return nil }
        while true {
            if let at = firstDelimiter() {
                if at == 0 {
                    buffer.removeFirst(delimiter.count)
                    partEnded = true
                    return nil
                }
                let count = min(at, maximum)
                defer { buffer.removeFirst(count) }
                return Data(buffer[0..<count])
            }
            // Everything but what could be the start of a delimiter is the part's.
            let safe = buffer.count - (delimiter.count - 1)
            if safe >= 64 * 1024 || (safe > 0 && sourceEnded) {
                let count = min(safe, maximum)
                defer { buffer.removeFirst(count) }
                return Data(buffer[0..<count])
            }
            guard try fill() else { throw Malformed(description: "the body ends inside a part") }
        }
    }

    /// Skips the rest of the current part and reads the next one's headers; nil after the closing delimiter.
    mutating func nextPart() throws -> HTTPHeaders? {
        while try readBody(upTo: Int.max) != nil {}
        guard !finished else { return nil }
        // After a delimiter: `--` closes the body, else optional padding and a CRLF, then the headers.
        while buffer.count < 2 { guard try fill() else { throw Malformed(description: "the body ends early") } }
        if buffer[0] == 0x2D, buffer[1] == 0x2D {
            finished = true
            return nil
        }
        var headers = HTTPHeaders()
        var lines = 0
        while true {
            var end: Int?
            while end == nil {
                end = firstIndex(of: [0x0D, 0x0A])
                if end == nil {
                    guard buffer.count < 64 * 1024, try fill() else {
                        throw Malformed(description: "a part's headers are malformed or too long")
                    }
                }
            }
            let line = String(decoding: buffer[0..<end!], as: UTF8.self)
            buffer.removeFirst(end! + 2)
            lines += 1
            if lines == 1 { continue }  // the rest of the delimiter line (transport padding)
            if line.isEmpty { break }
            guard lines < 130 else { throw Malformed(description: "a part has too many headers") }
            if let colon = line.firstIndex(of: ":") {
                headers.add(
                    String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
            }
        }
        partEnded = false
        return headers
    }

    private func firstDelimiter() -> Int? { firstIndex(of: delimiter) }

    private func firstIndex(of pattern: [UInt8]) -> Int? {
        guard buffer.count >= pattern.count, let first = pattern.first else { return nil }
        var i = 0
        let last = buffer.count - pattern.count
        while i <= last {
            if buffer[i] == first {
                var k = 1
                while k < pattern.count, buffer[i + k] == pattern[k] { k += 1 }
                if k == pattern.count { return i }
            }
            i += 1
        }
        return nil
    }
}
