/// A Mango index as CouchDB's `#idx{}` record: the special `_all_docs` index, a JSON index (a view
/// in a `language: "query"` design document) or a text index.
struct MangoIndex: Sendable {
    /// `nil` for `_all_docs`.
    var ddoc: String?
    var name: String
    /// `special`, `json` or `text`.
    var type: String
    /// The stored definition (`map` of the view for JSON indexes, `index` for text indexes).
    var def: JSON
    var partitioned: Bool

    static let allDocs = MangoIndex(ddoc: nil, name: "_all_docs", type: "special", def: .null, partitioned: false)

    var isSpecial: Bool { type == "special" }

    /// Index columns in order (`mango_idx:columns/1`).
    var columns: [String] {
        if isSpecial { return ["_id"] }
        if type == "text" {
            if def["fields"]?.stringValue == "all_fields" { return [] }
            return (def["fields"]?.arrayValue ?? []).compactMap { f in
                guard let n = f["name"]?.stringValue, let t = f["type"]?.stringValue else { return nil }
                return n + ":" + t
            }
        }
        return (def["fields"]?.objectValue ?? []).map(\.0)
    }

    /// Sort directions of the columns.
    var directions: [String] {
        (def["fields"]?.objectValue ?? []).map { $0.1.stringValue ?? "asc" }
    }

    /// The partial filter selector, when the index has one.
    var partialFilterSelector: JSON? {
        guard !isSpecial else { return nil }
        for key in ["partial_filter_selector", "selector"] {
            if let sel = def[key] {
                if case .object(let p) = sel, p.isEmpty { return nil }
                return sel
            }
        }
        return nil
    }

    /// The index as `GET /{db}/_index` and `_explain` show it.
    var json: JSON {
        if isSpecial {
            return [
                "ddoc": nil, "name": "_all_docs", "type": "special",
                "def": ["fields": [["_id": "asc"]]],
            ]
        }
        var defOut: [(String, JSON)] = []
        for (k, v) in def.objectValue ?? [] {
            if k == "fields", case .object(let fields) = v {
                defOut.append(("fields", .array(fields.map { JSON.object([$0]) })))
            } else if k == "partial_filter_selector", case .object(let p) = v, p.isEmpty {
                continue
            } else {
                defOut.append((k, v))
            }
        }
        return .object([
            ("ddoc", ddoc.map(JSON.string) ?? .null), ("name", .string(name)), ("type", .string(type)),
            ("partitioned", .bool(partitioned)), ("def", .object(defOut)),
        ])
    }

    /// Sort order of `mango_idx:list/1` results: `_all_docs` first, then by design doc id and name.
    static func listOrder(_ a: MangoIndex, _ b: MangoIndex) -> Bool {
        switch (a.ddoc, b.ddoc) {
        case (nil, nil): return false
        case (nil, _): return true
        case (_, nil): return false
        case (let x?, let y?):
            if x != y { return Collation.compareRaw(x, y) < 0 }
            if a.name != b.name { return Collation.compareRaw(a.name, b.name) < 0 }
            return Collation.compareRaw(a.type, b.type) < 0
        }
    }

    /// All indexes of a database: `_all_docs` plus those in `language: "query"` design documents.
    static func all(designDocuments: [JSON], partitionedDatabase: Bool) -> [MangoIndex] {
        var out: [MangoIndex] = []
        for ddoc in designDocuments {
            guard ddoc["language"]?.stringValue == "query", let id = ddoc["_id"]?.stringValue,
                ddoc["_deleted"]?.boolValue != true
            else { continue }
            var partitioned = partitionedDatabase
            if let p = ddoc["options"]?["partitioned"]?.boolValue { partitioned = p }
            if case .object(let views)? = ddoc["views"] {
                for (name, view) in views {
                    guard case .object(let map)? = view["map"], case .object? = view["options"] else { continue }
                    if let fields = map.last(where: { $0.0 == "fields" })?.1, fields.objectValue == nil { continue }
                    out.append(
                        MangoIndex(
                            ddoc: id, name: name, type: "json", def: .object(map),
                            partitioned: partitioned))
                }
            }
            if case .object(let texts)? = ddoc["indexes"] {
                for (name, text) in texts {
                    guard case .object(let index)? = text["index"] else { continue }
                    out.append(
                        MangoIndex(
                            ddoc: id, name: name, type: "text", def: .object(index),
                            partitioned: partitioned))
                }
            }
        }
        out.sort(by: listOrder)
        return [allDocs] + out
    }
}

