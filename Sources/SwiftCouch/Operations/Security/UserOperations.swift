import Foundation

/// A user document in the `_users` database (`org.couchdb.user:{name}`).
///
/// ``password`` is write-only: set it to create a user or change a password, and it is sent as
/// `password` (the server replaces it with a PBKDF2 hash); it is never decoded and never shown in
/// a description. The hash fields the server stores are kept as read so that writing back a user
/// you read (to change roles, say) keeps the password. Members this type does not name are kept
/// in ``otherFields`` and written back. The id is not in the body; it is the URL's.
public struct CouchUser: Codable, Sendable, Equatable, CustomStringConvertible, CustomReflectable {
    /// The id prefix of user documents.
    public static let idPrefix = "org.couchdb.user:"

    /// The user name.
    public var name: String
    /// A new password to set; nil keeps the stored one. Never decoded.
    public var password: String?
    /// The user's roles (names the `_security` objects refer to).
    public var roles: [String]
    /// Always `user`.
    public var type: String
    /// The document revision, when read from the server (needed to update or delete).
    public var revision: String?
    /// The stored hash (read-only, kept for writing back): `password_scheme`, `pbkdf2_prf`,
    /// `iterations`, `salt`, `derived_key`, `password_sha`.
    public var storedCredentials: [String: JSONValue]
    /// Every other member of the document, written back unchanged.
    public var otherFields: [String: JSONValue]

    /// The document id: `org.couchdb.user:{name}`.
    public var id: String { Self.id(for: name) }

    /// The document id of the user called `name`.
    public static func id(for name: String) -> String { idPrefix + name }

    public init(name: String, password: String? = nil, roles: [String] = []) {
        self.name = name
        self.password = password
        self.roles = roles
        type = "user"
        revision = nil
        storedCredentials = [:]
        otherFields = [:]
    }

    private static let credentialKeys: Set = [
        "password_scheme", "pbkdf2_prf", "iterations", "salt", "derived_key", "password_sha",
    ]
    private static let ownKeys: Set = ["_id", "_rev", "name", "password", "roles", "type"]

    public init(from decoder: any Decoder) throws {
        let all = try [String: JSONValue](from: decoder)
        guard let name = all["name"]?.stringValue else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "A user document needs a string name."))
        }
        self.name = name
        password = nil
        roles = all["roles"]?.arrayValue?.compactMap(\.stringValue) ?? []
        type = all["type"]?.stringValue ?? "user"
        revision = all["_rev"]?.stringValue
        storedCredentials = all.filter { Self.credentialKeys.contains($0.key) }
        otherFields = all.filter { !Self.credentialKeys.contains($0.key) && !Self.ownKeys.contains($0.key) }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: DynamicCodingKey.self)
        for (key, value) in otherFields where !Self.ownKeys.contains(key) {
            try container.encode(value, forKey: DynamicCodingKey(key))
        }
        if password == nil {
            for (key, value) in storedCredentials {
                try container.encode(value, forKey: DynamicCodingKey(key))
            }
        }
        try container.encodeIfPresent(revision, forKey: DynamicCodingKey("_rev"))
        try container.encode(name, forKey: DynamicCodingKey("name"))
        try container.encodeIfPresent(password, forKey: DynamicCodingKey("password"))
        try container.encode(roles, forKey: DynamicCodingKey("roles"))
        try container.encode(type, forKey: DynamicCodingKey("type"))
    }

    public var description: String {
        "CouchUser(name: \(name), roles: \(roles)\(password == nil ? "" : ", password: <redacted>"))"
    }

    public var customMirror: Mirror {
        Mirror(self, children: ["name": name, "roles": roles, "revision": revision as Any])
    }
}

/// The users database and a user's name, shared by the user operations.
private struct UserLocation {
    var database: String
    var name: String

    func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.notEmpty(name, "User name")
        if name.hasPrefix("_") { throw CouchError.validation("User name '\(name)' must not start with '_'.") }
        if name.contains(":") { throw CouchError.validation("User name '\(name)' must not contain ':'.") }
    }

    var endpoint: CouchPath { CouchPath(database, CouchUser.id(for: name)) }
}

/// `PUT /_users/org.couchdb.user:{name}` — creates a user, or updates one (pass the revision,
/// from ``CouchUser/revision`` or the argument).
public struct PutUserOperation: JSONOperation {
    public typealias Response = DocumentWriteResponse

    /// The user.
    public var user: CouchUser
    /// The revision being updated; nil (and no ``CouchUser/revision``) to create. Defaults to nil.
    public var revision: String?
    /// The users database. Defaults to `_users`.
    public var database: String

    private var body: Data?

    public init(user: CouchUser, revision: String? = nil, database: String = "_users") {
        self.user = user
        self.revision = revision
        self.database = database
    }

    public func validate() throws(CouchError) {
        try UserLocation(database: database, name: user.name).validate()
        if let rev = revision ?? user.revision { try CouchValidation.validateRevision(rev) }
        if let password = user.password, password.isEmpty {
            throw CouchError.validation("password must not be empty (leave it nil to keep the stored one).")
        }
        if user.revision == nil, revision == nil, user.password == nil, user.storedCredentials.isEmpty {
            throw CouchError.validation("A new user needs a password.")
        }
    }

    public mutating func serialise() throws {
        var user = user
        if let revision { user.revision = revision }
        body = try JSONBody.encode(user)
    }

    public var endpoint: CouchPath { UserLocation(database: database, name: user.name).endpoint }
    public var method: HTTPMethod { .put }
    public var data: Data? { body }
    public var isIdempotent: Bool? { (revision ?? user.revision) != nil }
}

/// `GET /_users/org.couchdb.user:{name}` — reads a user (server admins, or the user itself
/// where `_users` allows it).
public struct GetUserOperation: JSONOperation {
    public typealias Response = CouchUser

    /// The user name.
    public var name: String
    /// The users database. Defaults to `_users`.
    public var database: String

    public init(name: String, database: String = "_users") {
        self.name = name
        self.database = database
    }

    public func validate() throws(CouchError) { try UserLocation(database: database, name: name).validate() }
    public var endpoint: CouchPath { UserLocation(database: database, name: name).endpoint }
}

/// `DELETE /_users/org.couchdb.user:{name}?rev=` — deletes a user.
public struct DeleteUserOperation: JSONOperation {
    public typealias Response = DocumentWriteResponse

    /// The user name.
    public var name: String
    /// The user document's current revision.
    public var revision: String
    /// The users database. Defaults to `_users`.
    public var database: String

    public init(name: String, revision: String, database: String = "_users") {
        self.name = name
        self.revision = revision
        self.database = database
    }

    public func validate() throws(CouchError) {
        try UserLocation(database: database, name: name).validate()
        try CouchValidation.validateRevision(revision)
    }

    public var endpoint: CouchPath { UserLocation(database: database, name: name).endpoint }
    public var method: HTTPMethod { .delete }
    public var parameters: [URLQueryItem] { [URLQueryItem(name: "rev", value: revision)] }
}
