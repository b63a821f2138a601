import Foundation

/// Who a request is made as: a name (nil when anonymous) and roles.
public struct UserContext: Codable, Sendable, Hashable {
    /// The user name; nil for an anonymous request.
    public var name: String?
    /// The user's roles (`_admin` for server admins).
    public var roles: [String]

    public init(name: String?, roles: [String]) {
        self.name = name
        self.roles = roles
    }

    /// Whether this is a server admin.
    public var isAdmin: Bool { roles.contains("_admin") }
}

/// What `GET /_session` says about the current session.
public struct SessionInfo: Decodable, Sendable, Equatable {
    /// How the server sees this session.
    public struct Info: Decodable, Sendable, Equatable {
        /// The authentication handlers the server accepts (`cookie`, `default`, ...).
        public var authenticationHandlers: [String]
        /// How this request was authenticated (`cookie`, `default`); absent when anonymous.
        public var authenticated: String?
        /// The users database, when the server says.
        public var authenticationDb: String?

        enum CodingKeys: String, CodingKey {
            case authenticated
            case authenticationHandlers = "authentication_handlers"
            case authenticationDb = "authentication_db"
        }
    }

    public var ok: Bool
    /// Who the request was made as.
    public var userCtx: UserContext
    /// How the server sees this session.
    public var info: Info?
}

/// `GET /_session` — who the current request is authenticated as (anonymous when not).
public struct GetSessionOperation: JSONOperation {
    public typealias Response = SessionInfo
    public init() {}
    public var endpoint: CouchPath { CouchPath("_session") }
}

/// What a successful `POST /_session` answers (the `AuthSession` cookie is in the response's
/// `Set-Cookie` header).
public struct SessionLogin: Codable, Sendable, Equatable {
    public var ok: Bool
    /// The user name.
    public var name: String?
    /// The user's roles.
    public var roles: [String]

    public init(ok: Bool, name: String?, roles: [String]) {
        self.ok = ok
        self.name = name
        self.roles = roles
    }
}

/// `POST /_session` — logs in with a name and password and gets an `AuthSession` cookie (in
/// ``CouchResponse/headers``, `Set-Cookie`).
///
/// The client logs in by itself when it is configured with credentials; use this operation to
/// check a user's password or to obtain a cookie for another party. The body is JSON; the
/// transcript log and the error descriptions redact its `password`, and this value's own
/// description never shows it. Not retried on 5xx (a login is not idempotent with lock-outs).
public struct CreateSessionOperation: JSONOperation, CustomStringConvertible, CustomReflectable {
    public typealias Response = SessionLogin

    /// The user name and password.
    public var credentials: Credentials

    private var body: Data?

    public init(credentials: Credentials) { self.credentials = credentials }

    /// Logs in as `name` with `password`.
    public init(name: String, password: String) {
        self.init(credentials: Credentials(username: name, password: password))
    }

    public func validate() throws(CouchError) {
        try CouchValidation.notEmpty(credentials.username, "name")
    }

    public mutating func serialise() throws {
        body = try JSONBody.encode(["name": credentials.username, "password": credentials.password])
    }

    public var endpoint: CouchPath { CouchPath("_session") }
    public var method: HTTPMethod { .post }
    public var data: Data? { body }
    public var isIdempotent: Bool? { false }

    public var description: String { "CreateSessionOperation(name: \(credentials.username), password: <redacted>)" }
    public var customMirror: Mirror { Mirror(self, children: ["name": credentials.username]) }
}

/// `DELETE /_session` — logs out: the server answers with an emptied `AuthSession` cookie.
///
/// CouchDB cookies are stateless: a copy of the old cookie stays valid until it expires.
public struct DeleteSessionOperation: JSONOperation, IdempotentOperation {
    public typealias Response = OKResponse
    public init() {}
    public var endpoint: CouchPath { CouchPath("_session") }
    public var method: HTTPMethod { .delete }
}
