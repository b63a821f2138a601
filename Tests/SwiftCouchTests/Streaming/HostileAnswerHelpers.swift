import Foundation
import SwiftCouch
import SwiftCouchTesting
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

// Helpers for the tests of issue 24's hostile answers to streams, followers and pagers.

/// Counts requests and answers each with `answer(n)` (n from 0).
final class CountingResponder: @unchecked Sendable {
    // @unchecked Sendable: `count` is behind `lock`.
    private let lock = NSLock()
    private var count = 0
    private let answer: @Sendable (Int, HTTPRequest) -> SimulatedResponse

    init(_ answer: @escaping @Sendable (Int, HTTPRequest) -> SimulatedResponse) { self.answer = answer }

    var requests: Int {
        lock.lock()
        defer { lock.unlock() }
        return count
    }

    func client(configure: (inout Configuration) -> Void = { _ in }) -> CouchDBClient {
        var configuration = Configuration()
        configuration.retryPolicy = RetryPolicy(maximumRetries: 2, initialDelay: 0.001, maximumDelay: 0.01)
        configure(&configuration)
        let transport = SimulatedTransport { [self] request in
            lock.lock()
            let index = count
            count += 1
            lock.unlock()
            return answer(index, request)
        }
        return Simulation.client(transport: transport, configuration: configuration)
    }
}
