import CouchGzip
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// What a record in a ``StoreFile`` holds (its first payload byte).
enum StoreRecordKind: UInt8, Sendable {
    /// A JSON record: database metadata, a purge, a `_local` document, `_security`, a limit.
    case json = 0x4A
    /// A document update: a JSON head (id, sequence, the new revision nodes without bodies), then the bodies.
    case document = 0x44
    /// One chunk of an attachment's bytes, keyed by the attachment's digest.
    case blob = 0x42
    /// The end of one durable group of records: only groups that end with a commit are visible.
    case commit = 0x43
}

/// A storage failure: where, and what was found.
struct StoreFileError: Error, CustomStringConvertible, Sendable {
    let description: String
}

/// One database's file: an append-only sequence of length-prefixed, checksummed records.
///
/// Layout: an 8-byte magic (`SWCSTOR1`), then records, each `[UInt32 length][UInt32 CRC-32][payload]`
/// (little-endian; `length` counts the payload, whose first byte is a ``StoreRecordKind``). Writes are
/// gathered into a group in memory (``append(_:_:)``) and made durable by ``sync()``: one `pwrite` of the
/// whole group followed by a commit record, then one `fsync`. An attachment's chunks are written to the file as
/// they arrive instead (``writeNow(_:_:)``), uncommitted, and committed with the group of the document record that
/// refers to them. Opening reads the records group by group:
/// a group without its commit record (a crash in the middle of a write) is cut off, so nothing half
/// written is ever visible; a damaged record followed by later committed data is corruption in the
/// middle, reported as an error, never read as data.
///
/// Thread-safe: reads (`pread`) may run on any thread while the owning database appends and syncs.
final class StoreFile: @unchecked Sendable {
    // Safe: `pending`, `durableEnd`, `writtenEnd` and `isClosed` are only touched under `lock`; `fd` is set once.
    /// Where the file is (it changes when a compacted file is renamed over the one it replaces).
    var url: URL {
        lock.lock()
        defer { lock.unlock() }
        return location
    }
    private var location: URL
    private let fd: Int32
    private let lock = NSLock()
    private var pending: [UInt8] = []
    private var pendingRecords = 0
    private var durableEnd: Int64
    /// The end of what is written to the file: records written straight to it (``writeNow(_:_:)``, a streamed
    /// attachment's chunks) lie between ``durableEnd`` and here until the next commit; `pending` follows.
    private var writtenEnd: Int64
    private var isClosed = false
    /// The small records read last (a document's record is read for its tree, then again for its body: the second
    /// read is served from here), by offset; at most ``recentRecordLimit`` of at most ``recentRecordMaxSize`` bytes,
    /// so at most 256 KiB a file. A record at an offset never changes while the file is open, except when the file
    /// is cut back (``abandonWritten(from:to:)``, a failed write), which empties this.
    private var recentRecords: [Int64: (kind: StoreRecordKind, payload: ArraySlice<UInt8>)] = [:]
    private var recentOrder: [Int64] = []
    /// The bytes read last (at most ``readBlockSize``): the small records after the one they were read for are
    /// served from them, so a scan in file order reads the file a block at a time. Emptied with ``recentRecords``.
    private var lastBlock: ReadBlock?
    /// How much a read of a small record reads: its frame and what follows it.
    static let readBlockSize = 8 * 1024
    /// Counts the times the file was cut back: a record read before one is not kept.
    private var cutBacks = 0
    static let recentRecordLimit = 16
    static let recentRecordMaxSize = 16 * 1024
    /// Whether ``sync()`` (and creating, cutting and renaming the file) waits for the disk with `fsync`. When
    /// false, records are still written with `pwrite` before a request is answered, so the process may crash at any
    /// point; only a crash of the machine may lose acknowledged writes (``CouchEngine/Options/synchronousWrites``).
    let synchronousWrites: Bool

    static let magic: [UInt8] = Array("SWCSTOR1".utf8)
    static let headerSize: Int64 = 8
    static let frameHeaderSize = 8
    /// The largest record a file may hold (a document of CouchDB's largest size, or an attachment chunk).
    static let maximumRecordSize = 512 * 1024 * 1024
    /// Attachment bytes are stored in chunks of this size, so that no read or write holds more.
    static let blobChunkSize = 1024 * 1024

    private init(url: URL, fd: Int32, end: Int64, synchronousWrites: Bool) {
        self.location = url
        self.fd = fd
        self.durableEnd = end
        self.writtenEnd = end
        self.synchronousWrites = synchronousWrites
    }

