import CouchJS
import CouchQuery
import Foundation
import TestScheduling
import Testing

@Suite(.cpuBound) struct InterpreterTests {
    func run(_ source: String) throws -> String {
        let interpreter = Interpreter()
        return try interpreter.run(source).toDisplayString()
    }

    @Test func arithmeticAndStrings() throws {
        #expect(try run("1 + 2 * 3") == "7")
        #expect(try run("'a' + 1 + 2") == "a12")
        #expect(try run("1 + 2 + 'a'") == "3a")
        #expect(try run("7 % 3 + 2 ** 3") == "9")
        #expect(try run("0.1 + 0.2") == "0.30000000000000004")
        #expect(try run("1 / 3") == "0.3333333333333333")
        #expect(try run("1e21") == "1e+21")
        #expect(try run("1e-7") == "1e-7")
        #expect(try run("0.000001") == "0.000001")
        #expect(try run("-5 >>> 28") == "15")
        #expect(
            try run("typeof null + typeof undefined + typeof {} + typeof [] + typeof function(){}")
                == "objectundefinedobjectobjectfunction")
        #expect(try run("'abc'.toUpperCase() + 'ABC'.charAt(1) + 'xyz'.indexOf('z')") == "ABCB2")
        #expect(try run("'a,b,,c'.split(',').length") == "4")
        #expect(try run("'hello world'.replace(/o/g, '0')") == "hell0 w0rld")
        #expect(try run("'2024-01-05'.match(/(\\d+)-(\\d+)/)[2]") == "01")
        #expect(try run("`x=${1 + 1}!`") == "x=2!")
        #expect(try run("'  t '.trim().length") == "1")
    }

    @Test func equalityAndTruthiness() throws {
        #expect(
            try run("[1 == '1', 1 === '1', null == undefined, null === undefined, NaN == NaN, '' == 0]")
                == "true,false,true,false,false,true")
        #expect(try run("!!'' + ',' + !!'0' + ',' + !![] + ',' + !!0") == "false,true,true,false")
    }

    @Test func functionsClosuresAndControlFlow() throws {
        #expect(try run("function f(n) { return n < 2 ? n : f(n - 1) + f(n - 2); } f(15)") == "610")
        #expect(
            try run(
                "var counter = (function () { var c = 0; return function () { return ++c; }; })(); counter(); counter()"
            ) == "2")
        #expect(
            try run(
                "let total = 0; for (let i = 0; i < 10; i++) { if (i % 2) continue; if (i > 6) break; total += i; } total"
            ) == "12")
        #expect(try run("var keys = []; for (var k in {a: 1, b: 2}) keys.push(k); keys.join('')") == "ab")
        #expect(try run("var s = 0; for (const v of [1, 2, 3]) s += v; s") == "6")
        #expect(try run("var i = 0; do { i++; } while (i < 5); i") == "5")
        #expect(
            try run(
                "var r; switch (3) { case 1: r = 'a'; break; case 3: r = 'c'; case 4: r += 'd'; break; default: r = 'z'; } r"
            ) == "cd")
        #expect(try run("var r; try { throw {forbidden: 'no'}; } catch (e) { r = e.forbidden; } r") == "no")
        #expect(try run("var log = ''; try { log += 'a'; } finally { log += 'b'; } log") == "ab")
        #expect(try run("const add = (a, b = 2) => a + b; add(1)") == "3")
        #expect(try run("const {a, b: [x, y]} = {a: 1, b: [2, 3]}; a + x + y") == "6")
        #expect(try run("function f(...rest) { return rest.length; } f(1, 2, 3)") == "3")
        #expect(try run("hoisted(); function hoisted() { return 1; }") == "1")
        #expect(
            try run(
                "outer: for (var i = 0; i < 3; i++) { for (var j = 0; j < 3; j++) { if (j == 1) continue outer; if (i == 2) break outer; } } i"
            ) == "2")
    }

    @Test func objectsArraysAndBuiltins() throws {
        #expect(try run("[3, 1, 2].sort().join()") == "1,2,3")
        #expect(try run("[10, 9, 1].sort(function (a, b) { return a - b; }).join()") == "1,9,10")
        #expect(try run("[1, 2, 3].map(x => x * 2).filter(x => x > 2).reduce((a, b) => a + b, 0)") == "10")
        #expect(try run("Object.keys({b: 1, a: 2, 1: 3}).join()") == "1,b,a")
        #expect(
            try run("JSON.stringify({a: [1, 'x', null, true], b: undefined, c: 1.5})")
                == #"{"a":[1,"x",null,true],"c":1.5}"#)
        #expect(try run("JSON.parse('{\"x\": [1, 2]}').x[1]") == "2")
        #expect(try run("Math.max(1, 5, 3) + Math.floor(2.7) + Math.abs(-1)") == "8")
        #expect(try run("parseInt('42px') + parseFloat('1.5e1') + Number('7')") == "64")
        #expect(try run("Array.isArray([]) && !Array.isArray({})") == "true")
        #expect(try run("new Date(Date.UTC ? 0 : 0).toISOString()") == "1970-01-01T00:00:00.000Z")
        #expect(try run("new Date('2024-02-03T04:05:06Z').getTime()") == "1706933106000")
        #expect(
            try run("var e = new TypeError('bad'); e.name + ': ' + e.message + ' ' + (e instanceof Error)")
                == "TypeError: bad true")
        #expect(try run("/a+b/i.test('xAAB')") == "true")
        #expect(try run("(255).toString(16) + (1.005).toFixed(1)") == "ff1.0")
        #expect(try run("[1, [2, 3]].concat([4]).length + 'abc'.slice(-2)") == "3bc")
        #expect(try run("var o = {n: 1, inc() { this.n++; return this; }}; o.inc().inc().n") == "3")
        #expect(
            try run("function P(x) { this.x = x; } P.prototype.get = function () { return this.x; }; new P(4).get()")
                == "4")
    }

    @Test func syntaxErrorsAndRuntimeErrors() throws {
        #expect(throws: JSSyntaxError.self) { _ = try run("function (") }
        #expect(throws: JSSyntaxError.self) { _ = try run("var = 1") }
        #expect(throws: JSThrown.self) { _ = try run("undefinedThing.x") }
        #expect(throws: JSThrown.self) { _ = try run("null.x") }
    }

    @Test func endlessLoopsAndRecursionAreStopped() throws {
        let interpreter = Interpreter()
        interpreter.stepBudget = 100_000
        #expect(throws: JSBudgetExceeded.self) { _ = try interpreter.run("while (true) {}") }
        #expect(throws: JSBudgetExceeded.self) { _ = try interpreter.run("function f() { return f(); } f()") }
        #expect(throws: JSThrown.self) { _ = try interpreter.run("new Array(1e12)") }
        #expect(throws: JSThrown.self) { _ = try interpreter.run("'x'.repeat(1e12)") }
        // Doubling a string: the longest string (a RangeError) under the default budgets; the copies
        // count as steps, so under a small step budget the steps run out first.
        #expect(throws: JSThrown.self) { _ = try Interpreter().run("var s = 'x'; while (true) { s = s + s; }") }
        #expect(throws: JSBudgetExceeded.self) {
            _ = try interpreter.run("var s = 'x'; while (true) { s = s + s; }")
        }
        // The interpreter stays usable afterwards.
        #expect(try interpreter.run("1 + 1").toDisplayString() == "2")
    }
}

