import Foundation
import SwiftCouch
import Testing

/// A client with no credentials of its own (anonymous unless an operation logs in).
private func anonymousClient() -> CouchDBClient {
    CouchDBClient(url: E2EEnvironment.shared.url)
}

@Suite("End to end: sessions, users and security")
struct SecurityEndToEndTests {
    @Test("_session: anonymous GET, POST as the admin with a separate client, DELETE; a wrong password → 401")
    func sessions() async throws {
        let environment = E2EEnvironment.shared
        let admin = environment.client()
        let mine = try await admin.value(GetSessionOperation())
        #expect(mine.ok)
        #expect(mine.userCtx.name == environment.credentials.username)
        #expect(mine.userCtx.isAdmin)
        #expect(mine.info?.authenticated == "cookie")
        #expect(mine.info?.authenticationHandlers.contains("cookie") == true)

        let anonymous = anonymousClient()
        defer { anonymous.shutdown() }
        let nobody = try await anonymous.value(GetSessionOperation())
        #expect(nobody.userCtx.name == nil)
        #expect(nobody.userCtx.roles.isEmpty)
        let login = try await anonymous.value(CreateSessionOperation(credentials: environment.credentials))
        #expect(login.ok)
        #expect(login.name == environment.credentials.username)
        #expect(login.roles.contains("_admin"))
        #expect(try await anonymous.value(DeleteSessionOperation()).ok)

        // A user that does not exist, so no real account is locked out by failed logins.
        let stranger = "swiftcouch-nobody-\(UUID().uuidString.prefix(8).lowercased())"
        do {
            _ = try await anonymous.execute(CreateSessionOperation(name: stranger, password: "wrong"))
            Issue.record("a wrong password should be refused")
        } catch {
            #expect(error.statusCode == 401)
            #expect(error.error == "unauthorized")
            #expect(error.reason == "Name or password is incorrect.")
            #expect(!String(reflecting: error).contains("wrong"))
        }
    }

    @Test("_security: the admin-only default, a round trip, Cloudant fields refused for CouchDB")
    func securityObject() async throws {
        try await withDatabase("security") { client, db in
            let initial = try await client.value(GetSecurityOperation(database: db))
            #expect(initial.admins.names.isEmpty)
            #expect(initial.members.names.isEmpty)
            #expect(initial.cloudant == nil)
            let custom = SecurityObject(
                admins: NamesAndRoles(names: ["e2e-boss"], roles: ["e2e-admins"]),
                members: NamesAndRoles(names: ["e2e-reader"], roles: ["e2e-readers"]))
            #expect(try await client.value(PutSecurityOperation(database: db, security: custom)).ok)
            // On a cluster `_security` is read from one copy: it converges on the write.
            #expect(
                try await converged(
                    read: { try await client.value(GetSecurityOperation(database: db)) }, until: { $0 == custom })
                    == custom)
            // The admin still reads and writes.
            _ = try await client.value(PutDocumentOperation(database: db, id: "d", document: Note(text: "x", n: 1)))
            #expect(try await client.value(PutSecurityOperation(database: db, security: initial)).ok)
            #expect(
                try await converged(
                    read: { try await client.value(GetSecurityOperation(database: db)) }, until: { $0 == initial })
                    == initial)

