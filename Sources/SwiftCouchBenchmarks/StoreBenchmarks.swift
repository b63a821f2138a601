import CouchStore
import Foundation
import ProcessSpawn
import HTTPWire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// How much work each store row does.
struct StoreSizes {
    /// Documents inserted through `_bulk_docs` (then read by the read rows).
    var insertDocuments: Int
    /// Documents per `_bulk_docs` request.
    var batch = 1_000
    /// Random point reads.
    var pointReads: Int
    /// Documents of the database the open row opens.
    var openDocuments: Int
    /// Documents of the compaction row (each then updated once: half the revisions are garbage).
    var compactDocuments: Int
    /// Revisions of a design document saved and used by the design document row.
    var designSaves: Int

    init(quick: Bool, openDocuments: Int? = nil) {
        // Quick (CI, a debug build): a few thousand documents, so the rows run in seconds.
        insertDocuments = quick ? 2_000 : 100_000
        pointReads = quick ? 500 : 20_000
        self.openDocuments = max(1, openDocuments ?? (quick ? 3_000 : 1_000_000))
        compactDocuments = quick ? 1_000 : 20_000
        designSaves = quick ? 100 : 1_000
    }
}

/// The store rows: CouchStore's engine driven in-process (`CouchEngine.handle` with `ServerRequest`
/// values, no HTTP, a data directory in a temporary folder), and the same work against the CouchDB
/// named by `COUCHDB_URL` when there is one. They go through the engine's public request API only,
/// so they measure whatever storage the engine has; file sizes are the data directory's total.
enum StoreBenchmarks {
    /// One row of the store table.
    struct Row {
        var name: String
        /// What the numbers are (`docs/s`, `s`, `MiB`, `after/before`).
        var unit: String
        var store: Double
        var couchDB: Double?
        /// Whether a larger number is better (throughput) or worse (time, memory, size).
        var higherIsBetter: Bool
        var note = ""
    }

    /// A document of 215 bytes of JSON (`_id` included), as the issue's insert row asks: the
    /// benchmarks' one document (``SmallDocument/numbered(_:id:)``).
    static func document(_ index: Int) -> String { SmallDocument.numbered(index).json }

    static func documentID(_ index: Int) -> String { SmallDocument.documentID(index) }

    /// `_bulk_docs` bodies for documents `range`, `batch` at a time.
    static func batches(_ range: Range<Int>, batch: Int) -> [Data] { SmallDocument.bulkBodies(range, batch: batch) }

    // MARK: - The engine in-process

    /// An engine with a data directory of its own, driven through `handle`.
    final class Engine {
        let directory: URL
        private(set) var engine: CouchEngine

        init(directory: URL) throws {
            self.directory = directory
            engine = try CouchEngine(options: Self.options(directory))
        }

        static func options(_ directory: URL) -> CouchEngine.Options {
            var options = CouchEngine.Options()
            options.dataDirectory = directory
            return options
        }

        /// A fresh engine in a new temporary folder.
        static func temporary(_ purpose: String) throws -> Engine {
            let url = FileManager.default.temporaryDirectory.appendingPathComponent(
                "couchstore-bench-\(purpose)-\(UUID().uuidString.prefix(8))", isDirectory: true)
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
            return try Engine(directory: url)
        }

        /// Sends one request; returns its status and whole body.
        @discardableResult
        func send(_ method: String, _ path: String, query: String? = nil, body: Data? = nil) -> (Int, Data) {
            Self.send(engine, method, path, query: query, body: body)
        }

        static func send(
            _ engine: CouchEngine, _ method: String, _ path: String, query: String? = nil, body: Data? = nil
        )
            -> (Int, Data)
        {
            var headers = HTTPHeaders()
            headers.add("Accept", "application/json")
            if body != nil { headers.add("Content-Type", "application/json") }
            let response = engine.handle(
                ServerRequest(method: method, rawPath: path, rawQuery: query, headers: headers, body: body ?? Data()),
                user: .admin)
            switch response.body {
            case .empty: return (response.status, Data())
            case .data(let data): return (response.status, data)
            case .stream(let produce):
                let writer = Collector()
                produce(writer)
                return (response.status, writer.data)
            }
        }

