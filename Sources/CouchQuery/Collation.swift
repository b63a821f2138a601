import Foundation

/// CouchDB's ordering of JSON values (view keys, `_all_docs` keys, Mango sort and comparisons).
///
/// Types order as `null < false < true < numbers < strings < arrays < objects`; numbers by value
/// (integers and doubles compare by value, so `21 == 21.0`); arrays element by element, a shorter
/// prefix first; objects key by key (keys with string collation), then value, a shorter prefix
/// first. Strings use CouchDB's ICU root collation, reproduced here (see `compareStrings`);
/// `compareRaw` is the code-point order `_all_docs` ids use.
public enum Collation {
    /// Returns a negative number, zero or a positive number as `a` sorts before, with or after `b`.
    public static func compare(_ a: JSON, _ b: JSON) -> Int {
        let ra = rank(a)
        let rb = rank(b)
        if ra != rb { return ra < rb ? -1 : 1 }
        switch (a, b) {
        case (.int(let x), .int(let y)): return x == y ? 0 : (x < y ? -1 : 1)
        case (.int(let x), .double(let y)): return compareIntDouble(x, y)
        case (.double(let x), .int(let y)): return -compareIntDouble(y, x)
        case (.double(let x), .double(let y)): return x == y ? 0 : (x < y ? -1 : 1)
        case (.string(let x), .string(let y)): return compareStrings(x, y)
        case (.array(let x), .array(let y)):
            for (l, r) in zip(x, y) {
                let c = compare(l, r)
                if c != 0 { return c }
            }
            return x.count == y.count ? 0 : (x.count < y.count ? -1 : 1)
        case (.object(let x), .object(let y)):
            for (l, r) in zip(x, y) {
                let k = compareStrings(l.0, r.0)
                if k != 0 { return k }
                let v = compare(l.1, r.1)
                if v != 0 { return v }
            }
            return x.count == y.count ? 0 : (x.count < y.count ? -1 : 1)
        default: return 0
        }
    }

    /// Code-point order of two strings (how `_all_docs` orders document ids; the same as UTF-8
    /// byte order, which is what Erlang's binary comparison gives).
    public static func compareRaw(_ a: String, _ b: String) -> Int {
        var ia = a.unicodeScalars.makeIterator()
        var ib = b.unicodeScalars.makeIterator()
        while true {
            switch (ia.next(), ib.next()) {
            case (nil, nil): return 0
            case (nil, _): return -1
            case (_, nil): return 1
            case (let x?, let y?) where x != y: return x.value < y.value ? -1 : 1
            default: continue
            }
        }
    }

    /// CouchDB's string collation: the Unicode Collation Algorithm with the CLDR root order, as ICU's
    /// root collator applies it (tertiary strength, punctuation not ignorable).
    ///
    /// Strings compare first by base characters (primary level: white space < punctuation <
    /// symbols < currency < digits < letters, letters ignoring case and accents, so `é` sits with
    /// `e`), then by accents (secondary), then by case and variants (tertiary, lowercase first).
    /// Control characters are ignored. This reproduces ICU for Latin text, digits and ASCII
    /// punctuation; other scripts order by code point after Latin, unassigned and private-use code
    /// points after them. U+FFFF weighs more and U+FFFE less than any other character, as in ICU.
    public static func compareStrings(_ a: String, _ b: String) -> Int {
        if a == b { return 0 }
        let ka = SortKey(a)
        let kb = SortKey(b)
        if let c = compareLevel(ka.primary, kb.primary) { return c }
        if let c = compareLevel(ka.secondary, kb.secondary) { return c }
        if let c = compareLevel(ka.tertiary, kb.tertiary) { return c }
        return 0
    }

    private static func compareLevel(_ x: [UInt32], _ y: [UInt32]) -> Int? {
        for (l, r) in zip(x, y) where l != r { return l < r ? -1 : 1 }
        if x.count != y.count { return x.count < y.count ? -1 : 1 }
        return nil
    }

    private static func compareIntDouble(_ x: Int64, _ y: Double) -> Int {
        if y.isNaN { return -1 }
        let dx = Double(x)
        if dx < y { return -1 }
        if dx > y { return 1 }
        // Equal as doubles: decide exactly when y is integral and in range.
        if y >= -9.2e18 && y <= 9.2e18 {
            let iy = Int64(y)
            return x == iy ? 0 : (x < iy ? -1 : 1)
        }
        return 0
    }

