import CouchQuery
import Foundation

/// An append-only log of one database's committed changes (one JSON record per line), made durable
/// (`fsync`) before the write that produced it is answered. Replayed when the engine starts.
final class DatabaseLog: @unchecked Sendable {
    // Safe: only used while the owning database's lock is held (and by the engine during start-up).
    let url: URL
    private var handle: FileHandle?

    init(url: URL) throws {
        self.url = url
        if !FileManager.default.fileExists(atPath: url.path) {
            guard FileManager.default.createFile(atPath: url.path, contents: nil) else {
                throw CouchError(500, "file_error", "could not create \(url.path)")
            }
        }
        handle = try FileHandle(forWritingTo: url)
        try handle?.seekToEnd()
    }

    /// Appends records and waits until they are on disk.
    func append(_ records: [JSON]) throws(CouchError) {
        guard let handle else { throw CouchError(500, "file_error", "database log is closed") }
        var text = ""
        for record in records {
            record.write(to: &text)
            text += "\n"
        }
        do {
            try handle.write(contentsOf: Data(text.utf8))
            try handle.synchronize()
        } catch {
            throw CouchError(500, "file_error", "could not write \(url.lastPathComponent): \(error)")
        }
    }

    func close() {
        try? handle?.close()
        handle = nil
    }

    /// Closes the log and removes its file (database deleted).
    func remove() {
        close()
        try? FileManager.default.removeItem(at: url)
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

    static func fileName(for database: String) -> String {
        Crypto.hex(Data(database.utf8)) + ".couchlog"
    }
}

/// The data directory layout: `server.json` (server uuid and cookie secret) and `dbs/*.couchlog`.
struct DataDirectory {
    let root: URL

    var databasesFolder: URL { root.appendingPathComponent("dbs", isDirectory: true) }
    var serverFile: URL { root.appendingPathComponent("server.json") }

    func prepare() throws {
        try FileManager.default.createDirectory(at: databasesFolder, withIntermediateDirectories: true)
    }

    func logURL(for database: String) -> URL {
        databasesFolder.appendingPathComponent(DatabaseLog.fileName(for: database))
    }

    func logFiles() -> [URL] {
        let files =
            (try? FileManager.default.contentsOfDirectory(at: databasesFolder, includingPropertiesForKeys: nil)) ?? []
        return files.filter { $0.pathExtension == "couchlog" }.sorted { $0.path < $1.path }
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
