import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

@Suite("Sessions, users, _security, Cloudant API keys and CORS", .ownThreads)
struct SecurityOperationTests {
    @Test("GET /_session: anonymous and cookie-authenticated")
    func getSession() throws {
        let anonymous = try #require(Transcripts.step("session_auth", "s01"))
        let run = Simulation.run(GetSessionOperation(), response: anonymous.simulated)
        #expect(OpsFixtures.line(run.request) == "GET /_session")
        let info = try run.result.get().value
        #expect(info.userCtx == UserContext(name: nil, roles: []))
        #expect(info.info?.authenticationHandlers == ["cookie", "default"])
        #expect(info.info?.authenticated == nil)

        let admin = try #require(Transcripts.step("session_auth", "s03"))
        let adminRun = Simulation.run(GetSessionOperation(), response: admin.simulated)
        #expect(adminRun.value?.userCtx.name == "admin")
        #expect(adminRun.value?.userCtx.isAdmin == true)
        #expect(adminRun.value?.info?.authenticated == "cookie")

        let malformed = try #require(Transcripts.step("session_auth", "s10"))
        #expect(Simulation.run(GetSessionOperation(), response: malformed.simulated).error?.statusCode == 400)
    }

    @Test("POST /_session sends the recorded JSON body; the cookie is in the headers; the log redacts the password")
    func login() throws {
        let step = try #require(Transcripts.step("users", "s06"))
        let log = EventLog<String>()
        var configuration = Configuration()
        configuration.logTranscripts = true
        configuration.logHandler = { log.append($0.message) }
        let op = CreateSessionOperation(name: "tx_bob", password: "bob-pw")
        let run = Simulation.run(op, response: step.simulated, configuration: configuration)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        #expect(run.request?.headers["Content-Type"] == "application/json")
        #expect(run.request?.bodyJSON == OpsFixtures.json(step.requestBody))
        let response = try run.result.get()
        #expect(response.value == SessionLogin(ok: true, name: "tx_bob", roles: []))
        #expect(response.headers["Set-Cookie"]?.hasPrefix("AuthSession=") == true)

        let logged = log.all.joined(separator: "\n")
        #expect(logged.contains("/_session"))
        #expect(!logged.contains("bob-pw"))
        #expect(logged.contains("<redacted>"))
        #expect(!String(describing: op).contains("bob-pw"))
        #expect(!String(reflecting: op).contains("bob-pw"))
        var dumped = ""
        dump(op, to: &dumped)
        #expect(!dumped.contains("bob-pw"))
    }

    @Test("POST /_session with a wrong password is 401; DELETE /_session logs out")
    func failedLoginAndLogout() throws {
        let wrong = try #require(Transcripts.step("session_auth", "s12"))
        let run = Simulation.run(
            CreateSessionOperation(name: "tx_carol", password: "not-the-password"), response: wrong.simulated)
        #expect(run.request?.bodyJSON == OpsFixtures.json(wrong.requestBody))
        #expect(run.error?.statusCode == 401)
        #expect(run.error?.reason == "Name or password is incorrect.")
        #expect(run.error.map { String(describing: $0) }?.contains("not-the-password") == false)

        let logout = try #require(Transcripts.step("session_auth", "s05"))
        let out = Simulation.run(DeleteSessionOperation(), response: logout.simulated)
        #expect(OpsFixtures.line(out.request) == "DELETE /_session")
        #expect(out.value?.ok == true)
        OpsFixtures.expectInvalid(CreateSessionOperation(name: "", password: "x"), containing: "name must not be empty")
    }

