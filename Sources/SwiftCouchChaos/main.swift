// The SwiftCouch chaos soak: thousands of mixed operations through the real client against an
// embedded TestServer that injects every fault shape at once, each at a set rate. Afterwards the
// database is read back without faults and the invariants are checked:
//
// - every operation completed exactly once (no stall, no second completion);
// - every success the client reported is in the database (no unconfirmed success);
// - no write the client reported as definitely not done is in the database (no phantom write);
// - no document was created twice (no duplicate);
// and one table is printed. Exit status 1 when any invariant is broken.
//
//     swift run -c release SwiftCouchChaos                 # full size
//     swift run SwiftCouchChaos --quick                    # the reduced size CI runs
//     swift run SwiftCouchChaos --operations 800 --seed 7 --concurrency 8

import CouchTestServer
import Foundation
import SwiftCouch

/// Prints at once (standard output is not a terminal under CI, and a stalled run must still show
/// what it printed).
func say(_ text: String) {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
}

let options = ChaosOptions.parse(CommandLine.arguments.dropFirst())
say(
    "SwiftCouch chaos soak: \(options.chains) document chains + \(options.posts) POSTs + "
        + "\(options.bulkDocuments) bulk documents, seed \(options.seed), concurrency \(options.concurrency)")

let report: ChaosReport
do {
    report = try await ChaosSoak(options: options).run()
} catch {
    say("The soak could not run: \(error)")
    exit(2)
}
say(report.table())
if !report.broken.isEmpty {
    say("BROKEN INVARIANTS:")
    for line in report.broken { say("  - \(line)") }
    exit(1)
}
say("All invariants held.")