    deinit {
        // The descriptor is closed only here, when nothing can read through it any more: closed
        // earlier, its number could be reused by another file while a reader still held this one.
        _ = systemClose(fd)
    }

    /// Creates a new, empty file (failing if one exists) and makes it and its directory entry durable.
    static func create(at url: URL, synchronousWrites: Bool = true) throws(StoreFileError) -> StoreFile {
        let fd = systemOpen(url.path, O_RDWR | O_CREAT | O_EXCL)
        guard fd >= 0 else { throw StoreFileError(description: "could not create \(url.path): \(errnoText())") }
        let file = StoreFile(url: url, fd: fd, end: 0, synchronousWrites: synchronousWrites)
        try file.writeAll(magic, at: 0)
        try file.fsyncFile()
        file.durableEnd = headerSize
        file.writtenEnd = headerSize
        if synchronousWrites { try syncDirectory(of: url) }
        return file
    }

    /// Opens an existing file and reads every committed record in order, calling `visit` with each
    /// (its offset, kind and payload; blob payloads are not read here: `visit` gets them empty).
    /// A torn last group is cut off the file; corruption followed by committed data throws.
    static func open(
        at url: URL, from start: Int64 = headerSize, synchronousWrites: Bool = true,
        visit: (_ file: StoreFile, _ offset: Int64, _ kind: StoreRecordKind, _ payload: ArraySlice<UInt8>) throws ->
            Void
    ) throws -> StoreFile {
        let fd = systemOpen(url.path, O_RDWR)
        guard fd >= 0 else { throw StoreFileError(description: "could not open \(url.path): \(errnoText())") }
        let file = StoreFile(url: url, fd: fd, end: 0, synchronousWrites: synchronousWrites)
        let size = try file.fileSize()
        guard size >= headerSize, try file.readBytes(at: 0, count: 8) == magic else {
            throw StoreFileError(description: "\(url.lastPathComponent) is not a SwiftCouch database file")
        }
        guard start >= headerSize, start <= size else {
            throw StoreFileError(description: "\(url.lastPathComponent) ends before \(start)")
        }
        var reader = SequentialReader(file: file, offset: start, end: size)
        var group: [(Int64, StoreRecordKind, ArraySlice<UInt8>)] = []
        var groupBlobs: [(offset: Int64, length: Int, crc: UInt32)] = []
        // The last committed group is visited only once it is known whole (see below).
        var lastGroup: [(Int64, StoreRecordKind, ArraySlice<UInt8>)] = []
        var lastGroupBlobs: [(offset: Int64, length: Int, crc: UInt32)] = []
        var committedEnd = start
        var previousCommittedEnd = start
        var damage: String?
        var damageStart = start
        while reader.offset < size {
            let start = reader.offset
            damageStart = start + 1
            guard let head = try reader.read(frameHeaderSize) else {
                damage = "a record header cut off at offset \(start)"
                break
            }
            let length = Int(readUInt32(head, 0))
            let crc = readUInt32(head, 4)
            guard length >= 1, length <= maximumRecordSize, Int64(length) <= size - reader.offset else {
                damage = "a record of impossible length \(length) at offset \(start)"
                break
            }
            guard let firstByte = try reader.peekByte(), let kind = StoreRecordKind(rawValue: firstByte) else {
                damage = "a record of unknown kind at offset \(start)"
                break
            }
            if kind == .blob {
                // Not read on open: its checksum is checked when it is read, and for the last group below.
                groupBlobs.append((start, length, crc))
                reader.skip(length)
                group.append((start, kind, []))
                continue
            }
            guard let payload = try reader.read(length), crc32(payload) == crc else {
                damage = "a record whose checksum does not match at offset \(start)"
                break
            }
            if kind == .commit {
                // A later group exists, so the previous one was synced whole before it was written.
                for (offset, kind, payload) in lastGroup { try visit(file, offset, kind, payload) }
                lastGroup = group
                lastGroupBlobs = groupBlobs
                group.removeAll()
                groupBlobs.removeAll()
                previousCommittedEnd = committedEnd
                committedEnd = reader.offset
            } else {
                group.append((start, kind, Array(payload.dropFirst())[...]))
            }
        }
        // Blob chunks of the last committed group were written without an fsync between them and its
        // commit record, so a crash could have kept the commit and lost a chunk: check them.
        var lastGroupWhole = true
        for blob in lastGroupBlobs {
            let payload = try file.readBytes(at: blob.offset + Int64(frameHeaderSize), count: blob.length)
            if crc32(payload[...]) != blob.crc { lastGroupWhole = false }
        }
        if lastGroupWhole {
            for (offset, kind, payload) in lastGroup { try visit(file, offset, kind, payload) }
        } else {
            committedEnd = previousCommittedEnd
        }
        if let damage {
            // Damage in the middle: some committed group lies beyond it.
            if try file.containsCommit(after: damageStart, end: size) {
                throw StoreFileError(
                    description: "\(url.lastPathComponent) is corrupt: \(damage), with committed data after it")
            }
        }
        if committedEnd < size {
            // A torn last group (a crash while writing): cut it off.
            guard ftruncate(fd, off_t(committedEnd)) == 0 else {
                throw StoreFileError(description: "could not cut the torn end off \(url.path): \(errnoText())")
            }
            try file.fsyncFile()
        }
        file.durableEnd = committedEnd
        file.writtenEnd = committedEnd
        return file
    }

