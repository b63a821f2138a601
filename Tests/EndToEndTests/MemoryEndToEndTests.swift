import CouchTestServer
import Foundation
import SwiftCouch
import Testing

/// Memory is measured in a child process that runs only the client (or, for what serving costs, a TestServer of
/// its own too): tests run in parallel in one process, so they may not pollute the figures. The
/// parent starts a TestServer, prepares the data, then runs this same test binary filtered to
/// ``MemoryProbe`` with `SWIFTCOUCH_MEMORY_PROBE` set; the probe prints its resident-memory
/// readings and the parent asserts on them.
@Suite("End to end: memory stays flat")
struct MemoryEndToEndTests {
    @Test("Streaming 200,000 rows grows resident memory by no more than a few MiB beyond 1,000 rows")
    func streamingRowsIsFlat() async throws {
        try await withProbeServer { server, client in
            let db = "memory-rows"
            try await client.execute(CreateDatabaseOperation(name: db))
            let writer = BulkWriter<ProbeDocument>(
                client: client, database: db, options: .init(batchSize: 5_000, maximumBatchesInFlight: 2))
            for index in 0..<200_000 {
                try await writer.add(ProbeDocument(_id: String(format: "m%07d", index), n: index))
            }
            let written = try await writer.finish()
            #expect(written.allSatisfy { $0.rev != nil })
            let readings = try runProbe("rows", server: server, database: db)
            let rows = try #require(readings["rows"])
            let start = try #require(readings["rss_start"])
            let early = try #require(readings["rss_after_1000"])
            let late = try #require(readings["rss_end"])
            print(
                "Memory, streaming rows: \(start >> 10) KiB before, \(early >> 10) KiB after 1,000 rows, "
                    + "\(late >> 10) KiB after \(rows)")
            #expect(rows == 200_000)
            #expect(late - early < 8 << 20, "grew \((late - early) >> 20) MiB between 1,000 and 200,000 rows")
            // The response is about 30 MiB: a transport that read it ahead of the consumer (no
            // back-pressure) would hold most of it by the 1,000th row.
            #expect(early - start < 16 << 20, "grew \((early - start) >> 20) MiB by the 1,000th row")
        }
    }

    @Test("A 256 MiB attachment round-trips through files with peak memory well below its size")
    func largeAttachment() async throws {
        try await withProbeServer { server, client in
            try await client.execute(CreateDatabaseOperation(name: "memory-att"))
            let readings = try runProbe("attachment", server: server, database: "memory-att")
            let bytes = try #require(readings["bytes"])
            let peak = try #require(readings["peak_rss"])
            print("Memory, 256 MiB attachment through files: peak \(peak >> 20) MiB")
            #expect(bytes == 256 << 20)
            #expect(readings["same"] == 1, "the downloaded file equals the uploaded one")
            // The child's baseline (runtime, Foundation, the test library) is ~40 MiB of this.
            #expect(peak < 128 << 20, "peak resident memory \(peak >> 20) MiB for a 256 MiB attachment")
        }
    }

    @Test("A TestServer serves a 64 MiB stored attachment with memory bounded by a few chunks")
    func serverStreamsAStoredAttachment() async throws {
        #if canImport(FoundationNetworking)
            if E2EEnvironment.transportChoice == "urlsession" {
                print("Skipping a memory test: SWIFTCOUCH_TRANSPORT=urlsession cannot bound memory on Linux.")
                return
            }
        #endif
        // The child runs both the server and the client: the server's share is what grows while downloading.
        let readings = try runProbe("served-attachment", url: nil, database: "memory-served")
        let bytes = try #require(readings["bytes"])
        let before = try #require(readings["rss_before_download"])
        let peak = try #require(readings["peak_rss"])
        print("Memory, serving a 64 MiB stored attachment: \(before >> 20) MiB before, peak \(peak >> 20) MiB")
        #expect(bytes == 64 << 20)
        #expect(readings["same"] == 1, "the downloaded file equals the uploaded one")
        #expect(readings["content_length"] == 64 << 20, "sent with its Content-Length")
        // Read whole, the attachment alone would add 64 MiB (and its response copy as much again).
        #expect(peak - before < 24 << 20, "grew \((peak - before) >> 20) MiB while serving a 64 MiB attachment")
    }

