import Foundation

/// The source or target of a replication.
public enum ReplicationEndpoint: Codable, Sendable, Hashable, CustomStringConvertible {
    /// A database on the server that runs the replication, by name (`"mydb"`).
    case database(String)
    /// A database by URL, with optional extra request headers (for example `Authorization`) and
    /// Basic credentials (sent as `auth.basic`, CouchDB 3.2+) instead of credentials in the URL.
    /// CouchDB takes credentials in the URL verbatim, without percent-decoding them, so a name or
    /// password with a character a URL must escape works only in `basicAuth`.
    case remote(url: URL, headers: [String: String] = [:], basicAuth: Credentials? = nil)

    public init(from decoder: any Decoder) throws {
        if let text = try? decoder.singleValueContainer().decode(String.self) {
            if text.contains("://"), let url = URL(string: text) {
                self = .remote(url: url)
            } else {
                self = .database(text)
            }
            return
        }
        let object = try Remote(from: decoder)
        let basic = object.auth?.basic.map { Credentials(username: $0.username, password: $0.password) }
        self = .remote(url: object.url, headers: object.headers ?? [:], basicAuth: basic)
    }

    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .database(let name):
            var container = encoder.singleValueContainer()
            try container.encode(name)
        case .remote(let url, let headers, let basicAuth):
            if headers.isEmpty, basicAuth == nil {
                var container = encoder.singleValueContainer()
                try container.encode(url.absoluteString)
                return
            }
            let auth = basicAuth.map { Remote.Auth(basic: .init(username: $0.username, password: $0.password)) }
            try Remote(url: url, headers: headers.isEmpty ? nil : headers, auth: auth).encode(to: encoder)
        }
    }

    private struct Remote: Codable {
        struct Auth: Codable {
            struct Basic: Codable {
                var username: String
                var password: String
            }
            var basic: Basic?
        }
        var url: URL
        var headers: [String: String]?
        var auth: Auth?
    }

    func validate(_ name: String) throws(CouchError) {
        switch self {
        case .database(let database): try CouchValidation.validateDatabaseName(database)
        case .remote(let url, _, _):
            guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
                throw CouchError.validation("\(name) URL must be http or https.")
            }
        }
    }

    /// The endpoint without secrets: credentials in the URL, header values and passwords are
    /// replaced by `<redacted>`.
    public var description: String {
        switch self {
        case .database(let name): return name
        case .remote(let url, let headers, let basicAuth):
            var text = Redaction.redact(url.absoluteString)
            if !headers.isEmpty { text += " headers: \(headers.keys.sorted()) <redacted>" }
            if let basicAuth { text += " basic: \(basicAuth.username):<redacted>" }
            return text
        }
    }
}

/// The settings of a replication, shared by `POST /_replicate` and `_replicator` documents.
///
/// Every option but ``source`` and ``target`` defaults to nil: left out, so the server's default
/// applies.
public struct ReplicationSettings: Codable, Sendable, Hashable {
    /// Where documents come from.
    public var source: ReplicationEndpoint
    /// Where documents go.
    public var target: ReplicationEndpoint
    /// Create the target database if it is missing. Defaults to nil (false).
    public var createTarget: Bool?
    /// Options for creating the target (`{"q": 8, "partitioned": true}`). Defaults to nil.
    public var createTargetParams: JSONValue?
    /// Keep replicating new changes. Defaults to nil (false: one shot).
    public var continuous: Bool?
    /// Only these documents. Defaults to nil (all).
    public var docIDs: [String]?
    /// A filter function (`ddoc/name`). Defaults to nil.
    public var filter: String?
    /// Parameters for ``filter`` (`req.query`). Defaults to nil.
    public var queryParams: [String: String]?
    /// Only documents matching this Mango selector. Defaults to nil.
    public var selector: Selector?
    /// Start from this source sequence instead of the checkpoint. Defaults to nil.
    public var sinceSeq: CouchSequence?
    /// Replicate only winning revisions, not conflicts (CouchDB 3.3+). Defaults to nil (false).
    public var winningRevsOnly: Bool?
    /// Write checkpoints so a restart resumes. Defaults to nil (true).
    public var useCheckpoints: Bool?
    /// Milliseconds between checkpoints. Defaults to nil (the server's).
    public var checkpointInterval: Int?
    /// Parallel HTTP connections. Defaults to nil (the server's 20).
    public var httpConnections: Int?
    /// Worker processes. Defaults to nil (the server's 4).
    public var workerProcesses: Int?
    /// Documents per worker batch. Defaults to nil (the server's 500).
    public var workerBatchSize: Int?
    /// Milliseconds before a request to an endpoint times out. Defaults to nil (the server's 30 s).
    public var connectionTimeout: Int?
    /// Retries per failed request. Defaults to nil (the server's 5).
    public var retriesPerRequest: Int?
    /// The proxy for the source (`http://proxy:8080`). Defaults to nil.
    public var sourceProxy: String?
    /// The proxy for the target. Defaults to nil.
    public var targetProxy: String?
    /// Run as this user (server admins only). Defaults to nil (the requester).
    public var userCtx: UserContext?