enum MangoIndexes {
    static func list(designDocuments: [JSON], partitionedDatabase: Bool) -> JSON {
        let all = MangoIndex.all(designDocuments: designDocuments, partitionedDatabase: partitionedDatabase)
        return ["total_rows": .int(Int64(all.count)), "indexes": .array(all.map(\.json))]
    }

    // MARK: Creation

    static func create(requestBody: JSON, designDocuments: [JSON], partitionedDatabase: Bool)
        throws(MangoError) -> MangoIndexCreation
    {
        guard case .object(var props) = requestBody else {
            throw MangoError(status: 400, error: "bad_request", reason: "Request body must be a JSON object")
        }
        func take(_ key: String) -> JSON? {
            guard let i = props.firstIndex(where: { $0.0 == key }) else { return nil }
            let v = props[i].1
            props.remove(at: i)
            return v
        }
        guard let rawDef = take("index") else { throw MangoErrors.missingRequiredKey("index") }
        let type = take("type")
        if let type, type.stringValue == nil { throw MangoErrors.invalidString(type) }
        let nameOpt = take("name")
        let ddocOpt = take("ddoc")
        for v in [nameOpt, ddocOpt].compactMap({ $0 }) {
            if v.stringValue == "" {
                throw MangoError(
                    status: 400, error: "invalid_empty_string",
                    reason: "Index name or ddoc cannot be empty string")
            }
            if v.stringValue == nil { throw MangoErrors.invalidString(v) }
        }
        let w = take("w")
        if let w { guard case .int(let n) = w, n > 0 else { throw MangoErrors.invalidPosInteger(w) } }
        let partitionedOpt = take("partitioned")
        if let p = partitionedOpt, p.boolValue == nil {
            throw MangoError(
                status: 500, error: "unknown_error",
                reason: "Unknown Error: mango_opts :: {invalid_partitioned_value,\(ErlangFormat.w(p))}")
        }
        if let bad = props.first { throw MangoErrors.invalidKey(bad.0) }

        let typeName = type?.stringValue ?? "json"
        guard typeName == "json" || typeName == "text" else {
            throw MangoError(status: 400, error: "invalid_index", reason: "Invalid type for index: \(typeName)")
        }
        // Validate the definition.
        let def: JSON = typeName == "json" ? try validateJSONDef(rawDef) : try validateTextDef(rawDef)

        var hashInput = def.serialized + "|" + typeName + "|" + (partitionedOpt?.serialized ?? "db_default")
        hashInput += "|" + (w?.serialized ?? "2")
        let generated = SHA1.hex(hashInput)
        let name = nameOpt?.stringValue ?? generated
        var ddocID = ddocOpt?.stringValue ?? generated
        if !ddocID.hasPrefix("_design/") { ddocID = "_design/" + ddocID }

        // Load (or start) the design document.
        let existing = designDocuments.first { $0["_id"]?.stringValue == ddocID && $0["_deleted"]?.boolValue != true }
        var body: [(String, JSON)]
        if let existing, case .object(let pairs) = existing {
            body = pairs.filter { $0.0 != "_id" && $0.0 != "_rev" }
            let lang = body.first { $0.0 == "language" }
            if lang?.1.stringValue != "query" {
                let shown =
                    lang.map { "{\(ErlangFormat.binary("language", pretty: false)),\(ErlangFormat.w($0.1))}" }
                    ?? "false"
                throw MangoError(
                    status: 400, error: "invalid_ddoc_lang",
                    reason: "Existing design doc has an invalid language: \(shown)")
            }
        } else {
            body = [("language", "query")]
        }
        let original = JSON.object(body)

        // Add the index.
        let collectionKey = typeName == "json" ? "views" : "indexes"
        var entries = body.first(where: { $0.0 == collectionKey })?.1.objectValue ?? []
        let entry: JSON
        if typeName == "json" {
            entry = .object([("map", def), ("reduce", "_count"), ("options", .object([("def", rawDef)]))])
        } else {
            entry = .object([("index", def), ("analyzer", textAnalyzer(def))])
        }
        if let i = entries.firstIndex(where: { $0.0 == name }) {
            entries[i].1 = entry
        } else {
            entries.append((name, entry))
        }
        store(&body, collectionKey, .object(entries))

        // Partitioned option (mango_idx:set_ddoc_partitioned/2).
        let requested = partitionedOpt?.boolValue
        let old = body.first(where: { $0.0 == "options" })?.1["partitioned"]?.boolValue
        if requested != old {
            if existing == nil {
                if let requested {
                    var options = body.first(where: { $0.0 == "options" })?.1.objectValue ?? []
                    if let i = options.firstIndex(where: { $0.0 == "partitioned" }) {
                        options[i].1 = .bool(requested)
                    } else {
                        options.append(("partitioned", .bool(requested)))
                    }
                    store(&body, "options", .object(options))
                }
            } else {
                throw MangoError(
                    status: 400, error: "invalid_partitioned_option",
                    reason: "Requested partitioned option does not match existing value on design document \(ddocID)")
            }
        }
        let response: JSON
        if JSON.object(body) == original {
            return MangoIndexCreation(
                designDocumentToSave: nil,
                response: ["result": "exists", "id": .string(ddocID), "name": .string(name)])
        }
        response = ["result": "created", "id": .string(ddocID), "name": .string(name)]
        var full: [(String, JSON)] = [("_id", .string(ddocID))]
        if let rev = existing?["_rev"] { full.append(("_rev", rev)) }
        full.append(contentsOf: body)
        return MangoIndexCreation(designDocumentToSave: .object(full), response: response)
    }

