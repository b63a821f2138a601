import Foundation

/// Mango bookmarks, encoded as CouchDB encodes them: base64url (no padding) of the Erlang external
/// term `[{startkey_docid, Id}, {startkey, Key}]` (uncompressed).
enum MangoBookmark {
    struct Position: Sendable, Equatable {
        var docID: String
        var key: JSON
    }

    static func encode(_ position: Position) -> String {
        var out: [UInt8] = [131, 108, 0, 0, 0, 2]
        out += [104, 2]
        atom("startkey_docid", &out)
        term(.string(position.docID), &out)
        out += [104, 2]
        atom("startkey", &out)
        term(position.key, &out)
        out.append(106)
        return Data(out).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Decodes a bookmark; throws CouchDB's `invalid_bookmark` error when it is not one of ours.
    static func decode(_ text: String) throws(MangoError) -> Position {
        var b64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while b64.count % 4 != 0 { b64 += "=" }
        guard let data = Data(base64Encoded: b64) else { throw MangoErrors.invalidBookmark(.string(text)) }
        var reader = Reader(bytes: Array(data))
        guard reader.byte() == 131, let value = reader.term(), reader.atEnd,
            case .list(let items) = value
        else { throw MangoErrors.invalidBookmark(.string(text)) }
        var docID: String?
        var key: JSON?
        for item in items {
            guard case .tuple(let t) = item, t.count == 2, case .atom(let name) = t[0] else { continue }
            if name == "startkey_docid", let j = t[1].json, case .string(let s) = j { docID = s }
            if name == "startkey" { key = t[1].json }
        }
        guard let docID, let key else { throw MangoErrors.invalidBookmark(.string(text)) }
        return Position(docID: docID, key: key)
    }

    private static func atom(_ name: String, _ out: inout [UInt8]) {
        let bytes = Array(name.utf8)
        out += [100, UInt8(bytes.count >> 8), UInt8(bytes.count & 0xFF)] + bytes
    }

    private static func be32(_ v: UInt32, _ out: inout [UInt8]) {
        out += [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)]
    }

    private static func term(_ value: JSON, _ out: inout [UInt8]) {
        switch value {
        case .null: atom("null", &out)
        case .bool(let b): atom(b ? "true" : "false", &out)
        case .int(let i):
            if i >= 0 && i <= 255 {
                out += [97, UInt8(i)]
            } else if i >= Int64(Int32.min) && i <= Int64(Int32.max) {
                out.append(98)
                be32(UInt32(bitPattern: Int32(i)), &out)
            } else {
                var magnitude = i.magnitude
                var digits: [UInt8] = []
                while magnitude > 0 {
                    digits.append(UInt8(magnitude & 0xFF))
                    magnitude >>= 8
                }
                out += [110, UInt8(digits.count), i < 0 ? 1 : 0] + digits
            }
        case .double(let d):
            out.append(70)
            let bits = d.bitPattern
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8((bits >> UInt64(shift)) & 0xFF)) }
        case .string(let s):
            let bytes = Array(s.utf8)
            out.append(109)
            be32(UInt32(bytes.count), &out)
            out += bytes
        case .array(let items):
            if items.isEmpty {
                out.append(106)
            } else if items.count < 65536,
                items.allSatisfy({
                    if case .int(let i) = $0 { return i >= 0 && i <= 255 }
                    return false
                })
            {
                out += [107, UInt8(items.count >> 8), UInt8(items.count & 0xFF)]
                for case .int(let i) in items { out.append(UInt8(i)) }
            } else {
                out.append(108)
                be32(UInt32(items.count), &out)
                for item in items { term(item, &out) }
                out.append(106)
            }
        case .object(let pairs):
            out += [104, 1]
            if pairs.isEmpty {
                out.append(106)
            } else {
                out.append(108)
                be32(UInt32(pairs.count), &out)
                for (k, v) in pairs {
                    out += [104, 2]
                    term(.string(k), &out)
                    term(v, &out)
                }
                out.append(106)
            }
        }
    }

    /// The subset of Erlang terms a bookmark holds.
    private indirect enum Term {
        case atom(String)
        case int(Int64)
        case float(Double)
        case binary(String)
        case list([Term])
        case tuple([Term])

        var json: JSON? {
            switch self {
            case .atom("null"): return .null
            case .atom("true"): return .bool(true)
            case .atom("false"): return .bool(false)
            case .atom: return nil
            case .int(let i): return .int(i)
            case .float(let d): return .double(d)
            case .binary(let s): return .string(s)
            case .list(let items):
                var out: [JSON] = []
                for item in items {
                    guard let j = item.json else { return nil }
                    out.append(j)
                }
                return .array(out)
            case .tuple(let items):
                guard items.count == 1, case .list(let props) = items[0] else { return nil }
                var pairs: [(String, JSON)] = []
                for p in props {
                    guard case .tuple(let kv) = p, kv.count == 2, case .binary(let k) = kv[0], let v = kv[1].json
                    else { return nil }
                    pairs.append((k, v))
                }
                return .object(pairs)
            }
        }
    }

    private struct Reader {
        let bytes: [UInt8]
        var index = 0
        var depth = 0
        var atEnd: Bool { index == bytes.count }

        mutating func byte() -> UInt8? {
            guard index < bytes.count else { return nil }
            defer { index += 1 }
            return bytes[index]
        }

        mutating func take(_ n: Int) -> [UInt8]? {
            guard n >= 0, index + n <= bytes.count else { return nil }
            defer { index += n }
            return Array(bytes[index..<index + n])
        }

        mutating func uint(_ n: Int) -> UInt64? {
            guard let b = take(n) else { return nil }
            return b.reduce(0) { $0 << 8 | UInt64($1) }
        }

        mutating func term() -> Term? {
            depth += 1
            defer { depth -= 1 }
            guard depth < 100, let tag = byte() else { return nil }
            switch tag {
            case 97: return byte().map { .int(Int64($0)) }
            case 98: return uint(4).map { .int(Int64(Int32(bitPattern: UInt32($0)))) }
            case 110:
                guard let n = byte(), n <= 8, let sign = byte(), let digits = take(Int(n)) else { return nil }
                let magnitude = digits.reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                guard magnitude <= UInt64(Int64.max) else { return nil }
                return .int(sign == 0 ? Int64(magnitude) : -Int64(magnitude))
            case 70: return uint(8).map { .float(Double(bitPattern: $0)) }
            case 100, 118:
                guard let n = uint(2), let b = take(Int(n)) else { return nil }
                return .atom(String(decoding: b, as: UTF8.self))
            case 115, 119:
                guard let n = byte(), let b = take(Int(n)) else { return nil }
                return .atom(String(decoding: b, as: UTF8.self))
            case 109:
                guard let n = uint(4), let b = take(Int(n)), let s = String(validating: b, as: UTF8.self) else {
                    return nil
                }
                return .binary(s)
            case 106: return .list([])
            case 107:
                guard let n = uint(2), let b = take(Int(n)) else { return nil }
                return .list(b.map { .int(Int64($0)) })
            case 108:
                guard let n = uint(4), n < 1_000_000 else { return nil }
                var items: [Term] = []
                for _ in 0..<n {
                    guard let t = term() else { return nil }
                    items.append(t)
                }
                guard byte() == 106 else { return nil }
                return .list(items)
            case 104, 105:
                guard let n = tag == 104 ? byte().map(UInt64.init) : uint(4), n < 1_000_000 else { return nil }
                var items: [Term] = []
                for _ in 0..<n {
                    guard let t = term() else { return nil }
                    items.append(t)
                }
                return .tuple(items)
            default: return nil
            }
        }
    }
}