    public init(
        source: ReplicationEndpoint, target: ReplicationEndpoint, createTarget: Bool? = nil,
        continuous: Bool? = nil, docIDs: [String]? = nil, filter: String? = nil, selector: Selector? = nil,
        sinceSeq: CouchSequence? = nil
    ) {
        self.source = source
        self.target = target
        self.createTarget = createTarget
        self.continuous = continuous
        self.docIDs = docIDs
        self.filter = filter
        self.selector = selector
        self.sinceSeq = sinceSeq
    }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case source, target, continuous, filter, selector
        case createTarget = "create_target"
        case createTargetParams = "create_target_params"
        case docIDs = "doc_ids"
        case queryParams = "query_params"
        case sinceSeq = "since_seq"
        case winningRevsOnly = "winning_revs_only"
        case useCheckpoints = "use_checkpoints"
        case checkpointInterval = "checkpoint_interval"
        case httpConnections = "http_connections"
        case workerProcesses = "worker_processes"
        case workerBatchSize = "worker_batch_size"
        case connectionTimeout = "connection_timeout"
        case retriesPerRequest = "retries_per_request"
        case sourceProxy = "source_proxy"
        case targetProxy = "target_proxy"
        case userCtx = "user_ctx"
    }

    func validate() throws(CouchError) {
        try source.validate("source")
        try target.validate("target")
        try CouchValidation.notEmpty(docIDs, "docIDs")
        let filters = [docIDs != nil, filter != nil, selector != nil].filter { $0 }.count
        if filters > 1 { throw CouchError.validation("Use only one of docIDs, filter and selector.") }
        if queryParams != nil, filter == nil { throw CouchError.validation("queryParams needs a filter.") }
        if let filter, !filter.contains("/") {
            throw CouchError.validation("filter must be 'designdoc/filtername' (got '\(filter)').")
        }
        try selector?.validate()
        for (value, name) in [
            (checkpointInterval, "checkpointInterval"), (httpConnections, "httpConnections"),
            (workerProcesses, "workerProcesses"), (workerBatchSize, "workerBatchSize"),
            (connectionTimeout, "connectionTimeout"),
        ] {
            try CouchValidation.positive(value, name)
        }
        try CouchValidation.nonNegative(retriesPerRequest, "retriesPerRequest")
    }
}

/// One session in a replication's history (one-shot `_replicate` answers).
public struct ReplicationHistory: Decodable, Sendable, Equatable {
    public var sessionID: String?
    public var startTime: String?
    public var endTime: String?
    public var startLastSeq: CouchSequence?
    public var endLastSeq: CouchSequence?
    public var recordedSeq: CouchSequence?
    public var missingChecked: Int?
    public var missingFound: Int?
    public var docsRead: Int?
    public var docsWritten: Int?
    public var docWriteFailures: Int?

    enum CodingKeys: String, CodingKey {
        case sessionID = "session_id"
        case startTime = "start_time"
        case endTime = "end_time"
        case startLastSeq = "start_last_seq"
        case endLastSeq = "end_last_seq"
        case recordedSeq = "recorded_seq"
        case missingChecked = "missing_checked"
        case missingFound = "missing_found"
        case docsRead = "docs_read"
        case docsWritten = "docs_written"
        case docWriteFailures = "doc_write_failures"
    }
}
