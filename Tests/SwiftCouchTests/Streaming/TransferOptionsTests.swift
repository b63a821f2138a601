import Foundation
import SwiftCouch
import SwiftCouchTesting
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

@Suite("Transfers: a download's options reach its request; an upload's answer is bounded")
struct TransferOptionsTests {
    static func temporaryFile() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("swiftcouch-\(UUID().uuidString).bin")
    }

    @Test("DownloadOptions.maximumDecompressionRatio is set on the download's request")
    func ratioOnTheRequest() async throws {
        let transport = SimulatedTransport(responses: [SimulatedResponse(status: 200, body: Data("abc".utf8))])
        let client = Simulation.client(transport: transport)
        let target = Self.temporaryFile()
        defer { try? FileManager.default.removeItem(at: target) }
        let result = try await client.download(
            GetAttachmentOperation(database: "db", documentID: "doc", name: "a.bin"), to: target,
            options: DownloadOptions(maximumDecompressionRatio: 1_000)
        ).value
        #expect(result.length == 3)
        #expect(transport.requests.first?.request.maximumDecompressionRatio == 1_000)
    }

    @Test("A download over its size limit in one piece fails before writing it, and leaves no file")
    func sizeLimitInOnePiece() async throws {
        let transport = SimulatedTransport(responses: [SimulatedResponse(status: 200, body: Data(count: 10_001))])
        let client = Simulation.client(transport: transport)
        let target = Self.temporaryFile()
        defer { try? FileManager.default.removeItem(at: target) }
        do {
            _ = try await client.download(
                GetAttachmentOperation(database: "db", documentID: "doc", name: "a.bin"), to: target,
                options: DownloadOptions(maximumSize: 10_000)
            ).value
            Issue.record("expected the size limit")
        } catch {
            #expect(error.message.contains("DownloadOptions.maximumSize"), "\(error)")
            #expect((error.underlying as? URLError)?.code == .dataLengthExceedsMaximum)
        }
        #expect(!FileManager.default.fileExists(atPath: target.path))
    }

    @Test("An upload's answer past maximumResponseBodySize fails saying so, instead of being collected whole")
    func uploadAnswerLimit() async throws {
        let transport = SimulatedTransport(responses: [
            SimulatedResponse(status: 201, body: Data(repeating: 0x20, count: 300_000))
        ])
        var configuration = Configuration()
        configuration.maximumResponseBodySize = 100_000
        let client = Simulation.client(transport: transport, configuration: configuration)
        do {
            _ = try await client.upload(
                UploadAttachmentOperation(
                    database: "db", documentID: "doc", name: "a.txt", revision: nil, contentType: "text/plain",
                    body: .stream(InputStream(data: Data("hello".utf8)), length: 5))
            ).value
            Issue.record("expected the body limit")
        } catch {
            #expect(error.message.contains("maximumResponseBodySize"), "\(error)")
        }
    }

    @Test("Limits that are zero, negative or Int.min fail the transfer cleanly instead of trapping")
    func absurdLimits() async {
        for size in [Int64.min, -1, 0] {
            let transport = SimulatedTransport(responses: [SimulatedResponse(status: 200, body: Data(count: 10))])
            let target = Self.temporaryFile()
            defer { try? FileManager.default.removeItem(at: target) }
            let download = try? await Simulation.client(transport: transport).download(
                GetAttachmentOperation(database: "db", documentID: "doc", name: "a.bin"), to: target,
                options: DownloadOptions(maximumSize: size)
            ).value
            #expect(download == nil, "\(size)")
        }
        for size in [Int.min, -1] {
            let transport = SimulatedTransport(responses: [SimulatedResponse(status: 201, body: Data(count: 10))])
            var configuration = Configuration()
            configuration.maximumResponseBodySize = size
            let client = Simulation.client(transport: transport, configuration: configuration)
            let upload = try? await client.upload(
                UploadAttachmentOperation(
                    database: "db", documentID: "doc", name: "a.txt", revision: nil, contentType: "text/plain",
                    body: .stream(InputStream(data: Data("hi".utf8)), length: 2))
            ).value
            #expect(upload == nil, "\(size)")
        }
    }
}
