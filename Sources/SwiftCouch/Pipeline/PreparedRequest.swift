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
            preparing: &operation, base: session.serverBase, timeout: session.configuration.requestTimeout,
            gzipThreshold: session.configuration.gzipRequestBodiesOfAtLeast, options: options,
            dateCoding: session.configuration.dateCoding)
    }

    init<Op: CouchOperation>(
        preparing operation: inout Op, base: ServerBase, timeout: TimeInterval, gzipThreshold: Int? = nil,
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
        // Room for what this and the session add (Accept, Content-Type, Content-Encoding,
        // Authorization or Cookie, User-Agent, the caller's), without regrowing per field.
        headers.reserveCapacity(headers.count + options.headers.count + 6)
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
        guard let server = base.server else {
            throw CouchError.validation("The server URL \(base.url) is not a valid URL.")
        }
        let target = Self.target(base: base, path: endpoint, parameters: parameters)
        if let callTimeout = options.timeout, !(callTimeout > 0) {
            throw CouchError.validation("A call's timeout must be more than 0 seconds, not \(callTimeout).")
        }
        var request = HTTPRequest(
            method: method, server: server, target: target, headers: headers, body: body,
            streamedBody: streamedBody, timeout: options.timeout ?? timeout)
        request.retryPolicy = options.retryPolicy
        request.operationType = Op.self
        self.request = request
        isIdempotent =
            operation.isIdempotent
            ?? RequestSafety.isSafeToRepeat(method: method, parameters: parameters, headers: headers)
    }

    /// Builds the URL from the base, the encoded path segments and the encoded query; with the
    /// encoded path (the base's included) and query it was built from.
    static func url(
        base: ServerBase, path: CouchPath, parameters: [URLQueryItem]
    ) throws(CouchError) -> (url: URL, target: (path: String, query: String?)) {
        guard let origin = base.server?.origin else {
            throw CouchError.validation("The server URL \(base.url) is not a valid URL.")
        }
        let target = target(base: base, path: path, parameters: parameters)
        // Every piece is percent-encoded already, so the text is a valid URL as it stands.
        guard let url = URL(string: origin + target.path + (target.query.map { "?" + $0 } ?? "")) else {
            throw CouchError.validation("Could not build a URL for \(path).")
        }
        return (url, target)
    }

    /// The encoded path (the base's included) and query of a request.
    static func target(base: ServerBase, path: CouchPath, parameters: [URLQueryItem]) -> (
        path: String, query: String?
    ) {
        let fullPath = base.basePath + path.encoded
        var query: String?
        if !parameters.isEmpty {
            var text = ""
            for (position, item) in parameters.enumerated() {
                if position > 0 { text += "&" }
                text += PercentEncoding.encode(item.name)
                text += "="
                text += PercentEncoding.encode(item.value ?? "")
            }
            query = text
        }
        return (fullPath, query)
    }
}

/// The server's URL, split once into what every request's URL starts with.
struct ServerBase: Sendable {
    /// The URL as given.
    let url: URL
    /// Scheme, host, port and `scheme://host:port`; nil when the URL cannot be taken apart.
    let server: ServerOrigin?
    /// The base path, percent-encoded, without a trailing `/`: `""`, or `/couchdb` behind a proxy.
    let basePath: String

    init(_ url: URL) {
        self.url = url
        var components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        components?.user = nil
        components?.password = nil
        components?.percentEncodedQuery = nil
        components?.fragment = nil
        let path = components?.percentEncodedPath ?? ""
        basePath = path.hasSuffix("/") ? String(path.dropLast()) : path
        components?.percentEncodedPath = ""
        if let components, let origin = components.string {
            var host = components.host ?? ""
            if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            server = ServerOrigin(
                url: url, origin: origin, scheme: components.scheme?.lowercased() ?? "", host: host,
                port: components.port)
        } else {
            server = nil
        }
    }
}

/// The origin every request of a client goes to, taken apart once.
struct ServerOrigin: Sendable {
    /// The server URL as given (what a request's `url` falls back to).
    let url: URL
    /// `scheme://host:port`, without user information.
    let origin: String
    /// The scheme, lowercased.
    let scheme: String
    /// The host, without an IPv6 literal's brackets.
    let host: String
    let port: Int?
}
