import CouchQuery
import Foundation

/// Who is making a request (CouchDB's `userCtx`).
struct UserContext: Sendable {
    var name: String?
    var roles: [String]
    /// `cookie`, `default` (Basic), `iam` (a token from the IAM endpoint) or `jwt`, nil when anonymous.
    var authenticatedBy: String?

    static let anonymous = UserContext(name: nil, roles: [], authenticatedBy: nil)

    var isServerAdmin: Bool { roles.contains("_admin") }
    var isAnonymous: Bool { name == nil }

    var json: JSON {
        ["name": name.map(JSON.string) ?? .null, "roles": .array(roles.map(JSON.string))]
    }
}

/// A user's stored credentials.
struct UserCredentials {
    var name: String
    var roles: [String]
    var salt: String
    /// nil for the configured server admin (its password is compared directly).
    var derivedKey: String?
    var iterations: Int
    var plainPassword: String?
}

/// Cookie secrets, failed-login counters and a cache of verified passwords (CouchDB caches them too,
/// so that Basic auth does not rerun PBKDF2 on every request).
final class SessionState: @unchecked Sendable {
    // Safe: every member is only touched while `lock` is held.
    private let lock = NSLock()
    private var secret: Data
    private var failures: [String: [TimeInterval]] = [:]
    private var verified: [String: String] = [:]

    static let lockoutMessage = "Account is temporarily locked due to multiple authentication failures"

    init(secret: Data) { self.secret = secret }

    var currentSecret: Data {
        lock.lock()
        defer { lock.unlock() }
        return secret
    }

    func rotate() -> Data {
        lock.lock()
        defer { lock.unlock() }
        secret = Crypto.randomBytes(32)
        return secret
    }

    /// The signature CouchDB puts after `name:timehex:` (HMAC over `name:timehex`, keyed by secret + salt).
    func sign(_ session: String, salt: String) -> Data {
        Crypto.hmacSHA256(key: currentSecret + Data(salt.utf8), message: Data(session.utf8))
    }

    func cookieValue(name: String, salt: String, time: Int) -> String {
        let session = name + ":" + String(time, radix: 16, uppercase: true)
        return Crypto.base64URL(Data((session + ":").utf8) + sign(session, salt: salt))
    }

    func isLockedOut(_ key: String, now: TimeInterval) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        let recent = (failures[key] ?? []).filter { now - $0 < 300 }
        failures[key] = recent
        return recent.count >= 5
    }

    func recordFailure(_ key: String, now: TimeInterval) {
        lock.lock()
        failures[key, default: []].append(now)
        lock.unlock()
    }

    func cachedVerification(_ key: String) -> String? {
        lock.lock()
        defer { lock.unlock() }
        return verified[key]
    }

    func cacheVerification(_ key: String, derivedKey: String) {
        lock.lock()
        if verified.count > 10_000 { verified.removeAll() }
        verified[key] = derivedKey
        lock.unlock()
    }
}

extension CouchEngine {
    // MARK: - Credentials

    /// Looks up a user: the configured admin, or a user document in `_users`.
    func credentials(for name: String) -> UserCredentials? {
        if name == options.adminName {
            return UserCredentials(
                name: name, roles: ["_admin"], salt: adminSalt, derivedKey: nil, iterations: 0,
                plainPassword: options.adminPassword)
        }
        guard let users = database(named: "_users") else { return nil }
        let doc: RevNode? = users.withLock {
            guard let entry = users.docs["org.couchdb.user:" + name], let winner = entry.winner, !winner.deleted else {
                return nil
            }
            return winner
        }
        guard let body = doc?.body else { return nil }
        let roles = (body["roles"]?.arrayValue ?? []).compactMap(\.stringValue)
        return UserCredentials(
            name: name, roles: roles, salt: body["salt"]?.stringValue ?? "",
            derivedKey: body["derived_key"]?.stringValue,
            iterations: Int(body["iterations"]?.intValue ?? 10), plainPassword: nil)
    }

