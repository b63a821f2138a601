import CouchQuery
import Foundation

/// What a document update says about one attachment.
enum AttachmentInput {
    /// `{"stub": true}`: keep the attachment of that name from the revision being edited.
    case stub(name: String, revpos: Int?, digest: String?)
    /// New bytes (inline base64 or a standalone upload), with the sender's `revpos` (kept by replicated
    /// writes) and, for a gzip-encoded multipart part, the gzip bytes as sent (they give the digest).
    case data(name: String, contentType: String, data: Data, revpos: Int? = nil, encoded: Data? = nil)
    /// An attachment carried over unchanged (standalone PUT/DELETE of another attachment).
    case keep(Attachment)
    /// New bytes already written to the database's file (a streamed upload): the new revision's attachment, with the
    /// sender's `revpos` (kept by replicated writes).
    case uploaded(Attachment, revpos: Int? = nil)
}

/// One database: documents with revision trees, the by-sequence index, `_local` docs, `_security`.
///
/// All state is guarded by `cond` (an `NSCondition` used as the database's lock). Writers broadcast on
/// it after each committed change so that `longpoll`/`continuous` feeds wake up; they wait without
/// holding it otherwise.
final class Database: @unchecked Sendable {
    // Safe: every mutable member below is only touched while `cond` is locked.
    let name: String
    let instanceStartTime: Int
    let partitioned: Bool
    let q: Int
    let n: Int
    let cond = NSCondition()

    /// The documents: revision trees in memory, or (with a file) a small entry each and the trees on disk.
    private(set) var docs = DocumentTable(file: nil)
    /// The ids of the design documents (live or deleted), kept so that every write need not scan.
    private(set) var designIDs = Set<String>()
    /// The ids of the documents with more than one live leaf (`_conflicts`), kept where revisions are
    /// applied and purged so that listing them needs no scan.
    private(set) var conflictedIDs = Set<String>()
    private var sortedIDCache: [String]?
    /// (seq, id) for every change, in order; entries whose seq is no longer the doc's latest are skipped.
    private var seqLog: [(seq: Int, id: String)] = []
    /// Per shard, the global sequence of each of its changes in order: a shard's own sequence is
    /// a position in its list (as each CouchDB shard counts its own updates).
    private var shardLogs: [[Int]]
    private(set) var updateSeq = 0
    private(set) var purgeSeq = 0
    /// Set while a compaction runs (`compact_running`).
    var compactionRunning = false
    var revsLimit = 1000
    var purgedInfosLimit = 1000
    var local: [String: LocalDoc] = [:]
    var security: JSON
    private(set) var docCount = 0
    private(set) var delCount = 0
    /// Set once the database is deleted: waiting feeds stop.
    var isDeleted = false
    /// The database's file; nil for a database kept in memory only.
    var file: StoreFile? {
        didSet { if let file, docs.file == nil { docs.attach(file) } }
    }
    /// The identity of the current file (in its first record), which an index snapshot must match.
    var fileID = UUID().uuidString
    /// Document records written since the last index snapshot.
    private var recordsSinceSnapshot = 0
    /// Whether opening read the index snapshot (and only the records after it).
    var openedFromSnapshot = false
    /// A snapshot being restored until its file is attached.
    private var pendingSnapshot: IndexSnapshot?
    /// How many document records may follow the last index snapshot before another is written.
    static let snapshotInterval = 100_000

    /// Where each attachment's bytes are in `file`, by digest (each stored once).
    var blobs: [String: StoredBlob] = [:]
    /// Set when a write could not be made durable: later writes fail until the database is reopened.
    private(set) var storageFailure: StoreFileError?

    /// Called (lock held) with the id of each committed document write; must not block.
    var onDocumentCommit: (@Sendable (String) -> Void)?
    private(set) var externalSize = 0

    static let defaultSecurity: JSON = ["members": ["roles": ["_admin"]], "admins": ["roles": ["_admin"]]]

    init(
        name: String, instanceStartTime: Int, partitioned: Bool, q: Int, n: Int,
        security: JSON = Database.defaultSecurity
    ) {
        self.name = name
        self.instanceStartTime = instanceStartTime
        self.partitioned = partitioned
        self.q = q
        self.n = n
        self.security = security
        self.shardLogs = Array(repeating: [], count: max(q, 1))
    }