    private static func rank(_ v: JSON) -> Int {
        switch v {
        case .null: return 0
        case .bool(false): return 1
        case .bool(true): return 2
        case .int, .double: return 3
        case .string: return 4
        case .array: return 5
        case .object: return 6
        }
    }
}

// MARK: - UCA sort keys

/// The three collation levels of one string.
private struct SortKey {
    var primary: [UInt32] = []
    var secondary: [UInt32] = []
    var tertiary: [UInt32] = []

    // Primary weight groups (the high byte of a primary weight).
    static let whitespace: UInt32 = 1 << 24
    static let punctuation: UInt32 = 2 << 24
    static let otherPunctuation: UInt32 = 3 << 24
    static let symbols: UInt32 = 4 << 24
    static let otherSymbols: UInt32 = 5 << 24
    static let currency: UInt32 = 6 << 24
    static let digits: UInt32 = 7 << 24
    static let latin: UInt32 = 8 << 24
    static let otherLetters: UInt32 = 9 << 24
    static let implicit: UInt32 = 10 << 24
    /// The primaries of U+FFFE and U+FFFF, below and above every other one.
    static let lowest: UInt32 = 1
    static let highest: UInt32 = .max

    /// CLDR root order of ASCII punctuation, then of ASCII symbols.
    static let asciiPunctuation = Array("_-,;:!?.'\"()[]{}@*/\\&#%".unicodeScalars)
    static let asciiSymbols = Array("`^+<=>|~".unicodeScalars)

    /// Secondary weight of a base character; accents weigh more.
    static let commonSecondary: UInt32 = 1
    /// Tertiary weights.
    static let lower: UInt32 = 1
    static let variant: UInt32 = 2
    static let upper: UInt32 = 3

    init(_ s: String) {
        primary.reserveCapacity(s.utf8.count)
        for scalar in s.unicodeScalars {
            if scalar.isASCII {
                appendASCII(scalar)
            } else {
                appendOther(scalar)
            }
        }
    }

    mutating func append(_ p: UInt32, _ s: UInt32, _ t: UInt32) {
        if p != 0 { primary.append(p) }
        if s != 0 { secondary.append(s) }
        if t != 0 { tertiary.append(t) }
    }

    mutating func appendASCII(_ scalar: Unicode.Scalar) {
        let v = scalar.value
        switch v {
        case 0x09...0x0D: append(Self.whitespace + v - 0x09 + 1, Self.commonSecondary, Self.lower)
        case 0x20: append(Self.whitespace + 0x10, Self.commonSecondary, Self.lower)
        case 0x30...0x39: append(Self.digits + (v - 0x30) << 8, Self.commonSecondary, Self.lower)
        case 0x61...0x7A: append(Self.latin + (v - 0x61) << 8, Self.commonSecondary, Self.lower)
        case 0x41...0x5A: append(Self.latin + (v - 0x41) << 8, Self.commonSecondary, Self.upper)
        case 0x24: append(Self.currency, Self.commonSecondary, Self.lower)
        case 0x21...0x7E:
            if let i = Self.asciiPunctuation.firstIndex(of: scalar) {
                append(Self.punctuation + UInt32(i) << 8, Self.commonSecondary, Self.lower)
            } else if let i = Self.asciiSymbols.firstIndex(of: scalar) {
                append(Self.symbols + UInt32(i) << 8, Self.commonSecondary, Self.lower)
            }
        default: break  // other control characters are completely ignorable
        }
    }

