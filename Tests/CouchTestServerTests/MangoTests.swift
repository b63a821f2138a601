import CouchQuery
import Foundation
import TestScheduling
import Testing

/// Documents of the `mango` transcript scenario (mango.json s02), with revisions.
private let people: [MangoDocument] = {
    let bodies: [JSON] = [
        [
            "_id": "m1", "_rev": "1-a39faaf09e78a1d962b285c6c335636b", "name": "Alice", "age": 31, "city": "Paris",
            "tags": ["admin", "dev"], "scores": [["subject": "math", "value": 90]],
        ],
        [
            "_id": "m2", "_rev": "1-50af012b33076c90ca3b528e771ec106", "name": "Bob", "age": 25, "city": "Berlin",
            "tags": ["dev"], "scores": [["subject": "math", "value": 70]],
        ],
        [
            "_id": "m3", "_rev": "1-bcd56cd62dd34ff36ae8bd7b86d81f97", "name": "Carol", "age": 42, "city": "Paris",
            "tags": [], "manager": true,
        ],
        [
            "_id": "m4", "_rev": "1-ac4f080c347decfdc46116416990e5e9", "name": "Dave", "age": 19, "city": "Rome",
            "tags": ["ops"],
        ],
        [
            "_id": "m5", "_rev": "1-6a25cc9c0da0caa1deb5769e6b095eaa", "name": "Eve", "age": 37, "city": "Berlin",
            "tags": ["dev", "ops"], "manager": false,
        ],
        ["_id": "m6", "_rev": "1-aee72e121df0213e4885e143fa1d72ad", "name": "Frank", "age": 25, "city": "Oslo"],
    ]
    return bodies.map { MangoDocument(id: $0["_id"]!.stringValue!, body: $0, conflicts: []) }
}()

private func parse(_ text: String) -> JSON {
    // Test inputs are literal JSON written in this file.
    (try? JSON.parse(text)) ?? .null
}

private func find(_ body: String, ddocs: [JSON] = [], docs: [MangoDocument] = people, partition: String? = nil)
    throws -> JSON
{
    try Mango.find(
        requestBody: parse(body), databaseName: "tx_mango", designDocuments: ddocs, documents: docs,
        partition: partition)
}

private func ids(_ response: JSON) -> [String] {
    (response["docs"]?.arrayValue ?? []).compactMap { $0["_id"]?.stringValue }
}

private func expectError(
    _ status: Int, _ error: String, _ reason: String, _ body: () throws -> Void,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    do {
        try body()
        Issue.record("expected \(error)", sourceLocation: sourceLocation)
    } catch let e as MangoError {
        #expect(e == MangoError(status: status, error: error, reason: reason), sourceLocation: sourceLocation)
    } catch {
        Issue.record("unexpected \(error)", sourceLocation: sourceLocation)
    }
}

