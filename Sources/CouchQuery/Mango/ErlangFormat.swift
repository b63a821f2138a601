/// Formatting of JSON values the way CouchDB's Erlang code prints them inside error reasons.
enum ErlangFormat {
    /// `io_lib:format("~w", [Value])` of a JSON value decoded by CouchDB: strings as byte lists
    /// (`<<40>>`), arrays as lists, objects as `{[{K,V}]}`, `null`/`true`/`false` as atoms.
    static func w(_ value: JSON) -> String {
        var out = ""
        write(value, to: &out, pretty: false)
        return out
    }

    /// `io_lib:format("~p", [Value])`: like `~w` but printable strings appear as `<<"text">>`.
    static func p(_ value: JSON) -> String {
        var out = ""
        write(value, to: &out, pretty: true)
        return out
    }

    private static func write(_ value: JSON, to out: inout String, pretty: Bool) {
        switch value {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .int(let i): out += String(i)
        case .double(let d): out += erlangFloat(d)
        case .string(let s): out += binary(s, pretty: pretty)
        case .array(let items):
            out += "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += "," }
                write(item, to: &out, pretty: pretty)
            }
            out += "]"
        case .object(let pairs):
            out += "{["
            for (i, (k, v)) in pairs.enumerated() {
                if i > 0 { out += "," }
                out += "{" + binary(k, pretty: pretty) + ","
                write(v, to: &out, pretty: pretty)
                out += "}"
            }
            out += "]}"
        }
    }

    static func binary(_ s: String, pretty: Bool) -> String {
        let bytes = Array(s.utf8)
        if pretty, bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) {
            var text = "<<\""
            for b in bytes {
                if b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") { text += "\\" }
                text.unicodeScalars.append(Unicode.Scalar(b))
            }
            return text + "\">>"
        }
        return "<<" + bytes.map { String($0) }.joined(separator: ",") + ">>"
    }

    /// Erlang's shortest round-trip float format (`1.5`, `100.0`, `1.0e21`, `1.0e-7`).
    static func erlangFloat(_ d: Double) -> String {
        JSON.format(d)
    }
}
