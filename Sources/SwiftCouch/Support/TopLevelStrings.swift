import Foundation

/// Reads a few top-level string members of a JSON object straight from its bytes, without
/// decoding the rest: the `_id` and `_rev` of a document the client has just encoded.
enum TopLevelStrings {
    /// Member names to look for, with their UTF-8 made once.
    struct Keys: Sendable {
        let names: [String]
        let bytes: [[UInt8]]

        init(_ names: [String]) {
            self.names = names
            bytes = names.map { Array($0.utf8) }
        }

        /// What the BulkWriter reads of every document.
        static let idAndRev = Keys(["_id", "_rev"])
    }

    /// The values of `keys` in the JSON object `json`, in the order asked (nil for a member that is
    /// absent or `null`; the first of duplicates, as `JSONDecoder` reads them); nil when one of
    /// them is neither a string nor `null`, or `json` is not a well-formed object.
    static func find(_ keys: [String], in json: Data) -> [String?]? {
        json.withUnsafeBytes { raw in
            find(Keys(keys), in: raw.bindMemory(to: UInt8.self))
        }
    }

    static func find(_ keys: Keys, in p: UnsafeBufferPointer<UInt8>) -> [String?]? {
        let wanted = keys.bytes
        var found = [String?](repeating: nil, count: wanted.count)
        var seen = [Bool](repeating: false, count: wanted.count)
        var i = skipSpace(p, 0)
        guard i < p.count, p[i] == UInt8(ascii: "{") else { return nil }
        i = skipSpace(p, i + 1)
        if i < p.count, p[i] == UInt8(ascii: "}") { return found }
        while i < p.count {
            guard p[i] == UInt8(ascii: "\""), let keyEnd = stringEnd(p, i) else { return nil }
            let key = UnsafeBufferPointer(rebasing: p[(i + 1)..<(keyEnd - 1)])
            let escaped = key.contains(UInt8(ascii: "\\"))
            let slot = escaped ? nil : wanted.firstIndex { $0.elementsEqual(key) }
            var position = slot
            if escaped, let text = unescaped(p, i, keyEnd) {
                // An escaped spelling of a wanted key is read like any other.
                position = keys.names.firstIndex(of: text)
            }
            if let position {
                // The first of duplicate members counts; later ones are checked but not kept.
                var value: String?
                guard let end = readValue(p, afterKey: keyEnd, into: &value) else { return nil }
                if !seen[position] {
                    found[position] = value
                    seen[position] = true
                }
                i = end
            } else {
                i = skipSpace(p, keyEnd)
                guard i < p.count, p[i] == UInt8(ascii: ":"), let end = valueEnd(p, skipSpace(p, i + 1)) else {
                    return nil
                }
                i = end
            }
            i = skipSpace(p, i)
            guard i < p.count else { return nil }
            if p[i] == UInt8(ascii: "}") { return found }
            guard p[i] == UInt8(ascii: ",") else { return nil }
            i = skipSpace(p, i + 1)
        }
        return nil
    }

    /// Reads the value after a wanted key: a string (kept in `slot`) or `null`; nil for anything else.
    private static func readValue(_ p: UnsafeBufferPointer<UInt8>, afterKey keyEnd: Int, into slot: inout String?)
        -> Int?
    {
        var i = skipSpace(p, keyEnd)
        guard i < p.count, p[i] == UInt8(ascii: ":") else { return nil }
        i = skipSpace(p, i + 1)
        guard i < p.count else { return nil }
        if p[i] == UInt8(ascii: "\""), let end = stringEnd(p, i) {
            guard let text = unescaped(p, i, end) else { return nil }
            slot = text
            return end
        }
        if p.count - i >= 4, p[i] == UInt8(ascii: "n"), p[i + 1] == UInt8(ascii: "u"), p[i + 2] == UInt8(ascii: "l"),
            p[i + 3] == UInt8(ascii: "l")
        {
            slot = nil
            return i + 4
        }
        return nil
    }

    /// The text of the string literal `p[start..<end]` (quotes included).
    private static func unescaped(_ p: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int) -> String? {
        let inner = UnsafeBufferPointer(rebasing: p[(start + 1)..<(end - 1)])
        if !inner.contains(UInt8(ascii: "\\")) { return String(decoding: inner, as: UTF8.self) }
        return try? JSONDecoder().decode(String.self, from: Data(UnsafeBufferPointer(rebasing: p[start..<end])))
    }

    private static func skipSpace(_ p: UnsafeBufferPointer<UInt8>, _ start: Int) -> Int {
        var i = start
        while i < p.count, p[i] == 0x20 || p[i] == 0x0A || p[i] == 0x0D || p[i] == 0x09 { i += 1 }
        return i
    }

    /// The index just past the string literal starting at `start` (its opening quote), or nil.
    private static func stringEnd(_ p: UnsafeBufferPointer<UInt8>, _ start: Int) -> Int? {
        var i = start + 1
        while i < p.count {
            switch p[i] {
            case UInt8(ascii: "\""): return i + 1
            case UInt8(ascii: "\\"): i += 2
            default: i += 1
            }
        }
        return nil
    }

    /// The index just past the value starting at `start`, or nil.
    private static func valueEnd(_ p: UnsafeBufferPointer<UInt8>, _ start: Int) -> Int? {
        guard start < p.count else { return nil }
        var depth = 0
        var i = start
        while i < p.count {
            switch p[i] {
            case UInt8(ascii: "\""):
                guard let end = stringEnd(p, i) else { return nil }
                i = end
                if depth == 0 { return i }
                continue
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                depth += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                if depth == 0 { return i }
                depth -= 1
                if depth == 0 { return i + 1 }
            case UInt8(ascii: ","):
                if depth == 0 { return i }
            default:
                break
            }
            i += 1
        }
        return depth == 0 ? i : nil
    }
}
