import Foundation

/// A generated IBM Cloudant API key and its password (shown once: store it).
///
/// Its description never shows the password.
public struct CloudantAPIKey: Decodable, Sendable, Equatable, CustomStringConvertible, CustomReflectable {
    public var ok: Bool
    /// The key: use it as a user name, and grant it roles with ``SecurityObject/cloudant``.
    public var key: String
    /// The key's password.
    public var password: String

    public var description: String { "CloudantAPIKey(key: \(key), password: <redacted>)" }
    public var customMirror: Mirror { Mirror(self, children: ["key": key]) }
}

/// `POST /_api/v2/api_keys` — IBM Cloudant: generates an API key (legacy authentication).
public struct CreateCloudantAPIKeyOperation: JSONOperation {
    public typealias Response = CloudantAPIKey

    public init() {}

    public var endpoint: CouchPath { CouchPath("_api", "v2", "api_keys") }
    public var method: HTTPMethod { .post }
    public var headers: HTTPFields { JSONBody.emptyPostHeaders }
}

/// Cross-origin resource sharing settings.
public struct CORSConfiguration: Codable, Sendable, Equatable {
    /// Whether CORS is on.
    public var enabled: Bool
    /// Whether browsers may send credentials (cookies, `Authorization`).
    public var allowCredentials: Bool
    /// Allowed origins, with their scheme (`https://example.com`), or `["*"]`.
    public var origins: [String]

    public init(enabled: Bool, allowCredentials: Bool = false, origins: [String]) {
        self.enabled = enabled
        self.allowCredentials = allowCredentials
        self.origins = origins
    }

    enum CodingKeys: String, CodingKey {
        case origins
        case enabled = "enable_cors"
        case allowCredentials = "allow_credentials"
    }

    func validate() throws(CouchError) {
        if origins.contains(where: \.isEmpty) { throw CouchError.validation("origins must not contain \"\".") }
        if allowCredentials, origins.contains("*") {
            throw CouchError.validation("Browsers refuse credentials with origin '*'; list the origins.")
        }
    }

    /// The configuration as CouchDB's `[cors]` section and `chttpd/enable_cors`, read with
    /// ``GetConfigurationSectionOperation`` (`cors`) and ``GetConfigurationValueOperation``
    /// (`chttpd`, `enable_cors`).
    public init(couchDBSection section: [String: String], enableCORS: String?) {
        enabled = enableCORS == "true"
        allowCredentials = section["credentials"] == "true"
        origins = (section["origins"] ?? "").split(separator: ",").map {
            $0.trimmingCharacters(in: .whitespaces)
        }.filter { !$0.isEmpty }
    }

    /// The operations that write this configuration to a CouchDB node's `_config` (one value
    /// each: `chttpd/enable_cors`, `cors/credentials`, `cors/origins`). Run them in order.
    public func couchDBOperations(node: String = "_local") -> [SetConfigurationValueOperation] {
        [
            SetConfigurationValueOperation(section: "chttpd", key: "enable_cors", value: String(enabled), node: node),
            SetConfigurationValueOperation(
                section: "cors", key: "credentials", value: String(allowCredentials), node: node),
            SetConfigurationValueOperation(
                section: "cors", key: "origins", value: origins.joined(separator: ","), node: node),
        ]
    }
}

/// `GET /_api/v2/user/config/cors` — IBM Cloudant: the account's CORS settings. (On CouchDB read
/// the `cors` configuration section: see ``CORSConfiguration/init(couchDBSection:enableCORS:)``.)
public struct GetCloudantCORSOperation: JSONOperation {
    public typealias Response = CORSConfiguration
    public init() {}
    public var endpoint: CouchPath { CouchPath("_api", "v2", "user", "config", "cors") }
}

/// `PUT /_api/v2/user/config/cors` — IBM Cloudant: replaces the account's CORS settings. (On
/// CouchDB run ``CORSConfiguration/couchDBOperations(node:)``.)
public struct PutCloudantCORSOperation: JSONOperation, IdempotentOperation {
    public typealias Response = OKResponse

    /// The new settings.
    public var configuration: CORSConfiguration

    private var body: Data?

    public init(configuration: CORSConfiguration) { self.configuration = configuration }

    public func validate() throws(CouchError) { try configuration.validate() }
    public mutating func serialise() throws { body = try JSONBody.encode(configuration) }

    public var endpoint: CouchPath { CouchPath("_api", "v2", "user", "config", "cors") }
    public var method: HTTPMethod { .put }
    public var data: Data? { body }
}
