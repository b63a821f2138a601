import Foundation

/// One event of `_db_updates`: a database was created, updated or deleted.
public struct DatabaseUpdate: Codable, Sendable, Equatable {
    /// The database.
    public var dbName: String
    /// `created`, `updated` or `deleted`.
    public var type: String
    /// The position of this event in the feed.
    public var seq: CouchSequence?

    enum CodingKeys: String, CodingKey {
        case type, seq
        case dbName = "db_name"
    }
}

/// What `GET /_db_updates` answers.
public struct DatabaseUpdates: Decodable, Sendable, Equatable {
    /// The events, oldest first.
    public var results: [DatabaseUpdate]
    /// Where the next request should continue (`since`).
    public var lastSeq: CouchSequence

    enum CodingKeys: String, CodingKey {
        case results
        case lastSeq = "last_seq"
    }
}

/// `GET /_db_updates` — database creations, updates and deletions across the server (server
/// admins only), as one response (`feed=normal` or `longpoll`).
public struct GetDatabaseUpdatesOperation: JSONOperation {
    public typealias Response = DatabaseUpdates

    /// Answer at once (`normal`) or wait for an event (`longpoll`). Defaults to `.normal`.
    public var feed: FeedMode
    /// Start after this sequence (``CouchSequence/now`` for only new events). Defaults to nil
    /// (from the beginning).
    public var since: CouchSequence?
    /// How long a longpoll waits for an event, in milliseconds. Defaults to nil (the server's
    /// 60 seconds).
    public var timeout: Int?
    /// Send a newline every this many milliseconds while waiting, to keep the connection open.
    /// Defaults to nil (none).
    public var heartbeat: Int?

    public init(
        feed: FeedMode = .normal, since: CouchSequence? = nil, timeout: Int? = nil, heartbeat: Int? = nil
    ) {
        self.feed = feed
        self.since = since
        self.timeout = timeout
        self.heartbeat = heartbeat
    }

    public func validate() throws(CouchError) {
        try feedParameters.validate()
    }

    public var endpoint: CouchPath { CouchPath("_db_updates") }

    public var parameters: [URLQueryItem] {
        var items = QueryParameters()
        feedParameters.add(to: &items)
        return items.queryItems
    }

    private var feedParameters: FeedParameters {
        FeedParameters(feed: feed, since: since, timeout: timeout, heartbeat: heartbeat)
    }
}
