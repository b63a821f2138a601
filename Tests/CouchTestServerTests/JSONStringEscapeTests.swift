import CouchQuery
import Foundation
import TestScheduling
import Testing

/// `JSON.serialized` escapes strings as CouchDB does (`"`, `\`, the named controls, other controls as
/// `\u00XX`, everything else as it is), whatever surrounds the characters that need an escape.
@Suite(.ownThreads) struct JSONStringEscapeTests {
    /// The escaping spelled out one scalar at a time: what the output must be.
    static func reference(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{08}": out += "\\b"
            case "\u{0C}": out += "\\f"
            default:
                if scalar.value < 0x20 {
                    out += String(format: "\\u%04x", scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }

    @Test(arguments: [
        "", "plain", "a\"b", "\\", "\"\u{301}", "\\\u{301}x", "e\u{301}\"", "\r\n", "x\r\ny", "\u{0}\u{1f}\u{7f}",
        "tab\there", "😀\"😀", "\u{FEFF}\u{2028}\"", "\"\"\"", "end\\",
    ])
    func knownStrings(_ s: String) {
        #expect(JSON.string(s).serialized == Self.reference(s))
    }

    @Test func randomStrings() {
        var generator = SystemRandomNumberGenerator()
        let pool: [Unicode.Scalar] = [
            "a", "\"", "\\", "\n", "\r", "\t", "\u{0}", "\u{1b}", "\u{301}", "é", "😀", "\u{7f}",
        ]
        for _ in 0..<2_000 {
            let count = Int.random(in: 0..<24, using: &generator)
            var s = ""
            for _ in 0..<count { s.unicodeScalars.append(pool.randomElement(using: &generator)!) }
            #expect(JSON.string(s).serialized == Self.reference(s), "\(Array(s.unicodeScalars))")
        }
    }
}
