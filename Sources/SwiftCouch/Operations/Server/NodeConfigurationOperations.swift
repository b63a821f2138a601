import Foundation

/// The path of a node's configuration: `/_node/{node}/_config[/section[/key]]`.
///
/// Use `_local` (the default everywhere) for the node that answers the request.
enum NodeConfigPath {
    static func path(node: String, _ rest: String...) -> CouchPath {
        CouchPath(segments: ["_node", node, "_config"] + rest)
    }

    static func validate(node: String, section: String? = nil, key: String? = nil) throws(CouchError) {
        try CouchValidation.notEmpty(node, "node")
        if let section { try CouchValidation.notEmpty(section, "section") }
        if let key { try CouchValidation.notEmpty(key, "key") }
    }
}

/// `GET /_node/{node}/_config` — the whole configuration of a node: section → key → value
/// (server admins only). Every value is a string, as in the `.ini` files.
public struct GetConfigurationOperation: JSONOperation {
    public typealias Response = [String: [String: String]]

    /// The node (`_local` for the one that answers). Defaults to `_local`.
    public var node: String

    public init(node: String = "_local") { self.node = node }

    public func validate() throws(CouchError) { try NodeConfigPath.validate(node: node) }
    public var endpoint: CouchPath { NodeConfigPath.path(node: node) }
}

/// `GET /_node/{node}/_config/{section}` — one configuration section: key → value.
public struct GetConfigurationSectionOperation: JSONOperation {
    public typealias Response = [String: String]

    /// The node (`_local` for the one that answers). Defaults to `_local`.
    public var node: String
    /// The section, e.g. `couchdb` or `cors`.
    public var section: String

    public init(section: String, node: String = "_local") {
        self.section = section
        self.node = node
    }

    public func validate() throws(CouchError) { try NodeConfigPath.validate(node: node, section: section) }
    public var endpoint: CouchPath { NodeConfigPath.path(node: node, section) }
}

/// `GET /_node/{node}/_config/{section}/{key}` — one configuration value (404 when unset).
public struct GetConfigurationValueOperation: JSONOperation {
    public typealias Response = String

    /// The node (`_local` for the one that answers). Defaults to `_local`.
    public var node: String
    /// The section, e.g. `couchdb`.
    public var section: String
    /// The key, e.g. `max_document_size`.
    public var key: String

    public init(section: String, key: String, node: String = "_local") {
        self.section = section
        self.key = key
        self.node = node
    }

    public func validate() throws(CouchError) {
        try NodeConfigPath.validate(node: node, section: section, key: key)
    }
    public var endpoint: CouchPath { NodeConfigPath.path(node: node, section, key) }
}

/// `PUT /_node/{node}/_config/{section}/{key}` — sets one configuration value; answers the
/// previous value (`""` when there was none).
///
/// The body is the value as a JSON string (`"true"`, `"4294967296"`): CouchDB keeps every
/// configuration value as text.
public struct SetConfigurationValueOperation: JSONOperation, IdempotentOperation {
    public typealias Response = String

    /// The node (`_local` for the one that answers). Defaults to `_local`.
    public var node: String
    /// The section, e.g. `couchdb`.
    public var section: String
    /// The key, e.g. `max_document_size`.
    public var key: String
    /// The new value, as text.
    public var value: String

    private var body: Data?

    public init(section: String, key: String, value: String, node: String = "_local") {
        self.section = section
        self.key = key
        self.value = value
        self.node = node
    }

    public func validate() throws(CouchError) {
        try NodeConfigPath.validate(node: node, section: section, key: key)
    }

    public mutating func serialise() throws { body = try JSONBody.encode(value) }

    public var endpoint: CouchPath { NodeConfigPath.path(node: node, section, key) }
    public var method: HTTPMethod { .put }
    public var data: Data? { body }
}

/// `DELETE /_node/{node}/_config/{section}/{key}` — removes one configuration value; answers the
/// value it had (404 when unset).
public struct DeleteConfigurationValueOperation: JSONOperation, IdempotentOperation {
    public typealias Response = String

    /// The node (`_local` for the one that answers). Defaults to `_local`.
    public var node: String
    /// The section.
    public var section: String
    /// The key.
    public var key: String

    public init(section: String, key: String, node: String = "_local") {
        self.section = section
        self.key = key
        self.node = node
    }

    public func validate() throws(CouchError) {
        try NodeConfigPath.validate(node: node, section: section, key: key)
    }
    public var endpoint: CouchPath { NodeConfigPath.path(node: node, section, key) }
    public var method: HTTPMethod { .delete }
}
