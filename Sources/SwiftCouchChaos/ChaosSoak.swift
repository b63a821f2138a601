import CouchTestServer
import Foundation
import SwiftCouch

/// A soak document: the token of the write that made this revision, and the key that groups the
/// documents one logical write created (a duplicate shows as two documents with one key).
struct SoakDocument: Codable, Sendable {
    var _id: String?
    var chaosKey: String
    var token: String
    var n: Int
}

/// Runs the soak: faults on, operations through the client, faults off, the database read back.
struct ChaosSoak {
    let options: ChaosOptions

    /// Every fault shape the TestServer can produce, each at a set rate. Returns a line per rule.
    /// Documents per `_bulk_docs` request of the soak's BulkWriter.
    static let bulkBatchSize = 100

    static func installFaults(on server: TestServer) -> [String] {
        let faults = server.faults
        let rules: [(TestServerFaults.Fault, Double, TestServerFaults.Match)] = [
            (.tooManyRequests(retryAfter: nil), 0.08, .any),
            (.serviceUnavailable(retryAfter: nil), 0.03, .any),
            (.dropConnection, 0.03, .any),
            (.delay(seconds: 0.05), 0.05, .any),
            (.truncatedBody, 0.02, .any),
            (.invalidJSON, 0.01, .method("GET")),
            // The shapes real servers and proxies produce.
            (.replyThenClose(seconds: 0.05), 0.03, .any),
            (.tooManyRequestsThenClose(retryAfter: nil, seconds: 0.05), 0.02, .any),
            (.dropAfterProcessing, 0.02, .any),
            (.slowHead(seconds: 0.1), 0.01, .any),
            // Hostile peers (issue 24): a Retry-After that is no number, interim responses first.
            (.tooManyRequests(retryAfter: "nan"), 0.02, .any),
            (.interim(seconds: 0.01, count: 3), 0.02, .any),
            (.tooManyRequests(retryAfter: "nan"), 0.1, .path("/_session", method: "POST")),
            (.tooManyRequests(retryAfter: nil), 0.25, .path("/_session", method: "POST")),
            (.dropConnection, 0.05, .path("/_session", method: "POST")),
        ]
        return rules.map { fault, share, match in
            faults.failFraction(share, with: fault, matching: match)
            return "\(Int(share * 100))% \(fault) on \(match)"
        }
    }

