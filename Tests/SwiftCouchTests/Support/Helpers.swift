import Foundation
import SwiftCouch
import SwiftCouchTesting
import Testing

/// A thread-safe list, for recording events from callbacks.
final class EventLog<Element: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: `items` is only touched under `lock`.
    private let lock = NSLock()
    private var items: [Element] = []

    func append(_ item: Element) {
        lock.lock()
        items.append(item)
        lock.unlock()
    }

    var all: [Element] {
        lock.lock()
        defer { lock.unlock() }
        return items
    }

    var count: Int { all.count }
}

/// Waits (bounded) for `count` signals; returns false on timeout so a hang becomes a failure.
func waitFor(_ semaphore: DispatchSemaphore, count: Int = 1, seconds: Double = 10) -> Bool {
    for _ in 0..<count where semaphore.wait(timeout: .now() + seconds) == .timedOut {
        return false
    }
    return true
}

/// An operation that records every pipeline step it is asked for, in order.
struct RecordingOperation: JSONOperation {
    typealias Response = OKResponse

    let log: EventLog<String>
    var failValidation = false
    var failSerialisation = false
    private var body: Data?

    init(log: EventLog<String>, failValidation: Bool = false, failSerialisation: Bool = false) {
        self.log = log
        self.failValidation = failValidation
        self.failSerialisation = failSerialisation
    }

    func validate() throws(CouchError) {
        log.append("validate")
        if failValidation { throw CouchError.validation("bad input") }
    }

    mutating func serialise() throws {
        log.append("serialise")
        if failSerialisation { throw SimulationError("cannot serialise") }
        body = Data(#"{"x":1}"#.utf8)
    }

    var endpoint: CouchPath {
        log.append("endpoint")
        return CouchPath("db", "doc")
    }

    var parameters: [URLQueryItem] {
        log.append("parameters")
        return [URLQueryItem(name: "rev", value: "1-a")]
    }

    var method: HTTPMethod {
        log.append("method")
        return .put
    }

    var data: Data? {
        log.append("data")
        return body
    }

    var contentType: String? {
        log.append("contentType")
        return "application/json"
    }

    func processResponse(data: Data, httpInfo: HTTPInfo) throws -> OKResponse {
        log.append("processResponse")
        try throwIfError(data: data, httpInfo: httpInfo)
        return try decodeResponse(data, httpInfo: httpInfo)
    }
}

/// A small seeded generator (SplitMix64) so "random" inputs (chunkings, documents, bytes) are the same on every run.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
