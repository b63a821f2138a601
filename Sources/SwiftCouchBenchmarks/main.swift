// SwiftCouch benchmarks: the library against plain URLSession with hand-written JSON, in the same
// run, against the same server.
//
//     swift run -c release SwiftCouchBenchmarks            # full size
//     swift run -c release SwiftCouchBenchmarks --quick    # reduced size (CI)
//     swift run -c release SwiftCouchBenchmarks --repeats 5   # medians of 5 (default 3; quick 1)
//     swift run -c release SwiftCouchBenchmarks --only _all_docs   # the rows whose name contains it
//     swift run -c release SwiftCouchBenchmarks --only PUT --transport sockets --no-baseline   # profiling
//     swift run -c release SwiftCouchBenchmarks --urlsession-study   # ways of driving URLSession
//     swift run -c release SwiftCouchBenchmarks --store-only   # just the CouchStore rows
//     swift run -c release SwiftCouchBenchmarks --store-only --open-docs 100000   # a smaller open row
//
// Against a TestServer started in a child process (so the client's CPU and memory are measured
// alone), or against the CouchDB named by COUCHDB_URL (with COUCHDB_USER and COUCHDB_PASSWORD).
// It only reports; nothing here is a pass/fail assertion.

import CouchTestServer
import Foundation
import ProcessSpawn
import SwiftCouch

let arguments = CommandLine.arguments

let knownFlags: Set<String> = [
    "--quick", "--repeats", "--only", "--transport", "--no-baseline", "--urlsession-study", "--serve",
    "--store-only", "--no-store", "--open-docs", "--open-database", "--sync-only", "--no-sync",
]
if arguments.contains("--help") || arguments.contains("-h") {
    print(
        """
        Usage: swift run -c release SwiftCouchBenchmarks [options]

          --quick              reduced sizes (what CI runs); one repeat unless --repeats says otherwise
          --repeats N          medians of N repeats (default 3)
          --only TEXT          only the workloads whose name contains TEXT (just the one named TEXT
                               when a name is exactly TEXT)
          --transport NAME     only the library rows over NAME (sockets or URLSession)
          --no-baseline        skip the plain-Foundation rows (for profiling; no ratios then)
          --urlsession-study   client CPU per PUT+GET pair for several ways of driving URLSession
          --store-only         only the store rows (CouchStore's engine in-process, against CouchDB
                               when COUCHDB_URL is set, with a row for CouchDB's own replicator)
          --no-store           skip the store rows
          --open-docs N        the open row's database size (default 1,000,000; quick 3,000)
          --sync-only          only the replication rows (SwiftCouchSync pulling 100,000 documents into a
                               local database and copying them to a new database on the same server,
                               against the server's own replicator; quick 2,000)
          --no-sync            skip the replication rows

        Against the CouchDB named by COUCHDB_URL (COUCHDB_USER, COUCHDB_PASSWORD), or else a
        TestServer in a child process. It only reports; nothing is asserted.
        """)
    exit(0)
}
if let unknown = arguments.dropFirst().first(where: { $0.hasPrefix("-") && !knownFlags.contains($0) }) {
    FileHandle.standardError.write(Data("Unknown option \(unknown); --help lists the options.\n".utf8))
    exit(2)
}

// Child mode of the store's open row: open a data directory, report, exit.
if let index = arguments.firstIndex(of: "--open-database"), index + 1 < arguments.count {
    StoreBenchmarks.openChild(directory: arguments[index + 1])
}

// Child mode: serve a TestServer until SIGTERM or the end of standard input.
if let index = arguments.firstIndex(of: "--serve") {
    let port = index + 1 < arguments.count ? Int(arguments[index + 1]) ?? 0 : 0
    let server = try TestServer.start(TestServer.Configuration(port: port))
    FileHandle.standardOutput.write(Data("URL \(server.url.absoluteString)\n".utf8))
    // Served until SIGTERM (what the parent sends when it is done) or the end of standard input, whichever comes
    // first (the parent's exit brings both at once): the main thread alone then stops the server, which removes its
    // temporary data directory (SIGTERM's default action would leave it), and exits.
    let ended = DispatchSemaphore(value: 0)
    signal(SIGTERM, SIG_IGN)
    let terminate = DispatchSource.makeSignalSource(signal: SIGTERM, queue: DispatchQueue(label: "serve.signals"))
    terminate.setEventHandler { ended.signal() }
    terminate.resume()
    Thread.detachNewThread {
        while readLine() != nil {}
        ended.signal()
    }
    ended.wait()
    server.stop()
    exit(0)
}

let quick = arguments.contains("--quick")
let repeats = arguments.firstIndex(of: "--repeats").flatMap { $0 + 1 < arguments.count ? Int(arguments[$0 + 1]) : nil }
let sizes = BenchmarkSizes(quick: quick, repeats: repeats)
let environment = ProcessInfo.processInfo.environment
let syncOnly = arguments.contains("--sync-only")
let storeOnly = arguments.contains("--store-only") || syncOnly
let openDocuments = arguments.firstIndex(of: "--open-docs").flatMap {
    $0 + 1 < arguments.count ? Int(arguments[$0 + 1]) : nil
}

