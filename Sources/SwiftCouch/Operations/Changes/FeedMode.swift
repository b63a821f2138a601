import Foundation

/// How a one-response feed (`_changes`, `_db_updates`) answers.
///
/// Following a feed as a stream (`continuous`, `eventsource`) is not a one-response operation
/// and is not offered here.
public enum FeedMode: String, Sendable, Hashable, CaseIterable {
    /// Answer at once with what there is.
    case normal
    /// Wait until there is at least one change (or `timeout` passes), then answer.
    case longpoll
}

/// The query parameters shared by the feeds: `feed`, `since`, `timeout`, `heartbeat`.
struct FeedParameters: Sendable, Hashable {
    var feed: FeedMode
    var since: CouchSequence?
    var timeout: Int?
    var heartbeat: Int?

    func validate() throws(CouchError) {
        try CouchValidation.nonNegative(timeout, "timeout")
        try CouchValidation.positive(heartbeat, "heartbeat")
        if timeout != nil, heartbeat != nil {
            throw CouchError.validation("timeout and heartbeat cannot both be set; CouchDB ignores timeout then.")
        }
    }

    func add(to items: inout QueryParameters) {
        if feed != .normal { items.add("feed", feed.rawValue) }
        items.add("since", since?.queryValue)
        items.add("timeout", timeout)
        items.add("heartbeat", heartbeat)
    }
}