    /// Runs `body` with the database locked.
    func withLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        cond.lock()
        defer { cond.unlock() }
        return try body()
    }

    // MARK: - Reading (lock held)

    /// Document ids in raw code-point order (live and deleted).
    var sortedIDs: [String] {
        if let cache = sortedIDCache { return cache }
        let ids = docs.ids.sorted(by: idLess)
        sortedIDCache = ids
        return ids
    }

    // MARK: - Shard positions (lock held)

    /// How far each shard's changes go now: what `update_seq` encodes.
    var currentPosition: [Int] { shardLogs.map(\.count) }

    /// The shard positions that correspond to everything up to global sequence `seq`.
    func position(atGlobal seq: Int) -> [Int] {
        shardLogs.map { log in
            var lo = 0
            var hi = log.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if log[mid] <= seq { lo = mid + 1 } else { hi = mid }
            }
            return lo
        }
    }

    /// The latest global sequence a shard position covers (for internal consumers that count globally).
    func globalSequence(of position: [Int]) -> Int {
        zip(shardLogs, position).reduce(0) { latest, pair in
            let (log, count) = pair
            return count > 0 && count <= log.count ? max(latest, log[count - 1]) : latest
        }
    }

    /// Documents changed after `position`, shard by shard (each shard's changes in its own order,
    /// as CouchDB's clustered `_changes` interleaves shards), each document once at its latest
    /// change, with the shard and the shard's own sequence of that change.
    func changedDocs(after position: [Int]) -> [(entry: DocEntry, shard: Int, shardSeq: Int)] {
        var out: [(entry: DocEntry, shard: Int, shardSeq: Int)] = []
        forEachChange(after: position) { id, shard, shardSeq in
            if let doc = docs[id] { out.append((doc, shard, shardSeq)) }
            return true
        }
        return out
    }

    /// Visits the documents changed after `position` in the order of ``changedDocs(after:)``,
    /// without reading them, until `body` returns false.
    func forEachChange(after position: [Int], _ body: (_ id: String, _ shard: Int, _ shardSeq: Int) -> Bool) {
        for (shard, log) in shardLogs.enumerated() {
            let start = shard < position.count ? min(max(position[shard], 0), log.count) : 0
            for index in start..<log.count {
                let global = log[index]
                guard let id = idOfChange(global), docs.summary(id)?.seq == global else { continue }
                if !body(id, shard, index + 1) { return }
            }
        }
    }

    /// How many documents changed after `position`, without reading them.
    func countChanges(after position: [Int]) -> Int {
        var count = 0
        forEachChange(after: position) { _, _, _ in
            count += 1
            return true
        }
        return count
    }

    /// The ids of the documents changed after `since`, newest first, without reading them.
    func changedIDsNewestFirst(since: Int) -> [(id: String, seq: Int)] {
        var out: [(id: String, seq: Int)] = []
        for (seq, id) in seqLog.reversed() where seq > since && docs.summary(id)?.seq == seq {
            out.append((id, seq))
        }
        return out
    }

    /// The document of the change at global sequence `seq`, if the log still holds it.
    private func idOfChange(_ seq: Int) -> String? {
        var lo = 0
        var hi = seqLog.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if seqLog[mid].seq < seq { lo = mid + 1 } else { hi = mid }
        }
        return lo < seqLog.count && seqLog[lo].seq == seq ? seqLog[lo].id : nil
    }

    /// Documents changed after `since`, in sequence order (each document once, at its latest change).
    func changedDocs(since: Int) -> [DocEntry] {
        var lo = 0
        var hi = seqLog.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if seqLog[mid].seq <= since { lo = mid + 1 } else { hi = mid }
        }
        var out: [DocEntry] = []
        for i in lo..<seqLog.count {
            let (seq, id) = seqLog[i]
            if docs.summary(id)?.seq == seq, let doc = docs[id] { out.append(doc) }
        }
        return out
    }

    /// How many documents changed after `since` (CouchDB's `count_changes_since`), without reading them.
    func countChanges(since: Int) -> Int {
        var lo = 0
        var hi = seqLog.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if seqLog[mid].seq <= since { lo = mid + 1 } else { hi = mid }
        }
        return seqLog[lo...].reduce(0) { $0 + (docs.summary($1.id)?.seq == $1.seq ? 1 : 0) }
    }

    /// Which of the q simulated shards holds a document (CouchDB hashes the id, or the partition, with CRC-32).
    func shard(of id: String) -> Int {
        var key = id
        if partitioned, !id.hasPrefix("_design/"), let colon = id.firstIndex(of: ":") {
            key = String(id[..<colon])
        }
        let crc = UInt64(Crypto.crc32(Data(key.utf8)))
        let width = (UInt64(1) << 32) / UInt64(max(q, 1))
        return Int(min(crc / width, UInt64(max(q, 1) - 1)))
    }

    var activeSize: Int { externalSize + docs.count * 60 }

    // MARK: - Committing (lock held)

    func countState(_ entry: DocTableEntry?) -> (live: Int, deleted: Int) {
        guard let entry, entry.flags & DocTableEntry.hasWinner != 0 else { return (0, 0) }
        return entry.flags & DocTableEntry.deleted != 0 ? (0, 1) : (1, 0)
    }

    /// `id`'s tree with `nodes` added (stemmed to `revsLimit`) at sequence `seq`.
    private func merged(id: String, nodes: [RevNode], seq: Int) -> DocEntry {
        var entry = docs[id] ?? DocEntry(id: id)
        for node in nodes { entry.nodes[node.rev] = node }
        if entry.nodes.count > revsLimit { entry.stem(limit: revsLimit) }
        entry.seq = seq
        return entry
    }

    /// Applies new revision nodes to a document at sequence `seq` (a database in memory: a lagging
    /// replica, a log of an earlier version being converted).
    func apply(id: String, nodes: [RevNode], seq: Int) {
        let before = docs.summary(id)
        let entry = merged(id: id, nodes: nodes, seq: seq)
        docs.set(entry)
        externalSize += Self.bodySize(of: nodes)
        account(id: id, before: before, after: docs.summary(id), seq: seq)
    }

    static func bodySize(of nodes: [RevNode]) -> Int {
        nodes.reduce(0) { total, node in
            switch node.storedBody {
            case .inline(let body): return total + body.serialized.utf8.count
            case .stored(_, _, _, let size): return total + size
            case nil: return total
            }
        }
    }

    /// Keeps the counts, indexes and sequence logs in step with a document's change.
    private func account(id: String, before: DocTableEntry?, after: DocTableEntry?, seq: Int, purge: Bool = false) {
        if before == nil { sortedIDCache = nil }
        if id.hasPrefix("_design/") { designIDs.insert(id) }
        if let after, after.flags & DocTableEntry.conflicted != 0 {
            conflictedIDs.insert(id)
        } else {
            conflictedIDs.remove(id)
        }
        let a = countState(before)
        let b = countState(after)
        docCount += b.live - a.live
        delCount += b.deleted - a.deleted
        updateSeq = max(updateSeq, seq)
        if purge { purgeSeq += 1 }
        seqLog.append((seq, id))
        shardLogs[shard(of: id)].append(seq)
        if seqLog.count > 1000, seqLog.count > docs.count * 3 {
            seqLog = seqLog.filter { docs.summary($0.id)?.seq == $0.seq }
        }
    }

    /// Commits new nodes for a document: a new sequence, a record in the database's file (durable
    /// before the request is answered, see ``RequestScope``), wake-up of feeds.
    func commit(id: String, nodes: [RevNode]) throws(CouchError) {
        let seq = updateSeq + 1
        var stored = nodes
        if let file {
            try checkWritable()
            let before = docs.summary(id)
            let (entry, offset) = try storing { () throws(StoreFileError) in
                try storeTree(merged(id: id, nodes: nodes, seq: seq), in: file, blobs: &blobs)
            }
            docs.set(entry, at: offset)
            stored = nodes.compactMap { entry.nodes[$0.rev] }
            externalSize += Self.bodySize(of: stored)
            account(id: id, before: before, after: docs.summary(id), seq: seq)
            try scheduleSync()
        } else {
            apply(id: id, nodes: nodes, seq: seq)
        }
        let replicated = stored
        feedReplica { $0.apply(id: id, nodes: replicated, seq: seq) }
        cond.broadcast()
        onDocumentCommit?(id)
    }

    /// Appends `data` to `file` in chunk records; returns their offsets.
    static func writeChunks(_ data: Data, digest: String, in file: StoreFile) -> [Int64] {
        var chunks: [Int64] = []
        var start = data.startIndex
        repeat {
            let end = min(start + StoreFile.blobChunkSize, data.endIndex)
            chunks.append(file.append(.blob, DocumentRecord.blobChunk(digest: digest, bytes: data[start..<end])))
            start = end
        } while start < data.endIndex
        return chunks
    }

    /// Copies an attachment stored in another file (compaction's, or a file swapped in by one while a streamed upload
    /// was written) into `file` chunk by chunk, each chunk read, checked and written straight to `file`
    /// (``StoreFile/writeNow(_:_:)``), so that memory holds one chunk whatever the attachment's size.
    static func copyBlob(_ blob: StoredBlob, digest: String, into file: StoreFile) throws(StoreFileError) -> StoredBlob
    {
        var chunks: [Int64] = []
        chunks.reserveCapacity(blob.chunks.count)
        for index in blob.chunks.indices {
            let bytes = try blob.chunk(index, digest: digest)
            chunks.append(try file.writeNow(.blob, DocumentRecord.blobChunk(digest: digest, bytes: bytes)))
        }
        if blob.chunks.isEmpty {
            // As `writeChunks` stores an empty attachment: one empty chunk.
            chunks.append(try file.writeNow(.blob, DocumentRecord.blobChunk(digest: digest, bytes: Data())))
        }
        return StoredBlob(file: file, chunks: chunks, length: blob.length)
    }

    /// Runs a write to the database's file, turning its failure into the request's error (lock held).
    private func storing<T>(_ body: () throws(StoreFileError) -> T) throws(CouchError) -> T {
        do throws(StoreFileError) {
            return try body()
        } catch {
            throw CouchError(500, "file_error", "the write to the database file failed: \(error)")
        }
    }

    /// Writes a document record holding `entry`'s whole tree (and any attachment not in `file` yet) to
    /// `file`; returns the tree with its bodies and attachments pointing into the file, and the record.
    /// An attachment stored in another file is copied chunk by chunk (``copyBlob(_:digest:into:)``).
    func storeTree(_ entry: DocEntry, in file: StoreFile, blobs: inout [String: StoredBlob], purge: Bool = false)
        throws(StoreFileError) -> (DocEntry, Int64)
    {
        var nodes = entry.nodes.values.sorted { $0.pos < $1.pos || ($0.pos == $1.pos && $0.hash < $1.hash) }
        for n in nodes.indices {
            for a in nodes[n].atts.indices {
                let att = nodes[n].atts[a]
                // The gzip bytes a replicated attachment arrived in are kept too: they give its digest.
                if let received = att.received {
                    if case .stored(let blob) = received, blob.file === file {
                    } else if case .stored(let blob) = received {
                        nodes[n].atts[a].received = .stored(try Self.copyBlob(blob, digest: att.digest, into: file))
                    } else {
                        let gz = received.load()
                        nodes[n].atts[a].received = .stored(
                            StoredBlob(
                                file: file, chunks: Self.writeChunks(gz, digest: att.digest, in: file), length: gz.count
                            ))
                    }
                }
                if case .stored(let blob) = att.bytes, blob.file === file {
                    // Already in the file (a streamed upload's chunks): found by digest from now on.
                    if blobs[att.digest] == nil { blobs[att.digest] = blob }
                    continue
                }
                if let blob = blobs[att.digest], blob.file === file, blob.length == att.length {
                    nodes[n].atts[a].bytes = .stored(blob)
                    continue
                }
                if case .stored(let other) = att.bytes {
                    let blob = try Self.copyBlob(other, digest: att.digest, into: file)
                    blobs[att.digest] = blob
                    nodes[n].atts[a].bytes = .stored(blob)
                    continue
                }
                let data = att.data
                let blob = StoredBlob(
                    file: file, chunks: Self.writeChunks(data, digest: att.digest, in: file), length: data.count)
                blobs[att.digest] = blob
                nodes[n].atts[a].bytes = .stored(blob)
            }
        }
        let (bytes, placed) = DocumentRecord.encode(id: entry.id, seq: entry.seq, nodes: nodes, in: file, purge: purge)
        let offset = file.append(.document, bytes)
        recordsSinceSnapshot += 1
        var out = entry
        for (n, node) in nodes.enumerated() {
            var node = node
            if let place = placed[n] {
                node.storedBody = .stored(file, offset: offset, index: place.index, size: place.size)
            }
            out.nodes[node.rev] = node
        }
        return (out, offset)
    }

    private func checkWritable() throws(CouchError) {
        if let storageFailure {
            throw CouchError(500, "file_error", "the database file failed and must be reopened: \(storageFailure)")
        }
    }

    /// Appends a JSON record (metadata, purge, `_local`, `_security`, limits) and schedules its sync.
    private func appendRecord(_ record: JSON) throws(CouchError) {
        guard let file else { return }
        try checkWritable()
        file.append(.json, Array(record.serialized.utf8))
        try scheduleSync()
    }

    /// Makes the records written so far durable when the request ends, or now outside a request.
    private func scheduleSync() throws(CouchError) {
        if !RequestScope.noteDirty(self) { try syncFile() }
    }

    /// Makes every record written so far durable (one `fsync`); lock held.
    func syncFile() throws(CouchError) {
        guard let file, file.hasPending else { return }
        do throws(StoreFileError) {
            try file.sync()
            if recordsSinceSnapshot >= Self.snapshotInterval { writeSnapshot() }
        } catch {
            storageFailure = error
            throw CouchError(
                500, "file_error", "the write could not be made durable and its outcome is unknown: \(error)")
        }
    }

    /// A revision node of the line-per-record log of earlier versions (read once, to convert it).
    static func decode(_ json: JSON, blobs: [String: Data]) -> RevNode? {
        guard let rev = json["r"]?.stringValue, let (pos, hash) = parseRev(rev) else { return nil }
        let atts: [Attachment] = (json["a"]?.arrayValue ?? []).compactMap { a in
            guard let name = a["n"]?.stringValue, let digest = a["dg"]?.stringValue else { return nil }
            return Attachment(
                name: name, contentType: a["ct"]?.stringValue ?? "application/octet-stream",
                revpos: Int(a["rp"]?.intValue ?? 1), data: blobs[digest] ?? Data(), digest: digest)
        }
        let body = json["b"].flatMap { $0.isNull ? nil : $0 }
        return RevNode(
            pos: pos, hash: hash, parent: json["p"]?.stringValue, deleted: json["d"]?.boolValue ?? false,
            body: body, atts: atts)
    }

    // MARK: - Updates (lock held)

    /// New attachments get `newPos` as their `revpos`, or with `sendersRevpos` (`new_edits=false`) the one
    /// sent (0 when none was, as CouchDB's `couch_att:from_json`).
    private func resolveAttachments(
        _ inputs: [AttachmentInput], parent: RevNode?, entry: DocEntry?, newPos: Int, sendersRevpos: Bool = false
    ) throws(CouchError) -> [Attachment] {
        var out: [Attachment] = []
        for input in inputs {
            switch input {
            case .keep(let att):
                out.append(att)
            case .uploaded(var att, let revpos):
                att.revpos = sendersRevpos ? revpos ?? 0 : newPos
                if att.received == nil, case .stored(let blob) = att.bytes, let stored = blobs[att.digest],
                    stored.file === blob.file, stored.length == att.length
                {
                    // Stored once by digest: the upload's own chunks are left unreferenced (garbage for compaction).
                    att.bytes = .stored(stored)
                }
                out.append(att)
            case .data(let name, let contentType, let data, let revpos, let encoded):
                out.append(
                    Attachment(
                        name: name, contentType: contentType, revpos: sendersRevpos ? revpos ?? 0 : newPos, data: data,
                        encoded: encoded))
            case .stub(let name, let revpos, let digest):
                if let att = parent?.atts.first(where: { $0.name == name }) {
                    out.append(att)
                } else if let att = entry?.nodes.values.lazy.flatMap(\.atts).first(where: {
                    $0.name == name && (digest == nil || $0.digest == digest) && (revpos == nil || $0.revpos == revpos)
                }) {
                    out.append(att)
                } else {
                    throw CouchError(412, "missing_stub", "Invalid attachment stub in \(entry?.id ?? "") for \(name)")
                }
            }
        }
        return out
    }

    /// An interactive edit (`new_edits=true`): checks the base revision, creates the next one.
    /// Returns the new revision.
    @discardableResult
    func updateInteractive(id: String, baseRev: String?, deleted: Bool, body: JSON, attachments: [AttachmentInput])
        throws(CouchError) -> String
    {
        let entry = docs[id]
        var parent: RevNode?
        if let baseRev {
            guard let entry, let node = entry.nodes[baseRev], entry.isLeaf(baseRev) else { throw CouchError.conflict }
            parent = node
        } else if let entry, let winner = entry.winner {
            guard winner.deleted else { throw CouchError.conflict }
            parent = winner
        }
        let parentPos = parent?.pos ?? 0
        // A replicated revision can sit at the largest generation there is: it can have no child.
        guard parentPos < maximumGeneration else {
            throw CouchError.badRequest(
                "Revision \(parent?.rev ?? "") is at the largest generation; it cannot be edited")
        }
        let pos = parentPos + 1
        let atts = try resolveAttachments(attachments, parent: parent, entry: entry, newPos: pos)
        let hash = newRevHash(deleted: deleted, parent: parent?.rev, body: body, atts: atts)
        let node = RevNode(pos: pos, hash: hash, parent: parent?.rev, deleted: deleted, body: body, atts: atts)
        if entry?.nodes[node.rev] != nil { throw CouchError.conflict }
        try commit(id: id, nodes: [node])
        return node.rev
    }

    /// A replicated write (`new_edits=false`): merges the given revision path into the tree as is.
    func updateReplicated(id: String, revs: [String], deleted: Bool, body: JSON, attachments: [AttachmentInput])
        throws(CouchError)
    {
        guard let leafRev = revs.first, let (leafPos, leafHash) = parseRev(leafRev) else {
            throw CouchError.badRequest("Invalid rev format")
        }
        let entry = docs[id]
        if entry?.nodes[leafRev] != nil { return }
        var newNodes: [RevNode] = []
        var existingParent: RevNode?
        for (i, rev) in revs.enumerated() {
            if let existing = entry?.nodes[rev] {
                existingParent = existing
                break
            }
            guard let (pos, hash) = parseRev(rev) else { throw CouchError.badRequest("Invalid rev format") }
            let parentRev = i + 1 < revs.count ? revs[i + 1] : nil
            newNodes.append(RevNode(pos: pos, hash: hash, parent: parentRev, deleted: false, body: nil, atts: []))
        }
        if var last = newNodes.last, last.parent != nil, existingParent == nil {
            // The oldest revision we were told about has a parent we do not know: a stemmed branch.
            if entry?.nodes[last.parent!] == nil {
                last.parent = nil
                newNodes[newNodes.count - 1] = last
            }
        }
        let atts = try resolveAttachments(
            attachments, parent: existingParent, entry: entry, newPos: leafPos, sendersRevpos: true)
        newNodes[0] = RevNode(
            pos: leafPos, hash: leafHash, parent: newNodes[0].parent, deleted: deleted, body: body,
            atts: atts)
        try commit(id: id, nodes: newNodes)
    }

    /// Removes leaf revisions (and ancestors no other leaf needs). Returns the revisions purged.
    func purge(id: String, revs: [String]) throws(CouchError) -> [String] {
        guard let entry = docs[id] else { return [] }
        let leafRevs = Set(entry.leaves.map(\.rev))
        let purged = revs.filter { leafRevs.contains($0) }
        if purged.isEmpty { return [] }
        if let file {
            try checkWritable()
            let before = docs.summary(id)
            var tree = Self.purged(entry, revs: purged)
            tree.seq = updateSeq + 1
            if tree.nodes.isEmpty {
                file.append(
                    .json, Array(JSON.object([("op", "forget"), ("id", .string(id)), ("purge", true)]).serialized.utf8))
                forget(id, before: before, purge: true)
            } else {
                let (stored, offset) = try storing { () throws(StoreFileError) in
                    try storeTree(tree, in: file, blobs: &blobs, purge: true)
                }
                docs.set(stored, at: offset)
                account(id: id, before: before, after: docs.summary(id), seq: tree.seq, purge: true)
            }
            try scheduleSync()
        } else {
            applyPurge(id: id, revs: purged)
        }
        feedReplica { $0.applyPurge(id: id, revs: purged) }
        cond.broadcast()
        return purged
    }

    /// `entry` without the leaves `revs` and the ancestors no other leaf needs.
    static func purged(_ entry: DocEntry, revs: [String]) -> DocEntry {
        var entry = entry
        let remainingLeaves = entry.leaves.filter { !revs.contains($0.rev) }
        var keep = Set<String>()
        for leaf in remainingLeaves { for node in entry.path(to: leaf.rev) { keep.insert(node.rev) } }
        for key in entry.nodes.keys where !keep.contains(key) { entry.nodes.removeValue(forKey: key) }
        return entry
    }

    /// Removes a document entirely (a purge of its last leaves).
    private func forget(_ id: String, before: DocTableEntry?, purge: Bool) {
        docs.remove(id)
        designIDs.remove(id)
        conflictedIDs.remove(id)
        sortedIDCache = nil
        let a = countState(before)
        docCount -= a.live
        delCount -= a.deleted
        if purge {
            purgeSeq += 1
            updateSeq += 1
            shardLogs[shard(of: id)].append(updateSeq)
        }
    }

    /// A purge in a database in memory (or a replica, or a log of an earlier version).
    func applyPurge(id: String, revs: [String]) {
        guard let before = docs[id] else { return }
        let summary = docs.summary(id)
        var entry = Self.purged(before, revs: revs)
        if entry.nodes.isEmpty {
            forget(id, before: summary, purge: true)
        } else {
            entry.seq = updateSeq + 1
            docs.set(entry)
            account(id: id, before: summary, after: docs.summary(id), seq: entry.seq, purge: true)
        }
    }

    // MARK: - Local documents and metadata (lock held)

    func putLocal(id: String, doc: LocalDoc?) throws(CouchError) {
        if let doc {
            try appendRecord(Self.localRecord(id: id, doc))
        } else {
            try appendRecord(["op": "localdel", "id": .string(id)])
        }
        local[id] = doc
        feedReplica { $0.local[id] = doc }
    }

    func setSecurity(_ value: JSON) throws(CouchError) {
        try appendRecord(["op": "sec", "v": value])
        security = value
        feedReplica { $0.security = value }
    }

    func setRevsLimit(_ value: Int) throws(CouchError) {
        try appendRecord(["op": "revs_limit", "v": .int(Int64(value))])
        revsLimit = value
    }

    func setPurgedInfosLimit(_ value: Int) throws(CouchError) {
        try appendRecord(["op": "purged_infos_limit", "v": .int(Int64(value))])
        purgedInfosLimit = value
    }

    // MARK: - A lagging replica (cluster mode; lock held)

    /// When set, every change is also queued here, for a replica that applies it only once it is
    /// old enough (see `ClusterState`).
    private var replicaFeed: [(at: Date, change: @Sendable (Database) -> Void)]?

    private func feedReplica(_ change: @escaping @Sendable (Database) -> Void) {
        if replicaFeed != nil { replicaFeed!.append((Date(), change)) }
    }

    /// Starts feeding a new replica: returns a copy of the state now and queues every later change.
    func startReplica() -> Database {
        replicaFeed = []
        return snapshot()
    }

    /// Stops feeding replicas.
    func stopReplica() { replicaFeed = nil }

    /// Applies to `replica` the queued changes made at or before `cutoff` (both locks held).
    func catchUp(_ replica: Database, until cutoff: Date) {
        guard let feed = replicaFeed else { return }
        var applied = 0
        while applied < feed.count, feed[applied].at <= cutoff {
            feed[applied].change(replica)
            applied += 1
        }
        if applied > 0 { replicaFeed!.removeFirst(applied) }
    }

    /// A copy of the database's state now, for a lagging replica (lock held). It is not logged,
    /// and writes never reach it.
    func snapshot() -> Database {
        let copy = Database(
            name: name, instanceStartTime: instanceStartTime, partitioned: partitioned, q: q, n: n, security: security)
        copy.docs = docs.materialized()
        copy.designIDs = designIDs
        copy.conflictedIDs = conflictedIDs
        copy.local = local
        copy.seqLog = seqLog
        copy.shardLogs = shardLogs
        copy.updateSeq = updateSeq
        copy.purgeSeq = purgeSeq
        copy.docCount = docCount
        copy.delCount = delCount
        copy.revsLimit = revsLimit
        copy.purgedInfosLimit = purgedInfosLimit
        copy.externalSize = externalSize
        return copy
    }

    /// Takes `other`'s design documents as they are now (both locks held): a lagging copy still
    /// answers with the current design documents, which CouchDB reads with a quorum.
    func takeDesignDocuments(from other: Database) {
        for id in other.designIDs {
            guard let entry = other.docs[id] else { continue }
            if docs.summary(id)?.seq != entry.seq {
                if docs.summary(id) == nil { sortedIDCache = nil }
                docs.set(entry)
                designIDs.insert(id)
            }
        }
    }

    /// Compaction, as CouchDB's: the bodies and attachments of revisions that are not leaves are
    /// dropped (their ids stay in the tree), so reading an old revision is then 404 `missing`.
    ///
    /// A database with a file is compacted into a new file that replaces it, so the file shrinks:
    /// the live state is copied without the lock (reads and writes go on), then, with the lock, the
    /// documents changed meanwhile are copied too and the new file is swapped in (renamed over the
    /// old one after an `fsync`, so a crash leaves either file whole). Call without the lock.
    func compact() throws(CouchError) {
        let file: StoreFile? = withLock { self.file }
        guard let file else {
            withLock {
                applyCompaction()
                feedReplica { $0.applyCompaction() }
            }
            return
        }
        let url = file.url
        let tmp = url.appendingPathExtension("compact")
        try? FileManager.default.removeItem(at: tmp)
        do {
            let target = try StoreFile.create(at: tmp, synchronousWrites: file.synchronousWrites)
            var newBlobs: [String: StoredBlob] = [:]
            var written: [String: DocTableEntry] = [:]
            let newFileID = UUID().uuidString
            let (snapshot, meta): (DocumentTable, JSON) = try withLock { () throws(CouchError) in
                try syncFile()
                return (docs.copy(), metaRecord(fileID: newFileID))
            }
            target.append(.json, Array(meta.serialized.utf8))
            func copy(_ entry: DocEntry) throws(StoreFileError) {
                var tree = entry
                tree.nodes = Dictionary(uniqueKeysWithValues: Self.compacted(entry).map { ($0.rev, $0) })
                let (stored, offset) = try storeTree(tree, in: target, blobs: &newBlobs)
                written[entry.id] = DocTableEntry(
                    offset: offset, seq: entry.seq, flags: DocumentTable.flags(of: stored))
            }
            for id in snapshot.ids {
                guard let entry = snapshot[id] else { continue }
                try copy(entry)
                if target.size - target.committedEnd > 8 << 20 { try target.sync() }
            }
            try target.sync()
            try withLock { () throws(Error) in
                try syncFile()
                // Catch up with what changed since the copy began.
                for id in docs.ids where written[id]?.seq != docs.summary(id)?.seq {
                    if let entry = docs[id] { try copy(entry) }
                }
                for id in written.keys where docs.summary(id) == nil {
                    target.append(.json, Array(JSON.object([("op", "forget"), ("id", .string(id))]).serialized.utf8))
                    written[id] = nil
                }
                for record in stateRecords { target.append(.json, Array(record.serialized.utf8)) }
                try target.sync()
                try target.rename(to: url)
                // Swap: every document now points into the new file.
                self.file = target
                fileID = newFileID
                docs.replace(file: target, entries: written)
                blobs = newBlobs
                externalSize = written.keys.reduce(0) { total, id in
                    total + Self.bodySize(of: Array(docs[id]?.nodes.values ?? [:].values))
                }
                // The old file is not closed: readers still holding documents or attachments from it
                // finish reading (it is unlinked; its descriptor goes with the last reference).
                writeSnapshot()
            }
        } catch let error as CouchError {
            try? FileManager.default.removeItem(at: tmp)
            throw error
        } catch {
            try? FileManager.default.removeItem(at: tmp)
            throw CouchError(500, "file_error", "compaction failed: \(error)")
        }
    }

    /// A document's tree with the bodies and attachments of non-leaf revisions dropped.
    static func compacted(_ entry: DocEntry) -> [RevNode] {
        let leaves = Set(entry.leaves.map(\.rev))
        return entry.nodes.values.map { node in
            var node = node
            if !leaves.contains(node.rev) {
                node.storedBody = nil
                node.atts = []
            }
            return node
        }
    }

    /// The first record of a database's file.
    var metaRecord: JSON { metaRecord(fileID: fileID) }

    /// The first record of a file of this database whose identity is `fileID`.
    func metaRecord(fileID: String) -> JSON {
        [
            "op": "meta", "name": .string(name), "created": .int(Int64(instanceStartTime)),
            "partitioned": .bool(partitioned), "q": .int(Int64(q)), "n": .int(Int64(n)), "file": .string(fileID),
        ]
    }

    // MARK: - Index snapshots (lock held)

    /// The in-memory index as of the file's committed end, or nil when it cannot be taken.
    func makeSnapshot() -> IndexSnapshot? {
        guard let file, storageFailure == nil, !file.hasPending, let entries = docs.fileEntries else { return nil }
        var documents: [(id: String, entry: DocTableEntry)] = []
        documents.reserveCapacity(entries.count)
        var seen = Set<String>()
        for (seq, id) in seqLog.reversed() where entries[id]?.seq == seq && seen.insert(id).inserted {
            documents.append((id, entries[id]!))
        }
        guard documents.count == entries.count else { return nil }
        documents.reverse()
        var localDocs: [(String, JSON)] = []
        for (id, doc) in local { localDocs.append((id, ["rev": .int(Int64(doc.rev)), "b": doc.body])) }
        let head: JSON = [
            "name": .string(name), "created": .int(Int64(instanceStartTime)), "partitioned": .bool(partitioned),
            "q": .int(Int64(q)), "n": .int(Int64(n)), "file": .string(fileID),
            "update_seq": .int(Int64(updateSeq)), "purge_seq": .int(Int64(purgeSeq)),
            "doc_count": .int(Int64(docCount)), "del_count": .int(Int64(delCount)),
            "external_size": .int(Int64(externalSize)), "revs_limit": .int(Int64(revsLimit)),
            "purged_infos_limit": .int(Int64(purgedInfosLimit)), "security": security, "local": .object(localDocs),
        ]
        return IndexSnapshot(
            coveredEnd: file.committedEnd, head: head, shardLogs: shardLogs, documents: documents,
            blobs: blobs.compactMap { digest, blob in
                blob.file === file ? (digest, blob.chunks, blob.length, blob.tag) : nil
            })
    }

    /// Writes the index snapshot beside the file (after a sync); lock held.
    func writeSnapshot() {
        try? syncFile()
        guard let file, let snapshot = makeSnapshot() else { return }
        snapshot.write(beside: file.url)
        recordsSinceSnapshot = 0
    }

    /// A database whose index is `snapshot` (its file not attached yet).
    static func restoring(_ snapshot: IndexSnapshot) -> Database? {
        let head = snapshot.head
        guard head["file"]?.stringValue != nil, let db = described(by: head),
            snapshot.shardLogs.count == db.shardLogs.count
        else { return nil }
        // A snapshot's numbers are the file's word, read as any record's (a snapshot out of range is not used).
        let numbers = ["update_seq", "purge_seq", "doc_count", "del_count", "external_size"].map {
            head[$0].map { $0.storedNumber } ?? 0
        }
        guard numbers.allSatisfy({ $0 != nil }) else { return nil }
        db.updateSeq = numbers[0] ?? 0
        db.purgeSeq = numbers[1] ?? 0
        db.docCount = numbers[2] ?? 0
        db.delCount = numbers[3] ?? 0
        db.externalSize = numbers[4] ?? 0
        db.revsLimit = head["revs_limit"]?.storedNumber ?? 1000
        db.purgedInfosLimit = head["purged_infos_limit"]?.storedNumber ?? 1000
        if let security = head["security"] { db.security = security }
        for (id, doc) in head["local"]?.members ?? [] {
            db.local[id] = LocalDoc(rev: Int(doc["rev"]?.intValue ?? 0), body: doc["b"] ?? [:])
        }
        db.shardLogs = snapshot.shardLogs
        db.seqLog.reserveCapacity(snapshot.documents.count)
        for (id, entry) in snapshot.documents {
            db.seqLog.append((entry.seq, id))
            if entry.flags & DocTableEntry.conflicted != 0 { db.conflictedIDs.insert(id) }
            if id.hasPrefix("_design/") { db.designIDs.insert(id) }
        }
        db.pendingSnapshot = snapshot
        return db
    }

    /// Attaches the file a snapshot was restored against: the entries and attachments point into it.
    func attachRestored(_ file: StoreFile) {
        guard let snapshot = pendingSnapshot else { return }
        pendingSnapshot = nil
        var entries: [String: DocTableEntry] = [:]
        entries.reserveCapacity(snapshot.documents.count)
        for (id, entry) in snapshot.documents { entries[id] = entry }
        self.file = file
        docs.replace(file: file, entries: entries)
        for blob in snapshot.blobs {
            blobs[blob.digest] = StoredBlob(file: file, chunks: blob.chunks, length: blob.length, tag: blob.tag)
        }
    }

    /// The record of a `_local` document.
    static func localRecord(id: String, _ doc: LocalDoc) -> JSON {
        ["op": "local", "id": .string(id), "rev": .int(Int64(doc.rev)), "b": doc.body]
    }

    /// What a compacted file records besides documents: `_local` documents, sequences, shard logs,
    /// settings (lock held).
    var stateRecords: [JSON] {
        local.map { Self.localRecord(id: $0.key, $0.value) } + [
            [
                "op": "state", "update_seq": .int(Int64(updateSeq)), "purge_seq": .int(Int64(purgeSeq)),
                "shards": .array(shardLogs.map { .array($0.map { .int(Int64($0)) }) }),
            ],
            ["op": "sec", "v": security],
            ["op": "revs_limit", "v": .int(Int64(revsLimit))],
            ["op": "purged_infos_limit", "v": .int(Int64(purgedInfosLimit))],
        ]
    }

    func applyCompaction() {
        for id in docs.ids {
            guard let entry = docs[id] else { continue }
            let leaves = Set(entry.leaves.map(\.rev))
            guard
                entry.nodes.contains(where: { !leaves.contains($0.key) && ($0.value.hasBody || !$0.value.atts.isEmpty) }
                )
            else { continue }
            var compacted = entry
            compacted.nodes = Dictionary(uniqueKeysWithValues: Self.compacted(entry).map { ($0.rev, $0) })
            docs.set(compacted)
        }
    }

    /// Called once every record of the file was read back.
    func finishLoading() {
        if zip(seqLog, seqLog.dropFirst()).contains(where: { $0.seq > $1.seq }) { seqLog.sort { $0.seq < $1.seq } }
    }

    /// Reads back one record of the database's file (opening it).
    func replay(offset: Int64, kind: StoreRecordKind, payload: ArraySlice<UInt8>, file: StoreFile) throws {
        switch kind {
        case .document:
            let head = try DocumentRecord.head(payload)
            guard let id = head["id"]?.stringValue, let seq = head["seq"]?.storedNumber else {
                throw StoreFileError(description: "a document record without id or sequence at \(offset)")
            }
            var tree = DocEntry(id: id)
            tree.seq = seq
            for node in DocumentRecord.nodes(fromHead: head, file: file, offset: offset) {
                tree.nodes[node.rev] = node
                for att in node.atts { if case .stored(let blob) = att.bytes { blobs[att.digest] = blob } }
                if case .stored(_, let at, _, let size) = node.storedBody, at == offset {
                    externalSize = min(externalSize + size, Int.max >> 1)  // a size is at most one record's
                }
            }
            let before = docs.summary(id)
            let entry = DocTableEntry(offset: offset, seq: tree.seq, flags: DocumentTable.flags(of: tree))
            docs.set(id: id, entry: entry)
            account(id: id, before: before, after: entry, seq: tree.seq, purge: head["purge"]?.boolValue == true)
        case .json:
            let record = try JSON.parse(payload)
            switch record["op"]?.stringValue {
            case "meta":
                break
            case "state":
                let damaged = StoreFileError(description: "a state record with a number out of range at \(offset)")
                if let u = record["update_seq"] {
                    guard let u = u.storedNumber else { throw damaged }
                    updateSeq = u
                }
                if let p = record["purge_seq"] {
                    guard let p = p.storedNumber else { throw damaged }
                    purgeSeq = p
                }
                if let shards = record["shards"]?.arrayValue, shards.count == shardLogs.count {
                    shardLogs = try shards.map { shard in
                        let values = shard.arrayValue ?? []
                        let log = values.compactMap(\.storedNumber)
                        guard log.count == values.count else { throw damaged }
                        return log
                    }
                }
            case "forget":
                if let id = record["id"]?.stringValue {
                    forget(id, before: docs.summary(id), purge: record["purge"]?.boolValue == true)
                }
            default:
                var none: [String: Data] = [:]
                replay(record, blobs: &none)
            }
        case .blob, .commit:
            break
        }
    }

    /// Replays one record of the line-per-record log of earlier versions (converting it).
    func replay(_ record: JSON, blobs: inout [String: Data]) {
        switch record["op"]?.stringValue {
        case "compact":
            applyCompaction()
        case "blob":
            if let d = record["d"]?.stringValue, let b = record["b"]?.stringValue, let data = Data(base64Encoded: b) {
                blobs[d] = data
            }
        case "doc":
            guard let id = record["id"]?.stringValue, let seq = record["seq"]?.storedNumber else { return }
            let nodes = (record["add"]?.arrayValue ?? []).compactMap { Database.decode($0, blobs: blobs) }
            apply(id: id, nodes: nodes, seq: seq)
        case "purge":
            guard let id = record["id"]?.stringValue else { return }
            applyPurge(id: id, revs: (record["revs"]?.arrayValue ?? []).compactMap(\.stringValue))
        case "local":
            guard let id = record["id"]?.stringValue, let rev = record["rev"]?.intValue else { return }
            local[id] = LocalDoc(rev: Int(rev), body: record["b"] ?? [:])
        case "localdel":
            if let id = record["id"]?.stringValue { local[id] = nil }
        case "sec":
            if let v = record["v"] { security = v }
        case "revs_limit":
            if let v = record["v"]?.intValue { revsLimit = Int(v) }
        case "purged_infos_limit":
            if let v = record["v"]?.intValue { purgedInfosLimit = Int(v) }
        default:
            break
        }
    }
}
