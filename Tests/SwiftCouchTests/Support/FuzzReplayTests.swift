import CouchGzip
import Foundation
import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

/// The HTTP response fuzz target's inputs (`Fuzz/`, see ARCHITECTURE.md "Fuzzing") replayed through its entry
/// point in the ordinary test build: the seeds, which must parse to their end, and every input the fuzzer found a
/// crash with (`Fuzz/regressions/http`), which must now end without one.
@Suite(.ownThreads) struct FuzzReplayTests {
    static let fuzz = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fuzz")

    static func files(_ folder: String) -> [URL] {
        let directory = fuzz.appendingPathComponent(folder)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return names.filter { !$0.hasPrefix(".") && !$0.hasPrefix("README") }.sorted()
            .map { directory.appendingPathComponent($0) }
    }

    static func replay(_ file: URL) throws -> FuzzEntryPoints.Reached {
        try Data(contentsOf: file).withUnsafeBytes { FuzzEntryPoints.httpResponse($0) }
    }

    /// Real CouchDB answers (from the transcripts), cut into reads of every size the control byte allows: each
    /// parses to its end, its rows are cut and decoded. A seed that stopped parsing would make the fuzzer start
    /// from nothing.
    @Test func seedsParseToTheirEnd() throws {
        let seeds = Self.files("corpus/http")
        #expect(seeds.count >= 30)
        var rows = 0
        for seed in seeds {
            let reached = try Self.replay(seed)
            #expect(reached.error == nil, "\(seed.lastPathComponent): \(reached.error ?? "")")
            #expect(reached.framingError == nil, "\(seed.lastPathComponent): \(reached.framingError ?? "")")
            #expect(reached.heads >= 1, "\(seed.lastPathComponent)")
            rows += reached.rows
        }
        #expect(rows > 20)
    }

    /// The same bytes cut into reads of 1 to 60 bytes reach the same end as read all at once.
    @Test func readSizesDoNotChangeTheOutcome() throws {
        for seed in Self.files("corpus/http").prefix(12) {
            var bytes = try [UInt8](Data(contentsOf: seed))
            bytes[0] &= 0xF0
            let whole = bytes.withUnsafeBytes { FuzzEntryPoints.httpResponse($0) }
            for size: UInt8 in [1, 2, 7, 15] {
                bytes[0] = (bytes[0] & 0xF0) | size
                let cut = bytes.withUnsafeBytes { FuzzEntryPoints.httpResponse($0) }
                #expect(cut == whole, "\(seed.lastPathComponent), reads of \(size * 4)")
            }
        }
    }

    /// Inputs the fuzzer found a failure with; each ends (with an error or without) instead of trapping.
    @Test func regressionsEndWithoutATrap() throws {
        for file in Self.files("regressions/http") {
            _ = try Self.replay(file)
        }
    }

    /// A gzip bomb in an answer stops at the client's decompression-ratio limit, as it inflates.
    @Test func gzipBombStopsAtTheRatioLimit() throws {
        let bomb = Gzip.compress(Data(repeating: 0x20, count: 8 << 20), level: .best)
        let head = "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: \(bomb.count)\r\n\r\n"
        let input = Data([0x0F]) + Data(head.utf8) + bomb  // reads of 60 bytes
        let reached = input.withUnsafeBytes { FuzzEntryPoints.httpResponse($0) }
        #expect(reached.error == "ratio")
        #expect(reached.bodyBytes > 1 << 20)
        #expect(reached.bodyBytes < 2 << 20)
    }
}
