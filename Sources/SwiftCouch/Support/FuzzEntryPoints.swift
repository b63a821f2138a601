import CouchGzip
import Foundation
import HTTPWire

/// Entry points for the fuzz targets in `Fuzz/` (see ARCHITECTURE.md, "Fuzzing") and for the tests that replay
/// what they found: the client's parsing of a server's answer, reached from raw bytes with the limits the client
/// uses, without a socket. Not API (`package` access): nothing here is promised to users.
package enum FuzzEntryPoints {
    /// How far the last input got; for tests that check a replayed input still reaches the code it crashed.
    package struct Reached: Equatable, Sendable {
        /// Final (non-interim) response heads decoded.
        package var heads = 0
        /// Body bytes after inflation.
        package var bodyBytes = 0
        /// Rows (or lines) cut from the bodies.
        package var rows = 0
        /// Rows and bodies that decoded.
        package var decoded = 0
        /// The first error that ended the input, as text (nil when it parsed to its end).
        package var error: String?
        /// The first error of the row parser or splitter (which then stops, while the body is still read whole).
        package var framingError: String?
    }

    /// Parses `input` as a socket transport does a server's answers: the first byte chooses how the rest is cut
    /// into reads (1 to 64 bytes, or all at once), the request's method (`HEAD` or `GET`), and how the body is read
    /// (`{"rows":[…]}`, `{"results":[…]}`, `{"docs":[…]}`, a bare array, or newline-delimited lines), then the
    /// rest goes through the response decoder (HTTPWire: head, `Content-Length`, chunked framing, interim
    /// responses, a second pipelined answer), gzip or deflate inflation (CouchGzip) under
    /// ``Configuration/maximumResponseBodySize`` and ``Configuration/maximumDecompressionRatio``, the row parser
    /// or NDJSON splitter, and the decoders of rows, whole bodies and error bodies (`CouchError.http`).
    ///
    /// Every error is an ordinary result (the answer was bad); only a trap, a hang or unbounded memory is a
    /// finding.
    @discardableResult
    package static func httpResponse(_ input: UnsafeRawBufferPointer) -> Reached {
        var reached = Reached()
        guard let control = input.first else { return reached }
        let wire = UnsafeRawBufferPointer(rebasing: input[1...])
        let readSize = control & 0x0F == 0 ? Int.max : Int(control & 0x0F) * 4 - Int(control >> 7)
        let method = control & 0x10 == 0 ? "GET" : "HEAD"
        let shape = Int(control >> 5) % 5
        do {
            try parseResponses(wire, readSize: max(1, readSize), method: method, shape: shape, reached: &reached)
        } catch {
            reached.error = "\(error)"
        }
        return reached
    }

    private static func parseResponses(
        _ wire: UnsafeRawBufferPointer, readSize: Int, method: String, shape: Int, reached: inout Reached
    ) throws {
        let configuration = Configuration()
        let bodyLimit = configuration.maximumResponseBodySize ?? Int.max
        let ratioLimit = configuration.maximumDecompressionRatio ?? .infinity
        var decoder = HTTPResponseDecoder()
        decoder.expectResponse(to: method)
        decoder.expectResponse(to: "GET")
        let answer = Answer(shape: shape)
        var offset = 0
        var ended = false
        while true {
            while let part = try decoder.next() {
                switch part {
                case .head(let head):
                    if head.isInformational {
                        answer.interim = true
                        continue
                    }
                    reached.heads += 1
                    answer.begin(head, framed: decoder.currentFraming != .none)
                    if case .contentLength(let length) = decoder.currentFraming, answer.inflater == nil,
                        length > bodyLimit
                    {
                        throw FuzzLimit.body
                    }
                case .body(let bytes):
                    if answer.interim { continue }
                    try answer.receive(bytes, bodyLimit: bodyLimit, ratioLimit: ratioLimit, reached: &reached)
                case .end:
                    if answer.interim {
                        answer.interim = false
                        continue
                    }
                    try answer.end(reached: &reached)
                }
            }
            if ended { return }
            if offset >= wire.count {
                decoder.finish()
                ended = true
                continue
            }
            let end = wire.count - offset > readSize ? offset + readSize : wire.count
            decoder.feed(UnsafeRawBufferPointer(rebasing: wire[offset..<end]))
            offset = end
        }
    }

    /// A limit the fuzzed answer passed (an ordinary outcome).
    private enum FuzzLimit: Error {
        case body, ratio
    }

    /// One answer being read: its inflater, its row framing and its whole body.
    private final class Answer {
        let shape: Int
        var interim = false
        var status = 0
        var inflater: GzipInflater?
        var compressed = 0
        var framing: RowFraming
        var framingError: String?
        var body = Data()
        var decoder = FastJSONDecoder(dateCoding: .iso8601)

        init(shape: Int) {
            self.shape = shape
            framing = Self.framing(shape)
        }

        static func framing(_ shape: Int) -> RowFraming {
            let keys: [String?] = ["rows", "results", "docs", nil]
            return shape == 4
                ? RowFraming(rowsKey: nil, lineDelimited: true) : RowFraming(rowsKey: keys[shape], lineDelimited: false)
        }

        func begin(_ head: HTTPResponseHead, framed: Bool) {
            status = head.status
            inflater = framed ? head.headers["Content-Encoding"].flatMap { GzipInflater(contentEncoding: $0) } : nil
            compressed = 0
            framing = Self.framing(shape)
            framingError = nil
            body = Data()
            _ = head.headers["Retry-After"].map { RetryState.parseRetryAfter($0, now: Date(timeIntervalSince1970: 0)) }
        }

        func receive(
            _ wire: Data, bodyLimit: Int, ratioLimit: Double, reached: inout Reached
        ) throws {
            var data = wire
            if inflater != nil {
                compressed += wire.count
                data = try inflater!.feed(wire)
            }
            reached.bodyBytes += data.count
            body.append(data)
            if body.count > bodyLimit { throw FuzzLimit.body }
            if inflater != nil, body.count > 1 << 20, Double(body.count) > Double(compressed) * ratioLimit {
                throw FuzzLimit.ratio
            }
            guard framingError == nil else { return }
            var rows = 0
            var decoded = 0
            do {
                try framing.feed(data) { row in
                    rows += 1
                    if decodeRow(row) { decoded += 1 }
                }
            } catch {
                framingError = "\(error)"
                reached.framingError = reached.framingError ?? framingError
            }
            reached.rows += rows
            reached.decoded += decoded
        }

        func end(reached: inout Reached) throws {
            if inflater != nil, compressed > 0 { try inflater!.finish() }
            if framingError == nil {
                do {
                    try framing.finish()
                } catch {
                    reached.framingError = reached.framingError ?? "\(error)"
                }
                _ = framing.metadata
            }
            if (try? FastJSON.decode(JSONValue.self, from: body, dateCoding: .iso8601)) != nil { reached.decoded += 1 }
            _ = try? FastJSON.decode(FuzzDocument.self, from: body, dateCoding: .iso8601)
            _ = try? JSONDecoder.couch(for: .iso8601).decode(JSONValue.self, from: body)
            if status >= 400 { _ = CouchError.http(status: status, body: body, method: "GET", path: "/db").description }
        }

        /// Decodes a row as the row types of `_all_docs`, views, `_changes` and `_find` would.
        func decodeRow(_ row: UnsafeRawBufferPointer) -> Bool {
            let fallback = JSONDecoder.couch(for: .iso8601)
            var fast = false
            switch shape {
            case 0:
                let all = try? FastJSON.decode(
                    AllDocsRow<JSONValue>.self, from: row, reusing: &decoder, fallback: fallback, usedFast: &fast)
                let view = try? FastJSON.decode(
                    ViewRow<JSONValue, JSONValue, FuzzDocument>.self, from: row, reusing: &decoder, fallback: fallback,
                    usedFast: &fast)
                return all != nil || view != nil
            case 1, 4:
                let change = try? FastJSON.decode(
                    Change<FuzzDocument>.self, from: row, reusing: &decoder, fallback: fallback, usedFast: &fast)
                return change != nil
            default:
                let document = try? FastJSON.decode(
                    FuzzDocument.self, from: row, reusing: &decoder, fallback: fallback, usedFast: &fast)
                return document != nil
            }
        }
    }

    /// A document of the usual shapes: identifiers, a date, numbers of each kind, nested values.
    private struct FuzzDocument: Decodable {
        var _id: String?
        var _rev: String?
        var date: Date?
        var count: Int?
        var small: Int8?
        var ratio: Double?
        var flags: [Bool]?
        var nested: [String: JSONValue]?
    }
}
