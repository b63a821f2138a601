import Foundation

/// Throughput capacity of an IBM Cloudant instance, in operations per second per request class.
public struct ThroughputCapacity: Codable, Sendable, Equatable {
    /// Blocks of provisioned capacity (one block is 100 reads, 50 writes and 5 global queries
    /// per second). Absent where the plan has no blocks and in current-usage figures.
    public var blocks: Int?
    /// Global queries per second.
    public var query: Int
    /// Reads per second.
    public var read: Int
    /// Writes per second.
    public var write: Int

    public init(blocks: Int? = nil, query: Int, read: Int, write: Int) {
        self.blocks = blocks
        self.query = query
        self.read = read
        self.write = write
    }
}

/// The provisioned throughput of an IBM Cloudant instance: what it has now and what it is
/// changing to (the two match once a change is complete).
public struct ProvisionedThroughput: Decodable, Sendable, Equatable {
    /// The capacity in force now.
    public var current: ThroughputCapacity
    /// The capacity asked for.
    public var target: ThroughputCapacity

    /// Whether a capacity change is still under way.
    public var isChanging: Bool { current != target }

    private struct Wrapper: Decodable {
        var throughput: ThroughputCapacity
    }

    enum CodingKeys: String, CodingKey {
        case current, target
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        current = try container.decode(Wrapper.self, forKey: .current).throughput
        target = try container.decode(Wrapper.self, forKey: .target).throughput
    }
}

/// `GET /_api/v2/user/capacity/throughput` — IBM Cloudant: the current and target provisioned
/// throughput capacity.
public struct GetProvisionedThroughputOperation: JSONOperation {
    public typealias Response = ProvisionedThroughput
    public init() {}
    public var endpoint: CouchPath { CouchPath("_api", "v2", "user", "capacity", "throughput") }
}

/// `PUT /_api/v2/user/capacity/throughput` — IBM Cloudant: sets the target provisioned throughput
/// in blocks; the current capacity follows asynchronously.
public struct SetProvisionedThroughputOperation: JSONOperation, IdempotentOperation {
    public typealias Response = ProvisionedThroughput

    /// The number of capacity blocks to provision (at least 1).
    public var blocks: Int

    private var body: Data?

    public init(blocks: Int) { self.blocks = blocks }

    public func validate() throws(CouchError) { try CouchValidation.positive(blocks, "blocks") }
    public mutating func serialise() throws { body = try JSONBody.encode(["blocks": blocks]) }

    public var endpoint: CouchPath { CouchPath("_api", "v2", "user", "capacity", "throughput") }
    public var method: HTTPMethod { .put }
    public var data: Data? { body }
}

/// `GET /_api/v2/user/current/throughput` — IBM Cloudant: the throughput consumed in the current
/// second, per request class.
public struct GetCurrentThroughputOperation: JSONOperation {
    /// The body: `{"throughput": {...}}`.
    public struct Usage: Decodable, Sendable, Equatable {
        /// Operations per second used now.
        public var throughput: ThroughputCapacity
    }

    public typealias Response = Usage
    public init() {}
    public var endpoint: CouchPath { CouchPath("_api", "v2", "user", "current", "throughput") }
}
