import Foundation

/// What `GET /` says about the server.
public struct ServerInfo: Codable, Sendable, Equatable {
    /// The vendor block of the welcome message.
    public struct Vendor: Codable, Sendable, Equatable {
        public var name: String
        public var version: String?
    }
    /// `"Welcome"`.
    public var couchdb: String
    /// The CouchDB version, e.g. `3.5.0`.
    public var version: String
    /// The git commit of the build, when the server says.
    public var gitSHA: String?
    /// The server's unique id, when the server says.
    public var uuid: String?
    /// Enabled features (`partitioned`, `scheduler`, ...).
    public var features: [String]?
    public var vendor: Vendor?

    enum CodingKeys: String, CodingKey {
        case couchdb, version, uuid, features, vendor
        case gitSHA = "git_sha"
    }
}

/// `GET /` — the server's welcome message: version, features, vendor.
public struct GetServerInfoOperation: JSONOperation {
    public typealias Response = ServerInfo
    public init() {}
    public var endpoint: CouchPath { .root }
}