    @Test("PUT /_users/org.couchdb.user:{name} creates a user with the recorded body")
    func createUser() throws {
        let step = try #require(Transcripts.step("security", "user"))
        let user = CouchUser(name: "tx_member", password: "member-pw", roles: ["tx_readers"])
        let run = Simulation.run(PutUserOperation(user: user), response: step.simulated)
        // The pipeline percent-encodes ':' in a segment; CouchDB decodes it to the same id.
        #expect(OpsFixtures.line(run.request) == "PUT /_users/org.couchdb.user%3Atx_member")
        #expect(run.request?.bodyJSON == OpsFixtures.json(step.requestBody))
        #expect(run.value?.id == "org.couchdb.user:tx_member")
        #expect(run.value?.rev == "33-c1398cb4403131e69e533a456ad38707")
        #expect(!String(describing: user).contains("member-pw"))

        let mismatch = try #require(Transcripts.step("users", "s05"))
        let refused = Simulation.run(
            PutUserOperation(user: CouchUser(name: "tx_other", password: "x")), response: mismatch.simulated)
        #expect(refused.error?.statusCode == 403)
        OpsFixtures.expectInvalid(PutUserOperation(user: CouchUser(name: "bob")), containing: "needs a password")
        OpsFixtures.expectInvalid(PutUserOperation(user: CouchUser(name: "a:b", password: "x")), containing: "':'")
    }

