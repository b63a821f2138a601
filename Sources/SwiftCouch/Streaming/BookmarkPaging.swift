import Foundation

// Paging by bookmark, as sequences of pages and rows (the operation is in Operations/Paging/BookmarkPageOperation.swift).
extension CouchDBClient {
    /// Pages through `_find` or search results by bookmark, `pageSize` rows at a time, until a
    /// short page. Pages are requested as they are read, at most one ahead (see ``PageSequence``);
    /// a server whose bookmarks do not advance ends the iteration with a ``CouchError``.
    public func pages<Op: BookmarkPagedOperation>(
        _ query: Op, pageSize: Int, bookmark: String? = nil
    ) -> PageSequence<BookmarkPage<Op.Row>> {
        PageSequence(first: bookmark.map(PageCursor.bookmark)) { [self] cursor throws(CouchError) in
            var bookmark: String?
            if case .bookmark(let mark)? = cursor { bookmark = mark }
            let page = try await value(BookmarkPageOperation(query, pageSize: pageSize, bookmark: bookmark))
            // Rows are not compared: two pages of a projection without `_id` may well be equal.
            return (page.rows.isEmpty ? nil : page, page.next.map(PageCursor.bookmark), nil)
        }
    }

    /// The rows of every page of ``pages(_:pageSize:bookmark:)``, one at a time.
    public func pagedRows<Op: BookmarkPagedOperation>(
        _ query: Op, pageSize: Int, bookmark: String? = nil
    ) -> PagedRowSequence<BookmarkPage<Op.Row>, Op.Row> {
        PagedRowSequence(pages: pages(query, pageSize: pageSize, bookmark: bookmark), rows: { $0.rows })
    }
}
