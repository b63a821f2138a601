import Foundation
import SwiftCouch

/// One session of a replication: the peers checked, the checkpoints read, the changes copied
/// batch by batch, checkpoints written. Used by one task (its batch workers get a ``BatchWorker``).
final class ReplicationSession {
    let replicator: Replicator
    let sessionID = UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
    let startTime = HTTPDate.now()
    /// The counts of this session.
    private(set) var summary = ReplicationSummary()
    /// Whether the session caught up with the source at least once (resets the backoff).
    private(set) var caughtUp = false

    private var source: SyncEndpoint { replicator.source }
    private var target: SyncEndpoint { replicator.target }
    private var options: ReplicationOptions { replicator.options }
    private var localID: String { "_local/" + replicator.replicationID }

    private var sourceInstance: String?
    private var targetInstance: String?
    private var sourceLogRev: String?
    private var targetLogRev: String?
    private var hadCheckpoint = false
    private var history: [ReplicationLog.Entry] = []
    /// Where this session started (nil: from the start).
    private var startSeq: JSONValue?
    /// The highest sequence whose batch and every earlier batch are written.
    private var committedSeq: JSONValue?
    /// The sequence last checkpointed (nil before the first checkpoint of this session).
    private var checkpointedSeq: JSONValue?
    /// The last sequence read from the feed.
    private var readSeq: JSONValue?
    private var lastCheckpoint = Date()

    init(replicator: Replicator) {
        self.replicator = replicator
    }

    func run() async throws -> ReplicationSummary {
        replicator.setState(.connecting)
        try await verifyPeers()
        try await readCheckpoints()
        replicator.setState(.busy)
        let worker = BatchWorker(replicator: replicator)
        try await catchUp(worker)
        caughtUp = true
        guard options.continuous else { return summary }
        replicator.setState(.idle)
        while !Task.isCancelled && !replicator.stopRequested {
            let woke = try await waitForChanges()
            guard woke else { continue }
            replicator.setState(.busy)
            try await catchUp(worker)
            replicator.setState(.idle)
        }
        return summary
    }

    // MARK: Peers and checkpoints

    private func verifyPeers() async throws {
        let sourceInfo = try await info(source)
        sourceInstance = sourceInfo.instanceStartTime
        var targetInfo: DatabaseInfo
        do {
            targetInfo = try await info(target)
        } catch {
            guard error.isNotFound, options.createTarget else { throw error }
            do {
                _ = try await target.send(CreateDatabaseOperation(name: target.databaseName))
            } catch {
                guard error.statusCode == 412 else { throw error }  // 412: created meanwhile
            }
            targetInfo = try await info(target)
        }
        targetInstance = targetInfo.instanceStartTime
    }

    private func info(_ endpoint: SyncEndpoint) async throws(CouchError) -> DatabaseInfo {
        do {
            return try await endpoint.send(GetDatabaseInfoOperation(name: endpoint.databaseName))
        } catch {
            var error = error
            if error.isNotFound {
                error.message = "The replication's \(endpoint.label) does not exist (\(error.message))."
            }
            throw error
        }
    }

    private func readLog(_ endpoint: SyncEndpoint) async throws(CouchError) -> ReplicationLog? {
        do {
            let json = try await endpoint.send(
                GetDocumentOperation<JSONValue>(database: endpoint.databaseName, id: localID))
            return ReplicationLog(json: json)
        } catch {
            guard error.isNotFound else { throw error }
            return nil
        }
    }

    private func readCheckpoints() async throws {
        let sourceLog = try await readLog(source)
        let targetLog = try await readLog(target)
        sourceLogRev = sourceLog?.rev
        targetLogRev = targetLog?.rev
        hadCheckpoint = sourceLog != nil && targetLog != nil
        if let start = ReplicationLog.startPoint(source: sourceLog, target: targetLog) {
            startSeq = start
            history = ReplicationLog.baseHistory(source: sourceLog, target: targetLog)
        } else {
            hadCheckpoint = false
            startSeq = (sourceLog == nil && targetLog == nil) ? options.since?.json : nil
            history = []
        }
        committedSeq = startSeq
        readSeq = startSeq
        checkpointedSeq = hadCheckpoint ? startSeq : nil
    }

    /// Writes the checkpoint (`recorded_seq` = ``committedSeq``) to the source, then the target.
    private func checkpoint() async throws {
        try await checkInstances()
        let recorded = committedSeq ?? .int(0)
        let entry = ReplicationLog.Entry(
            sessionID: sessionID, startTime: startTime, endTime: HTTPDate.now(), startLastSeq: startSeq ?? .int(0),
            endLastSeq: readSeq ?? recorded, recordedSeq: recorded, summary: summary)
        var entries = history
        if entries.first?.sessionID == sessionID { entries.removeFirst() }
        entries.insert(entry, at: 0)
        history = Array(entries.prefix(ReplicationLog.historyLimit))
        var log = ReplicationLog(rev: sourceLogRev, sessionID: sessionID, sourceLastSeq: recorded, history: history)
        sourceLogRev = try await writeLog(log, to: source)
        log.rev = targetLogRev
        targetLogRev = try await writeLog(log, to: target)
        checkpointedSeq = recorded
        lastCheckpoint = Date()
        replicator.hub.emit(
            .checkpoint(
                ReplicationCheckpoint(
                    replicationID: replicator.replicationID, recordedSequence: CouchSequence(json: recorded),
                    summary: summary)))
    }

