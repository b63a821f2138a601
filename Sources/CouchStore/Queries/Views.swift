import CouchQuery
import Foundation

/// One row of a view index.
struct ViewRow {
    var key: JSON
    var id: String
    var value: JSON
}

extension CouchEngine {
    /// Builds the rows of a view the engine can compute without JavaScript: views of `language: "query"`
    /// design documents (Mango JSON indexes), whose map emits `[field values…] → null` for documents that
    /// have every field. Returns nil for JavaScript views. Lock held.
    func nativeViewRows(_ db: Database, ddoc: JSON, view: JSON, partition: String?) throws(CouchError) -> [ViewRow]? {
        guard ddoc["language"]?.stringValue == "query", let map = view["map"], map.isObject else { return nil }
        var fields: [String] = []
        if let list = map["fields"]?.arrayValue {
            fields = list.compactMap { $0.stringValue ?? $0.objectValue?.first?.0 }
        } else {
            fields = (map["fields"] ?? [:]).members.map(\.0)
        }
        if fields.isEmpty, let def = view["options"]?["def"]?["fields"]?.arrayValue {
            fields = def.compactMap { $0.stringValue ?? $0.objectValue?.first?.0 }
        }
        var filter: MangoSelector?
        if let partial = map["partial_filter_selector"], partial.isObject, !partial.members.isEmpty {
            do {
                filter = try MangoSelector(partial)
            } catch {
                throw error.couchError
            }
        }
        let prefix = partition.map { $0 + ":" }
        var rows: [ViewRow] = []
        for id in db.sortedIDs where !id.hasPrefix("_design/") {
            if let prefix, !id.hasPrefix(prefix) { continue }
            guard let entry = db.docs[id], let winner = entry.winner, !winner.deleted else { continue }
            let doc = renderDocument(entry, winner, DocRenderOptions())
            if let filter, !filter.matches(doc) { continue }
            var key: [JSON] = []
            for field in fields {
                guard let value = fieldValue(doc, field) else { break }
                key.append(value)
            }
            guard key.count == fields.count else { continue }
            rows.append(ViewRow(key: .array(key), id: id, value: .null))
        }
        return rows.sorted { a, b in
            let c = Collation.compare(a.key, b.key)
            return c != 0 ? c < 0 : Collation.compareRaw(a.id, b.id) < 0
        }
    }

    /// A dotted field path (`a.b.c`, `\.` escaping a dot) inside a document.
    private func fieldValue(_ doc: JSON, _ path: String) -> JSON? {
        var parts: [String] = []
        var current = ""
        var escape = false
        for c in path {
            if escape {
                current.append(c)
                escape = false
            } else if c == "\\" {
                escape = true
            } else if c == "." {
                parts.append(current)
                current = ""
            } else {
                current.append(c)
            }
        }
        parts.append(current)
        var value: JSON? = doc
        for part in parts { value = value?[part] }
        return value
    }

    /// A view query's answer, ready to stream: its head and the rows it selected from the index, rendered a
    /// batch at a time (documents read for `include_docs`, reduce values computed, then).
    struct ViewOutput: Sendable {
        let write: @Sendable (RowStreamWriter) -> Void

        /// The whole body, for answers that hold one view result inside another (`queries`, `_list`).
        func text() throws(CouchError) -> String {
            let write = self.write
            guard
                let data = Reply.collect(
                    .stream { writer in write(RowStreamWriter(writer, separator: CouchEngine.rowSeparator)) })
            else { throw CouchError(500, "file_error", "a stored document could not be read") }
            return String(decoding: data, as: UTF8.self)
        }
    }

