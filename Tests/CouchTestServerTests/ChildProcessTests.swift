import Foundation
import ProcessSpawn
import TestScheduling
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The child processes the tests and the benchmarks start (probes, writers killed mid-write, a
/// TestServer of their own), without `Foundation.Process`, whose `run()` crashed CI on Linux.
@Suite(.ownThreads) struct ChildProcessTests {
    static let shell = URL(fileURLWithPath: "/bin/sh")

    @Test func outputErrorAndExitStatus() throws {
        let merged = try ChildProcess(
            executable: Self.shell, arguments: ["-c", "echo out; echo err >&2; exit 3"], standardError: .output)
        #expect(String(decoding: merged.readToEnd(), as: UTF8.self) == "out\nerr\n")
        #expect(merged.wait() == 3)
        #expect(merged.wait() == 3, "waiting again gives the same status")
        #expect(!merged.isRunning)

        let discarded = try ChildProcess(
            executable: Self.shell, arguments: ["-c", "echo out; echo err >&2"], standardError: .discard)
        #expect(String(decoding: discarded.readToEnd(), as: UTF8.self) == "out\n")
        #expect(discarded.wait() == 0)
    }

    @Test func environmentAndInput() throws {
        let child = try ChildProcess(
            executable: Self.shell, arguments: ["-c", "echo \"$PROBE_VALUE\"; cat"],
            environment: ["PROBE_VALUE": "a b=c", "PATH": "/usr/bin:/bin"], pipeInput: true)
        let input = try #require(child.input)
        input.write(Data("through stdin\n".utf8))
        try input.close()  // the child's end of input: cat ends
        #expect(String(decoding: child.readToEnd(), as: UTF8.self) == "a b=c\nthrough stdin\n")
        #expect(child.wait() == 0)
    }

    @Test func aSignalEndsTheChildOnceAndNeverAfterItIsReaped() throws {
        let child = try ChildProcess(executable: Self.shell, arguments: ["-c", "exec sleep 30"])
        #expect(child.isRunning)
        let start = Date()
        child.signal(SIGKILL)
        #expect(child.wait() == 128 + SIGKILL)
        #expect(Date().timeIntervalSince(start) < 20)
        #expect(!child.isRunning)
        child.signal(SIGKILL)  // reaped: nothing is sent (the pid may be another process's by now)
        #expect(child.wait() == 128 + SIGKILL)
    }

    /// A parent that kills its child at a moment the child's output names: the output is collected while the
    /// child runs, a wait for a line returns once it came, one for a line that never comes ends with the output.
    @Test func outputIsCollectedWhileTheChildRuns() throws {
        let child = try ChildProcess(
            executable: Self.shell, arguments: ["-c", "echo READY; exec sleep 30"], standardError: .discard)
        let output = child.collectOutput()
        #expect(output.wait(until: { $0.contains("READY") }, timeout: 20))
        #expect(!output.hasEnded, "the child still runs")
        #expect(!output.wait(until: { $0.contains("NEVER") }, timeout: 0.2), "a wait that times out")
        child.signal(SIGKILL)
        #expect(child.wait() == 128 + SIGKILL)
        #expect(output.waitForEnd(timeout: 20))
        #expect(output.text == "READY\n")

        let quick = try ChildProcess(executable: Self.shell, arguments: ["-c", "echo one; echo two"])
        let all = quick.collectOutput()
        #expect(!all.wait(until: { $0.contains("three") }, timeout: 20), "the output ended first")
        #expect(all.hasEnded)
        #expect(all.text == "one\ntwo\n")
        #expect(quick.wait() == 0)
    }

    @Test func aMissingExecutableIsAnError() {
        #expect(throws: (any Error).self) {
            try ChildProcess(executable: URL(fileURLWithPath: "/nonexistent/swiftcouch-child"), arguments: [])
        }
    }

    #if os(Linux)
        /// With over a thousand descriptors open (as the test process has at times; Foundation's
        /// `run()` crashed listing them), children start, inherit none of them, and start with no
        /// signal ignored or blocked although this process ignores `SIGPIPE`.
        @Test func manyDescriptorsOpenAreNotInheritedAndSignalsAreDefault() throws {
            _ = signal(SIGPIPE, SIG_IGN)  // as the TestServer does (POSIXSocket)
            var open: [Int32] = []
            defer { for fd in open { close(fd) } }
            for _ in 0..<1_200 {
                let fd = Glibc.open("/dev/null", O_RDONLY)  // without O_CLOEXEC: inheritable
                guard fd >= 0 else { break }
                open.append(fd)
            }
            #expect(open.count == 1_200, "this test needs 1,200 descriptors (ulimit -n)")
            for _ in 0..<20 {
                let child = try ChildProcess(executable: URL(fileURLWithPath: "/bin/ls"), arguments: ["/proc/self/fd"])
                let listed = String(decoding: child.readToEnd(), as: UTF8.self).split(separator: "\n")
                #expect(child.wait() == 0)
                // 0, 1, 2 and the one ls opened to list the directory.
                #expect(listed.count <= 4, "inherited: \(listed.prefix(20))")
                let inheritedOne = listed.contains(Substring(String(open[600])))
                #expect(!inheritedOne)
            }
            let status = try ChildProcess(
                executable: URL(fileURLWithPath: "/bin/cat"), arguments: ["/proc/self/status"])
            let lines = String(decoding: status.readToEnd(), as: UTF8.self).split(separator: "\n")
            status.wait()
            // Signals 1 to 31 (the mask's low bits; glibc keeps 32 and 33 for itself, and
            // `sigfillset` leaves them out).
            for field in ["SigIgn:", "SigBlk:"] {
                let line = lines.first { $0.hasPrefix(field) }
                let mask = line.flatMap {
                    UInt64($0.dropFirst(field.count).trimmingCharacters(in: .whitespaces), radix: 16)
                }
                #expect(mask.map { $0 & 0x7fff_ffff } == 0, "\(line ?? "no \(field)")")
            }
        }
    #endif
}
