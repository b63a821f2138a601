import CouchStore
import Foundation
import TestScheduling
import Testing

/// The row responses (`_all_docs`, views, `_find`, `_changes` with a limit or a filter, `_bulk_get`) are streamed a
/// batch at a time, with the bytes they had when they were built whole.
@Suite(.ownThreads) struct StreamedResponseTests {
    /// Status, body length and FNV-1a digest of every answer of ``StreamedResponseScenario/requests``, recorded by
    /// running the scenario on the engine at commit 6cc28a5, before these responses streamed.
    static let recorded: [(index: Int, status: Int, length: Int, digest: UInt64)] = [
        (0, 200, 207997, 0xc7ba_d4c0_5181_d218),
        (1, 200, 496299, 0xbd3a_530e_4bc0_6597),
        (2, 200, 0, 0xcbf2_9ce4_8422_2325),
        (3, 200, 496299, 0xe65f_213a_a97b_0a19),
        (4, 200, 239299, 0xc5b4_363d_4d23_bb6e),
        (5, 200, 276833, 0x416f_67ae_19aa_9da2),
        (6, 200, 116192, 0xa837_b1a6_34bb_b23f),
        (7, 200, 383, 0x6453_4001_dffd_3141),
        (8, 200, 6325, 0x94c3_bd4a_cd53_7dea),
        (9, 200, 119750, 0x68e_0ec7_9ade_56f2),
        (10, 200, 45, 0x1db9_a376_0745_eab4),
        (11, 200, 48, 0x45ee_fc20_ff16_e55f),
        (12, 200, 905, 0xbd74_7edb_0237_1f2c),
        (13, 200, 399, 0x6840_f10c_ea3a_675f),
        (14, 200, 905, 0xbd74_7edb_0237_1f2c),
        (15, 400, 150, 0xc3c4_5c38_601c_a2c9),
        (16, 200, 92962, 0x6a10_0c1f_b84c_d1c0),
        (17, 200, 380770, 0x6cfd_a3fe_226a_3a63),
        (18, 200, 232809, 0x3d81_3747_1480_1991),
        (19, 200, 55615, 0xb4f8_c8df_2b48_ab49),
        (20, 200, 495, 0x2c56_2b83_452d_5272),
        (21, 200, 44, 0x731a_d73e_3cf7_686f),
        (22, 200, 76991, 0x3cdf_c74b_78ba_0ba0),
        (23, 200, 37421, 0xbd92_58be_4245_fe9a),
        (24, 200, 246, 0xc81d_fba8_1ef6_fa0c),
        (25, 200, 176422, 0xfe87_c9d2_47e1_51b4),
        (26, 400, 78, 0xee43_3909_f20f_1814),
        (27, 404, 52, 0xc17f_5f89_b1f6_14b7),
        (28, 200, 165165, 0xb41e_33e1_f91e_3464),
        (29, 200, 221537, 0xa3b8_6aa3_e222_68e9),
        (30, 200, 29039, 0x811_3783_2f59_78a1),
        (31, 200, 39071, 0x744b_94b7_2945_fc89),
        (32, 200, 2890, 0x16ad_11aa_8189_cc20),
        (33, 200, 29, 0x6ba4_964f_c934_2009),
        (34, 400, 103, 0x4b5e_8366_aaff_e276),
        (35, 400, 76, 0xbe43_5146_f004_c208),
        (36, 200, 332117, 0x2f35_6db1_1c7f_4237),
        (37, 200, 198663, 0xacf9_36c5_980e_44e0),
        (38, 200, 132004, 0x2500_05f1_ac8d_3c66),
        (39, 200, 755, 0xf90e_b2a1_58d5_fb7a),
        (40, 200, 160046, 0x518_ea21_8296_4600),
        (41, 200, 332114, 0xf04f_4b48_4679_5b76),
        (42, 200, 622794, 0x843a_3ecf_b1d6_f11e),
        (43, 200, 521948, 0xba2f_c2b5_1484_cbd8),
        (44, 200, 510, 0x46f7_d61f_beaf_1e1c),
        (45, 200, 172369, 0x242_b252_8271_3e6e),
        (46, 200, 373, 0xaed5_c76a_b26f_0ea8),
        (47, 200, 225052, 0xdc9e_5bdb_e7bc_88f1),
        (48, 200, 0, 0xcbf2_9ce4_8422_2325),
        (49, 400, 64, 0x956e_cfc5_2992_7950),
        (50, 200, 176201, 0x4fa3_ec08_7559_b489),
    ]