    @Test("GET a user: hash fields kept, password never decoded; writing it back keeps the hash")
    func readAndUpdateUser() throws {
        let step = try #require(Transcripts.step("users", "s04"))
        let run = Simulation.run(GetUserOperation(name: "tx_bob"), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == "GET /_users/org.couchdb.user%3Atx_bob")
        var user = try run.result.get().value
        #expect(user.name == "tx_bob")
        #expect(user.password == nil)
        #expect(user.roles == [])
        #expect(user.type == "user")
        #expect(user.revision == "33-946471cad81dbfdc48e5ec156652f4b8")
        #expect(user.storedCredentials["password_scheme"] == "pbkdf2")
        #expect(user.storedCredentials["iterations"] == 600_000)
        #expect(user.otherFields.isEmpty)
        #expect(!String(describing: user).contains("255e88d0"))

        user.roles = ["editors"]
        let update = Simulation.run(
            PutUserOperation(user: user),
            response: .json(201, #"{"ok":true,"id":"org.couchdb.user:tx_bob","rev":"34-x"}"#))
        var expected = try #require(step.responseJSON?.objectValue)
        expected["_id"] = nil
        expected["roles"] = ["editors"]
        #expect(update.request?.bodyJSON == .object(expected))

        user.password = "new-pw"
        let reset = Simulation.run(
            PutUserOperation(user: user), response: .json(201, #"{"ok":true,"id":"x","rev":"35-y"}"#))
        #expect(reset.request?.bodyJSON?["password"] == "new-pw")
        #expect(reset.request?.bodyJSON?["derived_key"] == nil)
        #expect(reset.request?.bodyJSON?["_rev"] == "33-946471cad81dbfdc48e5ec156652f4b8")
    }

    @Test("DELETE /_users/org.couchdb.user:{name}?rev=")
    func deleteUser() throws {
        let step = try #require(Transcripts.step("users", "s12"))
        let run = Simulation.run(
            DeleteUserOperation(name: "tx_bob", revision: "33-946471cad81dbfdc48e5ec156652f4b8"),
            response: step.simulated)
        #expect(
            OpsFixtures.line(run.request)
                == "DELETE /_users/org.couchdb.user%3Atx_bob?rev=33-946471cad81dbfdc48e5ec156652f4b8")
        #expect(run.value?.rev == "34-86d6a557f6bb74b568b9490954ce6c0d")
    }

    @Test("GET/PUT /{db}/_security as recorded, including the 500 no_majority")
    func security() throws {
        let defaults = try #require(Transcripts.step("security", "s03"))
        let get = Simulation.run(GetSecurityOperation(database: "tx_sec"), response: defaults.simulated)
        #expect(OpsFixtures.line(get.request) == OpsFixtures.line(defaults))
        #expect(
            get.value
                == SecurityObject(admins: NamesAndRoles(roles: ["_admin"]), members: NamesAndRoles(roles: ["_admin"])))

        let put = try #require(Transcripts.step("security", "s07"))
        let object = SecurityObject(members: NamesAndRoles(names: ["tx_member"]))
        let run = Simulation.run(PutSecurityOperation(database: "tx_sec", security: object), response: put.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(put))
        #expect(run.request?.bodyJSON == OpsFixtures.json(put.requestBody))
        #expect(run.value?.ok == true)

        let member = try #require(Transcripts.step("security", "s09"))
        let denied = Simulation.run(
            PutSecurityOperation(database: "tx_sec", security: SecurityObject()), response: member.simulated)
        #expect(denied.request?.bodyJSON == OpsFixtures.json(member.requestBody))
        #expect(denied.error?.statusCode == 500)
        #expect(denied.error?.reason == "no_majority")
        OpsFixtures.expectInvalid(
            PutSecurityOperation(database: "db", security: SecurityObject(cloudant: ["nobody": [.reader]])),
            containing: "api: .cloudant")
    }

    @Test("Cloudant _security with roles; API keys; CORS")
    func cloudant() throws {
        let body = #"{"cloudant":{"nobody":["_reader"],"apikey-1":["_reader","_writer"]},"couchdb_auth_only":false}"#
        let get = Simulation.run(GetSecurityOperation(database: "db", api: .cloudant), response: .json(200, body))
        #expect(OpsFixtures.line(get.request) == "GET /_api/v2/db/db/_security")
        #expect(get.value?.cloudant?["apikey-1"] == [.reader, .writer])
        #expect(get.value?.members.isEmpty == true)
        #expect(get.value?.couchdbAuthOnly == false)

        let object = SecurityObject(cloudant: ["apikey-1": [.reader, .replicator]])
        let put = Simulation.run(
            PutSecurityOperation(database: "db", security: object, api: .cloudant),
            response: .json(200, #"{"ok":true}"#))
        #expect(OpsFixtures.line(put.request) == "PUT /_api/v2/db/db/_security")
        #expect(
            put.request?.bodyJSON
                == [
                    "admins": ["names": [], "roles": []], "members": ["names": [], "roles": []],
                    "cloudant": ["apikey-1": ["_reader", "_replicator"]],
                ])

        let key = Simulation.run(
            CreateCloudantAPIKeyOperation(), response: .json(201, #"{"password":"s3cret","ok":true,"key":"thekey"}"#))
        #expect(OpsFixtures.line(key.request) == "POST /_api/v2/api_keys")
        #expect(key.request?.headers["Content-Type"] == "application/json")
        #expect(key.value?.key == "thekey")
        #expect(key.value?.password == "s3cret")
        #expect(key.value.map { String(describing: $0) }?.contains("s3cret") == false)

        let corsBody = #"{"enable_cors":true,"allow_credentials":true,"origins":["https://example.com"]}"#
        let cors = Simulation.run(GetCloudantCORSOperation(), response: .json(200, corsBody))
        #expect(OpsFixtures.line(cors.request) == "GET /_api/v2/user/config/cors")
        let configuration = try cors.result.get().value
        #expect(
            configuration == CORSConfiguration(enabled: true, allowCredentials: true, origins: ["https://example.com"]))
        let setCORS = Simulation.run(
            PutCloudantCORSOperation(configuration: configuration), response: .json(200, #"{"ok":true}"#))
        #expect(OpsFixtures.line(setCORS.request) == "PUT /_api/v2/user/config/cors")
        #expect(setCORS.request?.bodyJSON == OpsFixtures.json(corsBody))
        OpsFixtures.expectInvalid(
            PutCloudantCORSOperation(
                configuration: CORSConfiguration(enabled: true, allowCredentials: true, origins: ["*"])),
            containing: "origin '*'")
    }

    @Test("CORS on CouchDB through _node/_local/_config")
    func couchDBCORS() throws {
        let configuration = CORSConfiguration(
            couchDBSection: ["credentials": "true", "origins": "https://a.example, https://b.example"],
            enableCORS: "true")
        #expect(
            configuration
                == CORSConfiguration(
                    enabled: true, allowCredentials: true, origins: ["https://a.example", "https://b.example"]))
        let operations = configuration.couchDBOperations()
        let lines = operations.map { op in
            let run = Simulation.run(op, response: .json(200, #""""#))
            return (OpsFixtures.line(run.request) ?? "") + " "
                + String(decoding: run.request?.body ?? Data(), as: UTF8.self)
        }
        #expect(
            lines == [
                #"PUT /_node/_local/_config/chttpd/enable_cors "true""#,
                #"PUT /_node/_local/_config/cors/credentials "true""#,
                #"PUT /_node/_local/_config/cors/origins "https://a.example,https://b.example""#,
            ])
    }
}
