import Foundation

/// A JSON body that is malformed or incomplete, found by ``JSONRowStreamParser``.
public struct JSONStreamError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Zero-based offset of the offending byte in the whole body (for an incomplete body: its length).
    public let offset: Int
    /// What is wrong, in plain words.
    public let message: String
    /// The size limit an element passed (``JSONRowStreamParser/maximumElementSize``,
    /// ``NDJSONSplitter/maximumLineLength``), when that is what is wrong; nil for malformed JSON.
    public let exceededLimit: Int?

    /// Creates an error at `offset` (bytes from the start of the body); `exceededLimit` is the
    /// size limit passed, when that is the error.
    public init(offset: Int, message: String, exceededLimit: Int? = nil) {
        self.offset = offset
        self.message = message
        self.exceededLimit = exceededLimit
    }

    public var description: String {
        exceededLimit == nil
            ? "Malformed JSON at byte \(offset): \(message)" : "Element too large at byte \(offset): \(message)"
    }
}

/// An incremental parser for CouchDB's streamed result bodies that hands out one row at a time.
///
/// CouchDB streams large results as one JSON object whose rows are the elements of one array member:
/// `{"total_rows":N,"offset":N,"rows":[…]}` (views, `_all_docs`), `{"results":[…],"last_seq":…}`
/// (`_changes`), `{"docs":[…],"bookmark":…}` (`_find`), or a bare array (`_bulk_docs`). Feed the body in
/// chunks of any size, split anywhere; every complete element of the rows array comes back as the exact
/// raw JSON bytes of that element, ready for `JSONDecoder`. The other top-level members are kept in
/// ``metadata``.
///
/// Memory stays flat however many rows arrive: the parser keeps only the bytes of the row (or metadata
/// value) that is still incomplete at the end of a chunk, plus one byte per nesting level. With a
/// ``maximumElementSize``, no row and no top-level member may be longer (checked as the bytes arrive,
/// so an element that never ends is never held whole), and the members other than the rows together
/// may not be either.
///
/// The whole document is checked against the JSON grammar (brackets, commas, colons, strings and their
/// escapes, numbers and literals), so row boundaries are exact and malformed bodies are rejected with the
/// offset of the first bad byte; after an error every later call throws that same error. Bytes inside strings are passed through as they are (UTF-8 validity is
/// left to whoever decodes the row). A body without the rows member is not an error: CouchDB's error
/// objects such as `{"error":"not_found","reason":"missing"}` yield no rows and both members in
/// ``metadata`` (``foundRows`` tells the two apart). A rows member that is not an array (an object, a
/// string, a number, a literal) is an error.
public struct JSONRowStreamParser: Sendable {
    /// The member whose array elements are the rows, or nil when the top-level value is the array.
    public let rowsKey: String?

    /// Top-level members other than the rows array, as the raw JSON bytes of each value, keyed by member
    /// name. Members that come after the rows array appear once the parser has read them.
    public private(set) var metadata: [String: Data] = [:]

    /// The deepest nesting accepted (a guard against hostile input; CouchDB documents are far shallower).
    public static let maximumDepth = 10_000

    private enum Mode: UInt8 {
        case start, value, arrayFirst, objectFirst, objectKey, colon, afterValue
        case string, escape, unicode
        case numMinus, numZero, numInt, numDot, numFrac, numExp, numExpSign, numExpDigits
        case literal, done
    }

    private enum Capture: UInt8 { case none, row, meta, key }

    private var mode: Mode = .start
    /// Open containers, innermost last: 1 = object, 0 = array.
    private var stack: [UInt8] = []
    private var consumed = 0
    private var stringIsKey = false
    private var hexRemaining = 0
    private var literalKind = 0
    private var literalIndex = 0
    private var capture: Capture = .none
    private var captureDepth = 0
    /// Bytes of the captured value that arrived in earlier chunks.
    private var pending: [UInt8] = []
    private var currentKey: String?
    /// Stack depth of the rows array while inside it (its elements start at this depth), else -1.
    private var rowsDepth = -1
    /// Bytes of the metadata kept (names and values), counted against `maximumElementSize`.
    private var metadataBytes = 0
    /// The first error found; every later call reports it again.
    private var failure: JSONStreamError?

