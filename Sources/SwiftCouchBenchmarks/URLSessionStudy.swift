import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `--urlsession-study`: ways of driving `URLSession` for small CouchDB requests, compared by
/// client CPU per PUT+GET pair (issue: "find the cheapest way to drive URLSession on Linux").
/// Each variant runs in this process in turn, interleaved over several rounds so that machine
/// noise falls on all of them alike; the table shows the median and the range.
enum URLSessionStudy {
    /// One way of driving URLSession.
    struct Variant: Sendable {
        var name: String
        /// Ephemeral with cookie storage, cache and credential storage off (as `URLSessionTransport`).
        var tunedConfiguration = true
        var delegateQueue: QueueKind = .sessionDefault
        var style: Style = .completionHandler
        var encoding: Encoding = .prebuilt

        enum QueueKind: Sendable { case sessionDefault, concurrent }
        enum Style: Sendable { case completionHandler, uploadTask, dataDelegate, asyncData }
        enum Encoding: Sendable { case prebuilt, jsonEncoder, jsonSerialization }
    }

    static let variants: [Variant] = [
        Variant(name: "stock ephemeral configuration, completion handler, httpBody", tunedConfiguration: false),
        Variant(name: "tuned configuration, completion handler, httpBody"),
        Variant(name: "tuned, completion handler, concurrent delegate queue", delegateQueue: .concurrent),
        Variant(name: "tuned, uploadTask(with:from:) for the PUT", style: .uploadTask),
        Variant(name: "tuned, data delegate (serial queue)", style: .dataDelegate),
        Variant(name: "tuned, async data(for:)", style: .asyncData),
        Variant(name: "tuned, completion handler, body from JSONEncoder", encoding: .jsonEncoder),
        Variant(name: "tuned, completion handler, body from JSONSerialization", encoding: .jsonSerialization),
    ]

    struct Document: Codable {
        var name: String
        var n: Int
        var tags: [String]
    }

    static func run(base: URL, username: String, password: String, quick: Bool) async throws {
        let authorization = "Basic " + Data("\(username):\(password)".utf8).base64EncodedString()
        let database = "/swiftcouch-urlsession-study-\(UUID().uuidString.lowercased().prefix(8))"
        let setup = Driver(variant: variants[1], base: base, authorization: authorization)
        _ = try await setup.send("PUT", database, body: nil)
        let pairs = quick ? 100 : 2_000
        let rounds = quick ? 1 : 3
        var samples: [String: [Double]] = [:]
        for concurrency in [1, 16] {
            for _ in 0..<rounds {
                for variant in variants where concurrency == 1 || variant.encoding == .prebuilt {
                    let driver = Driver(variant: variant, base: base, authorization: authorization)
                    try await driver.pairs(pairs / 10, concurrency: concurrency, database: database)  // warm-up
                    let before = Measure.cpuSeconds()
                    try await driver.pairs(pairs, concurrency: concurrency, database: database)
                    let milliseconds = (Measure.cpuSeconds() - before) * 1000 / Double(pairs)
                    samples["\(concurrency)|\(variant.name)", default: []].append(milliseconds)
                    driver.finish()
                }
            }
        }
        _ = try await setup.send("DELETE", database, body: nil)
        setup.finish()
        print("| way of driving URLSession | concurrency | client CPU ms per PUT+GET (median) | range |")
        print("|---|---:|---:|---|")
        for concurrency in [1, 16] {
            for variant in variants {
                guard let values = samples["\(concurrency)|\(variant.name)"]?.sorted() else { continue }
                print(
                    "| \(variant.name) | \(concurrency) | \(String(format: "%.3f", values[values.count / 2])) | "
                        + "\(String(format: "%.3f", values.first!))–\(String(format: "%.3f", values.last!)) |")
            }
        }
    }

    /// Runs PUT+GET pairs one way.
    final class Driver: NSObject, URLSessionDataDelegate, @unchecked Sendable {
        // @unchecked Sendable: `pending` is only touched under `lock`; the rest is immutable.
        let variant: Variant
        let base: URL
        let authorization: String
        private var session: URLSession!
        private let lock = NSLock()
        private var pending: [Int: (Data, CheckedContinuation<Data, any Error>)] = [:]

