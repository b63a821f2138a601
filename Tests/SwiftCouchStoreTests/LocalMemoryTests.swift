import CouchStore
import Foundation
import SwiftCouch
import SwiftCouchStore
import Testing

/// Memory of a local database's large attachment writes, measured in a child process (tests run in parallel in one
/// process, so they may not pollute the figures): the parent runs this test binary again filtered to
/// ``LocalMemoryProbe`` with `SWIFTCOUCHSTORE_MEMORY_PROBE` set; the probe prints its resident-memory readings.
@Suite("LocalDatabase: large attachments in bounded memory")
struct LocalMemoryTests {
    @Test("Uploading a 32 MiB file into a local database grows memory by a few chunks, not the file's size")
    func uploadFromAFile() throws {
        let readings = try runLocalProbe("upload")
        let before = try #require(readings["rss_before"])
        let peak = try #require(readings["peak_rss"])
        print("Memory, a 32 MiB local upload from a file: \(before >> 20) MiB before, peak \(peak >> 20) MiB")
        #expect(readings["same"] == 1, "the attachment reads back as the file")
        #expect(readings["same_digest"] == 1, "its digest is the file's MD5")
        // Read whole (as before uploads were streamed), a 64 MiB file grew the peak by 195 MiB: the body and its copies.
        #expect(peak - before < 16 << 20, "grew \((peak - before) >> 20) MiB while uploading 32 MiB")
    }

    @Test("Compacting a local database holding a 32 MiB attachment grows memory by a few chunks")
    func compaction() throws {
        let readings = try runLocalProbe("compact")
        let before = try #require(readings["rss_before"])
        let peak = try #require(readings["peak_rss"])
        print("Memory, compacting a 32 MiB attachment: \(before >> 20) MiB before, peak \(peak >> 20) MiB")
        #expect(readings["same"] == 1, "the attachment reads back as the file after compaction")
        #expect(readings["shrunk"] == 1, "the old revision's attachment was dropped")
        // Copied whole (as before), a 64 MiB attachment grew the peak by 124 MiB.
        #expect(peak - before < 16 << 20, "grew \((peak - before) >> 20) MiB while compacting")
    }
}

/// The measured side, run only in the child process.
@Suite(
    "LocalDatabase memory probe (child process only)",
    .enabled(if: ProcessInfo.processInfo.environment["SWIFTCOUCHSTORE_MEMORY_PROBE"] != nil))
struct LocalMemoryProbe {
    @Test("probe")
    func probe() async throws {
        let kind = ProcessInfo.processInfo.environment["SWIFTCOUCHSTORE_MEMORY_PROBE"]
        let directory = LocalStoreFixture.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = try randomFile(size: 32 << 20)
        let target = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(UUID().uuidString).out")
        defer {
            try? FileManager.default.removeItem(at: source)
            try? FileManager.default.removeItem(at: target)
        }
        let db = try await LocalDatabase.open(at: directory, name: "files")
        defer { db.close() }
        _ = try await db.info()
        var readings: [String: Int64] = [:]
        var revision: String?
        if kind == "compact" {
            // A first revision with other bytes, which compaction drops.
            let old = try randomFile(size: 8 << 20)
            defer { try? FileManager.default.removeItem(at: old) }
            revision =
                try await db.uploadAttachment("big.bin", of: "big", from: old, contentType: "application/octet-stream")
                .rev
        }
        var before = residentBytes()
        resetPeak()
        _ = try await db.uploadAttachment(
            "big.bin", of: "big", from: source, contentType: "application/octet-stream", revision: revision)
        var peak = peakResidentBytes()
        if kind == "compact" {
            let size = databaseFilesSize(directory)
            before = residentBytes()
            resetPeak()
            try await db.compact()
            peak = peakResidentBytes()
            readings["shrunk"] = databaseFilesSize(directory) < size - (4 << 20) ? 1 : 0
        }
        let info = try await db.attachmentInfo("big.bin", of: "big")
        readings["same_digest"] = try info == "md5-" + md5Base64(of: source) ? 1 : 0
        _ = try await db.downloadAttachment("big.bin", of: "big", to: target)
        readings["same"] = try sameBytes(source, target) ? 1 : 0
        readings["rss_before"] = before
        readings["peak_rss"] = peak
        print("PROBE " + readings.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))
    }
}

extension LocalDatabase {
    /// The digest of an attachment, from its document's stub.
    fileprivate func attachmentInfo(_ name: String, of id: String) async throws -> String? {
        struct Stubbed: Codable, Sendable {
            struct Stub: Codable, Sendable { var digest: String? }
            var _attachments: [String: Stub]?
        }
        return try await get(id, as: Stubbed.self)._attachments?[name]?.digest
    }
}

/// Runs this test binary again, filtered to the probe, and returns what it printed.
private func runLocalProbe(_ kind: String) throws -> [String: Int64] {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
    process.arguments = ["--testing-library", "swift-testing", "--filter", "LocalMemoryProbe"]
    var environment = ProcessInfo.processInfo.environment
    environment["SWIFTCOUCHSTORE_MEMORY_PROBE"] = kind
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
        Issue.record("The memory probe failed (exit \(process.terminationStatus)):\n\(text.suffix(6_000))")
    }
    return readings
}

private func randomFile(size: Int) throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(UUID().uuidString).bin")
    _ = FileManager.default.createFile(atPath: url.path, contents: nil)
    let handle = try FileHandle(forWritingTo: url)
    defer { try? handle.close() }
    var block = [UInt64](repeating: 0, count: 1 << 17)
    var generator = SystemRandomNumberGenerator()
    for _ in 0..<(size >> 20) {
        for index in block.indices { block[index] = generator.next() }
        try block.withUnsafeBytes { try handle.write(contentsOf: Data($0)) }
    }
    return url
}

private func databaseFilesSize(_ directory: URL) -> Int {
    let files = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil)?.compactMap {
        $0 as? URL
    }
    return (files ?? []).filter { $0.pathExtension == "couch" }.reduce(0) { total, url in
        total + ((try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int) ?? 0)
    }
}

private func sameBytes(_ a: URL, _ b: URL) throws -> Bool {
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

/// The MD5 of a file, base64 (an attachment's digest), read a piece at a time.
private func md5Base64(of url: URL) throws -> String {
    var md5 = Crypto.MD5()
    let handle = try FileHandle(forReadingFrom: url)
    defer { try? handle.close() }
    while let piece = try handle.read(upToCount: 1 << 20), !piece.isEmpty { md5.update(piece) }
    return md5.finish().base64EncodedString()
}

private func residentBytes() -> Int64 { procStatus("VmRSS:") }

private func peakResidentBytes() -> Int64 { procStatus("VmHWM:") }

private func resetPeak() {
    try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
}

private func procStatus(_ field: String) -> Int64 {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field) }),
        let kilobytes = line.split(separator: " ").compactMap({ Int64($0) }).first
    else { return 0 }
    return kilobytes * 1024
}
