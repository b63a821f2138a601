import CouchTestServer
import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchSync
import SwiftCouchTestSupport
import Testing

/// Replication of one large attachment, with the replicator's memory measured in a child process (`ChildProbe`): the
/// parent holds the remote databases (a TestServer of its own, or the CouchDB of `COUCHDB_URL`) and writes the
/// attachment; the child runs only the replicator (and, for a local side, its `LocalDatabase`, which lives in the
/// app's process), so its peak resident memory is what replicating costs. The bytes on the target are compared by
/// their digest: the target's stub digest is the source's (a target checks the MD5 of the bytes it receives against
/// the digest sent, `content_md5_mismatch`, as CouchDB does), and the source's is the file's.
///
/// One probe at a time (`.serialized`): each keeps a core busy for its length (the server's digests and the copies of
/// a debug build), and four at once on a small machine starve the tests that bound a wait by the wall clock.
@Suite("Replication: large attachments in flat memory", .serialized, .heavyLoad)
struct LargeAttachmentMemoryTests {
    static let size = 256 << 20

    @Test("A 256 MiB random attachment replicates remote to local with peak memory well below its size")
    func remoteToLocal() async throws {
        try await withRemoteProbeDatabases("r2l") { server, source, _ in
            try await upload(
                { try writeRandomFile(size: Self.size) }, to: source, contentType: "application/octet-stream")
            let digest = try #require(try await attachmentStub(source)?["digest"]?.stringValue)
            let readings = try await runReplicationProbe(
                "remote-to-local", server, source: source, extra: ["PROBE_DIGEST": digest])
            expectFlat(readings, "remote to local, 256 MiB random", size: Self.size)
            #expect(readings["same"] == 1, "the local attachment's digest is the source's")
        }
    }

    @Test("A 256 MiB random attachment replicates local to remote with peak memory well below its size")
    func localToRemote() async throws {
        try await withRemoteProbeDatabases("l2r") { server, _, target in
            let file = try await offThePool { try writeRandomFile(size: Self.size) }
            defer { try? FileManager.default.removeItem(at: file) }
            let readings = try await runReplicationProbe(
                "local-to-remote", server, target: target, extra: ["PROBE_FILE": file.path])
            expectFlat(readings, "local to remote, 256 MiB random", size: Self.size)
            let digest = try await attachmentStub(target)?["digest"]?.stringValue
            let expected = try await offThePool { "md5-" + (try md5Base64(of: file)) }
            #expect(digest == expected, "the target's attachment is the file")
        }
    }

    @Test("A 256 MiB random attachment replicates remote to remote with peak memory well below its size")
    func remoteToRemote() async throws {
        try await withRemoteProbeDatabases("r2r") { server, source, target in
            try await upload(
                { try writeRandomFile(size: Self.size) }, to: source, contentType: "application/octet-stream")
            let readings = try await runReplicationProbe("remote-to-remote", server, source: source, target: target)
            expectFlat(readings, "remote to remote, 256 MiB random", size: Self.size)
            let (original, copied) = (try await attachmentStub(source), try await attachmentStub(target))
            #expect(copied?["digest"] != nil && copied?["digest"] == original?["digest"], "the target has the bytes")
        }
    }

    /// Text, which CouchDB and the TestServer store gzip-encoded: copied encoded (its digest is the encoded bytes'
    /// MD5). 64 MiB of random hexadecimal text, which gzip halves: the encoded attachment is still 32 MiB, and the
    /// server's gzip of 256 MiB would make the test take minutes.
    @Test("A 64 MiB text attachment stored gzip-encoded replicates remote to remote streamed, not held whole")
    func gzipStoredRemoteToRemote() async throws {
        try await withRemoteProbeDatabases("gz") { server, source, target in
            try await upload({ try writeRandomTextFile(size: 64 << 20) }, to: source, contentType: "text/plain")
            let stored = try await attachmentStub(source)
            #expect(stored?["encoding"] == "gzip", "the source stores the text gzip-encoded")
            let readings = try await runReplicationProbe("remote-to-remote", server, source: source, target: target)
            expectFlat(readings, "remote to remote, 64 MiB gzip-stored text", size: 64 << 20)
            let copied = try await attachmentStub(target)
            #expect(copied?["encoding"] == "gzip", "copied encoded")
            #expect(copied?["digest"] != nil && copied?["digest"] == stored?["digest"], "with the source's digest")
            #expect(copied?["length"] == .int(64 << 20))
        }
    }
}

