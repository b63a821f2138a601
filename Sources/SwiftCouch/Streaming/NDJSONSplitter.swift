import Foundation

/// Splits newline-delimited JSON (continuous `_changes`, `_db_updates`) into lines, chunk by chunk.
///
/// Lines end with `\n` or `\r\n`. Blank lines — the heartbeats CouchDB sends to keep a feed open — are
/// skipped, and ASCII whitespace around each line is trimmed. Only the incomplete last line is kept
/// between calls (without its leading whitespace, so blanks hold nothing), and with a
/// ``maximumLineLength`` never more than that: a longer line is an error as soon as its bytes pass
/// the limit.
public struct NDJSONSplitter: Sendable {
    private var pending: [UInt8] = []
    /// Bytes fed so far (for error offsets).
    private var consumed = 0
    /// The first error; every later call throws it again.
    private var failure: JSONStreamError?

    /// The longest line accepted, in bytes (without its line ending); past it `feed(_:)`
    /// throws a ``JSONStreamError`` whose ``JSONStreamError/exceededLimit`` is this limit. Nil for
    /// no limit.
    public let maximumLineLength: Int?
    /// `maximumLineLength`, or `Int.max`.
    private let limit: Int

    /// Creates a splitter.
    /// - Parameter maximumLineLength: the longest line accepted, in bytes; nil (the default) for
    ///   no limit.
    public init(maximumLineLength: Int? = nil) {
        self.maximumLineLength = maximumLineLength
        self.limit = maximumLineLength ?? Int.max
    }

    /// Bytes held between calls (capacity of the partial-line buffer); for memory tests.
    var bufferedByteCount: Int { pending.capacity }

    /// Feeds the next bytes and returns the complete, non-blank lines they finish, without line endings.
    /// Throws when a line passes ``maximumLineLength`` (and from then on).
    public mutating func feed(_ bytes: some Sequence<UInt8>) throws(JSONStreamError) -> [Data] {
        var lines: [Data] = []
        let failed: JSONStreamError?? = bytes.withContiguousStorageIfAvailable { split($0, into: &lines) }
        let error: JSONStreamError?
        if let failed {
            error = failed
        } else {
            let copy = Array(bytes)
            error = copy.withUnsafeBufferPointer { split($0, into: &lines) }
        }
        if let error { throw error }
        return lines
    }

    /// Feeds the next bytes; see `feed(_:)` for sequences.
    public mutating func feed(_ data: Data) throws(JSONStreamError) -> [Data] {
        var lines: [Data] = []
        let error = data.withUnsafeBytes { split($0.bindMemory(to: UInt8.self), into: &lines) }
        if let error { throw error }
        return lines
    }

    /// Declares the end of the stream and returns the last line if it had no newline (and is not blank).
    public mutating func finish() -> Data? {
        defer { pending = [] }
        return pending.withUnsafeBufferPointer { Self.trimmed($0[...]) }
    }

    /// Splits `p`; the error (also kept for later calls) when a line is too long.
    private mutating func split(_ p: UnsafeBufferPointer<UInt8>, into lines: inout [Data]) -> JSONStreamError? {
        if let failure { return failure }
        var start = 0
        var i = 0
        let n = p.count
        while i < n {
            if p[i] != 0x0A {
                i += 1
                continue
            }
            // The line's length without its ending (`\n` or `\r\n`).
            var length = pending.count + (i - start)
            if i > start ? p[i - 1] == 0x0D : pending.last == 0x0D { length -= 1 }
            if length > limit { return tooLong(at: consumed + i) }
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
        // Leading blanks of a line not yet ended are not kept (a feed writing only blanks holds nothing).
        if pending.isEmpty {
            while start < n, Self.isSpace(p[start]) { start += 1 }
        }
        if start < n {
            let needed = pending.count + (n - start)
            if needed > limit { return tooLong(at: consumed + n) }
            if needed > pending.capacity, limit != Int.max {
                pending.reserveCapacity(Swift.min(Swift.max(needed, pending.capacity * 2), limit))
            }
            pending.append(contentsOf: UnsafeBufferPointer(rebasing: p[start..<n]))
        }
        consumed += n
        return nil
    }

    private static func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0D || b == 0x0A }

    /// Records and returns the error for a line past the limit, found at byte `offset`.
    private mutating func tooLong(at offset: Int) -> JSONStreamError {
        let error = JSONStreamError(
            offset: offset, message: "a line would hold more than the limit of \(limit) bytes", exceededLimit: limit)
        failure = error
        pending = []
        return error
    }

    private static func trimmed(_ slice: Slice<UnsafeBufferPointer<UInt8>>) -> Data? {
        var lower = slice.startIndex
        var upper = slice.endIndex
        while lower < upper, isSpace(slice.base[lower]) { lower += 1 }
        while upper > lower, isSpace(slice.base[upper - 1]) { upper -= 1 }
        guard lower < upper else { return nil }
        return Data(UnsafeBufferPointer(rebasing: slice.base[lower..<upper]))
    }
}
