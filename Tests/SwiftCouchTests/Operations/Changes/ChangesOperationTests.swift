import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

private struct Item: Codable, Sendable, Equatable {
    var _id: String
    var _rev: String
    var type: String
    var n: Int
}

@Suite("_changes as one response: options, filters and typed rows against recorded CouchDB 3.5 responses", .ownThreads)
struct ChangesOperationTests {
    @Test("Normal feed: one row per document, deleted flags, last_seq and pending")
    func normal() throws {
        let step = try #require(Transcripts.step("changes", "s09"))
        let run = Simulation.run(ChangesOperation<JSONValue>(database: "tx_changes"), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        #expect(run.request?.body == nil)
        let feed = try run.result.get().value
        #expect(feed.results.map(\.id) == ["_design/filters", "a", "b", "c"])
        #expect(feed.results.map(\.deleted) == [false, false, true, false])
        #expect(feed.results[1].changes == [ChangeRevision(rev: "2-9defb5d7e1ea74d11cef1657a4f09118")])
        #expect(feed.results[0].seq.json == step.responseJSON?["results"]?[0]?["seq"])
        #expect(feed.results.allSatisfy { $0.doc == nil })
        #expect(feed.lastSeq.json == step.responseJSON?["last_seq"])
        #expect(feed.pending == 0)
    }

    @Test("since + limit pages, and the next page continues from last_seq")
    func paging() throws {
        let first = try #require(Transcripts.step("changes", "lim2"))
        let page1 = Simulation.run(
            ChangesOperation<JSONValue>(database: "tx_changes", since: .beginning, limit: 2), response: first.simulated)
        #expect(OpsFixtures.line(page1.request) == OpsFixtures.line(first))
        let value = try page1.result.get().value
        #expect(value.results.count == 2)
        #expect(value.pending == 2)
        #expect(value.lastSeq == value.results[1].seq)

        let second = try #require(Transcripts.step("changes", "s11"))
        let page2 = Simulation.run(
            ChangesOperation<JSONValue>(database: "tx_changes", since: value.lastSeq), response: second.simulated)
        #expect(OpsFixtures.line(page2.request) == OpsFixtures.line(second))
        #expect(page2.value?.results.map(\.id) == ["b", "c"])
        #expect(page2.value?.pending == 0)
    }

    @Test("descending")
    func descending() throws {
        let step = try #require(Transcripts.step("changes", "s12"))
        let run = Simulation.run(
            ChangesOperation<JSONValue>(database: "tx_changes", limit: 2, descending: true), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        #expect(run.value?.results.map(\.id) == ["c", "b"])
    }

    @Test("include_docs: a live document that does not fit the type is a decoding error, not a silent nil")
    func includeDocsMismatch() throws {
        let step = try #require(Transcripts.step("changes", "s13"))
        let run = Simulation.run(
            ChangesOperation<Item>(database: "tx_changes", includeDocs: true), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        // The design document has no `type` or `n`, and it is not deleted.
        #expect(run.error?.kind == .decoding)
        #expect(run.error?.statusCode == 200)
    }

    @Test("include_docs with free-form documents, and tombstones with typed documents")
    func includeDocsFreeForm() throws {
        let step = try #require(Transcripts.step("changes", "s13"))
        let run = Simulation.run(
            ChangesOperation<JSONValue>(database: "tx_changes", includeDocs: true), response: step.simulated)
        let rows = try run.result.get().value.results
        #expect(rows[1].doc?["n"] == 10)
        #expect(rows[2].doc?["_deleted"] == true)

        let typed = Simulation.run(
            ChangesOperation<Item>(database: "db", includeDocs: true),
            response: .json(
                200,
                #"{"results":[{"seq":"1-a","id":"a","changes":[{"rev":"1-x"}],"#
                    + #""doc":{"_id":"a","_rev":"1-x","type":"t","n":1}},"#
                    + #"{"seq":"2-a","id":"b","changes":[{"rev":"2-y"}],"deleted":true,"#
                    + #""doc":{"_id":"b","_rev":"2-y","_deleted":true}}],"last_seq":"2-a","pending":0}"#))
        let value = try typed.result.get().value
        #expect(value.results[0].doc == Item(_id: "a", _rev: "1-x", type: "t", n: 1))
        #expect(value.results[1].deleted)
        #expect(value.results[1].doc == nil)

        let broken = Simulation.run(
            ChangesOperation<Item>(database: "db", includeDocs: true),
            response: .json(
                200,
                #"{"results":[{"seq":"1-a","id":"a","changes":[{"rev":"1-x"}],"doc":{"_id":"a"}}],"last_seq":"1-a"}"#))
        #expect(broken.error?.kind == .decoding)
    }

    @Test("style=all_docs lists every leaf revision")
    func allDocsStyle() throws {
        let step = try #require(Transcripts.step("changes", "s14"))
        let run = Simulation.run(
            ChangesOperation<JSONValue>(database: "tx_changes", style: .allDocs), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        let c = try #require(run.value?.results.first { $0.id == "c" })
        #expect(
            Set(c.changes.map(\.rev))
                == Set(
                    step.responseJSON?["results"]?[3]?["changes"]?.arrayValue?.compactMap { $0["rev"]?.stringValue }
                        ?? []))
        #expect(c.changes.count == 2)
    }

    @Test("filter=_doc_ids and filter=_selector are POSTs with the recorded bodies")
    func bodyFilters() throws {
        let ids = try #require(Transcripts.step("changes", "s15"))
        let idRun = Simulation.run(
            ChangesOperation<JSONValue>(database: "tx_changes", filter: .documentIDs(["c", "b", "nope"])),
            response: ids.simulated)
        #expect(OpsFixtures.line(idRun.request) == OpsFixtures.line(ids))
        #expect(idRun.request?.headers["Content-Type"] == "application/json")
        #expect(idRun.request?.bodyJSON == OpsFixtures.json(ids.requestBody))
        #expect(idRun.value?.results.map(\.id) == ["b", "c"])

        let selector = try #require(Transcripts.step("changes", "s16"))
        let selectorRun = Simulation.run(
            ChangesOperation<JSONValue>(database: "tx_changes", filter: .selector(["type": "x"])),
            response: selector.simulated)
        #expect(OpsFixtures.line(selectorRun.request) == OpsFixtures.line(selector))
        #expect(selectorRun.request?.bodyJSON == OpsFixtures.json(selector.requestBody))
        #expect(selectorRun.value?.results.map(\.id) == ["a", "c"])

        let built = Simulation.run(
            ChangesOperation<JSONValue>(database: "db", filter: .selector(.field("type").equals("x"))),
            response: .json(200, #"{"results":[],"last_seq":"0"}"#))
        #expect(
            built.request.flatMap { $0.body.map { String(decoding: $0, as: UTF8.self) } }
                == #"{"selector":{"type":{"$eq":"x"}}}"#)
    }

    @Test("filter=_design, _view and custom filters with their parameters")
    func queryFilters() throws {
        let design = try #require(Transcripts.step("changes", "s17"))
        let run = Simulation.run(
            ChangesOperation<JSONValue>(database: "tx_changes", filter: .design), response: design.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(design))
        #expect(run.value?.results.map(\.id) == ["_design/filters"])
        #expect(run.value?.pending == 3)

        let empty = SimulatedResponse.json(200, #"{"results":[],"last_seq":"0"}"#)
        let view = Simulation.run(
            ChangesOperation<JSONValue>(database: "db", filter: .view(designDocument: "_design/app", view: "by_type")),
            response: empty)
        #expect(OpsFixtures.line(view.request) == "GET /db/_changes?filter=_view&view=app%2Fby_type")

        let custom = Simulation.run(
            ChangesOperation<JSONValue>(
                database: "db",
                filter: .custom(
                    designDocument: "app", name: "by_owner", parameters: [URLQueryItem(name: "owner", value: "a b")])),
            response: empty)
        #expect(OpsFixtures.line(custom.request) == "GET /db/_changes?filter=app%2Fby_owner&owner=a%20b")
        #expect(custom.request?.queryValue("owner") == "a b")

        OpsFixtures.expectInvalid(
            ChangesOperation<JSONValue>(
                database: "db",
                filter: .custom(designDocument: "app", name: "f", parameters: [URLQueryItem(name: "since", value: "1")])
            ),
            containing: "clashes")
        OpsFixtures.expectInvalid(
            ChangesOperation<JSONValue>(database: "db", filter: .documentIDs([])),
            containing: "documentIDs must not be empty")
    }

    @Test("longpoll from now with a timeout; every other option by name")
    func longpollAndOptions() throws {
        let step = try #require(Transcripts.step("changes", "s18"))
        let run = Simulation.run(
            ChangesOperation<JSONValue>(database: "tx_changes", feed: .longpoll, since: .now, timeout: 500),
            response: step.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        #expect(run.value?.results.isEmpty == true)
        #expect(run.value?.lastSeq.json == step.responseJSON?["last_seq"])

        let every = Simulation.run(
            ChangesOperation<JSONValue>(
                database: "db", feed: .longpoll, since: "5-abc", limit: 10, descending: true, includeDocs: true,
                conflicts: true, attachments: true, attachmentEncodingInfo: true, style: .mainOnly, filter: .design,
                seqInterval: 100, heartbeat: 1000),
            response: .json(200, #"{"results":[],"last_seq":"5-abc"}"#))
        #expect(
            every.request?.query
                == "feed=longpoll&since=5-abc&heartbeat=1000&descending=true&limit=10&include_docs=true&conflicts=true"
                + "&attachments=true&att_encoding_info=true&style=main_only&filter=_design&seq_interval=100")
        OpsFixtures.expectInvalid(
            ChangesOperation<JSONValue>(database: "db", conflicts: true), containing: "need includeDocs")
        OpsFixtures.expectInvalid(
            ChangesOperation<JSONValue>(database: "db", limit: -1), containing: "limit must not be negative")
    }

    @Test("A malformed since is CouchDB's 400")
    func badSince() throws {
        let step = try #require(Transcripts.step("changes", "s22"))
        let run = Simulation.run(
            ChangesOperation<JSONValue>(database: "tx_changes", since: "bogus"), response: step.simulated)
        #expect(OpsFixtures.line(run.request) == OpsFixtures.line(step))
        #expect(run.error?.statusCode == 400)
        #expect(run.error?.reason == "Malformed sequence supplied in 'since' parameter.")
    }
}
