import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

/// A fake IAM token service plus a CouchDB that accepts only the current bearer token.
final class FakeIAM: @unchecked Sendable {
    // @unchecked Sendable: all state is behind `lock`.
    private let lock = NSLock()
    private var current: String?
    private var issued = 0
    let apiKey: String
    let lifetime: Int

    init(apiKey: String = "iam-key-123", lifetime: Int = 3600) {
        self.apiKey = apiKey
        self.lifetime = lifetime
    }

    var tokensIssued: Int {
        lock.lock()
        defer { lock.unlock() }
        return issued
    }

    func revokeAll() {
        lock.lock()
        current = nil
        lock.unlock()
    }

    func respond(_ request: HTTPRequest) -> SimulatedResponse {
        lock.lock()
        defer { lock.unlock() }
        if request.url.host == "iam.invalid" {
            let form = String(decoding: request.body ?? Data(), as: UTF8.self)
            guard request.method == .post, form.contains("grant_type=urn%3Aibm%3Aparams%3Aoauth%3Agrant-type%3Aapikey"),
                form.contains("apikey=\(apiKey)")
            else {
                return .json(400, #"{"errorCode":"BXNIM0415E","errorMessage":"Provided API key could not be found."}"#)
            }
            issued += 1
            current = "token-\(issued)"
            return .json(
                200, #"{"access_token":"\#(current!)","token_type":"Bearer","expires_in":\#(lifetime),"expiration":0}"#)
        }
        guard let current, request.headers["Authorization"] == "Bearer \(current)" else {
            return .json(401, #"{"error":"unauthorized","reason":"bad token"}"#)
        }
        return .json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#)
    }
}

@Suite("IAM and bearer-token authentication", .ownThreads)
struct TokenAuthenticationTests {
    static let tokenURL = URL(string: "http://iam.invalid/identity/token")!

    func client(_ iam: FakeIAM, apiKey: String? = nil, concurrency: Int = 6) -> (CouchDBClient, SimulatedTransport) {
        var configuration = Configuration()
        configuration.authentication = .iam(apiKey: apiKey ?? iam.apiKey, tokenURL: Self.tokenURL)
        configuration.maximumConcurrentOperations = concurrency
        let transport = SimulatedTransport(responder: iam.respond)
        return (Simulation.client(transport: transport, configuration: configuration), transport)
    }

    @Test("The API key is exchanged for a token once; requests carry Authorization: Bearer")
    func exchange() {
        let iam = FakeIAM()
        let (client, transport) = client(iam)
        for _ in 0..<3 {
            #expect(client.executeAndWait(GetServerInfoOperation()).map(\.statusCode) == .success(200))
        }
        #expect(iam.tokensIssued == 1)
        let first = transport.requests.first
        #expect(first?.request.url == Self.tokenURL)
        #expect(first?.headers["Content-Type"] == "application/x-www-form-urlencoded")
        #expect(transport.requests.dropFirst().allSatisfy { $0.headers["Authorization"] == "Bearer token-1" })
    }

    @Test("A revoked token: N concurrent operations share one refresh and all succeed")
    func oneRefresh() {
        let iam = FakeIAM()
        let (client, _) = client(iam, concurrency: 12)
        _ = client.executeAndWait(GetServerInfoOperation())
        iam.revokeAll()
        let done = DispatchSemaphore(value: 0)
        let statuses = EventLog<Int>()
        for _ in 0..<30 {
            client.add(operation: GetServerInfoOperation()) { result in
                statuses.append((try? result.get().statusCode) ?? -1)
                done.signal()
            }
        }
        #expect(waitFor(done, count: 30))
        #expect(statuses.all.allSatisfy { $0 == 200 })
        #expect(iam.tokensIssued == 2)
    }

    @Test("A wrong API key fails every operation with an authentication error after one token request")
    func wrongKey() {
        let iam = FakeIAM()
        let (client, transport) = client(iam, apiKey: "not-the-key")
        let results = (0..<4).map { _ in client.executeAndWait(GetServerInfoOperation()) }
        #expect(results.allSatisfy { if case .failure(let e) = $0 { e.kind == .authentication } else { false } })
        #expect(transport.requests.count == 1)
    }

    @Test("A static bearer token is sent as is, never renewed")
    func staticBearer() {
        var configuration = Configuration()
        configuration.authentication = .bearerToken("jwt.header.payload")
        let run = Simulation.run(
            GetServerInfoOperation(), response: .json(200, #"{"couchdb":"Welcome","version":"3.5.0"}"#),
            configuration: configuration)
        #expect(run.requests.count == 1)
        #expect(run.request?.headers["Authorization"] == "Bearer jwt.header.payload")
    }

    @Test("Keys and tokens never appear in descriptions or transcripts")
    func redacted() {
        let iamMode = AuthenticationMode.iam(apiKey: "iam-key-123", tokenURL: Self.tokenURL)
        let bearer = AuthenticationMode.bearerToken("jwt.secret")
        var configuration = Configuration()
        configuration.authentication = iamMode
        for text in [
            String(describing: iamMode), String(reflecting: iamMode), String(describing: bearer),
            String(reflecting: bearer), String(describing: configuration), String(reflecting: configuration),
        ] {
            #expect(!text.contains("iam-key-123") && !text.contains("jwt.secret"), "\(text)")
        }
        let lines = EventLog<String>()
        configuration.logTranscripts = true
        configuration.logHandler = { lines.append($0.message) }
        let iam = FakeIAM()
        let transport = SimulatedTransport(responder: iam.respond)
        _ = Simulation.client(transport: transport, configuration: configuration).executeAndWait(
            GetServerInfoOperation())
        let text = lines.all.joined(separator: "\n")
        #expect(text.contains("Authorization: <redacted>"))
        #expect(!text.contains("iam-key-123"))
        #expect(!text.contains("token-1"))
    }
}
