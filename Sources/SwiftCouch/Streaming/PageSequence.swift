import Foundation

/// Pages fetched as the consumer reads them, at most one page ahead.
///
/// The first page is requested when iteration starts; when a page is handed out, the next one is
/// requested in the background so it is ready when asked for. Nothing beyond that is fetched,
/// so a slow consumer holds at most two pages in memory, however long the result. Stopping the
/// iteration (leaving the loop, or cancelling its task) cancels the page on its way.
public struct PageSequence<Page: Sendable>: AsyncSequence, Sendable {
    public typealias Element = Page

    /// One fetch: the page (nil to hand out nothing for it) and where the next page starts (nil
    /// when this was the last).
    typealias Fetch = @Sendable (_ token: PageCursor?) async throws(CouchError) -> (page: Page?, next: PageCursor?)

    let first: PageCursor?
    let fetch: Fetch

    init(first: PageCursor?, fetch: @escaping Fetch) {
        self.first = first
        self.fetch = fetch
    }

    public func makeAsyncIterator() -> Iterator { Iterator(prefetcher: Prefetcher(first: first, fetch: fetch)) }

    /// Reads the pages one by one.
    public struct Iterator: AsyncIteratorProtocol {
        let prefetcher: Prefetcher

        /// The next page, nil after the last. Every error thrown is a ``CouchError`` (see
        /// ``CouchRowStream/Iterator/next()`` for why it is not declared so).
        public mutating func next() async throws -> Page? {
            do {
                return try await prefetcher.next()
            } catch {
                throw CouchError.wrapping(error)
            }
        }
    }

    /// The page on its way, if any; cancels it when the iteration is dropped.
    final class Prefetcher: @unchecked Sendable {
        // @unchecked Sendable: `state` is behind a lock; an iterator is used by one task at a time.
        private struct State {
            var next: PageCursor?
            var started = false
            var inFlight: Task<(page: Page?, next: PageCursor?), any Error>?
        }
        private let state: Locked<State>
        private let fetch: Fetch

        init(first: PageCursor?, fetch: @escaping Fetch) {
            self.state = Locked(State(next: first))
            self.fetch = fetch
        }

        deinit { state.current.inFlight?.cancel() }

        func next() async throws -> Page? {
            while true {
                try Task.checkCancellation()
                let task = state.withLock { state -> Task<(page: Page?, next: PageCursor?), any Error>? in
                    if let inFlight = state.inFlight { return inFlight }
                    guard !state.started || state.next != nil else { return nil }
                    state.started = true
                    return start(state.next)
                }
                guard let task else { return nil }
                let fetched = try await withTaskCancellationHandler {
                    try await task.value
                } onCancel: {
                    task.cancel()
                }
                state.withLock { state in
                    state.next = fetched.next
                    // One page ahead: the next one is requested now, while this one is read.
                    state.inFlight = fetched.next.map { start($0) }
                }
                if let page = fetched.page { return page }
            }
        }

        private func start(_ cursor: PageCursor?) -> Task<(page: Page?, next: PageCursor?), any Error> {
            let fetch = self.fetch
            return Task { () async throws -> (page: Page?, next: PageCursor?) in
                try await fetch(cursor)
            }
        }
    }
}

/// Where a page starts: a bookmark (`_find`, search) or a key token (`_all_docs`, views).
enum PageCursor: Sendable {
    case bookmark(String)
    case key(PageToken)
}

/// The rows of a ``PageSequence``, one at a time (pages fetched at most one ahead).
public struct PagedRowSequence<Page: Sendable, Row: Sendable>: AsyncSequence, Sendable {
    public typealias Element = Row

    let pages: PageSequence<Page>
    let rows: @Sendable (Page) -> [Row]

    public func makeAsyncIterator() -> Iterator { Iterator(pages: pages.makeAsyncIterator(), rows: rows) }

    /// Reads the rows one by one.
    public struct Iterator: AsyncIteratorProtocol {
        var pages: PageSequence<Page>.Iterator
        let rows: @Sendable (Page) -> [Row]
        var buffered: [Row] = []
        var position = 0

        public mutating func next() async throws -> Row? {
            while position >= buffered.count {
                guard let page = try await pages.next() else { return nil }
                buffered = rows(page)
                position = 0
            }
            defer { position += 1 }
            return buffered[position]
        }
    }
}