    /// Runs a view query over computed rows: ranges, keys, direction, paging, include_docs and built-in reduces.
    /// Everything that can be refused is checked, and the first batch of reduce values computed (a failing
    /// reduce function is still an error status), before the answer begins.
    func runView(
        _ db: Database, rows: [ViewRow], reduce: String?, args: ViewArgs,
        jsReduce: (@Sendable ([ViewRow]) throws(CouchError) -> JSON)? = nil
    ) throws(CouchError) -> ViewOutput {
        func inRange(_ row: ViewRow) -> Bool {
            let dir = args.descending ? -1 : 1
            if let key = args.key {
                return Collation.compare(row.key, key) == 0
            }
            if let start = args.startKey {
                var c = Collation.compare(row.key, start) * dir
                if c == 0, let sid = args.startDocID { c = Collation.compareRaw(row.id, sid) * dir }
                if c < 0 { return false }
            }
            if let end = args.endKey {
                var c = Collation.compare(row.key, end) * dir
                if c == 0, let eid = args.endDocID { c = Collation.compareRaw(row.id, eid) * dir }
                if c > 0 || (c == 0 && !args.inclusiveEnd) { return false }
            }
            return true
        }
        let ordered = args.descending ? Array(rows.reversed()) : rows
        var selected: [ViewRow]
        var offset = 0
        if let keys = args.keys {
            selected = keys.flatMap { key in ordered.filter { Collation.compare($0.key, key) == 0 } }
            // CouchDB reports an offset for key queries too (where the first row sits).
            if let first = selected.first {
                offset = ordered.firstIndex { $0.id == first.id && $0.key == first.key } ?? 0
            }
        } else {
            selected = ordered.filter(inRange)
            if let first = selected.first,
                let index = ordered.firstIndex(where: { $0.id == first.id && $0.key == first.key })
            {
                offset = index
            } else {
                offset = ordered.count
            }
        }
        if let reduce, args.reduce != false {
            let groupLevel: Int? = args.group ? Int.max : args.groupLevel
            // The groups as ranges of the selected index rows: a reduce answer holds no more than the index.
            var groups: [(key: JSON, rows: Range<Int>)] = []
            for (index, row) in selected.enumerated() {
                var key: JSON = .null
                if let level = groupLevel {
                    if case .array(let items) = row.key, level != Int.max {
                        key = .array(Array(items.prefix(level)))
                    } else {
                        key = row.key
                    }
                }
                if let last = groups.last, groupLevel != nil ? Collation.compare(last.key, key) == 0 : true {
                    groups[groups.count - 1].rows = last.rows.lowerBound..<(index + 1)
                } else {
                    groups.append((key, index..<(index + 1)))
                }
            }
            let skipped = groups.dropFirst(args.skip)
            let kept = Array(args.limit.map { skipped.prefix($0) } ?? skipped)
            let reduced = selected
            let reduceRows = { @Sendable (range: Range<Int>) throws(CouchError) -> [JSON] in
                var out: [JSON] = []
                for (key, rows) in kept[range] {
                    let group = Array(reduced[rows])
                    let value: JSON
                    if reduce.hasPrefix("_") {
                        value = self.builtinReduce(reduce, group)
                    } else if let jsReduce {
                        value = try jsReduce(group)
                    } else {
                        value = .null
                    }
                    out.append(JSON.object([("key", key), ("value", value)]))
                }
                return out
            }
            let batch = RowStreamWriter.batchSize
            let first = try reduceRows(0..<min(batch, kept.count))
            return ViewOutput { out in
                guard out.text("{\"rows\":[\r\n"), out.rows(first) else { return }
                var start = first.count
                while start < kept.count {
                    let end = min(start + batch, kept.count)
                    let rows: [JSON]
                    do {
                        rows = try reduceRows(start..<end)
                    } catch {
                        // A reduce function that fails once the answer has begun ends it, as in CouchDB.
                        return out.abort()
                    }
                    guard out.rows(rows) else { return }
                    start = end
                }
                out.text(Self.rowsTail)
            }
        }
        let kept = Array(selected.dropFirst(args.skip).prefix(args.limit ?? Int.max))
        let head = rowsHead(
            totalRows: .int(Int64(rows.count)),
            offset: .int(Int64(offset + min(args.skip, max(rows.count - offset, 0)))),
            updateSeq: args.updateSeq
                ? SequenceToken.encode(position: db.withLock { db.currentPosition }, db: db.name) : nil)
        return ViewOutput { out in
            guard out.text(head) else { return }
            let rendered = out.batches(kept, db: db) { row -> String? in
                let pairs: [(String, JSON)] = [("id", .string(row.id)), ("key", row.key), ("value", row.value)]
                guard args.includeDocs else { return JSON.object(pairs).serialized }
                var doc = "null"
                if let entry = db.docs[row.id], let winner = entry.winner, !winner.deleted {
                    doc = self.renderDocumentText(entry, winner, args.renderOptions)
                }
                return self.rowText(pairs, doc: doc)
            }
            guard rendered else { return }
            out.text(Self.rowsTail)
        }
    }

    /// CouchDB's built-in reduce functions.
    private func builtinReduce(_ name: String, _ rows: [ViewRow]) -> JSON {
        switch name {
        case "_count":
            return .int(Int64(rows.count))
        case "_sum":
            return rows.reduce(JSON.int(0)) { sum($0, $1.value) }
        case "_stats":
            let numbers = rows.compactMap { $0.value.doubleValue }
            let allInts = rows.allSatisfy { if case .int = $0.value { return true } else { return false } }
            func num(_ d: Double) -> JSON { allInts && d.rounded() == d && abs(d) < 9e15 ? .int(Int64(d)) : .double(d) }
            return .object([
                ("sum", num(numbers.reduce(0, +))), ("count", .int(Int64(numbers.count))),
                ("min", num(numbers.min() ?? 0)), ("max", num(numbers.max() ?? 0)),
                ("sumsqr", num(numbers.reduce(0) { $0 + $1 * $1 })),
            ])
        case "_approx_count_distinct":
            var seen: [JSON] = []
            for row in rows where !seen.contains(where: { Collation.compare($0, row.key) == 0 }) {
                seen.append(row.key)
            }
            return .int(Int64(seen.count))
        default:
            return .null
        }
    }

    private func sum(_ a: JSON, _ b: JSON) -> JSON {
        switch (a, b) {
        case (.int(let x), .int(let y)): return .int(x &+ y)
        case (.array(let x), .array(let y)):
            var out: [JSON] = []
            for i in 0..<max(x.count, y.count) {
                out.append(sum(i < x.count ? x[i] : .int(0), i < y.count ? y[i] : .int(0)))
            }
            return .array(out)
        case (.array(let x), _): return sum(.array(x), .array([b]))
        case (_, .array(let y)): return sum(.array([a]), .array(y))
        default:
            guard let x = a.doubleValue, let y = b.doubleValue else { return a }
            return .double(x + y)
        }
    }
}
