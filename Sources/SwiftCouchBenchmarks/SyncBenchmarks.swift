import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchSync

/// The replication rows: SwiftCouchSync pulling a database of small documents from the server into
/// a local database, and copying it to a new database on the same server (remote to remote), against
/// the server's own replicator (`POST /_replicate`, one-shot, `create_target`) making the same copy.
enum SyncBenchmarks {
    struct Row {
        var name: String
        var documents: Int
        var seconds: Double
        var peakResidentBytes: Int64?
        var note: String
    }

    /// Runs the rows `repeats` times each, in a rotating order (so that none is always the one a
    /// build starting elsewhere slows down), and reports each row's median time (and its largest
    /// peak memory); a row that failed is printed and left out. Every database made is deleted.
    static func run(quick: Bool, repeats: Int, serverURL: URL, username: String, password: String) async -> [Row] {
        let documents = quick ? 2_000 : 100_000
        var configuration = Configuration()
        configuration.maximumConcurrentOperations = 16
        configuration.authentication = .basic
        let client = CouchDBClient(
            url: serverURL, credentials: Credentials(username: username, password: password),
            configuration: configuration)
        defer { client.shutdown() }
        let suffix = UUID().uuidString.lowercased().prefix(8)
        let source = client.database("swiftcouch-bench-sync-source-\(suffix)")
        do {
            try await source.create()
            for start in stride(from: 0, to: documents, by: 5_000) {
                _ = try await source.bulk((start..<min(start + 5_000, documents)).map { SmallDocument.numbered($0) })
            }
        } catch {
            print("  replication rows: could not fill the source database: \(error)")
            _ = try? await source.delete()
            return []
        }
        let batching = "500 a batch, 4 batches at once"
        let rows: [(name: String, note: String, run: () async throws -> Measurement)] = [
            (
                pullName, "\(documents) docs of \(SmallDocument.numberedSize) B; \(batching)",
                { try await pull(source, documents: documents) }
            ),
            (
                remoteToRemoteName, "same database, new target on the same server; \(batching)",
                { try await copyRemoteToRemote(source, documents: documents) }
            ),
            (
                serverReplicatorName, "server process; same database, new target",
                {
                    try await serverReplication(
                        client, source: source.name, serverURL: serverURL, username: username, password: password,
                        documents: documents)
                }
            ),
        ]
        var measured: [[Measurement]] = Array(repeating: [], count: rows.count)
        for round in 0..<repeats {
            for offset in 0..<rows.count {
                let index = (round + offset) % rows.count
                do {
                    let measurement = try await rows[index].run()
                    measured[index].append(measurement)
                    print("  done: \(rows[index].name): \(String(format: "%.2f", measurement.wallSeconds)) s")
                } catch {
                    print("  \(rows[index].name): failed: \(error)")
                }
            }
        }
        _ = try? await source.delete()
        return rows.indices.compactMap { index in
            let runs = measured[index]
            guard !runs.isEmpty else { return nil }
            let times = runs.map(\.wallSeconds).sorted()
            return Row(
                name: rows[index].name, documents: runs.map(\.operations).min() ?? 0, seconds: times[times.count / 2],
                peakResidentBytes: runs.compactMap(\.peakResidentBytes).max(),
                note: rows[index].note + "; " + times.map { String(format: "%.1f", $0) }.joined(separator: ", ") + " s")
        }
    }

    /// SwiftCouchSync: the source pulled into a new local database (in a temporary directory).
    static func pull(_ source: Database, documents: Int) async throws -> Measurement {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "swiftcouch-bench-sync-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await LocalStore.open(at: directory)
        defer { store.close() }
        let local = try await store.database("pulled")
        let measurement = try await Measure.run {
            try await Replicator(source: .remote(source), target: .local(local)).run().docsWritten
        }
        try check(copied: try await local.info().docCount, of: documents)
        return measurement
    }

