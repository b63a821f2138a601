import CouchStore
import Foundation
import ProcessSpawn
import SwiftCouch
import Testing

/// Memory measured in a child process: tests run in parallel in one process, so their figures would pollute one
/// another. A test calls ``run(_:workload:environment:deadline:)``, which launches this same test binary filtered to
/// one probe suite, with `SWIFTCOUCH_PROBE` naming the workload; the probe suite (enabled only when
/// ``workload`` is set) does the work, prints its readings with ``report(_:)``, and the parent asserts on them.
///
/// ```swift
/// @Suite("Memory probe (child process only)", .enabled(if: ChildProbe.isChild))
/// struct MyProbe {
///     @Test("probe") func probe() async throws {
///         switch ChildProbe.workload { case "rows": …; ChildProbe.report(["peak_rss": peakResidentBytes()]) … }
///     }
/// }
/// let readings = try await ChildProbe.run(MyProbe.self, workload: "rows")
/// ```
public enum ChildProbe {
    /// The environment variable naming the workload in the child.
    public static let variable = "SWIFTCOUCH_PROBE"

    /// The workload this process runs as a probe child; nil in the parent.
    public static var workload: String? { ProcessInfo.processInfo.environment[variable] }

    /// Whether this process is a probe child (for a probe suite's `.enabled(if:)`).
    public static var isChild: Bool { workload != nil }

    /// A value of the child's environment (`environment` given to ``run(_:workload:environment:deadline:)``).
    public static func value(_ name: String) -> String? { ProcessInfo.processInfo.environment[name] }

    /// Prints readings as one `PROBE k=v …` line, for the parent to collect.
    public static func report(_ values: [String: Int64]) {
        print("PROBE " + values.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))
    }

    /// Runs this test binary again, filtered to `suite`, with ``variable`` set to `workload` and `environment` added,
    /// and returns the readings its `PROBE` lines printed. The child runs on a Dispatch thread (the cooperative pool is
    /// not blocked); past `deadline` seconds it is terminated. When the child fails, prints no reading or is
    /// terminated, an `Issue` is recorded with the end of its output and the path of the whole saved log.
    public static func run(
        _ suite: Any.Type, workload: String, environment: [String: String] = [:], deadline: Double = 600
    ) async throws -> [String: Int64] {
        let filter = NSRegularExpression.escapedPattern(for: String(reflecting: suite))
        let outcome = try await offThePool {
            try launch(filter: filter, workload: workload, environment, deadline: deadline)
        }
        let readings = parse(outcome.output)
        if readings.isEmpty || outcome.status != 0 || outcome.timedOut {
            let saved = FileManager.default.temporaryDirectory.appendingPathComponent(
                savedLogPrefix(workload) + "\(UUID().uuidString).log")
            try? outcome.output.write(to: saved)
            let why = outcome.timedOut ? "was terminated after \(deadline) s" : "failed (exit \(outcome.status))"
            let tail = String(decoding: outcome.output.suffix(6_000), as: UTF8.self)
            Issue.record(
                "The probe '\(workload)' of \(String(reflecting: suite)) \(why); full output in \(saved.path):\n\(tail)"
            )
        }
        return readings
    }

    /// How the names of the logs a failed `workload` child leaves in the temporary directory begin.
    public static func savedLogPrefix(_ workload: String) -> String { "swiftcouch-probe-\(workload)-" }

    private static func launch(filter: String, workload: String, _ extra: [String: String], deadline: Double) throws
        -> (output: Data, status: Int32, timedOut: Bool)
    {
        let process = try ChildProcess.testBinary(
            filter: filter, environment: [variable: workload].merging(extra) { $1 }, standardError: .output)
        let timedOut = Locked(false)
        let watchdog = DispatchWorkItem {
            timedOut.withLock { $0 = true }
            process.signal(SIGTERM)
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + deadline, execute: watchdog)
        let data = process.readToEnd()
        let status = process.wait()
        watchdog.cancel()
        return (data, status, timedOut.withLock { $0 })
    }

    private static func parse(_ output: Data) -> [String: Int64] {
        var readings: [String: Int64] = [:]
        for line in String(decoding: output, as: UTF8.self).split(separator: "\n") where line.hasPrefix("PROBE ") {
            for pair in line.dropFirst(6).split(separator: " ") {
                let parts = pair.split(separator: "=")
                if parts.count == 2, let value = Int64(parts[1]) { readings[String(parts[0])] = value }
            }
        }
        return readings
    }
}

