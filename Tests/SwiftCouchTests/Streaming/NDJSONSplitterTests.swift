import Foundation
import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

@Suite(.ownThreads) struct NDJSONSplitterTests {
    func split(_ bytes: [UInt8], cuts: [Int]) throws -> [Data] {
        var splitter = NDJSONSplitter()
        var lines: [Data] = []
        var start = 0
        for cut in cuts + [bytes.count] where cut >= start {
            lines += try splitter.feed(bytes[start..<cut])
            start = cut
        }
        if let last = splitter.finish() { lines.append(last) }
        return lines
    }

    @Test func linesWithLFAndCRLFAndHeartbeats() throws {
        let text = "\n{\"seq\":1,\"id\":\"a\"}\n\n\r\n{\"seq\":2,\"id\":\"b\"}\r\n  \n{\"last_seq\":2}"
        let expected = ["{\"seq\":1,\"id\":\"a\"}", "{\"seq\":2,\"id\":\"b\"}", "{\"last_seq\":2}"].map {
            Data($0.utf8)
        }
        let bytes = Array(text.utf8)
        #expect(try split(bytes, cuts: []) == expected)
        for cut in 0...bytes.count { #expect(try split(bytes, cuts: [cut]) == expected, "split at \(cut)") }
        #expect(try split(bytes, cuts: Array(0..<bytes.count)) == expected)
    }

    @Test func finishReturnsOnlyANonBlankLastLine() throws {
        var splitter = NDJSONSplitter()
        #expect(try splitter.feed(Data("{\"a\":1}\n\n\n".utf8)) == [Data("{\"a\":1}".utf8)])
        #expect(splitter.finish() == nil)
        #expect(try splitter.feed(Array("{\"b\"".utf8)).isEmpty)
        #expect(try splitter.feed(Array(":2}".utf8)).isEmpty)
        #expect(splitter.finish() == Data("{\"b\":2}".utf8))
        #expect(splitter.finish() == nil)
    }

    @Test func continuousChangesFromTheTranscripts() throws {
        let data = try Data(contentsOf: StreamFixtures.transcripts.appendingPathComponent("changes.json"))
        let root = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let steps = try #require(root["steps"] as? [[String: Any]])
        let step = try #require(steps.first { $0["name"] as? String == "s19" })
        let response = try #require(step["response"] as? [String: Any])
        let text = try #require(response["body_text"] as? String)
        let values = try #require(response["body"] as? [Any])
        let bytes = Array(text.utf8)
        var generator = SeededGenerator(seed: 3)
        for _ in 0..<50 {
            let cuts = (0..<4).map { _ in Int.random(in: 0...bytes.count, using: &generator) }.sorted()
            let lines = try split(bytes, cuts: cuts)
            #expect(lines.count == values.count)
            for (line, value) in zip(lines, values) {
                let parsed = try JSONSerialization.jsonObject(with: line)
                #expect(StreamFixtures.json(parsed) == StreamFixtures.json(value))
            }
        }
        // The heartbeat-only feed yields nothing.
        let heartbeat = try #require(steps.first { $0["name"] as? String == "s20" })
        let beats = try #require((heartbeat["response"] as? [String: Any])?["body_text"] as? String)
        #expect(try split(Array(beats.utf8), cuts: [1, 2, 3]).isEmpty)
    }

    @Test func memoryStaysFlat() throws {
        var splitter = NDJSONSplitter()
        var count = 0
        var maximum = 0
        var chunk: [UInt8] = []
        for i in 0..<100_000 {
            chunk += Array("{\"seq\":\"\(i)-g1AAAA\",\"id\":\"doc\(i)\",\"changes\":[{\"rev\":\"1-abc\"}]}\n".utf8)
            if i % 50 == 0 { chunk += [0x0A] }
            if chunk.count >= 4000 {
                count += try splitter.feed(chunk).count
                maximum = max(maximum, splitter.bufferedByteCount)
                chunk.removeAll(keepingCapacity: true)
            }
        }
        count += try splitter.feed(chunk).count
        #expect(splitter.finish() == nil)
        #expect(count == 100_000)
        #expect(maximum < 1024)
    }
}
