import CouchStore
import Foundation
import SwiftCouch

/// The replication id: the name of the `_local` checkpoint documents on both sides.
///
/// The MD5 (hex) of a version prefix and the canonical JSON of what decides which revisions are
/// copied: the source's and the target's ``SyncEndpoint/identity`` (no credentials), the
/// filter's ``ReplicationFilter`` identity and `winning_revs_only`. Continuous mode, batch sizes,
/// workers, timeouts and the direction do not enter it: a one-shot and a continuous replication of
/// the same databases share their checkpoints.
public enum ReplicationID {
    /// The version of the id's recipe, hashed first and written as `replication_id_version` in the
    /// checkpoints. A new recipe gets a new version, so old checkpoints are never misread.
    public static let version = 1

    /// The replication id of `source` → `target` with `options`.
    public static func make(source: SyncEndpoint, target: SyncEndpoint, options: ReplicationOptions)
        -> String
    {
        var parts: [String: JSONValue] = [
            "source": .string(source.identity),
            "target": .string(target.identity),
        ]
        if let filter = options.filter { parts["filter"] = .string(filter.identity) }
        if options.winningRevisionsOnly { parts["winning_revs_only"] = .bool(true) }
        let text = "swiftcouch-replication-v\(version)\n" + canonical(.object(parts))
        return Crypto.md5(Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// JSON text with object keys sorted, no whitespace: the same value always gives the same text.
    static func canonical(_ value: JSONValue) -> String {
        switch value {
        case .null: return "null"
        case .bool(let flag): return flag ? "true" : "false"
        case .int(let number): return String(number)
        case .double(let number): return String(number)
        case .string(let text): return quoted(text)
        case .array(let items): return "[" + items.map(canonical).joined(separator: ",") + "]"
        case .object(let members):
            return "{"
                + members.sorted { $0.key < $1.key }.map { quoted($0.key) + ":" + canonical($0.value) }
                .joined(separator: ",") + "}"
        }
    }

    private static func quoted(_ text: String) -> String {
        let data = (try? JSONEncoder().encode(text)) ?? Data("\"\"".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}