/// A value behind a lock, for the watchdog's flag.
private final class Locked<Value: Sendable>: @unchecked Sendable {
    private var value: Value
    private let lock = NSLock()

    init(_ value: Value) { self.value = value }

    func withLock<R>(_ body: (inout Value) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}

/// Current resident memory (VmRSS), in bytes (Linux; 0 elsewhere).
public func residentBytes() -> Int64 { procStatus("VmRSS:") }

/// Peak resident memory since the last ``resetPeak()`` (VmHWM), in bytes (Linux; 0 elsewhere).
public func peakResidentBytes() -> Int64 { procStatus("VmHWM:") }

/// Resets the peak-RSS mark (Linux).
public func resetPeak() {
    try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
}

/// Gives the memory malloc holds free back to the system (glibc's `malloc_trim`, looked up at run time), so that a
/// reading taken next counts what is in use.
public func trimMallocArenas() {
    #if os(Linux)
        typealias Trim = @convention(c) (Int) -> Int32
        if let symbol = dlsym(dlopen(nil, RTLD_NOW), "malloc_trim") {
            _ = unsafeBitCast(symbol, to: Trim.self)(0)
        }
    #endif
}

private func procStatus(_ field: String) -> Int64 {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field) }),
        let kilobytes = line.split(separator: " ").compactMap({ Int64($0) }).first
    else { return 0 }
    return kilobytes * 1024
}

/// A new file of `size` random (incompressible) bytes in the temporary directory, written a MiB at a time; `size` is
/// rounded down to whole MiB. The caller removes it.
public func writeRandomFile(size: Int) throws -> URL {
    try writeFile(size: size) { block in
        var generator = SystemRandomNumberGenerator()
        block.withUnsafeMutableBytes { bytes in
            for index in stride(from: 0, to: bytes.count, by: 8) {
                bytes.storeBytes(of: generator.next() as UInt64, toByteOffset: index, as: UInt64.self)
            }
        }
    }
}

/// A new file of `size` bytes of random lowercase hexadecimal text in lines of 64 characters: text that gzip
/// compresses to about half (so a server stores it gzip-encoded, and its encoded form is still large). `size` is
/// rounded down to whole MiB. The caller removes it.
public func writeRandomTextFile(size: Int) throws -> URL {
    let digits = Array("0123456789abcdef".utf8)
    return try writeFile(size: size) { block in
        var generator = SystemRandomNumberGenerator()
        block.withUnsafeMutableBytes { bytes in
            var index = 0
            while index < bytes.count {
                var random: UInt64 = generator.next()
                for _ in 0..<16 where index < bytes.count {
                    bytes[index] = (index + 1) % 65 == 0 ? UInt8(ascii: "\n") : digits[Int(random & 15)]
                    random >>= 4
                    index += 1
                }
            }
        }
    }
}

private func writeFile(size: Int, fill: (inout Data) -> Void) throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(UUID().uuidString).bin")
    guard FileManager.default.createFile(atPath: url.path, contents: nil) else {
        throw CouchError(kind: .transport, message: "Could not create \(url.path).")
    }
    let handle = try FileHandle(forWritingTo: url)
    defer { try? handle.close() }
    var block = Data(count: 1 << 20)
    for _ in 0..<(size >> 20) {
        fill(&block)
        try handle.write(contentsOf: block)
    }
    return url
}

/// Whether two files hold the same bytes, read a MiB at a time.
public func filesEqual(_ a: URL, _ b: URL) throws -> Bool {
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

/// The MD5 of a file, base64 (a CouchDB attachment's digest without its `md5-` prefix), read a MiB at a time.
public func md5Base64(of url: URL) throws -> String {
    var md5 = Crypto.MD5()
    let handle = try FileHandle(forReadingFrom: url)
    defer { try? handle.close() }
    while let piece = try handle.read(upToCount: 1 << 20), !piece.isEmpty { md5.update(piece) }
    return md5.finish().base64EncodedString()
}

/// Runs `body` on a Dispatch thread and returns its result: for blocking work a test does itself (writing or digesting
/// a large file, hundreds of MiB in a debug build), which on the cooperative pool (two threads here) would hold every
/// other test off for its whole length.
public func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global().async { continuation.resume(with: Result { try body() }) }
    }
}