    private static func store(_ pairs: inout [(String, JSON)], _ key: String, _ value: JSON) {
        if let i = pairs.firstIndex(where: { $0.0 == key }) { pairs[i].1 = value } else { pairs.append((key, value)) }
    }

    /// Validates a JSON index definition; returns what is stored as the view's `map`.
    static func validateJSONDef(_ raw: JSON) throws(MangoError) -> JSON {
        guard case .object(var props) = raw else {
            throw MangoError(
                status: 400, error: "invalid_index",
                reason: "JSON indexes must be an object, not: \(ErlangFormat.w(raw))")
        }
        func take(_ key: String) -> JSON? {
            guard let i = props.firstIndex(where: { $0.0 == key }) else { return nil }
            let v = props[i].1
            props.remove(at: i)
            return v
        }
        guard let fields = take("fields") else { throw MangoErrors.missingRequiredKey("fields") }
        let sort = try MangoSort.parse(fields)
        var pfs: JSON = .object([])
        if let sel = take("partial_filter_selector") {
            guard case .object = sel else { throw MangoErrors.invalidSelectorJSON(sel) }
            pfs = try SelectorNode.parse(sel).json
        }
        if let bad = props.first { throw MangoErrors.invalidKey(bad.0) }
        return .object([
            ("fields", .object(sort.map { ($0.field, .string($0.direction)) })),
            ("partial_filter_selector", pfs),
        ])
    }

    /// Validates a text index definition; returns what is stored as `index`.
    static func validateTextDef(_ raw: JSON) throws(MangoError) -> JSON {
        guard case .object(var props) = raw else {
            throw MangoError(
                status: 400, error: "invalid_index",
                reason: "Text indexes must be an object, not: \(ErlangFormat.w(raw))")
        }
        func take(_ key: String) -> JSON? {
            guard let i = props.firstIndex(where: { $0.0 == key }) else { return nil }
            let v = props[i].1
            props.remove(at: i)
            return v
        }
        let analyzer = take("default_analyzer") ?? "keyword"
        let defaultField = take("default_field") ?? .object([])
        var pfs: JSON = .object([])
        if let sel = take("partial_filter_selector") {
            guard case .object = sel else { throw MangoErrors.invalidSelectorJSON(sel) }
            pfs = try SelectorNode.parse(sel).json
        }
        var selector: JSON = .object([])
        if let sel = take("selector") {
            guard case .object = sel else { throw MangoErrors.invalidSelectorJSON(sel) }
            selector = try SelectorNode.parse(sel).json
        }
        var fields: JSON = "all_fields"
        if let f = take("fields") {
            if f.stringValue == "all_fields" {
                fields = f
            } else if case .array(let items) = f, !items.isEmpty {
                fields = f
            } else if case .array = f {
                fields = "all_fields"
            } else {
                throw MangoError(
                    status: 400, error: "invalid_index_fields_definition",
                    reason:
                        "Text Index field definitions must be of the form\n            {\"name\": \"non-empty fieldname\", \"type\":\n                \"boolean,number, or string\"}. Def: \(ErlangFormat.p(f))"
                )
            }
        }
        let lengths = take("index_array_lengths") ?? true
        if lengths.boolValue == nil { throw MangoErrors.invalidBoolean(lengths) }
        if let bad = props.first { throw MangoErrors.invalidKey(bad.0) }
        return .object([
            ("default_analyzer", analyzer), ("default_field", defaultField),
            ("partial_filter_selector", pfs), ("selector", selector), ("fields", fields),
            ("index_array_lengths", lengths),
        ])
    }

