import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

// Helpers for the tests of issue 24's hostile answers to streams, followers and pagers.

/// Iterates `sequence` until it ends or throws, for at most `seconds` (then the iteration is
/// cancelled): the elements taken and the error, if any. A sequence that would loop forever
/// shows up as a `.cancelled` error here instead of a hung test. The default bound is generous:
/// in a full parallel run on a loaded machine, a test that ends at once may take many seconds.
func drain<S: AsyncSequence & Sendable>(_ sequence: S, within seconds: Double = 60) async -> (
    elements: Int, error: (any Error)?
) where S.Element: Sendable {
    // Scheduler time: a test process whose cooperative pool is held by other tests for a minute
    // (seen under ThreadSanitizer) does not count against the bound.
    let outcome = await withSchedulerBound(.seconds(seconds)) { () async -> (Int, (any Error)?) in
        var count = 0
        do {
            for try await _ in sequence { count += 1 }
            return (count, nil)
        } catch {
            return (count, error)
        }
    }
    switch outcome.result {
    case .success(let ended): return ended
    case .failure(let error): return (0, error)
    }
}

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
