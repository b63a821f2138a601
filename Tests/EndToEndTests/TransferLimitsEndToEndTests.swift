import CouchTestServer
import Foundation
import SwiftCouch
import Testing

/// Answers attachment downloads: `/db/doc/endless` with bytes until the client goes away (a cap of
/// 96 MiB), `/db/doc/sized/N` with exactly N bytes and a Content-Length, `/db/doc/bomb/N` with N
/// zero bytes gzip'd (a few KiB on the wire).
final class DownloadHandler: RequestHandler, @unchecked Sendable {
    // @unchecked Sendable: `sentBytes` is behind `lock`.
    private let lock = NSLock()
    private var sentBytes = 0
    let bomb: Data

    init(bombSize: Int = 0) {
        bomb = bombSize > 0 ? Gzip.compress(Data(count: bombSize)) : Data()
    }

    var sent: Int {
        lock.lock()
        defer { lock.unlock() }
        return sentBytes
    }

    func handle(_ request: ServerRequest) -> ServerResponse {
        // The attachment's name, whether its `/` came encoded or not.
        let name = request.pathSegments.dropFirst(2).joined(separator: "/").split(separator: "/").map(String.init)
        let headers: HTTPHeaders = ["Content-Type": "application/octet-stream"]
        switch (name.first ?? "", name.count) {
        case ("endless", 1):
            return ServerResponse(
                status: 200, headers: headers,
                body: .stream { [self] writer in
                    let piece = Data(repeating: 0x61, count: 64 << 10)
                    var written = 0
                    while written < 96 << 20 {
                        guard writer.write(piece) else { return }
                        written += piece.count
                        lock.lock()
                        sentBytes += piece.count
                        lock.unlock()
                    }
                })
        case ("sized", 2):
            return ServerResponse(
                status: 200, headers: headers, body: .data(Data(repeating: 0x62, count: Int(name[1]) ?? 0)))
        case ("bomb", 1):
            var gzipped = headers
            gzipped["Content-Encoding"] = "gzip"
            return ServerResponse(status: 200, headers: gzipped, body: .data(bomb))
        default:
            return ServerResponse(status: 404, body: .data(Data(#"{"error":"not_found","reason":"missing"}"#.utf8)))
        }
    }
}

@Suite("End to end: downloads stop at DownloadOptions.maximumSize and leave no partial file")
struct TransferLimitsEndToEndTests {
    func withDownloadServer(
        _ handler: DownloadHandler, _ body: (CouchDBClient, URL) async throws -> Void
    ) async throws {
        let server = try TestServer.start(handler: handler)
        defer { server.stop() }
        var configuration = Configuration()
        configuration.retryPolicy = RetryPolicy(maximumRetries: 0)
        E2EEnvironment.selectTransport(&configuration)
        let client = CouchDBClient(url: server.url, configuration: configuration)
        defer { client.shutdown() }
        let target = TransferEndToEndTests.temporaryFile("limited.bin")
        defer { try? FileManager.default.removeItem(at: target) }
        try await body(client, target)
    }

    /// The download's error, within 60 s (the old behaviour wrote until the server's cap).
    func failure(_ transfer: Transfer<AttachmentDownload>) async -> CouchError? {
        let watchdog = Task {
            try await Task.sleep(for: .seconds(60))
            transfer.cancel()
        }
        defer { watchdog.cancel() }
        do {
            _ = try await transfer.value
            return nil
        } catch {
            return error
        }
    }

    @Test("An endless download ends at the size limit with a CouchError naming it; the partial file is removed")
    func endlessDownload() async throws {
        let handler = DownloadHandler()
        try await withDownloadServer(handler) { client, target in
            let transfer = client.download(
                GetAttachmentOperation(database: "db", documentID: "doc", name: "endless"), to: target,
                options: DownloadOptions(maximumSize: 1 << 20))
            let error = await failure(transfer)
            #expect(error?.message.contains("maximumSize") == true, "\(String(describing: error))")
            #expect(error?.message.contains("\(1 << 20)") == true)
            #expect(!FileManager.default.fileExists(atPath: target.path), "the partial file was left")
            if transportStopsReading { #expect(handler.sent < 48 << 20, "the server sent \(handler.sent) bytes") }
        }
    }

    @Test("A download exactly at the limit succeeds; one byte over fails and leaves no file")
    func boundary() async throws {
        try await withDownloadServer(DownloadHandler()) { client, target in
            let size = 300_000
            let exact = try await client.download(
                GetAttachmentOperation(database: "db", documentID: "doc", name: "sized/\(size)"), to: target,
                options: DownloadOptions(maximumSize: Int64(size))
            ).value
            #expect(exact.length == Int64(size))
            #expect(try Data(contentsOf: target).count == size)
            let over = client.download(
                GetAttachmentOperation(database: "db", documentID: "doc", name: "sized/\(size)"), to: target,
                options: DownloadOptions(maximumSize: Int64(size - 1)))
            let error = await failure(over)
            #expect(error?.message.contains("maximumSize") == true, "\(String(describing: error))")
            #expect(!FileManager.default.fileExists(atPath: target.path))
        }
    }

    @Test("A gzip bomb (32 MiB of zeros in a few KiB) stops at the size limit as it inflates, not after")
    func gzipBomb() async throws {
        let handler = DownloadHandler(bombSize: 32 << 20)
        try await withDownloadServer(handler) { client, target in
            var options = DownloadOptions(maximumSize: 4 << 20)
            // The ratio limit is lifted for this download, so what stops it is the size limit.
            options.maximumDecompressionRatio = .infinity
            let transfer = client.download(
                GetAttachmentOperation(database: "db", documentID: "doc", name: "bomb"), to: target, options: options)
            let error = await failure(transfer)
            #expect(error?.message.contains("maximumSize") == true, "\(String(describing: error))")
            #expect(!FileManager.default.fileExists(atPath: target.path))
            #expect(transfer.progress.completedUnitCount <= 4 << 20)
        }
    }

    @Test("Without options a download is not limited by size (nil, the default)")
    func unlimitedByDefault() async throws {
        try await withDownloadServer(DownloadHandler()) { client, target in
            let size = 3 << 20
            let result = try await client.download(
                GetAttachmentOperation(database: "db", documentID: "doc", name: "sized/\(size)"), to: target
            ).value
            #expect(result.length == Int64(size))
        }
    }
}
