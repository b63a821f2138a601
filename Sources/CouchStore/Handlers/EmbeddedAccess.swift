import Foundation

/// What an app's local database (SwiftCouchStore) reads from the engine directly, beside the
/// CouchDB API that `handle(_:)` answers.
extension CouchEngine {
    /// The ids of the documents of the database `name` that have conflicts (more than one live leaf),
    /// in `_all_docs` order, read from an index kept as revisions are written and purged (no scan);
    /// nil when there is no such database.
    package func conflictedDocumentIDs(inDatabase name: String) -> [String]? {
        guard let db = database(named: name) else { return nil }
        return db.withLock { db.conflictedIDs.sorted(by: idLess) }
    }
}