    /// The payload of the first record of the file at `url` (its database record), checksum verified,
    /// without opening the file for writing.
    static func firstRecord(at url: URL) -> ArraySlice<UInt8>? {
        guard let handle = try? FileHandle(forReadingFrom: url) else { return nil }
        defer { try? handle.close() }
        guard let head = try? handle.read(upToCount: Int(headerSize) + frameHeaderSize),
            head.count == Int(headerSize) + frameHeaderSize, Array(head.prefix(8)) == magic
        else { return nil }
        let bytes = [UInt8](head)
        let length = Int(readUInt32(bytes[8...], 0))
        guard length >= 1, length <= 1 << 20, let payload = try? handle.read(upToCount: length), payload.count == length
        else { return nil }
        let body = [UInt8](payload)
        guard crc32(body[...]) == readUInt32(bytes[8...], 4), body.first == StoreRecordKind.json.rawValue else {
            return nil
        }
        return body[1...]
    }

    // MARK: - Writing (the owning database's lock held)

    /// Adds a record to the group being written; returns the offset it will have. Not durable until ``sync()``.
    @discardableResult
    func append(_ kind: StoreRecordKind, _ body: [UInt8]) -> Int64 {
        lock.lock()
        defer { lock.unlock() }
        let offset = writtenEnd + Int64(pending.count)
        var payload = [kind.rawValue]
        payload.append(contentsOf: body)
        Self.appendFrame(payload, to: &pending)
        pendingRecords += 1
        return offset
    }

    /// Writes a record to the file at once, after the group being written (which is written first), without
    /// committing it: it becomes part of the next group ``sync()`` commits, and a crash before that leaves it in
    /// an uncommitted tail that opening cuts off. Returns its offset. Used for a streamed attachment's chunks, so
    /// that an attachment of any size never waits in memory; they are garbage, never visible, until a committed
    /// document record refers to them.
    @discardableResult
    func writeNow(_ kind: StoreRecordKind, _ body: some Collection<UInt8>) throws(StoreFileError) -> Int64 {
        var frame = Self.emptyFrame(kind, capacity: body.count)
        frame.append(contentsOf: body)
        return try writeNow(frame: &frame)
    }

    /// A record's frame with nothing in its payload but `kind`: ``frameHeaderSize`` bytes left for the length and
    /// checksum, which ``writeNow(frame:)`` fills in. Append the rest of the payload to it.
    static func emptyFrame(_ kind: StoreRecordKind, capacity: Int = 0) -> [UInt8] {
        var frame = [UInt8](repeating: 0, count: frameHeaderSize)
        frame.reserveCapacity(frameHeaderSize + 1 + capacity)
        frame.append(kind.rawValue)
        return frame
    }

