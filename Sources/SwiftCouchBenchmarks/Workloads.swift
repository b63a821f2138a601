import Foundation
import SwiftCouch

/// How much work each row does.
struct BenchmarkSizes {
    var pairsSequential: Int
    var pairsConcurrent: Int
    var bulkDocuments: Int
    var datedDocuments: Int
    var changes: Int
    var attachmentBytes: Int
    /// How many times each row is measured; the report shows the median.
    var repeats: Int

    init(quick: Bool, repeats: Int? = nil) {
        pairsSequential = quick ? 200 : 2_000
        pairsConcurrent = quick ? 400 : 8_000
        bulkDocuments = quick ? 5_000 : 100_000
        datedDocuments = quick ? 2_000 : 20_000
        changes = quick ? 5_000 : 100_000
        attachmentBytes = quick ? 16 << 20 : 256 << 20
        self.repeats = max(1, repeats ?? (quick ? 1 : 3))
    }
}

/// What one operation of a row is, for per-operation figures.
enum OperationUnit: String, Sendable {
    case pair = "PUT+GET pair"
    case document = "document"
    case change = "change"
    case mebibyte = "MiB"
}

/// One row of the table: the same work done by the library and by plain URLSession.
struct Workload: Sendable {
    let name: String
    var unit: OperationUnit = .document
    /// The issue's target for the library's client CPU per operation on the socket transport, in
    /// seconds (nil: no target). Reported, never asserted.
    var cpuTarget: Double? = nil
    let measureLibrary: @Sendable (CouchDBClient) async throws -> Measurement
    let measurePlain: @Sendable (PlainClient) async throws -> Measurement
    /// Run once after every repeat of the row (deletes what the rows kept for each other).
    var cleanUp: @Sendable (PlainClient) async -> Void = { _ in }

    static func all(sizes: BenchmarkSizes) -> [Workload] {
        [
            putGetPairs(count: sizes.pairsSequential, concurrency: 1),
            putGetPairs(count: sizes.pairsConcurrent, concurrency: 16),
            bulkInsertAndRead(count: sizes.bulkDocuments),
            datedDocuments(count: sizes.datedDocuments),
            attachmentTransfers(bytes: sizes.attachmentBytes),
            followChanges(count: sizes.changes),
        ].flatMap { $0 }
    }

    /// A database name for one run.
    static func database(_ purpose: String) -> String {
        "bench-\(purpose)-\(UUID().uuidString.lowercased().prefix(8))"
    }

    // MARK: PUT + GET

