import CouchQuery
import CouchStore
import Foundation

/// The TestServer as a cluster of CouchDB nodes, seen through one of them (as users of Cloudant
/// or of any clustered CouchDB meet it): `_membership` lists every node, each database has `n`
/// copies of each shard on different nodes, writes are acknowledged by a quorum (`w`), and reads
/// that CouchDB serves from one copy may come from a copy that has not caught up yet.
///
/// Everything runs in one process; nodes are names. What a test can turn on:
/// - **Nodes down** (``ServerEngine/markNodesDown(_:)``): a write whose shard has fewer than `w`
///   copies up is still made on those copies and answered `202 Accepted` (not durable yet); with
///   no copy up it fails.
/// - **Replica lag** (``ServerEngine/setReplicaLag(_:)``): `_all_docs`, views, `_changes` (normal
///   feed), `_dbs_info`, `_local_docs`, `_security` and document reads with `r=1` see the database
///   as it was up to that many seconds ago, as a copy that has not caught up would answer.
final class ClusterState: @unchecked Sendable {
    // @unchecked Sendable: every mutable member is only touched under `lock`.
    private let lock = NSLock()
    /// The nodes' names; the first is the one answering (`_node/_local`).
    let nodeNames: [String]
    private var down: Set<String> = []
    private var lag: Double
    /// Per database: the lagging copy.
    private var replicas: [String: LaggingCopy] = [:]

    init(nodes: Int, replicaLag: Double) {
        nodeNames = nodes <= 1 ? ["couchdb@127.0.0.1"] : (1...nodes).map { "couchdb@node\($0)" }
        lag = max(0, replicaLag)
    }

    var isCluster: Bool { nodeNames.count > 1 }

    /// The default number of copies of a new database: 3 on a cluster (CouchDB's `[cluster] n`), 1 alone.
    var defaultCopies: Int { min(3, nodeNames.count) }

    /// The nodes holding copies of shard `shard` of a database of `n` copies.
    func nodes(ofShard shard: Int, copies n: Int) -> [String] {
        let count = nodeNames.count
        return (0..<min(max(n, 1), count)).map { nodeNames[(shard + $0) % count] }
    }

    var downNodes: Set<String> {
        lock.lock()
        defer { lock.unlock() }
        return down
    }

    func setDown(_ names: Set<String>) {
        lock.lock()
        down = names.intersection(nodeNames)
        lock.unlock()
    }

    var replicaLag: Double {
        lock.lock()
        defer { lock.unlock() }
        return lag
    }

    /// Changes the lag; every replica starts again from its database as it is now.
    func setReplicaLag(_ seconds: Double, databases: [DatabaseHandle]) {
        lock.lock()
        lag = max(0, seconds)
        replicas = [:]
        for db in databases { startReplica(of: db) }
        lock.unlock()
    }

    /// Starts the lagging copy of a new database (lock held by the caller, or at creation).
    private func startReplica(of db: DatabaseHandle) {
        if lag > 0 {
            replicas[db.name] = LaggingCopy(of: db)
        } else {
            LaggingCopy.stop(db)
        }
    }

    /// Called for each new database: its copy starts lagging at once.
    func databaseCreated(_ db: DatabaseHandle) {
        lock.lock()
        if lag > 0 { startReplica(of: db) }
        lock.unlock()
    }

    /// The copy a secondary read of `db` is served from: `db` itself without lag; otherwise its
    /// replica, which has applied every change older than the lag and none newer.
    func readCopy(of db: DatabaseHandle) -> DatabaseHandle {
        lock.lock()
        defer { lock.unlock() }
        guard lag > 0 else { return db }
        if replicas[db.name] == nil { startReplica(of: db) }
        guard let replica = replicas[db.name] else { return db }
        // Design documents are read with a quorum (CouchDB's ddoc cache): the copy never has stale ones.
        return replica.caughtUp(until: Date().addingTimeInterval(-lag))
    }

    /// Forgets the copy of a deleted database.
    func forget(_ name: String) {
        lock.lock()
        replicas[name] = nil
        lock.unlock()
    }
}

extension ServerEngine {
    /// The names of the nodes, as `_membership` lists them.
    public var nodeNames: [String] { cluster.nodeNames }

    /// Marks nodes down (names from `_membership`), or none with an empty set: writes to shards
    /// with fewer than `w` copies up are answered 202 Accepted, with no copy up they fail.
    public func markNodesDown(_ names: Set<String>) { cluster.setDown(names) }

    /// Makes secondary reads (see ``ClusterState``) see each database as it was up to `seconds`
    /// ago; 0 (the default) reads every write at once.
    public func setReplicaLag(_ seconds: Double) {
        cluster.setReplicaLag(seconds, databases: store.databaseNames.compactMap { store.handle(ofDatabase: $0) })
    }

    /// The `w` a write asks for (`?w=`), or the quorum.
    func writeQuorum(_ request: ServerRequest, _ db: DatabaseHandle) throws(CouchError) -> Int {
        guard let text = request.queryValue("w") else { return CouchEngine.quorum(db.copies) }
        guard let w = Int(text), w > 0 else { throw CouchError.badRequest("w must be a positive integer") }
        return w
    }

    /// Checks that some copy of each written document's shard is up; throws otherwise (before
    /// anything is written).
    func requireWritableCopies(_ db: DatabaseHandle, ids: [String]) throws(CouchError) {
        guard cluster.isCluster, !cluster.downNodes.isEmpty else { return }
        for id in ids where upCopies(db, id: id) == 0 {
            throw CouchError(500, "error", "No nodes holding a copy of the shard of \(id) are up.")
        }
    }

    /// How many copies of `id`'s shard are on nodes that are up.
    func upCopies(_ db: DatabaseHandle, id: String) -> Int {
        let down = cluster.downNodes
        return cluster.nodes(ofShard: db.shard(of: id), copies: db.copies).filter { !down.contains($0) }.count
    }

    /// The status of a committed write of `ids`: 201 when every one reached `w` copies, 202
    /// Accepted (written, not yet durable) otherwise.
    func clusterWriteStatus(_ db: DatabaseHandle, ids: [String], request: ServerRequest) throws(CouchError) -> Int {
        guard cluster.isCluster else { return 201 }
        let w = try writeQuorum(request, db)
        return ids.allSatisfy { upCopies(db, id: $0) >= w } ? 201 : 202
    }
}