    /// ``writeNow(_:_:)`` for a record whose frame the caller built in place (``emptyFrame(_:capacity:)`` and its
    /// payload appended): its length and checksum are written into its first ``frameHeaderSize`` bytes, and it goes
    /// to the file as it is, without being copied into another buffer (a streamed attachment's 1 MiB chunks).
    @discardableResult
    func writeNow(frame: inout [UInt8]) throws(StoreFileError) -> Int64 {
        let payloadCount = frame.count - Self.frameHeaderSize
        guard payloadCount >= 1, StoreRecordKind(rawValue: frame[Self.frameHeaderSize]) != nil else {
            throw StoreFileError(description: "a record frame without a kind")
        }
        guard payloadCount <= Self.maximumRecordSize else {
            throw StoreFileError(description: "a record of \(payloadCount) bytes is too large for a database file")
        }
        let crc = Self.crc32(frame[Self.frameHeaderSize...])
        for k in 0..<4 {
            frame[k] = UInt8(truncatingIfNeeded: UInt32(payloadCount) >> UInt32(8 * k))
            frame[4 + k] = UInt8(truncatingIfNeeded: crc >> UInt32(8 * k))
        }
        lock.lock()
        defer { lock.unlock() }
        guard !isClosed else { throw StoreFileError(description: "\(location.lastPathComponent) is closed") }
        let offset = writtenEnd + Int64(pending.count)
        do {
            if !pending.isEmpty { try writeAll(pending, at: writtenEnd) }
            try writeAll(frame, at: offset)
        } catch {
            _ = ftruncate(fd, off_t(writtenEnd))
            forgetRecentRecords()
            throw error
        }
        // The group's records are on disk now (uncommitted, as before): only the commit record waits.
        writtenEnd = offset + Int64(frame.count)
        pending.removeAll(keepingCapacity: true)
        return offset
    }

    /// Cuts records written with ``writeNow(_:_:)`` from `start` off the file again (a streamed upload that
    /// failed), when nothing was written after them; otherwise they stay as garbage until a compaction.
    func abandonWritten(from start: Int64, to end: Int64) {
        lock.lock()
        defer { lock.unlock() }
        guard !isClosed, end == writtenEnd, pending.isEmpty, start >= durableEnd, start <= end else { return }
        if ftruncate(fd, off_t(start)) == 0 { writtenEnd = start }
        forgetRecentRecords()
    }

    /// Whether records wait for ``sync()``.
    var hasPending: Bool {
        lock.lock()
        defer { lock.unlock() }
        return pendingRecords > 0
    }

