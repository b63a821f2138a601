import CouchQuery
import Foundation

/// Who makes a request (CouchDB's `userCtx`): what the engine's access rules (a database's `_security` members and
/// admins, design documents need a database admin, server-wide endpoints need a server admin) and
/// `validate_doc_update` functions see. The engine never works it out itself: its caller authenticates and passes
/// it to ``CouchEngine/handle(_:user:)``.
public struct UserContext: Sendable, Hashable {
    /// The user's name; nil for an anonymous request (or the unnamed owner of an embedded database, ``admin``).
    public var name: String?
    /// The user's roles; `_admin` makes a server admin.
    public var roles: [String]

    /// A user with a name and roles.
    public init(name: String?, roles: [String] = []) {
        self.name = name
        self.roles = roles
    }

    /// Nobody: no name, no roles. Reads and writes only databases whose `_security` lists no members.
    public static let anonymous = UserContext(name: nil)

    /// A server admin with no name (roles `["_admin"]`): what an app that owns the engine's files acts as.
    public static let admin = UserContext(name: nil, roles: ["_admin"])

    /// Whether the user is a server admin (has the `_admin` role).
    public var isServerAdmin: Bool { roles.contains("_admin") }

    /// Whether the request is anonymous: no name and no roles.
    public var isAnonymous: Bool { name == nil && roles.isEmpty }

    /// The user as CouchDB writes a `userCtx`: `{"name": …, "roles": […]}`.
    package var json: JSON {
        ["name": name.map(JSON.string) ?? .null, "roles": .array(roles.map(JSON.string))]
    }
}

extension CouchEngine {
    // MARK: - Access control

    /// CouchDB's member check: admins always, everyone when the members lists are empty.
    func checkMember(_ db: Database, _ user: UserContext) throws(CouchError) {
        if user.isServerAdmin { return }
        let security = db.withLock { db.security }
        if isDatabaseAdmin(security, user) { return }
        let members = security["members"] ?? [:]
        let names = (members["names"]?.arrayValue ?? []).compactMap(\.stringValue)
        let roles = (members["roles"]?.arrayValue ?? []).compactMap(\.stringValue)
        if names.isEmpty && roles.isEmpty { return }
        if let name = user.name, names.contains(name) { return }
        if user.roles.contains(where: roles.contains) { return }
        if user.isAnonymous { throw CouchError(401, "unauthorized", "You are not authorized to access this db.") }
        throw CouchError(403, "forbidden", "You are not allowed to access this db.")
    }

    func isDatabaseAdmin(_ security: JSON, _ user: UserContext) -> Bool {
        if user.isServerAdmin { return true }
        let admins = security["admins"] ?? [:]
        let names = (admins["names"]?.arrayValue ?? []).compactMap(\.stringValue)
        let roles = (admins["roles"]?.arrayValue ?? []).compactMap(\.stringValue)
        if let name = user.name, names.contains(name) { return true }
        return user.roles.contains(where: roles.contains)
    }

    func checkDatabaseAdmin(_ db: Database, _ user: UserContext) throws(CouchError) {
        let security = db.withLock { db.security }
        if isDatabaseAdmin(security, user) { return }
        if user.isAnonymous { throw CouchError(401, "unauthorized", "You are not a db or server admin.") }
        throw CouchError(403, "forbidden", "You are not a db or server admin.")
    }

    func requireServerAdmin(_ user: UserContext) throws(CouchError) {
        if !user.isServerAdmin { throw CouchError.notServerAdmin }
    }
}
