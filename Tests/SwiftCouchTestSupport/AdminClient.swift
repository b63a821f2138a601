import CouchTestServer
import Foundation
import SwiftCouch

extension TestServer {
    /// The server's admin, as a client signs in.
    public var adminCredentials: Credentials { Credentials(username: adminName, password: adminPassword) }

    /// A client of this server signed in as its admin, with `configuration` (the caller shuts it down).
    public func adminClient(configuration: SwiftCouch.Configuration = SwiftCouch.Configuration()) -> CouchDBClient {
        CouchDBClient(url: url, credentials: adminCredentials, configuration: configuration)
    }
}