    /// How many groups this file synced (tests of "one sync per request").
    var syncCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return syncs
    }
    private var syncs = 0

    /// Writes the group with its commit record and waits until it is on disk (one `fsync`; none when
    /// ``synchronousWrites`` is false).
    func sync() throws(StoreFileError) {
        lock.lock()
        defer { lock.unlock() }
        guard pendingRecords > 0 else { return }
        syncs += 1
        guard !isClosed else { throw StoreFileError(description: "\(url.lastPathComponent) is closed") }
        var group = pending
        let commitEnd = writtenEnd + Int64(group.count) + Int64(Self.frameHeaderSize) + 9
        var commit: [UInt8] = [StoreRecordKind.commit.rawValue]
        appendUInt64(&commit, UInt64(commitEnd))
        Self.appendFrame(commit, to: &group)
        do {
            try writeAll(group, at: writtenEnd)
            try fsyncFile()
        } catch {
            // The group's bytes may be partly on disk: cut them off so the file ends where they began.
            _ = ftruncate(fd, off_t(writtenEnd))
            forgetRecentRecords()
            throw error
        }
        durableEnd = commitEnd
        writtenEnd = commitEnd
        pending.removeAll(keepingCapacity: true)
        pendingRecords = 0
    }

    /// Renames the file over `destination` (atomically replacing what is there) and makes the
    /// directory entry durable.
    func rename(to destination: URL) throws(StoreFileError) {
        lock.lock()
        let source = location
        lock.unlock()
        #if canImport(Darwin)
            let result = Darwin.rename(source.path, destination.path)
        #elseif canImport(Musl)
            let result = Musl.rename(source.path, destination.path)
        #else
            let result = Glibc.rename(source.path, destination.path)
        #endif
        guard result == 0 else {
            throw StoreFileError(description: "could not rename \(source.lastPathComponent): \(errnoText())")
        }
        lock.lock()
        location = destination
        lock.unlock()
        if synchronousWrites { try Self.syncDirectory(of: destination) }
    }

    /// Bytes on disk (committed), plus the group being written.
    var size: Int64 {
        lock.lock()
        defer { lock.unlock() }
        return writtenEnd + Int64(pending.count)
    }

    /// Ends writing and reading: later calls fail with an error. The descriptor itself is released
    /// when the last reference goes (see `deinit`).
    func close() {
        lock.lock()
        defer { lock.unlock() }
        isClosed = true
    }

    // MARK: - Reading (any thread)

    /// The record at `offset`: its kind and payload (without the kind byte), checksum verified.
    func read(at offset: Int64) throws(StoreFileError) -> (kind: StoreRecordKind, payload: ArraySlice<UInt8>) {
        // An offset comes from the file's own records, which a damaged or foreign file can set to anything.
        guard offset >= Self.headerSize else { throw impossibleLength(at: offset) }
        lock.lock()
        if isClosed {
            lock.unlock()
            throw StoreFileError(description: "\(location.lastPathComponent) is closed")
        }
        if offset >= writtenEnd {
            // Still in the group being written.
            let start = Int(offset - writtenEnd)
            defer { lock.unlock() }
            guard start >= 0, start + Self.frameHeaderSize <= pending.count else {
                throw StoreFileError(description: "no record at offset \(offset) of \(url.lastPathComponent)")
            }
            let length = Int(Self.readUInt32(pending[start..<(start + 4)], 0))
            guard length >= 1, start + Self.frameHeaderSize + length <= pending.count,
                let kind = StoreRecordKind(rawValue: pending[start + Self.frameHeaderSize])
            else {
                throw StoreFileError(description: "no record at offset \(offset) of \(url.lastPathComponent)")
            }
            return (kind, pending[(start + Self.frameHeaderSize + 1)..<(start + Self.frameHeaderSize + length)])
        }
        if let recent = recentRecords[offset] {
            lock.unlock()
            return recent
        }
        let end = writtenEnd
        let generation = cutBacks
        let block = lastBlock
        lock.unlock()
        let (crc, payload) = try frame(at: offset, end: end, block: block, generation: generation)
        guard Self.crc32(payload) == crc, let first = payload.first, let kind = StoreRecordKind(rawValue: first) else {
            throw StoreFileError(
                description: "\(url.lastPathComponent) is corrupt: the record at offset \(offset) fails its checksum")
        }
        if payload.count <= Self.recentRecordMaxSize {
            remember(offset, kind, payload.dropFirst(), generation: generation)
        }
        return (kind, payload.dropFirst())
    }

    /// The checksum and payload of the committed record at `offset`: from `block` when it holds the whole
    /// record, else with one `pread` of a block (kept as the last block) and, for a record longer than
    /// that, a second one.
    private func frame(at offset: Int64, end: Int64, block: ReadBlock?, generation: Int) throws(StoreFileError) -> (
        crc: UInt32, payload: ArraySlice<UInt8>
    ) {
        if let block, let found = block.frame(at: offset) {
            try checkLength(found.length, at: offset, end: end)
            return (found.crc, found.payload)
        }
        let count = Int(min(Int64(Self.readBlockSize), end - offset))
        guard count >= Self.frameHeaderSize else { throw impossibleLength(at: offset) }
        let read = ReadBlock(start: offset, bytes: try readBytes(at: offset, count: count))
        keep(read, generation: generation)
        let length = Int(Self.readUInt32(read.bytes[...], 0))
        try checkLength(length, at: offset, end: end)
        if let found = read.frame(at: offset) { return (found.crc, found.payload) }
        let payload = try readBytes(at: offset + Int64(Self.frameHeaderSize), count: length)
        return (Self.readUInt32(read.bytes[...], 4), payload[...])
    }

    /// Checks a record's length against the file's committed `end` and the largest record before it becomes a
    /// read size.
    private func checkLength(_ length: Int, at offset: Int64, end: Int64) throws(StoreFileError) {
        guard length >= 1, length <= Self.maximumRecordSize, offset + Int64(Self.frameHeaderSize + length) <= end else {
            throw impossibleLength(at: offset)
        }
    }

    private func impossibleLength(at offset: Int64) -> StoreFileError {
        StoreFileError(
            description: "\(url.lastPathComponent) is corrupt: a record of impossible length at offset \(offset)")
    }

    /// Keeps `block` as the last block read (unless the file was cut back meanwhile).
    private func keep(_ block: ReadBlock, generation: Int) {
        lock.lock()
        defer { lock.unlock() }
        if !isClosed, generation == cutBacks { lastBlock = block }
    }

    /// The length and checksum of the committed record at `offset`, its length checked against the file's
    /// committed `end` and the largest record before it becomes a read size.
    private func frameHead(at offset: Int64, end: Int64) throws(StoreFileError) -> (length: Int, crc: UInt32) {
        let head = try readBytes(at: offset, count: Self.frameHeaderSize)
        let length = Int(Self.readUInt32(head[...], 0))
        try checkLength(length, at: offset, end: end)
        return (length, Self.readUInt32(head[...], 4))
    }

    /// Keeps a record just read among the recent ones (unless the file was cut back below it meanwhile).
    private func remember(_ offset: Int64, _ kind: StoreRecordKind, _ payload: ArraySlice<UInt8>, generation: Int) {
        lock.lock()
        defer { lock.unlock() }
        guard !isClosed, generation == cutBacks, offset < writtenEnd, recentRecords[offset] == nil else { return }
        if recentOrder.count >= Self.recentRecordLimit { recentRecords[recentOrder.removeFirst()] = nil }
        recentOrder.append(offset)
        recentRecords[offset] = (kind, payload)
    }

    /// Empties the recent records (lock held): the file was cut back, so an offset may come to hold another record.
    private func forgetRecentRecords() {
        cutBacks += 1
        recentRecords.removeAll()
        recentOrder.removeAll()
        lastBlock = nil
    }

    /// How many records are kept as recently read (tests of the bound).
    var recentRecordCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return recentRecords.count
    }

    /// ``read(at:)`` for a large record (an attachment chunk): the payload (without the kind byte) is read into a
    /// `Data` that owns the buffer `pread` filled, so that sending it on copies nothing more, and no byte is zeroed
    /// first. Checksum verified.
    /// - Parameter buffers: where the record's buffer comes from and goes back to when the returned `Data` is
    ///   released (nil: allocated for it alone).
    func readData(at offset: Int64, buffers: ReadBufferPool? = nil) throws(StoreFileError) -> (
        kind: StoreRecordKind, payload: Data
    ) {
        guard offset >= Self.headerSize else { throw impossibleLength(at: offset) }
        lock.lock()
        if isClosed {
            lock.unlock()
            throw StoreFileError(description: "\(location.lastPathComponent) is closed")
        }
        let end = writtenEnd
        lock.unlock()
        if offset >= end {
            // Still in the group being written (rare: a chunk read back before its commit).
            let (kind, payload) = try read(at: offset)
            return (kind, Data(payload))
        }
        let (length, crc) = try frameHead(at: offset, end: end)
        let data: Data
        let buffer: UnsafeMutableRawPointer
        if let buffers, let pooled = buffers.take(length) {
            buffer = pooled
            data = Data(
                bytesNoCopy: buffer, count: length, deallocator: .custom { pointer, _ in buffers.give(pointer) })
        } else {
            buffer = UnsafeMutableRawPointer.allocate(byteCount: length, alignment: 16)
            data = Data(bytesNoCopy: buffer, count: length, deallocator: .custom { pointer, _ in pointer.deallocate() })
        }
        try readInto(buffer, at: offset + Int64(Self.frameHeaderSize), count: length)
        let bytes = UnsafeBufferPointer(start: buffer.assumingMemoryBound(to: UInt8.self), count: length)
        guard CRC32.update(0, bytes) == crc, let kind = StoreRecordKind(rawValue: bytes[0]) else {
            throw StoreFileError(
                description: "\(url.lastPathComponent) is corrupt: the record at offset \(offset) fails its checksum")
        }
        return (kind, data[(data.startIndex + 1)...])
    }

    /// Copies the committed bytes `from..<to` into `other`'s group (compaction's catch-up of late writes).
    func committedBytes(from start: Int64, to end: Int64) throws(StoreFileError) -> [UInt8] {
        try readBytes(at: start, count: Int(end - start))
    }

    /// The committed end of the file.
    var committedEnd: Int64 {
        lock.lock()
        defer { lock.unlock() }
        return durableEnd
    }

    // MARK: - Plumbing

    private func readBytes(at offset: Int64, count: Int) throws(StoreFileError) -> [UInt8] {
        guard count >= 0 else { throw StoreFileError(description: "a negative read of \(url.lastPathComponent)") }
        // Read into uninitialised memory: zeroing what `pread` overwrites costs as much as the copy itself.
        var failure: StoreFileError?
        let buffer = [UInt8](unsafeUninitializedCapacity: count) { raw, initialized in
            do throws(StoreFileError) {
                if count > 0 { try readInto(UnsafeMutableRawPointer(raw.baseAddress!), at: offset, count: count) }
                initialized = count
            } catch {
                failure = error
                initialized = 0
            }
        }
        if let failure { throw failure }
        return buffer
    }

    /// Reads `count` bytes at `offset` into `buffer` (which has room for them).
    private func readInto(_ buffer: UnsafeMutableRawPointer, at offset: Int64, count: Int) throws(StoreFileError) {
        var done = 0
        while done < count {
            let n = pread(fd, buffer + done, count - done, off_t(offset + Int64(done)))
            if n < 0, errno == EINTR { continue }
            guard n > 0 else {
                throw StoreFileError(
                    description: "could not read \(url.lastPathComponent) at \(offset): "
                        + (n == 0 ? "the file ends early" : errnoText()))
            }
            done += n
        }
    }

    private func writeAll(_ bytes: [UInt8], at offset: Int64) throws(StoreFileError) {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                pwrite(fd, raw.baseAddress! + done, bytes.count - done, off_t(offset + Int64(done)))
            }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { throw StoreFileError(description: "could not write \(url.path): \(errnoText())") }
            done += n
        }
    }

    private func fsyncFile() throws(StoreFileError) {
        guard synchronousWrites else { return }
        #if canImport(Darwin)
            let result = fcntl(fd, F_FULLFSYNC)
        #else
            let result = fsync(fd)
        #endif
        guard result == 0 else { throw StoreFileError(description: "could not sync \(url.path): \(errnoText())") }
    }

    private func fileSize() throws(StoreFileError) -> Int64 {
        let end = lseek(fd, 0, SEEK_END)
        guard end >= 0 else { throw StoreFileError(description: "could not size \(url.path): \(errnoText())") }
        return Int64(end)
    }

    /// Whether a valid commit record starts anywhere in `start..<end` (telling damage in the middle
    /// from a torn end). Only runs when a file is found damaged.
    private func containsCommit(after start: Int64, end: Int64) throws -> Bool {
        let commitLength = 9
        var offset = start
        let window = 1 << 20
        while offset < end {
            let count = Int(min(Int64(window + Self.frameHeaderSize + commitLength), end - offset))
            let bytes = try readBytes(at: offset, count: count)
            var i = 0
            while i + Self.frameHeaderSize + commitLength <= bytes.count, i < window {
                if bytes[i] == UInt8(commitLength), bytes[i + 1] == 0, bytes[i + 2] == 0, bytes[i + 3] == 0,
                    bytes[i + 8] == StoreRecordKind.commit.rawValue
                {
                    let payload = bytes[(i + 8)..<(i + 8 + commitLength)]
                    var recordedEnd: UInt64 = 0
                    for k in 0..<8 { recordedEnd |= UInt64(payload[payload.startIndex + 1 + k]) << UInt64(8 * k) }
                    let actualEnd = offset + Int64(i + Self.frameHeaderSize + commitLength)
                    if Self.crc32(payload) == Self.readUInt32(bytes[...], i + 4), recordedEnd == UInt64(actualEnd) {
                        return true
                    }
                }
                i += 1
            }
            offset += Int64(window)
        }
        return false
    }

    static func appendFrame(_ payload: [UInt8], to out: inout [UInt8]) {
        appendUInt32(&out, UInt32(payload.count))
        appendUInt32(&out, crc32(payload[...]))
        out.append(contentsOf: payload)
    }

    static func crc32(_ bytes: ArraySlice<UInt8>) -> UInt32 {
        // CouchGzip's CRC-32 (eight bytes at a time): the same checksum, several times faster in a debug build.
        bytes.withUnsafeBufferPointer { CRC32.update(0, $0) }
    }

    static func readUInt32(_ bytes: ArraySlice<UInt8>, _ at: Int) -> UInt32 {
        let base = bytes.startIndex + at
        return UInt32(bytes[base]) | UInt32(bytes[base + 1]) << 8 | UInt32(bytes[base + 2]) << 16
            | UInt32(bytes[base + 3]) << 24
    }

    private static func readUInt32(_ bytes: [UInt8], _ at: Int) -> UInt32 { readUInt32(bytes[...], at) }

    static func syncDirectory(of url: URL) throws(StoreFileError) {
        let dir = systemOpen(url.deletingLastPathComponent().path, O_RDONLY)
        guard dir >= 0 else { return }
        defer { _ = systemClose(dir) }
        _ = fsync(dir)
    }

    /// Reads a file front to back in large pieces.
    private struct SequentialReader {
        let file: StoreFile
        var offset: Int64
        let end: Int64
        private var buffer: [UInt8] = []
        private var bufferStart: Int64 = 0

        init(file: StoreFile, offset: Int64, end: Int64) {
            self.file = file
            self.offset = offset
            self.end = end
            bufferStart = offset
        }

        /// The next `count` bytes, or nil when the file ends first.
        mutating func read(_ count: Int) throws -> ArraySlice<UInt8>? {
            guard Int64(count) <= end - offset else { return nil }
            try fill(count)
            let start = Int(offset - bufferStart)
            offset += Int64(count)
            return buffer[start..<(start + count)]
        }

        mutating func peekByte() throws -> UInt8? {
            guard offset < end else { return nil }
            try fill(1)
            return buffer[Int(offset - bufferStart)]
        }

        mutating func skip(_ count: Int) { offset += Int64(count) }

        private mutating func fill(_ count: Int) throws {
            let have = bufferStart + Int64(buffer.count) - offset
            if offset >= bufferStart, have >= Int64(count) { return }
            let want = Int(min(max(Int64(count), 4 << 20), end - offset))
            buffer = try file.readBytes(at: offset, count: want)
            bufferStart = offset
        }
    }
}

