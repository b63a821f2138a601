import CouchQuery
import Foundation
import TestScheduling
import Testing

@testable import CouchJS

/// Interpreters and query servers let go of everything they made when they end: the reference
/// cycles JavaScript's object graph is full of (a prototype and its `constructor`, a function and
/// its `prototype`, a function declared inside another and the scope that binds it) are broken.
@Suite(.cpuBound) struct MemoryTests {
    /// A weak reference, to count what is still alive.
    final class Weak {
        weak var object: AnyObject?
        init(_ object: AnyObject) { self.object = object }
    }

    /// A design document's functions, as a query server runs them: a map function with a helper
    /// declared inside it and a callback, and a `require`d module that keeps a closure.
    static let designDocument: JSON = [
        "lib": ["util": "exports.twice = function (x) { function inner(y) { return y * 2 } return inner(x) }"]
    ]
    static let mapSource = """
        function (doc) {
          function tagOf(t) { return t.toUpperCase() }
          var util = require('lib/util');
          doc.tags.forEach(function (t) { emit(tagOf(t), util.twice(doc.n)) });
        }
        """

    /// Runs a query server the way CouchStore does for one design document revision, and returns weak
    /// references to what it made: its interpreter, the built-in prototypes, the compiled function, and
    /// objects made while mapping (a closure that its own scope binds, and the scope's document).
    static func useOneQueryServer() throws -> [Weak] {
        let server = JSQueryServer(designDocument: designDocument)
        let map = try server.compile(mapSource)
        let rows = try server.map(map, ["_id": "a", "n": 2, "tags": ["x", "y"]])
        #expect(rows.count == 2)
        #expect(rows.first?.value == 4)
        let interpreter = server.interpreter
        // A closure bound in the scope it closes over, made by a call: what `tagOf` is in the map.
        let maker = try server.compile("function () { function self() { return self } return self }")
        let closure = try interpreter.call(maker, [])
        var weak: [Weak] = [
            Weak(interpreter), Weak(interpreter.objectPrototype), Weak(interpreter.functionPrototype),
            Weak(interpreter.arrayPrototype), Weak(interpreter.errorPrototype), Weak(interpreter.global),
        ]
        for value in [map, maker, closure] {
            if case .object(let object) = value { weak.append(Weak(object)) }
        }
        return weak
    }

    @Test func aQueryServerLetsGoOfEverythingItMadeWhenItEnds() throws {
        var alive = 0
        var total = 0
        for _ in 0..<20 {
            let weak = try Self.useOneQueryServer()
            total += weak.count
            alive += weak.filter { $0.object != nil }.count
        }
        #expect(total == 20 * 9)
        #expect(alive == 0, "\(alive) of \(total) objects outlived their query servers")
    }

    @Test func anInterpreterLetsGoOfItsBuiltinsWhenItEnds() {
        var weak: [Weak] = []
        for _ in 0..<10 {
            let interpreter = Interpreter()
            weak += [Weak(interpreter.objectPrototype), Weak(interpreter.arrayPrototype), Weak(interpreter.global)]
        }
        #expect(weak.filter { $0.object != nil }.isEmpty)
    }
}

/// While a query server lives: what each call made and left in a cycle (a helper function declared
/// in the map function, bound in the scope it closes over) does not pile up, document after document.
@Suite(.cpuBound) struct QueryServerCycleTests {
    @Test func mappingManyDocumentsLeavesNoPileOfScopes() throws {
        let server = JSQueryServer(designDocument: MemoryTests.designDocument)
        let map = try server.compile(MemoryTests.mapSource)
        for n in 0..<3_000 {
            let rows = try server.map(map, ["_id": .string("d\(n)"), "n": .int(Int64(n)), "tags": ["x"]])
            // The module's function (a closure over the module's scope, kept by the module cache) and
            // the map function still work after the cycles around them were broken.
            #expect(rows.count == 1 && rows[0].value == .int(Int64(2 * n)) && rows[0].key == "X")
        }
        // Each call's scope (and its document) stayed alive before: 3,000 of them.
        #expect(server.interpreter.liveClosureScopeCount < 600)
    }

    @Test func aClosureACompiledFunctionKeepsSurvivesCollection() throws {
        let server = JSQueryServer()
        // A function made by a call, over a scope of its own: compile keeps it for the host.
        let counter = try server.compile(
            "(function () { var n = 0; function next() { n += 1; return n } return next })()")
        let maker = try server.compile("function () { function self() { return self } return 1 }")
        for _ in 0..<1_000 { _ = try server.call(maker, []) }
        #expect(try server.call(counter, []) == 1)
        for _ in 0..<1_000 { _ = try server.call(maker, []) }
        #expect(try server.call(counter, []) == 2)
        #expect(server.interpreter.liveClosureScopeCount < 600)
    }
}