    mutating func appendOther(_ scalar: Unicode.Scalar) {
        let props = scalar.properties
        switch props.generalCategory {
        case .unassigned where scalar.value == 0xFFFF:
            // CLDR root gives U+FFFF the highest primary weight, so `"ba\u{FFFF}"` ends the range of
            // every key that starts with "ba" (the usual prefix query), as ICU does for CouchDB.
            append(Self.highest, Self.commonSecondary, Self.lower)
            return
        case .unassigned where scalar.value == 0xFFFE:
            // ... and U+FFFE the lowest, below white space.
            append(Self.lowest, Self.commonSecondary, Self.lower)
            return
        case .unassigned, .privateUse:
            // Implicit weights: after every assigned character, in code point order (UCA 10.1.3).
            append(Self.implicit + scalar.value, Self.commonSecondary, Self.lower)
            return
        case .control, .format, .surrogate:
            return
        case .nonspacingMark, .spacingMark, .enclosingMark:
            append(0, 2 + (scalar.value & 0xFFFF), 0)
            return
        case .spaceSeparator, .lineSeparator, .paragraphSeparator:
            append(Self.whitespace + 0x10, Self.commonSecondary, Self.variant)
            return
        default: break
        }
        // Special Latin letters that are their own primary in CLDR root, right after a base letter.
        if let (base, upper) = Self.latinExtras[scalar.value] {
            append(Self.latin + (base << 8) + 0x80, Self.commonSecondary, upper ? Self.upper : Self.lower)
            return
        }
        if scalar.value == 0xDF {  // ß expands to ss
            append(Self.latin + (18 << 8), Self.commonSecondary, Self.variant)
            append(Self.latin + (18 << 8), Self.commonSecondary, Self.variant)
            return
        }
        // Decompose (compatibility) and weigh the parts: base letters plus accents.
        let decomposed = String(scalar).decomposedStringWithCompatibilityMapping.unicodeScalars
        if decomposed.count > 1 || decomposed.first != scalar {
            let isCompat =
                String(scalar).decomposedStringWithCanonicalMapping
                != String(String.UnicodeScalarView(decomposed))
            for part in decomposed {
                if part.isASCII {
                    let before = tertiary.count
                    appendASCII(part)
                    if isCompat, tertiary.count > before {
                        tertiary[tertiary.count - 1] += Self.variant * 2
                    }
                } else if part != scalar {
                    appendOther(part)
                } else {
                    appendPlain(part, props)
                }
            }
            return
        }
        appendPlain(scalar, props)
    }

    mutating func appendPlain(_ scalar: Unicode.Scalar, _ props: Unicode.Scalar.Properties) {
        let cp = scalar.value
        let caseWeight: UInt32 = props.isUppercase ? Self.upper : Self.lower
        switch props.generalCategory {
        case .decimalNumber:
            if let n = props.numericValue, n >= 0, n < 10 {
                append(Self.digits + UInt32(n) << 8, Self.commonSecondary, Self.variant)
                return
            }
            append(Self.digits + 0x10000 + cp, Self.commonSecondary, Self.lower)
        case .otherNumber, .letterNumber:
            append(Self.digits + 0x10000 + cp, Self.commonSecondary, Self.lower)
        case .connectorPunctuation, .dashPunctuation, .openPunctuation, .closePunctuation,
            .initialPunctuation, .finalPunctuation, .otherPunctuation:
            append(Self.otherPunctuation + cp, Self.commonSecondary, Self.lower)
        case .currencySymbol:
            append(Self.currency + cp, Self.commonSecondary, Self.lower)
        case .mathSymbol, .modifierSymbol, .otherSymbol:
            append(Self.otherSymbols + cp, Self.commonSecondary, Self.lower)
        default:
            // Letters of other scripts: group case pairs on the lowercase form.
            var key = cp
            if props.isUppercase, let lower = props.lowercaseMapping.unicodeScalars.first,
                props.lowercaseMapping.unicodeScalars.count == 1
            {
                key = lower.value
            }
            append(Self.otherLetters + key, Self.commonSecondary, caseWeight)
        }
    }

    /// Latin letters with no decomposition that CLDR root sorts as their own letter after a base
    /// letter (value: index of the base letter a=0…z=25, and whether it is uppercase).
    static let latinExtras: [UInt32: (UInt32, Bool)] = [
        0xE6: (0, false), 0xC6: (0, true),  // æ Æ
        0xF0: (3, false), 0xD0: (3, true),  // ð Ð
        0x111: (3, false), 0x110: (3, true),  // đ Đ
        0x127: (7, false), 0x126: (7, true),  // ħ Ħ
        0x131: (8, false),  // ı
        0x142: (11, false), 0x141: (11, true),  // ł Ł
        0xF8: (14, false), 0xD8: (14, true),  // ø Ø
        0x153: (14, false), 0x152: (14, true),  // œ Œ
        0xFE: (25, false), 0xDE: (25, true),  // þ Þ
    ]
}