/// The design document `POST _index {"index":{"fields":["age"]},"name":"age-idx","ddoc":"by-age"}` creates.
private func ageIndexDDoc() throws -> JSON {
    let created = try Mango.createIndex(
        requestBody: parse(#"{"index":{"fields":["age"]},"name":"age-idx","ddoc":"by-age","type":"json"}"#),
        designDocuments: [], partitionedDatabase: false)
    return try #require(created.designDocumentToSave).setting("_rev", "1-aaaa")
}

@Suite("Mango selectors", .ownThreads)
struct MangoSelectorTests {
    private func matches(_ selector: String, _ doc: String) throws -> Bool {
        try MangoSelector(parse(selector)).matches(parse(doc))
    }

    @Test("Normalisation as CouchDB prints it")
    func normalisation() throws {
        func norm(_ s: String) throws -> String { try MangoSelector(parse(s)).normalized.serialized }
        #expect(try norm(#"{"year":{"$gt":2010}}"#) == #"{"year":{"$gt":2010}}"#)
        #expect(try norm(#"{"year":2010}"#) == #"{"year":{"$eq":2010}}"#)
        #expect(try norm(#"{"a":1,"b":2}"#) == #"{"$and":[{"a":{"$eq":1}},{"b":{"$eq":2}}]}"#)
        #expect(try norm(#"{"a":{"b":{"$gt":1}}}"#) == #"{"a.b":{"$gt":1}}"#)
        #expect(try norm(#"{"a":{"$gt":1,"$lt":5}}"#) == #"{"$and":[{"a":{"$gt":1}},{"a":{"$lt":5}}]}"#)
        #expect(try norm(#"{"$not":{"a":{"$gt":10}}}"#) == #"{"a":{"$lte":10}}"#)
        #expect(
            try norm(#"{"$nor":[{"a":1},{"b":{"$in":[1]}}]}"#)
                == #"{"$and":[{"a":{"$ne":1}},{"b":{"$nin":[1]}}]}"#)
        #expect(
            try norm(#"{"$not":{"$and":[{"a":{"$gt":10}},{"a":{"$lt":5}}]}}"#)
                == #"{"$or":[{"a":{"$lte":10}},{"a":{"$gte":5}}]}"#)
        #expect(try norm(#"{"a":{"$not":{"$regex":"x"}}}"#) == #"{"a":{"$not":{"$regex":"x"}}}"#)
        #expect(try norm(#"{"a\\.b":{"c":1}}"#) == #"{"a.b.c":{"$eq":1}}"#)
        #expect(try norm(#"{"s":{"$elemMatch":{"$gte":80}}}"#) == #"{"s":{"$elemMatch":{"":{"$gte":80}}}}"#)
        #expect(try norm("{}") == "{}")
    }

    @Test("Selector errors")
    func errors() {
        expectError(400, "invalid_operator", "Invalid operator: $bogus") {
            _ = try MangoSelector(parse(#"{"age":{"$bogus":1}}"#))
        }
        expectError(400, "bad_arg", "Bad argument for operator $regex: <<40>>") {
            _ = try MangoSelector(parse(#"{"name":{"$regex":"("}}"#))
        }
        expectError(400, "bad_arg", "Bad argument for operator $in: 1") {
            _ = try MangoSelector(parse(#"{"a":{"$in":1}}"#))
        }
        expectError(400, "bad_arg", "Bad argument for operator $size: -1") {
            _ = try MangoSelector(parse(#"{"a":{"$size":-1}}"#))
        }
        expectError(400, "bad_arg", "Bad argument for operator $and: {[{<<97>>,1}]}") {
            _ = try MangoSelector(parse(#"{"$and":{"a":1}}"#))
        }
        expectError(400, "not_supported", "Unsupported operator: $where") {
            _ = try MangoSelector(parse(#"{"$where":"x"}"#))
        }
        expectError(400, "invalid_selector", "One or more conditions is missing a field name.") {
            _ = try MangoSelector(parse(#"{"$gt":1}"#))
        }
        expectError(400, "invalid_field_name", "Invalid field name: a..b") {
            _ = try MangoSelector(parse(#"{"a..b":1}"#))
        }
        expectError(400, "invalid_selector_json", "Selector must be a JSON object, not: [1]") {
            _ = try MangoSelector(parse("[1]"))
        }
    }

    @Test("Every operator")
    func operators() throws {
        let doc =
            #"{"_id":"d1","n":5,"f":2.5,"s":"hello","b":true,"z":null,"arr":[1,2,3],"tags":["x","y"],"o":{"k":{"deep":1},"k2":2},"objs":[{"v":1},{"v":9}],"e":[]}"#
        let cases: [(String, Bool)] = [
            (#"{"n":5}"#, true), (#"{"n":5.0}"#, true), (#"{"n":{"$eq":6}}"#, false),
            (#"{"n":{"$ne":6}}"#, true), (#"{"n":{"$gt":4}}"#, true), (#"{"n":{"$gt":5}}"#, false),
            (#"{"n":{"$gte":5}}"#, true), (#"{"n":{"$lt":5}}"#, false), (#"{"n":{"$lte":5}}"#, true),
            (#"{"n":{"$lt":"a"}}"#, true),  // numbers sort before strings
            (#"{"s":{"$gt":"Hello"}}"#, false), (#"{"s":{"$gt":"hellO"}}"#, false), (#"{"s":{"$lt":"help"}}"#, true),
            (#"{"missing":{"$exists":false}}"#, true), (#"{"n":{"$exists":false}}"#, false),
            (#"{"z":{"$exists":true}}"#, true), (#"{"missing":{"$exists":true}}"#, false),
            (#"{"n":{"$type":"number"}}"#, true), (#"{"s":{"$type":"string"}}"#, true),
            (#"{"z":{"$type":"null"}}"#, true),
            (#"{"arr":{"$type":"array"}}"#, true), (#"{"o":{"$type":"object"}}"#, true),
            (#"{"b":{"$type":"boolean"}}"#, true),
            (#"{"n":{"$in":[1,5]}}"#, true), (#"{"n":{"$in":[]}}"#, false), (#"{"tags":{"$in":["y","q"]}}"#, true),
            (#"{"n":{"$nin":[1,2]}}"#, true), (#"{"tags":{"$nin":["x"]}}"#, false), (#"{"n":{"$nin":[]}}"#, true),
            (#"{"arr":{"$size":3}}"#, true), (#"{"arr":{"$size":2}}"#, false), (#"{"s":{"$size":5}}"#, false),
            (#"{"n":{"$mod":[2,1]}}"#, true), (#"{"n":{"$mod":[5,0]}}"#, true), (#"{"f":{"$mod":[2,0]}}"#, false),
            (#"{"s":{"$regex":"^h.l+o$"}}"#, true), (#"{"s":{"$regex":"^H"}}"#, false),
            (#"{"n":{"$regex":"5"}}"#, false),
            (#"{"s":{"$regex":"(?i)^HEL"}}"#, true), (#"{"s":{"$beginsWith":"he"}}"#, true),
            (#"{"$and":[{"n":5},{"s":"hello"}]}"#, true), (#"{"$and":[{"n":5},{"s":"x"}]}"#, false),
            (#"{"$or":[{"n":6},{"s":"hello"}]}"#, true), (#"{"$or":[{"n":6},{"s":"x"}]}"#, false),
            (#"{"$nor":[{"n":6},{"s":"x"}]}"#, true), (#"{"$nor":[{"n":5}]}"#, false),
            (#"{"n":{"$not":{"$gt":6}}}"#, true), (#"{"$not":{"n":5}}"#, false),
            (#"{"tags":{"$all":["y","x"]}}"#, true), (#"{"tags":{"$all":["x","q"]}}"#, false),
            (#"{"tags":{"$all":[["x","y"]]}}"#, true), (#"{"tags":{"$all":[]}}"#, false),
            (#"{"objs":{"$elemMatch":{"v":{"$gt":5}}}}"#, true), (#"{"objs":{"$elemMatch":{"v":{"$gt":10}}}}"#, false),
            (#"{"arr":{"$elemMatch":{"$gte":3}}}"#, true),
            (#"{"objs":{"$allMatch":{"v":{"$gt":0}}}}"#, true), (#"{"objs":{"$allMatch":{"v":{"$gt":1}}}}"#, false),
            (#"{"e":{"$allMatch":{"$gt":0}}}"#, false),
            (#"{"o":{"$keyMapMatch":{"$eq":"k2"}}}"#, true), (#"{"o":{"$keyMapMatch":{"$eq":"k3"}}}"#, false),
            (#"{"o.k.deep":1}"#, true), (#"{"o":{"k":{"deep":{"$gt":0}}}}"#, true), (#"{"arr.1":2}"#, true),
            (#"{"objs.1.v":9}"#, true), (#"{"arr.9":{"$exists":false}}"#, false),
            (#"{"_id":{"$gt":"c"}}"#, true), (#"{"_id":{"$lt":"D"}}"#, false),  // _id compares raw
            (#"{}"#, true),
        ]
        for (selector, expected) in cases {
            #expect(try matches(selector, doc) == expected, "\(selector)")
        }
    }

    @Test("Dotted names with escaped dots")
    func escapedDots() throws {
        #expect(try matches(#"{"a\\.b":1}"#, #"{"a.b":1}"#))
        #expect(try !matches(#"{"a.b":1}"#, #"{"a.b":1}"#))
        #expect(try matches(#"{"a.b":1}"#, #"{"a":{"b":1}}"#))
    }
}

@Suite("Mango find, indexes and explain", .ownThreads)
struct MangoTests {
    @Test("mango.json s03–s12: queries without an index")
    func transcriptQueriesWithoutIndex() throws {
        let warning = "No matching index found, create an index to optimize query time."
        let s03 = try find(#"{"selector":{"age":{"$gt":30}}}"#)
        #expect(ids(s03) == ["m1", "m3", "m5"])
        #expect(s03["docs"]?.arrayValue?.first == people[0].body)
        #expect(s03["warning"] == .string(warning))
        #expect(s03["bookmark"]?.stringValue != nil)
        #expect(s03.objectValue?.map(\.0) == ["docs", "bookmark", "warning"])
        #expect(
            try find(#"{"selector":{"city":{"$eq":"Paris"}},"fields":["_id","name"]}"#)["docs"]
                == parse(#"[{"_id":"m1","name":"Alice"},{"_id":"m3","name":"Carol"}]"#))
        #expect(
            try find(#"{"selector":{"age":{"$lt":25}},"fields":["_id","age"]}"#)["docs"]
                == parse(#"[{"_id":"m4","age":19}]"#))
        #expect(
            try find(#"{"selector":{"city":{"$in":["Rome","Oslo"]}},"fields":["_id","city"]}"#)["docs"]
                == parse(#"[{"_id":"m4","city":"Rome"},{"_id":"m6","city":"Oslo"}]"#))
        #expect(
            try ids(find(#"{"selector":{"$and":[{"city":"Paris"},{"age":{"$gt":35}}]},"fields":["_id"]}"#)) == ["m3"])
        #expect(
            try ids(find(#"{"selector":{"$or":[{"city":"Rome"},{"age":25}]},"fields":["_id"]}"#)) == ["m2", "m4", "m6"])
        #expect(
            try find(#"{"selector":{"name":{"$regex":"^[A-C]"}},"fields":["name"]}"#)["docs"]
                == parse(#"[{"name":"Alice"},{"name":"Bob"},{"name":"Carol"}]"#))
        #expect(
            try find(#"{"selector":{"manager":{"$exists":true}},"fields":["_id","manager"]}"#)["docs"]
                == parse(#"[{"_id":"m3","manager":true},{"_id":"m5","manager":false}]"#))
        #expect(
            try ids(
                find(#"{"selector":{"scores":{"$elemMatch":{"subject":"math","value":{"$gte":80}}}},"fields":["_id"]}"#)
            ) == ["m1"])
        #expect(try ids(find(#"{"selector":{"age":{"$gt":0}},"fields":["_id"],"limit":2,"skip":1}"#)) == ["m2", "m3"])
    }

    @Test("mango.json s13, s23–s25: errors")
    func transcriptErrors() {
        expectError(400, "no_usable_index", "No index exists for this sort, try indexing by the sort fields.") {
            _ = try find(#"{"selector":{"age":{"$gt":0}},"sort":[{"age":"asc"}]}"#)
        }
        expectError(400, "invalid_operator", "Invalid operator: $bogus") {
            _ = try find(#"{"selector":{"age":{"$bogus":1}}}"#)
        }
        expectError(400, "missing_required_key", "Missing required key: selector") {
            _ = try find(#"{"fields":["_id"]}"#)
        }
        expectError(400, "bad_arg", "Bad argument for operator $regex: <<40>>") {
            _ = try find(#"{"selector":{"name":{"$regex":"("}}}"#)
        }
        expectError(400, "invalid_key", "Invalid key bogus for this request.") {
            _ = try find(#"{"selector":{},"bogus":1}"#)
        }
        expectError(400, "invalid_non_neg_integer", "-1 is not an integer greater than or equal to zero") {
            _ = try find(#"{"selector":{},"limit":-1}"#)
        }
        expectError(400, "unsupported_mixed_sort", "Sorts currently only support a single direction for all fields.") {
            _ = try find(#"{"selector":{},"sort":[{"a":"asc"},{"b":"desc"}]}"#)
        }
    }

    @Test("mango.json s14–s16, s27–s28: create, list and delete an index")
    func transcriptIndexLifecycle() throws {
        let created = try Mango.createIndex(
            requestBody: parse(#"{"index":{"fields":["age"]},"name":"age-idx","ddoc":"by-age","type":"json"}"#),
            designDocuments: [], partitionedDatabase: false)
        #expect(created.response == parse(#"{"result":"created","id":"_design/by-age","name":"age-idx"}"#))
        let ddoc = try #require(created.designDocumentToSave)
        #expect(
            ddoc
                == parse(
                    #"{"_id":"_design/by-age","language":"query","views":{"age-idx":{"map":{"fields":{"age":"asc"},"partial_filter_selector":{}},"reduce":"_count","options":{"def":{"fields":["age"]}}}}}"#
                ))
        let saved = ddoc.setting("_rev", "1-x")
        let again = try Mango.createIndex(
            requestBody: parse(#"{"index":{"fields":["age"]},"name":"age-idx","ddoc":"by-age","type":"json"}"#),
            designDocuments: [saved], partitionedDatabase: false)
        #expect(again.designDocumentToSave == nil)
        #expect(again.response["result"] == "exists")
        expectError(400, "missing_required_key", "Missing required key: fields") {
            _ = try Mango.createIndex(
                requestBody: parse(#"{"index":{}}"#), designDocuments: [], partitionedDatabase: false)
        }
        #expect(
            Mango.listIndexes(designDocuments: [saved])
                == parse(
                    #"{"total_rows":2,"indexes":[{"ddoc":null,"name":"_all_docs","type":"special","def":{"fields":[{"_id":"asc"}]}},{"ddoc":"_design/by-age","name":"age-idx","type":"json","partitioned":false,"def":{"fields":[{"age":"asc"}]}}]}"#
                ))
        let deletion = try Mango.deleteIndex(
            designDocuments: [saved], designDocumentID: "by-age", type: "json", name: "age-idx")
        #expect(deletion.designDocumentID == "_design/by-age")
        #expect(deletion.updated == nil)
        #expect(deletion.response == ["ok": true])
        expectError(404, "not_found", "missing") {
            _ = try Mango.deleteIndex(designDocuments: [], designDocumentID: "by-age", type: "json", name: "age-idx")
        }
    }

    @Test("Generated names, second index in the same ddoc, partitioned option")
    func generatedNames() throws {
        let c = try Mango.createIndex(
            requestBody: parse(#"{"index":{"fields":["a","b"]}}"#), designDocuments: [],
            partitionedDatabase: false)
        let name = try #require(c.response["name"]?.stringValue)
        #expect(name.count == 40 && name.allSatisfy(\.isHexDigit))
        #expect(c.response["id"] == .string("_design/" + name))
        let d1 = try #require(c.designDocumentToSave).setting("_rev", "1-x")
        let c2 = try Mango.createIndex(
            requestBody: parse(#"{"index":{"fields":["c"]},"ddoc":"\#(name)","name":"c"}"#),
            designDocuments: [d1], partitionedDatabase: false)
        let d2 = try #require(c2.designDocumentToSave)
        #expect(d2["_rev"] == "1-x")
        #expect(d2["views"]?.objectValue?.map(\.0) == [name, "c"])
        let del = try Mango.deleteIndex(
            designDocuments: [d2], designDocumentID: "_design/" + name, type: "json", name: "c")
        #expect(del.updated?["views"]?.objectValue?.map(\.0) == [name])
        let p = try Mango.createIndex(
            requestBody: parse(#"{"index":{"fields":["t"]},"ddoc":"p","partitioned":false}"#),
            designDocuments: [], partitionedDatabase: true)
        #expect(p.designDocumentToSave?["options"] == parse(#"{"partitioned":false}"#))
        let t = try Mango.createIndex(
            requestBody: parse(#"{"index":{},"type":"text","ddoc":"t","name":"txt"}"#),
            designDocuments: [], partitionedDatabase: false)
        #expect(t.designDocumentToSave?["indexes"]?["txt"]?["index"]?["fields"] == "all_fields")
        let listed = Mango.listIndexes(designDocuments: [t.designDocumentToSave!.setting("_rev", "1-y")])
        #expect(listed["indexes"]?.arrayValue?.last?["type"] == "text")
        expectError(503, "required index service unavailable", "text") {
            _ = try find(#"{"selector":{"$text":"Alice"}}"#, ddocs: [t.designDocumentToSave!.setting("_rev", "1-y")])
        }
    }

    @Test("mango.json s17–s22: sort, paging, execution stats and use_index with the age index")
    func transcriptWithIndex() throws {
        let ddocs = [try ageIndexDDoc()]
        let s17 = try find(
            #"{"selector":{"age":{"$gt":0}},"sort":[{"age":"asc"}],"fields":["_id","age"]}"#, ddocs: ddocs)
        #expect(
            s17["docs"]
                == parse(
                    #"[{"_id":"m4","age":19},{"_id":"m2","age":25},{"_id":"m6","age":25},{"_id":"m1","age":31},{"_id":"m5","age":37},{"_id":"m3","age":42}]"#
                ))
        #expect(s17["warning"] == nil)
        // Identical to the bookmark CouchDB produced for this step.
        #expect(s17["bookmark"] == "g2wAAAACaAJkAA5zdGFydGtleV9kb2NpZG0AAAACbTNoAmQACHN0YXJ0a2V5awABKmo")
        let page1 = try find(
            #"{"selector":{"age":{"$gt":20}},"sort":[{"age":"asc"}],"fields":["_id","age"],"limit":2}"#, ddocs: ddocs)
        #expect(page1["docs"] == parse(#"[{"_id":"m2","age":25},{"_id":"m6","age":25}]"#))
        #expect(page1["bookmark"] == "g2wAAAACaAJkAA5zdGFydGtleV9kb2NpZG0AAAACbTZoAmQACHN0YXJ0a2V5awABGWo")
        let bookmark = try #require(page1["bookmark"]?.stringValue)
        let page2 = try find(
            #"{"selector":{"age":{"$gt":20}},"sort":[{"age":"asc"}],"fields":["_id","age"],"limit":2,"bookmark":"\#(bookmark)"}"#,
            ddocs: ddocs)
        #expect(page2["docs"] == parse(#"[{"_id":"m1","age":31},{"_id":"m5","age":37}]"#))
        let s20 = try find(#"{"selector":{"age":{"$gt":30}},"fields":["_id"],"execution_stats":true}"#, ddocs: ddocs)
        #expect(ids(s20) == ["m1", "m5", "m3"])
        let stats = try #require(s20["execution_stats"])
        #expect(
            stats.objectValue?.map(\.0) == [
                "total_keys_examined", "total_docs_examined", "total_quorum_docs_examined", "results_returned",
                "execution_time_ms",
            ])
        #expect(stats["total_keys_examined"] == 3)
        #expect(stats["total_docs_examined"] == 0)
        #expect(stats["total_quorum_docs_examined"] == 0)
        #expect(stats["results_returned"] == 3)
        if case .double? = stats["execution_time_ms"] {} else { Issue.record("execution_time_ms must be a float") }
        let s21 = try find(
            #"{"selector":{"age":{"$gt":30}},"fields":["_id"],"use_index":["by-age","age-idx"]}"#, ddocs: ddocs)
        #expect(ids(s21) == ["m1", "m5", "m3"])
        #expect(s21["warning"] == nil)
        let s22 = try find(#"{"selector":{"age":{"$gt":30}},"fields":["_id"],"use_index":"nosuch"}"#, ddocs: ddocs)
        #expect(ids(s22) == ["m1", "m5", "m3"])
        #expect(
            s22["warning"] == "_design/nosuch was not used because it does not contain a valid index for this query.")
        let desc = try find(#"{"selector":{"age":{"$gt":20}},"sort":[{"age":"desc"}],"fields":["_id"]}"#, ddocs: ddocs)
        #expect(ids(desc) == ["m3", "m5", "m1", "m6", "m2"])
        expectError(
            400, "invalid_index", "_design/nosuch specified by `use_index` could not be found or it is not suitable."
        ) {
            _ = try find(#"{"selector":{"age":{"$gt":30}},"use_index":"nosuch","allow_fallback":false}"#, ddocs: ddocs)
        }
    }

    @Test("mango.json s26: explain")
    func transcriptExplain() throws {
        let ddocs = [try ageIndexDDoc()]
        let explained = try Mango.explain(
            requestBody: parse(#"{"selector":{"age":{"$gt":30}},"fields":["_id"]}"#),
            databaseName: "tx_mango", designDocuments: ddocs, partition: nil)
        let expected = parse(
            #"{"dbname":"tx_mango","index":{"ddoc":"_design/by-age","name":"age-idx","type":"json","partitioned":false,"def":{"fields":[{"age":"asc"}]}},"partitioned":false,"selector":{"age":{"$gt":30}},"opts":{"use_index":[],"bookmark":"nil","limit":25,"skip":0,"sort":{},"fields":["_id"],"partition":"","r":1,"conflicts":false,"stale":false,"update":true,"stable":false,"execution_stats":false,"allow_fallback":true},"limit":25,"skip":0,"fields":["_id"],"index_candidates":[{"index":{"ddoc":null,"name":"_all_docs","type":"special","def":{"fields":[{"_id":"asc"}]}},"analysis":{"usable":true,"reasons":[{"name":"unfavored_type"}],"ranking":1,"covering":null}}],"selector_hints":[{"type":"json","indexable_fields":["age"],"unindexable_fields":[]}],"mrargs":{"include_docs":false,"view_type":"map","reduce":false,"partition":null,"start_key":[30],"end_key":["<MAX>"],"direction":"fwd","stable":false,"update":true,"conflicts":"undefined"},"covering":true}"#
        )
        #expect(explained == expected)
        let noIndex = try Mango.explain(
            requestBody: parse(#"{"selector":{"_id":{"$gte":"m2"},"x":{"$exists":false}}}"#),
            databaseName: "db", designDocuments: [], partition: nil)
        #expect(noIndex["index"]?["name"] == "_all_docs")
        #expect(noIndex["mrargs"]?["start_key"] == "m2")
        #expect(noIndex["mrargs"]?["end_key"] == "<MAX>")
        #expect(noIndex["covering"] == false)
    }

    @Test("Composite index: choice, key range and sort")
    func compositeIndex() throws {
        let created = try Mango.createIndex(
            requestBody: parse(#"{"index":{"fields":["city","age"]},"ddoc":"ca","name":"ca"}"#),
            designDocuments: [], partitionedDatabase: false)
        let ddocs = [try #require(created.designDocumentToSave).setting("_rev", "1-c"), try ageIndexDDoc()]
        let body = #"{"selector":{"city":"Paris","age":{"$gt":30}},"fields":["_id"]}"#
        let explained = try Mango.explain(
            requestBody: parse(body), databaseName: "db", designDocuments: ddocs, partition: nil)
        #expect(explained["index"]?["name"] == "ca")
        #expect(explained["mrargs"]?["start_key"] == parse(#"["Paris",30]"#))
        #expect(explained["mrargs"]?["end_key"] == parse(#"["Paris","<MAX>"]"#))
        #expect(explained["selector"] == parse(#"{"$and":[{"city":{"$eq":"Paris"}},{"age":{"$gt":30}}]}"#))
        let candidates = explained["index_candidates"]?.arrayValue ?? []
        #expect(candidates.map { $0["index"]?["name"] } == ["age-idx", "_all_docs"])
        #expect(candidates.first?["analysis"]?["reasons"] == parse(#"[{"name":"less_overlap"}]"#))
        #expect(try ids(find(body, ddocs: ddocs)) == ["m1", "m3"])
        // Sorting on age with city fixed by $eq can use the composite index.
        let sorted = try find(#"{"selector":{"city":"Berlin"},"sort":["city","age"],"fields":["_id"]}"#, ddocs: ddocs)
        #expect(ids(sorted) == ["m2", "m5"])
        let notUsable = try Mango.explain(
            requestBody: parse(#"{"selector":{"name":"Bob"}}"#), databaseName: "db",
            designDocuments: ddocs, partition: nil)
        #expect(notUsable["index"]?["name"] == "_all_docs")
        #expect(notUsable["mrargs"]?["start_key"] == .some(.null))
        #expect(notUsable["mrargs"]?["end_key"] == "<MAX>")
        #expect(
            notUsable["index_candidates"]?.arrayValue?.first?["analysis"]?["reasons"]
                == parse(#"[{"name":"field_mismatch"}]"#))
    }

    @Test("partitioned.json s10: partition _find")
    func transcriptPartition() throws {
        let docs = [
            MangoDocument(
                id: "sensor-1:r1", body: ["_id": "sensor-1:r1", "_rev": "1-a", "t": 20.5, "kind": "temp"], conflicts: []
            ),
            MangoDocument(
                id: "sensor-1:r2", body: ["_id": "sensor-1:r2", "_rev": "1-b", "t": 21.0, "kind": "temp"], conflicts: []
            ),
        ]
        let r = try Mango.find(
            requestBody: parse(#"{"selector":{"t":{"$gt":0}},"fields":["_id","t"]}"#),
            databaseName: "tx_part", designDocuments: [], documents: docs, partition: "sensor-1")
        #expect(r["docs"]?.serialized == #"[{"_id":"sensor-1:r1","t":20.5},{"_id":"sensor-1:r2","t":21.0}]"#)
        #expect(r["warning"] == "No matching index found, create an index to optimize query time.")
        expectError(
            400, "no_usable_index", "No partitioned index exists for this sort, try indexing by the sort fields."
        ) {
            _ = try Mango.find(
                requestBody: parse(#"{"selector":{},"sort":["t"]}"#), databaseName: "tx_part",
                designDocuments: [], documents: docs, partition: "sensor-1")
        }
    }

    @Test("Bookmark paging over 100 documents in pages of 7: no repeats, no gaps")
    func bookmarkPaging() throws {
        var docs: [MangoDocument] = []
        for i in 0..<100 {
            let id = String(format: "doc%03d", i)
            // Many equal keys so that paging must use the doc id as a tie breaker.
            docs.append(
                MangoDocument(
                    id: id, body: ["_id": .string(id), "_rev": "1-x", "g": .int(Int64(i % 9)), "n": .int(Int64(i))],
                    conflicts: []))
        }
        let ddoc = try #require(
            try Mango.createIndex(
                requestBody: parse(#"{"index":{"fields":["g"]},"ddoc":"g","name":"g"}"#),
                designDocuments: [], partitionedDatabase: false
            ).designDocumentToSave
        )
        .setting("_rev", "1-z")
        for (selector, sort, ddocs) in [
            (#"{"n":{"$gte":0}}"#, "", [JSON]()),  // _all_docs
            (#"{"g":{"$gte":0}}"#, #","sort":["g"]"#, [ddoc]),
            (#"{"g":{"$gte":0}}"#, #","sort":[{"g":"desc"}]"#, [ddoc]),
        ] {
            var seen: [String] = []
            var bookmark: String?
            var pages = 0
            while pages < 30 {
                let bm = bookmark.map { #","bookmark":"\#($0)""# } ?? ""
                let r = try find(
                    #"{"selector":\#(selector),"limit":7,"fields":["_id","g"]\#(sort)\#(bm)}"#, ddocs: ddocs, docs: docs
                )
                let page = ids(r)
                pages += 1
                if page.isEmpty { break }
                #expect(page.count <= 7)
                seen += page
                bookmark = try #require(r["bookmark"]?.stringValue)
            }
            #expect(pages == 16)
            #expect(seen.count == 100)
            #expect(Set(seen).count == 100)
            if !sort.isEmpty {
                let keys = seen.compactMap { id in docs.first { $0.id == id }?.body["g"]?.intValue }
                let ordered = sort.contains("desc") ? keys.sorted(by: >) : keys.sorted()
                #expect(keys == ordered)
            }
        }
        expectError(400, "invalid_bookmark", #"Invalid bookmark value: "nope""#) {
            _ = try find(#"{"selector":{},"bookmark":"nope"}"#)
        }
    }

    @Test("Conflicts, r, skip past the end, limit 0, design documents excluded")
    func options() throws {
        var docs = people
        docs[0].conflicts = ["1-bbbb"]
        docs.insert(
            MangoDocument(id: "_design/x", body: ["_id": "_design/x", "_rev": "1-d", "age": 99], conflicts: []), at: 0)
        let r = try find(
            #"{"selector":{"age":{"$gt":30}},"conflicts":true,"r":2,"update":false,"stable":true,"execution_stats":true}"#,
            docs: docs)
        #expect(ids(r) == ["m1", "m3", "m5"])
        #expect(r["docs"]?.arrayValue?.first?["_conflicts"] == ["1-bbbb"])
        #expect(r["execution_stats"]?["total_quorum_docs_examined"] == 7)
        #expect(try ids(find(#"{"selector":{},"skip":10}"#)) == [])
        #expect(try ids(find(#"{"selector":{},"limit":0}"#)) == [])
        #expect(try find(#"{"selector":{"$or":[]}}"#) == ["docs": []])
        let fields = try find(#"{"selector":{"_id":"m1"},"fields":["scores.0.value","name","nope"]}"#)
        #expect(
            fields["docs"] == parse(#"[{"scores":{"0":{"value":90}},"name":"Alice"}]"#)
                || fields["docs"] == parse(#"[{"name":"Alice"}]"#))
    }

    @Test("changes.json s16: _selector filter")
    func changesSelector() throws {
        let s = try MangoSelector(parse(#"{"type":"x"}"#))
        #expect(s.matches(parse(#"{"_id":"a","type":"x","n":10}"#)))
        #expect(!s.matches(parse(#"{"_id":"b","_deleted":true}"#)))
    }
}