    /// SwiftCouchSync: the source copied to a new database on the same server (what the server's
    /// own replicator does in ``serverReplication``).
    static func copyRemoteToRemote(_ source: Database, documents: Int) async throws -> Measurement {
        let target = source.client.database("swiftcouch-bench-sync-r2r-\(UUID().uuidString.lowercased().prefix(8))")
        do {
            let measurement = try await Measure.run {
                try await Replicator(
                    source: .remote(source), target: .remote(target), options: .init(createTarget: true)
                )
                .run().docsWritten
            }
            try check(copied: try await target.info().docCount, of: documents)
            _ = try? await target.delete()
            return measurement
        } catch {
            _ = try? await target.delete()
            throw error
        }
    }

    /// The server's own replicator (`POST /_replicate`, one-shot, `create_target`) copying the
    /// source to a new database on the same server; the time is the request's (the server answers
    /// when the copy is done).
    static func serverReplication(
        _ client: CouchDBClient, source: String, serverURL: URL, username: String, password: String, documents: Int
    ) async throws -> Measurement {
        var base = URLComponents(url: serverURL, resolvingAgainstBaseURL: false)!
        base.path = ""
        let root = base.url!
        let credentials = Credentials(username: username, password: password)
        let copy = client.database("swiftcouch-bench-sync-copy-\(UUID().uuidString.lowercased().prefix(8))")
        let settings = ReplicationSettings(
            source: .remote(url: root.appendingPathComponent(source), basicAuth: credentials),
            target: .remote(url: root.appendingPathComponent(copy.name), basicAuth: credentials), createTarget: true)
        var call = CallOptions()
        call.timeout = 3_600
        do {
            let start = Date()
            let result = try await client.value(ReplicateOperation(settings: settings), options: call)
            let seconds = Date().timeIntervalSince(start)
            try check(copied: try await copy.info().docCount, of: documents)
            _ = try? await copy.delete()
            return Measurement(
                wallSeconds: seconds, cpuSeconds: 0, peakResidentBytes: nil,
                operations: result.docsWritten ?? documents)
        } catch {
            _ = try? await copy.delete()
            throw error
        }
    }

    static func check(copied: Int, of documents: Int) throws {
        guard copied == documents else {
            throw PlainClient.Failure(description: "the copy holds \(copied) of \(documents) documents")
        }
    }

    /// The table, with each SwiftCouchSync row's ratio to CouchDB's replicator (medians); `couchDB`
    /// says whether the server is a real CouchDB (COUCHDB_URL) or the child TestServer, whose
    /// replicator is no baseline for the issue's goals (no ratio then).
    static func table(_ rows: [Row], couchDB: Bool) -> String {
        var lines = [
            "| replication | documents | seconds | docs/s | client peak RSS | note |",
            "|---|---|---|---|---|---|",
        ]
        for row in rows {
            let rate = Double(row.documents) / max(row.seconds, 1e-9)
            let rss = row.peakResidentBytes.map { String(format: "%.0f MiB", Double($0) / 1_048_576) } ?? "–"
            lines.append(
                "| \(row.name) | \(row.documents) | \(String(format: "%.2f", row.seconds)) | "
                    + "\(String(format: "%.0f", rate)) | \(rss) | \(row.note) |")
        }
        lines.append("")
        guard couchDB else {
            lines.append("Against the TestServer in a child process (no COUCHDB_URL): no CouchDB ratio.")
            return lines.joined(separator: "\n")
        }
        if let server = rows.first(where: { $0.name == serverReplicatorName }) {
            for (name, goal) in [(pullName, "goal ≥ 2×"), (remoteToRemoteName, "goal: time within 1.2×")] {
                guard let ours = rows.first(where: { $0.name == name }) else { continue }
                let speed =
                    (Double(ours.documents) / max(ours.seconds, 1e-9))
                    / max(Double(server.documents) / max(server.seconds, 1e-9), 1e-9)
                let time = ours.seconds / max(server.seconds, 1e-9)
                lines.append(
                    "\(name) / CouchDB's replicator: docs/s \(String(format: "%.2f", speed))×, "
                        + "time \(String(format: "%.2f", time))× (\(goal))")
            }
        }
        return lines.joined(separator: "\n")
    }

    static let pullName = "SwiftCouchSync pull into a local database"
    static let remoteToRemoteName = "SwiftCouchSync remote to remote (new database, same server)"
    static let serverReplicatorName = "the server's own replicator (POST /_replicate)"
}
