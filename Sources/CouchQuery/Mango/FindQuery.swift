import Foundation

/// One `POST /{db}/_find` request, checked and planned, that reads a database a batch at a time.
///
/// Creating it checks the request and chooses the index (every error a `_find` answers with is thrown
/// then, before any document is read). ``run(scan:fetch:emit:)`` then reads the database twice, holding
/// no more than the index: a scan computes each document's index key (keeping the key and the id only),
/// the keys are ordered as the index orders them, and the matching documents are fetched by id a batch at
/// a time and handed to `emit` in the answer's order. ``MangoDocument`` bodies are never all held at once.
public final class MangoFindQuery: @unchecked Sendable {
    // @unchecked: every stored property is a constant set by init; run(scan:fetch:emit:) keeps its state local.
    /// How many documents are fetched, and emitted, at a time.
    public static let batchSize = 1000

    private let started = Date()
    private let options: FindOptions
    private let index: MangoIndex?
    private let keys: MangoFind.Keys?
    private let position: MangoBookmark.Position?

    /// Checks and plans a `_find` request. `designDocuments` are the database's live design documents (the
    /// indexes); `partitionedDatabase` nil means "partitioned when `partition` is given".
    public init(requestBody: JSON, designDocuments: [JSON], partition: String?, partitionedDatabase: Bool?)
        throws(MangoError)
    {
        options = try FindOptions(requestBody, partition: partition)
        let partitioned = partitionedDatabase ?? (partition != nil)
        let plan = try MangoFind.plan(
            options, designDocuments: designDocuments, partitionedDatabase: partitioned, forFind: true)
        index = plan.index
        guard let index = plan.index else {
            keys = nil
            position = nil
            return
        }
        if index.type == "text" || options.selector.isTextSearch {
            throw MangoError(status: 503, error: "required index service unavailable", reason: "text")
        }
        keys = MangoFind.keys(plan)
        position = try options.bookmark.map { (b) throws(MangoError) in try MangoBookmark.decode(b) }
    }

