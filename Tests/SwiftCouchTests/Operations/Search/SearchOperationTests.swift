import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

private struct Animal: Codable, Sendable, Equatable {
    var _id: String
    var _rev: String
    var name: String
}

@Suite("Search: _search (GET and POST), partitioned, _search_info, _search_analyze, _nouveau", .ownThreads)
struct SearchOperationTests {
    private let response =
        #"{"total_rows":2,"bookmark":"g1AAAA","rows":[{"id":"kookaburra","order":[1.4,0],"#
        + #""fields":{"class":"bird"},"doc":{"_id":"kookaburra","_rev":"1-a","name":"Kookaburra"},"#
        + #""highlights":{"name":["<b>Kook</b>aburra"]}},{"id":"owl","order":[0.9,1],"fields":{},"#
        + #""doc":{"_id":"owl","_rev":"1-b","name":"Owl"}}],"counts":{"class":{"bird":2}},"#
        + #""ranges":{"weight":{"light":1,"heavy":1}}}"#

    @Test("POST sends every option under its name and decodes rows, counts, ranges and highlights")
    func post() throws {
        var query = SearchQuery("class:bird", bookmark: "g1", limit: 10, sort: ["-weight<number>"], includeDocs: true)
        query.includeFields = ["class"]
        query.counts = ["class"]
        query.drilldown = [["class", "bird"]]
        query.ranges = ["weight": ["light": "[0 TO 1]", "heavy": "{1 TO Infinity}"]]
        query.highlightFields = ["name"]
        query.highlightPreTag = "<b>"
        query.highlightPostTag = "</b>"
        query.highlightNumber = 2
        query.highlightSize = 50
        query.update = false
        let run = Simulation.run(
            SearchOperation<Animal>(
                database: "animals", designDocument: "_design/views", index: "animals", query: query),
            response: .json(200, response))
        #expect(OpsFixtures.line(run.request) == "POST /animals/_design/views/_search/animals")
        #expect(
            run.request?.bodyJSON
                == [
                    "q": "class:bird", "bookmark": "g1", "limit": 10, "sort": ["-weight<number>"], "include_docs": true,
                    "include_fields": ["class"], "counts": ["class"], "drilldown": [["class", "bird"]],
                    "ranges": ["weight": ["light": "[0 TO 1]", "heavy": "{1 TO Infinity}"]],
                    "highlight_fields": ["name"], "highlight_pre_tag": "<b>", "highlight_post_tag": "</b>",
                    "highlight_number": 2, "highlight_size": 50, "update": false,
                ])
        let result = try run.result.get().value
        #expect(result.totalRows == 2)
        #expect(result.bookmark == "g1AAAA")
        #expect(result.rows.map(\.id) == ["kookaburra", "owl"])
        #expect(result.rows[0].order == [1.4, 0])
        #expect(result.rows[0].fields?["class"] == "bird")
        #expect(result.rows[0].doc == Animal(_id: "kookaburra", _rev: "1-a", name: "Kookaburra"))
        #expect(result.rows[0].highlights?["name"] == ["<b>Kook</b>aburra"])
        #expect(result.counts?["class"]?["bird"] == 2)
        #expect(result.ranges?["weight"]?["heavy"] == 1)
        #expect(result.groups == nil)
    }

    @Test("GET puts q and bookmark as text and the rest as JSON in the query string")
    func get() throws {
        var query = SearchQuery("name:owl AND age:[1 TO 2]", bookmark: "g1", limit: 5)
        query.counts = ["class"]
        let run = Simulation.run(
            SearchOperation<JSONValue>(
                database: "animals", designDocument: "views", index: "animals", query: query, httpMethod: .get),
            response: .json(200, response))
        #expect(run.request?.method == "GET")
        #expect(run.request?.body == nil)
        #expect(run.request?.path == "/animals/_design/views/_search/animals")
        #expect(run.request?.queryItems.map(\.name) == ["q", "bookmark", "limit", "counts"])
        #expect(run.request?.queryValue("q") == "name:owl AND age:[1 TO 2]")
        #expect(run.request?.queryValue("bookmark") == "g1")
        #expect(run.request?.queryValue("limit") == "5")
        #expect(run.request?.queryValue("counts") == #"["class"]"#)
    }

    @Test("Grouped results, partitioned search, validation")
    func groupsAndPartitions() throws {
        var query = SearchQuery("*:*")
        query.groupField = "class"
        query.groupLimit = 2
        query.groupSort = ["name<string>"]
        let grouped = Simulation.run(
            SearchOperation<JSONValue>(
                database: "db", designDocument: "d", index: "i", query: query, partition: "sensor-1"),
            response: .json(
                200,
                #"{"total_rows":3,"groups":[{"by":"bird","total_rows":2,"rows":[{"id":"owl","order":[1,0],"fields":{}}]}]}"#
            ))
        #expect(OpsFixtures.line(grouped.request) == "POST /db/_partition/sensor-1/_design/d/_search/i")
        #expect(
            grouped.request?.bodyJSON == [
                "q": "*:*", "group_field": "class", "group_limit": 2, "group_sort": ["name<string>"],
            ])
        let groups = try #require(try grouped.result.get().value.groups)
        #expect(groups.first?.by == "bird")
        #expect(groups.first?.rows.first?.id == "owl")
        #expect(grouped.value?.rows.isEmpty == true)

        OpsFixtures.expectInvalid(
            SearchOperation<JSONValue>(database: "db", designDocument: "d", index: "i", query: SearchQuery("")),
            containing: "query must not be empty")
        var highlight = SearchQuery("a")
        highlight.highlightPreTag = "<b>"
        OpsFixtures.expectInvalid(
            SearchOperation<JSONValue>(database: "db", designDocument: "d", index: "i", query: highlight),
            containing: "need highlightFields")
        var drill = SearchQuery("a")
        drill.drilldown = [["class"]]
        OpsFixtures.expectInvalid(
            SearchOperation<JSONValue>(database: "db", designDocument: "d", index: "i", query: drill),
            containing: "drilldown")
        let error = Simulation.run(
            SearchOperation<JSONValue>(database: "db", designDocument: "d", index: "i", query: SearchQuery("(")),
            response: .json(400, #"{"error":"text_search_error","reason":"Cannot parse '(': ..."}"#))
        #expect(error.error?.error == "text_search_error")
    }

    @Test("_search_info and _search_analyze")
    func infoAndAnalyze() throws {
        let info = Simulation.run(
            GetSearchInfoOperation(database: "db", designDocument: "_design/d", index: "i"),
            response: .json(
                200,
                #"{"name":"_design/d/i","search_index":{"pending_seq":7,"doc_del_count":1,"doc_count":6,"#
                    + #""disk_size":4096,"committed_seq":7}}"#))
        #expect(OpsFixtures.line(info.request) == "GET /db/_design/d/_search_info/i")
        #expect(info.value?.name == "_design/d/i")
        #expect(info.value?.searchIndex.docCount == 6)
        #expect(info.value?.searchIndex.committedSeq == 7)

        let nouveau = Simulation.run(
            GetNouveauInfoOperation(database: "db", designDocument: "d", index: "i"),
            response: .json(
                200,
                #"{"name":"_design/d/i","search_index":{"update_seq":12,"purge_seq":0,"num_docs":10,"#
                    + #""disk_size":2048,"signature":"abc"}}"#))
        #expect(OpsFixtures.line(nouveau.request) == "GET /db/_design/d/_nouveau_info/i")
        #expect(nouveau.value?.searchIndex.numDocs == 10)
        #expect(nouveau.value?.searchIndex.updateSeq == 12)
        #expect(nouveau.value?.searchIndex.signature == "abc")

        let analyze = Simulation.run(
            SearchAnalyzeOperation(analyzer: "english", text: "running dogs"),
            response: .json(200, #"{"tokens":["run","dog"]}"#))
        #expect(OpsFixtures.line(analyze.request) == "POST /_search_analyze")
        #expect(analyze.request?.bodyJSON == ["analyzer": "english", "text": "running dogs"])
        #expect(analyze.value?.tokens == ["run", "dog"])
    }

    @Test("Nouveau: POST /{db}/_design/{ddoc}/_nouveau/{index}")
    func nouveau() throws {
        let run = Simulation.run(
            NouveauSearchOperation<JSONValue>(
                database: "db", designDocument: "d", index: "i",
                query: SearchQuery("name:owl", limit: 5, includeDocs: true)),
            response: .json(
                200,
                #"{"total_hits_relation":"EQUAL_TO","total_hits":1,"ranges":null,"counts":null,"#
                    + #""hits":[{"order":[{"@type":"float","value":1.2},{"@type":"string","value":"owl"}],"id":"owl","#
                    + #""fields":{},"doc":{"_id":"owl"}}],"bookmark":"[...]"}"#))
        #expect(OpsFixtures.line(run.request) == "POST /db/_design/d/_nouveau/i")
        #expect(run.request?.bodyJSON == ["q": "name:owl", "limit": 5, "include_docs": true])
        let value = try run.result.get().value
        #expect(value.totalHits == 1)
        #expect(value.totalHitsRelation == "EQUAL_TO")
        #expect(value.hits.first?.doc?["_id"] == "owl")
        #expect(value.counts == nil)

        var grouped = SearchQuery("a")
        grouped.groupField = "x"
        OpsFixtures.expectInvalid(
            NouveauSearchOperation<JSONValue>(database: "db", designDocument: "d", index: "i", query: grouped),
            containing: "Nouveau does not support")
    }
}
