import CouchStore
import Foundation
import SwiftCouch
import SwiftCouchStore
import SwiftCouchTestSupport
import Testing

/// Memory of a local database's large attachment writes, measured in a child process (tests run in parallel in one
/// process, so they may not pollute the figures): the parent runs this test binary again filtered to
/// ``LocalMemoryProbe`` with `SWIFTCOUCH_PROBE` naming the workload (`ChildProbe`); the probe prints its
/// resident-memory readings.
@Suite("LocalDatabase: large attachments in bounded memory")
struct LocalMemoryTests {
    @Test("Uploading a 32 MiB file into a local database grows memory by a few chunks, not the file's size")
    func uploadFromAFile() async throws {
        let readings = try await ChildProbe.run(LocalMemoryProbe.self, workload: "upload")
        let before = try #require(readings["rss_before"])
        let peak = try #require(readings["peak_rss"])
        print("Memory, a 32 MiB local upload from a file: \(before >> 20) MiB before, peak \(peak >> 20) MiB")
        #expect(readings["same"] == 1, "the attachment reads back as the file")
        #expect(readings["same_digest"] == 1, "its digest is the file's MD5")
        // Read whole (as before uploads were streamed), a 64 MiB file grew the peak by 195 MiB: the body and its copies.
        #expect(peak - before < 16 << 20, "grew \((peak - before) >> 20) MiB while uploading 32 MiB")
    }

    @Test("Compacting a local database holding a 32 MiB attachment grows memory by a few chunks")
    func compaction() async throws {
        let readings = try await ChildProbe.run(LocalMemoryProbe.self, workload: "compact")
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
    .enabled(if: ChildProbe.isChild))
struct LocalMemoryProbe {
    @Test("probe")
    func probe() async throws {
        let kind = ChildProbe.workload
        let directory = LocalStoreFixture.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = try writeRandomFile(size: 32 << 20)
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
            let old = try writeRandomFile(size: 8 << 20)
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
        readings["same"] = try filesEqual(source, target) ? 1 : 0
        readings["rss_before"] = before
        readings["peak_rss"] = peak
        ChildProbe.report(readings)
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

private func databaseFilesSize(_ directory: URL) -> Int {
    let files = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil)?.compactMap {
        $0 as? URL
    }
    return (files ?? []).filter { $0.pathExtension == "couch" }.reduce(0) { total, url in
        total + ((try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int) ?? 0)
    }
}
