import CouchQuery
import Foundation

/// CouchDB's revision ids: the MD5 of Erlang's external term format (`term_to_binary`, minor
/// version 1) of `[Deleted, ParentPos, ParentRevId, Body, Attachments]`, so the TestServer gives
/// the same revision as CouchDB 3.5 for the same write (clients and tests compare them).
///
/// - `Deleted`: the atom `true` or `false`.
/// - `ParentPos`, `ParentRevId`: the parent revision's generation and its hash as 16 raw bytes
///   (a hash that is not 32 hex digits is kept as its text); `0` and `0` for a first revision.
/// - `Body`: the document without its `_` members, as CouchDB holds JSON: an object is a 1-tuple
///   of a list of `{Key, Value}` 2-tuples (keys in written order), strings are binaries, integers
///   integers, other numbers floats, `true`/`false`/`null` atoms, arrays lists.
/// - `Attachments`: `{Name, ContentType, MD5}` 3-tuples of binaries, in the reverse of the order
///   the document lists them.
enum RevisionID {
    static func hash(deleted: Bool, parent: String?, body: JSON, atts: [Attachment]) -> String {
        var term = ErlangTerm()
        term.bytes.append(131)
        term.listHeader(5)
        term.atom(deleted ? "true" : "false")
        if let parent, let parsed = parseRev(parent) {
            term.integer(Int64(parsed.pos))
            term.binary(Crypto.fromHex(parsed.hash).flatMap { $0.count == 16 ? $0 : nil } ?? Data(parsed.hash.utf8))
        } else {
            term.integer(0)
            term.integer(0)
        }
        term.json(body)
        let digested = atts.reversed().compactMap { att -> (String, String, Data)? in
            guard att.digest.hasPrefix("md5-"), let md5 = Data(base64Encoded: String(att.digest.dropFirst(4))) else {
                return nil
            }
            return (att.name, att.contentType, md5)
        }
        term.listHeader(digested.count)
        for (name, type, md5) in digested {
            term.tupleHeader(3)
            term.binary(name)
            term.binary(type)
            term.binary(md5)
        }
        if !digested.isEmpty { term.bytes.append(106) }  // the attachment list's tail
        term.bytes.append(106)  // the outer list's tail
        return Crypto.hex(Crypto.md5(Data(term.bytes)))
    }
}

/// Erlang's external term format, the parts CouchDB's revision ids use.
struct ErlangTerm {
    /// The encoding so far (an array of bytes: appending to it costs less than to `Data`).
    var bytes: [UInt8] = []

    init() { bytes.reserveCapacity(512) }

    /// A list of `count` elements follows (then its tail, `NIL_EXT`, which the caller writes); an
    /// empty list is `NIL_EXT` alone.
    mutating func listHeader(_ count: Int) {
        if count == 0 {
            bytes.append(106)  // NIL_EXT
            return
        }
        bytes.append(108)  // LIST_EXT
        appendUInt32(UInt32(count))
    }

    mutating func tupleHeader(_ arity: Int) {
        bytes.append(104)  // SMALL_TUPLE_EXT
        bytes.append(UInt8(arity))
    }

    /// `ATOM_EXT`: a Latin-1 atom with a 2-byte length, as `minor_version` 1 writes them.
    mutating func atom(_ name: String) {
        bytes.append(100)
        let latin1 = Array(name.utf8)
        bytes.append(UInt8(latin1.count >> 8))
        bytes.append(UInt8(latin1.count & 0xff))
        bytes.append(contentsOf: latin1)
    }

    mutating func integer(_ value: Int64) {
        if value >= 0, value <= 255 {
            bytes.append(97)  // SMALL_INTEGER_EXT
            bytes.append(UInt8(value))
        } else if value >= Int64(Int32.min), value <= Int64(Int32.max) {
            bytes.append(98)  // INTEGER_EXT
            appendUInt32(UInt32(bitPattern: Int32(value)))
        } else {
            // SMALL_BIG_EXT: sign, then the magnitude's bytes, least significant first.
            var magnitude = value.magnitude
            var digits: [UInt8] = []
            while magnitude > 0 {
                digits.append(UInt8(magnitude & 0xff))
                magnitude >>= 8
            }
            bytes.append(110)
            bytes.append(UInt8(digits.count))
            bytes.append(value < 0 ? 1 : 0)
            bytes.append(contentsOf: digits)
        }
    }

    mutating func float(_ value: Double) {
        bytes.append(70)  // NEW_FLOAT_EXT: IEEE 754, big-endian
        let bits = value.bitPattern
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8((bits >> UInt64(shift)) & 0xff)) }
    }

    mutating func binary(_ data: Data) {
        bytes.append(109)  // BINARY_EXT
        appendUInt32(UInt32(data.count))
        bytes.append(contentsOf: data)
    }

    /// `BINARY_EXT` of a string's UTF-8 bytes.
    mutating func binary(_ text: String) {
        bytes.append(109)  // BINARY_EXT
        appendUInt32(UInt32(text.utf8.count))
        bytes.append(contentsOf: text.utf8)
    }

    /// A JSON value as CouchDB holds it (see ``RevisionID``).
    mutating func json(_ value: JSON) {
        switch value {
        case .null: atom("null")
        case .bool(let flag): atom(flag ? "true" : "false")
        case .int(let number): integer(number)
        case .double(let number): float(number)
        case .string(let text): binary(text)
        case .array(let items):
            listHeader(items.count)
            for item in items { json(item) }
            if !items.isEmpty { bytes.append(106) }
        case .object(let members):
            tupleHeader(1)
            listHeader(members.count)
            for (key, member) in members {
                tupleHeader(2)
                binary(key)
                json(member)
            }
            if !members.isEmpty { bytes.append(106) }
        }
    }

    private mutating func appendUInt32(_ value: UInt32) {
        bytes.append(UInt8(value >> 24))
        bytes.append(UInt8((value >> 16) & 0xff))
        bytes.append(UInt8((value >> 8) & 0xff))
        bytes.append(UInt8(value & 0xff))
    }
}