    static func putGetPairs(count: Int, concurrency: Int) -> [Workload] {
        let name = "PUT+GET pairs, concurrency \(concurrency)"
        let perWorker = max(1, count / concurrency)
        return [
            Workload(
                name: name, unit: .pair, cpuTarget: 0.000_30,
                measureLibrary: { client in
                    let db = database("pairs")
                    try await client.execute(CreateDatabaseOperation(name: db))
                    let measurement = try await Measure.run {
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            for worker in 0..<concurrency {
                                group.addTask {
                                    for index in 0..<perWorker {
                                        let id = "w\(worker)-\(index)"
                                        try await client.execute(
                                            PutDocumentOperation(
                                                database: db, id: id, document: SmallDocument(n: index, text: id)))
                                        _ = try await client.value(
                                            GetDocumentOperation<SmallDocument>(database: db, id: id))
                                    }
                                }
                            }
                            try await group.waitForAll()
                        }
                        return perWorker * concurrency
                    }
                    _ = try? await client.execute(DeleteDatabaseOperation(name: db))
                    return measurement
                },
                measurePlain: { plain in
                    let db = database("pairs")
                    _ = try await plain.put("/\(db)", json: "")
                    let measurement = try await Measure.run {
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            for worker in 0..<concurrency {
                                group.addTask {
                                    for index in 0..<perWorker {
                                        let id = "w\(worker)-\(index)"
                                        _ = try await plain.put(
                                            "/\(db)/\(id)", json: SmallDocument(n: index, text: id).json)
                                        _ = try await plain.get("/\(db)/\(id)")
                                    }
                                }
                            }
                            try await group.waitForAll()
                        }
                        return perWorker * concurrency
                    }
                    _ = try? await plain.delete("/\(db)")
                    return measurement
                })
        ]
    }

    // MARK: Bulk insert, then read back through _all_docs?include_docs=true

    static func bulkInsertAndRead(count: Int) -> [Workload] {
        let batch = 1_000
        let shared = SharedDatabases()
        let insert = Workload(
            name: "_bulk_docs, \(count) documents in batches of \(batch)", unit: .document, cpuTarget: 0.000_004,
            measureLibrary: { client in
                let db = database("bulk")
                try await client.execute(CreateDatabaseOperation(name: db))
                if let previous = shared.set(library: db) {
                    _ = try? await client.execute(DeleteDatabaseOperation(name: previous))
                }
                // The ids are made before the clock starts (String(format:) would cost more than the write).
                let ids = documentIDs(count)
                return try await Measure.run {
                    let writer = BulkWriter<SmallDocument>(
                        client: client, database: db, options: .init(batchSize: batch, maximumBatchesInFlight: 4))
                    for index in 0..<count {
                        try await writer.add(SmallDocument.numbered(index, id: ids[index]))
                    }
                    let results = try await writer.finish()
                    return results.count { $0.rev != nil }
                }
            },
            measurePlain: { plain in
                let db = database("bulk")
                _ = try await plain.put("/\(db)", json: "")
                if let previous = shared.set(plain: db) { _ = try? await plain.delete("/\(previous)") }
                let ids = documentIDs(count)
                return try await Measure.run {
                    var written = 0
                    for start in stride(from: 0, to: count, by: batch) {
                        let docs = (start..<min(start + batch, count)).map {
                            SmallDocument.numbered($0, id: ids[$0]).json
                        }
                        let rows =
                            try await plain.post("/\(db)/_bulk_docs", body: bulkDocsBody(docs)) as? [[String: Any]]
                            ?? []
                        written += rows.count { $0["rev"] != nil }
                    }
                    return written
                }
            })
        let read = Workload(
            name: "_all_docs?include_docs=true, \(count) documents streamed", unit: .document, cpuTarget: 0.000_010,
            measureLibrary: { client in
                guard let db = shared.library else { throw PlainClient.Failure(description: "no bulk database") }
                let measurement = try await Measure.run {
                    try await LibraryReads.allDocuments(SmallDocument.self, client: client, database: db)
                }
                // Kept for the other transports' reads; the baseline row deletes it.
                return measurement
            },
            measurePlain: { plain in
                guard let db = shared.plain else { throw PlainClient.Failure(description: "no bulk database") }
                return try await Measure.run {
                    let object = try await plain.get("/\(db)/_all_docs?include_docs=true")
                    return (object["rows"] as? [[String: Any]])?.count ?? 0
                }
            },
            cleanUp: { plain in
                for name in [shared.plain, shared.library].compactMap({ $0 }) {
                    _ = try? await plain.delete("/\(name)")
                }
            })
        return [insert, read]
    }

    // MARK: Documents with dates: written through _bulk_docs, read back through _all_docs

    /// Each document carries two `Date`s, written and read as ISO-8601 text (the client's default
    /// date coding). The baseline writes the text with one reused `ISO8601DateFormatter` and reads
    /// it back with the same formatter after `JSONSerialization`, as a careful Foundation user would.
    static func datedDocuments(count: Int) -> [Workload] {
        let batch = 1_000
        let start = Date(timeIntervalSince1970: 1_764_066_600)
        @Sendable func document(_ index: Int, id: String) -> DatedDocument {
            DatedDocument(
                _id: id, n: index, created: start.addingTimeInterval(Double(index) * 60.25),
                modified: start.addingTimeInterval(Double(index) * 3600))
        }
        return [
            Workload(
                name: "\(count) documents with two Dates, written by _bulk_docs and read back streamed",
                unit: .document,
                measureLibrary: { client in
                    let db = database("dated")
                    try await client.execute(CreateDatabaseOperation(name: db))
                    let ids = documentIDs(count)
                    let measurement = try await Measure.run {
                        let writer = BulkWriter<DatedDocument>(
                            client: client, database: db, options: .init(batchSize: batch, maximumBatchesInFlight: 4))
                        for index in 0..<count { try await writer.add(document(index, id: ids[index])) }
                        _ = try await writer.finish()
                        return try await LibraryReads.allDocuments(DatedDocument.self, client: client, database: db)
                    }
                    _ = try? await client.execute(DeleteDatabaseOperation(name: db))
                    return measurement
                },
                measurePlain: { plain in
                    let db = database("dated")
                    _ = try await plain.put("/\(db)", json: "")
                    let ids = documentIDs(count)
                    let measurement = try await Measure.run {
                        let formatter = ISO8601DateFormatter()
                        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
                        for first in stride(from: 0, to: count, by: batch) {
                            let docs = (first..<min(first + batch, count)).map {
                                document($0, id: ids[$0]).json(formatter)
                            }
                            _ = try await plain.post("/\(db)/_bulk_docs", body: bulkDocsBody(docs))
                        }
                        let object = try await plain.get("/\(db)/_all_docs?include_docs=true")
                        var read = 0
                        for row in object["rows"] as? [[String: Any]] ?? [] {
                            guard let doc = row["doc"] as? [String: Any], let created = doc["created"] as? String,
                                let modified = doc["modified"] as? String,
                                formatter.date(from: created) != nil, formatter.date(from: modified) != nil
                            else { continue }
                            read += 1
                        }
                        return read
                    }
                    _ = try? await plain.delete("/\(db)")
                    return measurement
                })
        ]
    }

    /// A `_bulk_docs` request body of documents already written as JSON text, for the baselines.
    static func bulkDocsBody(_ documents: [String]) -> Data {
        Data(("{\"docs\":[" + documents.joined(separator: ",") + "]}").utf8)
    }

    /// `doc0000000`, `doc0000001`, …: the bulk rows' ids, made outside the measured time.
    static func documentIDs(_ count: Int) -> [String] {
        (0..<count).map(SmallDocument.documentID)
    }

    // MARK: Following the changes feed

    static func followChanges(count: Int) -> [Workload] {
        let batch = 10_000
        @Sendable func fill(_ write: (Data) async throws -> Void) async throws {
            for start in stride(from: 0, to: count, by: 2_000) {
                let docs = (start..<Swift.min(start + 2_000, count)).map { #"{"_id":"c\#($0)","n":\#($0)}"# }
                try await write(bulkDocsBody(docs))
            }
        }
        return [
            Workload(
                name: "follow a \(count)-change feed", unit: .change,
                measureLibrary: { client in
                    let db = database("changes")
                    try await client.execute(CreateDatabaseOperation(name: db))
                    for start in stride(from: 0, to: count, by: 2_000) {
                        let documents = (start..<Swift.min(start + 2_000, count)).map {
                            SmallDocument(_id: "c\($0)", n: $0, text: "")
                        }
                        _ = try await client.value(BulkDocsOperation(database: db, documents: documents))
                    }
                    let measurement = try await Measure.run {
                        try await LibraryReads.changes(client: client, database: db)
                    }
                    _ = try? await client.execute(DeleteDatabaseOperation(name: db))
                    return measurement
                },
                measurePlain: { plain in
                    let db = database("changes")
                    _ = try await plain.put("/\(db)", json: "")
                    try await fill { _ = try await plain.post("/\(db)/_bulk_docs", body: $0) }
                    let measurement = try await Measure.run {
                        var seen = 0
                        var since = "0"
                        while true {
                            let page = try await plain.get("/\(db)/_changes?limit=\(batch)&since=\(since)")
                            let results = page["results"] as? [[String: Any]] ?? []
                            seen += results.count
                            since =
                                (page["last_seq"] as? String).map {
                                    $0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0
                                } ?? "now"
                            if results.count < batch { break }
                        }
                        return seen
                    }
                    _ = try? await plain.delete("/\(db)")
                    return measurement
                })
        ]
    }

    // MARK: Attachments

    static func attachmentTransfers(bytes: Int) -> [Workload] {
        let megabytes = max(1, bytes >> 20)
        let source = FileManager.default.temporaryDirectory.appendingPathComponent("swiftcouch-bench-\(megabytes).bin")
        @Sendable func prepare() throws {
            if let size = (try? FileManager.default.attributesOfItem(atPath: source.path)[.size]) as? NSNumber,
                size.intValue == bytes
            {
                return
            }
            guard FileManager.default.createFile(atPath: source.path, contents: nil) else {
                throw PlainClient.Failure(description: "cannot create \(source.path)")
            }
            let handle = try FileHandle(forWritingTo: source)
            var words = [UInt64](repeating: 0, count: 1 << 17)  // 1 MiB
            var generator = SystemRandomNumberGenerator()
            for _ in 0..<megabytes {
                for index in words.indices { words[index] = generator.next() }
                try words.withUnsafeBytes { try handle.write(contentsOf: Data($0)) }
            }
            try handle.close()
        }
        let target = FileManager.default.temporaryDirectory.appendingPathComponent("swiftcouch-bench-out.bin")
        @Sendable func libraryUpload(_ client: CouchDBClient, _ db: String) async throws {
            _ = try await client.upload(
                UploadAttachmentOperation(
                    database: db, documentID: "blob", name: "data.bin", revision: nil,
                    contentType: "application/octet-stream", body: try .file(source))
            ).value
        }
        @Sendable func check(_ file: URL) throws -> Int {
            let size = (try FileManager.default.attributesOfItem(atPath: file.path)[.size] as? NSNumber)?.intValue
            guard size == bytes else {
                throw PlainClient.Failure(description: "downloaded \(size ?? -1) bytes, not \(bytes)")
            }
            return megabytes
        }
        let upload = Workload(
            name: "\(megabytes) MiB attachment, upload from a file", unit: .mebibyte,
            measureLibrary: { client in
                try prepare()
                let db = database("att")
                try await client.execute(CreateDatabaseOperation(name: db))
                let measurement = try await Measure.run {
                    try await libraryUpload(client, db)
                    return megabytes
                }
                _ = try? await client.execute(DeleteDatabaseOperation(name: db))
                return measurement
            },
            measurePlain: { plain in
                try prepare()
                let db = database("att")
                _ = try await plain.put("/\(db)", json: "")
                let measurement = try await Measure.run {
                    try await plain.upload(
                        "/\(db)/blob/data.bin", file: source, contentType: "application/octet-stream")
                    return megabytes
                }
                _ = try? await plain.delete("/\(db)")
                return measurement
            })
        let download = Workload(
            name: "\(megabytes) MiB attachment, download to a file", unit: .mebibyte,
            measureLibrary: { client in
                try prepare()
                let db = database("att")
                try await client.execute(CreateDatabaseOperation(name: db))
                try await libraryUpload(client, db)
                let measurement = try await Measure.run {
                    _ = try await client.download(
                        GetAttachmentOperation(database: db, documentID: "blob", name: "data.bin"), to: target
                    ).value
                    return try check(target)
                }
                _ = try? await client.execute(DeleteDatabaseOperation(name: db))
                return measurement
            },
            measurePlain: { plain in
                try prepare()
                let db = database("att")
                _ = try await plain.put("/\(db)", json: "")
                try await plain.upload("/\(db)/blob/data.bin", file: source, contentType: "application/octet-stream")
                let measurement = try await Measure.run {
                    try await plain.download("/\(db)/blob/data.bin", to: target)
                    return try check(target)
                }
                _ = try? await plain.delete("/\(db)")
                return measurement
            })
        return [upload, download]
    }
}

