import CouchQuery
import Foundation

/// A database's documents by id.
///
/// A database kept in memory holds every revision tree here. A database with a file holds only a
/// small entry per document (where its latest document record is, its sequence, and what the
/// counts and the conflict index need), and reads a tree from the file when asked, keeping the
/// most recently read ones in a bounded cache: memory grows with the number of documents, not
/// with their bodies, attachments or history.
///
/// Not thread-safe: used under the owning database's lock.
final class DocumentTable {
    /// What is kept in memory of a document whose tree is in the file.
    struct Entry {
        /// The document record holding the whole tree.
        var offset: Int64
        var seq: Int
        var flags: UInt8

        static let hasWinner: UInt8 = 1
        static let deleted: UInt8 = 2
        static let conflicted: UInt8 = 4
    }

    /// The file trees are read from; nil keeps every tree in `trees`.
    private(set) var file: StoreFile?
    private var trees: [String: DocEntry] = [:]
    private var entries: [String: Entry] = [:]
    private var cache: [String: DocEntry] = [:]
    static let cacheLimit = 2_000

    init(file: StoreFile?) { self.file = file }

    /// A copy with its own state (a lagging replica, a compaction's snapshot).
    func copy() -> DocumentTable {
        let other = DocumentTable(file: file)
        other.trees = trees
        other.entries = entries
        return other
    }

    /// A copy holding every tree in memory (a lagging replica, which has no file).
    func materialized() -> DocumentTable {
        let other = DocumentTable(file: nil)
        other.trees = trees
        for id in entries.keys { other.trees[id] = self[id] }
        return other
    }

    var count: Int { trees.count + entries.count }

    var ids: [String] { Array(trees.keys) + Array(entries.keys) }

    /// The flags and sequence of a document without reading its tree (nil when there is none).
    func summary(_ id: String) -> Entry? {
        if let tree = trees[id] { return Entry(offset: -1, seq: tree.seq, flags: Self.flags(of: tree)) }
        return entries[id]
    }

    /// Whether document `id` exists and its winner is not deleted, without reading its tree.
    func isLive(_ id: String) -> Bool {
        guard let flags = summary(id)?.flags else { return false }
        return flags & Entry.hasWinner != 0 && flags & Entry.deleted == 0
    }

    static func flags(of tree: DocEntry) -> UInt8 {
        var flags: UInt8 = 0
        let leaves = tree.sortedLeaves
        if let winner = leaves.first {
            flags |= Entry.hasWinner
            if winner.deleted { flags |= Entry.deleted }
        }
        if leaves.lazy.filter({ !$0.deleted }).count > 1 { flags |= Entry.conflicted }
        return flags
    }

    /// The tree of document `id` (read from the file when it is there; a read failure is reported to
    /// the request, see ``RequestScope``, and reads as no document).
    subscript(id: String) -> DocEntry? {
        if let tree = trees[id] { return tree }
        if let cached = cache[id] { return cached }
        guard let entry = entries[id], let file else { return nil }
        do {
            let tree = try DocumentRecord.tree(id: id, in: file, at: entry.offset)
            if cache.count >= Self.cacheLimit { cache.removeAll(keepingCapacity: true) }
            cache[id] = tree
            return tree
        } catch {
            RequestScope.reportReadFailure(
                error as? StoreFileError ?? StoreFileError(description: "a document record does not parse: \(error)"))
            return nil
        }
    }

    /// Sets a document kept in memory (a database without a file; with one, the tree is kept in
    /// memory until the next compaction writes it).
    func set(_ tree: DocEntry) {
        trees[tree.id] = tree
        entries[tree.id] = nil
        cache[tree.id] = nil
    }

    /// Sets a document whose whole tree is the document record at `offset` of the file.
    func set(_ tree: DocEntry, at offset: Int64) {
        trees[tree.id] = nil
        entries[tree.id] = Entry(offset: offset, seq: tree.seq, flags: Self.flags(of: tree))
        if cache.count >= Self.cacheLimit { cache.removeAll(keepingCapacity: true) }
        cache[tree.id] = tree
    }

    /// Sets what is known of a document without its tree (opening a file).
    func set(id: String, entry: Entry) {
        trees[id] = nil
        entries[id] = entry
        cache[id] = nil
    }

    func remove(_ id: String) {
        trees[id] = nil
        entries[id] = nil
        cache[id] = nil
    }

    /// Gives a table without a file its file (the entries read from it are set as it is read).
    func attach(_ file: StoreFile) { self.file = file }

    /// Points the table at a new file (compaction), with the entries written there.
    func replace(file: StoreFile, entries newEntries: [String: Entry]) {
        self.file = file
        trees.removeAll()
        entries = newEntries
        cache.removeAll()
    }

    /// Every document's entry, when every tree is in the file (nil for a database in memory).
    var fileEntries: [String: Entry]? { file != nil && trees.isEmpty ? entries : nil }

    /// Every document, read one at a time.
    func forEach(_ body: (String, DocEntry) throws -> Void) rethrows {
        for id in ids {
            if let tree = self[id] { try body(id, tree) }
        }
    }
}
typealias DocTableEntry = DocumentTable.Entry