        /// Sends one request; returns its status and how many body bytes came, keeping none.
        static func count(_ engine: CouchEngine, _ method: String, _ path: String) -> (Int, Int) {
            var headers = HTTPHeaders()
            headers.add("Accept", "application/json")
            let response = engine.handle(
                ServerRequest(method: method, rawPath: path, rawQuery: nil, headers: headers, body: Data()),
                user: .admin)
            switch response.body {
            case .empty: return (response.status, 0)
            case .data(let data): return (response.status, data.count)
            case .stream(let produce):
                let writer = Counter()
                produce(writer)
                return (response.status, writer.bytes)
            }
        }

        /// Closes the engine and opens the data directory again.
        func reopen() throws {
            engine.close()
            engine = try CouchEngine(options: Self.options(directory))
        }

        /// The data directory's size: every file in it, whatever the storage names them.
        var dataSize: Int64 { StoreBenchmarks.directorySize(directory) }

        /// The sizes of the database files (`.couch`, what CouchDB's `sizes.file` measures) and of their
        /// index snapshots (`.couch.index`, a cache rebuilt from the file when missing).
        var databaseFileSizes: (file: Int64, index: Int64) {
            let items = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: [.fileSizeKey])
            var sizes: (file: Int64, index: Int64) = (0, 0)
            while let item = items?.nextObject() as? URL {
                let size = Int64((try? item.resourceValues(forKeys: [.fileSizeKey]))?.fileSize ?? 0)
                if item.pathExtension == "couch" { sizes.file += size }
                if item.lastPathComponent.hasSuffix(".couch.index") { sizes.index += size }
            }
            return sizes
        }

