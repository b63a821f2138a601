import Foundation

// Paging by key, as sequences of pages and rows (the operation is in Operations/Paging/KeyPageOperation.swift).
extension CouchDBClient {
    /// Pages through a key-ordered query (`_all_docs`, views), `pageSize` rows at a time, from
    /// `token` (nil: the first page) in the token's direction, until there are no more pages.
    /// Pages are requested as they are read, at most one ahead (see ``PageSequence``).
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
            return (page, (backward ? page.previous : page.next).map(PageCursor.key))
        }
    }

    /// The rows of every page of ``pages(_:pageSize:from:)``, one at a time.
    public func pagedRows<Op: KeyPagedOperation>(
        _ query: Op, pageSize: Int, from token: PageToken? = nil
    ) -> PagedRowSequence<KeyPage<Op.Row>, Op.Row> {
        PagedRowSequence(pages: pages(query, pageSize: pageSize, from: token), rows: { $0.rows })
    }
}
