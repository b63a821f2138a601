import CouchQuery
import TestScheduling
import Testing

@Suite("Collation", .ownThreads)
struct CollationTests {
    private func sorted(_ values: [JSON]) -> [JSON] {
        values.sorted { Collation.compare($0, $1) < 0 }
    }

    @Test("views.json collation step: null < false < true < numbers < strings (ICU) < arrays < objects")
    func viewsCollationOrder() {
        // The exact key order CouchDB 3.5 returned for the `collation` view (views.json s23).
        let expected: [JSON] = [
            nil, false, true, -5, 2.5, 10, "a", "A", "ab", "b", "B", "é", ["a"], ["a", 1], ["a": 1],
        ]
        #expect(sorted(expected.reversed()) == expected)
        #expect(
            sorted([expected[5], expected[14], expected[0], expected[11], expected[7]])
                == [expected[0], expected[5], expected[7], expected[11], expected[14]])
        for (i, a) in expected.enumerated() {
            for (j, b) in expected.enumerated() {
                let c = Collation.compare(a, b)
                #expect((c < 0) == (i < j) && (c == 0) == (i == j), "\(a.serialized) vs \(b.serialized)")
            }
        }
    }

    @Test("Numbers compare by value regardless of int/double")
    func numbers() {
        #expect(Collation.compare(21, 21.0) == 0)
        #expect(Collation.compare(2, 2.5) < 0)
        #expect(Collation.compare(-1.5, -1) < 0)
        #expect(Collation.compare(JSON.int(Int64.max), 1e300) < 0)
    }

    @Test("ICU string order: case, punctuation, digits, accents")
    func strings() {
        #expect(Collation.compareStrings("a", "A") < 0)
        #expect(Collation.compareStrings("A", "b") < 0)
        #expect(Collation.compareStrings("A", "aa") < 0)
        #expect(Collation.compareStrings("b", "B") < 0)
        #expect(Collation.compareStrings("B", "ba") < 0)
        #expect(Collation.compareStrings("e", "é") < 0)
        #expect(Collation.compareStrings("é", "f") < 0)
        #expect(Collation.compareStrings("E", "é") < 0)  // accent (secondary) outranks case (tertiary)
        #expect(Collation.compareStrings("ea", "éa") < 0)
        #expect(Collation.compareStrings("éa", "eb") < 0)
        #expect(Collation.compareStrings("9", "a") < 0)
        #expect(Collation.compareStrings("10", "9") < 0)  // digits compare as characters
        #expect(Collation.compareStrings(" ", "_") < 0)
        #expect(Collation.compareStrings("_", "-") < 0)
        #expect(Collation.compareStrings("-", "0") < 0)
        #expect(Collation.compareStrings("~", "$") < 0)
        #expect(Collation.compareStrings("$", "0") < 0)
        #expect(Collation.compareStrings("straße", "strasse") > 0)
        #expect(Collation.compareStrings("straße", "strasset") < 0)
        #expect(Collation.compareStrings("abc", "abc") == 0)
        #expect(Collation.compareStrings("a\u{1}b", "ab") == 0)  // controls are ignorable
        #expect(Collation.compareStrings("z", "α") < 0)  // Latin before Greek
        #expect(Collation.compareStrings("α", "Α") < 0)
        #expect(Collation.compareStrings("Α", "β") < 0)
        // The full ASCII punctuation/symbol order of the CouchDB documentation.
        let ascii = Array("_-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789aAbBcC").map(String.init)
        #expect(ascii.sorted { Collation.compareStrings($0, $1) < 0 } == ascii)
    }

    @Test("Arrays and objects")
    func containers() {
        #expect(Collation.compare(["a"], ["a", 1]) < 0)
        #expect(Collation.compare(["b"], ["a", 1]) > 0)
        #expect(Collation.compare([], ["a"]) < 0)
        #expect(Collation.compare(["a": 1], ["a": 2]) < 0)
        #expect(Collation.compare(["a": 1], ["b": 0]) < 0)
        #expect(Collation.compare(["a": 1], ["a": 1, "b": 0]) < 0)
        #expect(Collation.compare([1, 2], ["a": 1]) < 0)
    }

    @Test("Raw collation is code-point order")
    func raw() {
        #expect(Collation.compareRaw("B", "a") < 0)
        #expect(Collation.compareRaw("_design/d", "a") < 0)
        #expect(Collation.compareRaw("a", "é") < 0)
        #expect(Collation.compareRaw("a", "ab") < 0)
        #expect(Collation.compareRaw("x", "x") == 0)
    }
}