/// The growth allowed while replicating: a few 1 MiB chunks, buffers and the batch's JSON. An attachment held whole
/// (or one of its encoded forms) is well above it.
private let allowedGrowth: Int64 = 24 << 20

private func expectFlat(
    _ readings: [String: Int64], _ what: String, size: Int, sourceLocation: SourceLocation = #_sourceLocation
) {
    guard let before = readings["rss_before"], let peak = readings["peak_rss"] else {
        Issue.record("the probe reported no memory readings", sourceLocation: sourceLocation)
        return
    }
    print(
        "Memory, replicating \(what): \(before >> 20) MiB before, peak \(peak >> 20) MiB, "
            + "\(readings["milliseconds"] ?? -1) ms")
    #expect(readings["written"] == 1, "one document written", sourceLocation: sourceLocation)
    #expect(
        peak - before < allowedGrowth, "grew \((peak - before) >> 20) MiB replicating \(size >> 20) MiB",
        sourceLocation: sourceLocation)
    #expect(peak < 128 << 20, "peak \(peak >> 20) MiB replicating \(size >> 20) MiB", sourceLocation: sourceLocation)
}

/// The remote side of a probe: a server (a TestServer of the test's own, or the CouchDB of `COUCHDB_URL`) with an
/// admin client.
struct ProbeServer: Sendable {
    let url: URL
    let credentials: Credentials
    let client: CouchDBClient
}

/// Creates a source and a target database on a server for the probe (a TestServer of its own, or the CouchDB of
/// `COUCHDB_URL`), runs `body`, then deletes them.
private func withRemoteProbeDatabases(
    _ purpose: String, _ body: (ProbeServer, Endpoint, Endpoint) async throws -> Void
) async throws {
    #if canImport(FoundationNetworking)
        if CouchTestEnvironment.transportChoice == "urlsession" {
            print("Skipping a memory test: SWIFTCOUCH_TRANSPORT=urlsession cannot bound memory on Linux.")
            return
        }
    #endif
    if SyncEnvironment.nodes > 1 {
        // The probe's TestServer is a single node of its own in any mode: the cluster-mode pass would repeat the
        // same minutes of work for the same figures.
        print("Skipping a memory test in cluster mode: it measures the same single node as the first pass.")
        return
    }
    if SyncEnvironment.isRealCouchDB {
        let environment = SyncEnvironment.shared
        let server = ProbeServer(
            url: environment.url, credentials: environment.credentials, client: environment.client())
        try await withRemoteDatabases(purpose, count: 2, client: server.client) { try await body(server, $0[0], $0[1]) }
        return
    }
    // A single node of its own, whatever mode the suite runs in: the child's figures are its own either way, and a
    // cluster would store the attachment three times.
    try await withPrivateTestServer(for: "a memory test") { testServer, client in
        let credentials = testServer.adminCredentials
        let server = ProbeServer(url: testServer.url, credentials: credentials, client: client)
        try await withRemoteDatabases(purpose, count: 2, client: client) { try await body(server, $0[0], $0[1]) }
    }
}

/// Runs ``ReplicationMemoryProbe`` in a child process.
private func runReplicationProbe(
    _ workload: String, _ server: ProbeServer, source: Endpoint? = nil, target: Endpoint? = nil,
    extra: [String: String] = [:]
) async throws -> [String: Int64] {
    var environment = extra
    environment["PROBE_URL"] = server.url.absoluteString
    environment["PROBE_USER"] = server.credentials.username
    environment["PROBE_PASSWORD"] = server.credentials.password
    environment["PROBE_SOURCE"] = source?.database
    environment["PROBE_TARGET"] = target?.database
    return try await ChildProbe.run(ReplicationMemoryProbe.self, workload: workload, environment: environment)
}

