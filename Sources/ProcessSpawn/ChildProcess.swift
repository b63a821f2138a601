import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A child process for the tests and the benchmarks (a probe, a child writer killed mid-write, a
/// TestServer in a process of its own), started with `posix_spawn` on Linux.
///
/// Not `Foundation.Process`: on Linux its `run()` lists `/proc/self/fd` to close every descriptor
/// in the child, and copies 256 bytes out of each directory entry where the entry is shorter; an
/// entry at the end of a mapped page makes the copy fault (swift-corelibs-foundation#5472, in
/// Swift 6.3.1). The tests hold over a thousand descriptors at times, and CI crashed there. Here
/// the child closes every descriptor above 2 with `posix_spawn_file_actions_addclosefrom_np`
/// (glibc 2.34); where it is missing, every descriptor is marked close-on-exec first. The child
/// starts with no signal blocked and every signal at its default (the tests' process ignores
/// `SIGPIPE`, and an ignored signal stays ignored across `exec`).
///
/// The child is reaped exactly once, under a lock that ``signal(_:)`` takes too, so a signal never
/// reaches another process that was given a reaped child's pid. On other platforms, where
/// `Foundation.Process` has no such fault, it does the spawning.
public final class ChildProcess: @unchecked Sendable {
    // @unchecked: `status` (and the process, elsewhere than Linux) is only touched under `lock`.

    /// Where the child's standard error goes.
    public enum ErrorDestination: Sendable {
        /// This process's standard error.
        case inherit
        /// `/dev/null`.
        case discard
        /// The same pipe as its standard output (``output``).
        case output
    }

    /// The read end of the child's standard output.
    public let output: FileHandle
    /// The write end of the child's standard input, when asked for (closing it, or this process
    /// ending, is the child's end of input); nil when the child reads this process's.
    public let input: FileHandle?
    /// The child's process id.
    public let identifier: Int32

    private let lock = NSLock()
    private var status: Int32?
    #if !os(Linux)
        private let process: Process
    #endif

    /// Starts `executable` with `arguments` (not including its own name) and `environment`.
    /// - Parameters:
    ///   - environment: the child's whole environment; nil: this process's.
    ///   - standardError: where its standard error goes (default: this process's).
    ///   - pipeInput: whether ``input`` is a pipe to its standard input (else it reads this process's).
    /// - Throws: when the pipe cannot be made or the executable cannot be started.
    public init(
        executable: URL, arguments: [String], environment: [String: String]? = nil,
        standardError: ErrorDestination = .inherit, pipeInput: Bool = false
    ) throws {
        #if os(Linux)
            let started = try Self.spawn(
                executable.path, arguments, environment ?? ProcessInfo.processInfo.environment, standardError,
                pipeInput)
            identifier = started.pid
            output = FileHandle(fileDescriptor: started.output, closeOnDealloc: true)
            input = started.input.map { FileHandle(fileDescriptor: $0, closeOnDealloc: true) }
        #else
            let process = Process()
            process.executableURL = executable
            process.arguments = arguments
            if let environment { process.environment = environment }
            let outputPipe = Pipe()
            process.standardOutput = outputPipe
            switch standardError {
            case .inherit: break
            case .discard: process.standardError = FileHandle.nullDevice
            case .output: process.standardError = outputPipe
            }
            let inputPipe = pipeInput ? Pipe() : nil
            if let inputPipe { process.standardInput = inputPipe }
            try process.run()
            self.process = process
            identifier = process.processIdentifier
            output = outputPipe.fileHandleForReading
            input = inputPipe?.fileHandleForWriting
        #endif
    }

    /// This test binary again, running only the tests `filter` matches, with `environment` added to
    /// this process's (a child test reads what it is to do from there).
    public static func testBinary(
        filter: String, environment: [String: String], standardError: ErrorDestination
    ) throws -> ChildProcess {
        try ChildProcess(
            executable: URL(fileURLWithPath: CommandLine.arguments[0]),
            arguments: ["--testing-library", "swift-testing", "--filter", filter],
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 }, standardError: standardError)
    }

    /// Reads the child's output until it closes it (normally when it ends).
    public func readToEnd() -> Data {
        var data = Data()
        while true {
            let chunk = readChunk()
            if chunk.isEmpty { return data }
            data.append(chunk)
        }
    }

    /// Starts reading the child's output on a thread of its own (never one of Swift concurrency's), into a
    /// ``CollectedOutput`` that can be read and waited on while the child runs: for a parent that kills the
    /// child at a moment its output names. Nothing else may read ``output`` afterwards.
    public func collectOutput() -> CollectedOutput {
        let collected = CollectedOutput()
        Thread { [self] in
            while true {
                let chunk = readChunk()
                if chunk.isEmpty { break }
                collected.append(chunk)
            }
            collected.finish()
        }.start()
        return collected
    }

    /// Reads what the child has written, waiting for some; empty once it closed its output.
    public func readChunk() -> Data {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(output.fileDescriptor, $0.baseAddress, $0.count) }
            if count >= 0 { return Data(buffer[0..<count]) }
            if errno != EINTR { return Data() }
        }
    }

    /// Whether the child is still running (a child that ended is reaped here).
    public var isRunning: Bool {
        lock.withLock { reapIfEnded() == nil }
    }

    /// Sends `signal` (`SIGTERM`, `SIGKILL`) to the child, unless it has been reaped already.
    public func signal(_ signal: Int32) {
        lock.withLock {
            guard reapIfEnded() == nil else { return }
            #if os(Linux)
                _ = kill(identifier, signal)
            #else
                if signal == SIGTERM { process.terminate() } else { _ = kill(identifier, signal) }
            #endif
        }
    }

    /// Waits for the child to end and returns its exit status: the code it exited with, or 128 plus
    /// the number of the signal that ended it.
    @discardableResult
    public func wait() -> Int32 {
        #if os(Linux)
            // Waits without reaping, so that the reaping (and `signal`) stay under the lock.
            var info = siginfo_t()
            while waitid(P_PID, id_t(identifier), &info, WEXITED | WNOWAIT) != 0, errno == EINTR {}
        #else
            process.waitUntilExit()
        #endif
        return lock.withLock { reapIfEnded() } ?? 128 + SIGKILL
    }

    /// Under the lock: the exit status when the child has ended (reaping it the first time), else nil.
    private func reapIfEnded() -> Int32? {
        if let status { return status }
        #if os(Linux)
            var raw: Int32 = 0
            let reaped = waitpid(identifier, &raw, WNOHANG)
            if reaped == identifier {
                let signal = raw & 0x7f
                status = signal == 0 ? (raw >> 8) & 0xff : 128 + signal
            } else if reaped < 0, errno == ECHILD {
                status = 128 + SIGKILL  // not ours to reap any more: ended
            }
        #else
            if !process.isRunning {
                status =
                    process.terminationReason == .uncaughtSignal
                    ? 128 + process.terminationStatus : process.terminationStatus
            }
        #endif
        return status
    }

    #if os(Linux)
        private static let closeFrom:
            (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? = {
                // Declared by glibc's spawn.h only with _GNU_SOURCE, which Swift's Glibc module lacks.
                guard
                    let symbol = dlsym(
                        UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np")
                else { return nil }
                return unsafeBitCast(
                    symbol,
                    to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
            }()

        /// Spawns are made one at a time: a pipe's ends are marked close-on-exec just after they are
        /// made, and no other spawn of this process may start in between.
        private static let spawnLock = NSLock()

        private static func spawn(
            _ path: String, _ arguments: [String], _ environment: [String: String], _ standardError: ErrorDestination,
            _ pipeInput: Bool
        ) throws -> (pid: Int32, output: Int32, input: Int32?) {
            try spawnLock.withLock {
                let outputPipe = try makePipe()
                let inputPipe: (read: Int32, write: Int32)?
                do {
                    inputPipe = pipeInput ? try makePipe() : nil
                } catch {
                    close(outputPipe.read)
                    close(outputPipe.write)
                    throw error
                }
                var actions = posix_spawn_file_actions_t()
                posix_spawn_file_actions_init(&actions)
                defer { posix_spawn_file_actions_destroy(&actions) }
                posix_spawn_file_actions_adddup2(&actions, outputPipe.write, 1)
                switch standardError {
                case .inherit: break
                case .discard: posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
                case .output: posix_spawn_file_actions_adddup2(&actions, outputPipe.write, 2)
                }
                if let inputPipe { posix_spawn_file_actions_adddup2(&actions, inputPipe.read, 0) }
                if let closeFrom {
                    _ = closeFrom(&actions, 3)
                } else {
                    markEveryDescriptorCloseOnExec()
                }
                var attributes = posix_spawnattr_t()
                posix_spawnattr_init(&attributes)
                defer { posix_spawnattr_destroy(&attributes) }
                var none = sigset_t()
                sigemptyset(&none)
                posix_spawnattr_setsigmask(&attributes, &none)
                var every = sigset_t()
                sigfillset(&every)
                posix_spawnattr_setsigdefault(&attributes, &every)
                posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

                let argv = ([path] + arguments).map { strdup($0) } + [nil]
                let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
                defer {
                    for pointer in argv + envp { free(pointer) }
                }
                var pid: Int32 = 0
                let result = posix_spawn(&pid, path, &actions, &attributes, argv, envp)
                close(outputPipe.write)
                if let inputPipe { close(inputPipe.read) }
                guard result == 0 else {
                    close(outputPipe.read)
                    if let inputPipe { close(inputPipe.write) }
                    throw CocoaError(
                        .fileReadUnknown,
                        userInfo: [
                            NSLocalizedDescriptionKey: "Could not start \(path): \(String(cString: strerror(result)))"
                        ])
                }
                return (pid, outputPipe.read, inputPipe?.write)
            }
        }

        private static func makePipe() throws -> (read: Int32, write: Int32) {
            var ends: [Int32] = [-1, -1]
            guard pipe(&ends) == 0 else {
                throw CocoaError(
                    .fileReadUnknown,
                    userInfo: [NSLocalizedDescriptionKey: "Could not make a pipe: \(String(cString: strerror(errno)))"])
            }
            for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
            return (ends[0], ends[1])
        }

        /// Where the child cannot be told to close every descriptor: each one this process has open
        /// (listed from `/proc/self/fd`, names read as C strings) is marked close-on-exec.
        private static func markEveryDescriptorCloseOnExec() {
            guard let directory = opendir("/proc/self/fd") else { return }
            defer { closedir(directory) }
            let own = dirfd(directory)
            // The name is read where it lies: `entry.pointee.d_name` would copy all 256 bytes of the
            // field, past the end of a shorter entry (the fault this type exists to avoid).
            let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name) ?? 19
            while let entry = readdir(directory) {
                let name = UnsafeRawPointer(entry).advanced(by: nameOffset).assumingMemoryBound(to: CChar.self)
                guard let number = Int32(String(cString: name)), number > 2, number != own else { continue }
                _ = fcntl(number, F_SETFD, FD_CLOEXEC)
            }
        }
    #endif
}

/// A child's output as ``ChildProcess/collectOutput()`` reads it: what has come so far, and waits for more.
public final class CollectedOutput: @unchecked Sendable {
    // Safe: `data` and `ended` are only touched under `condition`.
    private let condition = NSCondition()
    private var data = Data()
    private var ended = false

    fileprivate init() {}

    fileprivate func append(_ chunk: Data) {
        condition.withLock {
            data.append(chunk)
            condition.broadcast()
        }
    }

    fileprivate func finish() {
        condition.withLock {
            ended = true
            condition.broadcast()
        }
    }

    /// The output so far, as UTF-8 text.
    public var text: String { condition.withLock { String(decoding: data, as: UTF8.self) } }

    /// Whether the child has closed its output (normally: it ended).
    public var hasEnded: Bool { condition.withLock { ended } }

    /// Waits until `condition` holds for the output so far, the output ends, or `timeout` seconds pass;
    /// returns whether `condition` holds.
    @discardableResult
    public func wait(until condition: (String) -> Bool, timeout: TimeInterval) -> Bool {
        self.condition.withLock { waitLocked(timeout: timeout) { condition(String(decoding: data, as: UTF8.self)) } }
    }

    /// Waits until the output ends or `timeout` seconds pass; returns whether it ended.
    @discardableResult
    public func waitForEnd(timeout: TimeInterval) -> Bool {
        condition.withLock { waitLocked(timeout: timeout) { ended } }
    }

    /// The one wait behind both (`condition` locked): until `satisfied` holds, the output ends, or `timeout`
    /// seconds pass; returns whether `satisfied` holds.
    private func waitLocked(timeout: TimeInterval, until satisfied: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while !satisfied() {
            if ended || !condition.wait(until: deadline) { return satisfied() }
        }
        return true
    }
}