    private static let literals: [[UInt8]] = [Array("true".utf8), Array("false".utf8), Array("null".utf8)]
    private static let pendingShrinkThreshold = 64 * 1024

    /// Creates a parser.
    /// - Parameters:
    ///   - rowsKey: the top-level member whose array elements are the rows (`"rows"`, `"results"`,
    ///     `"docs"`); nil when the top-level value is itself the array of rows.
    ///   - maximumElementSize: the most bytes one row may have, and all the top-level members other
    ///     than the rows together (names and values); nil (the default) for no limit.
    public init(rowsKey: String?, maximumElementSize: Int? = nil) {
        self.rowsKey = rowsKey
        self.maximumElementSize = maximumElementSize
        self.limit = maximumElementSize ?? Int.max
    }

    /// The most bytes one row may have, and the top-level members other than the rows together
    /// (names and values). Past it the parser throws a ``JSONStreamError`` whose
    /// ``JSONStreamError/exceededLimit`` is this limit, as soon as the bytes that pass it arrive.
    /// Nil for no limit.
    public let maximumElementSize: Int?
    /// `maximumElementSize`, or `Int.max`.
    private let limit: Int

    /// Whether the rows member (or, without a rows key, the top-level array) has been found.
    public private(set) var foundRows = false

    /// Bytes the parser is holding on to between calls (capacity of its buffers); for memory tests.
    var bufferedByteCount: Int { pending.capacity + stack.capacity }

    /// Feeds the next bytes of the body (split anywhere) and returns the rows completed by them, each as the
    /// raw JSON bytes of one array element, in order.
    public mutating func feed(_ bytes: some Sequence<UInt8>) throws(JSONStreamError) -> [Data] {
        var rows: [Data] = []
        let failure: JSONStreamError?? = bytes.withContiguousStorageIfAvailable { buffer in
            process(buffer, into: &rows)
        }
        let error: JSONStreamError?
        if let failure {
            error = failure
        } else {
            let copy = Array(bytes)
            error = copy.withUnsafeBufferPointer { process($0, into: &rows) }
        }
        if let error { throw error }
        return rows
    }

    /// Feeds the next bytes of the body; see `feed(_:)` for sequences.
    public mutating func feed(_ data: Data) throws(JSONStreamError) -> [Data] {
        var rows: [Data] = []
        let error = data.withUnsafeBytes { raw in
            process(raw.bindMemory(to: UInt8.self), into: &rows)
        }
        if let error { throw error }
        return rows
    }

    /// Feeds the next bytes of the body from raw memory; see `feed(_:)` for sequences.
    public mutating func feed(_ bytes: UnsafeRawBufferPointer) throws(JSONStreamError) -> [Data] {
        var rows: [Data] = []
        if let error = process(bytes.bindMemory(to: UInt8.self), into: &rows) { throw error }
        return rows
    }

    /// Feeds the next bytes of the body and hands each row completed by them to `emit`, as the
    /// bytes of the element, in place (valid only during the call): no copy per row.
    ///
    /// `leading`, when given, is offered every object row that starts in this chunk first, as the
    /// rest of the chunk from the row's `{`: it returns the row's length when it has taken the
    /// row (a parser of strict JSON that found the whole row there — no byte of it is then scanned
    /// twice), or nil to leave it to this parser (the row goes on in the next chunk, or is
    /// malformed: then found and reported exactly as without `leading`). What it takes must be
    /// strict JSON, which this parser accepts too, or a malformed row would be taken for a row.
    mutating func feed(
        _ data: Data, rows emit: (UnsafeRawBufferPointer) -> Void,
        leading: ((UnsafeRawBufferPointer) -> Int?)? = nil
    ) throws(JSONStreamError) {
        let error = data.withUnsafeBytes { raw in
            process(raw.bindMemory(to: UInt8.self), emit, leading: leading)
        }
        if let error { throw error }
    }

    /// Declares the end of the body: throws if the document is empty, incomplete or was malformed.
    public mutating func finish() throws(JSONStreamError) {
        if let failure { throw failure }
        switch mode {
        case .done: return
        case .start: throw JSONStreamError(offset: consumed, message: "empty document")
        case .string, .escape, .unicode:
            throw JSONStreamError(offset: consumed, message: "unexpected end of the document inside a string")
        default:
            throw JSONStreamError(
                offset: consumed,
                message: "unexpected end of the document (\(stack.count) unclosed array(s)/object(s))")
        }
    }