    /// Checks a password, with CouchDB's lockout after repeated failures. Returns the user on success, nil on a
    /// wrong password or unknown user; throws 403 when locked out.
    func authenticate(name: String, password: String) throws(CouchError) -> UserCredentials? {
        let creds = credentials(for: name)
        let lockKey = name + "\u{0}" + (creds?.salt ?? "")
        let now = clock.now
        if sessions.isLockedOut(lockKey, now: now) {
            throw CouchError(403, "forbidden", SessionState.lockoutMessage)
        }
        guard let creds else {
            sessions.recordFailure(lockKey, now: now)
            return nil
        }
        let ok: Bool
        if let plain = creds.plainPassword {
            ok = plain == password
        } else if let derived = creds.derivedKey {
            let cacheKey = passwordCacheKey(name: name, salt: creds.salt, password: password)
            if sessions.cachedVerification(cacheKey) == derived {
                ok = true
            } else {
                let computed = Crypto.hex(
                    Crypto.pbkdf2SHA256(
                        password: Data(password.utf8), salt: Data(creds.salt.utf8), iterations: creds.iterations))
                ok = computed == derived
                if ok { sessions.cacheVerification(cacheKey, derivedKey: derived) }
            }
        } else {
            ok = false
        }
        if !ok {
            sessions.recordFailure(lockKey, now: now)
            return nil
        }
        return creds
    }

    func passwordCacheKey(name: String, salt: String, password: String) -> String {
        name + "\u{0}" + salt + "\u{0}" + Crypto.hex(Crypto.sha256(Data(password.utf8)))
    }

    // MARK: - Request authentication