    static func textAnalyzer(_ def: JSON) -> JSON {
        let defaultAnalyzer = def["default_analyzer"] ?? "keyword"
        var enabled = true
        var fieldAnalyzer: JSON = "standard"
        switch def["default_field"] {
        case .bool(let b)?: enabled = b
        case .object(let opts)? where !opts.isEmpty:
            enabled = def["default_field"]?["enabled"]?.boolValue ?? true
            fieldAnalyzer = def["default_field"]?["analyzer"] ?? "standard"
        default: break
        }
        guard enabled else { return "keyword" }
        return ["name": "perfield", "default": defaultAnalyzer, "fields": .object([("$default", fieldAnalyzer)])]
    }

    // MARK: Deletion

    static func delete(
        designDocuments: [JSON], designDocumentID: String, type: String, name: String,
        partitionedDatabase: Bool
    ) throws(MangoError) -> MangoIndexDeletion {
        let ddocID = designDocumentID.hasPrefix("_design/") ? designDocumentID : "_design/" + designDocumentID
        let notFound = MangoError(status: 404, error: "not_found", reason: "missing")
        let all = MangoIndex.all(designDocuments: designDocuments, partitionedDatabase: partitionedDatabase)
        guard all.contains(where: { $0.ddoc == ddocID && $0.type == type && $0.name == name }),
            let ddoc = designDocuments.first(where: { $0["_id"]?.stringValue == ddocID }),
            case .object(let pairs) = ddoc
        else { throw notFound }
        let collectionKey = type == "text" ? "indexes" : "views"
        var body = pairs
        var entries = body.first(where: { $0.0 == collectionKey })?.1.objectValue ?? []
        entries.removeAll { $0.0 == name }
        if entries.isEmpty {
            body.removeAll { $0.0 == collectionKey }
        } else {
            store(&body, collectionKey, .object(entries))
        }
        let remaining = body.filter { $0.0 != "_id" && $0.0 != "_rev" }
        let onlyLanguage = remaining.count == 1 && remaining[0].0 == "language" && remaining[0].1 == "query"
        return MangoIndexDeletion(
            designDocumentID: ddocID, updated: onlyLanguage ? nil : .object(body),
            response: ["ok": true])
    }
}

/// A validated `sort` (or index `fields`) specification.
enum MangoSort {
    struct Field: Sendable, Equatable {
        var field: String
        var direction: String
    }

    /// `mango_sort:new/1`.
    static func parse(_ json: JSON) throws(MangoError) -> [Field] {
        guard case .array(let items) = json else {
            throw MangoError(
                status: 400, error: "invalid_sort_json",
                reason: "Sort must be an array of sort specs, not: \(ErlangFormat.p(json))")
        }
        var out: [Field] = []
        for item in items {
            switch item {
            case .string(let s) where !s.isEmpty:
                out.append(Field(field: s, direction: "asc"))
            case .object(let p) where p.count == 1 && (p[0].1 == "asc" || p[0].1 == "desc"):
                out.append(Field(field: p[0].0, direction: p[0].1.stringValue ?? "asc"))
            default:
                throw MangoError(
                    status: 400, error: "invalid_sort_field",
                    reason: "Invalid sort field: \(ErlangFormat.p(item))")
            }
        }
        if Set(out.map(\.direction)).count > 1 {
            throw MangoError(
                status: 400, error: "unsupported_mixed_sort",
                reason: "Sorts currently only support a single direction for all fields.")
        }
        return out
    }
}
