import Foundation

/// A row that can be paged by key: its key (as JSON) and the id of the document that emitted it.
public protocol KeyedRow: Decodable, Sendable {
    /// The row's key, as JSON.
    var pagingKey: JSONValue { get }
    /// The id of the emitting document (the tie-breaker between equal keys in views).
    var pagingDocumentID: String? { get }
}

extension AllDocsRow: KeyedRow {
    public var pagingKey: JSONValue { .string(key) }
    public var pagingDocumentID: String? { id }
}

extension ViewRow: KeyedRow where Key: Encodable {
    public var pagingKey: JSONValue {
        guard let data = try? JSONBody.encode(key),
            let json = try? JSONDecoder().decode(JSONValue.self, from: data)
        else { return .null }
        return json
    }
    public var pagingDocumentID: String? { id }
}

/// An operation whose rows come ordered by key and can be paged with `startkey` (+
/// `startkey_docid`): `_all_docs`, `_design_docs`, `_local_docs`, partitioned `_all_docs` and
/// views.
public protocol KeyPagedOperation: JSONOperation where Response == ViewResponse<Row> {
    associatedtype Row: KeyedRow
    /// The key range of the query; paging sets its start, limit, skip and direction.
    var pagingRange: KeyRangeOptions { get set }
    /// Whether equal keys are told apart by document id (`startkey_docid`): true for views,
    /// false where keys are unique (`_all_docs`).
    var pagesByDocumentID: Bool { get }
}

extension AllDocsOperation: KeyPagedOperation {
    public typealias Row = AllDocsRow<Doc>
    public var pagingRange: KeyRangeOptions {
        get { options }
        set { options = newValue }
    }
    public var pagesByDocumentID: Bool { false }
}

extension QueryViewOperation: KeyPagedOperation where Key: Encodable {
    public var pagingRange: KeyRangeOptions {
        get { options.range }
        set { options.range = newValue }
    }
    public var pagesByDocumentID: Bool { true }
}

/// Where a page starts: serialisable (``rawValue`` is a URL-safe string) so an app can hand it to
/// a client and come back for the next page later.
public struct PageToken: Codable, Sendable, Hashable, RawRepresentable, CustomStringConvertible {
    /// Which way the page goes from the token.
    public enum Direction: String, Codable, Sendable, Hashable {
        /// The page that starts at this row (inclusive).
        case forward
        /// The page that ends just before this row.
        case backward
    }

    public var direction: Direction
    /// The key of the row the token points at.
    public var key: JSONValue
    /// The document id of that row (to tell equal view keys apart).
    public var documentID: String?

    public init(direction: Direction, key: JSONValue, documentID: String?) {
        self.direction = direction
        self.key = key
        self.documentID = documentID
    }

    /// What the string form encodes.
    private struct Payload: Codable {
        var direction: Direction
        var key: JSONValue
        var documentID: String?
    }

    /// A URL-safe base64 string of the token's JSON. (The token's `Codable` form is this string.)
    public var rawValue: String {
        let payload = Payload(direction: direction, key: key, documentID: documentID)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(payload)) ?? Data()
        return data.base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// Reads a token made by ``rawValue``; nil when the string is not one.
    public init?(rawValue: String) {
        var base64 = rawValue.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        guard let data = Data(base64Encoded: base64),
            let payload = try? JSONDecoder().decode(Payload.self, from: data)
        else { return nil }
        self.init(direction: payload.direction, key: payload.key, documentID: payload.documentID)
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let token = PageToken(rawValue: text) else {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(codingPath: decoder.codingPath, debugDescription: "Not a page token: \(text)"))
        }
        self = token
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    public var description: String { rawValue }

    public static func == (lhs: PageToken, rhs: PageToken) -> Bool {
        lhs.direction == rhs.direction && lhs.key == rhs.key && lhs.documentID == rhs.documentID
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(direction)
        hasher.combine(key)
        hasher.combine(documentID)
    }
}

/// One page of rows, with the tokens of the pages around it.
public struct KeyPage<Row: KeyedRow>: Sendable {
    /// The rows of the page, in the query's order.
    public var rows: [Row]
    /// The token of the next page, or nil on the last page.
    public var next: PageToken?
    /// The token of the previous page, or nil on the first page.
    public var previous: PageToken?
}

/// One page of a key-ordered query, as an operation that can be queued like any other.
///
/// It asks for `pageSize + 1` rows: the extra row, never shown, tells whether another page
/// follows and where it starts. Backward pages run the query in the opposite direction from the
/// first row of the current page (skipping it) and reverse the rows.
public struct KeyPageOperation<Base: KeyPagedOperation>: WrappingOperation, IdempotentOperation {
    public typealias Response = KeyPage<Base.Row>

    /// The query to page through (its `limit`, `skip` and `keys` must be unset).
    public var base: Base
    /// Rows per page.
    public var pageSize: Int
    /// Where the page starts; nil for the first page.
    public var token: PageToken?
    private var query: Base?

    public init(_ base: Base, pageSize: Int, token: PageToken? = nil) {
        self.base = base
        self.pageSize = pageSize
        self.token = token
    }

    public func validate() throws(CouchError) {
        try base.validate()
        guard pageSize > 0 else { throw CouchError.validation("pageSize must be at least 1 (got \(pageSize)).") }
        let range = base.pagingRange
        guard range.limit == nil, range.skip == nil else {
            throw CouchError.validation("Paging sets limit and skip itself; leave them unset on the query.")
        }
        guard range.keys == nil, range.key == nil else {
            throw CouchError.validation("Queries by key or keys are not paged by key range.")
        }
    }

    public mutating func serialise() throws {
        var query = base
        var range = base.pagingRange
        range.limit = pageSize + 1
        switch token?.direction {
        case nil:
            break
        case .forward?:
            range.startKey = token?.key
            range.startKeyDocID = base.pagesByDocumentID ? token?.documentID : nil
        case .backward?:
            range.descending = !(base.pagingRange.descending ?? false)
            range.startKey = token?.key
            range.startKeyDocID = base.pagesByDocumentID ? token?.documentID : nil
            range.skip = 1
            range.endKey = base.pagingRange.startKey
            range.endKeyDocID = base.pagingRange.startKeyDocID
            range.inclusiveEnd = true
        }
        query.pagingRange = range
        try query.serialise()
        self.query = query
    }

    /// The query as sent: the base with this page's range (once serialised).
    public var wrapped: Base { query ?? base }
    private var prepared: Base { wrapped }

    public func processResponse(data: Data, httpInfo: HTTPInfo) throws -> KeyPage<Base.Row> {
        let response = try prepared.processResponse(data: data, httpInfo: httpInfo)
        var rows = response.rows
        let more = rows.count > pageSize
        if more { rows.removeLast(rows.count - pageSize) }
        func pointer(_ row: Base.Row?, _ direction: PageToken.Direction) -> PageToken? {
            row.map { PageToken(direction: direction, key: $0.pagingKey, documentID: $0.pagingDocumentID) }
        }
        if token?.direction == .backward {
            rows.reverse()
            // Going back from a page, the rows after this page exist: they are that page.
            return KeyPage(
                rows: rows, next: token.map { PageToken(direction: .forward, key: $0.key, documentID: $0.documentID) },
                previous: more ? pointer(rows.first, .backward) : nil)
        }
        let extra = more ? response.rows[pageSize] : nil
        return KeyPage(
            rows: rows, next: pointer(extra, .forward),
            previous: token == nil ? nil : pointer(rows.first, .backward))
    }
}
