import CouchStore
import Foundation
import HTTPWire

/// A database and a list of read requests whose answers the streamed responses must keep byte for byte: the
/// same scenario was run on the engine before its row responses streamed (commit 6cc28a5, when they were built
/// whole) and each answer's status, length and digest recorded in ``StreamedResponseTests``.
enum StreamedResponseScenario {
    /// How many documents the database holds (design documents aside): more than two batches.
    static let documentCount = 2_500

    struct Answer: Sendable {
        var status: Int
        var body: Data
        /// The body as the engine returned it: `.data` when built whole, `.stream` when streamed.
        var streamed: Bool
        /// The chunks a streamed body was written in.
        var chunks: [Data]
        /// Whether the producer cut the streamed body short.
        var aborted = false
    }

    /// Sends one request to `engine` and collects its answer.
    static func send(_ engine: CouchEngine, _ method: String, _ target: String, json: String? = nil) -> Answer {
        var headers = HTTPHeaders()
        var body = Data()
        if let json {
            body = Data(json.utf8)
            headers.add("Content-Type", "application/json")
        }
        let parts = target.split(separator: "?", maxSplits: 1).map(String.init)
        let response = engine.handle(
            ServerRequest(
                method: method, rawPath: parts[0], rawQuery: parts.count > 1 ? parts[1] : nil, headers: headers,
                body: body),
            user: .admin)
        switch response.body {
        case .empty: return Answer(status: response.status, body: Data(), streamed: false, chunks: [])
        case .data(let data): return Answer(status: response.status, body: data, streamed: false, chunks: [data])
        case .stream(let produce):
            let collector = ChunkList()
            produce(collector)
            return Answer(
                status: response.status, body: collector.chunks.reduce(into: Data()) { $0.append($1) }, streamed: true,
                chunks: collector.chunks, aborted: collector.aborted)
        }
    }

    final class ChunkList: ChunkWriter, @unchecked Sendable {
        // @unchecked: written only by the producer running synchronously in `send`.
        var chunks: [Data] = []
        var aborted = false
        func write(_ data: Data) -> Bool {
            chunks.append(data)
            return true
        }
        func abort() { aborted = true }
    }

    /// 64-bit FNV-1a of `data`, to compare large bodies by digest.
    static func digest(_ data: Data) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in data {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        return hash
    }

