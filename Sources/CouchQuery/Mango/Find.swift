import Foundation

/// Validated `_find` / `_explain` options (`mango_opts:validate_find/1`).
struct FindOptions {
    var selector: SelectorNode
    var useIndex: [String] = []
    var bookmark: String?
    var limit = 25
    var skip = 0
    var sort: [MangoSort.Field] = []
    var fields: [String]?
    var partition = ""
    var r = 1
    var conflicts = false
    var staleOK = false
    var update = true
    var stable = false
    var executionStats = false
    var allowFallback = true

    init(_ body: JSON, partition: String?) throws(MangoError) {
        guard case .object(var props) = body else {
            throw MangoError(status: 400, error: "bad_request", reason: "Request body must be a JSON object")
        }
        func take(_ key: String) -> JSON? {
            guard let i = props.firstIndex(where: { $0.0 == key }) else { return nil }
            let v = props[i].1
            props.removeAll { $0.0 == key }
            return v
        }
        guard let sel = take("selector") else { throw MangoErrors.missingRequiredKey("selector") }
        selector = try SelectorNode.parse(sel)
        if let u = take("use_index") {
            switch u {
            case .null: useIndex = []
            case .string(let s):
                let parts = s.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
                switch parts.count {
                case 1: useIndex = parts
                case 2: useIndex = parts[0] == "_design" ? [parts[1]] : parts
                case 3 where parts[0] == "_design": useIndex = [parts[1], parts[2]]
                default: throw MangoErrors.invalidIndexName(u)
                }
            case .array(let items) where items.count <= 2 && items.allSatisfy({ $0.stringValue != nil }):
                useIndex = items.compactMap(\.stringValue)
            default: throw MangoErrors.invalidIndexName(u)
            }
        }
        if let b = take("bookmark") {
            switch b {
            case .null: bookmark = nil
            case .string(let s): bookmark = s.isEmpty ? nil : s
            default: throw MangoErrors.invalidBookmark(b)
            }
        }
        func nonNeg(_ v: JSON) throws(MangoError) -> Int {
            guard case .int(let i) = v, i >= 0 else { throw MangoErrors.invalidNonNegInteger(v) }
            return Int(clamping: i)
        }
        func bool(_ v: JSON) throws(MangoError) -> Bool {
            guard case .bool(let b) = v else { throw MangoErrors.invalidBoolean(v) }
            return b
        }
        if let v = take("limit") { limit = try nonNeg(v) }
        if let v = take("skip") { skip = try nonNeg(v) }
        if let v = take("sort") { sort = try MangoSort.parse(v) }
        if let v = take("fields") {
            guard case .array(let items) = v else {
                throw MangoError(
                    status: 400, error: "invalid_fields",
                    reason: "Fields must be an array of strings, not: \(ErlangFormat.w(v))")
            }
            var out: [String] = []
            for item in items {
                guard case .string(let s) = item else {
                    throw MangoError(
                        status: 400, error: "invalid_field",
                        reason: "Invalid JSON for field spec: \(ErlangFormat.w(item))")
                }
                out.append(s)
            }
            fields = out.isEmpty ? nil : out
        }
        let bodyPartition = take("partition")
        if let partition {
            if let bodyPartition, bodyPartition.stringValue != partition {
                throw MangoError(
                    status: 500, error: "unknown_error",
                    reason: "Unknown Error: mango_httpd :: {bad_partition,\(ErlangFormat.w(bodyPartition))}")
            }
            self.partition = partition
        } else if let bodyPartition {
            guard case .string(let p) = bodyPartition else { throw MangoErrors.invalidString(bodyPartition) }
            if p.hasPrefix("_") {
                throw MangoError(
                    status: 400, error: "bad_request", reason: "Only reserved document ids may start with underscore.")
            }
            self.partition = p
        }
        if let v = take("r") {
            guard case .int(let i) = v, i > 0 else { throw MangoErrors.invalidPosInteger(v) }
            r = Int(clamping: i)
        }
        if let v = take("conflicts") { conflicts = try bool(v) }
        if let v = take("stale") {
            switch v {
            case .string("ok"): staleOK = true
            case .string("false"), .bool(false): staleOK = false
            default:
                throw MangoError(
                    status: 500, error: "unknown_error",
                    reason: "Unknown Error: mango_opts :: {invalid_ok_or_false_value,\(ErlangFormat.w(v))}")
            }
        }
        if let v = take("update") { update = try bool(v) }
        if let v = take("stable") { stable = try bool(v) }
        if let v = take("execution_stats") { executionStats = try bool(v) }
        if let v = take("allow_fallback") { allowFallback = try bool(v) }
        if let bad = props.first { throw MangoErrors.invalidKey(bad.0) }
    }

