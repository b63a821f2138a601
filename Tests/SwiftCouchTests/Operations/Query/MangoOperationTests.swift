import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

/// A person in the Mango transcripts.
private struct Person: Codable, Sendable, Equatable {
    var _id: String
    var _rev: String?
    var name: String?
    var age: Int?
    var city: String?
}

@Suite("Mango: _find, _explain, _index against recorded CouchDB 3.5 responses", .ownThreads)
struct MangoOperationTests {
    private func expectBody(_ run: SimulationResult<some Sendable>, _ step: Transcripts.Step) {
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        #expect(run.request?.headers["Content-Type"] == "application/json")
        #expect(run.request?.bodyJSON == OpsFixtures.json(step.requestBody))
    }

    @Test("$gt without an index: typed documents, bookmark and warning")
    func findTyped() throws {
        let step = try #require(Transcripts.step("mango", "s03"))
        let run = Simulation.run(
            FindOperation<Person>(database: "tx_mango", selector: .field("age").greaterThan(30)),
            response: step.simulated)
        expectBody(run, step)
        let found = try run.result.get().value
        #expect(found.docs.map(\._id) == ["m1", "m3", "m5"])
        #expect(
            found.docs.first
                == Person(_id: "m1", _rev: "1-a39faaf09e78a1d962b285c6c335636b", name: "Alice", age: 31, city: "Paris"))
        #expect(found.bookmark == step.responseJSON?["bookmark"]?.stringValue)
        #expect(found.warning == "No matching index found, create an index to optimize query time.")
        #expect(found.executionStats == nil)
    }

    @Test(
        "Recorded queries: the body sent equals the recorded body",
        arguments: [
            ("s04", MangoQuery(selector: .field("city").equals("Paris"), fields: ["_id", "name"])),
            ("s05", MangoQuery(selector: .field("age").lessThan(25), fields: ["_id", "age"])),
            ("s06", MangoQuery(selector: .field("city").in(["Rome", "Oslo"]), fields: ["_id", "city"])),
            ("s09", MangoQuery(selector: .field("name").regex("^[A-C]"), fields: ["name"])),
            ("s10", MangoQuery(selector: .field("manager").exists(), fields: ["_id", "manager"])),
            ("s12", MangoQuery(selector: .field("age").greaterThan(0), fields: ["_id"], limit: 2, skip: 1)),
            (
                "s17",
                MangoQuery(selector: .field("age").greaterThan(0), fields: ["_id", "age"], sort: [.ascending("age")])
            ),
            (
                "s21",
                MangoQuery(
                    selector: .field("age").greaterThan(30), fields: ["_id"],
                    useIndex: .index(designDocument: "by-age", name: "age-idx"))
            ),
            (
                "s22",
                MangoQuery(
                    selector: .field("age").greaterThan(30), fields: ["_id"], useIndex: .designDocument("nosuch"))
            ),
        ])
    func recordedQueries(name: String, query: MangoQuery) throws {
        let step = try #require(Transcripts.step("mango", name))
        let run = Simulation.run(FindOperation<JSONValue>(database: "tx_mango", query: query), response: step.simulated)
        expectBody(run, step)
        let found = try run.result.get().value
        #expect(.array(found.docs) == step.responseJSON?["docs"])
        #expect(found.bookmark == step.responseJSON?["bookmark"]?.stringValue)
        #expect(found.warning == step.responseJSON?["warning"]?.stringValue)
    }

    @Test("Raw selectors with implicit equality ($and, $or as recorded)")
    func rawCombinations() throws {
        let and = try #require(Transcripts.step("mango", "s07"))
        let andQuery = MangoQuery(
            selector: Selector.raw(["city": "Paris"]).and(.field("age").greaterThan(35)), fields: ["_id"])
        let andRun = Simulation.run(
            FindOperation<JSONValue>(database: "tx_mango", query: andQuery), response: and.simulated)
        expectBody(andRun, and)
        #expect(andRun.value?.docs == [["_id": "m3"]])

        let or = try #require(Transcripts.step("mango", "s08"))
        let orQuery = MangoQuery(selector: .or([["city": "Rome"], ["age": 25]]), fields: ["_id"])
        let orRun = Simulation.run(
            FindOperation<JSONValue>(database: "tx_mango", query: orQuery), response: or.simulated)
        expectBody(orRun, or)
        #expect(orRun.value?.docs.count == 3)

        let elem = try #require(Transcripts.step("mango", "s11"))
        let elemQuery = MangoQuery(
            selector: .field("scores").elemMatch(["subject": "math", "value": ["$gte": 80]]), fields: ["_id"])
        let elemRun = Simulation.run(
            FindOperation<JSONValue>(database: "tx_mango", query: elemQuery), response: elem.simulated)
        expectBody(elemRun, elem)
        #expect(elemRun.value?.docs == [["_id": "m1"]])
    }

    @Test("Bookmark paging: the second page sends the first page's bookmark")
    func paging() throws {
        let first = try #require(Transcripts.step("mango", "page1"))
        var query = MangoQuery(
            selector: .field("age").greaterThan(20), fields: ["_id", "age"], sort: [.ascending("age")], limit: 2)
        let page1 = Simulation.run(FindOperation<Person>(database: "tx_mango", query: query), response: first.simulated)
        expectBody(page1, first)
        let bookmark = try #require(try page1.result.get().value.bookmark)

        let second = try #require(Transcripts.step("mango", "s19"))
        query.bookmark = bookmark
        let page2 = Simulation.run(
            FindOperation<Person>(database: "tx_mango", query: query), response: second.simulated)
        expectBody(page2, second)
        #expect(page2.value?.docs.map(\._id) == ["m1", "m5"])
        #expect(page2.value?.docs.map(\.age) == [31, 37])
    }

    @Test("execution_stats decodes")
    func executionStats() throws {
        let step = try #require(Transcripts.step("mango", "s20"))
        let query = MangoQuery(selector: .field("age").greaterThan(30), fields: ["_id"], executionStats: true)
        let run = Simulation.run(FindOperation<JSONValue>(database: "tx_mango", query: query), response: step.simulated)
        expectBody(run, step)
        let stats = try #require(try run.result.get().value.executionStats)
        #expect(stats.totalKeysExamined == 3)
        #expect(stats.totalDocsExamined == 0)
        #expect(stats.resultsReturned == 3)
        #expect(stats.executionTimeMs == 0.455)
    }

    @Test("Every option goes into the body under CouchDB's name")
    func allOptions() throws {
        let query = MangoQuery(
            selector: .field("a").equals(1), fields: ["_id"], sort: ["a"], limit: 5, skip: 2, bookmark: "bm",
            useIndex: .designDocument("d"), readQuorum: 2, conflicts: true, update: false, stable: true,
            executionStats: true, allowFallback: false)
        #expect(
            try OpsFixtures.sortedText(query)
                == #"{"allow_fallback":false,"bookmark":"bm","conflicts":true,"execution_stats":true,"fields":["_id"],"#
                + #""limit":5,"r":2,"selector":{"a":{"$eq":1}},"skip":2,"sort":["a"],"stable":true,"update":false,"#
                + #""use_index":"d"}"#)
        #expect(try OpsFixtures.sortedText(MangoQuery(selector: .all)) == #"{"selector":{}}"#)
        OpsFixtures.expectInvalid(
            FindOperation<JSONValue>(database: "db", query: MangoQuery(selector: .all, limit: -1)),
            containing: "limit must not be negative")
        OpsFixtures.expectInvalid(
            FindOperation<JSONValue>(database: "db", query: MangoQuery(selector: .all, fields: [])),
            containing: "fields must not be empty")
        OpsFixtures.expectInvalid(
            FindOperation<JSONValue>(database: "db", query: MangoQuery(selector: .all, useIndex: .designDocument(""))),
            containing: "useIndex")
    }

    @Test("Recorded errors: no_usable_index, invalid_operator, bad_arg")
    func errors() throws {
        let noIndex = try #require(Transcripts.step("mango", "s13"))
        let sortRun = Simulation.run(
            FindOperation<JSONValue>(
                database: "tx_mango",
                query: MangoQuery(selector: .field("age").greaterThan(0), sort: [.ascending("age")])),
            response: noIndex.simulated)
        expectBody(sortRun, noIndex)
        #expect(sortRun.error?.statusCode == 400)
        #expect(sortRun.error?.error == "no_usable_index")

        let bogus = try #require(Transcripts.step("mango", "s23"))
        let bogusRun = Simulation.run(
            FindOperation<JSONValue>(database: "tx_mango", selector: .field("age").matching(operator: "$bogus", 1)),
            response: bogus.simulated)
        expectBody(bogusRun, bogus)
        #expect(bogusRun.error?.reason == "Invalid operator: $bogus")

        let regex = try #require(Transcripts.step("mango", "s25"))
        let regexRun = Simulation.run(
            FindOperation<JSONValue>(database: "tx_mango", selector: .field("name").regex("(")),
            response: regex.simulated)
        #expect(regexRun.error?.error == "bad_arg")
    }

    @Test("POST /{db}/_explain decodes the plan")
    func explain() throws {
        let step = try #require(Transcripts.step("mango", "s26"))
        let run = Simulation.run(
            ExplainOperation(
                database: "tx_mango", query: MangoQuery(selector: .field("age").greaterThan(30), fields: ["_id"])),
            response: step.simulated)
        expectBody(run, step)
        let plan = try run.result.get().value
        #expect(plan.dbname == "tx_mango")
        #expect(plan.index.ddoc == "_design/by-age")
        #expect(plan.index.name == "age-idx")
        #expect(plan.index.type == .json)
        #expect(plan.index.fieldNames == ["age"])
        #expect(plan.partitioned == false)
        #expect(plan.selector == ["age": ["$gt": 30]])
        #expect(plan.limit == 25)
        #expect(plan.skip == 0)
        #expect(plan.fields == ["_id"])
        #expect(plan.opts["r"] == 1)
        #expect(plan.mrargs?["direction"] == "fwd")
        #expect(plan.indexCandidates?[0]?["index"]?["name"] == "_all_docs")
        #expect(plan.covering == true)
    }

    @Test("Partitioned _find and _explain go to /{db}/_partition/{p}/…")
    func partitioned() throws {
        let step = try #require(Transcripts.step("partitioned", "s10"))
        let run = Simulation.run(
            FindOperation<JSONValue>(
                database: "tx_part",
                query: MangoQuery(selector: .field("t").greaterThan(0), fields: ["_id", "t"]), partition: "sensor-1"),
            response: step.simulated)
        expectBody(run, step)
        #expect(run.value?.docs.map { $0["_id"] } == ["sensor-1:r1", "sensor-1:r2"])

        let explain = Simulation.run(
            ExplainOperation(database: "db", query: MangoQuery(selector: .all), partition: "p 1"),
            response: .json(400, #"{"error":"x","reason":"y"}"#))
        #expect(OpsFixtures.line(explain.request) == "POST /db/_partition/p%201/_explain")
        OpsFixtures.expectInvalid(
            FindOperation<JSONValue>(database: "db", selector: .all, partition: "_bad"),
            containing: "must not start with '_'")
    }

    @Test("POST /{db}/_index creates a json index as recorded; missing fields are refused")
    func createIndex() throws {
        let step = try #require(Transcripts.step("mango", "s14"))
        let run = Simulation.run(
            CreateIndexOperation(
                database: "tx_mango", index: .json(fields: ["age"]), designDocument: "by-age", name: "age-idx"),
            response: step.simulated)
        expectBody(run, step)
        #expect(run.value == CreateIndexResponse(result: "created", id: "_design/by-age", name: "age-idx"))

        OpsFixtures.expectInvalid(
            CreateIndexOperation(database: "db", index: .json(fields: [])), containing: "at least one field")
        let missing = try #require(Transcripts.step("mango", "s15"))
        let refused = Simulation.run(
            CreateIndexOperation(database: "tx_mango", index: .json(fields: ["x"])), response: missing.simulated)
        #expect(refused.error?.error == "missing_required_key")
    }

    @Test("Index bodies: partial filter, partitioned, and text indexes")
    func indexBodies() throws {
        let partial = Simulation.run(
            CreateIndexOperation(
                database: "db",
                index: .json(
                    fields: [.descending("age"), "name"], partialFilterSelector: .field("type").equals("user")),
                partitioned: false),
            response: .json(200, #"{"result":"exists","id":"_design/x","name":"y"}"#))
        #expect(
            partial.request?.bodyJSON
                == [
                    "index": [
                        "fields": [["age": "desc"], "name"],
                        "partial_filter_selector": ["type": ["$eq": "user"]],
                    ],
                    "type": "json", "partitioned": false,
                ])
        #expect(partial.value?.result == "exists")

        let text = Simulation.run(
            CreateIndexOperation(
                database: "db",
                index: .text(
                    fields: [TextIndexField("name", .string), TextIndexField("age", .number)],
                    defaultField: ["enabled": false], analyzer: "standard", indexArrayLengths: true),
                designDocument: "_design/search", name: "text-idx"),
            response: .json(200, #"{"result":"created","id":"_design/search","name":"text-idx"}"#))
        #expect(
            text.request?.bodyJSON
                == [
                    "index": [
                        "fields": [["name": "name", "type": "string"], ["name": "age", "type": "number"]],
                        "default_field": ["enabled": false], "analyzer": "standard", "index_array_lengths": true,
                    ],
                    "ddoc": "_design/search", "name": "text-idx", "type": "text",
                ])
        let everything = Simulation.run(
            CreateIndexOperation(database: "db", index: .text()),
            response: .json(200, #"{"result":"created","id":"_design/a","name":"b"}"#))
        #expect(everything.request?.bodyJSON == ["index": [:], "type": "text"])
    }

    @Test("GET /{db}/_index lists indexes, the special one included")
    func listIndexes() throws {
        let step = try #require(Transcripts.step("mango", "s16"))
        let run = Simulation.run(ListIndexesOperation(database: "tx_mango"), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        let list = try run.result.get().value
        #expect(list.totalRows == 2)
        #expect(list.indexes[0].ddoc == nil)
        #expect(list.indexes[0].type == .special)
        #expect(list.indexes[0].fieldNames == ["_id"])
        #expect(list.indexes[1].ddoc == "_design/by-age")
        #expect(list.indexes[1].partitioned == false)
        #expect(list.indexes[1].def == ["fields": [["age": "asc"]]])

        let paged = Simulation.run(
            ListIndexesOperation(database: "db", limit: 1, skip: 1),
            response: .json(200, #"{"total_rows":0,"indexes":[]}"#))
        #expect(OpsFixtures.line(paged.request) == "GET /db/_index?limit=1&skip=1")
    }

    @Test("DELETE /{db}/_index/{ddoc}/json/{name}; deleting again is a 404")
    func deleteIndex() throws {
        let step = try #require(Transcripts.step("mango", "s27"))
        for ddoc in ["by-age", "_design/by-age"] {
            let run = Simulation.run(
                DeleteIndexOperation(database: "tx_mango", designDocument: ddoc, name: "age-idx"),
                response: step.simulated)
            #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
            #expect(run.value?.ok == true)
        }
        let again = try #require(Transcripts.step("mango", "s28"))
        let gone = Simulation.run(
            DeleteIndexOperation(database: "tx_mango", designDocument: "by-age", name: "age-idx"),
            response: again.simulated)
        #expect(gone.error?.statusCode == 404)
        #expect(gone.error?.reason == "missing")
        let text = Simulation.run(
            DeleteIndexOperation(database: "db", designDocument: "d", name: "n", type: .text),
            response: .json(200, #"{"ok":true}"#))
        #expect(OpsFixtures.line(text.request) == "DELETE /db/_index/d/text/n")
    }
}
