import CouchQuery
import Foundation

/// The data directory layout: `server.json` (server uuid and cookie secret) and `dbs/<hex name>.couch`,
/// one ``StoreFile`` per database.
struct DataDirectory {
    let root: URL

    var databasesFolder: URL { root.appendingPathComponent("dbs", isDirectory: true) }
    var serverFile: URL { root.appendingPathComponent("server.json") }

    static let fileExtension = "couch"

    func prepare() throws {
        try FileManager.default.createDirectory(at: databasesFolder, withIntermediateDirectories: true)
    }

    func fileURL(for database: String) -> URL {
        databasesFolder.appendingPathComponent(Crypto.hex(Data(database.utf8)) + "." + Self.fileExtension)
    }

    /// The database files, after removing what an interrupted compaction left behind and converting
    /// logs of earlier versions.
    func databaseFiles() throws -> [URL] {
        let files =
            (try? FileManager.default.contentsOfDirectory(at: databasesFolder, includingPropertiesForKeys: nil)) ?? []
        for file in files where file.pathExtension == "compact" || file.pathExtension == "tmp" {
            try? FileManager.default.removeItem(at: file)
        }
        for file in files where file.pathExtension == "couchlog" {
            try LegacyLog.convert(file, to: file.deletingPathExtension().appendingPathExtension(Self.fileExtension))
        }
        let now =
            (try? FileManager.default.contentsOfDirectory(at: databasesFolder, includingPropertiesForKeys: nil)) ?? []
        return now.filter { $0.pathExtension == Self.fileExtension }.sorted { $0.path < $1.path }
    }

    /// The database name a file is for (its name is the name's bytes in hex).
    static func databaseName(of url: URL) -> String? {
        guard let bytes = Crypto.fromHex(url.deletingPathExtension().lastPathComponent) else { return nil }
        return String(data: bytes, encoding: .utf8)
    }

    func readServerState() -> JSON? {
        guard let data = try? Data(contentsOf: serverFile) else { return nil }
        return try? JSON.parse(data)
    }

    func writeServerState(_ state: JSON) throws {
        let tmp = root.appendingPathComponent("server.json.tmp")
        try Data(state.serialized.utf8).write(to: tmp)
        if FileManager.default.fileExists(atPath: serverFile.path) {
            _ = try FileManager.default.replaceItemAt(serverFile, withItemAt: tmp)
        } else {
            try FileManager.default.moveItem(at: tmp, to: serverFile)
        }
    }
}

extension Database {
    /// An empty database as a database record (or an index snapshot's head) describes it: name,
    /// creation time, partitioning, shards and copies, and the file's identity when it names one.
    static func described(by meta: JSON) -> Database? {
        // Shard and copy counts the engine could have written (a foreign q must not become that many shards).
        let q = meta["q"].map { $0.storedNumber ?? 0 } ?? 2
        let n = meta["n"].map { $0.storedNumber ?? 0 } ?? 1
        guard let name = meta["name"]?.stringValue, (1...SequenceToken.maximumShards).contains(q), n >= 1 else {
            return nil
        }
        let db = Database(
            name: name, instanceStartTime: meta["created"]?.storedNumber ?? 0,
            partitioned: meta["partitioned"]?.boolValue ?? false, q: q, n: n)
        if let id = meta["file"]?.stringValue { db.fileID = id }
        return db
    }

    /// Creates a database and its file (which must not exist yet).
    static func create(
        at url: URL, name: String, instanceStartTime: Int, partitioned: Bool, q: Int, n: Int,
        synchronousWrites: Bool = true
    ) throws(CouchError) -> Database {
        let db = Database(name: name, instanceStartTime: instanceStartTime, partitioned: partitioned, q: q, n: n)
        do throws(StoreFileError) {
            let file = try StoreFile.create(at: url, synchronousWrites: synchronousWrites)
            file.append(.json, Array(db.metaRecord.serialized.utf8))
            try file.sync()
            db.file = file
        } catch {
            try? FileManager.default.removeItem(at: url)
            throw CouchError(500, "file_error", "could not create the database file: \(error)")
        }
        return db
    }

