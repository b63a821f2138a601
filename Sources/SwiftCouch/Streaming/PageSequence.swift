import Foundation

/// Pages fetched as the consumer reads them, at most one page ahead.
///
/// The first page is requested when iteration starts; when a page is handed out, the next one is
/// requested in the background so it is ready when asked for. Nothing beyond that is fetched,
/// so a slow consumer holds at most two pages in memory, however long the result. Stopping the
/// iteration (leaving the loop, or cancelling its task) cancels the page on its way.
///
/// Paging that does not advance ends the iteration with a `.decoding` ``CouchError`` instead of
/// asking for ever: a page whose next bookmark or page key is the one it was asked with, a next
/// bookmark or key the server gave before (a cycle, found within a few pages of its start), or a
/// page of keys that repeats the previous page. The page that shows it is not handed out. The
/// end of `_find` paging in CouchDB — a last page, empty or short, carrying the bookmark it was
/// asked with — is the normal end, since a short page is the last.
public struct PageSequence<Page: Sendable>: AsyncSequence, Sendable {
    public typealias Element = Page

    /// One fetch: the page (nil to hand out nothing for it), where the next page starts (nil
    /// when this was the last), and what tells the page's rows apart from another page's, when
    /// something does (nil: nothing is compared).
    typealias Fetch = @Sendable (_ token: PageCursor?) async throws(CouchError) -> Fetched
    typealias Fetched = (page: Page?, next: PageCursor?, identity: PageIdentity?)

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
            var inFlight: Task<Fetched, any Error>?
            /// The cursor the page in flight was asked with.
            var requested: PageCursor?
            /// The identity of the page handed out last.
            var previousIdentity: PageIdentity?
            /// Cycle detection (Brent's): a cursor kept at steps 1, 2, 4, 8, … and compared with
            /// every next cursor; a cycle is found within about twice its length plus its start.
            var kept: PageCursor?
            var power = 1
            var steps = 0

            /// The error for `fetched` (asked with `requested`) if paging does not advance;
            /// otherwise records it.
            mutating func check(_ fetched: Fetched) -> CouchError? {
                if let identity = fetched.identity {
                    if identity == previousIdentity {
                        return Self.stuck("the server answered the same page as the one before")
                    }
                    previousIdentity = identity
                }
                guard let next = fetched.next else { return nil }
                if next == requested {
                    return Self.stuck(
                        "the server answered a page whose next \(next.kind) is the one it was asked with"
                            + " (\(next.shown)), so asking for the next page would bring this one again")
                }
                if next == kept {
                    return Self.stuck(
                        "the server's next \(next.kind) (\(next.shown)) is one it gave before: its pages go round"
                            + " in a cycle")
                }
                steps += 1
                if steps >= power {
                    kept = next
                    power = power < 1 << 40 ? power * 2 : power
                    steps = 0
                }
                return nil
            }

            static func stuck(_ what: String) -> CouchError {
                CouchError(kind: .decoding, message: "Paging does not advance: \(what).")
            }
        }
        private let state: Locked<State>
        private let fetch: Fetch

        init(first: PageCursor?, fetch: @escaping Fetch) {
            self.state = Locked(State(next: first, kept: first))
            self.fetch = fetch
        }

        deinit { state.current.inFlight?.cancel() }

        func next() async throws -> Page? {
            while true {
                try Task.checkCancellation()
                let task = state.withLock { state -> Task<Fetched, any Error>? in
                    if let inFlight = state.inFlight { return inFlight }
                    guard !state.started || state.next != nil else { return nil }
                    state.started = true
                    state.requested = state.next
                    return start(state.next)
                }
                guard let task else { return nil }
                let fetched = try await withTaskCancellationHandler {
                    try await task.value
                } onCancel: {
                    task.cancel()
                }
                let stuck = state.withLock { state -> CouchError? in
                    if let error = state.check(fetched) {
                        // The end: nothing more is asked for, and the iteration ends after the error.
                        state.next = nil
                        state.inFlight = nil
                        return error
                    }
                    state.next = fetched.next
                    // One page ahead: the next one is requested now, while this one is read.
                    state.requested = fetched.next
                    state.inFlight = fetched.next.map { start($0) }
                    return nil
                }
                if let stuck { throw stuck }
                if let page = fetched.page { return page }
            }
        }

        private func start(_ cursor: PageCursor?) -> Task<Fetched, any Error> {
            let fetch = self.fetch
            return Task { () async throws -> Fetched in
                try await fetch(cursor)
            }
        }
    }
}

/// What tells a page of keyed rows apart from another: its size and its first and last rows.
struct PageIdentity: Sendable, Hashable {
    var count: Int
    var first: PageToken
    var last: PageToken
}

/// Where a page starts: a bookmark (`_find`, search) or a key token (`_all_docs`, views).
enum PageCursor: Sendable, Hashable {
    case bookmark(String)
    case key(PageToken)

    /// What it is, in an error message.
    var kind: String {
        switch self {
        case .bookmark: return "bookmark"
        case .key: return "page key"
        }
    }

    /// The cursor in an error message (its first 60 characters).
    var shown: String {
        switch self {
        case .bookmark(let mark): return String(mark.prefix(60))
        case .key(let token): return String(token.rawValue.prefix(60))
        }
    }
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
