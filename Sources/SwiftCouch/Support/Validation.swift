import Foundation

/// The input rules CouchDB applies, checked on the client before anything is sent.
public enum CouchValidation {
    /// System databases whose names start with `_`.
    public static let systemDatabases: Set<String> = ["_users", "_replicator", "_global_changes"]

    /// Checks a database name against CouchDB's rule: starts with a lowercase letter, then only
    /// `a–z 0–9 _ $ ( ) + - /`, at most 238 characters; or one of the system databases.
    public static func validateDatabaseName(_ name: String) throws(CouchError) {
        // Checked for every request: the system names (which start with `_`) are looked up only for
        // a name that could be one, and the bytes are read as UTF-8, not decoded into scalars.
        if name.utf8.first == UInt8(ascii: "_"), systemDatabases.contains(name) { return }
        guard !name.isEmpty else { throw CouchError.validation("Database name must not be empty.") }
        guard name.utf8.count <= 238 else {
            throw CouchError.validation("Database name '\(name.prefix(40))…' is longer than 238 characters.")
        }
        guard let first = name.utf8.first, (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(first) else {
            throw CouchError.validation(
                "Database name '\(name)' must start with a lowercase letter (a-z).")
        }
        let allowed = databaseNameBytes  // once, not a lazy global's check per byte
        if name.utf8.contains(where: { $0 > 127 || !allowed[Int($0)] }),
            let bad = name.unicodeScalars.first(where: { $0.value > 127 || !allowed[Int($0.value)] })
        {
            throw CouchError.validation(
                "Database name '\(name)' contains '\(bad)'; only a-z, 0-9 and _ $ ( ) + - / are allowed.")
        }
    }

    /// Checks a document id: not empty, and when it starts with `_` it must be a `_design/` or
    /// `_local/` id with a non-empty name.
    /// Ids (or `_design/`/`_local/` names) that are `.` or `..` are refused: as a path segment they
    /// would be resolved by URL normalisation and proxies into another resource.
    /// Checks a quorum (`w`, `r`): nil, or at least 1.
    public static func validateQuorum(_ value: Int?, name: String) throws(CouchError) {
        if let value, value < 1 { throw CouchError.validation("\(name) must be at least 1, not \(value).") }
    }

    public static func validateDocumentID(_ id: String) throws(CouchError) {
        guard !id.isEmpty else { throw CouchError.validation("Document id must not be empty.") }
        try validatePathSegment(id, what: "Document id")
        guard id.hasPrefix("_") else { return }
        for prefix in ["_design/", "_local/"] where id.hasPrefix(prefix) {
            guard id.count > prefix.count else {
                throw CouchError.validation("Document id '\(id)' needs a name after '\(prefix)'.")
            }
            try validatePathSegment(String(id.dropFirst(prefix.count)), what: "Document id")
            return
        }
        throw CouchError.validation(
            "Document id '\(id)' starts with '_'; only '_design/' and '_local/' ids may (CouchDB reserves the rest).")
    }

    /// Checks a revision: `N-hex` as CouchDB writes them (`_local` documents use `0-N`); the hash
    /// is visible ASCII without spaces (a revision travels in `If-Match` headers and query strings).
    public static func validateRevision(_ rev: String) throws(CouchError) {
        let parts = rev.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let generation = Int(parts[0]), generation >= 0, !parts[1].isEmpty,
            parts[1].unicodeScalars.allSatisfy({ (0x21...0x7E).contains($0.value) })
        else {
            throw CouchError.validation(
                "Revision '\(rev.debugDescription.dropFirst().dropLast())' is not of the form N-hash.")
        }
    }

    /// Refuses a path segment of `.` or `..`: URL normalisation, proxies and servers resolve such a
    /// segment (`/db/..` is `/`), so the request would reach another resource than the one named.
    public static func validatePathSegment(_ segment: String, what: String) throws(CouchError) {
        if segment == "." || segment == ".." {
            throw CouchError.validation(
                "\(what) '\(segment)' is refused: as a path segment it would be resolved to another resource.")
        }
    }

    /// Refuses a header whose name is not an HTTP token, or whose value holds CR, LF or NUL (which
    /// would end the header early and let the rest be read as another header or request).
    public static func validateHeader(name: String, value: String) throws(CouchError) {
        let token = tokenBytes
        guard !name.isEmpty, name.utf8.allSatisfy({ $0 < 128 && token[Int($0)] }) else {
            throw CouchError.validation(
                "Header name '\(name.debugDescription.dropFirst().dropLast())' is not an HTTP token.")
        }
        if value.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0x00 }) {
            throw CouchError.validation(
                "The value of header '\(name)' contains CR, LF or NUL; it is refused (header injection).")
        }
    }
}