    var isPartitioned: Bool { !partition.isEmpty }

    /// The `opts` object `_explain` shows.
    var json: JSON {
        .object([
            ("use_index", .array(useIndex.map(JSON.string))),
            ("bookmark", bookmark.map(JSON.string) ?? "nil"),
            ("limit", .int(Int64(limit))), ("skip", .int(Int64(skip))),
            ("sort", .object(sort.map { ($0.field, .string($0.direction)) })),
            ("fields", .array((fields ?? []).map(JSON.string))),
            ("partition", .string(partition)), ("r", .int(Int64(r))), ("conflicts", .bool(conflicts)),
            ("stale", staleOK ? "ok" : false), ("update", .bool(update)), ("stable", .bool(stable)),
            ("execution_stats", .bool(executionStats)), ("allow_fallback", .bool(allowFallback)),
        ])
    }
}

/// A bound of a key range: a JSON value or the maximum sentinel (`<MAX>`).
enum KeyBound: Equatable {
    case value(JSON)
    case max
    case min

    var json: JSON {
        switch self {
        case .value(let v): return v
        case .max: return "<MAX>"
        case .min: return ""
        }
    }

    static func compare(_ a: KeyBound, _ b: KeyBound) -> Int {
        switch (a, b) {
        case (.min, .min), (.max, .max): return 0
        case (.min, _), (_, .max): return -1
        case (_, .min), (.max, _): return 1
        case (.value(let x), .value(let y)): return Collation.compare(x, y)
        }
    }
}

/// A field range (`mango_idx_view:range/6`).
enum FieldRange: Equatable {
    case empty
    case range(low: String, lowKey: KeyBound, high: String, highKey: KeyBound)

    static let full = FieldRange.range(low: "$gt", lowKey: .min, high: "$lt", highKey: .max)

    func narrowed(_ op: String, _ arg: JSON) -> FieldRange {
        guard case .range(let lc, let low, let hc, let high) = self else { return self }
        let a = KeyBound.value(arg)
        enum Pos { case min, low, mid, high, max }
        let pos: Pos = {
            let c = KeyBound.compare(a, low)
            if c < 0 { return .min }
            if c == 0 { return .low }
            let d = KeyBound.compare(a, high)
            return d < 0 ? .mid : (d == 0 ? .high : .max)
        }()
        let eq = FieldRange.range(low: "$eq", lowKey: a, high: "$eq", highKey: a)
        switch op {
        case "$beginsWith":
            guard case .string(let s) = arg else { return self }
            return narrowed("$gte", arg).narrowed("$lte", .string(s + "\u{FFFF}"))
        case "$lt":
            switch pos {
            case .min, .low: return .empty
            case .mid, .high: return .range(low: lc, lowKey: low, high: "$lt", highKey: a)
            case .max: return self
            }
        case "$lte":
            switch pos {
            case .min: return .empty
            case .low: return (lc == "$gte" || lc == "$eq") ? eq : .empty
            case .mid: return .range(low: lc, lowKey: low, high: "$lte", highKey: a)
            case .high, .max: return self
            }
        case "$eq":
            switch pos {
            case .min, .max: return .empty
            case .low: return (lc == "$gte" || lc == "$eq") ? eq : .empty
            case .mid: return eq
            case .high: return (hc == "$lte" || hc == "$eq") ? eq : .empty
            }
        case "$gte":
            switch pos {
            case .min, .low: return self
            case .mid: return .range(low: "$gte", lowKey: a, high: hc, highKey: high)
            case .high: return (hc == "$lte" || hc == "$eq") ? eq : .empty
            case .max: return .empty
            }
        case "$gt":
            switch pos {
            case .min: return self
            case .low, .mid: return .range(low: "$gt", lowKey: a, high: hc, highKey: high)
            case .high, .max: return .empty
            }
        default: return self
        }
    }
}