    func run() async throws -> ChaosReport {
        var serverConfiguration = TestServer.Configuration()
        serverConfiguration.faultSeed = options.seed
        serverConfiguration.sessionTimeout = 600
        // Idle keep-alive connections closed under the client, as load balancers do.
        serverConfiguration.keepAliveIdleTimeout = 0.5
        let server = try TestServer.start(serverConfiguration)
        defer { server.stop() }
        let credentials = Credentials(username: server.adminName, password: server.adminPassword)
        let database = "chaos-\(UUID().uuidString.lowercased().prefix(8))"

        // Set up without faults, then turn them on.
        let setup = CouchDBClient(url: server.url, credentials: credentials)
        _ = try await setup.value(CreateDatabaseOperation(name: database))

        var configuration = Configuration()
        configuration.requestTimeout = 5
        configuration.retryPolicy = RetryPolicy(
            maximumRetries: 6, initialDelay: 0.01, maximumDelay: 0.2, retryServerErrors: true)
        configuration.maximumConcurrentOperations = options.concurrency
        let client = CouchDBClient(url: server.url, credentials: credentials, configuration: configuration)
        let operationBound = Self.operationBound(configuration)

        let faultLines = Self.installFaults(on: server)
        server.resetRequestCounts()
        let expiry = SessionExpiry(server: server, every: 0.2)
        let ledger = ChaosLedger()
        var random = ChaosRandom(seed: options.seed)

        let started = Date()
        let bulk = Task { try await Self.bulkWrite(client: client, database: database, count: options.bulkDocuments) }
        let cancellable =
            enqueueChains(client: client, database: database, ledger: ledger, random: &random)
            + enqueuePosts(client: client, database: database, ledger: ledger)
        cancelSome(cancellable, ledger: ledger, random: &random)

        // Wait: a stall is an operation still pending when no operation has completed for longer
        // than one operation may take.
        var stalled: [ChaosEntry] = []
        while true {
            let (pending, idle) = ledger.progress
            if pending == 0 { break }
            if idle > operationBound {
                stalled = ledger.snapshot.filter { $0.completions == 0 }
                break
            }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        // The bulk writer has the same bound from the moment the single operations are done.
        let bulkDone = BulkCompletion()
        let waiter = Task {
            let result: Result<[BulkWriteResult], any Error>
            do { result = .success(try await bulk.value) } catch { result = .failure(error) }
            bulkDone.finish(result)
        }
        let bulkDeadline = Date() + (stalled.isEmpty ? operationBound : 0)
        while bulkDone.result == nil, Date() < bulkDeadline { try await Task.sleep(nanoseconds: 50_000_000) }
        let bulkResults = bulkDone.result ?? .failure(CouchError.validation("stalled"))
        if bulkDone.result == nil {
            stalled.append(ChaosEntry(kind: .post, key: "the BulkWriter"))
            bulk.cancel()
            waiter.cancel()
        }
        let elapsed = Date().timeIntervalSince(started)
        expiry.stop()
        let faultsFired = server.faults.triggeredCount
        server.faults.clear()
        client.operationQueue.cancelAllOperations()

        let requests = server.requestCount(pathPrefix: "/\(database)")
        let logins = server.requestCount(path: "/_session", method: "POST")
        let verifier = ChaosVerifier(client: setup, database: database)
        var report = try await verifier.verify(ledger.snapshot, bulk: bulkResults, bulkCount: options.bulkDocuments)
        report.stalls = stalled.count
        report.stalledExamples = stalled.prefix(5).map { "\($0.kind) \($0.key)" }
        report.requests = requests
        report.baselineRequests =
            ledger.snapshot.count + (options.bulkDocuments + Self.bulkBatchSize - 1) / Self.bulkBatchSize
        report.logins = logins
        report.elapsed = elapsed
        report.faultLines = faultLines
        report.faultsFired = faultsFired
        _ = try? await setup.value(DeleteDatabaseOperation(name: database))
        client.shutdown()
        setup.shutdown()
        return report
    }

    /// How long one operation may take at most: every attempt's timeout and backoff, for the
    /// operation and for a login before it, with a margin for a loaded machine.
    static func operationBound(_ configuration: Configuration) -> TimeInterval {
        let policy = configuration.retryPolicy
        let attempt = configuration.requestTimeout + policy.maximumDelay
        let attempts = Double(policy.maximumRetries + 1)
        return 2 * attempts * attempt + 10
    }

    /// Chains create → update → read → delete, each step a task depending on the one before and
    /// built from its result, on the client's queue. Returns the tasks that may be cancelled.
    private func enqueueChains(
        client: CouchDBClient, database: String, ledger: ChaosLedger, random: inout ChaosRandom
    ) -> [(Int, Foundation.Operation)] {
        var tasks: [(Int, Foundation.Operation)] = []
        for chain in 0..<options.chains {
            let id = "doc-\(chain)"
            let createToken = "c\(chain)"
            let updateToken = "u\(chain)"
            let createIndex = ledger.register(.create, key: id, token: createToken)
            let create = client.task(
                for: PutDocumentOperation(
                    database: database, id: id, document: SoakDocument(chaosKey: id, token: createToken, n: chain))
            ) { result in ledger.complete(createIndex, Self.writeOutcome(result, token: createToken)) }

            let updateIndex = ledger.register(.update, key: id, token: updateToken)
            let update = client.task(
                building: {
                    let rev = try Self.revision(of: create)
                    return PutDocumentOperation(
                        database: database, id: id, document: SoakDocument(chaosKey: id, token: updateToken, n: chain),
                        revision: rev)
                },
                completion: { result in ledger.complete(updateIndex, Self.writeOutcome(result, token: updateToken)) })
            update.addDependency(create)

            let readIndex = ledger.register(.read, key: id)
            let read = client.task(for: GetDocumentOperation<SoakDocument>(database: database, id: id)) { result in
                switch result {
                case .success(let response): ledger.complete(readIndex, .success(rev: nil, token: response.value.token))
                case .failure(let error): ledger.complete(readIndex, ChaosOutcome(error))
                }
            }
            read.addDependency(update)

            let deleteIndex = ledger.register(.delete, key: id)
            let delete = client.task(
                building: {
                    let rev: String
                    if let updated = try? Self.revision(of: update) {
                        rev = updated
                    } else {
                        rev = try Self.revision(of: create)
                    }
                    return DeleteDocumentOperation(database: database, id: id, revision: rev)
                },
                completion: { result in ledger.complete(deleteIndex, Self.writeOutcome(result, token: nil)) })
            delete.addDependency(read)

            // Add in an order that makes the queue honour the dependencies, not the arrival order.
            for task in [delete, read, update, create] as [Foundation.Operation] { client.add(task: task) }
            tasks += [(createIndex, create), (updateIndex, update), (readIndex, read), (deleteIndex, delete)]
            _ = random.next()
        }
        return tasks
    }

    /// `POST /{db}` writes: never resent, so never duplicated.
    private func enqueuePosts(
        client: CouchDBClient, database: String, ledger: ChaosLedger
    ) -> [(Int, Foundation.Operation)] {
        (0..<options.posts).map { post in
            let key = "post-\(post)"
            let index = ledger.register(.post, key: key, token: key)
            let task = client.add(
                operation: CreateDocumentOperation(
                    database: database, document: SoakDocument(chaosKey: key, token: key, n: post))
            ) { result in ledger.complete(index, Self.writeOutcome(result, token: key)) }
            return (index, task)
        }
    }

    /// Cancels a share of the operations, each at a random moment in the first seconds.
    private func cancelSome(
        _ tasks: [(Int, Foundation.Operation)], ledger: ChaosLedger, random: inout ChaosRandom
    ) {
        // About the time the operations take, so that cancellations land before, during and after sending.
        let cancelWindow = max(0.2, Double(tasks.count) / 500)
        for (index, task) in tasks where Double.random(in: 0..<1, using: &random) < options.cancelShare {
            let delay = Double.random(in: 0..<cancelWindow, using: &random)
            DispatchQueue.global().asyncAfter(deadline: .now() + delay) {
                ledger.markCancelRequested(index)
                task.cancel()
            }
        }
    }

    private static func bulkWrite(client: CouchDBClient, database: String, count: Int) async throws
        -> [BulkWriteResult]
    {
        let writer = BulkWriter<SoakDocument>(
            client: client, database: database,
            options: BulkWriter.Options(batchSize: Self.bulkBatchSize, maximumBatchesInFlight: 2))
        for n in 0..<count {
            try await writer.add(SoakDocument(chaosKey: "bulk-\(n)", token: "bulk-\(n)", n: n))
        }
        return try await writer.finish()
    }

    private static func revision(of task: CouchOperationTask<PutDocumentOperation<SoakDocument>>) throws -> String {
        guard case .success(let response) = task.result, let rev = response.value.rev else {
            throw CouchError.validation("The write this step depends on did not succeed.")
        }
        return rev
    }

    private static func writeOutcome(
        _ result: Result<CouchResponse<DocumentWriteResponse>, CouchError>, token: String?
    ) -> ChaosOutcome {
        switch result {
        case .success(let response): return .success(rev: response.value.rev, token: token)
        case .failure(let error): return ChaosOutcome(error)
        }
    }
}

/// Expires every session on the server at a fixed interval, so that logins happen all the time.
final class SessionExpiry: @unchecked Sendable {
    // @unchecked Sendable: `timer` is set once in init and only cancelled afterwards.
    private let timer: DispatchSourceTimer

    init(server: TestServer, every interval: TimeInterval) {
        timer = DispatchSource.makeTimerSource(queue: DispatchQueue.global())
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { server.expireAllSessions() }
        timer.resume()
    }

    func stop() { timer.cancel() }
}

/// The bulk writer's result, once it has one.
final class BulkCompletion: @unchecked Sendable {
    // @unchecked Sendable: `stored` is only touched under `lock`.
    private let lock = NSLock()
    private var stored: Result<[BulkWriteResult], any Error>?

    func finish(_ result: Result<[BulkWriteResult], any Error>) {
        lock.lock()
        defer { lock.unlock() }
        stored = result
    }

    var result: Result<[BulkWriteResult], any Error>? {
        lock.lock()
        defer { lock.unlock() }
        return stored
    }
}
