import Foundation

/// Splits newline-delimited JSON (continuous `_changes`, `_db_updates`) into lines, chunk by chunk.
///
/// Lines end with `\n` or `\r\n`. Blank lines — the heartbeats CouchDB sends to keep a feed open — are
/// skipped, and ASCII whitespace around each line is trimmed. Only the incomplete last line is kept
/// between calls.
public struct NDJSONSplitter: Sendable {
    private var pending: [UInt8] = []

    /// Creates a splitter.
    public init() {}

    /// Bytes held between calls (capacity of the partial-line buffer); for memory tests.
    var bufferedByteCount: Int { pending.capacity }

    /// Feeds the next bytes and returns the complete, non-blank lines they finish, without line endings.
    public mutating func feed(_ bytes: some Sequence<UInt8>) -> [Data] {
        var lines: [Data] = []
        let handled: Void? = bytes.withContiguousStorageIfAvailable { split($0, into: &lines) }
        if handled == nil {
            let copy = Array(bytes)
            copy.withUnsafeBufferPointer { split($0, into: &lines) }
        }
        return lines
    }

    /// Feeds the next bytes; see `feed(_:)` for sequences.
    public mutating func feed(_ data: Data) -> [Data] {
        var lines: [Data] = []
        data.withUnsafeBytes { split($0.bindMemory(to: UInt8.self), into: &lines) }
        return lines
    }

    /// Declares the end of the stream and returns the last line if it had no newline (and is not blank).
    public mutating func finish() -> Data? {
        defer { pending = [] }
        return pending.withUnsafeBufferPointer { Self.trimmed($0[...]) }
    }

    private mutating func split(_ p: UnsafeBufferPointer<UInt8>, into lines: inout [Data]) {
        var start = 0
        var i = 0
        let n = p.count
        while i < n {
            if p[i] != 0x0A {
                i += 1
                continue
            }
            if pending.isEmpty {
                if let line = Self.trimmed(p[start..<i]) { lines.append(line) }
            } else {
                pending.append(contentsOf: UnsafeBufferPointer(rebasing: p[start..<i]))
                if let line = pending.withUnsafeBufferPointer({ Self.trimmed($0[...]) }) { lines.append(line) }
                if pending.capacity > 64 * 1024 { pending = [] } else { pending.removeAll(keepingCapacity: true) }
            }
            i += 1
            start = i
        }
        if start < n { pending.append(contentsOf: UnsafeBufferPointer(rebasing: p[start..<n])) }
    }

    private static func trimmed(_ slice: Slice<UnsafeBufferPointer<UInt8>>) -> Data? {
        var lower = slice.startIndex
        var upper = slice.endIndex
        func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0D || b == 0x0A }
        while lower < upper, isSpace(slice.base[lower]) { lower += 1 }
        while upper > lower, isSpace(slice.base[upper - 1]) { upper -= 1 }
        guard lower < upper else { return nil }
        return Data(UnsafeBufferPointer(rebasing: slice.base[lower..<upper]))
    }
}