/// The query planner and executor (`mango_cursor`, `mango_cursor_view`, `mango_cursor_special`).
enum MangoFind {
    // MARK: Ranges

    static func range(_ selector: SelectorNode, _ field: [String], _ current: FieldRange) -> FieldRange {
        switch selector {
        case .and(let args):
            var r = current
            for a in args {
                if r == .empty { return .empty }
                r = range(a, field, r)
            }
            return r
        case .field(let path, .op(let op, let arg)) where path == field:
            return current.narrowed(op, arg)
        default:
            return current
        }
    }

    /// `mango_idx_view:field_ranges/1`: ranges of the indexable fields, keyed by joined name.
    static func fieldRanges(_ selector: SelectorNode) -> [(String, FieldRange)] {
        var out: [(String, FieldRange)] = []
        for path in selector.indexablePaths {
            let r = range(selector, path, .full)
            if r == .empty { return [(path.joined(separator: "."), .empty)] }
            out.append((path.joined(separator: "."), r))
        }
        return out
    }

    struct Candidate {
        var index: MangoIndex
        var prefix: [FieldRange]
        var difference: Int
    }

    static func composite(_ indexes: [MangoIndex], _ ranges: [(String, FieldRange)]) -> [Candidate] {
        indexes.map { idx in
            var prefix: [FieldRange] = []
            for col in idx.columns {
                guard let r = ranges.first(where: { $0.0 == col })?.1 else { break }
                prefix.append(r)
            }
            return Candidate(index: idx, prefix: prefix, difference: ranges.count - prefix.count)
        }
    }

    static func chooseBest(_ candidates: [Candidate]) -> [Candidate] {
        // Stable insertion sort with CouchDB's ordering.
        func lessOrEqual(_ a: Candidate, _ b: Candidate) -> Bool {
            if a.difference != b.difference { return a.difference < b.difference }
            if a.index.columns.count != b.index.columns.count { return a.index.columns.count < b.index.columns.count }
            return !MangoIndex.listOrder(b.index, a.index)
        }
        var sorted: [Candidate] = []
        for c in candidates {
            var i = sorted.count
            while i > 0 && !lessOrEqual(sorted[i - 1], c) { i -= 1 }
            sorted.insert(c, at: i)
        }
        return sorted
    }

    // MARK: Planning

    struct Plan {
        var options: FindOptions
        var partitionedDatabase: Bool
        var all: [MangoIndex]
        var global: [MangoIndex]
        var partitionIndexes: [MangoIndex]
        var usable: [MangoIndex]
        var usability: [(MangoIndex, Bool, [String])]
        var filtered: [MangoIndex] = []
        var ofType: [MangoIndex] = []
        var sortedRanges: [Candidate] = []
        var index: MangoIndex?
        /// `nil` means the ranges are unsatisfiable (`[empty]`).
        var ranges: [FieldRange] = []
    }

    static func same(_ a: MangoIndex, _ b: MangoIndex) -> Bool {
        a.ddoc == b.ddoc && a.name == b.name && a.type == b.type
    }

    static func filterByUseIndex(_ indexes: [MangoIndex], _ useIndex: [String]) -> [MangoIndex] {
        guard let first = useIndex.first else { return [] }
        let ddoc = first.hasPrefix("_design/") ? first : "_design/" + first
        return indexes.filter { $0.ddoc == ddoc && (useIndex.count < 2 || $0.name == useIndex[1]) }
    }