        func remove() {
            engine.close()
            try? FileManager.default.removeItem(at: directory)
        }
    }

    /// Collects a streamed body.
    /// Counts a streamed body's bytes without keeping them.
    final class Counter: ChunkWriter, @unchecked Sendable {
        // @unchecked: written by the one producer that runs synchronously in `count`.
        var bytes = 0
        func write(_ chunk: Data) -> Bool {
            bytes += chunk.count
            return true
        }
    }

    final class Collector: ChunkWriter, @unchecked Sendable {
        // @unchecked: written by the one producer that runs synchronously in `send`.
        var data = Data()
        func write(_ chunk: Data) -> Bool {
            data.append(chunk)
            return true
        }
    }

    static func directorySize(_ url: URL) -> Int64 {
        guard
            let items = FileManager.default.enumerator(
                at: url, includingPropertiesForKeys: [.fileSizeKey, .isRegularFileKey])
        else { return 0 }
        var total: Int64 = 0
        for case let item as URL in items {
            let values = try? item.resourceValues(forKeys: [.fileSizeKey, .isRegularFileKey])
            if values?.isRegularFile == true { total += Int64(values?.fileSize ?? 0) }
        }
        return total
    }

    /// This process's resident memory now (`VmRSS`) and its high-water mark (`VmHWM`), in bytes.
    static func residentMemory() -> (now: Int64, peak: Int64)? {
        #if os(Linux)
            guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
            func value(_ name: String) -> Int64? {
                guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(name) }) else { return nil }
                return line.split(separator: " ").compactMap { Int64($0) }.first.map { $0 * 1024 }
            }
            guard let now = value("VmRSS:"), let peak = value("VmHWM:") else { return nil }
            return (now, peak)
        #else
            return nil
        #endif
    }

    static func seconds(_ work: () throws -> Void) rethrows -> Double {
        let start = DispatchTime.now().uptimeNanoseconds
        try work()
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    }

    static func asyncSeconds(_ work: () async throws -> Void) async rethrows -> Double {
        let start = DispatchTime.now().uptimeNanoseconds
        try await work()
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static func expect(_ status: Int, _ allowed: Set<Int>, _ what: String) throws {
        if !allowed.contains(status) { throw Failure(description: "\(what) answered \(status)") }
    }

    // MARK: - The rows

    /// Runs the store rows whose name contains `only` (all when nil); `couch` is the CouchDB to compare with.
    static func run(sizes: StoreSizes, couch: PlainClient?, only: String?) async -> [Row] {
        func isSelected(_ name: String) -> Bool { only.map { name.contains($0) } ?? true }
        var rows: [Row] = []
        let insertName = "insert \(sizes.insertDocuments) docs, _bulk_docs of \(sizes.batch)"
        let readNames = [
            "point reads of random docs", "_changes from zero", "_all_docs?include_docs=true",
        ]
        if isSelected(insertName) || readNames.contains(where: isSelected) {
            do {
                rows += try await insertAndRead(sizes: sizes, couch: couch, insertName: insertName)
            } catch {
                print("  store insert/read rows failed: \(error)")
            }
        }
        let openName = "open a database of \(sizes.openDocuments) docs"
        if isSelected(openName) {
            do {
                rows += try openDatabase(documents: sizes.openDocuments, batch: sizes.batch, name: openName)
            } catch {
                print("  \(openName): failed: \(error)")
            }
        }
        let designName = "design document saves (each compiled, its view and validation run)"
        if isSelected(designName) {
            do {
                rows.append(try designDocumentSaves(count: sizes.designSaves, name: designName))
            } catch {
                print("  \(designName): failed: \(error)")
            }
        }
        let compactName = "compaction, half the revisions garbage"
        if isSelected(compactName) {
            do {
                rows.append(try await compaction(documents: sizes.compactDocuments, couch: couch, name: compactName))
            } catch {
                print("  \(compactName): failed: \(error)")
            }
        }
        return rows.filter { isSelected($0.name) || $0.name.hasPrefix("open ") }
    }

    /// Inserts the documents, then reads them back three ways, in the engine and in CouchDB.
    static func insertAndRead(sizes: StoreSizes, couch: PlainClient?, insertName: String) async throws -> [Row] {
        let count = sizes.insertDocuments
        let bodies = batches(0..<count, batch: sizes.batch)
        var generator = SystemRandomNumberGenerator()
        let readIDs = (0..<sizes.pointReads).map { _ in documentID(Int.random(in: 0..<count, using: &generator)) }

        // The engine.
        let engine = try Engine.temporary("insert")
        defer { engine.remove() }
        try expect(engine.send("PUT", "/bench").0, [201], "PUT /bench")
        let insert = try seconds {
            for body in bodies {
                try expect(engine.send("POST", "/bench/_bulk_docs", body: body).0, [201], "_bulk_docs")
            }
        }
        print("  done: store \(insertName): \(Int(Double(count) / insert)) docs/s")
        let reads = try seconds {
            for id in readIDs { try expect(engine.send("GET", "/bench/\(id)").0, [200], "GET \(id)") }
        }
        var changesBytes = 0
        let changes = try seconds {
            let (status, data) = engine.send("GET", "/bench/_changes")
            try expect(status, [200], "_changes")
            changesBytes = data.count
        }
        var allDocsBytes = 0
        let allDocs = try seconds {
            let (status, data) = engine.send("GET", "/bench/_all_docs", query: "include_docs=true")
            try expect(status, [200], "_all_docs")
            allDocsBytes = data.count
        }
        print("  done: store reads (\(changesBytes) bytes of _changes, \(allDocsBytes) of _all_docs)")

        // CouchDB, over HTTP.
        var couchInsert: Double?
        var couchReads: Double?
        var couchChanges: Double?
        var couchAllDocs: Double?
        if let couch {
            let db = "bench-store-\(UUID().uuidString.lowercased().prefix(8))"
            _ = try await couch.send(couch.request("PUT", "/\(db)"))
            do {
                couchInsert = try await asyncSeconds {
                    for body in bodies { try await couchBulkDocs(couch, db: db, body: body) }
                }
                // Reads 16 at a time: CouchDB's best over HTTP (the engine reads one at a time).
                couchReads = try await asyncSeconds {
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        let workers = 16
                        for worker in 0..<workers {
                            let mine = stride(from: worker, to: readIDs.count, by: workers).map { readIDs[$0] }
                            group.addTask {
                                for id in mine { _ = try await couch.send(couch.request("GET", "/\(db)/\(id)")) }
                            }
                        }
                        try await group.waitForAll()
                    }
                }
                couchChanges = try await asyncSeconds {
                    _ = try await couch.send(couch.request("GET", "/\(db)/_changes"))
                }
                couchAllDocs = try await asyncSeconds {
                    _ = try await couch.send(couch.request("GET", "/\(db)/_all_docs?include_docs=true"))
                }
            } catch {
                print("  store rows: CouchDB failed: \(error)")
            }
            _ = try? await couch.send(couch.request("DELETE", "/\(db)"))
        }
        func rate(_ n: Int, _ s: Double?) -> Double? { s.map { Double(n) / max($0, 1e-9) } }
        return [
            Row(
                name: insertName, unit: "docs/s", store: Double(count) / insert, couchDB: rate(count, couchInsert),
                higherIsBetter: true),
            Row(
                name: "point reads of random docs", unit: "reads/s", store: Double(readIDs.count) / reads,
                couchDB: rate(readIDs.count, couchReads), higherIsBetter: true,
                note: "engine 1 at a time; CouchDB 16 at a time"),
            Row(
                name: "_changes from zero", unit: "changes/s", store: Double(count) / changes,
                couchDB: rate(count, couchChanges), higherIsBetter: true),
            Row(
                name: "_all_docs?include_docs=true", unit: "docs/s", store: Double(count) / allDocs,
                couchDB: rate(count, couchAllDocs), higherIsBetter: true),
        ]
    }

    /// Posts one `_bulk_docs` body to CouchDB and fails unless every document was written (a 201
    /// can carry rows that are errors).
    static func couchBulkDocs(_ couch: PlainClient, db: String, body: Data) async throws {
        let data = try await couch.send(couch.request("POST", "/\(db)/_bulk_docs", body: body))
        guard let rows = try JSONSerialization.jsonObject(with: data) as? [[String: Any]] else {
            throw Failure(description: "CouchDB's _bulk_docs answer is not an array of rows")
        }
        if let failed = rows.first(where: { $0["error"] != nil }) {
            throw Failure(description: "CouchDB's _bulk_docs refused a document: \(failed)")
        }
    }

    /// Builds a database of `documents` documents, then opens it in a child process (so that its
    /// memory is the open database's alone) and reads its time to open and its resident memory.
    static func openDatabase(documents: Int, batch: Int, name: String) throws -> [Row] {
        let engine = try Engine.temporary("open")
        defer { engine.remove() }
        try expect(engine.send("PUT", "/bench").0, [201], "PUT /bench")
        let build = try seconds {
            for start in stride(from: 0, to: documents, by: batch) {
                let body = batches(start..<min(start + batch, documents), batch: batch)[0]
                try expect(engine.send("POST", "/bench/_bulk_docs", body: body).0, [201], "_bulk_docs")
            }
        }
        engine.engine.close()
        print(
            "  built \(documents) docs in \(String(format: "%.1f", build)) s "
                + "(\(engine.dataSize / 1_048_576) MiB on disk); opening it in a child process")
        let child = try ChildProcess(
            executable: thisExecutable(), arguments: ["--open-database", engine.directory.path])
        let data = child.readToEnd()
        child.wait()
        let text = String(decoding: data, as: UTF8.self)
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("OPENED ") }),
            let result = try? JSONSerialization.jsonObject(with: Data(line.dropFirst(7).utf8)) as? [String: Double]
        else { throw Failure(description: "the child did not report: \(text)") }
        let mib = 1_048_576.0
        return [
            Row(name: name + ": time to open", unit: "s", store: result["open"] ?? .nan, higherIsBetter: false),
            Row(
                name: name + ": resident memory after open", unit: "MiB", store: (result["rssOpen"] ?? .nan) / mib,
                higherIsBetter: false, note: String(format: "peak %.0f MiB", (result["hwmOpen"] ?? .nan) / mib)),
            Row(
                name: name + ": resident memory after a full _changes", unit: "MiB",
                store: (result["rssScan"] ?? .nan) / mib, higherIsBetter: false,
                note: String(format: "peak %.0f MiB", (result["hwmScan"] ?? .nan) / mib)),
        ]
    }

    /// The child of the open row: opens the data directory, reads its database, scans its changes.
    static func openChild(directory: String) -> Never {
        let url = URL(fileURLWithPath: directory, isDirectory: true)
        var engine: CouchEngine?
        let open = seconds {
            engine = try? CouchEngine(options: Engine.options(url))
            if let engine { _ = Engine.send(engine, "GET", "/bench") }
        }
        guard let engine else {
            print("could not open \(directory)")
            exit(1)
        }
        let afterOpen = residentMemory()
        // A scan reads the rows as they come (as a client of a feed does) and keeps none of them.
        let (status, bytes) = Engine.count(engine, "GET", "/bench/_changes")
        let afterScan = residentMemory()
        let result: [String: Double] = [
            "open": open, "rssOpen": Double(afterOpen?.now ?? 0), "hwmOpen": Double(afterOpen?.peak ?? 0),
            "rssScan": Double(afterScan?.now ?? 0), "hwmScan": Double(afterScan?.peak ?? 0),
            "changesBytes": Double(status == 200 ? bytes : -1),
        ]
        let json = (try? JSONSerialization.data(withJSONObject: result)).map { String(decoding: $0, as: UTF8.self) }
        print("OPENED " + (json ?? "{}"))
        engine.close()
        exit(0)
    }

    /// Saves `count` revisions of a design document (each save compiles its functions), queries its
    /// view and runs its validation once per revision, in an engine without a data directory (so the
    /// memory is the JavaScript's): this process's resident memory growth per save, after a warm-up.
    static func designDocumentSaves(count: Int, name: String) throws -> Row {
        let engine = try CouchEngine(options: CouchEngine.Options())
        defer { engine.close() }
        try expect(Engine.send(engine, "PUT", "/bench").0, [201], "PUT /bench")
        for index in 0..<20 {
            try expect(Engine.send(engine, "PUT", "/bench/d\(index)", body: Data(document(index).utf8)).0, [201], "PUT")
        }
        var rev: String?
        func save(_ round: Int) throws {
            var ddoc: [String: Any] = [
                "views": [
                    "v": [
                        "map": """
                        function (doc) {
                          function label(t) { return t.toUpperCase() + \(round) }
                          (doc.tags || []).forEach(function (t) { emit(label(t), doc.n) })
                        }
                        """,
                        "reduce": "_count",
                    ]
                ],
                "validate_doc_update": "function (newDoc) { if (newDoc.bad) { throw({forbidden: 'bad'}) } }",
            ]
            if let rev { ddoc["_rev"] = rev }
            let (status, data) = Engine.send(
                engine, "PUT", "/bench/_design/d", body: try JSONSerialization.data(withJSONObject: ddoc))
            try expect(status, [201], "PUT _design/d")
            rev = (try JSONSerialization.jsonObject(with: data) as? [String: Any])?["rev"] as? String
            try expect(Engine.send(engine, "GET", "/bench/_design/d/_view/v", query: "reduce=false").0, [200], "view")
            try expect(
                Engine.send(engine, "PUT", "/bench/bad\(round)", body: Data("{\"bad\":true}".utf8)).0, [403],
                "validation")
        }
        for round in 0..<20 { try save(round) }
        Measure.resetPeakResident()
        let before = residentMemory()?.now ?? 0
        for round in 20..<(20 + count) { try save(round) }
        Measure.resetPeakResident()
        let after = residentMemory()?.now ?? 0
        return Row(
            name: name, unit: "KiB/save", store: Double(after - before) / 1024 / Double(count), higherIsBetter: false,
            note: "\(count) saves; resident memory growth (VmRSS) over them, per save")
    }

    /// Writes `documents` documents, updates each once, and compacts: the database file's size after
    /// over before (CouchDB: its `sizes.file`).
    static func compaction(documents: Int, couch: PlainClient?, name: String) async throws -> Row {
        let engine = try Engine.temporary("compact")
        defer { engine.remove() }
        try expect(engine.send("PUT", "/bench").0, [201], "PUT /bench")
        let first = batches(0..<documents, batch: 1_000)
        for body in first { try expect(engine.send("POST", "/bench/_bulk_docs", body: body).0, [201], "_bulk_docs") }
        // Each document once more: its first revision becomes garbage.
        let updates = try updateBodies(documents: documents) { id in
            let (status, data) = engine.send("GET", "/bench/\(id)")
            try expect(status, [200], "GET \(id)")
            return data
        }
        for body in updates { try expect(engine.send("POST", "/bench/_bulk_docs", body: body).0, [201], "_bulk_docs") }
        let before = engine.databaseFileSizes
        try expect(engine.send("POST", "/bench/_compact", body: Data("{}".utf8)).0, [202], "_compact")
        for _ in 0..<6_000 {
            let (_, info) = engine.send("GET", "/bench")
            let running = (try? JSONSerialization.jsonObject(with: info) as? [String: Any])?["compact_running"] as? Bool
            if running == false { break }
            usleep(10_000)
        }
        let after = engine.databaseFileSizes
        var couchRatio: Double?
        if let couch {
            couchRatio = try? await couchCompaction(couch, documents: documents, first: first)
        }
        return Row(
            name: name, unit: "after/before", store: Double(after.file) / Double(max(before.file, 1)),
            couchDB: couchRatio, higherIsBetter: false,
            note: "\(documents) docs; database file \(before.file / 1024) KiB → \(after.file / 1024) KiB; "
                + "with its index snapshot \((before.file + before.index) / 1024) KiB → "
                + "\((after.file + after.index) / 1024) KiB "
                + String(
                    format: "(%.3f)", Double(after.file + after.index) / Double(max(before.file + before.index, 1))))
    }

    /// `_bulk_docs` bodies updating each document once (the current revisions read with `read`).
    static func updateBodies(documents: Int, read: (String) throws -> Data) throws -> [Data] {
        var bodies: [Data] = []
        var docs: [String] = []
        for index in 0..<documents {
            guard var doc = try JSONSerialization.jsonObject(with: read(documentID(index))) as? [String: Any] else {
                throw Failure(description: "GET \(documentID(index)) is not an object")
            }
            doc["n"] = index + 1
            docs.append(String(decoding: try JSONSerialization.data(withJSONObject: doc), as: UTF8.self))
            if docs.count == 1_000 || index == documents - 1 {
                bodies.append(Data("{\"docs\":[\(docs.joined(separator: ","))]}".utf8))
                docs = []
            }
        }
        return bodies
    }

    static func couchCompaction(_ couch: PlainClient, documents: Int, first: [Data]) async throws -> Double {
        let db = "bench-compact-\(UUID().uuidString.lowercased().prefix(8))"
        _ = try await couch.send(couch.request("PUT", "/\(db)"))
        do {
            let ratio = try await couchCompaction(couch, db: db, documents: documents, first: first)
            _ = try? await couch.send(couch.request("DELETE", "/\(db)"))
            return ratio
        } catch {
            _ = try? await couch.send(couch.request("DELETE", "/\(db)"))
            throw error
        }
    }

    static func couchCompaction(_ couch: PlainClient, db: String, documents: Int, first: [Data]) async throws -> Double
    {
        for body in first { try await couchBulkDocs(couch, db: db, body: body) }
        var current: [String: Data] = [:]
        let all = try await couch.send(couch.request("GET", "/\(db)/_all_docs?include_docs=true"))
        let rows = (try JSONSerialization.jsonObject(with: all) as? [String: Any])?["rows"] as? [[String: Any]] ?? []
        for row in rows {
            if let id = row["id"] as? String, let doc = row["doc"] {
                current[id] = try JSONSerialization.data(withJSONObject: doc)
            }
        }
        let updates = try updateBodies(documents: documents) { id in
            guard let data = current[id] else { throw Failure(description: "CouchDB lost \(id)") }
            return data
        }
        for body in updates { try await couchBulkDocs(couch, db: db, body: body) }
        func fileSize() async throws -> Double {
            let info = try await couch.send(couch.request("GET", "/\(db)"))
            let object = try JSONSerialization.jsonObject(with: info) as? [String: Any]
            return ((object?["sizes"] as? [String: Any])?["file"] as? NSNumber)?.doubleValue ?? .nan
        }
        let before = try await fileSize()
        _ = try await couch.send(couch.request("POST", "/\(db)/_compact", body: Data("{}".utf8)))
        for _ in 0..<600 {
            try await Task.sleep(nanoseconds: 100_000_000)
            let info = try await couch.send(couch.request("GET", "/\(db)"))
            let object = try JSONSerialization.jsonObject(with: info) as? [String: Any]
            if object?["compact_running"] as? Bool == false { break }
        }
        return try await fileSize() / before
    }

    // MARK: - The table

    static func table(_ rows: [Row]) -> String {
        var lines = [
            "| store workload | unit | CouchStore | CouchDB 3.5 | CouchStore / CouchDB | notes |",
            "|---|---|---:|---:|---:|---|",
        ]
        for row in rows {
            let couch = row.couchDB.map(format) ?? "—"
            let ratio = row.couchDB.map { format(row.store / $0) } ?? "—"
            lines.append("| \(row.name) | \(row.unit) | \(format(row.store)) | \(couch) | \(ratio) | \(row.note) |")
        }
        return lines.joined(separator: "\n")
    }

    static func format(_ value: Double) -> String {
        if value.isNaN { return "n/a" }
        if value >= 100 { return String(format: "%.0f", value) }
        if value >= 10 { return String(format: "%.1f", value) }
        return String(format: "%.3f", value)
    }

    static let legend = """
        Store rows: CouchStore's engine in this process (CouchEngine.handle, no HTTP, a data directory in a
        temporary folder), and the same work against the CouchDB of COUCHDB_URL over HTTP when it is set
        (— otherwise). CouchDB's own replicator is timed by the replication rows (--sync-only), beside
        SwiftCouchSync doing the same copy. Throughputs: higher is better; times, memory and size ratios:
        lower is better. The open row builds its database once, then opens it in a
        child process (resident memory from VmRSS, peak from VmHWM of /proc/self/status, the child's
        alone). Sizes are the data directory's total.
        """
}
