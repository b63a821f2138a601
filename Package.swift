// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "SwiftCouch",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9)],
    products: [
        .library(name: "SwiftCouch", targets: ["SwiftCouch"]),
        .library(name: "SwiftCouchTesting", targets: ["SwiftCouchTesting"]),
        .library(name: "CouchStore", targets: ["CouchStore"]),
        .library(name: "SwiftCouchStore", targets: ["SwiftCouchStore"]),
        .library(name: "SwiftCouchSync", targets: ["SwiftCouchSync"]),
        .library(name: "CouchTestServer", targets: ["CouchTestServer"]),
        .executable(name: "TestServer", targets: ["TestServerCLI"]),
        .executable(name: "SwiftCouchDemo", targets: ["SwiftCouchDemo"]),
        .executable(name: "SwiftCouchBenchmarks", targets: ["SwiftCouchBenchmarks"]),
        .executable(name: "SwiftCouchChaos", targets: ["SwiftCouchChaos"]),
    ],
    targets: [
        // HTTP/1.1 wire format (parsing and serialising), shared by the TestServer.
        .target(name: "HTTPWire", path: "Sources/HTTPWire"),
        // Child processes for the tests and the benchmarks (not a product): posix_spawn in place of
        // Foundation.Process, whose run() can crash on Linux (ChildProcess.swift).
        .target(name: "ProcessSpawn", path: "Sources/ProcessSpawn"),
        // CRC-32 folded with carry-less multiplication where the processor has it (x86-64 PCLMULQDQ): a few
        // lines of C, because Swift cannot reach the instruction. CouchGzip falls back to its tables elsewhere.
        .target(name: "CCouchChecksum", path: "Sources/CCouchChecksum"),
        // Gzip, zlib and raw DEFLATE in pure Swift, shared by the client and the TestServer.
        .target(name: "CouchGzip", dependencies: ["CCouchChecksum"], path: "Sources/CouchGzip"),
        .target(name: "SwiftCouch", dependencies: ["HTTPWire", "CouchGzip"], path: "Sources/SwiftCouch"),
        .target(name: "SwiftCouchTesting", dependencies: ["SwiftCouch"], path: "Sources/SwiftCouchTesting"),
        .executableTarget(
            name: "SwiftCouchDemo",
            dependencies: ["SwiftCouch", "SwiftCouchStore", "SwiftCouchSync", "CouchTestServer"],
            path: "Sources/SwiftCouchDemo"),
        // JSON, collation and Mango, in pure Swift.
        .target(name: "CouchQuery", path: "Sources/CouchQuery"),
        // JavaScript for design documents, in pure Swift: an interpreter and CouchDB's query-server API.
        .target(name: "CouchJS", dependencies: ["CouchQuery"], path: "Sources/CouchJS"),
        // CouchStore: CouchDB's engine as an embedded, persistent database (storage, documents and
        // revisions, queries, the CouchDB API as request and response values). No sockets.
        .target(
            name: "CouchStore", dependencies: ["HTTPWire", "CouchQuery", "CouchGzip", "CouchJS"],
            path: "Sources/CouchStore"),
        // Local databases for apps: SwiftCouch's API over CouchStore in process (CouchStore itself
        // never depends on SwiftCouch, so the TestServer stays independent of the client it tests).
        .target(
            name: "SwiftCouchStore", dependencies: ["SwiftCouch", "CouchStore"], path: "Sources/SwiftCouchStore"),
        // Replication (CouchDB's protocol) between any two databases, local or remote, through SwiftCouch's operations.
        .target(
            name: "SwiftCouchSync", dependencies: ["SwiftCouch", "SwiftCouchStore", "CouchStore"],
            path: "Sources/SwiftCouchSync"),
        // The TestServer: the HTTP face over CouchStore, with faults, authentication, cluster mode and the replicator.
        .target(
            name: "CouchTestServer", dependencies: ["HTTPWire", "CouchQuery", "CouchGzip", "CouchStore"],
            path: "TestServer/Sources/CouchTestServer"),
        .executableTarget(
            name: "SwiftCouchBenchmarks",
            dependencies: [
                "SwiftCouch", "CouchTestServer", "CouchStore", "HTTPWire", "SwiftCouchStore", "SwiftCouchSync",
                "ProcessSpawn",
            ],
            path: "Sources/SwiftCouchBenchmarks"),
        // The chaos soak: mixed operations under every fault at once, invariants checked afterwards.
        .executableTarget(
            name: "SwiftCouchChaos", dependencies: ["SwiftCouch", "CouchTestServer"], path: "Sources/SwiftCouchChaos"),
        .executableTarget(
            name: "TestServerCLI", dependencies: ["CouchTestServer"], path: "TestServer/Sources/TestServerCLI"),
        // What the end-to-end, local-store and replication tests share: the environment (COUCHDB_URL or an embedded
        // TestServer) and the child-process memory probes.
        .target(
            name: "SwiftCouchTestSupport",
            dependencies: ["SwiftCouch", "CouchStore", "CouchTestServer", "ProcessSpawn", "TestScheduling"],
            path: "Tests/SwiftCouchTestSupport"),
        // How tests share the machine: the LoadGate, threads off the cooperative pool for blocking
        // and busy suites, and a clock that does not count a stalled pool. Foundation and Testing only.
        .target(name: "TestScheduling", path: "Tests/TestScheduling"),
        .testTarget(
            name: "SwiftCouchTests",
            dependencies: ["SwiftCouch", "SwiftCouchTesting", "CouchGzip", "SwiftCouchTestSupport"],
            path: "Tests/SwiftCouchTests"),
        .testTarget(
            name: "EndToEndTests",
            dependencies: ["SwiftCouch", "CouchTestServer", "CouchStore", "SwiftCouchTestSupport"],
            path: "Tests/EndToEndTests"),
        .testTarget(
            name: "SwiftCouchStoreTests",
            dependencies: ["SwiftCouchStore", "SwiftCouch", "CouchTestServer", "SwiftCouchTestSupport"],
            path: "Tests/SwiftCouchStoreTests"),
        .testTarget(
            name: "CouchTestServerTests",
            dependencies: [
                "CouchTestServer", "CouchStore", "CouchQuery", "HTTPWire", "CouchGzip", "ProcessSpawn",
                "TestScheduling",
            ],
            path: "Tests/CouchTestServerTests", exclude: ["Fixtures"]),
        // The Swift snippets of README.md and the DocC articles, compiled (never run).
        .testTarget(
            name: "DocumentationSnippetTests",
            dependencies: ["SwiftCouch", "SwiftCouchTesting", "SwiftCouchStore", "SwiftCouchSync"],
            path: "Tests/DocumentationSnippetTests"),
        .testTarget(
            name: "SwiftCouchSyncTests",
            dependencies: [
                "SwiftCouchSync", "SwiftCouchStore", "SwiftCouch", "CouchTestServer", "SwiftCouchTestSupport",
                "ProcessSpawn",
            ],
            path: "Tests/SwiftCouchSyncTests"),
        .testTarget(
            name: "CouchJSTests", dependencies: ["CouchJS", "CouchQuery", "TestScheduling"], path: "Tests/CouchJSTests"),
        // CouchStore on its own, as an app uses it: no TestServer in its dependencies.
        .testTarget(
            name: "CouchStoreTests", dependencies: ["CouchStore", "HTTPWire", "TestScheduling"],
            path: "Tests/CouchStoreTests"),
        .testTarget(
            name: "TestServerConformanceTests",
            dependencies: ["CouchTestServer", "CouchStore", "CouchQuery", "HTTPWire", "TestScheduling"],
            path: "Tests/TestServerConformanceTests"),
    ]
)
