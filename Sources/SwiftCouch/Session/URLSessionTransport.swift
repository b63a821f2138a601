import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The default ``Transport``: its own `URLSession` (never the shared one), with no cookie storage,
/// no cache and no credential store, so that every client's session state stays its own.
public final class URLSessionTransport: Transport {
    private let session: URLSession

    /// Creates a transport.
    /// - Parameter maximumConnectionsPerHost: how many connections to open to one server. Defaults to 6.
    public init(maximumConnectionsPerHost: Int = 6) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.httpCookieAcceptPolicy = .never
        configuration.urlCache = nil
        configuration.urlCredentialStorage = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpMaximumConnectionsPerHost = max(1, maximumConnectionsPerHost)
        session = URLSession(configuration: configuration)
    }

    public func send(
        _ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, any Error>) -> Void
    ) -> any Cancellable {
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method.rawValue
        urlRequest.timeoutInterval = request.timeout
        urlRequest.httpShouldHandleCookies = false
        for field in request.headers {
            urlRequest.addValue(field.value, forHTTPHeaderField: field.name)
        }
        urlRequest.httpBody = request.body
        let task = session.dataTask(with: urlRequest) { data, response, error in
            if let error {
                completion(.failure(error))
                return
            }
            guard let http = response as? HTTPURLResponse else {
                completion(.failure(URLError(.badServerResponse)))
                return
            }
            var headers = HTTPFields()
            for (name, value) in http.allHeaderFields {
                headers.append("\(name)", "\(value)")
            }
            completion(.success(HTTPResponse(statusCode: http.statusCode, headers: headers, body: data ?? Data())))
        }
        task.resume()
        return URLSessionTaskCancellable(task: task)
    }

    public func shutdown() {
        session.finishTasksAndInvalidate()
    }
}

/// `@unchecked Sendable`: `URLSessionTask.cancel()` is thread-safe and the task is never mutated here.
private struct URLSessionTaskCancellable: Cancellable, @unchecked Sendable {
    let task: URLSessionTask
    func cancel() { task.cancel() }
}
