import Foundation

/// A node's statistics: a tree of groups whose leaves are metrics.
///
/// `stats["couchdb", "request_time"]?.metric?.value` walks the tree by name.
public enum NodeStatistics: Decodable, Sendable, Equatable {
    /// One measured value.
    public struct Metric: Decodable, Sendable, Equatable {
        /// `counter`, `gauge` or `histogram`.
        public var type: String
        /// A number for counters and gauges; an object (`min`, `max`, `percentile`, ...) for
        /// histograms.
        public var value: JSONValue
        /// What it measures.
        public var desc: String?
    }

    /// A metric (a leaf of the tree).
    case metric(Metric)
    /// A group of named statistics.
    case group([String: NodeStatistics])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: DynamicCodingKey.self)
        let keys = Set(container.allKeys.map(\.stringValue))
        if keys.contains("type"), keys.contains("value"),
            (try? container.decode(String.self, forKey: DynamicCodingKey("type"))) != nil
        {
            self = .metric(try Metric(from: decoder))
        } else {
            self = .group(try [String: NodeStatistics](from: decoder))
        }
    }

    /// The metric, when this is a leaf.
    public var metric: Metric? {
        if case .metric(let metric) = self { return metric }
        return nil
    }

    /// The statistic at `path` below this one, e.g. `stats["couchdb", "httpd", "requests"]`.
    public subscript(path: String...) -> NodeStatistics? {
        var current: NodeStatistics? = self
        for name in path {
            guard case .group(let children)? = current else { return nil }
            current = children[name]
        }
        return current
    }
}

/// `GET /_node/{node}/_stats[/{group}/{metric}…]` — a node's statistics (server admins only).
public struct GetNodeStatisticsOperation: JSONOperation {
    public typealias Response = NodeStatistics

    /// The node (`_local` for the one that answers). Defaults to `_local`.
    public var node: String
    /// Only the statistics below this path, e.g. `["couchdb", "request_time"]`. Defaults to `[]`
    /// (all).
    public var path: [String]

    public init(node: String = "_local", path: [String] = []) {
        self.node = node
        self.path = path
    }

    public func validate() throws(CouchError) {
        try CouchValidation.notEmpty(node, "node")
        if path.contains(where: \.isEmpty) { throw CouchError.validation("path must not contain empty names.") }
    }

    public var endpoint: CouchPath { CouchPath(segments: ["_node", node, "_stats"] + path) }
}

/// What `GET /_node/{node}/_system` says about the Erlang VM of a node.
public struct NodeSystemInfo: Decodable, Sendable, Equatable {
    /// Seconds since the node started.
    public var uptime: Int?
    /// Memory use in bytes by kind (`processes`, `ets`, `binary`, `code`, `atom`, `other`, ...).
    public var memory: [String: Int]?
    /// Processes waiting to run.
    public var runQueue: Int?
    /// Open ETS tables.
    public var etsTableCount: Int?
    /// Context switches since start.
    public var contextSwitches: Int?
    /// Reductions since start.
    public var reductions: Int?
    /// Garbage collections since start.
    public var garbageCollectionCount: Int?
    /// Words reclaimed by garbage collection.
    public var wordsReclaimed: Int?
    /// Bytes read from ports.
    public var ioInput: Int?
    /// Bytes written to ports.
    public var ioOutput: Int?
    /// Running JavaScript query-server processes.
    public var osProcessCount: Int?
    /// Query-server processes waiting to be cleaned up.
    public var staleProcessCount: Int?
    /// Erlang processes.
    public var processCount: Int?
    /// The most Erlang processes allowed.
    public var processLimit: Int?
    /// Message-queue lengths of named processes (numbers or objects per process).
    public var messageQueues: [String: JSONValue]?
    /// Internal replication jobs waiting.
    public var internalReplicationJobs: Int?
    /// Distribution (inter-node) statistics, free-form.
    public var distribution: JSONValue?

    enum CodingKeys: String, CodingKey {
        case uptime, memory, reductions, distribution
        case runQueue = "run_queue"
        case etsTableCount = "ets_table_count"
        case contextSwitches = "context_switches"
        case garbageCollectionCount = "garbage_collection_count"
        case wordsReclaimed = "words_reclaimed"
        case ioInput = "io_input"
        case ioOutput = "io_output"
        case osProcessCount = "os_proc_count"
        case staleProcessCount = "stale_proc_count"
        case processCount = "process_count"
        case processLimit = "process_limit"
        case messageQueues = "message_queues"
        case internalReplicationJobs = "internal_replication_jobs"
    }
}

/// `GET /_node/{node}/_system` — memory, process and I/O figures of a node's Erlang VM (server
/// admins only).
public struct GetNodeSystemOperation: JSONOperation {
    public typealias Response = NodeSystemInfo

    /// The node (`_local` for the one that answers). Defaults to `_local`.
    public var node: String

    public init(node: String = "_local") { self.node = node }

    public func validate() throws(CouchError) { try CouchValidation.notEmpty(node, "node") }
    public var endpoint: CouchPath { CouchPath("_node", node, "_system") }
}
