import Foundation

/// Steps 1–3 of the pipeline, written once for every way an operation is run (whole responses
/// and streamed ones): `validate` → `serialise` → `endpoint`, `parameters`, `method`, `data`,
/// `contentType`, `headers` (each read once, in that order) → the request.
struct PreparedRequest: Sendable {
    /// The request to send.
    let request: HTTPRequest
    /// Whether repeating it is harmless: the operation's answer, or judged from what was read.
    let isIdempotent: Bool

    /// Prepares `operation` for `session`: its base URL, request timeout and request compression.
    init<Op: CouchOperation>(
        preparing operation: inout Op, for session: InterceptableSession, options: CallOptions = CallOptions()
    ) throws(CouchError) {
        try self.init(
            preparing: &operation, baseURL: session.baseURL, timeout: session.configuration.requestTimeout,
            gzipThreshold: session.configuration.gzipRequestBodiesOfAtLeast, options: options,
            dateCoding: session.configuration.dateCoding)
    }

    init<Op: CouchOperation>(
        preparing operation: inout Op, baseURL: URL, timeout: TimeInterval, gzipThreshold: Int? = nil,
        options: CallOptions = CallOptions(), dateCoding: DateCoding = .iso8601
    ) throws(CouchError) {
        // 1. validate
        try operation.validate()
        // 2. serialise
        do {
            // Dates are written as the client's configuration says.
            try DateCoding.with(dateCoding) { try operation.serialise() }
        } catch {
            if let couchError = error as? CouchError { throw couchError }
            throw CouchError(
                kind: .serialisation, message: "Building the request body failed: \(error)", underlying: error)
        }
        // 3. endpoint, parameters, method, data, content type, headers
        let endpoint = operation.endpoint
        let parameters = operation.parameters
        let method = operation.method
        var body = operation.data
        let streamedBody = body == nil ? operation.streamedBody : nil
        let contentType = operation.contentType
        var headers = operation.headers
        for field in options.headers { headers[field.name] = field.value }
        if headers["Accept"] == nil { headers["Accept"] = "application/json" }
        if let contentType, body != nil || streamedBody != nil { headers["Content-Type"] = contentType }
        // Large JSON bodies are sent gzip'd when the configuration asks (CouchDB decompresses them);
        // compressed once here, so a retried request sends the same bytes.
        if let gzipThreshold, let plain = body, plain.count >= gzipThreshold,
            contentType?.hasPrefix("application/json") == true, headers["Content-Encoding"] == nil
        {
            body = Gzip.compress(plain, level: .fastest)
            headers["Content-Encoding"] = "gzip"
        }
        // Whatever the operation: no `.`/`..` segment, no header that could inject another.
        for segment in endpoint.segments { try CouchValidation.validatePathSegment(segment, what: "Path segment") }
        for field in headers { try CouchValidation.validateHeader(name: field.name, value: field.value) }
        let url = try Self.url(base: baseURL, path: endpoint, parameters: parameters)
        if let callTimeout = options.timeout, !(callTimeout > 0) {
            throw CouchError.validation("A call's timeout must be more than 0 seconds, not \(callTimeout).")
        }
        var request = HTTPRequest(
            method: method, url: url, headers: headers, body: body, streamedBody: streamedBody,
            timeout: options.timeout ?? timeout)
        request.retryPolicy = options.retryPolicy
        request.operationName = String(describing: Op.self)
        self.request = request
        isIdempotent =
            operation.isIdempotent
            ?? RequestSafety.isSafeToRepeat(method: method, parameters: parameters, headers: headers)
    }

    /// Builds the URL from the base, the encoded path segments and the encoded query.
    static func url(base: URL, path: CouchPath, parameters: [URLQueryItem]) throws(CouchError) -> URL {
        guard var components = URLComponents(url: base, resolvingAgainstBaseURL: false) else {
            throw CouchError.validation("The server URL \(base) is not a valid URL.")
        }
        components.user = nil
        components.password = nil
        let basePath =
            components.percentEncodedPath.hasSuffix("/")
            ? String(components.percentEncodedPath.dropLast()) : components.percentEncodedPath
        components.percentEncodedPath = basePath + path.encoded
        if parameters.isEmpty {
            components.percentEncodedQuery = nil
        } else {
            components.percentEncodedQuery = parameters.map {
                PercentEncoding.encode($0.name) + "=" + PercentEncoding.encode($0.value ?? "")
            }.joined(separator: "&")
        }
        guard let url = components.url else {
            throw CouchError.validation("Could not build a URL for \(path).")
        }
        return url
    }

}
