import CouchQuery
import Foundation

// Replication between two databases of one engine: what the TestServer's `_replicate` and `_replicator` run.

extension CouchEngine {
    /// The database name a replication endpoint names: a plain name or a URL of this server.
    private func replicationDatabaseName(_ endpoint: JSON) -> (name: String, display: String)? {
        var text: String?
        if let s = endpoint.stringValue { text = s } else if let url = endpoint["url"]?.stringValue { text = url }
        guard let text else { return nil }
        if text.hasPrefix("http://") || text.hasPrefix("https://"), let url = URL(string: text) {
            var path = url.path
            while path.hasPrefix("/") { path.removeFirst() }
            let raw = text.components(separatedBy: "/").last(where: { !$0.isEmpty }) ?? path
            let name = raw.removingPercentEncoding ?? path
            var display = "\(url.scheme ?? "http")://\(url.host ?? "127.0.0.1")"
            if let port = url.port { display += ":\(port)" }
            display += "/" + raw + "/"
            return (name, display)
        }
        return (text, text)
    }

    /// What one replication pass did.
    package struct ReplicationStats {
        package var missingChecked = 0
        package var missingFound = 0
        package var written = 0
        package var failures = 0
        package var lastSeq = 0
        package var sourceName = ""
    }

    /// Resolves the databases of a replication (creating the target when asked), with CouchDB's errors.
    package func replicationDatabases(_ body: JSON) throws(EngineError) -> (DatabaseHandle, DatabaseHandle) {
        guard let source = body["source"].flatMap(replicationDatabaseName),
            let target = body["target"].flatMap(replicationDatabaseName)
        else {
            throw EngineError.badRequest("Must specify source and target")
        }
        guard let sourceDB = database(named: source.name) else {
            throw EngineError(500, "db_not_found", "could not open \(source.display)")
        }
        var targetDB = database(named: target.name)
        if targetDB == nil, body["create_target"]?.boolValue == true {
            try validateDatabaseName(target.name)
            switch createDatabase(name: target.name, partitioned: sourceDB.partitioned, q: 2, n: 1) {
            case .success(let db): targetDB = db
            case .failure(let e): throw e
            }
        }
        guard let targetDB else { throw EngineError(500, "db_not_found", "could not open \(target.display)") }
        return (DatabaseHandle(sourceDB), DatabaseHandle(targetDB))
    }

    /// Copies every leaf revision (with its history and attachments) the target lacks, from `since` on.
    package func replicateOnce(_ source: DatabaseHandle, _ target: DatabaseHandle, docIDs: [String]?, since: Int = 0)
        -> ReplicationStats
    {
        let (sourceDB, targetDB) = (source.database, target.database)
        var stats = ReplicationStats()
        stats.sourceName = sourceDB.name
        let (entries, lastSeq): ([DocEntry], Int) = sourceDB.withLock {
            var list = sourceDB.changedDocs(since: since)
            if let docIDs { list = list.filter { docIDs.contains($0.id) } }
            return (list, sourceDB.updateSeq)
        }
        stats.lastSeq = lastSeq
        for entry in entries where !entry.id.hasPrefix("_local/") {
            for leaf in entry.sortedLeaves {
                stats.missingChecked += 1
                let present = targetDB.withLock { targetDB.docs[entry.id]?.nodes[leaf.rev] != nil }
                if present { continue }
                stats.missingFound += 1
                let path = entry.path(to: leaf.rev).map(\.rev)
                do throws(EngineError) {
                    try targetDB.withLock { () throws(EngineError) in
                        try targetDB.updateReplicated(
                            id: entry.id, revs: path, deleted: leaf.deleted, body: leaf.body ?? [:],
                            attachments: leaf.atts.map { .keep($0) })
                    }
                    stats.written += 1
                } catch {
                    stats.failures += 1
                }
            }
        }
        return stats
    }
}

extension DatabaseHandle {
    /// The database's `update_seq` token as it was after `sequence` document writes (`source_last_seq` of a
    /// replication).
    package func sequenceToken(atGlobal sequence: Int) -> String {
        SequenceToken.encode(position: database.withLock { database.position(atGlobal: sequence) }, db: name)
    }

}