    /// Fills database `s` of `engine`: documents (some with attachments, some deleted, some in conflict), a
    /// JavaScript design document with a map view and a reduce view, and a Mango index on `n`.
    static func populate(_ engine: CouchEngine) {
        _ = send(engine, "PUT", "/s")
        var docs: [String] = []
        for n in 0..<documentCount {
            let id = String(format: "d%04d", n)
            var doc = "{\"_id\":\"\(id)\",\"n\":\(n),\"tag\":\(n % 7),\"text\":\"row \(n) of the scenario\""
            if n % 500 == 3 {
                let data = Data("attachment of \(id) ".utf8).base64EncodedString()
                doc += ",\"_attachments\":{\"a.txt\":{\"content_type\":\"text/plain\",\"data\":\"\(data)\"}}"
            }
            docs.append(doc + "}")
        }
        for start in stride(from: 0, to: docs.count, by: 1000) {
            let batch = docs[start..<min(start + 1000, docs.count)].joined(separator: ",")
            _ = send(engine, "POST", "/s/_bulk_docs", json: "{\"docs\":[\(batch)]}")
        }
        // Conflicts: a second branch written as a replicator writes it.
        for n in [7, 1200, 2401] {
            let id = String(format: "d%04d", n)
            _ = send(
                engine, "POST", "/s/_bulk_docs",
                json:
                    "{\"new_edits\":false,\"docs\":[{\"_id\":\"\(id)\",\"_rev\":\"1-ffff\(n)\",\"n\":\(n),\"branch\":true}]}"
            )
        }
        // Deletions.
        for n in stride(from: 11, to: documentCount, by: 97) {
            let id = String(format: "d%04d", n)
            let read = send(engine, "GET", "/s/\(id)")
            guard let object = try? JSONSerialization.jsonObject(with: read.body) as? [String: Any],
                let rev = object["_rev"] as? String
            else { continue }
            _ = send(engine, "DELETE", "/s/\(id)?rev=\(rev)")
        }
        let views =
            #"{"_id":"_design/v","views":{"by_n":{"map":"function(doc){ if (doc.n !== undefined) emit(doc.n, doc.tag); }"},"#
            + #""by_tag":{"map":"function(doc){ if (doc.n !== undefined) emit([doc.tag, doc.n], doc.n); }","reduce":"_sum"}}}"#
        _ = send(engine, "PUT", "/s/_design/v", json: views)
        _ = send(
            engine, "POST", "/s/_index",
            json: #"{"index":{"fields":["n"]},"ddoc":"by-n","name":"n-index","type":"json"}"#)
    }

    /// The read requests: method, target, JSON body.
    static var requests: [(String, String, String?)] {
        let keys = #"["d0005","d0011","nope","d2499","d0007","d1300"]"#
        let encodedKeys = keys.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        var list: [(String, String, String?)] = [
            ("GET", "/s/_all_docs", nil),
            ("GET", "/s/_all_docs?include_docs=true", nil),
            ("HEAD", "/s/_all_docs?include_docs=true&limit=10", nil),
            ("GET", "/s/_all_docs?include_docs=true&descending=true", nil),
            ("GET", "/s/_all_docs?include_docs=true&skip=5&limit=1200", nil),
            ("GET", "/s/_all_docs?include_docs=true&startkey=%22d0100%22&endkey=%22d1500%22&inclusive_end=false", nil),
            ("GET", "/s/_all_docs?descending=true&startkey=%22d1500%22&endkey=%22d0100%22&skip=3", nil),
            ("GET", "/s/_all_docs?update_seq=true&limit=3", nil),
            ("GET", "/s/_all_docs?conflicts=true&include_docs=true&limit=30", nil),
            ("GET", "/s/_all_docs?attachments=true&include_docs=true&limit=600&skip=400", nil),
            ("GET", "/s/_all_docs?limit=0", nil),
            ("GET", "/s/_all_docs?startkey=%22zzz%22", nil),
            ("GET", "/s/_all_docs?include_docs=true&keys=\(encodedKeys)", nil),
            ("GET", "/s/_all_docs?include_docs=true&descending=true&skip=1&limit=3&keys=\(encodedKeys)", nil),
            ("POST", "/s/_all_docs?include_docs=true", #"{"keys":\#(keys)}"#),
            ("GET", "/s/_all_docs?startkey=%22d2%22&endkey=%22d1%22", nil),
            ("GET", "/s/_design/v/_view/by_n", nil),
            ("GET", "/s/_design/v/_view/by_n?include_docs=true", nil),
            ("GET", "/s/_design/v/_view/by_n?include_docs=true&descending=true&skip=10&limit=1500", nil),
            ("GET", "/s/_design/v/_view/by_n?startkey=100&endkey=1600&inclusive_end=false&update_seq=true", nil),
            ("GET", "/s/_design/v/_view/by_n?include_docs=true&conflicts=true&keys=%5B7%2C1200%2C11%2C5%5D", nil),
            ("GET", "/s/_design/v/_view/by_tag", nil),
            ("GET", "/s/_design/v/_view/by_tag?group=true", nil),
            ("GET", "/s/_design/v/_view/by_tag?group=true&skip=100&limit=1200&descending=true", nil),
            ("GET", "/s/_design/v/_view/by_tag?group_level=1", nil),
            ("GET", "/s/_design/v/_view/by_tag?reduce=false&include_docs=true&limit=1100", nil),
            ("GET", "/s/_design/v/_view/by_tag?include_docs=true", nil),
            ("GET", "/s/_design/v/_view/missing", nil),
            ("POST", "/s/_find", #"{"selector":{"n":{"$gt":100}},"limit":1500}"#),
            ("POST", "/s/_find", #"{"selector":{"n":{"$gte":0}},"sort":[{"n":"desc"}],"limit":2000,"skip":3}"#),
            ("POST", "/s/_find", #"{"selector":{"n":{"$gt":10}},"fields":["_id","n"],"limit":1200}"#),
            ("POST", "/s/_find", #"{"selector":{"tag":3},"limit":5000,"conflicts":true}"#),
            ("POST", "/s/_find", #"{"selector":{"text":{"$regex":"row 1"}},"skip":2}"#),
            ("POST", "/s/_find", #"{"selector":{"n":{"$lt":0}}}"#),
            ("POST", "/s/_find", #"{"selector":{"n":{"$gt":1}},"sort":["tag"]}"#),
            ("POST", "/s/_find", #"{"selector":{"n":{"$gt":2400}},"bookmark":"garbage"}"#),
            ("GET", "/s/_changes", nil),
            ("GET", "/s/_changes?limit=1500", nil),
            ("GET", "/s/_changes?limit=1000", nil),
            ("GET", "/s/_changes?limit=5&since=100", nil),
            ("GET", "/s/_changes?descending=true&limit=1200", nil),
            ("GET", "/s/_changes?descending=true", nil),
            ("GET", "/s/_changes?include_docs=true&style=all_docs&conflicts=true", nil),
            ("GET", "/s/_changes?include_docs=true&limit=2100&attachments=true", nil),
            ("POST", "/s/_changes?filter=_doc_ids", #"{"doc_ids":["d0005","d0011","d2000","nope"]}"#),
            ("POST", "/s/_changes?filter=_selector&limit=1300", #"{"selector":{"tag":{"$gt":2}}}"#),
            ("GET", "/s/_changes?filter=_design", nil),
            ("GET", "/s/_changes?filter=_view&view=v/by_n&limit=1700", nil),
            ("HEAD", "/s/_changes?limit=4", nil),
            ("GET", "/s/_changes?limit=abc", nil),
        ]
        var specs: [String] = []
        for n in stride(from: 0, to: documentCount, by: 2) {
            specs.append(String(format: "{\"id\":\"d%04d\"}", n))
        }
        specs.append(#"{"id":"nope"}"#)
        specs.append(#"{"id":"d0007","rev":"1-ffff7"}"#)
        specs.append(#"{"rev":"1-x"}"#)
        list.append(("POST", "/s/_bulk_get", "{\"docs\":[\(specs.joined(separator: ","))]}"))
        return list
    }
}
