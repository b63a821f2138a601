/// CouchDB's ordering of JSON values (view keys, `_all_docs` keys, Mango sort).
///
/// Types order as `null < false < true < numbers < strings < arrays < objects`; numbers by value;
/// arrays element by element; objects key by key, then value. Strings use CouchDB's ICU-based
/// collation (see `compareStrings`); `compareRaw` is the code-point order `_all_docs` ids use.
public enum Collation {
    /// Returns a negative number, zero or a positive number as `a` sorts before, with or after `b`.
    public static func compare(_ a: JSON, _ b: JSON) -> Int {
        let ra = rank(a)
        let rb = rank(b)
        if ra != rb { return ra < rb ? -1 : 1 }
        switch (a, b) {
        case (.int(let x), .int(let y)): return x == y ? 0 : (x < y ? -1 : 1)
        case _ where ra == 3:
            let x = a.doubleValue ?? 0
            let y = b.doubleValue ?? 0
            return x == y ? 0 : (x < y ? -1 : 1)
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

    /// Code-point order of two strings (how `_all_docs` orders document ids).
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

    /// CouchDB's string collation (ICU root locale, approximated): letters compare ignoring case
    /// first, then lowercase sorts before uppercase.
    public static func compareStrings(_ a: String, _ b: String) -> Int {
        let primary = compareRaw(a.lowercased(), b.lowercased())
        if primary != 0 { return primary }
        return -compareRaw(a, b)
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