    static func isUsable(_ idx: MangoIndex, _ selector: SelectorNode, _ sortFields: [String]) -> (Bool, [String]) {
        if idx.isSpecial {
            if sortFields.isEmpty { return (true, []) }
            let hasID = selector.indexablePaths.contains(["_id"])
            let canSort = ["_id"].starts(with: sortFields)
            var reasons: [String] = []
            if !hasID { reasons.append("field_mismatch") }
            if !canSort { reasons.append("sort_order_mismatch") }
            return (hasID && canSort, reasons)
        }
        if idx.type == "text" {
            if case .empty = selector { return (false, ["empty_selector"]) }
            return (selector.isTextSearch, selector.isTextSearch ? [] : ["field_mismatch"])
        }
        let columns = idx.columns
        let required = Set(columns).subtracting(sortFields).subtracting(["_id", "_rev"]).sorted()
        var paths: [[String]] = []
        for r in required { if let p = try? FieldPath.parse(r) { paths.append(p) } }
        let hasFields = selector.hasRequiredFields(paths)
        let notText = !selector.isTextSearch
        let canSort = canUseSort(columns, sortFields, selector)
        var reasons: [String] = []
        if !notText { reasons.append("needs_text_search") }
        if !hasFields { reasons.append("field_mismatch") }
        if !canSort { reasons.append("sort_order_mismatch") }
        return (notText && hasFields && canSort, reasons)
    }

    static func canUseSort(_ cols: [String], _ sortFields: [String], _ selector: SelectorNode) -> Bool {
        if sortFields.isEmpty { return true }
        guard let col = cols.first else { return false }
        if col == sortFields[0] { return cols.starts(with: sortFields) }
        guard let path = try? FieldPath.parse(col), selector.isConstantField(path) else { return false }
        return canUseSort(Array(cols.dropFirst()), sortFields, selector)
    }

    static func plan(_ options: FindOptions, designDocuments: [JSON], partitionedDatabase: Bool, forFind: Bool)
        throws(MangoError) -> Plan
    {
        let all = MangoIndex.all(designDocuments: designDocuments, partitionedDatabase: partitionedDatabase)
        let global = all.filter { $0.partialFilterSelector == nil }
        let userSpecified = filterByUseIndex(all, options.useIndex)
        var union: [MangoIndex] = []
        for i in global + userSpecified where !union.contains(where: { same($0, i) }) { union.append(i) }
        union.sort(by: MangoIndex.listOrder)
        let partitionIndexes = union.filter { $0.isSpecial || $0.partitioned == options.isPartitioned }
        let sortFields = options.sort.map(\.field)
        let usability = partitionIndexes.map { idx in
            let (ok, reasons) = isUsable(idx, options.selector, sortFields)
            return (idx, ok, reasons)
        }
        let usable = usability.filter(\.1).map(\.0)
        if usable.isEmpty && forFind {
            if !partitionedDatabase { throw MangoErrors.noUsableIndex }
            throw options.isPartitioned ? MangoErrors.noUsableIndexPartitioned : MangoErrors.noUsableIndexGlobal
        }
        var plan = Plan(
            options: options, partitionedDatabase: partitionedDatabase, all: all, global: global,
            partitionIndexes: partitionIndexes, usable: usable, usability: usability)
        var chosen = filterByUseIndex(usable, options.useIndex)
        if chosen.isEmpty {
            if options.allowFallback || (options.useIndex.isEmpty && usable.count > 1) {
                chosen = usable
            } else {
                let name = options.useIndex.first.map { $0.hasPrefix("_design/") ? String($0.dropFirst(8)) : $0 }
                let reason: String
                switch options.useIndex.count {
                case 0: reason = "You must specify an index with the `use_index` parameter."
                case 1:
                    reason = "_design/\(name ?? "") specified by `use_index` could not be found or it is not suitable."
                default:
                    reason =
                        "_design/\(name ?? ""), \(options.useIndex[1]) specified by `use_index` could not be found or it is not suitable."
                }
                throw MangoError(status: 400, error: "invalid_index", reason: reason)
            }
        }
        plan.filtered = chosen
        guard !chosen.isEmpty else { return plan }
        // Group by cursor type: json, text, special.
        let json = chosen.filter { $0.type == "json" }
        let text = chosen.filter { $0.type == "text" }
        let special = chosen.filter(\.isSpecial)
        var ranges = fieldRanges(options.selector)
        if !json.isEmpty {
            plan.ofType = json
        } else if !text.isEmpty {
            plan.ofType = text
            plan.index = text[0]
            return plan
        } else {
            plan.ofType = special
            ranges.append(("_id", .range(low: "$gt", lowKey: .value(.null), high: "$lt", highKey: .max)))
        }
        let sorted = chooseBest(composite(plan.ofType, ranges))
        plan.sortedRanges = sorted
        plan.index = sorted[0].index
        plan.ranges = sorted[0].prefix
        // mango_cursor:maybe_noop_range/2
        switch options.selector {
        case .and(let a) where a.isEmpty: plan.ranges = [.empty]
        case .or(let a) where a.isEmpty: plan.ranges = [.empty]
        default: break
        }
        return plan
    }