    /// Runs the query. `scan` calls its argument with every live document of the database (or partition),
    /// ordered by id, design documents included, and returns false if it could not (a read failed); `fetch`
    /// returns the documents with the given ids (nil for one gone since); `emit` receives the answer's
    /// documents a batch at a time and returns false to stop. Returns the members that follow `docs` in the
    /// answer (`bookmark`, `execution_stats`, `warning`), or nil when `scan` or `emit` stopped it.
    public func run(
        scan: ((MangoDocument) -> Void) -> Bool, fetch: ([String]) -> [MangoDocument?], emit: ([JSON]) -> Bool
    ) -> [(String, JSON)]? {
        guard let index, let k = keys else { return [] }
        if k.unsatisfiable { return [] }
        let descending = options.sort.first?.direction == "desc"
        let covering = MangoFind.covers(index, MangoFind.requiredFields(options))

        // The index rows: key and id only.
        struct Row {
            var key: JSON
            var id: String
        }
        var rows: [Row] = []
        if index.isSpecial {
            let scanned = scan { d in
                let key = JSON.string(d.id)
                if let s = k.start, MangoFind.compareRaw(.value(key), s) < 0 { return }
                if let e = k.end, MangoFind.compareRaw(.value(key), e) > 0 { return }
                rows.append(Row(key: key, id: d.id))
            }
            guard scanned else { return nil }
            rows.sort { Collation.compareRaw($0.id, $1.id) < 0 }
        } else {
            let columns = index.columns.map { (try? FieldPath.parse($0)) ?? [$0] }
            let partial = index.partialFilterSelector.flatMap { try? SelectorNode.parse($0) }
            let scanned = scan { d in
                if d.id.hasPrefix("_design/") { return }
                if let partial, !partial.matches(d.body) { return }
                var values: [JSON] = []
                for c in columns {
                    guard case .found(let v) = FieldPath.get(d.body, c) else { break }
                    values.append(v)
                }
                guard values.count == columns.count else { return }
                let keyList = values.map(KeyBound.value)
                if let s = k.startList, MangoFind.compareLists(keyList, s) < 0 { return }
                if let e = k.endList, MangoFind.compareLists(keyList, e) > 0 { return }
                rows.append(Row(key: .array(values), id: d.id))
            }
            guard scanned else { return nil }
            rows.sort {
                let c = Collation.compare($0.key, $1.key)
                return c != 0 ? c < 0 : Collation.compareRaw($0.id, $1.id) < 0
            }
        }
        if descending { rows.reverse() }
        var skip = options.skip
        if let position {
            if skip < Int.max { skip += 1 }  // the bookmark's own row (a skip of Int.max skips everything anyway)
            rows = rows.filter { row in
                let c =
                    index.isSpecial
                    ? Collation.compareRaw(row.id, position.key.stringValue ?? position.docID)
                    : Collation.compare(row.key, position.key)
                if c != 0 { return descending ? c < 0 : c > 0 }
                if index.isSpecial { return true }
                let d = Collation.compareRaw(row.id, position.docID)
                return descending ? d <= 0 : d >= 0
            }
        }

        var limit = options.limit
        var keysExamined = 0
        var docsExamined = 0
        var quorumExamined = 0
        var resultsReturned = 0
        var bookmarkPosition: MangoBookmark.Position?
        var start = 0
        var finished = false
        while start < rows.count, !finished {
            let end = min(start + Self.batchSize, rows.count)
            let batch = rows[start..<end]
            start = end
            // A covering index answers from its keys: no document is read.
            let fetched: [MangoDocument?] = covering ? [] : fetch(batch.map(\.id))
            var docs: [JSON] = []
            for (offset, row) in batch.enumerated() {
                keysExamined += 1
                var doc: JSON
                if covering {
                    doc = .object([("_id", .string(row.id))])
                    if case .array(let values) = row.key {
                        for (col, v) in zip(index.columns, values) {
                            doc = FieldPath.set(doc, ((try? FieldPath.parse(col)) ?? [col])[...], v)
                        }
                    }
                } else {
                    if options.r > 1 { quorumExamined += 1 } else { docsExamined += 1 }
                    // A document deleted since the scan is no longer there to answer with.
                    guard offset < fetched.count, let found = fetched[offset] else { continue }
                    doc = found.body
                    if options.conflicts, !found.conflicts.isEmpty {
                        doc = doc.setting("_conflicts", .array(found.conflicts.map(JSON.string)))
                    }
                }
                if index.isSpecial && row.id.hasPrefix("_design/") { continue }
                guard options.selector.matches(doc) else { continue }
                if limit > 0 { bookmarkPosition = MangoBookmark.Position(docID: row.id, key: row.key) }
                if skip > 0 {
                    skip -= 1
                    continue
                }
                if limit > 0 {
                    docs.append(FieldPath.extract(doc, options.fields))
                    limit -= 1
                    resultsReturned += 1
                    continue
                }
                finished = true
                break
            }
            if !docs.isEmpty, !emit(docs) { return nil }
        }

        var response: [(String, JSON)] = []
        if let bookmarkPosition {
            response.append(("bookmark", .string(MangoBookmark.encode(bookmarkPosition))))
        } else {
            response.append(("bookmark", options.bookmark.map(JSON.string) ?? "nil"))
        }
        if options.executionStats {
            let ms = (Date().timeIntervalSince(started) * 1_000_000).rounded() / 1000
            response.append(
                (
                    "execution_stats",
                    .object([
                        ("total_keys_examined", .int(Int64(keysExamined))),
                        ("total_docs_examined", .int(Int64(docsExamined))),
                        ("total_quorum_docs_examined", .int(Int64(quorumExamined))),
                        ("results_returned", .int(Int64(resultsReturned))),
                        ("execution_time_ms", .double(ms)),
                    ])
                ))
        }
        if let warning = MangoFind.warning(
            index: index, options: options, scanned: docsExamined + quorumExamined, returned: resultsReturned)
        {
            response.append(("warning", .string(warning)))
        }
        return response
    }
}