    @Test("A TestServer writes a 32 MiB attachment upload to its file with memory bounded by a few chunks")
    func serverStreamsAnUploadIn() async throws {
        #if canImport(FoundationNetworking)
            if E2EEnvironment.transportChoice == "urlsession" {
                print("Skipping a memory test: SWIFTCOUCH_TRANSPORT=urlsession cannot bound memory on Linux.")
                return
            }
        #endif
        // The child runs both the server and the client (whose upload from a file is streamed): what grows while
        // uploading is the server's reading and storing of the body.
        let readings = try runProbe("served-upload", url: nil, database: "memory-upload")
        let before = try #require(readings["rss_before_upload"])
        let peak = try #require(readings["peak_rss"])
        print("Memory, a 32 MiB upload into a TestServer: \(before >> 20) MiB before, peak \(peak >> 20) MiB")
        #expect(readings["length"] == 32 << 20)
        #expect(readings["same_digest"] == 1, "the stored attachment's digest is the file's MD5")
        #expect(readings["same"] == 1, "the downloaded file equals the uploaded one")
        // Read whole (as before uploads were streamed), a 64 MiB upload grew the peak by 195 MiB: the body, the
        // database file's pending group, their copies.
        #expect(peak - before < 16 << 20, "grew \((peak - before) >> 20) MiB while receiving a 32 MiB upload")
    }
}

extension MemoryEndToEndTests {
    @Test(
        "A TestServer streams _all_docs?include_docs=true of 20,000 documents (20 MiB) with memory bounded by a batch")
    func serverStreamsAllDocsWithBodies() async throws {
        #if canImport(FoundationNetworking)
            if E2EEnvironment.transportChoice == "urlsession" {
                print("Skipping a memory test: SWIFTCOUCH_TRANSPORT=urlsession cannot bound memory on Linux.")
                return
            }
        #endif
        guard E2EEnvironment.shared.testServer != nil else {
            print("Skipping a memory test: it measures a TestServer of its own (COUCHDB_URL is set).")
            return
        }
        // The child runs both the server and the client (which streams the rows flat): what grows is the server's.
        // The child runs for a while: wait for it on a Dispatch thread, not on the cooperative pool.
        let readings = try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(
                    with: Result { try runProbe("served-rows", url: nil, database: "memory-served-rows") })
            }
        }
        let rows = try #require(readings["rows"])
        let before = try #require(readings["rss_before_read"])
        let peak = try #require(readings["peak_rss"])
        print(
            "Memory, serving _all_docs?include_docs of 20,000 1 KiB documents: \(before >> 20) MiB before, peak \(peak >> 20) MiB"
        )
        #expect(rows == 20_000)
        // Built whole, the answer held every body at once (as JSON values, then as text and bytes): well over 60 MiB.
        #expect(peak - before < 24 << 20, "grew \((peak - before) >> 20) MiB while serving 20 MiB of documents")
    }
}

/// A document of about 1 KiB.
struct LargeProbeDocument: Codable, Sendable {
    var _id: String?
    var n: Int
    var text: String
}

/// A TestServer of the child's own: 20,000 documents of about 1 KiB written, the peak mark reset, then
/// `_all_docs?include_docs=true` read as a row stream, so the peak shows what serving it costs the server.
private func probeServedRows(database db: String) async throws {
    let server = try TestServer.start()
    defer { server.stop() }
    var configuration = Configuration()
    E2EEnvironment.selectTransport(&configuration)
    let client = CouchDBClient(
        url: server.url, credentials: Credentials(username: server.adminName, password: server.adminPassword),
        configuration: configuration)
    defer { client.shutdown() }
    try await client.execute(CreateDatabaseOperation(name: db))
    let writer = BulkWriter<LargeProbeDocument>(
        client: client, database: db, options: .init(batchSize: 2_000, maximumBatchesInFlight: 1))
    let text = String(repeating: "0123456789abcdef", count: 62)
    for index in 0..<20_000 {
        try await writer.add(LargeProbeDocument(_id: String(format: "r%07d", index), n: index, text: text))
    }
    _ = try await writer.finish()
    var options = KeyRangeOptions()
    options.includeDocs = true
    // What the writes freed goes back to the system, so that an answer built whole would show as growth.
    trimMallocArenas()
    let before = residentBytes()
    resetPeak()
    var count: Int64 = 0
    for try await row in client.rows(
        AllDocsOperation<LargeProbeDocument>(database: db, options: options), bufferSize: 64)
    {
        if row.doc?.n != Int(count) { Issue.record("row \(count) out of order") }
        count += 1
    }
    report(["rows": count, "rss_before_read": before, "peak_rss": peakResidentBytes()])
}