/// The server: COUCHDB_URL, or a TestServer in a child process.
let child: ChildProcess?
let serverURL: URL
let username: String
let password: String
if let raw = environment["COUCHDB_URL"], let url = URL(string: raw) {
    child = nil
    serverURL = url
    username = environment["COUCHDB_USER"] ?? "admin"
    password = environment["COUCHDB_PASSWORD"] ?? "password"
} else if storeOnly && !syncOnly {
    // The store rows need no server: only CouchDB's side would, and there is none.
    child = nil
    serverURL = URL(string: "http://127.0.0.1:5984")!
    username = "admin"
    password = "password"
} else {
    let (process, url) = try startChildServer()
    child = process
    serverURL = url
    username = "admin"
    password = "password"
}
defer { child?.signal(SIGTERM) }

if arguments.contains("--urlsession-study") {
    print("Driving URLSession: client CPU per PUT+GET pair, \(MachineDescription.current())")
    try await URLSessionStudy.run(base: serverURL, username: username, password: password, quick: quick)
    child?.signal(SIGTERM)
    exit(0)
}

let machine = MachineDescription.current()
let against =
    storeOnly && !syncOnly && environment["COUCHDB_URL"] == nil
    ? "no server (store rows only)"
    : child == nil ? serverURL.absoluteString : "a TestServer in a child process"
print("SwiftCouch benchmarks (\(quick ? "quick" : "full") size) against \(against)")
print(machine)
print("")

var report = Report()
let transports = availableTransports(for: serverURL)
let plain = PlainClient(base: serverURL, username: username, password: password)
if !storeOnly {
    print(
        "Document: \(SmallDocument.numberedSize) bytes of JSON; "
            + "\(sizes.repeats) repeat(s) per row, interleaved, medians reported.")
}

/// `--only <text>`: just the rows whose name contains the text, or the one named exactly so (for
/// profiling one workload: "PUT+GET pairs, concurrency 1" is also part of "… concurrency 16").
let only = arguments.firstIndex(of: "--only").flatMap { $0 + 1 < arguments.count ? arguments[$0 + 1] : nil }
/// `--transport <name>`: just that transport's library rows (`sockets` or `URLSession`), for profiling.
let onlyTransport = arguments.firstIndex(of: "--transport").flatMap {
    $0 + 1 < arguments.count ? arguments[$0 + 1].lowercased() : nil
}
/// `--no-baseline`: skip the plain-Foundation rows (profiling only: the ratios need them).
let skipBaseline = arguments.contains("--no-baseline")

let workloads = Workload.all(sizes: sizes)
let exactlyNamed = workloads.contains { $0.name == only }
func isSelected(_ workload: Workload) -> Bool {
    only.map { exactlyNamed ? workload.name == $0 : workload.name.contains($0) } ?? true
}
for workload in workloads where isSelected(workload) && !storeOnly {
    for _ in 0..<sizes.repeats {
        // The library runs first, so its peak memory is not inflated by what the baseline left behind.
        for (transportName, makeTransport) in transports
        where onlyTransport.map({ transportName.lowercased() == $0 }) ?? true {
            var configuration = Configuration()
            configuration.transport = makeTransport()
            configuration.maximumConcurrentOperations = 16
            configuration.authentication = .basic
            let client = CouchDBClient(
                url: serverURL, credentials: Credentials(username: username, password: password),
                configuration: configuration)
            do {
                report.add(
                    library: try await workload.measureLibrary(client), workload: workload, transport: transportName)
            } catch {
                print("  \(workload.name) with \(transportName): failed: \(error)")
            }
            client.shutdown()
        }
        if skipBaseline { continue }
        do {
            report.add(baseline: try await workload.measurePlain(plain), workload: workload)
        } catch {
            print("  \(workload.name): the plain URLSession baseline failed: \(error)")
        }
    }
    await workload.cleanUp(plain)
}
// Databases one row leaves for the next (the bulk row's, for the reads) are deleted even when
// `--only` skipped the row that would have: the server is left as it was found.
if !storeOnly {
    for workload in workloads where !isSelected(workload) { await workload.cleanUp(plain) }
    print(report.table())
    print("")
    print(Report.legend)
}

// The replication rows: SwiftCouchSync pulling into a local database, against the server's own
// replicator (a server is needed: the child TestServer, or COUCHDB_URL).
if !arguments.contains("--no-sync") && (!storeOnly || syncOnly) {
    print("")
    print(
        "Replication: pull into a local database and remote to remote, against the server's own replicator "
            + "(\(child == nil ? "CouchDB at \(serverURL.absoluteString)" : "a TestServer in a child process"))")
    let syncRows = await SyncBenchmarks.run(
        quick: quick, repeats: sizes.repeats, serverURL: serverURL, username: username, password: password)
    print(SyncBenchmarks.table(syncRows, couchDB: child == nil))
}

// The store rows: CouchStore's engine in this process, against CouchDB when COUCHDB_URL names one.
if !arguments.contains("--no-store") && !syncOnly {
    print("")
    let couch = environment["COUCHDB_URL"] != nil ? plain : nil
    let storeRows = await StoreBenchmarks.run(
        sizes: StoreSizes(quick: quick, openDocuments: openDocuments), couch: couch,
        only: only)
    print(StoreBenchmarks.table(storeRows))
    print("")
    print(StoreBenchmarks.legend)
}
