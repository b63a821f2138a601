import Foundation
import SwiftCouch
import Testing

/// A document for the Mango tests.
private struct Item: Codable, Sendable, Equatable {
    var _id: String
    var _rev: String?
    var n: Int
    var kind: String
    var name: String
    var tags: [String]
    var extra: Bool?
}

/// Writes `count` items `p00`, `p01`, … with `n` = their number, `kind` "even"/"odd", tags and, every tenth, `extra`.
private func seedItems(_ client: CouchDBClient, _ db: String, count: Int = 50, idPrefix: String = "p") async throws {
    let items = (0..<count).map { i in
        Item(
            _id: idPrefix + String(format: "%02d", i), n: i, kind: i % 2 == 0 ? "even" : "odd", name: "item \(i)",
            tags: i % 3 == 0 ? ["three", "all"] : ["all"], extra: i % 10 == 0 ? true : nil)
    }
    let results = try await client.value(BulkDocsOperation(database: db, documents: items))
    #expect(results.count == count)
    #expect(results.allSatisfy { $0.rev != nil })
    // Queries read one copy of each shard: on a cluster, wait until the copies have every write.
    _ = try await converged(
        read: { try await client.value(AllDocsOperation<JSONValue>(database: db)) },
        until: { $0.rows.filter { $0.id?.hasPrefix(idPrefix) == true }.count >= count })
}

private func ids(_ docs: [JSONValue]) -> [String] { docs.compactMap { $0["_id"]?.stringValue } }