        init(variant: Variant, base: URL, authorization: String) {
            self.variant = variant
            self.base = base
            self.authorization = authorization
            super.init()
            let configuration = URLSessionConfiguration.ephemeral
            if variant.tunedConfiguration {
                configuration.httpCookieStorage = nil
                configuration.httpShouldSetCookies = false
                configuration.httpCookieAcceptPolicy = .never
                configuration.urlCache = nil
                configuration.urlCredentialStorage = nil
                configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
            }
            configuration.httpMaximumConnectionsPerHost = 6
            var queue: OperationQueue?
            if variant.delegateQueue == .concurrent {
                queue = OperationQueue()
            } else if variant.style == .dataDelegate {
                queue = OperationQueue()
                queue?.maxConcurrentOperationCount = 1
            }
            session = URLSession(
                configuration: configuration, delegate: variant.style == .dataDelegate ? self : nil,
                delegateQueue: queue)
        }

        func finish() { session.finishTasksAndInvalidate() }

        func body(_ n: Int) throws -> Data {
            switch variant.encoding {
            case .prebuilt:
                return Data(#"{"name":"document \#(n)","n":\#(n),"tags":["a","b"]}"#.utf8)
            case .jsonEncoder:
                return try JSONEncoder().encode(Document(name: "document \(n)", n: n, tags: ["a", "b"]))
            case .jsonSerialization:
                return try JSONSerialization.data(withJSONObject: [
                    "name": "document \(n)", "n": n, "tags": ["a", "b"],
                ])
            }
        }

        func pairs(_ count: Int, concurrency: Int, database: String) async throws {
            try await withThrowingTaskGroup(of: Void.self) { group in
                var next = 0
                func add() {
                    let n = next
                    next += 1
                    group.addTask {
                        let path = "\(database)/doc-\(UUID().uuidString.prefix(8))-\(n)"
                        _ = try await self.send("PUT", path, body: try self.body(n))
                        let read = try await self.send("GET", path, body: nil)
                        guard read.count > 10 else { throw PlainClient.Failure(description: "short GET body") }
                    }
                }
                for _ in 0..<min(concurrency, count) { add() }
                while try await group.next() != nil {
                    if next < count { add() }
                }
            }
        }

        func send(_ method: String, _ path: String, body: Data?) async throws -> Data {
            var request = URLRequest(url: URL(string: base.absoluteString + path)!)
            request.httpMethod = method
            request.addValue(authorization, forHTTPHeaderField: "Authorization")
            request.addValue("application/json", forHTTPHeaderField: "Accept")
            if body != nil { request.addValue("application/json", forHTTPHeaderField: "Content-Type") }
            if variant.style != .uploadTask || body == nil { request.httpBody = body }
            switch variant.style {
            case .asyncData:
                return try await session.data(for: request).0
            case .dataDelegate:
                return try await withCheckedThrowingContinuation { continuation in
                    let task = session.dataTask(with: request)
                    lock.withLock { pending[task.taskIdentifier] = (Data(), continuation) }
                    task.resume()
                }
            case .completionHandler, .uploadTask:
                return try await withCheckedThrowingContinuation { continuation in
                    let handler: @Sendable (Data?, URLResponse?, (any Error)?) -> Void = { data, _, error in
                        if let error {
                            continuation.resume(throwing: error)
                        } else {
                            continuation.resume(returning: data ?? Data())
                        }
                    }
                    let task =
                        if variant.style == .uploadTask, let body {
                            session.uploadTask(with: request, from: body, completionHandler: handler)
                        } else {
                            session.dataTask(with: request, completionHandler: handler)
                        }
                    task.resume()
                }
            }
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
            lock.withLock { pending[dataTask.taskIdentifier]?.0.append(data) }
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            guard let (data, continuation) = lock.withLock({ pending.removeValue(forKey: task.taskIdentifier) }) else {
                return
            }
            if let error { continuation.resume(throwing: error) } else { continuation.resume(returning: data) }
        }
    }
}
