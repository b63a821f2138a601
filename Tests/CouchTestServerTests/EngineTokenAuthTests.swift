import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

/// The IAM-style token endpoint, opaque bearer tokens and HS256 JWTs (CouchDB's `[jwt_auth]`).
@Suite(.ownThreads) struct EngineTokenAuthTests {
    static let apiKeyForm = "grant_type=urn%3Aibm%3Aparams%3Aoauth%3Agrant-type%3Aapikey&apikey="

    func makeEngine(lifetime: Int = 3600, jwtSecret: String? = nil, keys: Bool = true) throws -> ServerEngine {
        var options = testOptions()
        if keys {
            options.iamAPIKeys = [
                "reader-key": IAMIdentity(name: "alice", roles: ["reader"]),
                "admin-key": IAMIdentity(name: "iam-admin", roles: ["_admin"]),
            ]
        }
        options.iamTokenLifetime = lifetime
        options.jwtSecret = jwtSecret
        return try ServerEngine(options: options)
    }

    func requestToken(_ engine: ServerEngine, form: String) -> EngineReply {
        engine.send(
            "POST", "/_iam/identity/token", body: Data(form.utf8), auth: .anonymous,
            headers: [("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json")])
    }

    func bearer(_ token: String) -> [(String, String)] { [("Authorization", "Bearer " + token)] }