    /// Answers whose body is not the same from run to run (a random `ref` in the error): status only.
    static let statusOnly: Set<Int> = [15]

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Runs `body` on a Dispatch thread (the engine's work blocks; the cooperative pool must not wait for it).
    static func onDispatch<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: Result { try body() }) }
        }
    }

    /// The answers to `requests` from an engine holding the scenario's database.
    static func answers(_ requests: [(String, String, String?)]) async throws -> [StreamedResponseScenario.Answer] {
        let list = requests.map { [$0.0, $0.1, $0.2 ?? ""] }
        return try await onDispatch {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("streamed-\(UUID())")
            defer { try? FileManager.default.removeItem(at: directory) }
            var options = CouchEngine.Options()
            options.dataDirectory = directory
            let engine = try CouchEngine(options: options)
            defer { engine.close() }
            StreamedResponseScenario.populate(engine)
            return list.map { request in
                StreamedResponseScenario.send(
                    engine, request[0], request[1], json: request[2].isEmpty ? nil : request[2])
            }
        }
    }

    @Test("Every streamed answer has the bytes it had when it was built whole (51 requests, many parameters)")
    func answersAreByteIdenticalToTheWholeOnes() async throws {
        let requests = StreamedResponseScenario.requests
        #expect(requests.count == Self.recorded.count)
        let answers = try await Self.answers(requests)
        for (index, status, length, digest) in Self.recorded where index < requests.count {
            let (method, target, _) = requests[index]
            let answer = answers[index]
            #expect(answer.status == status, "\(method) \(target)")
            if Self.statusOnly.contains(index) { continue }
            #expect(answer.body.count == length, "\(method) \(target)")
            #expect(
                StreamedResponseScenario.digest(answer.body) == digest,
                "\(method) \(target): \(String(decoding: answer.body.prefix(200), as: UTF8.self))")
        }
    }

    /// How many rows a chunk holds: occurrences of `marker`.
    static func count(_ marker: String, in chunk: Data) -> Int {
        let needle = Array(marker.utf8)
        let bytes = [UInt8](chunk)
        guard bytes.count >= needle.count else { return 0 }
        var found = 0
        var index = 0
        while index <= bytes.count - needle.count {
            if bytes[index] == needle[0], Array(bytes[index..<(index + needle.count)]) == needle {
                found += 1
                index += needle.count
            } else {
                index += 1
            }
        }
        return found
    }

    /// Requests whose answers must stream, the text that starts each of their rows, and how many rows they have.
    static let streamedRequests: [(method: String, target: String, json: String?, marker: String, rows: Int)] = [
        ("GET", "/s/_all_docs?include_docs=true", nil, #""id":""#, 2_476),
        ("POST", "/s/_all_docs?include_docs=true", #"{"keys":["d0001","d0002"]}"#, #""id":""#, 2),
        ("GET", "/s/_design/v/_view/by_n?include_docs=true", nil, #""id":""#, 2_474),
        ("GET", "/s/_design/v/_view/by_tag?reduce=false&include_docs=true", nil, #""id":""#, 2_474),
        ("POST", "/s/_find", #"{"selector":{"n":{"$gte":0}},"limit":2400}"#, #"{"_id":""#, 2_400),
        ("GET", "/s/_changes?limit=2200&include_docs=true", nil, #""id":""#, 2_200),
        ("GET", "/s/_changes?descending=true&limit=2100", nil, #""id":""#, 2_100),
        ("POST", "/s/_changes?filter=_selector", #"{"selector":{"n":{"$gte":0}}}"#, #""id":""#, 2_474),
        ("POST", "/s/_bulk_get", bulkGetBody, #"{"id":""#, 2_500),
    ]

    @Test("Row responses are streams whose chunks hold at most a batch of rows")
    func rowResponsesAreStreamedInBatches() async throws {
        let answers = try await Self.answers(Self.streamedRequests.map { ($0.method, $0.target, $0.json) })
        for (request, answer) in zip(Self.streamedRequests, answers) {
            #expect(answer.status == 200)
            #expect(answer.streamed, "\(request.target) is built whole")
            let perChunk = answer.chunks.map { Self.count(request.marker, in: $0) }
            #expect(perChunk.reduce(0, +) == request.rows, "\(request.target)")
            #expect(perChunk.allSatisfy { $0 <= 1_000 }, "\(request.target): rows per chunk \(perChunk)")
            let batches = (request.rows + 999) / 1_000
            #expect(perChunk.filter { $0 > 0 }.count == batches, "\(request.target): rows per chunk \(perChunk)")
        }
    }

    @Test("A document that cannot be read once the answer has begun ends the body short (aborted), never a trap")
    func aReadFailureWhileStreamingAbortsTheBody() async throws {
        let answer = try await Self.onDispatch { () throws -> StreamedResponseScenario.Answer in
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("streamed-\(UUID())")
            defer { try? FileManager.default.removeItem(at: directory) }
            var options = CouchEngine.Options()
            options.dataDirectory = directory
            // The feed interleaves the database's shards: the document damaged is the 1,500th of the feed.
            var damaged = ""
            do {
                let engine = try CouchEngine(options: options)
                StreamedResponseScenario.populate(engine)
                let feed = StreamedResponseScenario.send(engine, "GET", "/s/_changes?limit=1500")
                let rows =
                    (try JSONSerialization.jsonObject(with: feed.body) as? [String: Any])?["results"]
                    as? [[String: Any]]
                damaged = rows?.last?["id"] as? String ?? ""
                engine.close()
            }
            // Damage that document's record: its batch is the second of the feed.
            guard let n = Int(damaged.dropFirst()) else { throw Failure(description: "no 1,500th change") }
            let marker = Data("row \(n) of the scenario".utf8)
            let files =
                (FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil)?.allObjects ?? [])
                .compactMap { $0 as? URL }
            guard let file = files.first(where: { (try? Data(contentsOf: $0))?.range(of: marker) != nil }) else {
                throw Failure(description: "no file holds \(damaged)")
            }
            var bytes = try Data(contentsOf: file)
            guard let at = bytes.range(of: marker)?.lowerBound else { throw Failure(description: "no marker") }
            bytes[at] ^= 0xFF
            try bytes.write(to: file)
            let engine = try CouchEngine(options: options)
            defer { engine.close() }
            return StreamedResponseScenario.send(engine, "GET", "/s/_changes?limit=2000&include_docs=true")
        }
        #expect(answer.status == 200)
        #expect(answer.streamed)
        #expect(answer.aborted, "the body was not cut short")
        let text = String(decoding: answer.body, as: UTF8.self)
        #expect(text.hasPrefix("{\"results\":[\n"))
        #expect(!text.contains("last_seq"), "an aborted feed must not look complete")
        #expect(Self.count(#""id":""#, in: answer.body) == 1_000, "the first batch was sent whole")
    }

    static var bulkGetBody: String {
        let specs = (0..<StreamedResponseScenario.documentCount).map { String(format: "{\"id\":\"d%04d\"}", $0) }
        return "{\"docs\":[\(specs.joined(separator: ","))]}"
    }
}
