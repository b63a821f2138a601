import CouchQuery
import Foundation
import HTTPWire
import TestScheduling
import Testing

/// The replayer's own logic: the comparator and the template resolver.
@Suite("Conformance comparator", .ownThreads)
struct ComparatorTests {
    static let patterns: [String: String?] = [
        "rev": "^[1-9][0-9]*-[0-9a-f]{32}$", "etag": "^(W/)?\"[^\"]*\"$", "integer": nil, "number": nil,
        "set-cookie": "^AuthSession=<cookie>(; [A-Za-z-]+(=[^;]*)?)*$", "newlines": "^\\n*$", "string": nil,
    ]

    func recorded(
        status: Int = 201, reason: String = "Created", headers: JSON = ["Content-Type": "application/json"],
        body: JSON
    ) -> JSON {
        [
            "status": .int(Int64(status)), "reason": .string(reason), "headers": headers, "body_encoding": "json",
            "body": body,
        ]
    }

    func actual(
        status: Int = 201, reason: String = "Created", headers: HTTPHeaders = ["Content-Type": "application/json"],
        body: String
    ) -> ActualResponse {
        ActualResponse(status: status, reason: reason, headers: headers, body: Data(body.utf8))
    }

    @Test func identicalResponsesPass() {
        let c = ResponseComparator()
        let diffs = c.compare(
            expected: recorded(body: ["ok": true, "id": "a", "n": 1]),
            actual: actual(body: #"{"id":"a","ok":true,"n":1}"#))
        #expect(diffs.isEmpty, "\(diffs)")
    }

    @Test func differingStatusIsCaught() {
        let diffs = ResponseComparator().compare(
            expected: recorded(body: ["ok": true]),
            actual: actual(status: 500, reason: "Internal Server Error", body: #"{"error":"x","reason":"y"}"#))
        #expect(diffs.count == 1)
        #expect(diffs.first?.pointer == "/response/status")
        #expect(diffs.first?.message.contains("expected 201") == true)
        #expect(diffs.first?.message.contains("got 500") == true)
    }

    @Test func differingReasonPhraseIsCaught() {
        let diffs = ResponseComparator().compare(
            expected: recorded(
                status: 404, reason: "Object Not Found", body: ["error": "not_found", "reason": "missing"]),
            actual: actual(status: 404, reason: "Not Found", body: #"{"error":"not_found","reason":"missing"}"#))
        #expect(diffs.map(\.pointer) == ["/response/reason"])
    }

    @Test func missingAndUnexpectedKeysAreCaught() {
        let diffs = ResponseComparator().compare(
            expected: recorded(body: ["ok": true, "rows": [["id": "a", "key": "a"]]]),
            actual: actual(body: #"{"ok":true,"rows":[{"id":"a","value":null}]}"#))
        #expect(Set(diffs.map(\.pointer)) == ["/response/body/rows/0/key", "/response/body/rows/0/value"])
        #expect(diffs.contains { $0.message.hasPrefix("missing key") })
        #expect(diffs.contains { $0.message.hasPrefix("unexpected key") })
    }

    @Test func intAndDoubleAreDifferentTypes() {
        let diffs = ResponseComparator().compare(
            expected: recorded(body: ["key": 21, "value": 21.0]),
            actual: actual(body: #"{"key":21.0,"value":21}"#))
        #expect(Set(diffs.map(\.pointer)) == ["/response/body/key", "/response/body/value"])
        #expect(diffs.first { $0.pointer == "/response/body/key" }?.message == "expected int 21, got float 21.0")
    }

    @Test func arrayOrderMattersUnlessUnordered() {
        let expected = recorded(body: ["uuids": ["a", "b", "c"]])
        let reordered = actual(body: #"{"uuids":["c","a","b"]}"#)
        let ordered = ResponseComparator().compare(expected: expected, actual: reordered)
        #expect(
            ordered.map(\.pointer) == ["/response/body/uuids/0", "/response/body/uuids/1", "/response/body/uuids/2"])
        let unordered = ResponseComparator(unordered: ["/response/body/uuids"]).compare(
            expected: expected, actual: reordered)
        #expect(unordered.isEmpty, "\(unordered)")
        // A multiset still needs the same items.
        let wrong = ResponseComparator(unordered: ["/response/body/uuids"]).compare(
            expected: expected, actual: actual(body: #"{"uuids":["c","a","a"]}"#))
        #expect(wrong.map(\.pointer) == ["/response/body/uuids/1"])
        let short = ResponseComparator().compare(expected: expected, actual: actual(body: #"{"uuids":["a","b"]}"#))
        #expect(short.first?.message.hasPrefix("expected 3 items, got 2") == true)
    }

    @Test func unorderedItemsKeepTheirOwnVariablePointers() {
        // The rev inside item 0 is variable; item 1's is not. Items come back swapped.
        let c = ResponseComparator(
            variable: ["/response/body/docs/0/_rev"], formats: ["/response/body/docs/0/_rev": "rev"],
            patterns: Self.patterns, unordered: ["/response/body/docs"])
        let expected = recorded(body: [
            "docs": [
                ["_id": "x", "_rev": "1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"],
                ["_id": "y", "_rev": "1-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"],
            ]
        ])
        let ok = c.compare(
            expected: expected,
            actual: actual(
                body:
                    #"{"docs":[{"_id":"y","_rev":"1-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"},{"_id":"x","_rev":"1-0123456789abcdef0123456789abcdef"}]}"#
            ))
        #expect(ok.isEmpty, "\(ok)")
        let bad = c.compare(
            expected: expected,
            actual: actual(
                body:
                    #"{"docs":[{"_id":"y","_rev":"1-cccccccccccccccccccccccccccccccc"},{"_id":"x","_rev":"1-0123456789abcdef0123456789abcdef"}]}"#
            ))
        #expect(bad.map(\.pointer) == ["/response/body/docs/1"])
    }

    @Test func variablePointersCheckTypeAndFormat() {
        let c = ResponseComparator(
            variable: [
                "/response/body/rev", "/response/headers/ETag", "/response/headers/Content-Length",
                "/response/body/sizes", "/response/body/time",
            ],
            formats: [
                "/response/body/rev": "rev", "/response/headers/ETag": "etag",
                "/response/headers/Content-Length": "integer", "/response/body/time": "number",
            ],
            patterns: Self.patterns)
        let expected = recorded(
            headers: [
                "Content-Type": "application/json", "Content-Length": "67",
                "ETag": "\"1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"",
            ],
            body: ["ok": true, "rev": "1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "sizes": ["file": 1], "time": 0.5])
        let good = c.compare(
            expected: expected,
            actual: actual(
                headers: [
                    "Content-Type": "application/json", "Content-Length": "70",
                    "ETag": "\"1-0123456789abcdef0123456789abcdef\"",
                ],
                body: #"{"ok":true,"rev":"1-0123456789abcdef0123456789abcdef","sizes":{"file":9,"active":2},"time":3}"#)
        )
        #expect(good.isEmpty, "\(good)")
        let bad = c.compare(
            expected: expected,
            actual: actual(
                headers: ["Content-Type": "application/json", "Content-Length": "x", "ETag": "1-abc"],
                body: #"{"ok":true,"rev":"1-xyz","sizes":[],"time":"3"}"#))
        // Content-Length is framing, which the README leaves informative: not compared.
        #expect(
            Set(bad.map(\.pointer)) == [
                "/response/headers/ETag", "/response/body/rev", "/response/body/sizes",
                "/response/body/time",
            ])
    }

    @Test func headersPresenceAndValues() {
        let expected = recorded(
            headers: ["Content-Type": "application/json", "Location": "http://127.0.0.1:5984/db/doc"],
            body: ["ok": true])
        var c = ResponseComparator()
        c.actualBase = "http://127.0.0.1:4321"
        #expect(
            c.compare(
                expected: expected,
                actual: actual(
                    headers: ["content-type": "application/json", "location": "http://127.0.0.1:4321/db/doc"],
                    body: #"{"ok":true}"#)
            ).isEmpty)
        let diffs = c.compare(
            expected: expected,
            actual: actual(
                headers: ["Content-Type": "application/json; charset=utf-8", "ETag": "\"x\""], body: #"{"ok":true}"#))
        #expect(
            Set(diffs.map(\.pointer)) == [
                "/response/headers/Content-Type", "/response/headers/Location", "/response/headers/ETag",
            ])
    }

    @Test func setCookieIsNormalisedBeforeComparing() {
        let cookie =
            "AuthSession=<cookie>; Version=1; Expires=Sat, 22 Nov 2025 08:00:00 GMT; Max-Age=600; Path=/; HttpOnly"
        let c = ResponseComparator(
            variable: ["/response/headers/Set-Cookie"],
            formats: ["/response/headers/Set-Cookie": "set-cookie"], patterns: Self.patterns)
        let expected = recorded(
            status: 200, reason: "OK", headers: ["Content-Type": "application/json", "Set-Cookie": .string(cookie)],
            body: ["ok": true])
        let ok = c.compare(
            expected: expected,
            actual: actual(
                status: 200, reason: "OK",
                headers: [
                    "Content-Type": "application/json",
                    "Set-Cookie":
                        "AuthSession=YWRtaW46NjkyMTcwQkU6abc; Version=1; Expires=Sun, 23 Nov 2025 09:00:00 GMT; Max-Age=600; Path=/; HttpOnly",
                ],
                body: #"{"ok":true}"#))
        #expect(ok.isEmpty, "\(ok)")
        let missing = c.compare(expected: expected, actual: actual(status: 200, reason: "OK", body: #"{"ok":true}"#))
        #expect(missing.map(\.pointer) == ["/response/headers/Set-Cookie"])
    }

    @Test func base64AndNDJSONBodies() {
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x00, 0xFF]
        let expected: JSON = [
            "status": 200, "reason": "OK", "headers": ["Content-Type": "image/png"],
            "body_encoding": "base64", "body": .string(Data(png).base64EncodedString()),
        ]
        let c = ResponseComparator()
        #expect(
            c.compare(
                expected: expected,
                actual: ActualResponse(
                    status: 200, reason: "OK", headers: ["Content-Type": "image/png"], body: Data(png))
            ).isEmpty)
        let changed = c.compare(
            expected: expected,
            actual: ActualResponse(
                status: 200, reason: "OK", headers: ["Content-Type": "image/png"], body: Data(png.dropLast() + [0xFE])))
        #expect(changed.first?.message.hasPrefix("bytes differ at offset 5") == true)

        let heartbeat: JSON = [
            "status": 200, "reason": "OK", "headers": ["Content-Type": "application/json"],
            "body_encoding": "base64", "body": "CgoK", "body_text": "\n\n\n",
        ]
        let hb = ResponseComparator(
            variable: ["/response/body", "/response/body_text"],
            formats: ["/response/body": "string", "/response/body_text": "newlines"], patterns: Self.patterns)
        #expect(
            hb.compare(
                expected: heartbeat,
                actual: ActualResponse(
                    status: 200, reason: "OK", headers: ["Content-Type": "application/json"],
                    body: Data("\n\n\n\n\n".utf8))
            ).isEmpty)
        #expect(
            !hb.compare(
                expected: heartbeat,
                actual: ActualResponse(
                    status: 200, reason: "OK", headers: ["Content-Type": "application/json"], body: Data("\n{}\n".utf8))
            ).isEmpty)

        let feed: JSON = [
            "status": 200, "reason": "OK", "headers": ["Content-Type": "application/json"],
            "body_encoding": "ndjson", "body": [["id": "a"], ["last_seq": 1]],
        ]
        #expect(
            c.compare(
                expected: feed,
                actual: ActualResponse(
                    status: 200, reason: "OK", headers: ["Content-Type": "application/json"],
                    body: Data("{\"id\":\"a\"}\n{\"last_seq\":1}\n".utf8))
            ).isEmpty)
        let feedDiff = c.compare(
            expected: feed,
            actual: ActualResponse(
                status: 200, reason: "OK", headers: ["Content-Type": "application/json"],
                body: Data("{\"id\":\"b\"}\n{\"last_seq\":1}\n".utf8)))
        #expect(feedDiff.map(\.pointer) == ["/response/body/0/id"])

        let empty: JSON = ["status": 304, "reason": "Not Modified", "headers": [:], "body_encoding": "empty"]
        #expect(
            c.compare(
                expected: empty, actual: ActualResponse(status: 304, reason: "Not Modified", headers: [:], body: Data())
            ).isEmpty)
        #expect(
            c.compare(
                expected: empty,
                actual: ActualResponse(status: 304, reason: "Not Modified", headers: [:], body: Data("x".utf8))
            ).count == 1)
    }

    @Test func baseURLIsSubstitutedInReasons() {
        var c = ResponseComparator()
        c.actualBase = "http://127.0.0.1:4000"
        let expected = recorded(
            status: 500, reason: "Internal Server Error",
            body: [
                "error": "db_not_found", "reason": "could not open http://admin:password@127.0.0.1:5984/tx_missing/",
            ])
        let diffs = c.compare(
            expected: expected,
            actual: actual(
                status: 500, reason: "Internal Server Error",
                body:
                    #"{"error":"db_not_found","reason":"could not open http://admin:password@127.0.0.1:4000/tx_missing/"}"#
            ))
        #expect(diffs.isEmpty, "\(diffs)")
    }

    @Test func templatesResolveAgainstOwnResponses() throws {
        let resolver = TemplateResolver(
            responses: [
                "put1": [
                    "status": 201, "headers": ["ETag": "\"1-abc\""],
                    "body": ["rev": "1-abc", "n": 3, "seq": "5-g1A/+"],
                ]
            ],
            server: "http://127.0.0.1:4000", serverAdmin: "http://admin:password@127.0.0.1:4000", cookie: "c00kie")
        #expect(try resolver.resolveText("/db/doc?rev={{put1:/body/rev}}") == "/db/doc?rev=1-abc")
        #expect(try resolver.resolveText("{{put1:/headers/etag|unquote}}") == "1-abc")
        #expect(try resolver.resolveText("since={{put1:/body/seq|url}}") == "since=5-g1A%2F%2B")
        #expect(try resolver.resolveText("key={{put1:/body/rev|json_url}}") == "key=%221-abc%22")
        #expect(
            try resolver.resolve(["_rev": "{{put1:/body/rev}}", "n": "{{put1:/body/n}}", "s": "n={{put1:/body/n}}"])
                == ["_rev": "1-abc", "n": 3, "s": "n=3"])
        #expect(try resolver.resolveText("{{server_admin}}/tx") == "http://admin:password@127.0.0.1:4000/tx")
        #expect(try resolver.resolveText("{{server}}/x {{cookie}}") == "http://127.0.0.1:4000/x c00kie")
        #expect(throws: TemplateResolver.Unresolved.self) { _ = try resolver.resolveText("{{nope:/body/rev}}") }
        #expect(throws: TemplateResolver.Unresolved.self) { _ = try resolver.resolveText("{{put1:/body/missing}}") }
    }
}
