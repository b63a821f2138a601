import CouchTestServer
import Foundation
import SwiftCouch
import Testing

/// IAM API keys and bearer tokens (`AuthenticationMode.iam` and `.bearerToken`) against the TestServer's
/// token endpoint and JWT checks. They need the embedded TestServer, so they skip against a real CouchDB.
@Suite("End to end: IAM tokens and JWT bearer tokens")
struct TokenAuthEndToEndTests {
    static let apiKey = "e2e-iam-key"
    static let jwtSecret = "e2e-jwt-secret"

    /// Starts a private TestServer with one IAM key (a server admin) and a JWT secret, or nil (with a printed
    /// reason) when the suite runs against a real CouchDB.
    func startServer(_ what: String, tokenLifetime: Int = 3600) throws -> TestServer? {
        guard E2EEnvironment.shared.testServer != nil else {
            print("Skipping \(what): it needs the embedded TestServer's token endpoint (COUCHDB_URL is set).")
            return nil
        }
        var configuration = TestServer.Configuration()
        configuration.iamAPIKeys = [Self.apiKey: IAMIdentity(name: "iam-service", roles: ["_admin"])]
        configuration.iamTokenLifetime = tokenLifetime
        configuration.jwtSecret = Self.jwtSecret
        return try TestServer.start(configuration)
    }

    func client(_ server: TestServer, _ mode: AuthenticationMode, concurrency: Int = 6) -> CouchDBClient {
        var configuration = Configuration()
        configuration.authentication = mode
        configuration.maximumConcurrentOperations = concurrency
        configuration.retryPolicy = RetryPolicy(maximumRetries: 4, initialDelay: 0.02, maximumDelay: 0.5)
        return CouchDBClient(url: server.url, configuration: configuration)
    }

    /// Issue 8: the token endpoint is rate-limited too (Cloudant's IAM answers 429), and its
    /// connections drop like any other: queued operations wait for the retried token request,
    /// none forever.
    @Test(
        "IAM: 429s, a 503, a 429-then-close and dropped connections on the token endpoint; 30 queued operations succeed"
    )
    func iamTokenEndpointFaults() async throws {
        guard let server = try startServer("IAM token endpoint faults") else { return }
        defer { server.stop() }
        let tokenPath = "/_iam/identity/token"
        let match = TestServerFaults.Match.path(tokenPath, method: "POST")
        server.faults.failNext(with: .tooManyRequests(retryAfter: nil), matching: match)
        server.faults.failNext(with: .dropConnection, matching: match)
        server.faults.failNext(with: .serviceUnavailable(retryAfter: nil), matching: match)
        server.faults.failNext(with: .tooManyRequestsThenClose(retryAfter: nil, seconds: 0.05), matching: match)
        let client = client(server, .iam(apiKey: Self.apiKey, tokenURL: server.iamTokenURL), concurrency: 8)
        defer { client.shutdown() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<30 {
                group.addTask { _ = try await client.value(GetSessionOperation()) }
            }
            try await group.waitForAll()
        }
        #expect(server.requestCount(path: tokenPath, method: "POST") == 5)  // four faults, one token
    }

    @Test("IAM: one token request, then many concurrent operations; after expiry exactly one renewal")
    func iamLoginAndRenewal() async throws {
        guard let server = try startServer("IAM login and renewal") else { return }
        defer { server.stop() }
        let client = client(server, .iam(apiKey: Self.apiKey, tokenURL: server.iamTokenURL), concurrency: 8)
        defer { client.shutdown() }
        let tokenPath = "/_iam/identity/token"

        let session = try await client.value(GetSessionOperation())
        #expect(session.userCtx.name == "iam-service")
        #expect(session.info?.authenticated == "iam")
        let db = "iam-e2e"
        try await client.execute(CreateDatabaseOperation(name: db))
        #expect(server.requestCount(path: tokenPath, method: "POST") == 1)

        server.expireAllSessions()
        let before = server.requestCount(path: tokenPath, method: "POST")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<24 {
                group.addTask {
                    let note = Note(_id: "n\(i)", _rev: nil, text: "written after the token was revoked", n: i)
                    _ = try await client.value(PutDocumentOperation(database: db, id: "n\(i)", document: note))
                }
            }
            try await group.waitForAll()
        }
        #expect(server.requestCount(path: tokenPath, method: "POST") == before + 1)
        let info = try await client.value(GetDatabaseInfoOperation(name: db))
        #expect(info.docCount == 24)
        // Every request carried a bearer token: no cookie login was ever tried.
        #expect(server.requestCount(path: "/_session", method: "POST") == 0)
    }

    @Test("IAM: a wrong API key fails every operation with an authentication error after one token request")
    func iamWrongKey() async throws {
        guard let server = try startServer("IAM wrong key") else { return }
        defer { server.stop() }
        let client = client(server, .iam(apiKey: "not-a-key", tokenURL: server.iamTokenURL), concurrency: 4)
        defer { client.shutdown() }
        let errors = await withTaskGroup(of: CouchError?.self) { group in
            for _ in 0..<6 {
                group.addTask {
                    do {
                        _ = try await client.value(ListDatabasesOperation())
                        return nil
                    } catch {
                        return error as? CouchError
                    }
                }
            }
            return await group.reduce(into: [CouchError?]()) { $0.append($1) }
        }
        #expect(errors.count == 6)
        #expect(errors.allSatisfy { $0?.kind == .authentication })
        #expect(errors.allSatisfy { !String(reflecting: $0 as Any).contains("not-a-key") })
        #expect(server.requestCount(path: "/_iam/identity/token", method: "POST") == 1)
        #expect(server.requestCount(path: "/_all_dbs") == 0)
    }

    @Test("A static HS256 JWT authenticates as its subject; an expired one gets 401")
    func staticJWT() async throws {
        guard let server = try startServer("static JWT") else { return }
        defer { server.stop() }
        let token = server.makeJWT(subject: "jwt-admin", roles: ["_admin"], expiresIn: 600)
        let client = client(server, .bearerToken(token))
        defer { client.shutdown() }
        let session = try await client.value(GetSessionOperation())
        #expect(session.userCtx.name == "jwt-admin")
        #expect(session.userCtx.roles == ["_admin"])
        #expect(session.info?.authenticated == "jwt")
        try await client.execute(CreateDatabaseOperation(name: "jwt-e2e"))
        _ = try await client.value(ListDatabasesOperation())

        let expired = self.client(server, .bearerToken(server.makeJWT(subject: "jwt-admin", expiresIn: -30)))
        defer { expired.shutdown() }
        do {
            _ = try await expired.value(ListDatabasesOperation())
            Issue.record("an expired JWT was accepted")
        } catch {
            #expect(error.statusCode == 401)
            #expect(error.error == "unauthorized")
            #expect(error.reason == "exp not in future")
        }
        let forged = self.client(server, .bearerToken(server.makeJWT(subject: "jwt-admin", secret: "guess")))
        defer { forged.shutdown() }
        await #expect(throws: CouchError.self) { _ = try await forged.value(ListDatabasesOperation()) }
    }
}