/// The client side of the memory tests, run only in the child process.
@Suite(
    "Memory probe (child process only)",
    .enabled(if: ProcessInfo.processInfo.environment["SWIFTCOUCH_MEMORY_PROBE"] != nil))
struct MemoryProbe {
    @Test("probe")
    func probe() async throws {
        let environment = ProcessInfo.processInfo.environment
        let db = try #require(environment["PROBE_DB"])
        if environment["SWIFTCOUCH_MEMORY_PROBE"] == "served-attachment" {
            try await probeServedAttachment(database: db)
            return
        }
        if environment["SWIFTCOUCH_MEMORY_PROBE"] == "served-upload" {
            try await probeServedUpload(database: db)
            return
        }
        if environment["SWIFTCOUCH_MEMORY_PROBE"] == "served-rows" {
            try await probeServedRows(database: db)
            return
        }
        let url = try #require(environment["PROBE_URL"].flatMap(URL.init(string:)))
        var configuration = Configuration()
        E2EEnvironment.selectTransport(&configuration)
        let client = CouchDBClient(
            url: url, credentials: Credentials(username: "admin", password: "password"), configuration: configuration)
        defer { client.shutdown() }
        switch environment["SWIFTCOUCH_MEMORY_PROBE"] {
        case "rows":
            var options = KeyRangeOptions()
            options.includeDocs = true
            var count = 0
            var afterThousand: Int64 = 0
            let start = residentBytes()
            for try await row in client.rows(
                AllDocsOperation<ProbeDocument>(database: db, options: options), bufferSize: 64)
            {
                count += 1
                if row.doc?.n != count - 1 { Issue.record("row \(count) out of order") }
                if count == 1_000 { afterThousand = residentBytes() }
            }
            report([
                "rows": Int64(count), "rss_start": start, "rss_after_1000": afterThousand, "rss_end": residentBytes(),
            ])
        case "attachment":
            let size = 256 << 20
            let source = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(UUID().uuidString).bin")
            let target = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(UUID().uuidString).out")
            defer {
                try? FileManager.default.removeItem(at: source)
                try? FileManager.default.removeItem(at: target)
            }
            #expect(FileManager.default.createFile(atPath: source.path, contents: nil))
            let handle = try FileHandle(forWritingTo: source)
            var block = [UInt64](repeating: 0, count: 1 << 17)
            var generator = SystemRandomNumberGenerator()
            for _ in 0..<(size >> 20) {
                for index in block.indices { block[index] = generator.next() }
                try block.withUnsafeBytes { try handle.write(contentsOf: Data($0)) }
            }
            try handle.close()
            resetPeak()
            _ = try await client.upload(
                UploadAttachmentOperation(
                    database: db, documentID: "big", name: "blob.bin", revision: nil,
                    contentType: "application/octet-stream", body: try .file(source))
            ).value
            let download = try await client.download(
                GetAttachmentOperation(database: db, documentID: "big", name: "blob.bin"), to: target
            ).value
            let peak = peakResidentBytes()
            let same = try filesEqual(source, target)
            report(["bytes": download.length, "peak_rss": peak, "same": same ? 1 : 0])
        default:
            Issue.record("unknown probe")
        }
    }

