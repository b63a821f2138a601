import CouchQuery
import Foundation
import HTTPWire

@testable import CouchStore
@testable import CouchTestServer

/// A response as engine tests look at it.
struct EngineReply {
    var status: Int
    var headers: HTTPHeaders
    var data: Data

    var json: JSON { (try? JSON.parse(data)) ?? .null }
    var text: String { String(decoding: data, as: UTF8.self) }
}

enum EngineAuth {
    case admin
    case anonymous
    case basic(String, String)
    case cookie(String)
}

/// A request as the HTTP server hands it to the engine: `Host`, the credentials of `auth`, `headers` (each one
/// replacing any of the same name), the query split off `path`, and the body whole (`body`) or as a stream read as
/// the engine goes (`bodySource`, as the HTTP server and the in-process transport hand an upload over).
func engineRequest(
    _ method: String, _ path: String, headers extra: [(String, String)] = [], auth: EngineAuth = .admin,
    body: Data = Data(), bodySource: (any RequestBodySource)? = nil
) -> ServerRequest {
    var headers = HTTPHeaders()
    headers.add("Host", "127.0.0.1:5984")
    switch auth {
    case .admin: headers.add("Authorization", "Basic " + Data("admin:password".utf8).base64EncodedString())
    case .anonymous: break
    case .basic(let u, let p): headers.add("Authorization", "Basic " + Data("\(u):\(p)".utf8).base64EncodedString())
    case .cookie(let c): headers.add("Cookie", "AuthSession=" + c)
    }
    for (n, v) in extra { headers.set(n, v) }
    let parts = path.split(separator: "?", maxSplits: 1)
    var request = ServerRequest(
        method: method, rawPath: String(parts[0]), rawQuery: parts.count > 1 ? String(parts[1]) : nil,
        headers: headers, body: body)
    request.bodySource = bodySource
    return request
}

extension ServerEngine {
    /// Sends one request straight to the engine (no HTTP), its body `json`, `body` or read from `bodySource`.
    /// Streamed answers are read for at most `streamSeconds`.
    @discardableResult
    func send(
        _ method: String, _ path: String, json: JSON? = nil, body: Data? = nil, auth: EngineAuth = .admin,
        headers extra: [(String, String)] = [], bodySource: (any RequestBodySource)? = nil, streamSeconds: Double = 5
    ) -> EngineReply {
        var headers = [("Accept", "application/json")]
        if json != nil { headers.append(("Content-Type", "application/json")) }
        let request = engineRequest(
            method, path, headers: headers + extra, auth: auth, body: json?.data ?? body ?? Data(),
            bodySource: bodySource)
        let response = handle(request)
        var data = Data()
        switch response.body {
        case .empty: break
        case .data(let d): data = d
        case .stream(let producer):
            let writer = CollectingWriter(limit: streamSeconds)
            producer(writer)
            data = writer.collected
        }
        return EngineReply(status: response.status, headers: response.headers, data: data)
    }
}

/// `count` random bytes, made 8 at a time (fast enough for attachments of several MiB).
func randomPayload(_ count: Int) -> Data {
    var generator = SystemRandomNumberGenerator()
    var bytes = [UInt8](repeating: 0, count: count)
    for i in stride(from: 0, to: count, by: 8) {
        let value = generator.next() as UInt64
        for k in 0..<min(8, count - i) { bytes[i + k] = UInt8(truncatingIfNeeded: value >> (8 * UInt64(k))) }
    }
    return Data(bytes)
}

/// An attachment's digest as CouchDB writes it: `md5-` and the base64 of the MD5 of its stored bytes.
func attachmentDigest(_ data: Data) -> String { "md5-" + Crypto.md5(data).base64EncodedString() }

/// The size of database `db`'s file in data directory `dir` (-1 when there is none).
func databaseFileSize(_ dir: URL, _ db: String) -> Int {
    let url = DataDirectory(root: dir).fileURL(for: db)
    return (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int) ?? -1
}

/// A fresh temporary directory; the caller removes it (`defer { try? FileManager.default.removeItem(at: dir) }`).
func makeTemporaryDirectory() -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("couch-engine-\(UUID().uuidString)")
    try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// Engine options for tests: cheap password hashing.
func testOptions(_ directory: URL? = nil) -> ServerEngine.Options {
    var options = ServerEngine.Options()
    options.passwordIterations = 10
    options.dataDirectory = directory
    return options
}
