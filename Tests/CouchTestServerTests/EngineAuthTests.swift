import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchStore
@testable import CouchTestServer

@Suite(.ownThreads) struct EngineAuthTests {
    private func cookie(_ reply: EngineReply) -> String? {
        guard let header = reply.headers["Set-Cookie"], header.hasPrefix("AuthSession=") else { return nil }
        return header.dropFirst("AuthSession=".count).split(separator: ";", omittingEmptySubsequences: false).first.map(
            String.init)
    }

    @Test func cookieLoginRefreshAndExpiry() throws {
        var options = testOptions()
        options.sessionTimeout = 600
        let engine = try ServerEngine(options: options)
        let login = engine.send("POST", "/_session", json: ["name": "admin", "password": "password"], auth: .anonymous)
        #expect(login.status == 200)
        let header = try #require(login.headers["Set-Cookie"])
        #expect(header.contains("; Version=1; Expires="))
        #expect(header.hasSuffix("; Max-Age=600; Path=/; HttpOnly"))
        let value = try #require(cookie(login))
        let session = engine.send("GET", "/_session", auth: .cookie(value)).json
        #expect(session["userCtx"]?["name"] == "admin")
        #expect(session["info"]?["authenticated"] == "cookie")
        // No new cookie within the first 10% of the lifetime, a new one after.
        #expect(engine.send("GET", "/_all_dbs", auth: .cookie(value)).headers["Set-Cookie"] == nil)
        engine.advanceClock(by: 61)
        let refreshed = engine.send("GET", "/_all_dbs", auth: .cookie(value))
        #expect(refreshed.status == 200)
        let newValue = try #require(cookie(refreshed))
        #expect(newValue != value)
        // After the lifetime the old cookie is ignored (anonymous), the refreshed one still works.
        engine.advanceClock(by: 560)
        #expect(engine.send("GET", "/_all_dbs", auth: .cookie(value)).status == 401)
        #expect(engine.send("GET", "/_all_dbs", auth: .cookie(newValue)).status == 200)
        engine.expireAllSessions()
        #expect(engine.send("GET", "/_session", auth: .cookie(newValue)).json["userCtx"]?["name"] == .null)
        #expect(engine.send("GET", "/_session", auth: .cookie("garbage")).status == 400)
    }

    @Test func formLoginWithNextAndLogout() throws {
        let engine = try ServerEngine(options: testOptions())
        let reply = engine.send(
            "POST", "/_session?next=/_up", body: Data("name=admin&password=password".utf8), auth: .anonymous,
            headers: [("Content-Type", "application/x-www-form-urlencoded")])
        #expect(reply.status == 302)
        #expect(reply.headers["Location"] == "http://127.0.0.1:5984/_up")
        let logout = engine.send("DELETE", "/_session", auth: .anonymous)
        #expect(logout.headers["Set-Cookie"]?.hasPrefix("AuthSession=; Version=1") == true)
        #expect(
            engine.send(
                "POST", "/_session", body: Data("x".utf8), auth: .anonymous, headers: [("Content-Type", "text/plain")]
            ).status == 415)
    }

    @Test func usersSecurityAndLockout() throws {
        let engine = try ServerEngine(options: testOptions())
        let user = engine.send(
            "PUT", "/_users/org.couchdb.user:bob", json: ["name": "bob", "password": "pw", "roles": [], "type": "user"])
        #expect(user.status == 201)
        let stored = engine.send("GET", "/_users/org.couchdb.user:bob").json
        #expect(stored["password"] == nil)
        #expect(stored["password_scheme"] == "pbkdf2")
        #expect(stored["derived_key"]?.stringValue?.count == 64)
        #expect(
            engine.send("PUT", "/_users/org.couchdb.user:x", json: ["name": "y", "roles": [], "type": "user"]).status
                == 403)

        engine.send("PUT", "/db")
        engine.send("PUT", "/db/doc", json: ["a": 1])
        #expect(engine.send("GET", "/db/doc", auth: .anonymous).status == 401)
        #expect(engine.send("GET", "/db/doc", auth: .basic("bob", "pw")).status == 403)
        #expect(
            engine.send("GET", "/_all_dbs", auth: .basic("bob", "pw")).json["reason"] == "You are not a server admin.")
        engine.send(
            "PUT", "/db/_security",
            json: ["members": ["names": ["bob"], "roles": []], "admins": ["names": [], "roles": []]])
        #expect(engine.send("GET", "/db/doc", auth: .basic("bob", "pw")).status == 200)
        #expect(engine.send("PUT", "/db/_security", json: [:], auth: .basic("bob", "pw")).status == 500)
        #expect(engine.send("GET", "/", auth: .basic("bob", "wrong")).status == 401)

        // The wrong Basic password above was the first failure; four more make five.
        for _ in 0..<4 {
            #expect(
                engine.send("POST", "/_session", json: ["name": "bob", "password": "nope"], auth: .anonymous).status
                    == 401)
        }
        let locked = engine.send("POST", "/_session", json: ["name": "bob", "password": "pw"], auth: .anonymous)
        #expect(locked.status == 403)
        #expect(locked.json["reason"] == "Account is temporarily locked due to multiple authentication failures")
    }
}
