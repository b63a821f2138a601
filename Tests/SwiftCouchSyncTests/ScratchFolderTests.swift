import Foundation
import SwiftCouch
@testable import SwiftCouchSync
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The replicator's scratch folders: a folder in use is never swept, one whose owner is gone is, once old
/// enough; nothing without the scratch lock file is touched. (`KillEndToEndTests` sweeps the folders of
/// processes really killed with SIGKILL.)
@Suite struct ScratchFolderTests {
    /// Runs `body` with an empty parent folder, removed afterwards.
    private func withParent(_ body: (URL) throws -> Void) throws {
        let parent = FileManager.default.temporaryDirectory.appendingPathComponent(
            "swiftcouch-scratch-tests-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: parent, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: parent) }
        try body(parent)
    }

    private func age(_ url: URL, seconds: TimeInterval) throws {
        try FileManager.default.setAttributes(
            [.modificationDate: Date(timeIntervalSinceNow: -seconds)], ofItemAtPath: url.path)
    }

    private func exists(_ url: URL) -> Bool { FileManager.default.fileExists(atPath: url.path) }

    /// A folder as a killed owner leaves it: its lock file, a file of attachment bytes, no lock held.
    private func abandoned(in parent: URL, name: String = ScratchFolder.prefix + UUID().uuidString) throws -> URL {
        let folder = parent.appendingPathComponent(name, isDirectory: true)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try Data().write(to: folder.appendingPathComponent(ScratchFolder.lockName))
        try Data(repeating: 7, count: 1000).write(to: folder.appendingPathComponent("attachment-0"))
        return folder
    }

    @Test("A folder in use is kept by a sweep, however old; removing it removes its files")
    func inUseIsKept() throws {
        try withParent { parent in
            let scratch = try ScratchFolder(in: parent)
            #expect(scratch.url.lastPathComponent.hasPrefix(ScratchFolder.prefix))
            try Data(repeating: 1, count: 100).write(to: scratch.url.appendingPathComponent("attachment-0"))
            try age(scratch.url, seconds: 3600)
            #expect(ScratchFolder.removeAbandoned(in: parent) == 0)
            #expect(ScratchFolder.removeAbandoned(in: parent, minimumAge: 0) == 0)
            #expect(exists(scratch.url))
            scratch.remove()
            #expect(!exists(scratch.url))
            #expect(try FileManager.default.contentsOfDirectory(atPath: parent.path).isEmpty)
        }
    }

    @Test("An abandoned folder is removed once it is older than the sweep age, not before")
    func abandonedIsRemovedWhenOld() throws {
        try withParent { parent in
            let old = try abandoned(in: parent)
            try age(old, seconds: ScratchFolder.sweepAge + 5)
            let young = try abandoned(in: parent)
            #expect(ScratchFolder.removeAbandoned(in: parent) == 1)
            #expect(!exists(old))
            #expect(exists(young))
            // Its lock is free too: a sweep that takes any age removes it.
            #expect(ScratchFolder.removeAbandoned(in: parent, minimumAge: 0) == 1)
            #expect(!exists(young))
        }
    }

    @Test("Nothing but an unlocked folder with the scratch lock file is touched")
    func othersAreLeftAlone() throws {
        try withParent { parent in
            let manager = FileManager.default
            // A folder of the same prefix without the lock file (a local store's directory, say).
            let foreign = parent.appendingPathComponent(ScratchFolder.prefix + "store", isDirectory: true)
            try manager.createDirectory(at: foreign, withIntermediateDirectories: true)
            try Data().write(to: foreign.appendingPathComponent("LOCK"))
            // A plain file of that prefix, a folder of another name with the lock file, and a folder whose
            // lock file is a symbolic link.
            let file = parent.appendingPathComponent(ScratchFolder.prefix + "file")
            try Data([1]).write(to: file)
            let otherName = try abandoned(in: parent, name: "other-folder")
            let linked = parent.appendingPathComponent(ScratchFolder.prefix + "linked", isDirectory: true)
            try manager.createDirectory(at: linked, withIntermediateDirectories: true)
            try manager.createSymbolicLink(
                at: linked.appendingPathComponent(ScratchFolder.lockName),
                withDestinationURL: otherName.appendingPathComponent(ScratchFolder.lockName))
            for url in [foreign, file, otherName, linked] { try age(url, seconds: 3600) }
            #expect(ScratchFolder.removeAbandoned(in: parent) == 0)
            for url in [foreign, file, otherName, linked] { #expect(exists(url), "\(url.lastPathComponent)") }
        }
    }

    @Test("A lock held through another open file (another process, or another copy here) keeps the folder")
    func heldElsewhereIsKept() throws {
        try withParent { parent in
            let folder = try abandoned(in: parent)
            try age(folder, seconds: 3600)
            let descriptor = open(folder.appendingPathComponent(ScratchFolder.lockName).path, O_RDWR)
            try #require(descriptor >= 0)
            #expect(flock(descriptor, LOCK_EX | LOCK_NB) == 0)
            #expect(ScratchFolder.removeAbandoned(in: parent) == 0)
            #expect(exists(folder))
            close(descriptor)  // its owner ends
            #expect(ScratchFolder.removeAbandoned(in: parent) == 1)
            #expect(!exists(folder))
        }
    }

    @Test("A folder that cannot be made is a clear error")
    func unmakeableIsAnError() throws {
        try withParent { parent in
            let notAFolder = parent.appendingPathComponent("plain-file")
            try Data([1]).write(to: notAFolder)
            let error = #expect(throws: CouchError.self) { _ = try ScratchFolder(in: notAFolder) }
            #expect(error?.message.contains("Could not create a temporary directory for attachments") == true)
        }
    }
}
