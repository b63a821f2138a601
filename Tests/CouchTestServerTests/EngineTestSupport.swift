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

extension ServerEngine {
    /// Sends one request straight to the engine (no HTTP). Streamed bodies are read for at most `streamSeconds`.
    @discardableResult
    func send(
        _ method: String, _ path: String, json: JSON? = nil, body: Data? = nil, auth: EngineAuth = .admin,
        headers extra: [(String, String)] = [], streamSeconds: Double = 5
    ) -> EngineReply {
        var headers = HTTPHeaders()
        headers.add("Host", "127.0.0.1:5984")
        headers.add("Accept", "application/json")
        switch auth {
        case .admin: headers.add("Authorization", "Basic " + Data("admin:password".utf8).base64EncodedString())
        case .anonymous: break
        case .basic(let u, let p): headers.add("Authorization", "Basic " + Data("\(u):\(p)".utf8).base64EncodedString())
        case .cookie(let c): headers.add("Cookie", "AuthSession=" + c)
        }
        var payload = body ?? Data()
        if let json {
            payload = json.data
            headers.add("Content-Type", "application/json")
        }
        for (n, v) in extra { headers.set(n, v) }
        let parts = path.split(separator: "?", maxSplits: 1)
        let response = handle(
            ServerRequest(
                method: method, rawPath: String(parts[0]),
                rawQuery: parts.count > 1 ? String(parts[1]) : nil, headers: headers, body: payload))
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

/// A fresh temporary directory, removed by `cleanUp`.
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
