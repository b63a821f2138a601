import Foundation

/// What `GET /{db}/_partition/{partition}` says about one partition.
public struct PartitionInfo: Decodable, Sendable, Equatable {
    /// Sizes in bytes.
    public struct Sizes: Decodable, Sendable, Equatable {
        /// Live data in the partition.
        public var active: Int?
        /// Uncompressed size of its documents.
        public var external: Int?
    }

    /// The database.
    public var dbName: String
    /// The partition.
    public var partition: String
    /// Live documents in it.
    public var docCount: Int
    /// Deleted documents in it.
    public var docDelCount: Int
    /// Its sizes.
    public var sizes: Sizes?

    enum CodingKeys: String, CodingKey {
        case partition, sizes
        case dbName = "db_name"
        case docCount = "doc_count"
        case docDelCount = "doc_del_count"
    }
}

/// `GET /{db}/_partition/{partition}` — document counts and sizes of one partition of a
/// partitioned database.
public struct GetPartitionInfoOperation: JSONOperation {
    public typealias Response = PartitionInfo

    /// The database (created with `partitioned: true`).
    public var database: String
    /// The partition name (the part of the ids before `:`).
    public var partition: String

    public init(database: String, partition: String) {
        self.database = database
        self.partition = partition
    }

    public func validate() throws(CouchError) {
        try CouchValidation.validateDatabaseName(database)
        try CouchValidation.partition(partition)
    }

    public var endpoint: CouchPath { CouchPath(database, "_partition", partition) }
}
