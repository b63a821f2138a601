import Foundation

/// Reads one JSON object member by member, for the library's own row and result types (``AllDocsRow``,
/// ``ViewRow``, ``BulkWriteResult``) when ``FastJSONDecoderImpl`` decodes them: no keyed container,
/// whose generic metadata and box cost more per row than reading the members.
///
/// It answers only what it answers exactly as the Codable path would. A read that finds something
/// other than what the type expects (a missing required member, a number where a string belongs)
/// returns nil, and the type then decodes through its keyed container, which gives the same values
/// and Foundation's errors. Member values of the caller's own types (a row's document, key, value) go
/// through ``FastJSONDecoderImpl/decodeValue(_:token:ref:key:)`` with the coding path a keyed
/// container gives them, so what their `init(from:)` sees and throws is unchanged; callers check every
/// member they can before decoding one of those, so nothing is decoded twice.
struct FastJSONObjectReader {
    private let impl: FastJSONDecoderImpl
    private let object: Int
    /// The coding path of this object (as a container's `ref`); nil for a nested object read without one.
    private let ref: Int32?

    /// A reader of the object being decoded, or nil when `decoder` is not the fast decoder or the value
    /// is not an object.
    init?(_ decoder: any Decoder) {
        guard let impl = decoder as? FastJSONDecoderImpl, impl.tokens[impl.current].kind == .object else {
            return nil
        }
        self.impl = impl
        object = impl.current
        ref = Int32(impl.path.count)
    }

    /// A reader of the object at token `object`, with no coding path (for objects read without a
    /// container: nested values, the elements of a `_bulk_docs` answer).
    init(impl: FastJSONDecoderImpl, object: Int) {
        self.impl = impl
        self.object = object
        ref = nil
    }

    /// Whether the object has a member `key` (null or not).
    func contains<K: CodingKey>(_ key: K) -> Bool {
        impl.member(object, named: key.stringValue) != nil
    }

    /// The string in member `key`; nil when it is missing, null or not a string.
    func string<K: CodingKey>(_ key: K) -> String? {
        optionalString(key) ?? nil
    }

    /// `.some(nil)` when member `key` is missing or null, `.some(text)` for a string, nil for anything else.
    func optionalString<K: CodingKey>(_ key: K) -> String?? {
        guard let token = impl.member(object, named: key.stringValue) else { return .some(nil) }
        switch impl.tokens[token].kind {
        case .null: return .some(nil)
        case .string: return .some(impl.stringValue(impl.tokens[token]))
        default: return nil
        }
    }

    /// `.some(nil)` when member `key` is missing or null, `.some(flag)` for a Boolean, nil for anything else.
    func optionalBool<K: CodingKey>(_ key: K) -> Bool?? {
        guard let token = impl.member(object, named: key.stringValue) else { return .some(nil) }
        switch impl.tokens[token].kind {
        case .null: return .some(nil)
        case .bool: return .some(impl.tokens[token].flags & FastJSONDecoderImpl.trueFlag != 0)
        default: return nil
        }
    }

    /// `.some(nil)` when member `key` is missing or null, `.some(reader)` for an object, nil for anything
    /// else. The nested reader reads strings and Booleans only (it has no coding path to decode with).
    func optionalObject<K: CodingKey>(_ key: K) -> FastJSONObjectReader?? {
        guard let token = impl.member(object, named: key.stringValue) else { return .some(nil) }
        switch impl.tokens[token].kind {
        case .null: return .some(nil)
        case .object: return .some(FastJSONObjectReader(impl: impl, object: token))
        default: return nil
        }
    }

    /// The value of `type` in member `key`, as a keyed container's `decode(_:forKey:)` gives it (the
    /// member must exist: check with ``contains(_:)`` first).
    func decode<T: Decodable, K: CodingKey>(_ type: T.Type, _ key: K) throws -> T {
        guard let ref, let token = impl.member(object, named: key.stringValue) else {
            throw FastJSON.Unsupported("a member read without its check")
        }
        return try impl.decodeValue(type, token: token, ref: ref, key: key)
    }

    /// The value of `type` in member `key`, or nil when it is missing or null, as a keyed container's
    /// `decodeIfPresent(_:forKey:)` gives it.
    func decodeIfPresent<T: Decodable, K: CodingKey>(_ type: T.Type, _ key: K) throws -> T? {
        guard let ref else { throw FastJSON.Unsupported("a nested member decoded without a coding path") }
        guard let token = impl.memberIfPresent(object, named: key.stringValue) else { return nil }
        return try impl.decodeValue(type, token: token, ref: ref, key: key)
    }
}
