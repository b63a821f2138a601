import Foundation
import SwiftCouch
import SwiftCouchTestSupport
import SwiftCouchTesting
import Testing

@Suite("Selector: every Mango operator encodes to the exact JSON CouchDB expects", .ownThreads)
struct SelectorTests {
    @Test(
        "Field operators",
        arguments: [
            (Selector.field("age").equals(30), #"{"age":{"$eq":30}}"#),
            (Selector.field("name").notEquals("Bob"), #"{"name":{"$ne":"Bob"}}"#),
            (Selector.field("age").greaterThan(30), #"{"age":{"$gt":30}}"#),
            (Selector.field("age").greaterThanOrEqual(30.5), #"{"age":{"$gte":30.5}}"#),
            (Selector.field("age").lessThan(25), #"{"age":{"$lt":25}}"#),
            (Selector.field("age").lessThanOrEqual(nil), #"{"age":{"$lte":null}}"#),
            (Selector.field("manager").exists(), #"{"manager":{"$exists":true}}"#),
            (Selector.field("manager").exists(false), #"{"manager":{"$exists":false}}"#),
            (Selector.field("tags").type(.array), #"{"tags":{"$type":"array"}}"#),
            (Selector.field("city").in(["Rome", "Oslo"]), #"{"city":{"$in":["Rome","Oslo"]}}"#),
            (Selector.field("city").notIn(["Rome", 1, true]), #"{"city":{"$nin":["Rome",1,true]}}"#),
            (Selector.field("tags").size(2), #"{"tags":{"$size":2}}"#),
            (Selector.field("n").mod(divisor: 4, remainder: 1), #"{"n":{"$mod":[4,1]}}"#),
            (Selector.field("name").regex("^[A-C]"), #"{"name":{"$regex":"^[A-C]"}}"#),
            (Selector.field("name").beginsWith("Al"), #"{"name":{"$beginsWith":"Al"}}"#),
            (Selector.field("tags").all(["dev", "ops"]), #"{"tags":{"$all":["dev","ops"]}}"#),
            (Selector.field("a.b/c").equals("x/y"), #"{"a.b/c":{"$eq":"x/y"}}"#),
            (Selector.field(path: ["a.b", "c"]).equals(1), #"{"a\\.b.c":{"$eq":1}}"#),
            (Selector.field("x").matching(operator: "$future", [1]), #"{"x":{"$future":[1]}}"#),
        ])
    func fieldOperators(selector: Selector, expected: String) throws {
        #expect(selector.description == expected)
        #expect(try OpsFixtures.sortedText(selector) == expected)
    }

    @Test("Array operators take sub-selectors, on fields or on the element itself")
    func arrayOperators() {
        #expect(
            Selector.field("scores").elemMatch(
                .field("subject").equals("math").and(.field("value").greaterThanOrEqual(80))
            ).description
                == #"{"scores":{"$elemMatch":{"$and":[{"subject":{"$eq":"math"}},{"value":{"$gte":80}}]}}}"#)
        #expect(
            Selector.field("tags").elemMatch(.element.equals("dev")).description
                == #"{"tags":{"$elemMatch":{"$eq":"dev"}}}"#)
        #expect(
            Selector.field("scores").allMatch(.field("value").greaterThan(50)).description
                == #"{"scores":{"$allMatch":{"value":{"$gt":50}}}}"#)
        #expect(
            Selector.field("cameras").keyMapMatch(.element.equals("secondary")).description
                == #"{"cameras":{"$keyMapMatch":{"$eq":"secondary"}}}"#)
        #expect(
            Selector.field("age").not(.element.greaterThan(30)).description == #"{"age":{"$not":{"$gt":30}}}"#)
    }

    @Test("Combinators: chained and/or/nor flatten, mixed ones nest, in the order written")
    func combinators() {
        let a = Selector.field("a").equals(1)
        let b = Selector.field("b").equals(2)
        let c = Selector.field("c").equals(3)
        #expect(a.and(b).description == #"{"$and":[{"a":{"$eq":1}},{"b":{"$eq":2}}]}"#)
        #expect(a.and(b).and(c).description == #"{"$and":[{"a":{"$eq":1}},{"b":{"$eq":2}},{"c":{"$eq":3}}]}"#)
        #expect(a.or(b).or(c) == Selector.or([a, b, c]))
        #expect(a.nor(b).description == #"{"$nor":[{"a":{"$eq":1}},{"b":{"$eq":2}}]}"#)
        #expect(a.and(b).or(c).description == #"{"$or":[{"$and":[{"a":{"$eq":1}},{"b":{"$eq":2}}]},{"c":{"$eq":3}}]}"#)
        #expect(a.and(b.or(c)).description == #"{"$and":[{"a":{"$eq":1}},{"$or":[{"b":{"$eq":2}},{"c":{"$eq":3}}]}]}"#)
        #expect(Selector.not(a).description == #"{"$not":{"a":{"$eq":1}}}"#)
        #expect(a.negated() == Selector.not(a))
        #expect(Selector.and([a]).description == #"{"$and":[{"a":{"$eq":1}}]}"#)
        #expect(Selector.nor([a, b]) == a.nor(b))
        // Values are immutable: building on `a` did not change it.
        #expect(a.description == #"{"a":{"$eq":1}}"#)
    }

    @Test("Raw JSON and dictionary literals pass through; a raw selector decodes back")
    func raw() throws {
        let raw = Selector.raw(["type": "x"])
        #expect(raw.description == #"{"type":"x"}"#)
        let literal: Selector = ["type": "x"]
        #expect(literal == raw)
        #expect(Selector.all.description == "{}")
        let mixed = Selector.raw(["a": ["$gt": 1]]).and(.field("b").exists())
        #expect(mixed.description == #"{"$and":[{"a":{"$gt":1}},{"b":{"$exists":true}}]}"#)
        let decoded = try JSONDecoder().decode(Selector.self, from: Data(#"{"age":{"$gt":30}}"#.utf8))
        #expect(decoded.json == ["age": ["$gt": 30]])
        #expect(Selector.field("age").greaterThan(30).json == decoded.json)
    }

    @Test("Invalid selectors are refused before anything is sent")
    func invalid() {
        let cases: [(Selector, String)] = [
            (Selector.and([]), "$and needs at least one selector"),
            (Selector.field("tags").size(-1), "$size needs a non-negative integer"),
            (Selector.field("n").mod(divisor: 0, remainder: 1), "$mod needs a non-zero divisor"),
            (Selector.field("c").in([]), "$in needs a non-empty list"),
            (Selector.field("").equals(1), "field name must not be empty"),
            (Selector.raw([1, 2]), "must be a JSON object"),
            (Selector.field("s").elemMatch(.or([])), "$or needs at least one selector"),
        ]
        for (selector, message) in cases {
            OpsFixtures.expectInvalid(FindOperation<JSONValue>(database: "db", selector: selector), containing: message)
        }
    }

    @Test("Sort fields: bare names and directions")
    func sortFields() throws {
        let sort: [SortField] = ["name", .ascending("age"), .descending("city")]
        #expect(try OpsFixtures.sortedText(sort) == #"["name",{"age":"asc"},{"city":"desc"}]"#)
        let decoded = try JSONDecoder().decode([SortField].self, from: Data(#"["a",{"b":"desc"}]"#.utf8))
        #expect(decoded == ["a", .descending("b")])
    }
}