/// The benchmarks' document: about 215 bytes of JSON, like a typical small record. Every row that
/// writes numbered documents (the bulk rows, the store rows, the replication rows) makes them with
/// ``numbered(_:id:)``, so they all measure the same document.
struct SmallDocument: Codable, Sendable {
    var _id: String?
    var _rev: String?
    var n: Int
    var text: String
    var artist = "Joni Mitchell"
    var album = "Blue"
    var year = 1971
    var tags = ["folk", "singer-songwriter", "1970s"]
    var rating = 4.5
    var available = true
    var label = "Reprise Records"
    var country = "Canada"

    init(_id: String? = nil, n: Int, text: String) {
        self._id = _id
        self.n = n
        self.text = text
    }

    /// The size of ``numbered(_:id:)``'s JSON, `_id` included.
    static let numberedSize = 215

    /// The JSON's length with an empty `_id` and `text` and a one-digit `n`.
    private static let emptyLength = SmallDocument(_id: "", n: 0, text: "").json.utf8.count

    /// Document number `index`: `_id` `doc0000000`, `doc0000001`, … (or `id`, made beforehand so that
    /// a measured loop does not pay for `String(format:)`), its `text` filled with `x` so that its
    /// JSON is ``numberedSize`` bytes.
    static func numbered(_ index: Int, id: String? = nil) -> SmallDocument {
        let id = id ?? documentID(index)
        var digits = index < 0 ? 2 : 1
        var rest = index.magnitude / 10
        while rest > 0 {
            digits += 1
            rest /= 10
        }
        let fill = numberedSize - emptyLength - id.utf8.count - (digits - 1)
        return SmallDocument(_id: id, n: index, text: String(repeating: "x", count: max(0, fill)))
    }