    /// A TestServer of the child's own (its databases in files, in its private temporary directory): a 64 MiB
    /// attachment is uploaded, the peak mark reset, then the attachment downloaded to a file, so the peak shows what
    /// serving it costs the server (the client's download to a file is flat, see `largeAttachment`).
    private func probeServedAttachment(database db: String) async throws {
        let server = try TestServer.start()
        defer { server.stop() }
        var configuration = Configuration()
        E2EEnvironment.selectTransport(&configuration)
        let client = CouchDBClient(
            url: server.url, credentials: Credentials(username: server.adminName, password: server.adminPassword),
            configuration: configuration)
        defer { client.shutdown() }
        try await client.execute(CreateDatabaseOperation(name: db))
        let size = 64 << 20
        let source = try writeRandomFile(size: size)
        let target = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(UUID().uuidString).out")
        defer {
            try? FileManager.default.removeItem(at: source)
            try? FileManager.default.removeItem(at: target)
        }
        _ = try await client.upload(
            UploadAttachmentOperation(
                database: db, documentID: "big", name: "blob.bin", revision: nil,
                contentType: "application/octet-stream", body: try .file(source))
        ).value
        let head = try await client.execute(
            HeadAttachmentOperation(database: db, documentID: "big", name: "blob.bin"))
        let contentLength = Int64(head.value?.length ?? -1)
        let before = residentBytes()
        resetPeak()
        let download = try await client.download(
            GetAttachmentOperation(database: db, documentID: "big", name: "blob.bin"), to: target
        ).value
        let peak = peakResidentBytes()
        let same = try filesEqual(source, target)
        report([
            "bytes": download.length, "rss_before_download": before, "peak_rss": peak, "same": same ? 1 : 0,
            "content_length": contentLength,
        ])
    }
}

extension MemoryProbe {
    /// A TestServer of the child's own (its databases in files): the peak mark is reset, a 32 MiB attachment is
    /// uploaded from a file (the client streams it), so the peak shows what receiving and storing it costs the server.
    /// Then its digest and bytes are checked.
    fileprivate func probeServedUpload(database db: String) async throws {
        let server = try TestServer.start()
        defer { server.stop() }
        var configuration = Configuration()
        E2EEnvironment.selectTransport(&configuration)
        let client = CouchDBClient(
            url: server.url, credentials: Credentials(username: server.adminName, password: server.adminPassword),
            configuration: configuration)
        defer { client.shutdown() }
        try await client.execute(CreateDatabaseOperation(name: db))
        let size = 32 << 20
        let source = try writeRandomFile(size: size)
        let target = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(UUID().uuidString).out")
        defer {
            try? FileManager.default.removeItem(at: source)
            try? FileManager.default.removeItem(at: target)
        }
        let before = residentBytes()
        resetPeak()
        _ = try await client.upload(
            UploadAttachmentOperation(
                database: db, documentID: "big", name: "blob.bin", revision: nil,
                contentType: "application/octet-stream", body: try .file(source))
        ).value
        let peak = peakResidentBytes()
        let head = try await client.execute(HeadAttachmentOperation(database: db, documentID: "big", name: "blob.bin"))
        var md5 = Crypto.MD5()
        let handle = try FileHandle(forReadingFrom: source)
        while let piece = try handle.read(upToCount: 1 << 20), !piece.isEmpty { md5.update(piece) }
        try handle.close()
        let expected = "md5-" + md5.finish().base64EncodedString()
        _ = try await client.download(
            GetAttachmentOperation(database: db, documentID: "big", name: "blob.bin"), to: target
        ).value
        report([
            "rss_before_upload": before, "peak_rss": peak, "length": Int64(head.value?.length ?? -1),
            "same_digest": head.value?.digest == expected ? 1 : 0, "same": try filesEqual(source, target) ? 1 : 0,
        ])
    }
}

/// A file of `size` random bytes in the temporary directory.
private func writeRandomFile(size: Int) throws -> URL {
    let source = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(UUID().uuidString).bin")
    _ = FileManager.default.createFile(atPath: source.path, contents: nil)
    let handle = try FileHandle(forWritingTo: source)
    defer { try? handle.close() }
    var block = [UInt64](repeating: 0, count: 1 << 17)
    var generator = SystemRandomNumberGenerator()
    for _ in 0..<(size >> 20) {
        for index in block.indices { block[index] = generator.next() }
        try block.withUnsafeBytes { try handle.write(contentsOf: Data($0)) }
    }
    return source
}

struct ProbeDocument: Codable, Sendable {
    var _id: String?
    var n: Int
}