    @Test func tokenEndpointIssuesTokensThatAuthenticate() throws {
        let engine = try makeEngine()
        defer { engine.close() }
        let before = Date().timeIntervalSince1970
        let reply = requestToken(engine, form: Self.apiKeyForm + "reader-key")
        #expect(reply.status == 200)
        let token = try #require(reply.json["access_token"]?.stringValue)
        #expect(!token.isEmpty)
        #expect(reply.json["token_type"]?.stringValue == "Bearer")
        #expect(reply.json["expires_in"]?.intValue == 3600)
        #expect(reply.json["refresh_token"]?.stringValue != nil)
        let expiration = try #require(reply.json["expiration"]?.doubleValue)
        #expect(expiration >= before + 3599 && expiration <= Date().timeIntervalSince1970 + 3601)

        let session = engine.send("GET", "/_session", auth: .anonymous, headers: bearer(token))
        #expect(session.status == 200)
        #expect(session.json["userCtx"]?["name"]?.stringValue == "alice")
        #expect(session.json["userCtx"]?["roles"] == ["reader"])
        #expect(session.json["info"]?["authenticated"]?.stringValue == "iam")
        #expect(session.json["info"]?["authentication_handlers"]?.arrayValue?.contains("iam") == true)

        // Two requests give two different tokens, both valid.
        let second = try #require(
            requestToken(engine, form: Self.apiKeyForm + "reader-key").json["access_token"]?.stringValue)
        #expect(second != token)
        #expect(engine.send("GET", "/_session", auth: .anonymous, headers: bearer(second)).status == 200)
    }

    @Test func tokenIdentityRolesApply() throws {
        let engine = try makeEngine()
        defer { engine.close() }
        let admin = try #require(
            requestToken(engine, form: Self.apiKeyForm + "admin-key").json["access_token"]?.stringValue)
        let reader = try #require(
            requestToken(engine, form: Self.apiKeyForm + "reader-key").json["access_token"]?.stringValue)
        #expect(engine.send("PUT", "/tokendb", auth: .anonymous, headers: bearer(admin)).status == 201)
        #expect(engine.send("GET", "/_all_dbs", auth: .anonymous, headers: bearer(admin)).status == 200)
        let refused = engine.send("PUT", "/otherdb", auth: .anonymous, headers: bearer(reader))
        #expect(refused.status == 401)
        #expect(refused.json["error"]?.stringValue == "unauthorized")
        // CouchDB 3 databases are admin-only by default: a known non-admin user is refused with 403 (not 401).
        let member = engine.send("GET", "/tokendb", auth: .anonymous, headers: bearer(reader))
        #expect(member.status == 403)
        #expect(member.json["error"]?.stringValue == "forbidden")
    }

    @Test func wrongKeyAndBadRequestsGetIAMErrors() throws {
        let engine = try makeEngine()
        defer { engine.close() }
        let wrong = requestToken(engine, form: Self.apiKeyForm + "no-such-key")
        #expect(wrong.status == 400)
        #expect(wrong.json["errorCode"]?.stringValue == "BXNIM0415E")
        #expect(wrong.json["errorMessage"]?.stringValue == "Provided API key could not be found.")
        #expect(wrong.json["context"]?.isObject == true)
        #expect(wrong.json["access_token"] == nil)

        let missing = requestToken(engine, form: "grant_type=urn%3Aibm%3Aparams%3Aoauth%3Agrant-type%3Aapikey")
        #expect(missing.status == 400)
        #expect(missing.json["errorCode"]?.stringValue == "BXNIM0109E")
        let grant = requestToken(engine, form: "grant_type=password&apikey=reader-key")
        #expect(grant.status == 400)
        #expect(grant.json["errorCode"]?.stringValue != nil)
        #expect(engine.send("GET", "/_iam/identity/token", auth: .anonymous).status == 405)
    }

    @Test func tokensExpireAndAreRevokedWithSessions() throws {
        let engine = try makeEngine(lifetime: 60)
        defer { engine.close() }
        let token = try #require(
            requestToken(engine, form: Self.apiKeyForm + "reader-key").json["access_token"]?.stringValue)
        #expect(engine.send("GET", "/_session", auth: .anonymous, headers: bearer(token)).status == 200)
        engine.advanceClock(by: 61)
        let expired = engine.send("GET", "/_session", auth: .anonymous, headers: bearer(token))
        #expect(expired.status == 401)
        #expect(expired.json["error"]?.stringValue == "unauthorized")
        #expect(expired.json["reason"]?.stringValue?.isEmpty == false)

        let fresh = try #require(
            requestToken(engine, form: Self.apiKeyForm + "reader-key").json["access_token"]?.stringValue)
        #expect(engine.send("GET", "/_session", auth: .anonymous, headers: bearer(fresh)).status == 200)
        engine.expireAllSessions()
        #expect(engine.send("GET", "/_session", auth: .anonymous, headers: bearer(fresh)).status == 401)

        let unknown = engine.send("GET", "/_session", auth: .anonymous, headers: bearer("not-a-token"))
        #expect(unknown.status == 401)
        #expect(unknown.json["error"]?.stringValue == "unauthorized")
    }

    @Test func bearerHeaderIsIgnoredWithoutTokenHandlers() throws {
        let engine = try makeEngine(keys: false)
        defer { engine.close() }
        let reply = engine.send("GET", "/_session", auth: .anonymous, headers: bearer("anything"))
        #expect(reply.status == 200)
        #expect(reply.json["userCtx"]?["name"] == .null)
        #expect(reply.json["info"]?["authentication_handlers"] == ["cookie", "default"])
    }

    @Test func hs256JWTsAuthenticateAsSubWithRoles() throws {
        let engine = try makeEngine(jwtSecret: "jwt-secret", keys: false)
        defer { engine.close() }
        let token = engine.makeJWT(subject: "bob", roles: ["writer", "_admin"])
        let session = engine.send("GET", "/_session", auth: .anonymous, headers: bearer(token))
        #expect(session.status == 200)
        #expect(session.json["userCtx"]?["name"]?.stringValue == "bob")
        #expect(session.json["userCtx"]?["roles"] == ["writer", "_admin"])
        #expect(session.json["info"]?["authenticated"]?.stringValue == "jwt")
        #expect(engine.send("PUT", "/jwtdb", auth: .anonymous, headers: bearer(token)).status == 201)

        // A token built by hand, as jwt.io would: roles as a comma-separated string are accepted too.
        let claims: JSON = [
            "sub": "carol", "_couchdb.roles": "a, b", "exp": .int(Int64(Date().timeIntervalSince1970) + 100),
        ]
        let manual = Crypto.signJWT(claims: claims, secret: Data("jwt-secret".utf8))
        let carol = engine.send("GET", "/_session", auth: .anonymous, headers: bearer(manual))
        #expect(carol.json["userCtx"]?["roles"] == ["a", "b"])
    }

    @Test func badJWTsGetCouchDBErrors() throws {
        let engine = try makeEngine(jwtSecret: "jwt-secret", keys: false)
        defer { engine.close() }
        func check(
            _ token: String, _ status: Int, _ error: String, _ reason: String,
            sourceLocation: SourceLocation = #_sourceLocation
        ) {
            let reply = engine.send("GET", "/_session", auth: .anonymous, headers: bearer(token))
            #expect(reply.status == status, sourceLocation: sourceLocation)
            #expect(reply.json["error"]?.stringValue == error, sourceLocation: sourceLocation)
            #expect(reply.json["reason"]?.stringValue == reason, sourceLocation: sourceLocation)
        }
        let now = Int64(Date().timeIntervalSince1970)
        check(engine.makeJWT(subject: "bob", expiresIn: -10), 401, "unauthorized", "exp not in future")
        check(engine.makeJWT(subject: "bob", secret: "other"), 400, "bad_request", "Bad HMAC in authentication token")
        let secret = Data("jwt-secret".utf8)
        check(Crypto.signJWT(claims: ["sub": "bob"], secret: secret), 400, "bad_request", "Missing exp claim")
        check(
            Crypto.signJWT(claims: ["exp": .int(now + 100)], secret: secret), 401, "unauthorized",
            "Token missing sub claim.")
        check("a.b.c", 400, "bad_request", "Malformed authentication token")
        let noneHeader = Crypto.base64URL(Data(#"{"alg":"none"}"#.utf8))
        let body = Crypto.base64URL(Data(#"{"sub":"bob","exp":\#(now + 100)}"#.utf8))
        check(noneHeader + "." + body + ".", 400, "bad_request", "Invalid alg header parameter")
        check("opaque-but-unknown", 401, "unauthorized", "The bearer token is not valid.")
    }

    @Test func iamTokensAndJWTsWorkSideBySide() throws {
        let engine = try makeEngine(jwtSecret: "s")
        defer { engine.close() }
        let iam = try #require(
            requestToken(engine, form: Self.apiKeyForm + "reader-key").json["access_token"]?.stringValue)
        #expect(
            engine.send("GET", "/_session", auth: .anonymous, headers: bearer(iam)).json["userCtx"]?["name"] == "alice")
        let jwt = engine.makeJWT(subject: "dave")
        #expect(
            engine.send("GET", "/_session", auth: .anonymous, headers: bearer(jwt)).json["userCtx"]?["name"] == "dave")
        // Basic auth still works next to them.
        #expect(engine.send("GET", "/_session").json["userCtx"]?["name"] == "admin")
    }
}