    /// Works out the user of a request from its AuthSession cookie or Basic credentials.
    /// Returns the user and, when a cookie is due for renewal, the `Set-Cookie` value to send.
    func identify(_ request: ServerRequest) throws(CouchError) -> (UserContext, String?) {
        if let cookie = authSessionCookie(request), !cookie.isEmpty {
            guard let decoded = Crypto.fromBase64URL(cookie) else { throw malformedCookie }
            let parts = decoded.split(separator: UInt8(ascii: ":"), maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3 else { throw malformedCookie }
            let user = String(decoding: parts[0], as: UTF8.self)
            let timeHex = String(decoding: parts[1], as: UTF8.self)
            let hash = Data(parts[2])
            if let creds = credentials(for: user), let stamp = Int(timeHex, radix: 16) {
                let now = Int(clock.now)
                let timeout = options.sessionTimeout
                if now < stamp + timeout, sessions.sign(user + ":" + timeHex, salt: creds.salt) == hash {
                    let timeLeft = stamp + timeout - now
                    var refresh: String?
                    if Double(timeLeft) < Double(timeout) * 0.9 {
                        refresh = sessionCookieHeader(sessions.cookieValue(name: user, salt: creds.salt, time: now))
                    }
                    return (UserContext(name: user, roles: creds.roles, authenticatedBy: "cookie"), refresh)
                }
            }
        }
        if acceptsBearerTokens, let auth = request.headers["Authorization"], auth.lowercased().hasPrefix("bearer ") {
            return (try bearerUser(auth.dropFirst(7).trimmingCharacters(in: .whitespaces)), nil)
        }
        if let auth = request.headers["Authorization"], auth.lowercased().hasPrefix("basic ") {
            let encoded = auth.dropFirst(6).trimmingCharacters(in: .whitespaces)
            guard let data = Data(base64Encoded: encoded), let text = String(data: data, encoding: .utf8),
                let colon = text.firstIndex(of: ":")
            else {
                throw CouchError(401, "unauthorized", "Name or password is incorrect.")
            }
            let name = String(text[..<colon])
            let password = String(text[text.index(after: colon)...])
            guard let creds = try authenticate(name: name, password: password) else {
                throw CouchError(401, "unauthorized", "Name or password is incorrect.")
            }
            return (UserContext(name: creds.name, roles: creds.roles, authenticatedBy: "default"), nil)
        }
        return (.anonymous, nil)
    }

    private var malformedCookie: CouchError {
        CouchError(400, "bad_request", "Malformed AuthSession cookie. Please clear your cookies.")
    }

    func authSessionCookie(_ request: ServerRequest) -> String? {
        for header in request.headers.values("Cookie") {
            for part in header.split(separator: ";") {
                let pair = part.trimmingCharacters(in: .whitespaces)
                if pair.hasPrefix("AuthSession=") {
                    var value = String(pair.dropFirst("AuthSession=".count))
                    if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 {
                        value = String(value.dropFirst().dropLast())
                    }
                    return value
                }
            }
        }
        return nil
    }

    /// `AuthSession=<value>; Version=1; Expires=…; Max-Age=…; Path=/; HttpOnly`.
    func sessionCookieHeader(_ value: String) -> String {
        let timeout = options.sessionTimeout
        return
            "AuthSession=\(value); Version=1; Expires=\(cookieDate(clock.now + Double(timeout))); Max-Age=\(timeout); Path=/; HttpOnly"
    }

    // MARK: - /_session

    func handleSession(_ ctx: RequestContext) throws(CouchError) -> ServerResponse {
        let request = ctx.request
        switch request.method {
        case "GET", "HEAD":
            var handlers: [JSON] = ["cookie", "default"]
            if options.jwtSecret != nil { handlers.insert("jwt", at: 0) }
            if !options.iamAPIKeys.isEmpty { handlers.insert("iam", at: 0) }
            var info: [(String, JSON)] = [("authentication_handlers", .array(handlers))]
            if let by = ctx.user.authenticatedBy { info.append(("authenticated", .string(by))) }
            return Reply.json(200, .object([("ok", true), ("userCtx", ctx.user.json), ("info", .object(info))]))
        case "POST":
            let contentType = (request.headers["Content-Type"] ?? "").lowercased()
            var name: String?
            var password: String?
            if contentType.hasPrefix("application/x-www-form-urlencoded") {
                for (key, value) in formFields(request.body) {
                    if key == "name" || key == "username" { name = value }
                    if key == "password" { password = value }
                }
            } else if contentType.hasPrefix("application/json") {
                let body = try request.jsonBody()
                name = body["name"]?.stringValue ?? body["username"]?.stringValue
                password = body["password"]?.stringValue
            } else {
                throw CouchError(
                    415, "bad_content_type",
                    "Content-Type must be 'application/x-www-form-urlencoded' or 'application/json'")
            }
            guard let name else { throw CouchError.badRequest("request body must contain a username") }
            guard let creds = try authenticate(name: name, password: password ?? "") else {
                return Reply.json(
                    401, ["error": "unauthorized", "reason": "Name or password is incorrect."],
                    headers: [("Set-Cookie", sessionCookieHeader(""))])
            }
            let cookie = sessionCookieHeader(
                sessions.cookieValue(name: creds.name, salt: creds.salt, time: Int(clock.now)))
            let body: JSON = .object([
                ("ok", true), ("name", .string(creds.name)), ("roles", .array(creds.roles.map(JSON.string))),
            ])
            if let next = request.queryValue("next") {
                let location = next.hasPrefix("http://") || next.hasPrefix("https://") ? next : request.baseURL + next
                return Reply.json(302, body, headers: [("Location", location), ("Set-Cookie", cookie)])
            }
            return Reply.json(200, body, headers: [("Set-Cookie", cookie)])
        case "DELETE":
            let cookie = sessionCookieHeader("")
            if let next = request.queryValue("next") {
                return Reply.json(
                    302, Reply.ok, headers: [("Location", request.baseURL + next), ("Set-Cookie", cookie)])
            }
            return Reply.json(200, Reply.ok, headers: [("Set-Cookie", cookie)])
        default:
            throw CouchError.methodNotAllowed("GET,HEAD,POST,DELETE")
        }
    }

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
