import Foundation
import ProcessSpawn
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
    static func allDocuments<Document: Decodable & Sendable>(
        _ type: Document.Type, client: CouchDBClient, database: String
    ) async throws -> Int {
        var options = KeyRangeOptions()
        options.includeDocs = true
        var count = 0
        for try await row in client.rows(AllDocsOperation<Document>(database: database, options: options)) {
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

/// Starts this executable again in `--serve` mode and reads the TestServer's URL from it. The child
/// serves until its standard input ends: when this process ends, or ``ChildProcess/signal(_:)``.
func startChildServer() throws -> (ChildProcess, URL) {
    let process = try ChildProcess(executable: thisExecutable(), arguments: ["--serve", "0"], pipeInput: true)
    var line = Data()
    while line.count < 4_096 {
        var byte: UInt8 = 0
        guard read(process.output.fileDescriptor, &byte, 1) == 1, byte != UInt8(ascii: "\n") else { break }
        line.append(byte)
    }
    let text = String(decoding: line, as: UTF8.self)
    guard text.hasPrefix("URL "), let url = URL(string: String(text.dropFirst(4))) else {
        process.signal(SIGTERM)
        process.wait()
        throw PlainClient.Failure(description: "The TestServer child did not start: \(text)")
    }
    return (process, url)
}

/// This executable, to start again as a child.
func thisExecutable() -> URL {
    let url = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
    if !FileManager.default.isExecutableFile(atPath: url.path), let path = Bundle.main.executablePath {
        return URL(fileURLWithPath: path)
    }
    return url
}

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

/// The table of results: for each row, the medians of its repeats.
struct Report {
    private struct Row {
        var workload: Workload
        var transport: String
        var library: [Measurement] = []
    }

    private var rows: [Row] = []
    private var baselines: [String: [Measurement]] = [:]

    mutating func add(library: Measurement, workload: Workload, transport: String) {
        if let index = rows.firstIndex(where: { $0.workload.name == workload.name && $0.transport == transport }) {
            rows[index].library.append(library)
        } else {
            rows.append(Row(workload: workload, transport: transport, library: [library]))
        }
        print("  done: \(workload.name) (\(transport)): \(Self.progress(library, workload))")
    }

    mutating func add(baseline: Measurement, workload: Workload) {
        baselines[workload.name, default: []].append(baseline)
        print("  done: \(workload.name) (baseline): \(Self.progress(baseline, workload))")
    }

    /// One repeat's CPU per operation, for the progress lines (the table shows the medians).
    static func progress(_ run: Measurement, _ workload: Workload) -> String {
        cpu(run.cpuSeconds / Double(max(run.operations, 1)), workload.unit) + " CPU/op"
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return .nan }
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }

    /// Median client CPU seconds per operation.
    static func cpuPerOperation(_ runs: [Measurement]) -> Double {
        median(runs.map { $0.cpuSeconds / Double(max($0.operations, 1)) })
    }

    static func throughput(_ runs: [Measurement]) -> Double { median(runs.map(\.operationsPerSecond)) }

    /// CPU per operation in the unit that reads best for it.
    static func cpu(_ seconds: Double, _ unit: OperationUnit) -> String {
        switch unit {
        case .pair, .mebibyte: return String(format: "%.3f ms", seconds * 1e3)
        case .document, .change: return String(format: "%.1f µs", seconds * 1e6)
        }
    }

    func table() -> String {
        var lines = [
            "| workload | transport | library ops/s | baseline ops/s | ratio | library CPU/op | baseline CPU/op "
                + "| CPU ratio | CPU target | library peak RSS |",
            "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
        ]
        for row in rows {
            let baseline = baselines[row.workload.name] ?? []
            let unit = row.workload.unit
            let libraryRate = Self.throughput(row.library)
            let baselineRate = Self.throughput(baseline)
            let libraryCPU = Self.cpuPerOperation(row.library)
            let baselineCPU = Self.cpuPerOperation(baseline)
            let rss =
                row.library.compactMap(\.peakResidentBytes).max().map {
                    String(format: "%.0f MiB", Double($0) / 1_048_576)
                } ?? "n/a"
            var target = "—"
            if let goal = row.workload.cpuTarget, row.transport == "sockets" {
                target = "≤ \(Self.cpu(goal, unit)): \(libraryCPU <= goal ? "met" : "not met")"
            }
            lines.append(
                "| \(row.workload.name) | \(row.transport) | \(Self.rate(libraryRate)) | \(Self.rate(baselineRate)) | "
                    + "\(String(format: "%.2f", libraryRate / baselineRate)) | \(Self.cpu(libraryCPU, unit)) | "
                    + "\(Self.cpu(baselineCPU, unit)) | \(String(format: "%.2f", libraryCPU / baselineCPU)) | \(target) | "
                    + "\(rss) |")
        }
        return lines.joined(separator: "\n")
    }

    static let legend = """
        ops/s: operations per second (a PUT+GET pair, a document, a change, or a MiB), median of the repeats.
        ratio: library throughput / baseline throughput (above 1: the library is faster); the baseline is plain
        Foundation (URLSession, JSONSerialization, hand-written JSON) doing the same work in the same run.
        CPU/op: the client process's user + system CPU (getrusage) per operation; CPU ratio: library / baseline
        (below 1: the library uses less). CPU target: the goal for the socket transport (reported, not asserted).
        peak RSS: the client process's high-water mark during the row (largest of the repeats).
        """

    /// Operations per second: whole numbers, with two decimals below 10.
    static func rate(_ value: Double) -> String {
        String(format: value < 10 ? "%.2f" : "%.0f", value)
    }
}
