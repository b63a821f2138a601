import CouchQuery
import CouchStore
import Foundation

/// Who an IAM API key (and the bearer tokens issued for it) stands for.
public struct IAMIdentity: Sendable, Hashable {
    /// The user name requests made with the key's tokens run as (`userCtx.name`).
    public var name: String
    /// The roles those requests get (`userCtx.roles`); include `_admin` for a server admin.
    public var roles: [String]

    /// An identity with a user name and roles.
    public init(name: String, roles: [String] = []) {
        self.name = name
        self.roles = roles
    }
}

/// The opaque bearer tokens issued by the IAM-style token endpoint, with their expiry.
final class TokenStore: @unchecked Sendable {
    // Safe: `tokens` is only touched while `lock` is held.
    private let lock = NSLock()
    private var tokens: [String: (identity: IAMIdentity, expires: TimeInterval)] = [:]

    /// Issues a new token for `identity`, good until `expires` (engine clock seconds).
    func issue(_ identity: IAMIdentity, expires: TimeInterval, now: TimeInterval) -> String {
        let token = Crypto.base64URL(Crypto.randomBytes(30))
        lock.lock()
        defer { lock.unlock() }
        if tokens.count > 10_000 { tokens = tokens.filter { $0.value.expires > now } }
        tokens[token] = (identity, expires)
        return token
    }

    /// The identity of a known token: nil when unknown, `.expired` when its lifetime has run out.
    func lookUp(_ token: String, now: TimeInterval) -> TokenLookup {
        lock.lock()
        defer { lock.unlock() }
        guard let entry = tokens[token] else { return .unknown }
        if entry.expires <= now {
            tokens[token] = nil
            return .expired
        }
        return .valid(entry.identity)
    }

    /// Revokes every token issued so far.
    func revokeAll() {
        lock.lock()
        tokens.removeAll()
        lock.unlock()
    }
}

enum TokenLookup {
    case valid(IAMIdentity)
    case expired
    case unknown
}

extension ServerEngine {
    /// Whether `Authorization: Bearer …` means anything to this engine (IAM keys or a JWT secret configured).
    /// Without either, CouchDB has no bearer handler and the header is ignored.
    var acceptsBearerTokens: Bool { !options.iamAPIKeys.isEmpty || options.jwtSecret != nil }

    /// The user of a bearer token: an IAM token issued by `POST /_iam/identity/token`, or an HS256 JWT signed
    /// with `options.jwtSecret` (CouchDB's `[jwt_auth]` with an `hmac:_default` key). Throws CouchDB's errors.
    func bearerUser(_ token: String) throws(CouchError) -> Identity {
        switch tokens.lookUp(token, now: clock.now) {
        case .valid(let identity):
            return Identity(user: UserContext(name: identity.name, roles: identity.roles), authenticatedBy: "iam")
        case .expired:
            throw CouchError(401, "unauthorized", "The bearer token has expired.")
        case .unknown:
            break
        }
        guard let secret = options.jwtSecret, token.split(separator: ".", omittingEmptySubsequences: false).count == 3
        else {
            throw CouchError(401, "unauthorized", "The bearer token is not valid.")
        }
        return try verifyJWT(token, secret: Data(secret.utf8))
    }

    /// Checks an HS256 JWT as CouchDB's `jwtf` does: header (`typ`, `alg`), then the required `exp` claim, then
    /// the signature; the user is `sub` with the roles in the `_couchdb.roles` claim.
    func verifyJWT(_ token: String, secret: Data) throws(CouchError) -> Identity {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        let malformed = CouchError.badRequest("Malformed authentication token")
        guard parts.count == 3, let headerData = Crypto.fromBase64URL(parts[0]),
            let payloadData = Crypto.fromBase64URL(parts[1]), let signature = Crypto.fromBase64URL(parts[2]),
            let header = try? JSON.parse(headerData), let claims = try? JSON.parse(payloadData)
        else { throw malformed }
        guard header.isObject, claims.isObject else { throw CouchError.badRequest("Not an object") }
        if let typ = header["typ"], typ.stringValue != "JWT" {
            throw CouchError.badRequest("Invalid typ header parameter")
        }
        guard let alg = header["alg"] else { throw CouchError.badRequest("Missing alg header parameter") }
        guard alg.stringValue == "HS256" else { throw CouchError.badRequest("Invalid alg header parameter") }
        guard let exp = claims["exp"] else { throw CouchError.badRequest("Missing exp claim") }
        guard let expiry = exp.doubleValue, expiry > clock.now.rounded(.down) else {
            throw CouchError(401, "unauthorized", "exp not in future")
        }
        let expected = Crypto.hmacSHA256(key: secret, message: Data((parts[0] + "." + parts[1]).utf8))
        guard Crypto.constantTimeEqual(expected, signature) else {
            throw CouchError.badRequest("Bad HMAC in authentication token")
        }
        var roles: [String] = []
        if let claim = claims["_couchdb.roles"] {
            if let list = claim.arrayValue {
                let names = list.compactMap(\.stringValue)
                guard names.count == list.count else { throw CouchError.badRequest("Malformed token") }
                roles = names
            } else if let text = claim.stringValue {
                roles = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter {
                    !$0.isEmpty
                }
            } else {
                throw CouchError.badRequest("Malformed token")
            }
        }
        guard let sub = claims["sub"]?.stringValue else {
            throw CouchError(401, "unauthorized", "Token missing sub claim.")
        }
        return Identity(user: UserContext(name: sub, roles: roles), authenticatedBy: "jwt")
    }

