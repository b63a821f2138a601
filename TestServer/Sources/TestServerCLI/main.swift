import CouchTestServer
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

// The `TestServer` executable: runs the in-process CouchDB-compatible server until SIGINT/SIGTERM.

let usage = """
    Usage: TestServer [options]

    Runs the SwiftCouch TestServer, a CouchDB 3.5-compatible server, on 127.0.0.1 until
    interrupted (Ctrl-C) or terminated.

    Options:
      --port N              Port to listen on (default 5984; 0 picks a free port)
      --admin NAME:PASSWORD Server admin (default admin:password)
      --data-dir DIR        Keep data in DIR so that it survives a restart (default: a
                            temporary directory, removed at exit)
      --session-timeout S   Lifetime of AuthSession cookies in seconds (default 600)
      --nodes N             Behave as a cluster of N nodes seen through one (default 1)
      --replica-lag S       On a cluster, secondary reads may lag writes by up to S seconds
      --idle-timeout S      Close kept-alive connections idle for S seconds, without notice
      --seed N              Seed for faults that hit a fraction of requests (default 0)
      --fault SPEC          Add a fault rule; may be repeated. SPEC is KIND[,OPTION=VALUE...]
                              KIND: 429, 500, 503, drop, truncate, invalid-json, delay:SECONDS,
                                reply-then-close:SECONDS, 429-then-close:SECONDS, drop-after,
                                slow-head:SECONDS, redirect (with location=URL),
                                trickle-body:SECONDS, interim:SECONDS (count=N: N times)
                              retry-after=VALUE  (429/503: seconds, or any text: nan, -5)
                              next=N | fraction=F (0...1)
                              path=/exact | prefix=/start   method=GET
                            e.g. --fault 429,retry-after=1,next=3,prefix=/db
      -h, --help            Show this help

    """

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("TestServer: \(message)\nRun with --help for usage.\n".utf8))
    exit(2)
}

/// Reads the command line: the configuration and the fault rules.
func parseArguments(_ commandLine: [String]) -> (TestServer.Configuration, [FaultSpec]) {
    var configuration = TestServer.Configuration(port: 5984)
    var faultSpecs: [FaultSpec] = []
    var arguments = commandLine[...]

    func value(for option: String) -> String {
        guard let v = arguments.popFirst() else { fail("\(option) needs a value") }
        return v
    }

    while let argument = arguments.popFirst() {
        // Accept --option=value as well as --option value.
        var option = argument
        if argument.hasPrefix("--"), let eq = argument.firstIndex(of: "=") {
            option = String(argument[..<eq])
            arguments.insert(String(argument[argument.index(after: eq)...]), at: arguments.startIndex)
        }
        switch option {
        case "-h", "--help":
            FileHandle.standardOutput.write(Data(usage.utf8))
            exit(0)
        case "--port":
            let text = value(for: option)
            guard let port = Int(text), (0...65535).contains(port) else { fail("invalid port '\(text)'") }
            configuration.port = port
        case "--admin":
            let text = value(for: option)
            guard let colon = text.firstIndex(of: ":"), colon != text.startIndex else {
                fail("--admin expects NAME:PASSWORD")
            }
            configuration.adminName = String(text[..<colon])
            configuration.adminPassword = String(text[text.index(after: colon)...])
        case "--data-dir":
            configuration.dataDirectory = URL(fileURLWithPath: value(for: option), isDirectory: true)
        case "--session-timeout":
            let text = value(for: option)
            guard let seconds = Int(text), seconds > 0 else { fail("invalid session timeout '\(text)'") }
            configuration.sessionTimeout = seconds
        case "--nodes":
            let text = value(for: option)
            guard let nodes = Int(text), nodes >= 1, nodes <= 64 else { fail("invalid node count '\(text)'") }
            configuration.nodes = nodes
        case "--replica-lag":
            let text = value(for: option)
            guard let seconds = Double(text), seconds >= 0 else { fail("invalid replica lag '\(text)'") }
            configuration.replicaLag = seconds
        case "--idle-timeout":
            let text = value(for: option)
            guard let seconds = Double(text), seconds > 0 else { fail("invalid idle timeout '\(text)'") }
            configuration.keepAliveIdleTimeout = seconds
        case "--seed":
            let text = value(for: option)
            guard let seed = UInt64(text) else { fail("invalid seed '\(text)'") }
            configuration.faultSeed = seed
        case "--fault":
            do {
                faultSpecs.append(try FaultSpec(parsing: value(for: option)))
            } catch {
                fail("invalid --fault: \(error)")
            }
        default:
            fail("unknown argument '\(argument)'")
        }
    }
    return (configuration, faultSpecs)
}

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

let (configuration, faultSpecs) = parseArguments(Array(CommandLine.arguments.dropFirst()))

// Block the signals so they can be waited for synchronously.
signal(SIGINT, SIG_IGN)
signal(SIGTERM, SIG_IGN)

let server: TestServer
do {
    server = try TestServer.start(configuration)
} catch {
    fail("could not start: \(error)")
}
for spec in faultSpecs {
    server.faults.add(spec)
}

say("TestServer (CouchDB 3.5.0 compatible) listening on \(server.urlString)")
say(
    "Admin: \(server.adminName):\(server.adminPassword)"
        + (configuration.dataDirectory.map { ", data in \($0.path)" }
            ?? ", data in a temporary directory removed at exit"))
for spec in faultSpecs {
    say("Fault: \(spec.fault) for \(spec.match), \(spec.frequency)")
}

let done = DispatchSemaphore(value: 0)
let signalQueue = DispatchQueue(label: "TestServer.signals")
let sources = [SIGINT, SIGTERM].map { number -> DispatchSourceSignal in
    let source = DispatchSource.makeSignalSource(signal: number, queue: signalQueue)
    source.setEventHandler { done.signal() }
    source.resume()
    return source
}
done.wait()
say("Stopping.")
server.stop()
withExtendedLifetime(sources) {}
exit(0)