    // MARK: Keys

    struct Keys {
        var start: KeyBound?
        var end: KeyBound?
        /// For JSON indexes the keys are arrays.
        var startList: [KeyBound]?
        var endList: [KeyBound]?
        var unsatisfiable = false
    }

    static func keys(_ plan: Plan) -> Keys {
        var k = Keys()
        if plan.ranges == [.empty] {
            k.unsatisfiable = true
            return k
        }
        guard let index = plan.index else { return k }
        if index.isSpecial {
            // mango_idx_special:start_key/1 and end_key/1 (a `$gt` on null keeps null as start key).
            if case .range(_, let low, _, let high)? = plan.ranges.first {
                k.start = low
                k.end = high
            } else {
                k.start = .min
                k.end = .max
            }
            return k
        }
        // mango_idx_view:start_key/1 and end_key/1.
        var start: [KeyBound] = []
        for r in plan.ranges {
            guard case .range(let lc, let low, _, _) = r else { break }
            if lc == "$gt", low == .min { break }
            start.append(low)
        }
        var end: [KeyBound] = []
        var ended = false
        for r in plan.ranges {
            guard case .range(_, _, let hc, let high) = r else { break }
            if hc == "$lt", high == .max {
                end.append(.max)
                ended = true
                break
            }
            end.append(high)
        }
        if !ended { end.append(.max) }
        k.startList = start
        k.endList = end
        return k
    }

    static func keyJSON(_ list: [KeyBound]?, _ single: KeyBound?) -> JSON {
        if let list { return .array(list.map(\.json)) }
        if let single { return single.json }
        return .null
    }

    // MARK: Covering

    static func covers(_ index: MangoIndex?, _ fields: [String]?) -> Bool {
        guard let index, index.type == "json", let fields else { return false }
        let available = Set(["_id"] + index.columns)
        return Set(fields).isSubset(of: available)
    }

    static func requiredFields(_ options: FindOptions) -> [String]? {
        guard let fields = options.fields else { return nil }
        return Array(Set(fields + options.selector.fieldNames)).sorted()
    }

    // MARK: Find

    static func find(
        requestBody: JSON, databaseName: String, designDocuments: [JSON], documents: [MangoDocument],
        partition: String?, partitionedDatabase: Bool?
    ) throws(MangoError) -> JSON {
        let query = try MangoFindQuery(
            requestBody: requestBody, designDocuments: designDocuments, partition: partition,
            partitionedDatabase: partitionedDatabase)
        var byID: [String: MangoDocument] = [:]
        for document in documents { byID[document.id] = document }
        var docs: [JSON] = []
        let tail = query.run(
            scan: { visit in
                for document in documents { visit(document) }
                return true
            },
            fetch: { ids in ids.map { byID[$0] } },
            emit: { batch in
                docs.append(contentsOf: batch)
                return true
            })
        return .object([("docs", .array(docs))] + (tail ?? []))
    }