    // MARK: - POST /_iam/identity/token

    /// IBM Cloud IAM's token endpoint: exchanges an API key (form `grant_type=urn:ibm:params:oauth:grant-type:apikey`
    /// and `apikey=…`) for an opaque bearer token that lasts `options.iamTokenLifetime` seconds.
    func iamToken(_ ctx: ServerContext) throws(CouchError) -> ServerResponse {
        guard ctx.segments == ["_iam", "identity", "token"] else { throw CouchError.notFound("missing") }
        guard ctx.method == "POST" else { throw CouchError.methodNotAllowed("POST") }
        let contentType = (ctx.request.headers["Content-Type"] ?? "").lowercased()
        guard contentType.hasPrefix("application/x-www-form-urlencoded") else {
            return iamError(400, "BXNIM0109E", "Property missing or empty. Property: grant_type")
        }
        let form = formFields(ctx.request.body)
        let grantType = form.last { $0.0 == "grant_type" }?.1 ?? ""
        guard grantType == "urn:ibm:params:oauth:grant-type:apikey" else {
            if grantType.isEmpty {
                return iamError(400, "BXNIM0109E", "Property missing or empty. Property: grant_type")
            }
            return iamError(400, "BXNIM0103E", "Unsupported grant type: \(grantType)")
        }
        guard let apiKey = form.last(where: { $0.0 == "apikey" })?.1, !apiKey.isEmpty else {
            return iamError(400, "BXNIM0109E", "Property missing or empty. Property: apikey")
        }
        guard let identity = options.iamAPIKeys[apiKey] else {
            return iamError(400, "BXNIM0415E", "Provided API key could not be found.")
        }
        let now = clock.now
        let lifetime = max(options.iamTokenLifetime, 1)
        let token = tokens.issue(identity, expires: now + Double(lifetime), now: now)
        let body: JSON = .object([
            ("access_token", .string(token)),
            ("refresh_token", "not_supported"),
            ("token_type", "Bearer"),
            ("expires_in", .int(Int64(lifetime))),
            ("expiration", .int(Int64(now) + Int64(lifetime))),
            ("scope", "ibm openid"),
        ])
        return Reply.json(200, body, cache: "no-store")
    }

    /// IAM's error body: `{"errorCode": …, "errorMessage": …, "context": {…}}`.
    private func iamError(_ status: Int, _ code: String, _ message: String) -> ServerResponse {
        let context: JSON = .object([
            ("requestId", .string(UUID().uuidString.lowercased())),
            ("requestType", "incoming.Identity_Token"),
            ("url", "http://127.0.0.1"),
            ("locale", "en_US"),
        ])
        return Reply.json(
            status, .object([("errorCode", .string(code)), ("errorMessage", .string(message)), ("context", context)]),
            cache: "no-store")
    }

    /// The fields of an `application/x-www-form-urlencoded` body, decoded (`+` as a space).
    func formFields(_ body: Data) -> [(String, String)] {
        String(decoding: body, as: UTF8.self).split(separator: "&").map { pair in
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ s: Substring) -> String {
                s.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(s)
            }
            return (decode(kv[0]), kv.count > 1 ? decode(kv[1]) : "")
        }
    }
}

extension ServerEngine {
    /// An HS256 JWT for `subject` with `roles` in the `_couchdb.roles` claim, expiring `expiresIn` seconds from
    /// now by the engine's clock (negative for one that has expired), signed with `options.jwtSecret` (or
    /// `secret` when given). For tests of `AuthenticationMode.bearerToken`.
    public func makeJWT(subject: String, roles: [String] = [], expiresIn: Int = 3600, secret: String? = nil) -> String {
        let claims: JSON = .object([
            ("sub", .string(subject)),
            ("_couchdb.roles", .array(roles.map(JSON.string))),
            ("iat", .int(Int64(clock.now))),
            ("exp", .int(Int64(clock.now) + Int64(expiresIn))),
        ])
        return Crypto.signJWT(claims: claims, secret: Data((secret ?? options.jwtSecret ?? "").utf8))
    }
}

extension Crypto {
    /// Compares two byte strings in time that depends only on their lengths.
    static func constantTimeEqual(_ a: Data, _ b: Data) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for (x, y) in zip(a, b) { difference |= x ^ y }
        return difference == 0
    }

    /// An HS256 JWT (`header.claims.signature`, base64url without padding) for `claims`, signed with `secret`.
    static func signJWT(claims: JSON, secret: Data) -> String {
        let header: JSON = ["alg": "HS256", "typ": "JWT"]
        let signingInput = base64URL(Data(header.serialized.utf8)) + "." + base64URL(Data(claims.serialized.utf8))
        return signingInput + "." + base64URL(hmacSHA256(key: secret, message: Data(signingInput.utf8)))
    }
}
