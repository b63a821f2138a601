import Foundation

/// Reads a `_bulk_docs` answer of successes in one pass over its bytes, with no tokens: the
/// answer CouchDB writes for a batch that went through, a thousand or more rows at a time
/// (`[{"ok":true,"id":"…","rev":"…"},…]`, no white space inside).
///
/// Only that exact shape is taken: each row `{"ok":true,"id":S,"rev":S}` in that order, strings
/// with no escapes or control characters and valid UTF-8, white space only around the array.
/// Anything else (an error row, another member, an escape) gives nil, and the fast decoder reads
/// the answer as before, with the same values and errors; this never decides differently.
enum BulkAnswerScanner {
    /// The rows of `bytes`, or nil when it is not the shape above.
    static func successes(in bytes: UnsafeRawBufferPointer) -> [BulkWriteResult]? {
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return nil }
        var scanner = Scanner(base: base, end: bytes.count)
        return scanner.rows()
    }

    private struct Scanner {
        let base: UnsafePointer<UInt8>
        let end: Int
        var at = 0

        init(base: UnsafePointer<UInt8>, end: Int) {
            self.base = base
            self.end = end
        }

        mutating func rows() -> [BulkWriteResult]? {
            skipSpace()
            guard take(UInt8(ascii: "[")) else { return nil }
            var rows: [BulkWriteResult] = []
            rows.reserveCapacity(max(16, end / 80))
            if take(UInt8(ascii: "]")) { return finished() ? rows : nil }
            while true {
                guard take(#"{"ok":true,"id":"#), let id = string(), take(#","rev":"#), let rev = string(),
                    take(UInt8(ascii: "}"))
                else { return nil }
                rows.append(.success(id: id, rev: rev))
                if take(UInt8(ascii: ",")) { continue }
                guard take(UInt8(ascii: "]")), finished() else { return nil }
                return rows
            }
        }

        /// A string with no escapes or control characters, from its opening quote.
        mutating func string() -> String? {
            guard take(UInt8(ascii: "\"")) else { return nil }
            let start = at
            var bits: UInt8 = 0
            while at < end {
                let byte = base[at]
                if byte == UInt8(ascii: "\"") {
                    let bytes = UnsafeBufferPointer(start: base + start, count: at - start)
                    at += 1
                    // ASCII (ids and revisions nearly always are) is valid UTF-8 as it is; anything
                    // else is validated, and invalid UTF-8 leaves the answer to the decoder.
                    return bits < 0x80
                        ? String(decoding: bytes, as: UTF8.self) : String(validating: bytes, as: UTF8.self)
                }
                if byte < 0x20 || byte == UInt8(ascii: "\\") { return nil }
                bits |= byte
                at += 1
            }
            return nil
        }

        mutating func take(_ byte: UInt8) -> Bool {
            guard at < end, base[at] == byte else { return false }
            at += 1
            return true
        }

        mutating func take(_ text: StaticString) -> Bool {
            let count = text.utf8CodeUnitCount
            guard end - at >= count, memcmp(base + at, text.utf8Start, count) == 0 else { return false }
            at += count
            return true
        }

        mutating func skipSpace() {
            while at < end {
                switch base[at] {
                case 0x20, 0x09, 0x0A, 0x0D: at += 1
                default: return
                }
            }
        }

        /// Only white space is left.
        mutating func finished() -> Bool {
            skipSpace()
            return at == end
        }
    }
}