    // MARK: - The state machine

    private mutating func process(_ p: UnsafeBufferPointer<UInt8>, into rows: inout [Data]) -> JSONStreamError? {
        process(p) { rows.append(Data($0)) }
    }

    private mutating func process(
        _ p: UnsafeBufferPointer<UInt8>, _ emit: (UnsafeRawBufferPointer) -> Void,
        leading: ((UnsafeRawBufferPointer) -> Int?)? = nil
    ) -> JSONStreamError? {
        if let failure { return failure }
        let error = scan(p, emit, leading: leading)
        if let error {
            failure = error
            pending = []
        }
        return error
    }

    private mutating func scan(
        _ p: UnsafeBufferPointer<UInt8>, _ emit: (UnsafeRawBufferPointer) -> Void,
        leading: ((UnsafeRawBufferPointer) -> Int?)?
    ) -> JSONStreamError? {
        let n = p.count
        var i = 0
        var captureStart = 0

        func fail(_ message: String) -> JSONStreamError {
            JSONStreamError(offset: consumed + i, message: message)
        }

        while i < n {
            let c = p[i]
            switch mode {
            case .string:
                // Fast scan of plain string content.
                var j = i
                while j < n {
                    let b = p[j]
                    if b == 0x22 || b == 0x5C || b < 0x20 { break }
                    j += 1
                }
                i = j
                if j == n { continue }  // the string goes on in the next chunk
                let b = p[j]
                if b == 0x22 {
                    i += 1
                    if stringIsKey {
                        mode = .colon
                        if capture == .key {
                            if metadataBytes + pending.count + (i - captureStart) > limit {
                                return tooLong(at: consumed + i)
                            }
                            currentKey = Self.decodeKey(pending, p, captureStart, i)
                            pending.removeAll(keepingCapacity: true)
                            capture = .none
                        }
                    } else if !valueEnded(p, captureStart, i, emit) {
                        return tooLong(at: consumed + i)
                    }
                } else if b == 0x5C {
                    mode = .escape
                    i += 1
                } else {
                    return fail("unescaped control character in a string")
                }
                continue

            case .escape:
                switch c {
                case 0x22, 0x5C, 0x2F, 0x62, 0x66, 0x6E, 0x72, 0x74: mode = .string
                case 0x75:
                    mode = .unicode
                    hexRemaining = 4
                default: return fail("invalid escape sequence in a string")
                }
                i += 1
                continue

            case .unicode:
                guard Self.isHexDigit(c) else { return fail("invalid \\u escape in a string") }
                hexRemaining -= 1
                if hexRemaining == 0 { mode = .string }
                i += 1
                continue

            case .numMinus, .numZero, .numInt, .numDot, .numFrac, .numExp, .numExpSign, .numExpDigits:
                let isDigit = c &- 0x30 < 10
                switch mode {
                case .numMinus:
                    guard isDigit else { return fail("expected a digit after '-'") }
                    mode = c == 0x30 ? .numZero : .numInt
                    i += 1
                    continue
                case .numDot:
                    guard isDigit else { return fail("expected a digit after the decimal point") }
                    mode = .numFrac
                    i += 1
                    continue
                case .numExp:
                    if c == 0x2B || c == 0x2D {
                        mode = .numExpSign
                    } else if isDigit {
                        mode = .numExpDigits
                    } else {
                        return fail("expected a digit in the exponent")
                    }
                    i += 1
                    continue
                case .numExpSign:
                    guard isDigit else { return fail("expected a digit in the exponent") }
                    mode = .numExpDigits
                    i += 1
                    continue
                case .numInt, .numFrac, .numExpDigits:
                    if isDigit {
                        var j = i + 1
                        while j < n, p[j] &- 0x30 < 10 { j += 1 }
                        i = j
                        continue
                    }
                default:  // .numZero
                    if isDigit { return fail("leading zeros are not allowed in numbers") }
                }
                if c == 0x2E && (mode == .numZero || mode == .numInt) {
                    mode = .numDot
                    i += 1
                    continue
                }
                if (c == 0x65 || c == 0x45) && mode != .numExpDigits {
                    mode = .numExp
                    i += 1
                    continue
                }
                // The number ended just before this byte; look at the byte again as what follows a value.
                guard valueEnded(p, captureStart, i, emit) else { return tooLong(at: consumed + i) }
                continue

            case .literal:
                let expected = Self.literals[literalKind]
                guard c == expected[literalIndex] else { return fail("invalid literal") }
                literalIndex += 1
                i += 1
                if literalIndex == expected.count, !valueEnded(p, captureStart, i, emit) {
                    return tooLong(at: consumed + i)
                }
                continue

            default:
                break
            }

            // Structural bytes.
            if c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 {
                i += 1
                continue
            }
            switch mode {
            case .start, .value, .arrayFirst:
                if c == 0x5D && mode == .arrayFirst {
                    stack.removeLast()
                    if stack.count + 1 == rowsDepth { rowsDepth = -1 }
                    i += 1
                    guard valueEnded(p, captureStart, i, emit) else { return tooLong(at: consumed + i) }
                    continue
                }
                // A value starts here: decide whether it is a row, a metadata value or the rows array.
                let depth = stack.count
                if depth == rowsDepth, c == 0x7B, let leading,
                    let length = leading(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: p[i..<n])))
                {
                    // The whole row was here and is taken: go on after it as after any row.
                    guard length <= limit else { return tooLong(at: consumed + i + length, row: true) }
                    i += length
                    mode = .afterValue
                    continue
                }
                if depth == rowsDepth {
                    capture = .row
                    captureDepth = depth
                    captureStart = i
                } else if depth == 1 && stack[0] == 1 {
                    if let rowsKey, currentKey == rowsKey {
                        guard c == 0x5B else { return fail("the \"\(rowsKey)\" member is not an array") }
                        rowsDepth = 2
                        foundRows = true
                    } else {
                        capture = .meta
                        captureDepth = depth
                        captureStart = i
                    }
                } else if depth == 0 {
                    if c == 0x5B {
                        guard rowsKey == nil else {
                            return fail("expected a JSON object with a \"\(rowsKey!)\" member, found an array")
                        }
                        rowsDepth = 1
                        foundRows = true
                    } else if c != 0x7B {
                        return fail("expected a JSON object or array")
                    }
                }
                switch c {
                case 0x7B, 0x5B:
                    guard stack.count < Self.maximumDepth else { return fail("nesting is too deep") }
                    stack.append(c == 0x7B ? 1 : 0)
                    mode = c == 0x7B ? .objectFirst : .arrayFirst
                case 0x22:
                    stringIsKey = false
                    mode = .string
                case 0x2D: mode = .numMinus
                case 0x30: mode = .numZero
                case 0x31...0x39: mode = .numInt
                case 0x74, 0x66, 0x6E:
                    literalKind = c == 0x74 ? 0 : (c == 0x66 ? 1 : 2)
                    literalIndex = 1
                    mode = .literal
                default:
                    return fail(mode == .arrayFirst ? "expected a value or ']'" : "expected a value")
                }
                i += 1

            case .objectFirst, .objectKey:
                if c == 0x22 {
                    stringIsKey = true
                    mode = .string
                    if stack.count == 1 {
                        capture = .key
                        captureStart = i
                    }
                } else if c == 0x7D && mode == .objectFirst {
                    stack.removeLast()
                    guard valueEnded(p, captureStart, i + 1, emit) else { return tooLong(at: consumed + i + 1) }
                } else {
                    return fail(mode == .objectFirst ? "expected a member name or '}'" : "expected a member name")
                }
                i += 1

            case .colon:
                guard c == 0x3A else { return fail("expected ':' after a member name") }
                mode = .value
                i += 1

            case .afterValue:
                let inObject = stack.last == 1
                if c == 0x2C {
                    mode = inObject ? .objectKey : .value
                } else if c == 0x7D && inObject {
                    stack.removeLast()
                    guard valueEnded(p, captureStart, i + 1, emit) else { return tooLong(at: consumed + i + 1) }
                } else if c == 0x5D && !inObject {
                    stack.removeLast()
                    if stack.count + 1 == rowsDepth { rowsDepth = -1 }
                    guard valueEnded(p, captureStart, i + 1, emit) else { return tooLong(at: consumed + i + 1) }
                } else {
                    return fail(inObject ? "expected ',' or '}'" : "expected ',' or ']'")
                }
                i += 1

            case .done:
                return fail("unexpected data after the end of the JSON document")

            default:
                return fail("internal parser state error")
            }
        }

        if capture != .none {
            // Checked before the bytes are kept: an element that never ends is never held whole.
            let held = pending.count + (n - captureStart) + (capture == .row ? 0 : metadataBytes)
            if held > limit { return tooLong(at: consumed + n) }
            keep(UnsafeBufferPointer(rebasing: p[captureStart..<n]))
        }
        consumed += n
        return nil
    }

    /// Appends to `pending`, growing it geometrically but never past the limit (so what is held
    /// stays within the limit, not within twice it).
    private mutating func keep(_ bytes: UnsafeBufferPointer<UInt8>) {
        let needed = pending.count + bytes.count
        if needed > pending.capacity, limit != Int.max {
            pending.reserveCapacity(Swift.min(Swift.max(needed, pending.capacity * 2), limit))
        }
        pending.append(contentsOf: bytes)
    }

    /// The error for an element past `maximumElementSize`, found at byte `offset`: a row (by
    /// default, the one being captured) or the top-level members.
    private func tooLong(at offset: Int, row: Bool? = nil) -> JSONStreamError {
        let what = (row ?? (capture == .row)) ? "a row" : "the top-level members other than the rows"
        return JSONStreamError(
            offset: offset, message: "\(what) would hold more than the limit of \(limit) bytes", exceededLimit: limit)
    }

    /// A value ended at `end` (exclusive): emit it if it is the captured row or metadata value.
    /// False, emitting nothing, when that value is longer than the limit.
    @inline(__always)
    private mutating func valueEnded(
        _ p: UnsafeBufferPointer<UInt8>, _ captureStart: Int, _ end: Int, _ emit: (UnsafeRawBufferPointer) -> Void
    ) -> Bool {
        mode = stack.isEmpty ? .done : .afterValue
        guard capture != .none, stack.count == captureDepth else { return true }
        let size = pending.count + (end - captureStart)
        if capture == .row {
            if size > limit { return false }
        } else if let key = currentKey {
            let replaced = metadata[key].map { $0.count + key.utf8.count } ?? 0
            let total = metadataBytes - replaced + key.utf8.count + size
            if total > limit { return false }
            metadataBytes = total
        }
        if pending.isEmpty {
            // The whole value is in this chunk: handed out in place, nothing copied.
            let bytes = UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: p[captureStart..<end]))
            if capture == .row {
                emit(bytes)
            } else if let key = currentKey {
                metadata[key] = Data(bytes)
            }
        } else {
            pending.append(contentsOf: UnsafeBufferPointer(rebasing: p[captureStart..<end]))
            pending.withUnsafeBytes { bytes in
                if capture == .row {
                    emit(bytes)
                } else if let key = currentKey {
                    metadata[key] = Data(bytes)
                }
            }
            if pending.capacity > Self.pendingShrinkThreshold {
                pending = []
            } else {
                pending.removeAll(keepingCapacity: true)
            }
        }
        capture = .none
        return true
    }

    /// The name of a top-level member from its quoted bytes (pending plus `p[start..<end]`).
    private static func decodeKey(_ pending: [UInt8], _ p: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int)
        -> String
    {
        var quoted = pending
        quoted.append(contentsOf: UnsafeBufferPointer(rebasing: p[start..<end]))
        if !quoted.contains(0x5C) {
            return String(decoding: quoted[1..<(quoted.count - 1)], as: UTF8.self)
        }
        let decoded = try? JSONDecoder().decode(String.self, from: Data(quoted))
        return decoded ?? String(decoding: quoted[1..<(quoted.count - 1)], as: UTF8.self)
    }

    @inline(__always)
    private static func isHexDigit(_ c: UInt8) -> Bool {
        (c &- 0x30 < 10) || ((c | 0x20) &- 0x61 < 6)
    }
}