@Suite("End to end: Mango queries and indexes")
struct QueryEndToEndTests {
    @Test("_index: create (created, then exists), list, delete, delete again → 404")
    func indexLifecycle() async throws {
        try await withDatabase("mango-index") { client, db in
            let create = CreateIndexOperation(
                database: db, index: .json(fields: ["n"]), designDocument: "by-n", name: "n-idx")
            let created = try await client.value(create)
            #expect(created == CreateIndexResponse(result: "created", id: "_design/by-n", name: "n-idx"))
            #expect(try await client.value(create).result == "exists")

            let partial = try await client.value(
                CreateIndexOperation(
                    database: db,
                    index: .json(
                        fields: [.descending("kind"), .descending("n")],
                        partialFilterSelector: Selector.field("extra").exists()),
                    name: "partial"))
            #expect(partial.result == "created")
            #expect(partial.id.hasPrefix("_design/"))

            // Index design documents reach a cluster's every copy soon, not at once.
            let list = try await converged(
                read: { try await client.value(ListIndexesOperation(database: db)) }, until: { $0.totalRows == 3 })
            #expect(list.totalRows == 3)
            #expect(list.indexes.first?.name == "_all_docs")
            #expect(list.indexes.first?.type == .special)
            #expect(Set(list.indexes.map(\.name)) == ["_all_docs", "n-idx", "partial"])
            let byN = try #require(list.indexes.first { $0.name == "n-idx" })
            #expect(byN.ddoc == "_design/by-n")
            #expect(byN.type == .json)
            #expect(byN.fieldNames == ["n"])
            let partialIndex = try #require(list.indexes.first { $0.name == "partial" })
            #expect(partialIndex.ddoc == partial.id)
            #expect(partialIndex.fieldNames == ["kind", "n"])
            #expect(partialIndex.def["partial_filter_selector"] != nil)
            let page = try await client.value(ListIndexesOperation(database: db, limit: 1, skip: 1))
            #expect(page.indexes.count == 1)
            #expect(page.indexes.first?.name != "_all_docs")

            #expect(
                try await client.value(DeleteIndexOperation(database: db, designDocument: "by-n", name: "n-idx")).ok)
            // A cluster's copies learn that the index's design document is gone soon, not at once.
            #expect(
                try await convergedStatus(404) {
                    _ = try await client.value(
                        DeleteIndexOperation(database: db, designDocument: "by-n", name: "n-idx"))
                } == 404, "deleting a deleted index should be 404")
            let after = try await converged(
                read: { try await client.value(ListIndexesOperation(database: db)) },
                until: { Set($0.indexes.map(\.name)) == ["_all_docs", "partial"] })
            #expect(Set(after.indexes.map(\.name)) == ["_all_docs", "partial"])
        }
    }

    @Test(
        "_find with the selector builder: comparisons, $and/$or/$not, $in/$nin, $exists, $regex, $elemMatch, $all, $size, $mod, $beginsWith"
    )
    func operators() async throws {
        try await withDatabase("mango-ops") { client, db in
            try await seedItems(client, db)
            func find(_ selector: Selector) async throws -> Set<Int> {
                let answer = try await client.value(
                    FindOperation<Item>(database: db, query: MangoQuery(selector: selector, limit: 100)))
                return Set(answer.docs.map(\.n))
            }
            let n = Selector.field("n")
            #expect(try await find(n.greaterThanOrEqual(10).and(n.lessThan(15))) == [10, 11, 12, 13, 14])
            #expect(try await find(n.lessThanOrEqual(2).or(n.greaterThan(47))) == [0, 1, 2, 48, 49])
            #expect(try await find(n.equals(7)) == [7])
            #expect(
                try await find(.and([n.lessThan(6), Selector.field("kind").notEquals("even")])) == [1, 3, 5])
            #expect(try await find(n.in([3, 30, 300])) == [3, 30])
            #expect(try await find(.and([n.lessThan(5), n.notIn([1, 2])])) == [0, 3, 4])
            #expect(try await find(Selector.field("extra").exists()) == [0, 10, 20, 30, 40])
            #expect(try await find(.and([n.lessThan(12), Selector.field("extra").exists(false)])).count == 10)
            #expect(try await find(Selector.field("name").regex("^item 4[5-9]$")) == [45, 46, 47, 48, 49])
            #expect(try await find(Selector.field("name").beginsWith("item 2")) == Set([2] + Array(20...29)))
            #expect(
                try await find(
                    .and([n.lessThan(10), Selector.field("tags").elemMatch(Selector.element.equals("three"))]))
                    == [0, 3, 6, 9])
            #expect(try await find(.and([n.lessThan(7), Selector.field("tags").all(["three", "all"])])) == [0, 3, 6])
            #expect(try await find(.and([n.lessThan(4), Selector.field("tags").size(1)])) == [1, 2])
            #expect(try await find(n.mod(divisor: 25, remainder: 1)) == [1, 26])
            #expect(try await find(.and([n.lessThan(4), .not(n.equals(2))])) == [0, 1, 3])
            #expect(try await find(.and([n.lessThan(4), n.not(Selector.element.greaterThan(1))])) == [0, 1])
            #expect(try await find(Selector.field("n").type(.number)).count == 50)
            #expect(try await find(Selector.field("kind").type(.number)).isEmpty)
            #expect(try await find(["kind": "odd", "n": 9]) == [9])
        }
    }

    @Test("_find: fields, limit/skip, a bad operator → 400 invalid_operator")
    func fieldsLimitSkip() async throws {
        try await withDatabase("mango-fields") { client, db in
            try await seedItems(client, db, count: 10)
            let query = MangoQuery(
                selector: Selector.field("n").greaterThanOrEqual(0), fields: ["_id", "n"], limit: 3, skip: 2)
            let answer = try await client.value(FindOperation<JSONValue>(database: db, query: query))
            #expect(ids(answer.docs) == ["p02", "p03", "p04"])
            #expect(answer.docs.allSatisfy { $0.objectValue.map { Set($0.keys) } == ["_id", "n"] })
            #expect(answer.docs.first?["n"] == 2)
            #expect(answer.bookmark?.isEmpty == false)
            #expect(answer.warning?.contains("No matching index") == true)

            let nothing = try await client.value(
                FindOperation<JSONValue>(database: db, selector: Selector.field("n").greaterThan(100)))
            #expect(nothing.docs.isEmpty)

            do {
                _ = try await client.execute(
                    FindOperation<JSONValue>(
                        database: db, selector: Selector.field("n").matching(operator: "$bogus", 1)))
                Issue.record("an unknown operator should be refused")
            } catch let error as CouchError {
                #expect(error.statusCode == 400)
                #expect(error.error == "invalid_operator")
                #expect(error.reason == "Invalid operator: $bogus")
            }
        }
    }

    @Test("_find sort: 400 no_usable_index without an index; sorted both ways with one; use_index; _explain")
    func sortIndexAndExplain() async throws {
        try await withDatabase("mango-sort") { client, db in
            try await seedItems(client, db, count: 20)
            let selector = Selector.field("n").greaterThan(12)
            do {
                _ = try await client.execute(
                    FindOperation<Item>(database: db, query: MangoQuery(selector: selector, sort: [.ascending("n")])))
                Issue.record("sorting without an index should fail")
            } catch let error as CouchError {
                #expect(error.statusCode == 400)
                #expect(error.error == "no_usable_index")
            }
            let plain = try await client.value(ExplainOperation(database: db, query: MangoQuery(selector: selector)))
            #expect(plain.dbname == db)
            #expect(plain.index.name == "_all_docs")
            #expect(plain.index.type == .special)

            _ = try await client.value(
                CreateIndexOperation(database: db, index: .json(fields: ["n"]), designDocument: "by-n", name: "n-idx"))
            // On a cluster the new index reaches every node's design document cache soon, not at once.
            let up = try await converged(
                read: { () async -> FindResponse<Item>? in
                    try? await client.value(
                        FindOperation<Item>(
                            database: db, query: MangoQuery(selector: selector, sort: [.ascending("n")], limit: 4)))
                }, until: { $0 != nil })
            guard let up else {
                Issue.record("the new index never became usable")
                return
            }
            #expect(up.docs.map(\.n) == [13, 14, 15, 16])
            #expect(up.warning == nil)
            let down = try await client.value(
                FindOperation<Item>(database: db, query: MangoQuery(selector: selector, sort: [.descending("n")])))
            #expect(down.docs.map(\.n) == Array((13...19).reversed()))

            let used = try await client.value(
                FindOperation<Item>(
                    database: db,
                    query: MangoQuery(
                        selector: selector, fields: ["_id", "n", "kind", "name", "tags"],
                        useIndex: .index(designDocument: "by-n", name: "n-idx"))))
            #expect(Set(used.docs.map(\.n)) == Set(13...19))
            #expect(used.warning == nil)
            let notUsable = try await client.value(
                FindOperation<Item>(
                    database: db, query: MangoQuery(selector: selector, useIndex: .designDocument("nosuch"))))
            #expect(notUsable.docs.count == 7)
            #expect(notUsable.warning?.contains("was not used") == true)

            let explained = try await client.value(
                ExplainOperation(
                    database: db,
                    query: MangoQuery(
                        selector: selector, fields: ["_id"], limit: 3, skip: 1,
                        useIndex: .index(designDocument: "by-n", name: "n-idx"))))
            #expect(explained.index.name == "n-idx")
            #expect(explained.index.ddoc == "_design/by-n")
            #expect(explained.index.type == .json)
            #expect(explained.limit == 3)
            #expect(explained.skip == 1)
            #expect(explained.fields == ["_id"])
            #expect(explained.selector == ["n": ["$gt": 12]])
            #expect(explained.partitioned == false)
        }
    }

    @Test("_find bookmark paging over 50 documents: no repeats, no gaps (with and without an index)")
    func bookmarkPaging() async throws {
        try await withDatabase("mango-pages") { client, db in
            try await seedItems(client, db)
            let all = Set((0..<50).map { "p" + String(format: "%02d", $0) })

            func pages(_ base: MangoQuery) async throws -> [String] {
                var seen: [String] = []
                var query = base
                for _ in 0..<20 {
                    let page = try await client.value(FindOperation<Item>(database: db, query: query))
                    if page.docs.isEmpty { break }
                    #expect(page.docs.count <= 7)
                    seen += page.docs.map(\._id)
                    query.bookmark = page.bookmark
                }
                return seen
            }
            let unsorted = try await pages(MangoQuery(selector: Selector.field("n").greaterThanOrEqual(0), limit: 7))
            #expect(unsorted.count == 50)
            #expect(Set(unsorted) == all)

            _ = try await client.value(CreateIndexOperation(database: db, index: .json(fields: ["n"]), name: "n-idx"))
            let sortedQuery = MangoQuery(
                selector: Selector.field("n").greaterThanOrEqual(0), sort: [.ascending("n")], limit: 7)
            // On a cluster the new index's design document reaches every copy soon, not at once.
            let usable = try await convergedStatus(200) {
                _ = try await client.value(FindOperation<Item>(database: db, query: sortedQuery))
            }
            #expect(usable == 200)
            let sorted = try await pages(sortedQuery)
            #expect(sorted == all.sorted())
        }
    }

    @Test("_find execution_stats")
    func executionStats() async throws {
        try await withDatabase("mango-stats") { client, db in
            try await seedItems(client, db, count: 12)
            let answer = try await client.value(
                FindOperation<Item>(
                    database: db,
                    query: MangoQuery(selector: Selector.field("kind").equals("odd"), executionStats: true)))
            let stats = try #require(answer.executionStats)
            #expect(answer.docs.count == 6)
            #expect(stats.resultsReturned == 6)
            #expect(stats.totalDocsExamined == 12)
            #expect(stats.executionTimeMs >= 0)
            let without = try await client.value(
                FindOperation<Item>(database: db, selector: Selector.field("kind").equals("odd")))
            #expect(without.executionStats == nil)
        }
    }

    @Test("Partitioned _find and _explain see one partition only")
    func partitioned() async throws {
        try await withDatabase("mango-part", partitioned: true) { client, db in
            var docs: [JSONValue] = []
            for i in 0..<6 {
                docs.append(["_id": .string("s\(i % 2):r\(i)"), "t": .int(Int64(i)), "kind": "temp"])
            }
            _ = try await client.value(BulkDocsOperation(database: db, documents: docs))
            let query = MangoQuery(selector: Selector.field("t").greaterThanOrEqual(0), fields: ["_id", "t"])
            let s0 = try await converged(
                read: { try await client.value(FindOperation<JSONValue>(database: db, query: query, partition: "s0")) },
                until: { ids($0.docs) == ["s0:r0", "s0:r2", "s0:r4"] })
            #expect(ids(s0.docs) == ["s0:r0", "s0:r2", "s0:r4"])
            let s1 = try await client.value(FindOperation<JSONValue>(database: db, query: query, partition: "s1"))
            #expect(ids(s1.docs) == ["s1:r1", "s1:r3", "s1:r5"])
            let global = try await converged(
                read: { try await client.value(FindOperation<JSONValue>(database: db, query: query)) },
                until: { $0.docs.count == 6 })
            #expect(global.docs.count == 6)

            let explained = try await client.value(ExplainOperation(database: db, query: query, partition: "s0"))
            #expect(explained.dbname == db)
            #expect(explained.partitioned == true)
            #expect(explained.index.name == "_all_docs")
            #expect(explained.opts["partition"] == "s0")
            do {
                _ = try await client.execute(FindOperation<JSONValue>(database: db, query: query, partition: "_bad"))
                Issue.record("a partition starting with _ should be refused")
            } catch let error as CouchError {
                #expect(error.kind == .validation)
            }
        }
    }
}
