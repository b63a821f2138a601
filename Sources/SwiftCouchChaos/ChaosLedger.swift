import Foundation
import SwiftCouch

/// What one operation's completion said, as far as the database is concerned.
enum ChaosOutcome: Sendable, Equatable {
    /// The client reported success; for a write, with the revision it reported.
    case success(rev: String?, token: String?)
    /// The client reported a failure that says the operation did not happen (nothing was sent,
    /// or the server answered that it refused it).
    case notApplied(String)
    /// The client reported a failure whose outcome is unknown (sent, then cut off or cancelled).
    case unknown(String)
}

/// The kinds of operation the soak runs.
enum ChaosKind: String, Sendable, CaseIterable {
    case create, update, read, delete, post
}

/// One operation of the soak and what became of it.
struct ChaosEntry: Sendable {
    var kind: ChaosKind
    /// The document id (chains) or the `chaosKey` (POSTs).
    var key: String
    /// The token the write put into the document (writes only).
    var token: String?
    var completions = 0
    var outcome: ChaosOutcome?
    var cancelRequested = false
}

/// Every operation's entry, behind one lock: completion handlers run on the client's callback
/// queue, cancellations on a global queue.
final class ChaosLedger: @unchecked Sendable {
    // @unchecked Sendable: `entries`, `lastCompletion` are only touched under `lock`.
    private let lock = NSLock()
    private var entries: [ChaosEntry] = []
    private var lastCompletion = Date()

    /// Registers an operation and returns its index.
    func register(_ kind: ChaosKind, key: String, token: String? = nil) -> Int {
        lock.lock()
        defer { lock.unlock() }
        entries.append(ChaosEntry(kind: kind, key: key, token: token))
        return entries.count - 1
    }

    func markCancelRequested(_ index: Int) {
        lock.lock()
        defer { lock.unlock() }
        entries[index].cancelRequested = true
    }

    /// Records a completion; a second completion is counted, never overwrites the first.
    func complete(_ index: Int, _ outcome: ChaosOutcome) {
        lock.lock()
        defer { lock.unlock() }
        entries[index].completions += 1
        if entries[index].outcome == nil { entries[index].outcome = outcome }
        lastCompletion = Date()
    }

    /// The outcome of a completed operation (nil while it runs).
    func outcome(_ index: Int) -> ChaosOutcome? {
        lock.lock()
        defer { lock.unlock() }
        return entries[index].outcome
    }

    var snapshot: [ChaosEntry] {
        lock.lock()
        defer { lock.unlock() }
        return entries
    }

    /// How many operations have not completed, and seconds since the last completion.
    var progress: (pending: Int, idle: TimeInterval) {
        lock.lock()
        defer { lock.unlock() }
        return (entries.filter { $0.completions == 0 }.count, Date().timeIntervalSince(lastCompletion))
    }
}

extension ChaosOutcome {
    /// Classifies a client error by what it says about the operation's effect.
    init(_ error: CouchError) {
        if error.isOutcomeUnknown || error.kind == .decoding {
            self = .unknown(error.description)
        } else {
            self = .notApplied(error.description)
        }
    }
}
