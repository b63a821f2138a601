import Foundation

/// ECMAScript's conversions from a number to an integer, in one place.
///
/// Every JavaScript number that becomes a Swift integer (an index, a length, a count, a radix,
/// a date component, a character code, a shift) goes through these: they never trap, whatever the
/// number (NaN, ±Infinity, -0, 1e300), because `Int(_: Double)` traps on a value it cannot hold.
enum JSNumber {
    /// `ToIntegerOrInfinity`: NaN and ±0 are 0, a finite number loses its fraction (toward zero),
    /// ±Infinity stays.
    static func integerOrInfinity(_ n: Double) -> Double {
        if n.isNaN || n == 0 { return 0 }
        if n.isInfinite { return n }
        return n.rounded(.towardZero)
    }

    /// `ToIntegerOrInfinity`, then clamped to `lower...upper` and made an `Int` (never traps).
    static func clamped(_ n: Double, _ lower: Int, _ upper: Int) -> Int {
        let i = integerOrInfinity(n)
        if i <= Double(lower) { return lower }
        if i >= Double(upper) { return upper }
        return Int(i)
    }

    /// A relative position as `slice`, `splice`, `at` and `Array.prototype.fill` read it: negative
    /// counts from the end; the result is within `0...count`.
    static func relative(_ n: Double, count: Int) -> Int {
        let i = integerOrInfinity(n)
        if i < 0 { return clamped(Double(count) + i, 0, count) }
        return clamped(i, 0, count)
    }

    /// `ToUint32`.
    static func uint32(_ n: Double) -> UInt32 {
        guard n.isFinite else { return 0 }
        let wrapped = n.rounded(.towardZero).truncatingRemainder(dividingBy: 4_294_967_296)
        return UInt32(truncatingIfNeeded: Int64(wrapped))
    }

    /// `ToInt32`.
    static func int32(_ n: Double) -> Int32 { Int32(bitPattern: uint32(n)) }

    /// `ToUint16` (a character code for `String.fromCharCode`).
    static func uint16(_ n: Double) -> UInt16 { UInt16(truncatingIfNeeded: uint32(n)) }

    /// The `Int` of a number that is an integer within `Int`'s range, else nil.
    static func exactInt(_ n: Double) -> Int? {
        guard n.isFinite, n == n.rounded(.towardZero), abs(n) < 9.2e18 else { return nil }
        return Int(n)
    }

    /// An array index key (`"0"`, `"17"`; not `"+1"`, `"01"` or `"-0"`), else nil.
    static func arrayIndex(_ key: String) -> Int? {
        guard let first = key.utf8.first, first >= UInt8(ascii: "0"), first <= UInt8(ascii: "9"),
            key.utf8.count <= 15, first != UInt8(ascii: "0") || key.utf8.count == 1,
            let i = Int(key)
        else { return nil }
        return i
    }
}

extension Interpreter {
    /// A `RangeError` thrown as JavaScript would.
    func rangeError(_ message: String) -> JSThrown { JSThrown(value: makeError("RangeError", message)) }

    /// `ToIntegerOrInfinity` of an argument (undefined is 0).
    func integerArgument(_ args: [JSValue], _ i: Int) -> Double {
        JSNumber.integerOrInfinity(i < args.count ? args[i].toNumber() : .nan)
    }
}

extension String {
    /// The UTF-16 code unit at `offset` (within `utf16.count`) as a one-unit string.
    func utf16Unit(at offset: Int) -> String {
        let unit = utf16[utf16.index(utf16.startIndex, offsetBy: offset)]
        return String(utf16CodeUnits: [unit], count: 1)
    }
}
