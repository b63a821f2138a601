import Foundation
import SwiftCouch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A folder in the temporary directory for one revision's attachments while they are copied, which a
/// later replicator removes if the process that made it died before removing it itself.
///
/// Attachments can be large, and a process killed while copying a revision (a crash, `SIGKILL`, a power
/// cut) would otherwise leave its files in the temporary directory until the next reboot. So the folder
/// holds a lock file, `flock`ed for as long as the folder is in use; the kernel releases that lock when
/// the process ends, however it ends. The first folder a process makes sweeps its siblings: one whose
/// lock file is there and can be locked (its owner is gone) is removed once it is older than
/// `sweepAge`, so a folder another process is creating at that moment is never taken for abandoned.
/// A folder in use is never removed (its lock is held), nor one without the lock file (not ours).
///
/// `flock` locks belong to an open file, not to a process, so a sweep in the same process sees another
/// copy's folder as held too.
struct ScratchFolder {
    /// What every scratch folder's name starts with.
    static let prefix = "swiftcouchsync-"
    /// The lock file inside each folder.
    static let lockName = "swiftcouchsync-scratch.lock"
    /// How old an unlocked folder must be before a sweep removes it.
    static let sweepAge: TimeInterval = 60

    /// The folder.
    let url: URL
    private let lock: Int32

    /// Makes a folder in `parent` (the temporary directory by default) and locks it; the first call in
    /// a process with the default parent first removes the abandoned folders beside it.
    init(in parent: URL? = nil) throws(CouchError) {
        if parent == nil { _ = Self.sweptOnce }
        let parent = parent ?? FileManager.default.temporaryDirectory
        let url = parent.appendingPathComponent(Self.prefix + UUID().uuidString, isDirectory: true)
        do {
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        } catch {
            throw CouchError(
                kind: .transport, message: "Could not create a temporary directory for attachments: \(error)",
                underlying: error)
        }
        let lockPath = url.appendingPathComponent(Self.lockName).path
        let descriptor = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0, flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            if descriptor >= 0 { close(descriptor) }
            try? FileManager.default.removeItem(at: url)
            throw CouchError(
                kind: .transport,
                message: "Could not lock a temporary directory for attachments: \(String(cString: strerror(code)))")
        }
        self.url = url
        self.lock = descriptor
    }

    /// Removes the folder and its files, then releases the lock. Called once, when the copy is over.
    func remove() {
        try? FileManager.default.removeItem(at: url)
        close(lock)
    }

    /// The sweep of the default temporary directory, once per process.
    private static let sweptOnce: Int = removeAbandoned(in: FileManager.default.temporaryDirectory)

    /// Removes the scratch folders in `parent` that no process holds and that are at least `minimumAge`
    /// seconds old; returns how many it removed. Never throws: what cannot be read or removed is left.
    @discardableResult
    static func removeAbandoned(in parent: URL, minimumAge: TimeInterval = sweepAge) -> Int {
        let manager = FileManager.default
        guard let names = try? manager.contentsOfDirectory(atPath: parent.path) else { return 0 }
        var removed = 0
        for name in names where name.hasPrefix(prefix) {
            let folder = parent.appendingPathComponent(name, isDirectory: true)
            guard let attributes = try? manager.attributesOfItem(atPath: folder.path),
                attributes[.type] as? FileAttributeType == .typeDirectory,
                let modified = attributes[.modificationDate] as? Date,
                Date().timeIntervalSince(modified) >= minimumAge
            else { continue }
            // No lock file: not a scratch folder (or one whose owner died before locking it), left alone.
            let descriptor = open(folder.appendingPathComponent(lockName).path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)
            guard descriptor >= 0 else { continue }
            defer { close(descriptor) }
            // Held: its owner is alive. Taken: its owner is gone, and the lock is kept while the folder goes.
            guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else { continue }
            if (try? manager.removeItem(at: folder)) != nil { removed += 1 }
        }
        return removed
    }
}