@Suite(.cpuBound) struct QueryServerTests {
    @Test func mapEmitsRows() throws {
        let server = JSQueryServer()
        let map = try server.compile(
            "function (doc) { if (doc.type == 'post') { emit([doc.year, doc._id], doc.title.length); } }")
        let rows = try server.map(map, ["_id": "p1", "type": "post", "year": 2024, "title": "hello"])
        #expect(rows.count == 1)
        #expect(rows[0].key == [2024, "p1"])
        #expect(rows[0].value == 5)
        #expect(try server.map(map, ["_id": "x", "type": "comment"]).isEmpty)
    }

    @Test func reduceAndRereduce() throws {
        let server = JSQueryServer()
        let reduce = try server.compile(
            "function (keys, values, rereduce) { if (rereduce) { return sum(values); } return values.length; }")
        #expect(try server.reduce(reduce, keys: [["a", "1"], ["b", "2"]], values: [1, 1], rereduce: false) == 2)
        #expect(try server.reduce(reduce, keys: nil, values: [2, 3], rereduce: true) == 5)
    }

    @Test func compileRefusesWhatIsNotAFunction() {
        let server = JSQueryServer()
        #expect(throws: JSQueryServer.Failure.self) { _ = try server.compile("1 + 1") }
        #expect(throws: JSQueryServer.Failure.self) { _ = try server.compile("function (doc) { emit(doc._id") }
    }