            do {
                _ = try await client.execute(
                    PutSecurityOperation(database: db, security: SecurityObject(cloudant: ["nobody": [.reader]])))
                Issue.record("Cloudant roles on the CouchDB API should be refused before sending")
            } catch let error as CouchError {
                #expect(error.kind == .validation)
            }
        }
    }

    @Test("Cloudant security, API keys and CORS: used where supported, otherwise a clean CouchError")
    func cloudantAccess() async throws {
        try await withDatabase("cloudant-sec") { client, db in
            do {
                let security = try await client.value(GetSecurityOperation(database: db, api: .cloudant))
                #expect(security.members.names.allSatisfy { !$0.isEmpty })
            } catch let error as CouchError {
                expectUnsupported("Cloudant _api/v2/db/{db}/_security", error)
            }
        }
        let client = E2EEnvironment.shared.client()
        do {
            let cors = try await client.value(GetCloudantCORSOperation())
            #expect(cors.origins.allSatisfy { !$0.isEmpty })
        } catch {
            expectUnsupported("Cloudant CORS (_api/v2/user/config/cors)", error)
        }
        // Creating an API key changes a Cloudant account, so it is only tried where the endpoint is absent.
        if E2EEnvironment.shared.testServer != nil {
            do {
                _ = try await client.execute(CreateCloudantAPIKeyOperation())
                Issue.record("the TestServer has no Cloudant API keys")
            } catch {
                expectUnsupported("Cloudant API keys (_api/v2/api_keys)", error)
            }
        } else {
            print("Skipping Cloudant API key creation against a real server: it would create a key.")
        }
    }

    /// One user for the whole run (each user write costs a PBKDF2 hash): log in as them, update their roles,
    /// check `_security` membership by name and by role, then delete them.
    @Test("A _users user: create, log in with a second client, roles updated, members enforced (403), deleted")
    func userAndMembership() async throws {
        let admin = E2EEnvironment.shared.client()
        let name = "swiftcouch-e2e-\(UUID().uuidString.prefix(8).lowercased())"
        let password = "pw-\(UUID().uuidString)"
        let created = try await admin.value(PutUserOperation(user: CouchUser(name: name, password: password)))
        #expect(created.id == "org.couchdb.user:\(name)")
        var revision = try #require(created.rev)
        let userClient = CouchDBClient(
            url: E2EEnvironment.shared.url, credentials: Credentials(username: name, password: password))
        defer { userClient.shutdown() }
        let anonymous = anonymousClient()
        defer { anonymous.shutdown() }
        do {
            let stored = try await admin.value(GetUserOperation(name: name))
            #expect(stored.name == name)
            #expect(stored.roles.isEmpty)
            #expect(stored.revision == revision)
            #expect(stored.storedCredentials["password_scheme"] != nil)

            let session = try await userClient.value(GetSessionOperation())
            #expect(session.userCtx.name == name)
            #expect(!session.userCtx.isAdmin)
            let login = try await anonymous.value(CreateSessionOperation(name: name, password: password))
            #expect(login.name == name)

            try await withDatabase("members", client: admin) { admin, db in
                _ = try await admin.value(
                    PutDocumentOperation(database: db, id: "doc", document: Note(text: "s", n: 1)))
                // Admin-only by default: a non-member is refused.
                do {
                    _ = try await userClient.execute(GetDocumentOperation<Note>(database: db, id: "doc"))
                    Issue.record("a non-member should be refused")
                } catch let error as CouchError {
                    #expect(error.statusCode == 403)
                    #expect(error.error == "forbidden")
                    #expect(error.reason == "You are not allowed to access this db.")
                }
                let original = try await admin.value(GetSecurityOperation(database: db))
                // Members by name: let in.
                _ = try await admin.value(
                    PutSecurityOperation(database: db, security: SecurityObject(members: NamesAndRoles(names: [name]))))
                // (A cluster's copies learn a `_security` change soon, not at once.)
                #expect(
                    try await convergedStatus(200) {
                        _ = try await userClient.value(GetDocumentOperation<Note>(database: db, id: "doc"))
                    } == 200)
                #expect(try await userClient.value(GetDocumentOperation<Note>(database: db, id: "doc")).n == 1)
                // Members by a role the user does not have yet: refused.
                let byRole = SecurityObject(members: NamesAndRoles(roles: ["e2e-readers"]))
                _ = try await admin.value(PutSecurityOperation(database: db, security: byRole))
                #expect(
                    try await convergedStatus(403) {
                        _ = try await userClient.value(GetDocumentOperation<Note>(database: db, id: "doc"))
                    } == 403, "a user without the member role should be refused")
                // Give the user the role (without a password: the stored hash is kept).
                var user = try await admin.value(GetUserOperation(name: name))
                user.roles = ["e2e-readers"]
                let updated = try await admin.value(PutUserOperation(user: user))
                revision = try #require(updated.rev)
                #expect(revision.hasPrefix("2-"))
                #expect(try await admin.value(GetUserOperation(name: name)).roles == ["e2e-readers"])
                // A fresh login carries the new role (once CouchDB's auth cache has seen the update).
                let relogin = try await converged(
                    read: { try await anonymous.value(CreateSessionOperation(name: name, password: password)) },
                    until: { $0.roles == ["e2e-readers"] })
                #expect(relogin.roles == ["e2e-readers"])
                let roleClient = CouchDBClient(
                    url: E2EEnvironment.shared.url, credentials: Credentials(username: name, password: password))
                defer { roleClient.shutdown() }
                #expect(try await roleClient.value(GetDocumentOperation<Note>(database: db, id: "doc")).n == 1)
                // The user is not an admin of the database.
                do {
                    _ = try await roleClient.execute(PutSecurityOperation(database: db, security: original))
                    Issue.record("a member must not change _security")
                } catch let error as CouchError {
                    // CouchDB 3.5.0's answer (every shard refused the member): 500 `no_majority`.
                    #expect(error.kind == .http)
                    #expect(error.statusCode == 500)
                    #expect(error.reason == "no_majority")
                }
                _ = try await admin.value(PutSecurityOperation(database: db, security: original))
                #expect(
                    try await converged(
                        read: { try await admin.value(GetSecurityOperation(database: db)) },
                        until: {
                            $0 == original
                        })
                        == original)
            }
        } catch {
            _ = try? await admin.execute(DeleteUserOperation(name: name, revision: revision))
            throw error
        }
        let deleted = try await admin.value(DeleteUserOperation(name: name, revision: revision))
        #expect(deleted.ok == true)
        do {
            _ = try await admin.execute(GetUserOperation(name: name))
            Issue.record("a deleted user should be 404")
        } catch {
            #expect(error.statusCode == 404)
        }
        // CouchDB forgets a deleted user's credentials when its auth cache sees the deletion on
        // `_users`' changes feed: soon, not at once.
        let loginRefused = try await converged(
            read: { () async -> Int? in
                do {
                    _ = try await anonymous.execute(CreateSessionOperation(name: name, password: password))
                    return 200
                } catch let error as CouchError {
                    return error.statusCode
                } catch {
                    return nil
                }
            }, until: { $0 == 401 })
        #expect(loginRefused == 401, "a deleted user cannot log in")
    }
}
