import Foundation

/// The fast JSON path with Foundation behind it: ``FastJSONEncoder`` and ``FastJSONDecoder`` handle the
/// common shapes of documents; whatever they do not handle exactly (they throw, or mark the attempt
/// unsupported) is redone by Foundation's `JSONEncoder` / `JSONDecoder`, configured as the package
/// configures them, so the caller always gets Foundation's value or Foundation's error.
enum FastJSON {
    /// Thrown (and recorded) by the fast encoder and decoder for anything they do not reproduce exactly;
    /// the wrappers below then use Foundation.
    struct Unsupported: Error, CustomStringConvertible {
        let reason: String
        init(_ reason: String) { self.reason = reason }
        var description: String { "FastJSON.Unsupported(\(reason))" }
    }

    /// The JSON text of `value`, byte for byte what `JSONBody`'s Foundation encoder writes for
    /// `dateCoding` (except that members of objects come in the order they were encoded, where
    /// Foundation's order is that of a `Dictionary`).
    static func encode<T: Encodable>(_ value: T, dateCoding: DateCoding) throws -> Data {
        try encodeReportingPath(value, dateCoding: dateCoding).data
    }

    /// ``encode(_:dateCoding:)`` appending to `buffer` (left as it was when an error is thrown).
    static func encode<T: Encodable>(_ value: T, dateCoding: DateCoding, into buffer: inout [UInt8]) throws {
        let mark = buffer.count
        do {
            try FastJSONEncoder.encode(value, dateCoding: dateCoding, into: &buffer)
        } catch {
            buffer.removeSubrange(mark...)
            let data = try JSONBody.foundationEncoder(for: dateCoding).encode(value)
            buffer.append(contentsOf: data)
        }
    }

    /// ``encode(_:dateCoding:)``, saying whether the fast path wrote it (for tests).
    static func encodeReportingPath<T: Encodable>(_ value: T, dateCoding: DateCoding) throws -> (
        data: Data, fast: Bool
    ) {
        do {
            return (try FastJSONEncoder.encode(value, dateCoding: dateCoding), true)
        } catch {
            return (try JSONBody.foundationEncoder(for: dateCoding).encode(value), false)
        }
    }

    /// The value of `type` in `data`: the fast decoder's, or Foundation's value or error.
    static func decode<T: Decodable>(_ type: T.Type, from data: Data, dateCoding: DateCoding) throws -> T {
        try decodeReportingPath(type, from: data, dateCoding: dateCoding).value
    }

    /// ``decode(_:from:dateCoding:)`` over bytes.
    static func decode<T: Decodable>(
        _ type: T.Type, from bytes: UnsafeRawBufferPointer, dateCoding: DateCoding
    ) throws -> T {
        do {
            return try FastJSONDecoder.decode(type, from: bytes, dateCoding: dateCoding)
        } catch {
            return try foundationDecoder(for: dateCoding).decode(type, from: Data(bytes))
        }
    }

    /// ``decode(_:from:dateCoding:)``, saying whether the fast path produced the value (for tests).
    static func decodeReportingPath<T: Decodable>(
        _ type: T.Type, from data: Data, dateCoding: DateCoding
    ) throws -> (value: T, fast: Bool) {
        do {
            let value = try data.withUnsafeBytes { try FastJSONDecoder.decode(type, from: $0, dateCoding: dateCoding) }
            return (value, true)
        } catch {
            return (try foundationDecoder(for: dateCoding).decode(type, from: data), false)
        }
    }

    /// One value of `type` from each of `ranges` of `bytes` (rows of a streamed response), decoded with one
    /// decoder; a slice the fast path cannot take is decoded by Foundation, whose error is thrown.
    static func decode<T: Decodable>(
        _ type: T.Type, from bytes: UnsafeRawBufferPointer, ranges: [Range<Int>], dateCoding: DateCoding
    ) throws -> [T] {
        var results: [T] = []
        results.reserveCapacity(ranges.count)
        var decoder = FastJSONDecoder(dateCoding: dateCoding)
        for range in ranges {
            do {
                results.append(try decoder.decode(type, from: bytes, range: range))
            } catch {
                let slice = UnsafeRawBufferPointer(rebasing: bytes[range])
                results.append(try foundationDecoder(for: dateCoding).decode(type, from: Data(slice)))
            }
        }
        return results
    }

    /// A Foundation decoder configured like `JSONDecoder.couch` for `coding`.
    static func foundationDecoder(for coding: DateCoding) -> JSONDecoder {
        decoders[coding]!
    }

    private static let decoders: [DateCoding: JSONDecoder] = {
        var decoders: [DateCoding: JSONDecoder] = [:]
        for coding in [DateCoding.iso8601, .secondsSince1970, .millisecondsSince1970, .foundationDefault] {
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = coding.decodingStrategy
            decoders[coding] = decoder
        }
        return decoders
    }()
}

/// A coding key for an index in an unkeyed container or a member named at run time.
struct FastJSONKey: CodingKey {
    var stringValue: String
    var intValue: Int?

    init(stringValue: String) {
        self.stringValue = stringValue
        self.intValue = nil
    }

    init(intValue: Int) {
        self.stringValue = "\(intValue)"
        self.intValue = intValue
    }

    init(index: Int) {
        self.stringValue = "Index \(index)"
        self.intValue = index
    }
}