    /// `doc0000000`, `doc0000001`, …: the numbered documents' ids (sorted as their numbers are).
    static func documentID(_ index: Int) -> String { String(format: "doc%07d", index) }

    /// `_bulk_docs` bodies of the numbered documents `range`, `batch` at a time.
    static func bulkBodies(_ range: Range<Int>, batch: Int) -> [Data] {
        stride(from: range.lowerBound, to: range.upperBound, by: batch).map { start in
            Workload.bulkDocsBody((start..<min(start + batch, range.upperBound)).map { numbered($0).json })
        }
    }

    /// The same document as JSON text, written by hand, for the plain-Foundation baseline.
    var json: String {
        let id = _id.map { #""_id":"\#($0)","# } ?? ""
        return #"{\#(id)"n":\#(n),"text":"\#(text)","artist":"\#(artist)","album":"\#(album)","year":\#(year),"#
            + #""tags":["folk","singer-songwriter","1970s"],"rating":\#(rating),"available":\#(available),"#
            + #""label":"\#(label)","country":"\#(country)"}"#
    }
}

/// The databases the insert rows made, for the read rows that follow.
final class SharedDatabases: @unchecked Sendable {
    // @unchecked Sendable: both names are only touched under `lock`.
    private let lock = NSLock()
    private var libraryName: String?
    private var plainName: String?