extension CouchValidation {
    /// The ASCII bytes allowed in a database name after its first letter, as a table (checked for
    /// every request: no set is built per call).
    fileprivate static let databaseNameBytes = asciiTable("abcdefghijklmnopqrstuvwxyz0123456789_$()+-/")
    /// The bytes of an HTTP token (a header name).
    fileprivate static let tokenBytes = asciiTable(
        "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

    private static func asciiTable(_ allowed: String) -> [Bool] {
        var table = [Bool](repeating: false, count: 128)
        for byte in allowed.utf8 { table[Int(byte)] = true }
        return table
    }
}

// Checks shared by many operations' `validate()` (options, partitions, design documents).
extension CouchValidation {
    /// `value`, when set, must be zero or more.
    static func nonNegative(_ value: Int?, _ name: String) throws(CouchError) {
        if let value, value < 0 { throw CouchError.validation("\(name) must not be negative (got \(value)).") }
    }

    /// `value`, when set, must be one or more.
    static func positive(_ value: Int?, _ name: String) throws(CouchError) {
        if let value, value < 1 { throw CouchError.validation("\(name) must be at least 1 (got \(value)).") }
    }

    /// `value` must not be empty.
    static func notEmpty(_ value: String, _ name: String) throws(CouchError) {
        if value.isEmpty { throw CouchError.validation("\(name) must not be empty.") }
    }

    /// `values`, when set, must not be empty.
    static func notEmpty<C: Collection>(_ values: C?, _ name: String) throws(CouchError) {
        if let values, values.isEmpty { throw CouchError.validation("\(name) must not be empty.") }
    }

    /// Every revision in a `{docid: [rev]}` map must be valid, and the map must not be empty.
    static func revisionMap(_ map: [String: [String]], _ name: String) throws(CouchError) {
        guard !map.isEmpty else { throw CouchError.validation("\(name) must name at least one document.") }
        for (id, revisions) in map.sorted(by: { $0.key < $1.key }) {
            guard !id.isEmpty else { throw CouchError.validation("\(name) has an empty document id.") }
            guard !revisions.isEmpty else {
                throw CouchError.validation("\(name) lists no revisions for document '\(id)'.")
            }
            for revision in revisions { try CouchValidation.validateRevision(revision) }
        }
    }

    /// Checks a partition name: not empty, no `:` and no leading `_`.
    static func partition(_ value: String?) throws(CouchError) {
        guard let value else { return }
        guard !value.isEmpty else { throw CouchError.validation("Partition name must not be empty.") }
        if value.hasPrefix("_") {
            throw CouchError.validation("Partition name '\(value)' must not start with '_'.")
        }
        if value.contains(":") { throw CouchError.validation("Partition name '\(value)' must not contain ':'.") }
    }

    /// The name of a design document without its `_design/` prefix (either form is accepted).
    static func designName(_ value: String) -> String {
        value.hasPrefix("_design/") ? String(value.dropFirst("_design/".count)) : value
    }

    /// Checks a design document name given with or without `_design/`.
    static func design(_ value: String) throws(CouchError) {
        try CouchValidation.notEmpty(designName(value), "Design document name")
    }
}
