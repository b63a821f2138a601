import Foundation
import SwiftCouch

/// The transports the library rows run with.
func availableTransports(for url: URL) -> [(String, @Sendable () -> any Transport)] {
    var transports: [(String, @Sendable () -> any Transport)] = [
        ("URLSession", { URLSessionTransport(maximumConnectionsPerHost: 16) })
    ]
    if url.scheme == "http" {
        transports.append(("sockets", { SocketTransport(maximumConnectionsPerHost: 16) }))
    }
    return transports
}

/// The library's reads: streamed, row by row.
enum LibraryReads {
    static func allDocuments(client: CouchDBClient, database: String) async throws -> Int {
        var options = KeyRangeOptions()
        options.includeDocs = true
        var count = 0
        for try await row in client.rows(AllDocsOperation<SmallDocument>(database: database, options: options)) {
            if row.doc != nil { count += 1 }
        }
        return count
    }

    /// Follows the whole feed to its end with the changes follower.
    static func changes(client: CouchDBClient, database: String) async throws -> Int {
        let follower = ChangesFollower<JSONValue>(
            client: client, database: database, options: .init(mode: .finite, batchSize: 10_000))
        var count = 0
        for try await _ in follower { count += 1 }
        return count
    }
}

/// Starts this executable again in `--serve` mode and reads the TestServer's URL from it.
func startChildServer() throws -> (Process, URL) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
    if !FileManager.default.isExecutableFile(atPath: process.executableURL!.path),
        let path = Bundle.main.executablePath
    {
        process.executableURL = URL(fileURLWithPath: path)
    }
    process.arguments = ["--serve", "0"]
    let output = Pipe()
    let input = Pipe()
    process.standardOutput = output
    process.standardInput = input
    try process.run()
    var line = Data()
    while true {
        let byte = output.fileHandleForReading.readData(ofLength: 1)
        if byte.isEmpty || byte == Data("\n".utf8) { break }
        line.append(byte)
    }
    let text = String(decoding: line, as: UTF8.self)
    guard text.hasPrefix("URL "), let url = URL(string: String(text.dropFirst(4))) else {
        process.terminate()
        throw PlainClient.Failure(description: "The TestServer child did not start: \(text)")
    }
    childInput = input
    return (process, url)
}

/// Kept open so the child serves until this process ends.
nonisolated(unsafe) var childInput: Pipe?

/// The machine, for the report's header.
enum MachineDescription {
    static func current() -> String {
        let cores = ProcessInfo.processInfo.activeProcessorCount
        let memory = Double(ProcessInfo.processInfo.physicalMemory) / Double(1 << 30)
        var model = "unknown CPU"
        if let cpuinfo = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8),
            let line = cpuinfo.split(separator: "\n").first(where: { $0.hasPrefix("model name") }),
            let name = line.split(separator: ":", maxSplits: 1).last
        {
            model = name.trimmingCharacters(in: .whitespaces)
        }
        #if os(Linux)
            let os = "Linux"
        #else
            let os = "macOS"
        #endif
        return "Machine: \(model), \(cores) cores, \(String(format: "%.0f", memory)) GiB, \(os)"
    }
}

/// The table of results.
struct Report {
    struct Row {
        var workload: String
        var transport: String
        var library: Measurement
        var baseline: Measurement
    }

    var rows: [Row] = []

    mutating func add(workload: String, transport: String, library: Measurement, baseline: Measurement) {
        rows.append(Row(workload: workload, transport: transport, library: library, baseline: baseline))
        print("  done: \(workload) (\(transport))")
    }

    func table() -> String {
        var lines = [
            "| workload | transport | library ops/s | URLSession ops/s | ratio | library CPU s/1k ops | URLSession CPU s/1k ops | library peak RSS |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for row in rows {
            let ratio = row.library.operationsPerSecond / max(row.baseline.operationsPerSecond, 1e-9)
            let rss = row.library.peakResidentBytes.map { String(format: "%.0f MiB", Double($0) / 1_048_576) } ?? "n/a"
            lines.append(
                "| \(row.workload) | \(row.transport) | \(Self.rate(row.library.operationsPerSecond)) | "
                    + "\(Self.rate(row.baseline.operationsPerSecond)) | \(String(format: "%.2f", ratio)) | "
                    + "\(String(format: "%.3f", row.library.cpuSeconds * 1000 / Double(max(row.library.operations, 1)))) | "
                    + "\(String(format: "%.3f", row.baseline.cpuSeconds * 1000 / Double(max(row.baseline.operations, 1)))) | "
                    + "\(rss) |")
        }
        return lines.joined(separator: "\n")
    }

    /// Operations per second: whole numbers, with two decimals below 10 (a 256 MiB round trip
    /// takes seconds, and "0" would hide the difference).
    static func rate(_ value: Double) -> String {
        String(format: value < 10 ? "%.2f" : "%.0f", value)
    }
}
