import Foundation
import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

/// The bulk writer takes a document's `_id` and `_rev` from what the encoder recorded while writing
/// it, and reads them from the bytes only when the recording cannot tell: both must always agree.
@Suite("FastJSON: the _id and _rev a document writes, recorded while it is encoded", .ownThreads)
struct RecordedIDAndRevTests {
    private struct Plain: Encodable {
        var _id: String?
        var _rev: String?
        var n = 1
        var inner: Inner? = nil
    }

    private struct Inner: Encodable {
        var _id = "nested"
        var _rev = "9-nested"
    }

    /// Writes `_id` and `_rev` in the ways a hand-written `encode(to:)` may.
    private struct Custom: Encodable {
        enum Way { case null, number, generic, late, nestedContainer }
        var way: Way

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: DynamicCodingKey.self)
            switch way {
            case .null: try container.encodeNil(forKey: DynamicCodingKey("_id"))
            case .number: try container.encode(7, forKey: DynamicCodingKey("_rev"))
            case .generic: try container.encode(Optional("g"), forKey: DynamicCodingKey("_id"))
            case .late:
                try container.encode(1, forKey: DynamicCodingKey("n"))
                try container.encode("late", forKey: DynamicCodingKey("_id"))
            case .nestedContainer:
                var nested = container.nestedContainer(keyedBy: DynamicCodingKey.self, forKey: DynamicCodingKey("_id"))
                try nested.encode("x", forKey: DynamicCodingKey("a"))
            }
            try container.encode("after", forKey: DynamicCodingKey("text"))
        }
    }

    /// What the writer would use, and what the bytes say.
    private func both(_ document: some Encodable) throws -> (recorded: [String?]?, read: [String?]?) {
        var bytes: [UInt8] = []
        let recorded = try JSONBody.appendDocument(document, to: &bytes).map { [$0.id, $0.rev] }
        let read = bytes.withUnsafeBufferPointer { TopLevelStrings.find(.idAndRev, in: $0) }
        return (recorded, read)
    }

    @Test func theUsualShapesAreRecordedAndAgreeWithTheBytes() throws {
        let documents = [
            Plain(_id: "a", _rev: "1-x"), Plain(_id: "a"), Plain(_rev: "2-y"), Plain(),
            Plain(_id: "a\"b\\c\u{e9}", _rev: nil, inner: Inner()), Plain(inner: Inner()),
        ]
        for document in documents {
            let (recorded, read) = try both(document)
            #expect(recorded != nil, "\(document)")
            #expect(recorded == read, "\(document)")
        }
        #expect(
            try both(Plain(inner: Inner())).recorded == [nil, nil], "a nested object's members are not the document's")
        #expect(try both(Custom(way: .late)).recorded == ["late", nil])
    }

    /// Keys are recognised from their written bytes: only `_id` and `_rev` themselves count, not
    /// keys of the same length or with the same start, nor keys whose escapes make them that long.
    @Test func onlyTheKeysThemselvesAreRecognised() throws {
        struct Keys: Encodable {
            var keys: [String]
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: DynamicCodingKey.self)
                for key in keys { try container.encode("v-\(key)", forKey: DynamicCodingKey(key)) }
            }
        }
        let lookalikes = ["_ix", "_Id", "xid", "_i\"", "_\n", "_re", "_rew", "_revs", "rev", "_r\t", "_id ", "id"]
        for key in lookalikes {
            let (recorded, read) = try both(Keys(keys: [key]))
            #expect(recorded == [nil, nil], "\(key)")
            #expect(read == [nil, nil], "\(key)")
        }
        let (recorded, read) = try both(Keys(keys: lookalikes + ["_rev", "_id"]))
        #expect(recorded == ["v-_id", "v-_rev"])
        #expect(read == recorded)
    }

    @Test func whatTheRecordingCannotTellIsLeftToTheBytes() throws {
        for way in [Custom.Way.null, .number, .generic, .nestedContainer] {
            let (recorded, read) = try both(Custom(way: way))
            #expect(recorded == nil, "\(way)")
            switch way {
            case .null: #expect(read == [nil, nil])
            case .generic: #expect(read == ["g", nil])
            case .number, .nestedContainer: #expect(read == nil, "not a string: refused")
            case .late: break
            }
        }
        // Written by Foundation (the fast encoder refuses Decimal): nothing recorded.
        struct WithDecimal: Encodable {
            var _id = "d"
            var price = Decimal(string: "1.10")!
        }
        let (recorded, read) = try both(WithDecimal())
        #expect(recorded == nil)
        #expect(read == ["d", nil])
    }
}