    /// Opens a database file: the index snapshot beside it when it matches the file (then only the
    /// records after it are read), else every committed record (bodies and attachments stay on disk).
    /// A torn end is cut off; damage in the middle throws.
    static func open(at url: URL, synchronousWrites: Bool = true) throws -> Database {
        if let db = try openFromSnapshot(at: url, synchronousWrites: synchronousWrites) { return db }
        var db: Database?
        let file = try StoreFile.open(at: url, synchronousWrites: synchronousWrites) { file, offset, kind, payload in
            if let db {
                try db.replay(offset: offset, kind: kind, payload: payload, file: file)
                return
            }
            guard kind == .json, let meta = try? JSON.parse(payload), meta["op"]?.stringValue == "meta",
                let described = Database.described(by: meta)
            else {
                throw StoreFileError(description: "\(url.lastPathComponent) does not begin with a database record")
            }
            db = described
            db?.file = file
        }
        guard let db else {
            file.close()
            throw StoreFileError(description: "\(url.lastPathComponent) holds no committed database record")
        }
        db.file = file
        db.finishLoading()
        // The next open starts from here.
        db.withLock { db.writeSnapshot() }
        return db
    }

    /// Opens from the index snapshot beside the file; nil when there is none that matches it.
    private static func openFromSnapshot(at url: URL, synchronousWrites: Bool) throws -> Database? {
        guard let snapshot = IndexSnapshot.read(beside: url), let db = Database.restoring(snapshot),
            let first = StoreFile.firstRecord(at: url), let meta = try? JSON.parse(first),
            meta["op"]?.stringValue == "meta", meta["file"]?.stringValue == db.fileID,
            meta["name"]?.stringValue == db.name
        else { return nil }
        let size = (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int) ?? nil
        guard let size, snapshot.coveredEnd <= Int64(size) else { return nil }
        var attached = false
        let file = try StoreFile.open(at: url, from: snapshot.coveredEnd, synchronousWrites: synchronousWrites) {
            file, offset, kind, payload in
            if !attached {
                db.attachRestored(file)
                attached = true
            }
            try db.replay(offset: offset, kind: kind, payload: payload, file: file)
        }
        if !attached { db.attachRestored(file) }
        db.finishLoading()
        db.openedFromSnapshot = true
        return db
    }

    /// Writes every document, `_local` document and setting into `target` (converting a legacy log).
    func writeEverything(into target: StoreFile) throws(StoreFileError) {
        target.append(.json, Array(metaRecord.serialized.utf8))
        var newBlobs: [String: StoredBlob] = [:]
        for id in docs.ids {
            if let entry = docs[id] { _ = try storeTree(entry, in: target, blobs: &newBlobs) }
        }
        for record in stateRecords { target.append(.json, Array(record.serialized.utf8)) }
    }
}

/// The line-per-record JSON log of earlier versions: read once and converted to a ``StoreFile``.
enum LegacyLog {
    static func convert(_ url: URL, to newURL: URL) throws {
        let records = self.records(at: url)
        guard let meta = records.first, meta["op"]?.stringValue == "meta", let db = Database.described(by: meta)
        else { return }
        var blobs: [String: Data] = [:]
        for record in records.dropFirst() { db.replay(record, blobs: &blobs) }
        try? FileManager.default.removeItem(at: newURL)
        let tmp = newURL.appendingPathExtension("compact")
        try? FileManager.default.removeItem(at: tmp)
        let target = try StoreFile.create(at: tmp)
        try db.writeEverything(into: target)
        try target.sync()
        try target.rename(to: newURL)
        target.close()
        try FileManager.default.removeItem(at: url)
    }

    /// Every complete record in a log file; a torn last line (crash during a write) is skipped.
    static func records(at url: URL) -> [JSON] {
        guard let data = try? Data(contentsOf: url) else { return [] }
        var out: [JSON] = []
        var start = data.startIndex
        while start < data.endIndex {
            guard let newline = data[start...].firstIndex(of: 0x0A) else { break }
            if let record = try? JSON.parse(data[start..<newline]) { out.append(record) }
            start = data.index(after: newline)
        }
        return out
    }
}
