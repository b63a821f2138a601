import CouchQuery
import Foundation

// The one mechanism behind every JSON response the engine streams (`_all_docs`, views, `_find`,
// `_changes`, `_bulk_get`): the handler checks its parameters and takes a snapshot of the index it
// needs before the first byte (so a bad parameter is still a 400, a missing view a 404), then
// returns a `ResponseBody.stream` whose producer writes a head, the rows in batches of
// ``RowStreamWriter/batchSize`` (each batch read under the database's lock, bodies read from the
// file then, and written without the lock), then a tail. Memory is bounded by a batch whatever
// the size of the database.

/// Writes the body of a streamed JSON response: raw text (heads and tails) and rows, each batch of
/// rows one chunk, rows separated by `separator`.
final class RowStreamWriter {
    /// How many rows are read under the lock and sent as one chunk.
    static let batchSize = 1000

    private let writer: any ChunkWriter
    private let separator: String
    /// Whether a row has been written (the row formats put a separator before every row but the first).
    private(set) var wroteRows = false
    /// False once the client has gone away or the body was aborted: the producer should stop.
    private(set) var isOpen = true

    init(_ writer: any ChunkWriter, separator: String) {
        self.writer = writer
        self.separator = separator
    }

    /// Writes `text` as it is. False once the body cannot go on.
    @discardableResult func text(_ text: String) -> Bool {
        guard isOpen else { return false }
        if text.isEmpty { return true }
        if !writer.write(Data(text.utf8)) { isOpen = false }
        return isOpen
    }

    /// Writes `rows` as one chunk, each serialised and separated from the rows before it.
    @discardableResult func rows<Row: StreamedRow>(_ rows: [Row]) -> Bool {
        guard isOpen else { return false }
        if rows.isEmpty { return true }
        var text = ""
        for row in rows {
            if wroteRows { text += separator }
            row.write(to: &text)
            wroteRows = true
        }
        return self.text(text)
    }

    /// Runs one batch's read in a request scope of its own (the request's scope has ended once its body
    /// streams). Nil, and the body aborted, when a stored document or attachment could not be read.
    func read<T>(_ body: () -> T) -> T? {
        guard isOpen else { return nil }
        let (value, scope) = RequestScope.run(body)
        if scope.readFailure != nil {
            abort()
            return nil
        }
        return value
    }

    /// Writes the rows `render` makes of `items`, a batch at a time, each batch rendered under `db`'s lock
    /// (an item that renders as nil is left out). False once the body cannot go on.
    @discardableResult func batches<C: Collection, Row: StreamedRow>(
        _ items: C, db: Database, render: (C.Element) -> Row?
    ) -> Bool {
        var start = items.startIndex
        while start != items.endIndex {
            let end = items.index(start, offsetBy: Self.batchSize, limitedBy: items.endIndex) ?? items.endIndex
            let slice = items[start..<end]
            guard let rows = read({ db.withLock { slice.compactMap(render) } }), self.rows(rows) else { return false }
            start = end
        }
        return isOpen
    }

    /// Ends the body short, as CouchDB does when a read fails after its answer began (it aborts the
    /// response: the client sees a body cut off, never a shorter one taken as whole).
    func abort() {
        guard isOpen else { return }
        isOpen = false
        writer.abort()
    }
}

/// A row of a streamed response: a JSON value, or text already serialised (a document row whose stored
/// body is copied as written).
protocol StreamedRow {
    func write(to text: inout String)
}

extension JSON: StreamedRow {}

extension String: StreamedRow {
    func write(to text: inout String) { text += self }
}

extension Reply {
    /// A `200` JSON response streamed by `produce` (sent with `Transfer-Encoding: chunked`, as CouchDB
    /// sends its row responses). The answer to `HEAD` is built whole, so it keeps its `Content-Length`.
    static func streamed(
        method: String, separator: String, headers: [(String, String)] = [],
        _ produce: @escaping @Sendable (RowStreamWriter) -> Void
    ) -> ServerResponse {
        var response = ServerResponse(status: 200)
        response.headers.add("Content-Type", "application/json")
        for (name, value) in headers { response.headers.add(name, value) }
        response.headers.add("Cache-Control", "must-revalidate")
        if method == "HEAD" {
            let collector = WholeBody()
            produce(RowStreamWriter(collector, separator: separator))
            if collector.aborted {
                return Reply.error(CouchError(500, "file_error", "a stored document could not be read"))
            }
            response.body = .data(collector.data)
        } else {
            response.body = .stream { writer in produce(RowStreamWriter(writer, separator: separator)) }
        }
        return response
    }

    /// The bytes a streamed body writes, collected whole (nil when the producer aborted it).
    package static func collect(_ body: ResponseBody) -> Data? {
        switch body {
        case .empty: return Data()
        case .data(let data): return data
        case .stream(let produce):
            let collector = WholeBody()
            produce(collector)
            return collector.aborted ? nil : collector.data
        }
    }
}

/// Collects a streamed body whole (`HEAD`, and responses consumed inside the engine).
private final class WholeBody: ChunkWriter, @unchecked Sendable {
    // @unchecked: used only by the one thread running the producer.
    var data = Data()
    var aborted = false

    func write(_ data: Data) -> Bool {
        self.data.append(data)
        return true
    }

    func abort() { aborted = true }
}
