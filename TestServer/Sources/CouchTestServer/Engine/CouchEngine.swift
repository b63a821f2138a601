import CouchQuery
import Foundation
import HTTPWire

/// The CouchDB behaviour of the TestServer: every endpoint, answered as Apache CouchDB 3.5 does.
///
/// Thread-safe: the HTTP layer calls `handle(_:)` from many connection threads at once.
public final class CouchEngine: RequestHandler, @unchecked Sendable {
    /// How the engine is set up.
    public struct Options: Sendable {
        /// The server admin's name. Defaults to `admin`.
        public var adminName: String = "admin"
        /// The server admin's password. Defaults to `password`.
        public var adminPassword: String = "password"
        /// Lifetime of an `AuthSession` cookie in seconds (CouchDB's `[chttpd_auth] timeout`). Defaults to 600.
        public var sessionTimeout: Int = 600
        /// Where to keep data so that a restart keeps it; nil keeps everything in memory. Defaults to nil.
        public var dataDirectory: URL? = nil

        public init() {}
    }

    public let options: Options

    public init(options: Options = Options()) throws {
        self.options = options
    }

    public func handle(_ request: ServerRequest) -> ServerResponse {
        ServerResponse(status: 500, headers: ["Content-Type": "application/json"],
                       body: .data(Data(#"{"error":"unknown_error","reason":"not implemented yet"}"#.utf8 + [0x0A])))
    }

    /// Makes every `AuthSession` cookie issued so far invalid, as if its lifetime had run out.
    public func expireAllSessions() {}

    /// Flushes anything kept in `dataDirectory` and stops background work (continuous feeds end).
    public func close() {}
}
