import CouchQuery
import CouchStore
import Foundation

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

extension ServerEngine {
    // MARK: - Credentials

    /// Looks up a user: the configured admin, or a user document in `_users`.
    func credentials(for name: String) -> UserCredentials? {
        if name == options.adminName {
            return UserCredentials(
                name: name, roles: ["_admin"], salt: adminSalt, derivedKey: nil, iterations: 0,
                plainPassword: options.adminPassword)
        }
        guard let body = store.handle(ofDatabase: "_users")?.winningBody("org.couchdb.user:" + name) else { return nil }
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
    func identify(_ request: ServerRequest) throws(CouchError) -> (Identity, String?) {
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
                // The cookie's time is the client's to write: its expiry saturates rather than overflows.
                let (sum, overflow) = stamp.addingReportingOverflow(timeout)
                let expiry = overflow ? (stamp > 0 ? Int.max : Int.min) : sum
                if now < expiry, sessions.sign(user + ":" + timeHex, salt: creds.salt) == hash {
                    let timeLeft = expiry - now
                    var refresh: String?
                    if Double(timeLeft) < Double(timeout) * 0.9 {
                        refresh = sessionCookieHeader(sessions.cookieValue(name: user, salt: creds.salt, time: now))
                    }
                    return (
                        Identity(user: UserContext(name: user, roles: creds.roles), authenticatedBy: "cookie"), refresh
                    )
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
            return (Identity(user: UserContext(name: creds.name, roles: creds.roles), authenticatedBy: "default"), nil)
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

    func handleSession(_ ctx: ServerContext) throws(CouchError) -> ServerResponse {
        let request = ctx.request
        switch request.method {
        case "GET", "HEAD":
            var handlers: [JSON] = ["cookie", "default"]
            if options.jwtSecret != nil { handlers.insert("jwt", at: 0) }
            if !options.iamAPIKeys.isEmpty { handlers.insert("iam", at: 0) }
            var info: [(String, JSON)] = [("authentication_handlers", .array(handlers))]
            if let by = ctx.identity.authenticatedBy { info.append(("authenticated", .string(by))) }
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

    // MARK: - The `_users` database

    /// The validation function of `_users/_design/_auth`, as CouchDB keeps one there. The server
    /// enforces the same rules natively (`validateUserDocument`); this is the document clients read.
    static let authValidateFunction = """
        function(newDoc, oldDoc, userCtx, secObj) {
          var isAdmin = userCtx.roles.indexOf('_admin') !== -1;
          if (newDoc._deleted === true) {
            if (!isAdmin && oldDoc && oldDoc.name !== userCtx.name) {
              throw({forbidden: 'Only admins may delete other user docs.'});
            }
            return;
          }
          if (newDoc.type !== 'user') { throw({forbidden: 'doc.type must be user'}); }
          if (!newDoc.name) { throw({forbidden: 'doc.name is required'}); }
          if (!newDoc.roles) { throw({forbidden: 'doc.roles must exist'}); }
          if (!isArray(newDoc.roles)) { throw({forbidden: 'doc.roles must be an array'}); }
          for (var i = 0; i < newDoc.roles.length; i++) {
            if (typeof newDoc.roles[i] !== 'string') { throw({forbidden: 'doc.roles can only contain strings'}); }
          }
          if (newDoc._id !== 'org.couchdb.user:' + newDoc.name) {
            throw({forbidden: 'Doc ID must be of the form org.couchdb.user:name'});
          }
          if (oldDoc && oldDoc.name !== newDoc.name) { throw({forbidden: 'Usernames can not be changed.'}); }
          if (newDoc.name.charAt(0) === '_') { throw({forbidden: 'Username may not start with underscore.'}); }
          if (newDoc.name.indexOf(':') !== -1) { throw({forbidden: 'Character `:` is not allowed in usernames.'}); }
          if (!isAdmin) {
            if (oldDoc && oldDoc.name !== userCtx.name) { throw({forbidden: 'You may only update your own user document.'}); }
            var oldRoles = oldDoc ? oldDoc.roles : [];
            if (JSON.stringify(oldRoles.slice().sort()) !== JSON.stringify(newDoc.roles.slice().sort())) {
              throw({forbidden: 'Only _admin may edit roles'});
            }
          }
        }
        """

    /// Creates `_users/_design/_auth` when `_users` exists without it, as CouchDB does.
    func ensureAuthDesignDocument() {
        guard let users = store.handle(ofDatabase: "_users"), users.winningBody("_design/_auth") == nil else { return }
        let body: JSON = ["language": "javascript", "validate_doc_update": .string(Self.authValidateFunction)]
        _ = store.handle(storeRequest("PUT", "/_users/_design/_auth", json: body), user: .admin)
    }

    /// CouchDB's rules for a user document (`couch_users_db`): its shape and id, and a `password` replaced by its
    /// PBKDF2 hash (`password_scheme`, `salt`, `iterations`, `derived_key`).
    func validateUserDocument(_ body: inout JSON, id: String) throws(CouchError) {
        func forbid(_ reason: String) -> CouchError { CouchError(403, "forbidden", reason) }
        guard body["type"]?.stringValue == "user" else { throw forbid("doc.type must be user") }
        guard let name = body["name"]?.stringValue, !name.isEmpty else { throw forbid("doc.name is required") }
        guard let roles = body["roles"] else { throw forbid("doc.roles must exist") }
        guard let roleList = roles.arrayValue else { throw forbid("doc.roles must be an array") }
        guard roleList.allSatisfy({ $0.stringValue != nil }) else { throw forbid("doc.roles can only contain strings") }
        guard id == "org.couchdb.user:" + name else { throw forbid("Doc ID must be of the form org.couchdb.user:name") }
        if name.hasPrefix("_") { throw forbid("Username may not start with underscore.") }
        if let password = body["password"] {
            guard let plain = password.stringValue else { throw forbid("doc.password must be a string") }
            let salt = Crypto.hex(Crypto.randomBytes(16))
            let iterations = max(options.passwordIterations, 1)
            let derived = Crypto.hex(
                Crypto.pbkdf2SHA256(password: Data(plain.utf8), salt: Data(salt.utf8), iterations: iterations))
            sessions.cacheVerification(passwordCacheKey(name: name, salt: salt, password: plain), derivedKey: derived)
            var pairs: [(String, JSON)] = [
                ("password_scheme", "pbkdf2"), ("pbkdf2_prf", "sha256"), ("salt", .string(salt)),
                ("iterations", .int(Int64(iterations))), ("derived_key", .string(derived)),
            ]
            let hashFields: Set<String> = [
                "password", "password_scheme", "pbkdf2_prf", "salt", "iterations", "derived_key",
                "password_sha",
            ]
            pairs.append(contentsOf: body.members.filter { !hashFields.contains($0.0) })
            body = .object(pairs)
        }
    }
}

/// The server's wall clock in seconds (a seam for tests of cookie and token expiry).
final class ServerClock: @unchecked Sendable {
    // Safe: `offset` is only read and written under `lock`.
    private let lock = NSLock()
    private var offset: TimeInterval = 0

    var now: TimeInterval {
        lock.lock()
        defer { lock.unlock() }
        return Date().timeIntervalSince1970 + offset
    }

    func advance(by seconds: TimeInterval) {
        lock.lock()
        offset += seconds
        lock.unlock()
    }
}

/// Formats dates as CouchDB's cookies do: `Sun, 22-Nov-2026 07:15:00 GMT`.
func cookieDate(_ time: TimeInterval) -> String {
    let f = DateFormatter()
    f.locale = Locale(identifier: "en_US_POSIX")
    f.timeZone = TimeZone(identifier: "GMT")
    f.dateFormat = "EEE, dd-MMM-yyyy HH:mm:ss 'GMT'"
    return f.string(from: Date(timeIntervalSince1970: time))
}
