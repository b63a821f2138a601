import Foundation

// Paging by key, as sequences of pages and rows (the operation is in Operations/Paging/KeyPageOperation.swift).
extension CouchDBClient {
    /// Pages through a key-ordered query (`_all_docs`, views), `pageSize` rows at a time, from
    /// `token` (nil: the first page) in the token's direction, until there are no more pages.
    /// Pages are requested as they are read, at most one ahead (see ``PageSequence``). A server
    /// whose pages do not advance (the next page key is the one asked with, or one given before,
    /// or a page repeats the one before) ends the iteration with a ``CouchError``.
    ///
    /// ```swift
    /// for try await page in client.pages(AllDocsOperation<JSONValue>(database: "albums"), pageSize: 50) {
    ///     show(page.rows); save(page.next)
    /// }
    /// ```
    public func pages<Op: KeyPagedOperation>(
        _ query: Op, pageSize: Int, from token: PageToken? = nil
    ) -> PageSequence<KeyPage<Op.Row>> {
        let backward = token?.direction == .backward
        return PageSequence(first: token.map(PageCursor.key)) { [self] cursor throws(CouchError) in
            var token: PageToken?
            if case .key(let key)? = cursor { token = key }
            let page = try await value(KeyPageOperation(query, pageSize: pageSize, token: token))
            return (page, (backward ? page.previous : page.next).map(PageCursor.key), Self.identity(of: page))
        }
    }

    /// What tells a page apart from the one before it: its size and its first and last rows.
    private static func identity<Row: KeyedRow>(of page: KeyPage<Row>) -> PageIdentity? {
        guard let first = page.rows.first, let last = page.rows.last else { return nil }
        func token(_ row: Row) -> PageToken {
            PageToken(direction: .forward, key: row.pagingKey, documentID: row.pagingDocumentID)
        }
        return PageIdentity(count: page.rows.count, first: token(first), last: token(last))
    }

    /// The rows of every page of ``pages(_:pageSize:from:)``, one at a time.
    public func pagedRows<Op: KeyPagedOperation>(
        _ query: Op, pageSize: Int, from token: PageToken? = nil
    ) -> PagedRowSequence<KeyPage<Op.Row>, Op.Row> {
        PagedRowSequence(pages: pages(query, pageSize: pageSize, from: token), rows: { $0.rows })
    }
}
