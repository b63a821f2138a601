import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import Testing

/// Memory is measured in a child process that runs only the client (or, for what serving costs, a TestServer of
/// its own too): tests run in parallel in one process, so they may not pollute the figures. The
/// parent starts a TestServer, prepares the data, then runs this same test binary filtered to
/// ``MemoryProbe`` with `SWIFTCOUCH_PROBE` naming the workload (`ChildProbe`); the probe prints its resident-memory
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
            let readings = try await runProbe("rows", server: server, database: db)
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
            let readings = try await runProbe("attachment", server: server, database: "memory-att")
            let bytes = try #require(readings["bytes"])
            let peak = try #require(readings["peak_rss"])
            print("Memory, 256 MiB attachment through files: peak \(peak >> 20) MiB")
            #expect(bytes == 256 << 20)
            #expect(readings["same"] == 1, "the downloaded file equals the uploaded one")
            // The child's baseline (runtime, Foundation, the test library) is ~40 MiB of this.
            #expect(peak < 128 << 20, "peak resident memory \(peak >> 20) MiB for a 256 MiB attachment")
        }
    }

    @Test("A TestServer serves a 64 MiB stored attachment with memory bounded by the chunks one write gathers")
    func serverStreamsAStoredAttachment() async throws {
        #if canImport(FoundationNetworking)
            if E2EEnvironment.transportChoice == "urlsession" {
                print("Skipping a memory test: SWIFTCOUCH_TRANSPORT=urlsession cannot bound memory on Linux.")
                return
            }
        #endif
        // The child runs both the server and the client: the server's share is what grows while downloading.
        let readings = try await runProbe("served-attachment", url: nil, database: "memory-served")
        let bytes = try #require(readings["bytes"])
        let before = try #require(readings["rss_before_download"])
        let peak = try #require(readings["peak_rss"])
        print("Memory, serving a 64 MiB stored attachment: \(before >> 20) MiB before, peak \(peak >> 20) MiB")
        #expect(bytes == 64 << 20)
        #expect(readings["same"] == 1, "the downloaded file equals the uploaded one")
        #expect(readings["content_length"] == 64 << 20, "sent with its Content-Length")
        // Read whole, the attachment alone would add 64 MiB (and its response copy as much again). Streamed, the
        // server holds at most the 16 chunks it gathers for one `sendmsg` (SocketChunkWriter.preferredWriteSize),
        // the client its buffers.
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
        let readings = try await runProbe("served-upload", url: nil, database: "memory-upload")
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
    @Test("A probe child that fails is reported as an issue, so a memory test cannot pass on a probe that never ran")
    func aFailingProbeIsReported() async throws {
        var readings: [String: Int64] = ["unset": 1]
        let workload = "no-such-workload-\(UUID().uuidString)"
        await withKnownIssue {
            readings = try await runProbe(workload, url: URL(string: "http://127.0.0.1:9"), database: "none")
        }
        #expect(readings.isEmpty)
        // The child's whole output was saved for the reader of the issue; this run's own log is removed, since the
        // failure is the test's point.
        let temporary = FileManager.default.temporaryDirectory
        let saved = try FileManager.default.contentsOfDirectory(atPath: temporary.path).filter {
            $0.hasPrefix(ChildProbe.savedLogPrefix(workload))
        }
        #expect(saved.count == 1, "the failed probe's output is saved once")
        for name in saved {
            let log = temporary.appendingPathComponent(name)
            #expect(String(decoding: try Data(contentsOf: log), as: UTF8.self).contains("unknown probe"))
            try FileManager.default.removeItem(at: log)
        }
    }

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
        let readings = try await runProbe("served-rows", url: nil, database: "memory-served-rows")
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
    let client = server.adminClient(configuration: configuration)
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
    ChildProbe.report(["rows": count, "rss_before_read": before, "peak_rss": peakResidentBytes()])
}

/// The client side of the memory tests, run only in the child process.
@Suite(
    "Memory probe (child process only)",
    .enabled(if: ChildProbe.isChild))
struct MemoryProbe {
    @Test("probe")
    func probe() async throws {
        let db = try #require(ChildProbe.value("PROBE_DB"))
        if ChildProbe.workload == "served-attachment" {
            try await probeServedAttachment(database: db)
            return
        }
        if ChildProbe.workload == "served-upload" {
            try await probeServedUpload(database: db)
            return
        }
        if ChildProbe.workload == "served-rows" {
            try await probeServedRows(database: db)
            return
        }
        let url = try #require(ChildProbe.value("PROBE_URL").flatMap(URL.init(string:)))
        var configuration = Configuration()
        E2EEnvironment.selectTransport(&configuration)
        let client = CouchDBClient(
            url: url, credentials: Credentials(username: "admin", password: "password"), configuration: configuration)
        defer { client.shutdown() }
        switch ChildProbe.workload {
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
            ChildProbe.report([
                "rows": Int64(count), "rss_start": start, "rss_after_1000": afterThousand, "rss_end": residentBytes(),
            ])
        case "attachment":
            let size = 256 << 20
            let source = try writeRandomFile(size: size)
            let target = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(UUID().uuidString).out")
            defer {
                try? FileManager.default.removeItem(at: source)
                try? FileManager.default.removeItem(at: target)
            }
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
            ChildProbe.report(["bytes": download.length, "peak_rss": peak, "same": same ? 1 : 0])
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
        let client = server.adminClient(configuration: configuration)
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
        ChildProbe.report([
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
        let client = server.adminClient(configuration: configuration)
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
        let expected = "md5-" + (try md5Base64(of: source))
        _ = try await client.download(
            GetAttachmentOperation(database: db, documentID: "big", name: "blob.bin"), to: target
        ).value
        ChildProbe.report([
            "rss_before_upload": before, "peak_rss": peak, "length": Int64(head.value?.length ?? -1),
            "same_digest": head.value?.digest == expected ? 1 : 0, "same": try filesEqual(source, target) ? 1 : 0,
        ])
    }
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
    let client = server.adminClient(configuration: configuration)
    defer { client.shutdown() }
    try await body(server, client)
}

/// Runs ``MemoryProbe`` in a child process with the server at `server`'s URL.
func runProbe(_ kind: String, server: TestServer, database: String) async throws -> [String: Int64] {
    try await runProbe(kind, url: server.url, database: database)
}

/// Runs ``MemoryProbe`` in a child process with the server at `url` (nil: the probe starts its own).
func runProbe(_ kind: String, url: URL?, database: String) async throws -> [String: Int64] {
    var environment = ["PROBE_DB": database]
    environment["PROBE_URL"] = url?.absoluteString
    return try await ChildProbe.run(MemoryProbe.self, workload: kind, environment: environment)
}