    /// The `warning` of a `_find` answer, nil when there is none.
    static func warning(index: MangoIndex, options: FindOptions, scanned: Int, returned resultsReturned: Int)
        -> String?
    {
        var warnings: [String] = []
        if let first = options.useIndex.first {
            let name = first.hasPrefix("_design/") ? String(first.dropFirst(8)) : first
            if filterByUseIndex([index], options.useIndex).isEmpty {
                if options.useIndex.count == 1 {
                    warnings.append(
                        "_design/\(name) was not used because it does not contain a valid index for this query.")
                } else {
                    warnings.append(
                        "_design/\(name), \(options.useIndex[1]) was not used because it is not a valid index for this query."
                    )
                }
            }
        }
        if index.isSpecial { warnings.append("No matching index found, create an index to optimize query time.") }
        let ratio = resultsReturned == 0 ? Double(scanned) : Double(scanned) / Double(resultsReturned)
        if ratio > 10 {
            warnings.append(
                "The number of documents examined is high in proportion to the number of results returned. Consider adding a more specific index to improve this."
            )
        }
        return warnings.isEmpty ? nil : warnings.joined(separator: "\n")
    }

    /// Key comparison for `_all_docs` (raw order of ids).
    static func compareRaw(_ a: KeyBound, _ b: KeyBound) -> Int {
        switch (a, b) {
        case (.value(let x), .value(let y)): return MangoCompare.raw(x, y)
        default: return KeyBound.compare(a, b)
        }
    }

    static func compareLists(_ a: [KeyBound], _ b: [KeyBound]) -> Int {
        for (x, y) in zip(a, b) {
            let c = KeyBound.compare(x, y)
            if c != 0 { return c }
        }
        return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
    }

    // MARK: Explain

    static func explain(
        requestBody: JSON, databaseName: String, designDocuments: [JSON], partition: String?,
        partitionedDatabase: Bool?
    ) throws(MangoError) -> JSON {
        let options = try FindOptions(requestBody, partition: partition)
        let partitioned = partitionedDatabase ?? (partition != nil)
        let plan = try plan(options, designDocuments: designDocuments, partitionedDatabase: partitioned, forFind: false)
        var out: [(String, JSON)] = [
            ("dbname", .string(databaseName)),
            ("index", plan.index?.json ?? .null),
            ("partitioned", .bool(partitioned)),
            ("selector", options.selector.json),
            ("opts", options.json),
            ("limit", .int(Int64(options.limit))),
            ("skip", .int(Int64(options.skip))),
            ("fields", .array((options.fields ?? []).map(JSON.string))),
            ("index_candidates", .array(candidates(plan))),
            ("selector_hints", .array([selectorHints(options.selector)])),
        ]
        if let index = plan.index, index.type != "text" {
            let k = keys(plan)
            let covering = covers(index, requiredFields(options))
            var start = k.unsatisfiable ? JSON.null : keyJSON(k.startList, k.start)
            var end = k.unsatisfiable ? JSON.null : keyJSON(k.endList, k.end)
            let descending = options.sort.first?.direction == "desc"
            if descending { swap(&start, &end) }
            var stable = options.stable
            var update = options.update
            if options.staleOK {
                stable = true
                update = false
            }
            out.append(
                (
                    "mrargs",
                    .object([
                        ("include_docs", .bool(options.r == 1 && !covering)),
                        ("view_type", "map"), ("reduce", false),
                        ("partition", options.isPartitioned ? .string(options.partition) : .null),
                        ("start_key", start), ("end_key", end),
                        ("direction", descending ? "rev" : "fwd"),
                        ("stable", .bool(stable)), ("update", .bool(update)),
                        ("conflicts", options.conflicts ? true : "undefined"),
                    ])
                ))
            out.append(("covering", .bool(covering)))
        }
        return .object(out)
    }

