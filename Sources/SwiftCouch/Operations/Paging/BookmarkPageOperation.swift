import Foundation

/// An operation whose results page by bookmark: `_find` and search.
public protocol BookmarkPagedOperation: JSONOperation {
    /// One result row.
    associatedtype Row: Sendable
    /// The bookmark to continue from (nil for the first page).
    var pagingBookmark: String? { get set }
    /// Rows per page (`limit`).
    var pagingLimit: Int? { get set }
    /// The rows of one response.
    static func rows(of response: Response) -> [Row]
    /// The bookmark of one response.
    static func bookmark(of response: Response) -> String?
}

extension FindOperation: BookmarkPagedOperation {
    public var pagingBookmark: String? {
        get { query.bookmark }
        set { query.bookmark = newValue }
    }
    public var pagingLimit: Int? {
        get { query.limit }
        set { query.limit = newValue }
    }
    public static func rows(of response: FindResponse<Document>) -> [Document] { response.docs }
    public static func bookmark(of response: FindResponse<Document>) -> String? { response.bookmark }
}

extension SearchOperation: BookmarkPagedOperation {
    public var pagingBookmark: String? {
        get { query.bookmark }
        set { query.bookmark = newValue }
    }
    public var pagingLimit: Int? {
        get { query.limit }
        set { query.limit = newValue }
    }
    public static func rows(of response: SearchResponse<Document>) -> [SearchRow<Document>] { response.rows }
    public static func bookmark(of response: SearchResponse<Document>) -> String? { response.bookmark }
}

/// One page of a bookmark-paged query.
public struct BookmarkPage<Row: Sendable>: Sendable {
    /// The rows of the page.
    public var rows: [Row]
    /// Pass to the next ``BookmarkPageOperation`` to continue; nil on the last page.
    public var next: String?
}

/// One page of `_find` or search, as an operation that can be queued like any other.
///
/// A page shorter than `pageSize` is the last one (CouchDB keeps answering with a bookmark, so the
/// end is told by the count).
public struct BookmarkPageOperation<Base: BookmarkPagedOperation>: WrappingOperation, IdempotentOperation {
    public typealias Response = BookmarkPage<Base.Row>

    /// The query to page through (its own limit and bookmark are replaced).
    public var base: Base
    /// Rows per page.
    public var pageSize: Int
    /// Where to continue; nil for the first page.
    public var bookmark: String?
    private var query: Base?

    public init(_ base: Base, pageSize: Int, bookmark: String? = nil) {
        self.base = base
        self.pageSize = pageSize
        self.bookmark = bookmark
    }

    public func validate() throws(CouchError) {
        try base.validate()
        guard pageSize > 0 else { throw CouchError.validation("pageSize must be at least 1 (got \(pageSize)).") }
    }

    public mutating func serialise() throws {
        var query = base
        query.pagingLimit = pageSize
        query.pagingBookmark = bookmark
        try query.serialise()
        self.query = query
    }

    /// The query as sent: the base with this page's range (once serialised).
    public var wrapped: Base { query ?? base }
    private var prepared: Base { wrapped }

    public func processResponse(data: Data, httpInfo: HTTPInfo) throws -> BookmarkPage<Base.Row> {
        let response = try prepared.processResponse(data: data, httpInfo: httpInfo)
        let rows = Base.rows(of: response)
        let last = rows.count < pageSize || Base.bookmark(of: response) == nil
        return BookmarkPage(rows: rows, next: last ? nil : Base.bookmark(of: response))
    }
}
