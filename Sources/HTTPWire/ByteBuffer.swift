import struct Foundation.Data

/// A growable byte queue: bytes are appended at the end and consumed from the front.
/// Consumed space is reclaimed lazily, so feeding and consuming are amortised O(n).
struct ByteBuffer: Sendable {
    private(set) var storage: [UInt8] = []
    private(set) var readIndex = 0

    var readableCount: Int { storage.count - readIndex }
    var isEmpty: Bool { readableCount == 0 }

    mutating func append(_ data: Data) {
        compactIfNeeded(adding: data.count)
        storage.append(contentsOf: data)
    }

    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        compactIfNeeded(adding: bytes.count)
        storage.append(contentsOf: bytes)
    }

    mutating func append<S: Sequence>(contentsOf bytes: S) where S.Element == UInt8 {
        compactIfNeeded(adding: 0)
        storage.append(contentsOf: bytes)
    }

    /// The byte at `offset` from the read position.
    subscript(offset: Int) -> UInt8 { storage[readIndex + offset] }

    /// Removes and returns the first `count` bytes.
    mutating func take(_ count: Int) -> Data {
        precondition(count <= readableCount)
        let data = storage.withUnsafeBufferPointer {
            Data(buffer: UnsafeBufferPointer(rebasing: $0[readIndex..<(readIndex + count)]))
        }
        consume(count)
        return data
    }

    /// The first `count` bytes as an array, without consuming them.
    func peek(_ count: Int) -> ArraySlice<UInt8> {
        storage[readIndex..<(readIndex + count)]
    }

    mutating func consume(_ count: Int) {
        precondition(count <= readableCount)
        readIndex += count
        if readIndex == storage.count {
            storage.removeAll(keepingCapacity: storage.capacity <= 1 << 20)
            readIndex = 0
        }
    }

    /// Offset (from the read position, at or after `from`) of the first `byte`, or nil.
    func firstIndex(of byte: UInt8, from: Int = 0) -> Int? {
        var i = readIndex + from
        let end = storage.count
        while i < end {
            if storage[i] == byte { return i - readIndex }
            i += 1
        }
        return nil
    }

    private mutating func compactIfNeeded(adding: Int) {
        // Drop consumed bytes once they are the larger part of the storage.
        if readIndex > 0, readIndex >= 4096, readIndex * 2 >= storage.count {
            storage.removeSubrange(0..<readIndex)
            readIndex = 0
        }
    }
}