func appendUInt32(_ out: inout [UInt8], _ value: UInt32) {
    out.append(UInt8(value & 0xFF))
    out.append(UInt8((value >> 8) & 0xFF))
    out.append(UInt8((value >> 16) & 0xFF))
    out.append(UInt8((value >> 24) & 0xFF))
}

func appendUInt64(_ out: inout [UInt8], _ value: UInt64) {
    for shift in stride(from: 0, to: 64, by: 8) { out.append(UInt8((value >> UInt64(shift)) & 0xFF)) }
}

private func errnoText() -> String { String(cString: strerror(errno)) }

private func systemOpen(_ path: String, _ flags: Int32) -> Int32 {
    #if canImport(Darwin)
        return Darwin.open(path, flags | O_CLOEXEC, 0o644)
    #elseif canImport(Musl)
        return Musl.open(path, flags | O_CLOEXEC, 0o644)
    #else
        return Glibc.open(path, flags | O_CLOEXEC, 0o644)
    #endif
}

private func systemClose(_ fd: Int32) -> Int32 {
    #if canImport(Darwin)
        return Darwin.close(fd)
    #elseif canImport(Musl)
        return Musl.close(fd)
    #else
        return Glibc.close(fd)
    #endif
}

/// Bytes of a file read at once (see ``StoreFile/readBlockSize``).
struct ReadBlock {
    let start: Int64
    let bytes: [UInt8]

