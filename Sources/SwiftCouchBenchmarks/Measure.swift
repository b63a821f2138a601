import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What one run of one piece of work cost the client process.
struct Measurement {
    var wallSeconds: Double
    var cpuSeconds: Double
    /// Peak resident memory during the run, in bytes (nil where the platform cannot tell).
    var peakResidentBytes: Int64?
    /// How many operations the work did (for per-1,000-operation figures).
    var operations: Int

    var operationsPerSecond: Double { Double(operations) / max(wallSeconds, 1e-9) }
    var cpuMillisecondsPerOperation: Double { cpuSeconds * 1000 / Double(max(operations, 1)) }
}

enum Measure {
    /// User + system CPU time of this process so far.
    static func selfUsage() -> rusage {
        var usage = rusage()
        #if os(Linux)
            getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        #else
            getrusage(RUSAGE_SELF, &usage)
        #endif
        return usage
    }

    static func cpuSeconds() -> Double {
        let usage = selfUsage()
        let user = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
        let system = Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
        return user + system
    }

    /// Returns freed heap memory to the system, then resets the kernel's peak-RSS mark for this
    /// process (Linux: `malloc_trim`, `/proc/self/clear_refs`), so a row's peak is its own.
    static func resetPeakResident() {
        #if os(Linux)
            // glibc's malloc_trim, looked up at run time (its header is not in the Glibc module).
            if let symbol = dlsym(nil, "malloc_trim") {
                typealias Trim = @convention(c) (Int) -> Int32
                _ = unsafeBitCast(symbol, to: Trim.self)(0)
            }
            try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
        #endif
    }

    /// The peak resident set size since the last reset, in bytes.
    static func peakResidentBytes() -> Int64? {
        #if os(Linux)
            guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
            for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
                let kilobytes = line.split(separator: " ").compactMap { Int64($0) }.first
                return kilobytes.map { $0 * 1024 }
            }
            return nil
        #else
            return Int64(selfUsage().ru_maxrss)
        #endif
    }

    /// Runs `work` (which returns how many operations it did) and measures it.
    static func run(_ work: () async throws -> Int) async throws -> Measurement {
        Measure.resetPeakResident()
        let cpu0 = cpuSeconds()
        let start = Date()
        let operations = try await work()
        let wall = Date().timeIntervalSince(start)
        let cpu = cpuSeconds() - cpu0
        return Measurement(
            wallSeconds: wall, cpuSeconds: cpu, peakResidentBytes: peakResidentBytes(), operations: operations)
    }
}