    private func writeLog(_ log: ReplicationLog, to endpoint: SyncEndpoint) async throws(CouchError)
        -> String?
    {
        let put = PutDocumentOperation<JSONValue>(
            database: endpoint.databaseName, id: localID, document: log.json(id: replicator.replicationID))
        do {
            return try await endpoint.send(put).rev
        } catch {
            guard error.isConflict else { throw error }
            // A PUT whose answer was lost and that was sent again: the first one may have been stored.
            let stored = try await readLog(endpoint)
            if let stored, stored.sameContent(as: log) { return stored.rev }
            var error = error
            error.message =
                "The checkpoint \(localID) on the \(endpoint.label) was changed by someone else "
                + "(another replication with the same id?): \(error.message)"
            throw error
        }
    }

    /// Throws ``PeerRecreated`` when a database was deleted and created again since the session began.
    private func checkInstances() async throws {
        let sourceNow = try await info(source).instanceStartTime
        let targetNow = try await info(target).instanceStartTime
        let sourceChanged = sourceInstance != nil && sourceNow != nil && sourceNow != sourceInstance
        let targetChanged = targetInstance != nil && targetNow != nil && targetNow != targetInstance
        if sourceChanged || targetChanged {
            let which = sourceChanged ? (targetChanged ? "source and target" : "source") : "target"
            throw PeerRecreated(
                reason: "instance_start_time on \(which) database has changed since the session began "
                    + "(deleted and created again)")
        }
        // A server that answers "0" (CouchDB before 3.3, clustered) shows no recreation there: a checkpoint
        // this session read or wrote that is gone says it (a new database, or the checkpoint deleted: either
        // way the other side's checkpoint no longer describes this database). CouchDB 3.5 would accept the
        // next checkpoint PUT as if nothing happened, and a later run would trust it.
        for (endpoint, instance, rev) in [(source, sourceNow, sourceLogRev), (target, targetNow, targetLogRev)]
        where instance == "0" && rev != nil {
            if try await readLog(endpoint) == nil {
                throw PeerRecreated(
                    reason: "the checkpoint on the \(endpoint.label) is gone, and its instance_start_time is \"0\" "
                        + "(deleted and created again?)")
            }
        }
    }

    // MARK: Copying

    private var changesFilter: ChangesFilter? { options.filter?.changesFilter }

    private func changes(since: JSONValue?, feed: FeedMode, limit: Int) async throws -> ChangesResponse<JSONValue> {
        var operation = ChangesOperation<JSONValue>(
            database: source.databaseName, feed: feed, since: since.map(CouchSequence.init(json:)), limit: limit,
            style: options.winningRevisionsOnly ? .mainOnly : .allDocs, filter: changesFilter)
        var call = CallOptions()
        if feed == .longpoll {
            // The server answers after `feedTimeout` at the latest (empty when nothing came), so a
            // connection that went silent is noticed by the request's own deadline, a little later.
            // (CouchDB ignores `timeout` when `heartbeat` is set, and a feed kept open by heartbeats
            // would outlive any deadline.)
            operation.timeout = Int(options.feedTimeout * 1000)
            call.timeout = options.feedTimeout + 15
        }
        return try await source.send(operation, options: call)
    }

    /// Continuous mode: waits (long-poll) for a change after ``readSeq``. True when there is one.
    private func waitForChanges() async throws -> Bool {
        let response = try await changes(since: readSeq, feed: .longpoll, limit: 1)
        if response.results.isEmpty {
            // Nothing came within the timeout (or only changes a filter left out).
            readSeq = response.lastSeq.json
            return false
        }
        return true
    }

    /// Copies every change after ``readSeq`` up to the feed's current end, `workers` batches at
    /// once, checkpointing every `checkpointInterval` and at the end.
    private func catchUp(_ worker: BatchWorker) async throws {
        let workers = options.workers
        let batchSize = options.batchSize
        var completed: [Int: JSONValue] = [:]
        var nextIndex = 0
        var committedIndex = -1
        try await withThrowingTaskGroup(of: (Int, JSONValue, ReplicationSummary).self) { group in
            var inFlight = 0
            func finishOne() async throws {
                guard let (index, seq, counts) = try await group.next() else { return }
                inFlight -= 1
                summary.add(counts)
                completed[index] = seq
                while let seq = completed.removeValue(forKey: committedIndex + 1) {
                    committedIndex += 1
                    committedSeq = seq
                }
                if let hook = replicator.hooks.current.batchCommitted { try await hook() }
                replicator.hub.emit(.progress(summary))
                if Date().timeIntervalSince(lastCheckpoint) >= options.checkpointInterval,
                    committedSeq != checkpointedSeq
                {
                    try await checkpoint()
                }
            }
            var atEnd = false
            while !atEnd {
                try Task.checkCancellation()
                let response = try await changes(since: readSeq, feed: .normal, limit: batchSize)
                let lastSeq = response.lastSeq.json
                readSeq = lastSeq
                summary.pending = response.pending
                atEnd = response.results.count < batchSize || response.pending == 0
                let index = nextIndex
                nextIndex += 1
                let rows = response.results
                group.addTask { (index, lastSeq, try await worker.copy(rows)) }
                inFlight += 1
                while inFlight >= workers { try await finishOne() }
            }
            while inFlight > 0 { try await finishOne() }
        }
        replicator.hub.emit(.progress(summary))
        // The final checkpoint: always on a first run, otherwise only when the sequence moved.
        if !hadCheckpoint || committedSeq != checkpointedSeq {
            try await checkpoint()
            hadCheckpoint = true
        }
    }
}