    @Test func validateThrowsForbiddenAndUnauthorized() throws {
        let server = JSQueryServer()
        let validate = try server.compile(
            """
            function (newDoc, oldDoc, userCtx, secObj) {
              if (!newDoc.author) { throw({forbidden: 'An author is required.'}); }
              if (userCtx.roles.indexOf('writer') === -1) { throw({unauthorized: 'Writers only.'}); }
            }
            """)
        let user: JSON = ["name": "bob", "roles": ["writer"]]
        #expect(try server.call(validate, [["_id": "a", "author": "bob"], .null, user, [:]]) == nil)
        do {
            _ = try server.call(validate, [["_id": "a"], .null, user, [:]])
            Issue.record("expected forbidden")
        } catch {
            #expect(error.thrownObject?["forbidden"] == "An author is required.")
        }
        do {
            _ = try server.call(validate, [["_id": "a", "author": "x"], .null, ["name": "eve", "roles": []], [:]])
            Issue.record("expected unauthorized")
        } catch {
            #expect(error.thrownObject?["unauthorized"] == "Writers only.")
        }
    }

    @Test func requireLoadsModulesOfTheDesignDocument() throws {
        let ddoc: JSON = [
            "lib": [
                "math": "exports.double = function (x) { return require('./util').twice(x); };",
                "util": "exports.twice = function (x) { return x * 2; };",
            ]
        ]
        let server = JSQueryServer(designDocument: ddoc)
        let map = try server.compile("function (doc) { emit(doc._id, require('lib/math').double(doc.n)); }")
        #expect(try server.map(map, ["_id": "a", "n": 21]).first?.value == 42)
    }

    @Test func logAndToJSONAndIsArray() throws {
        let server = JSQueryServer()
        let f = try server.compile("function (doc) { log('seen ' + doc._id); emit(toJSON([1]), isArray(doc.list)); }")
        let rows = try server.map(f, ["_id": "a", "list": [1]])
        #expect(rows.first?.key == "[1]")
        #expect(rows.first?.value == true)
        #expect(server.logs == ["seen a"])
    }
}

@Suite(.cpuBound) struct RenderingTests {
    @Test func showListAndUpdate() throws {
        let server = JSQueryServer()
        let show = try server.compile("function(doc, req) { return {code: 202, json: {id: doc._id, q: req.query.q}}; }")
        let shown = try server.show(show, doc: ["_id": "a"], req: ["query": ["q": "x"]])
        #expect(shown.code == 202)
        #expect(String(decoding: shown.body, as: UTF8.self) == #"{"id":"a","q":"x"}"#)
        #expect(shown.headers.contains { $0 == ("Content-Type", "application/json") })

        let list = try server.compile(
            "function(head, req) { start({headers: {'Content-Type': 'text/plain'}}); var r; while ((r = getRow())) { send(r.key + ';'); } return 'total ' + head.total_rows; }"
        )
        let listed = try server.list(list, head: ["total_rows": 2], req: [:], rows: [["key": "a"], ["key": "b"]])
        #expect(String(decoding: listed.body, as: UTF8.self) == "a;b;total 2")

        let update = try server.compile(
            "function(doc, req) { doc.n = (doc.n || 0) + 1; return [doc, 'now ' + doc.n]; }")
        let (doc, response) = try server.update(update, doc: ["_id": "a", "n": 1], req: [:])
        #expect(doc?["n"] == 2)
        #expect(String(decoding: response.body, as: UTF8.self) == "now 2")

        let provides = try server.compile(
            "function(doc, req) { provides('json', function() { return toJSON({ok: true}); }); provides('html', function() { return '<p>ok</p>'; }); }"
        )
        let negotiated = try server.show(provides, doc: nil, req: ["headers": ["Accept": "text/html"]])
        #expect(String(decoding: negotiated.body, as: UTF8.self) == "<p>ok</p>")
    }
}
