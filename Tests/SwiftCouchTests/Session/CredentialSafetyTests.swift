import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

/// Issue 8 item 8 and 9: credentials stay where they belong (the login under the base URL's path,
/// nothing secret in `dump`), and a 401 that is an answer about permissions does not cause a
/// login per call.
@Suite("Session: credential safety and login amplification", .ownThreads)
struct CredentialSafetyTests {
    static let admin = Credentials(username: "admin", password: "s3cr3t-pass")

    @Test("The login honours a base URL with a path prefix, like every other request")
    func loginUnderPathPrefix() throws {
        let transport = SimulatedTransport(responder: { request in
            if request.url.path == "/couchdb/_session", request.method == .post {
                return .json(
                    200, #"{"ok":true,"name":"admin","roles":[]}"#,
                    headers: ["Set-Cookie": "AuthSession=abc; Version=1; Max-Age=600; Path=/; HttpOnly"])
            }
            if request.url.path.hasPrefix("/couchdb"), request.headers["Cookie"] == "AuthSession=abc" {
                return .json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#)
            }
            return .json(404, #"{"error":"not_found","reason":"missing"}"#)
        })
        var configuration = Configuration()
        configuration.transport = transport
        let client = CouchDBClient(
            url: URL(string: "https://user:pw@proxy.invalid/couchdb/")!, credentials: Self.admin,
            configuration: configuration)
        defer { client.shutdown() }
        let result = client.executeAndWait(GetServerInfoOperation())
        #expect((try? result.get()) != nil, "\(result)")
        let urls = transport.requests.map(\.request.url.absoluteString)
        #expect(urls.first == "https://proxy.invalid/couchdb/_session")
        #expect(urls.allSatisfy { !$0.contains("pw@") })
    }

    @Test("dump and Mirror of credentials, sessions and clients never show a password, key or cookie")
    func nothingSecretInDumps() throws {
        var text = ""
        dump(Self.admin, to: &text)
        #expect(text.contains("admin"))
        #expect(!text.contains("s3cr3t"))
        #expect(!Mirror(reflecting: Self.admin).children.contains { "\($0.value)".contains("s3cr3t") })

        let server = FakeCookieServer(password: "s3cr3t-pass")
        var configuration = Configuration()
        configuration.transport = SimulatedTransport(responder: server.respond)
        for mode: AuthenticationMode in [.cookie, .basic] {
            configuration.authentication = mode
            let client = CouchDBClient(
                url: Simulation.serverURL, credentials: Self.admin, configuration: configuration)
            _ = client.executeAndWait(GetServerInfoOperation())  // logged in: a cookie is held
            var dumped = ""
            dump(client, to: &dumped)
            #expect(!dumped.contains("s3cr3t"), "\(mode)")
            #expect(!dumped.contains("cookie1"), "\(mode)")  // the fake server's session cookie
            #expect(!dumped.contains(Data("admin:s3cr3t-pass".utf8).base64EncodedString()), "\(mode)")
            client.shutdown()
        }
    }

    /// A client of a user who is not an admin, calling an admin-only endpoint: CouchDB answers 401
    /// with a valid session. Logging in again on every call would hammer `_session` (slow
    /// password hashing, rate limits, lock-outs).
    @Test("A 401 with a live session costs at most one login per cookie generation, then is reported")
    func unauthorizedDoesNotCauseALoginPerCall() throws {
        let server = FakeCookieServer(password: "s3cr3t-pass")
        server.forbid("/_node/_local/_config")
        var configuration = Configuration()
        configuration.transport = SimulatedTransport(responder: server.respond)
        let client = CouchDBClient(url: Simulation.serverURL, credentials: Self.admin, configuration: configuration)
        defer { client.shutdown() }
        let config = GenericOperation(path: CouchPath("_node", "_local", "_config"))
        for _ in 0..<20 {
            let result = client.executeAndWait(config)
            guard case .failure(let error) = result else {
                Issue.record("a 401 was reported as success")
                continue
            }
            #expect(error.statusCode == 401)
            #expect(error.reason == "You are not a server admin.")
        }
        #expect(server.loginCount <= 2)  // the first login, and one more to be sure the 401 was not a dead session
        #expect(server.checkCount <= 20)

        // A session that really expires is still renewed, once.
        server.expireSessions()
        let logins = server.loginCount
        #expect((try? client.executeAndWait(GetServerInfoOperation()).get()) != nil)
        #expect(server.loginCount == logins + 1)
        #expect(client.executeAndWait(config).failure?.statusCode == 401)
    }

    @Test("Many concurrent 401s with a live session share one check")
    func concurrentUnauthorizedShareOneCheck() throws {
        let server = FakeCookieServer(password: "s3cr3t-pass")
        server.forbid("/_node/_local/_config")
        var configuration = Configuration()
        configuration.maximumConcurrentOperations = 16
        configuration.transport = SimulatedTransport(responder: server.respond)
        let client = CouchDBClient(url: Simulation.serverURL, credentials: Self.admin, configuration: configuration)
        defer { client.shutdown() }
        let config = GenericOperation(path: CouchPath("_node", "_local", "_config"))
        _ = client.executeAndWait(config)  // the first login and the one after the first 401
        let logins = server.loginCount
        let done = DispatchSemaphore(value: 0)
        let results = EventLog<Int?>()
        for _ in 0..<40 {
            client.add(operation: config) { result in
                results.append(result.failure?.statusCode)
                done.signal()
            }
        }
        #expect(waitFor(done, count: 40, seconds: 20))
        #expect(results.all.allSatisfy { $0 == 401 })
        #expect(server.loginCount == logins)
        #expect(server.checkCount <= 40)
    }
}

extension Result {
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
