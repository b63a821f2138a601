import Foundation

/// User names and roles: one side (admins or members) of a `_security` object.
public struct NamesAndRoles: Codable, Sendable, Hashable {
    /// User names.
    public var names: [String]
    /// Role names.
    public var roles: [String]

    public init(names: [String] = [], roles: [String] = []) {
        self.names = names
        self.roles = roles
    }

    /// Nobody.
    public static let none = NamesAndRoles()

    /// Whether it lists nobody (a database whose members are empty is public).
    public var isEmpty: Bool { names.isEmpty && roles.isEmpty }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        names = try container.decodeIfPresent([String].self, forKey: .names) ?? []
        roles = try container.decodeIfPresent([String].self, forKey: .roles) ?? []
    }

    enum CodingKeys: String, CodingKey { case names, roles }
}

/// A role IBM Cloudant's security object grants.
public struct CloudantRole: RawRepresentable, Codable, Sendable, Hashable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// Read documents.
    public static let reader = CloudantRole(rawValue: "_reader")
    /// Write documents (not design documents).
    public static let writer = CloudantRole(rawValue: "_writer")
    /// Everything, `_security` included.
    public static let admin = CloudantRole(rawValue: "_admin")
    /// Replicate from the database.
    public static let replicator = CloudantRole(rawValue: "_replicator")
    /// Write design documents.
    public static let design = CloudantRole(rawValue: "_design")
    /// Read and write `_security`.
    public static let security = CloudantRole(rawValue: "_security")

    public var description: String { rawValue }
}

/// A database's security object: who administers it and who may read and write it.
///
/// On IBM Cloudant it also carries ``cloudant`` (API keys and users → roles, `nobody` for
/// anonymous access) and ``couchdbAuthOnly``.
public struct SecurityObject: Codable, Sendable, Equatable {
    /// Database admins: may change design documents and `_security`.
    public var admins: NamesAndRoles
    /// Members: may read and write documents. Empty names and roles make the database public.
    public var members: NamesAndRoles
    /// IBM Cloudant: user or API key → roles. Defaults to nil (not sent).
    public var cloudant: [String: [CloudantRole]]?
    /// IBM Cloudant: use only CouchDB-style `_users` authentication for this database.
    /// Defaults to nil (not sent).
    public var couchdbAuthOnly: Bool?

    public init(
        admins: NamesAndRoles = .none, members: NamesAndRoles = .none, cloudant: [String: [CloudantRole]]? = nil,
        couchdbAuthOnly: Bool? = nil
    ) {
        self.admins = admins
        self.members = members
        self.cloudant = cloudant
        self.couchdbAuthOnly = couchdbAuthOnly
    }

    enum CodingKeys: String, CodingKey {
        case admins, members, cloudant
        case couchdbAuthOnly = "couchdb_auth_only"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        admins = try container.decodeIfPresent(NamesAndRoles.self, forKey: .admins) ?? .none
        members = try container.decodeIfPresent(NamesAndRoles.self, forKey: .members) ?? .none
        cloudant = try container.decodeIfPresent([String: [CloudantRole]].self, forKey: .cloudant)
        couchdbAuthOnly = try container.decodeIfPresent(Bool.self, forKey: .couchdbAuthOnly)
    }
}

/// Which API serves a database's security object.
public enum SecurityAPI: Sendable, Hashable {
    /// CouchDB's `/{db}/_security`.
    case couchDB
    /// IBM Cloudant's `/_api/v2/db/{db}/_security` (with Cloudant roles).
    case cloudant

    func path(_ database: String) -> CouchPath {
        switch self {
        case .couchDB: return CouchPath(database, "_security")
        case .cloudant: return CouchPath("_api", "v2", "db", database, "_security")
        }
    }
}

/// `GET /{db}/_security` (or Cloudant's `GET /_api/v2/db/{db}/_security`) — who administers
/// and who may use a database.
public struct GetSecurityOperation: JSONOperation {
    public typealias Response = SecurityObject

    /// The database.
    public var database: String
    /// Which API to ask. Defaults to `.couchDB`.
    public var api: SecurityAPI

    public init(database: String, api: SecurityAPI = .couchDB) {
        self.database = database
        self.api = api
    }

    public func validate() throws(CouchError) { try CouchValidation.validateDatabaseName(database) }
    public var endpoint: CouchPath { api.path(database) }
}

/// `PUT /{db}/_security` (or Cloudant's `PUT /_api/v2/db/{db}/_security`) — replaces a
/// database's security object (server or database admins only; a member gets CouchDB's 500
/// `no_majority`).
public struct PutSecurityOperation: JSONOperation, IdempotentOperation {
    public typealias Response = OKResponse

    /// The database.
    public var database: String
    /// The new security object.
    public var security: SecurityObject
    /// Which API to write through. Defaults to `.couchDB`.
    public var api: SecurityAPI

    private var body: Data?

    public init(database: String, security: SecurityObject, api: SecurityAPI = .couchDB) {
        self.database = database
        self.security = security
        self.api = api
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        if api == .couchDB, security.cloudant != nil || security.couchdbAuthOnly != nil {
            throw CouchError.validation("cloudant and couchdbAuthOnly are IBM Cloudant settings; use api: .cloudant.")
        }
    }

    public mutating func serialise() throws { body = try JSONBody.encode(security) }

    public var endpoint: CouchPath { api.path(database) }
    public var method: HTTPMethod { .put }
    public var data: Data? { body }
}