    /// The length, checksum and payload of the record whose frame begins at `offset`, when the block holds all of
    /// it (its length still to be checked against the file).
    func frame(at offset: Int64) -> (length: Int, crc: UInt32, payload: ArraySlice<UInt8>)? {
        guard offset >= start, offset - start <= Int64(bytes.count - StoreFile.frameHeaderSize) else { return nil }
        let head = Int(offset - start)
        let length = Int(StoreFile.readUInt32(bytes[...], head))
        let payloadStart = head + StoreFile.frameHeaderSize
        guard length >= 1, length <= bytes.count - payloadStart else { return nil }
        return (length, StoreFile.readUInt32(bytes[...], head + 4), bytes[payloadStart..<(payloadStart + length)])
    }
}

/// Buffers of one size for records read whole (an attachment's chunks on their way to a socket), kept when
/// released, up to ``keep`` of them, for the next read.
///
/// A download gathers up to 16 chunks of 1 MiB for one `sendmsg`; allocated afresh, each download's buffers were
/// pages the kernel had to map and zero again (4,300 page faults a 256 MiB download, most of the server's CPU
/// difference from sending a chunk held in memory). At most `keep` buffers stay allocated when idle.
final class ReadBufferPool: @unchecked Sendable {
    // Safe: `idle` is only touched under `lock`; a buffer is owned by one `Data` or by `idle`, never both.
    /// The pool of the attachment downloads that gather chunks (`StoreFile.blobChunkSize` plus a record's head).
    static let chunks = ReadBufferPool(size: StoreFile.blobChunkSize + 512, keep: 17)

    let size: Int
    let keep: Int
    private let lock = NSLock()
    private var idle: [UnsafeMutableRawPointer] = []

    init(size: Int, keep: Int) {
        self.size = size
        self.keep = keep
    }

    /// A buffer of ``size`` bytes for `length` of them; nil when `length` is larger.
    func take(_ length: Int) -> UnsafeMutableRawPointer? {
        guard length <= size else { return nil }
        return lock.withLock { idle.popLast() } ?? UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
    }

    /// Takes back a buffer from ``take(_:)``: kept for the next, or freed when ``keep`` are idle.
    func give(_ buffer: UnsafeMutableRawPointer) {
        let kept = lock.withLock {
            guard idle.count < keep else { return false }
            idle.append(buffer)
            return true
        }
        if !kept { buffer.deallocate() }
    }

    /// How many buffers are idle (for tests).
    var idleCount: Int { lock.withLock { idle.count } }
}
