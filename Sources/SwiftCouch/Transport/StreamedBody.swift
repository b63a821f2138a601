import Foundation

/// A request body read from a file or an `InputStream` instead of memory, so that large
/// attachments are never loaded whole.
///
/// A file body is re-read from its start whenever the request is sent again (after a 429, or a
/// renewed session); an `InputStream` can be read only once, so a request with one is never
/// retried — it fails with an error that says so.
public struct StreamedBody: Sendable, CustomStringConvertible {
    enum Source: Sendable {
        case file(URL)
        case stream(OneShotStream)
    }

    let source: Source
    /// The body's length in bytes (for progress; the transport chooses the framing).
    public let length: Int64

    /// A body read from the file at `url`; its length is the file's size.
    /// - Throws: ``CouchError`` (`.validation`) when the file cannot be read.
    public static func file(_ url: URL) throws(CouchError) -> StreamedBody {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: url.path),
            let size = (attributes[.size] as? NSNumber)?.int64Value,
            FileManager.default.isReadableFile(atPath: url.path)
        else {
            throw CouchError.validation("Cannot read the file \(url.path) to upload.")
        }
        return StreamedBody(source: .file(url), length: size)
    }

    /// A body read once from `stream`, which must deliver exactly `length` bytes.
    public static func stream(_ stream: InputStream, length: Int64) -> StreamedBody {
        StreamedBody(source: .stream(OneShotStream(stream)), length: length)
    }

    /// Whether the body can be sent again from its start (true for files).
    public var isRepeatable: Bool {
        if case .file = source { return true }
        return false
    }

    /// A fresh stream positioned at the start of the body, or nil when a one-shot stream was
    /// already taken. For a ``Transport`` of your own: open it, read ``length`` bytes, close it.
    public func makeInputStream() -> InputStream? {
        switch source {
        case .file(let url): return InputStream(url: url)
        case .stream(let box): return box.take()
        }
    }

    public var description: String {
        switch source {
        case .file(let url): return "file \(url.lastPathComponent) (\(length) bytes)"
        case .stream: return "stream (\(length) bytes)"
        }
    }
}

/// Hands out its `InputStream` once.
///
/// `@unchecked Sendable`: the stream is handed over under `lock` exactly once and never touched
/// here again.
final class OneShotStream: @unchecked Sendable {
    private let lock = NSLock()
    private var stream: InputStream?

    init(_ stream: InputStream) { self.stream = stream }

    func take() -> InputStream? {
        lock.lock()
        defer { lock.unlock() }
        defer { stream = nil }
        return stream
    }
}

/// How far a transfer has got.
public struct TransferProgress: Sendable, Hashable {
    /// Bytes sent (uploads) or received (downloads) so far.
    public var completedBytes: Int64
    /// The total, when known.
    public var totalBytes: Int64?

    public init(completedBytes: Int64, totalBytes: Int64?) {
        self.completedBytes = completedBytes
        self.totalBytes = totalBytes
    }

    /// `completedBytes / totalBytes`, or nil when the total is unknown.
    public var fractionCompleted: Double? {
        guard let totalBytes, totalBytes > 0 else { return nil }
        return Double(completedBytes) / Double(totalBytes)
    }
}