    static func selectorHints(_ selector: SelectorNode) -> JSON {
        let indexable = Set(selector.indexablePaths.map { $0.joined(separator: ".") })
        let all = Set(selector.fieldNames)
        return .object([
            ("type", "json"),
            ("indexable_fields", .array(indexable.sorted { Collation.compareRaw($0, $1) < 0 }.map(JSON.string))),
            (
                "unindexable_fields",
                .array(
                    all.subtracting(indexable).sorted { Collation.compareRaw($0, $1) < 0 }
                        .map(JSON.string))
            ),
        ])
    }

    /// `mango_cursor:extract_candidate_indexes/1`.
    static func candidates(_ plan: Plan) -> [JSON] {
        func contains(_ list: [MangoIndex], _ i: MangoIndex) -> Bool { list.contains { same($0, i) } }
        func minus(_ a: [MangoIndex], _ b: [MangoIndex]) -> [MangoIndex] { a.filter { !contains(b, $0) } }
        let partial = minus(plan.all, plan.global)
        let outOfScope = minus(plan.global, plan.partitionIndexes)
        let notUsable = minus(plan.partitionIndexes, plan.usable)
        let excluded = minus(plan.usable, plan.filtered)
        let unfavored = minus(plan.filtered, plan.ofType)
        let unfavoredRank = max(1, plan.sortedRanges.count)
        let excludedRank = unfavoredRank + (unfavored.isEmpty ? 0 : 1)
        let notUsableRank = excludedRank + (excluded.isEmpty ? 0 : 1)
        let outOfScopeRank = notUsableRank + (notUsable.isEmpty ? 0 : 1)
        let partialRank = outOfScopeRank + (outOfScope.isEmpty ? 0 : 1)

        struct Tags {
            var usable: Bool?
            var reasons: [String] = []
            var ranking: Int?
            mutating func merge(usable u: Bool?, reasons r: [String], ranking k: Int?) {
                if let u { usable = (usable ?? true) && u }
                reasons += r
                if let k { ranking = (ranking ?? 0) + k }
            }
        }
        var tags = plan.all.map { ($0, Tags()) }
        func apply(_ set: [MangoIndex], usable: Bool?, reasons: [String], ranking: Int?) {
            for i in tags.indices where contains(set, tags[i].0) {
                tags[i].1.merge(usable: usable, reasons: reasons, ranking: ranking)
            }
        }
        apply(partial, usable: false, reasons: ["is_partial"], ranking: partialRank)
        apply(outOfScope, usable: false, reasons: ["scope_mismatch"], ranking: outOfScopeRank)
        apply(notUsable, usable: false, reasons: [], ranking: notUsableRank)
        apply(excluded, usable: true, reasons: ["excluded_by_user"], ranking: excludedRank)
        apply(unfavored, usable: true, reasons: ["unfavored_type"], ranking: unfavoredRank)
        apply(plan.ofType, usable: true, reasons: [], ranking: nil)
        for (idx, ok, reasons) in plan.usability where !ok {
            apply([idx], usable: nil, reasons: reasons, ranking: nil)
        }
        let winnerWidth = plan.index.map { $0.columns.count } ?? 0
        for (n, c) in plan.sortedRanges.enumerated() {
            let reason: String
            if c.difference > 0 {
                reason = "less_overlap"
            } else if c.index.columns.count > winnerWidth {
                reason = "too_many_fields"
            } else {
                reason = "alphabetically_comes_after"
            }
            apply([c.index], usable: nil, reasons: [reason], ranking: n)
        }
        var out: [JSON] = []
        for (idx, t) in tags {
            if let w = plan.index, same(w, idx) { continue }
            guard let usable = t.usable, let ranking = t.ranking, let reason = t.reasons.first else { continue }
            let covering: JSON = idx.type == "json" ? .bool(covers(idx, plan.options.fields)) : .null
            out.append(
                .object([
                    ("index", idx.json),
                    (
                        "analysis",
                        .object([
                            ("usable", .bool(usable)), ("reasons", .array([.object([("name", .string(reason))])])),
                            ("ranking", .int(Int64(ranking))), ("covering", covering),
                        ])
                    ),
                ]))
        }
        return out.reversed()
    }
}