/// Uploads the file `make` writes as attachment `blob` of document `big` (streamed from the file), then removes it.
/// The file is written on a Dispatch thread (in a debug build, 256 MiB take seconds of CPU the cooperative pool needs).
private func upload(_ make: @escaping @Sendable () throws -> URL, to endpoint: Endpoint, contentType: String)
    async throws
{
    let file = try await offThePool(make)
    defer { try? FileManager.default.removeItem(at: file) }
    _ = try await endpoint.client.upload(
        UploadAttachmentOperation(
            database: endpoint.database, documentID: "big", name: "blob", revision: nil, contentType: contentType,
            body: try .file(file))
    ).value
}

/// The stub of attachment `blob` of document `big`, with its encoding (`att_encoding_info`).
func attachmentStub(_ endpoint: Endpoint) async throws -> JSONValue? {
    try await endpoint.json(.get, ["big"], query: [("att_encoding_info", "true")])["_attachments"]?["blob"]
}

/// The replicator's side, run only in the child process: replicates `PROBE_SOURCE` (or a local database) to
/// `PROBE_TARGET` (or a local database) on the server at `PROBE_URL`, with the peak mark reset just before.
@Suite("Replication memory probe (child process only)", .enabled(if: ChildProbe.isChild))
struct ReplicationMemoryProbe {
    @Test("probe")
    func probe() async throws {
        let url = try #require(ChildProbe.value("PROBE_URL").flatMap(URL.init(string:)))
        let client = CouchDBClient(
            url: url,
            credentials: Credentials(
                username: ChildProbe.value("PROBE_USER") ?? "", password: ChildProbe.value("PROBE_PASSWORD") ?? ""))
        defer { client.shutdown() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let local = try await LocalDatabase.open(at: directory, name: "probe")
        defer { local.close() }
        var readings: [String: Int64] = [:]
        switch ChildProbe.workload {
        case "remote-to-local":
            let source = SyncEndpoint.remote(client.database(try #require(ChildProbe.value("PROBE_SOURCE"))))
            readings = try await measuredReplication(source, .local(local))
            let digest = try await attachmentStub(Endpoint(local))?["digest"]?.stringValue
            readings["same"] = digest != nil && digest == ChildProbe.value("PROBE_DIGEST") ? 1 : 0
        case "local-to-remote":
            let file = URL(fileURLWithPath: try #require(ChildProbe.value("PROBE_FILE")))
            _ = try await local.uploadAttachment("blob", of: "big", from: file, contentType: "application/octet-stream")
            let target = SyncEndpoint.remote(client.database(try #require(ChildProbe.value("PROBE_TARGET"))))
            readings = try await measuredReplication(.local(local), target)
        case "remote-to-remote":
            let source = SyncEndpoint.remote(client.database(try #require(ChildProbe.value("PROBE_SOURCE"))))
            let target = SyncEndpoint.remote(client.database(try #require(ChildProbe.value("PROBE_TARGET"))))
            readings = try await measuredReplication(source, target)
        default:
            Issue.record("unknown probe \(ChildProbe.workload ?? "")")
        }
        ChildProbe.report(readings)
    }

    /// Replicates with the peak mark reset just before (what the writes freed given back first).
    private func measuredReplication(_ source: SyncEndpoint, _ target: SyncEndpoint) async throws -> [String: Int64] {
        trimMallocArenas()
        let before = residentBytes()
        resetPeak()
        let started = Date()
        let result = try await replicate(source, target, deadline: 300)
        let peak = peakResidentBytes()
        return [
            "rss_before": before, "peak_rss": peak, "written": Int64(result.summary.docsWritten),
            "milliseconds": Int64(Date().timeIntervalSince(started) * 1000),
        ]
    }
}
