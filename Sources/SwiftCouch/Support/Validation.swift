import Foundation

/// The input rules CouchDB applies, checked on the client before anything is sent.
public enum CouchValidation {
    /// System databases whose names start with `_`.
    public static let systemDatabases: Set<String> = ["_users", "_replicator", "_global_changes"]

    /// Checks a database name against CouchDB's rule: starts with a lowercase letter, then only
    /// `a–z 0–9 _ $ ( ) + - /`, at most 238 characters; or one of the system databases.
    public static func validateDatabaseName(_ name: String) throws(CouchError) {
        if systemDatabases.contains(name) { return }
        guard !name.isEmpty else { throw CouchError.validation("Database name must not be empty.") }
        guard name.utf8.count <= 238 else {
            throw CouchError.validation("Database name '\(name.prefix(40))…' is longer than 238 characters.")
        }
        let bytes = Array(name.utf8)
        guard (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(bytes[0]) else {
            throw CouchError.validation(
                "Database name '\(name)' must start with a lowercase letter (a-z).")
        }
        let allowed = Set("abcdefghijklmnopqrstuvwxyz0123456789_$()+-/".utf8)
        if let bad = name.unicodeScalars.first(where: { $0.value > 127 || !allowed.contains(UInt8($0.value)) }) {
            throw CouchError.validation(
                "Database name '\(name)' contains '\(bad)'; only a-z, 0-9 and _ $ ( ) + - / are allowed.")
        }
    }

    /// Checks a document id: not empty, and when it starts with `_` it must be a `_design/` or
    /// `_local/` id with a non-empty name.
    public static func validateDocumentID(_ id: String) throws(CouchError) {
        guard !id.isEmpty else { throw CouchError.validation("Document id must not be empty.") }
        guard id.hasPrefix("_") else { return }
        for prefix in ["_design/", "_local/"] where id.hasPrefix(prefix) {
            guard id.count > prefix.count else {
                throw CouchError.validation("Document id '\(id)' needs a name after '\(prefix)'.")
            }
            return
        }
        throw CouchError.validation(
            "Document id '\(id)' starts with '_'; only '_design/' and '_local/' ids may (CouchDB reserves the rest).")
    }

    /// Checks a revision: `N-hex` as CouchDB writes them (`_local` documents use `0-N`).
    public static func validateRevision(_ rev: String) throws(CouchError) {
        let parts = rev.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let generation = Int(parts[0]), generation >= 0, !parts[1].isEmpty else {
            throw CouchError.validation("Revision '\(rev)' is not of the form N-hash.")
        }
    }
}