    private var libraryNames: [String] = []

    /// Records the library's newest database; returns the one it replaces (to delete).
    @discardableResult
    func set(library: String) -> String? {
        lock.withLock {
            defer { libraryName = library }
            libraryNames.append(library)
            return libraryName
        }
    }
    /// Records the baseline's newest database; returns the one it replaces (to delete).
    @discardableResult
    func set(plain: String) -> String? {
        lock.withLock {
            defer { plainName = plain }
            return plainName
        }
    }
    var library: String? { lock.withLock { libraryName } }
    var plain: String? { lock.withLock { plainName } }
}

/// A small document with two dates (ISO-8601 text in the JSON).
struct DatedDocument: Codable, Sendable {
    var _id: String?
    var _rev: String?
    var n: Int
    var created: Date
    var modified: Date
    var title = "Blue"

    init(_id: String?, n: Int, created: Date, modified: Date) {
        self._id = _id
        self.n = n
        self.created = created
        self.modified = modified
    }

    /// The same document as JSON text, its dates written with `formatter`, for the baseline.
    func json(_ formatter: ISO8601DateFormatter) -> String {
        let id = _id.map { #""_id":"\#($0)","# } ?? ""
        return #"{\#(id)"n":\#(n),"created":"\#(formatter.string(from: created))","#
            + #""modified":"\#(formatter.string(from: modified))","title":"\#(title)"}"#
    }
}