/// Starts a TestServer of its own and a client for it, unless the suite runs against COUCHDB_URL
/// (the probe needs to know the server's admin password and to load it heavily).
func withProbeServer(_ body: (TestServer, CouchDBClient) async throws -> Void) async throws {
    guard E2EEnvironment.shared.testServer != nil else {
        print("Skipping a memory test: it loads a TestServer of its own (COUCHDB_URL is set).")
        return
    }
    #if canImport(FoundationNetworking)
        if E2EEnvironment.transportChoice == "urlsession" {
            // FoundationNetworking reads a response ahead of its delegate and cannot be paused in
            // time, so URLSession streams on Linux do not hold memory flat (README, Limitations).
            print("Skipping a memory test: SWIFTCOUCH_TRANSPORT=urlsession cannot bound memory on Linux.")
            return
        }
    #endif
    let server = try TestServer.start()
    defer { server.stop() }
    var configuration = Configuration()
    configuration.maximumConcurrentOperations = 4
    let client = CouchDBClient(
        url: server.url, credentials: Credentials(username: server.adminName, password: server.adminPassword),
        configuration: configuration)
    defer { client.shutdown() }
    try await body(server, client)
}

/// Runs this test binary again, filtered to the probe, and returns what it printed.
func runProbe(_ kind: String, server: TestServer, database: String) throws -> [String: Int64] {
    try runProbe(kind, url: server.url, database: database)
}

/// Runs this test binary again, filtered to the probe, with the server at `url` (nil: the probe starts its own).
func runProbe(_ kind: String, url: URL?, database: String) throws -> [String: Int64] {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
    process.arguments = ["--testing-library", "swift-testing", "--filter", "MemoryProbe"]
    var environment = ProcessInfo.processInfo.environment
    environment["SWIFTCOUCH_MEMORY_PROBE"] = kind
    environment["PROBE_URL"] = url?.absoluteString
    environment["PROBE_DB"] = database
    process.environment = environment
    let output = Pipe()
    process.standardOutput = output
    process.standardError = output
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let text = String(decoding: data, as: UTF8.self)
    var readings: [String: Int64] = [:]
    for line in text.split(separator: "\n") where line.hasPrefix("PROBE ") {
        for pair in line.dropFirst(6).split(separator: " ") {
            let parts = pair.split(separator: "=")
            if parts.count == 2, let value = Int64(parts[1]) { readings[String(parts[0])] = value }
        }
    }
    if readings.isEmpty || process.terminationStatus != 0 {
        let saved = FileManager.default.temporaryDirectory.appendingPathComponent(
            "swiftcouch-memory-probe-\(UUID().uuidString).log")
        try? data.write(to: saved)
        Issue.record(
            "The memory probe failed (exit \(process.terminationStatus)); full output in \(saved.path):\n\(text.prefix(6_000))"
        )
    }
    return readings
}

func report(_ values: [String: Int64]) {
    print("PROBE " + values.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))
}

/// Gives the memory malloc holds free back to the system (glibc's `malloc_trim`, looked up at run time), so that a
/// reading taken next counts what is in use.
func trimMallocArenas() {
    #if os(Linux)
        typealias Trim = @convention(c) (Int) -> Int32
        if let symbol = dlsym(dlopen(nil, RTLD_NOW), "malloc_trim") {
            _ = unsafeBitCast(symbol, to: Trim.self)(0)
        }
    #endif
}

/// Current resident memory (VmRSS), in bytes.
func residentBytes() -> Int64 { procStatus("VmRSS:") }

/// Peak resident memory since the last reset (VmHWM), in bytes.
func peakResidentBytes() -> Int64 { procStatus("VmHWM:") }

/// Resets the peak-RSS mark (Linux).
func resetPeak() {
    try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
}

private func procStatus(_ field: String) -> Int64 {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field) }),
        let kilobytes = line.split(separator: " ").compactMap({ Int64($0) }).first
    else { return 0 }
    return kilobytes * 1024
}

private func filesEqual(_ a: URL, _ b: URL) throws -> Bool {
    let left = try FileHandle(forReadingFrom: a)
    let right = try FileHandle(forReadingFrom: b)
    defer {
        try? left.close()
        try? right.close()
    }
    while true {
        let x = try left.read(upToCount: 1 << 20) ?? Data()
        let y = try right.read(upToCount: 1 << 20) ?? Data()
        if x != y { return false }
        if x.isEmpty { return true }
    }
}
