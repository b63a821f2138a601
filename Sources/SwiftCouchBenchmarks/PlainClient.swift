import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The baseline: the same work done with plain `URLSession` calls and hand-written JSON, the way
/// an application without SwiftCouch would do it.
final class PlainClient: Sendable {
    let base: URL
    let authorization: String
    let session: URLSession

    init(base: URL, username: String, password: String) {
        self.base = base
        self.authorization = "Basic " + Data("\(username):\(password)".utf8).base64EncodedString()
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieStorage = nil
        configuration.urlCache = nil
        configuration.httpMaximumConnectionsPerHost = 16
        session = URLSession(configuration: configuration)
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    func request(_ method: String, _ path: String, body: Data? = nil, contentType: String = "application/json")
        -> URLRequest
    {
        var request = URLRequest(url: URL(string: base.absoluteString + path)!)
        request.httpMethod = method
        request.setValue(authorization, forHTTPHeaderField: "Authorization")
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        if let body {
            request.httpBody = body
            request.setValue(contentType, forHTTPHeaderField: "Content-Type")
        }
        return request
    }

    /// Sends a request and returns the body, failing on a non-2xx status.
    func send(_ request: URLRequest) async throws -> Data {
        try await withCheckedThrowingContinuation { continuation in
            session.dataTask(with: request) { data, response, error in
                if let error {
                    continuation.resume(throwing: error)
                } else if let http = response as? HTTPURLResponse, !(200..<300).contains(http.statusCode) {
                    continuation.resume(
                        throwing: Failure(description: "HTTP \(http.statusCode) for \(request.url!.path)"))
                } else {
                    continuation.resume(returning: data ?? Data())
                }
            }.resume()
        }
    }

    func put(_ path: String, json: String) async throws -> [String: Any] {
        let data = try await send(request("PUT", path, body: Data(json.utf8)))
        return (try JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:]
    }

    func get(_ path: String) async throws -> [String: Any] {
        let data = try await send(request("GET", path))
        return (try JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:]
    }

    func post(_ path: String, body: Data) async throws -> Any {
        let data = try await send(request("POST", path, body: body))
        return try JSONSerialization.jsonObject(with: data)
    }

    func delete(_ path: String) async throws {
        _ = try await send(request("DELETE", path))
    }

    /// Uploads a file as an attachment.
    func upload(_ path: String, file: URL, contentType: String) async throws {
        var request = request("PUT", path)
        request.setValue(contentType, forHTTPHeaderField: "Content-Type")
        let _: Void = try await withCheckedThrowingContinuation { continuation in
            session.uploadTask(with: request, fromFile: file) { _, response, error in
                if let error {
                    continuation.resume(throwing: error)
                } else if let http = response as? HTTPURLResponse, !(200..<300).contains(http.statusCode) {
                    continuation.resume(throwing: Failure(description: "upload: HTTP \(http.statusCode)"))
                } else {
                    continuation.resume()
                }
            }.resume()
        }
    }

    /// Downloads an attachment to a file.
    func download(_ path: String, to file: URL) async throws {
        let request = request("GET", path)
        let _: Void = try await withCheckedThrowingContinuation { continuation in
            session.downloadTask(with: request) { location, response, error in
                if let error {
                    continuation.resume(throwing: error)
                    return
                }
                guard let location, let http = response as? HTTPURLResponse, (200..<300).contains(http.statusCode)
                else {
                    continuation.resume(throwing: Failure(description: "download failed"))
                    return
                }
                try? FileManager.default.removeItem(at: file)
                do {
                    try FileManager.default.moveItem(at: location, to: file)
                    continuation.resume()
                } catch {
                    continuation.resume(throwing: error)
                }
            }.resume()
        }
    }
}
