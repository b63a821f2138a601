import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchSync

/// The replication rows: SwiftCouchSync pulling a database of small documents from the server into
/// a local database, against the server's own replicator (`POST /_replicate`, one-shot,
/// `create_target`) copying the same database to a new database on the same server.
enum SyncBenchmarks {
    struct Row {
        var name: String
        var documents: Int
        var seconds: Double
        var peakResidentBytes: Int64?
        var note: String
    }

    /// Runs the rows; a failed row is printed and left out.
    static func run(quick: Bool, serverURL: URL, username: String, password: String) async -> [Row] {
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
        let copy = "swiftcouch-bench-sync-copy-\(suffix)"
        var rows: [Row] = []
        defer {
            Task { [client] in
                _ = try? await client.database(source.name).delete()
                _ = try? await client.database(copy).delete()
            }
        }
        do {
            try await source.create()
            var written = 0
            while written < documents {
                let count = min(5_000, documents - written)
                let batch = (written..<(written + count)).map {
                    SmallDocument(_id: String(format: "doc%07d", $0), n: $0, text: "small")
                }
                _ = try await source.bulk(batch)
                written += count
            }
        } catch {
            print("  replication rows: could not fill the source database: \(error)")
            return []
        }
        let size = SmallDocument(_id: "doc0000000", n: 0, text: "small").json.utf8.count

        // SwiftCouchSync: remote → local.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "swiftcouch-bench-sync-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        do {
            let store = try await LocalStore.open(at: directory)
            defer { store.close() }
            let local = try await store.database("pulled")
            let measurement = try await Measure.run {
                let summary = try await Replicator(source: .remote(source), target: .local(local)).run()
                return summary.docsWritten
            }
            rows.append(
                Row(
                    name: "SwiftCouchSync pull into a local database", documents: measurement.operations,
                    seconds: measurement.wallSeconds, peakResidentBytes: measurement.peakResidentBytes,
                    note: "\(documents) docs of \(size) B; 500 a batch, 4 batches at once"))
        } catch {
            print("  SwiftCouchSync pull: failed: \(error)")
        }

        // The server's own replicator, to a new database on the same server.
        do {
            var base = URLComponents(url: serverURL, resolvingAgainstBaseURL: false)!
            base.path = ""
            let root = base.url!
            let credentials = Credentials(username: username, password: password)
            let settings = ReplicationSettings(
                source: .remote(url: root.appendingPathComponent(source.name), basicAuth: credentials),
                target: .remote(url: root.appendingPathComponent(copy), basicAuth: credentials), createTarget: true)
            var call = CallOptions()
            call.timeout = 3_600
            let start = Date()
            let result = try await client.value(ReplicateOperation(settings: settings), options: call)
            let seconds = Date().timeIntervalSince(start)
            rows.append(
                Row(
                    name: "the server's own replicator (POST /_replicate)", documents: result.docsWritten ?? documents,
                    seconds: seconds, peakResidentBytes: nil, note: "server process; same database, new target"))
        } catch {
            print("  the server's replicator: failed: \(error)")
        }
        return rows
    }

    static func table(_ rows: [Row]) -> String {
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
        if rows.count == 2 {
            let ours = Double(rows[0].documents) / max(rows[0].seconds, 1e-9)
            let theirs = Double(rows[1].documents) / max(rows[1].seconds, 1e-9)
            lines.append("")
            lines.append(String(format: "SwiftCouchSync / server replicator, docs/s: %.2f×", ours / max(theirs, 1e-9)))
        }
        return lines.joined(separator: "\n")
    }
}
