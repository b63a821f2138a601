import Foundation

/// The soak's size and seed, from the command line.
struct ChaosOptions: Sendable {
    /// Chains of create → update → read → delete on one document each (four operations a chain).
    var chains = 600
    /// `POST /{db}` writes with a server-generated id: the ones a resend could duplicate.
    var posts = 400
    /// Documents without `_id` written through a `BulkWriter`.
    var bulkDocuments = 2_000
    /// The client's `maximumConcurrentOperations`.
    var concurrency = 8
    /// Seeds the TestServer's fault choices and the soak's own choices (kinds, cancellations).
    var seed: UInt64 = 1
    /// The share of queued operations cancelled at a random moment.
    var cancelShare = 0.05

    static func parse(_ arguments: ArraySlice<String>) -> ChaosOptions {
        var options = ChaosOptions()
        var rest = arguments.makeIterator()
        while let argument = rest.next() {
            switch argument {
            case "--quick":
                options.chains = 300
                options.posts = 300
                options.bulkDocuments = 1_000
            case "--operations":
                // About `n` single-document operations: four fifths in chains, one fifth POSTs.
                let n = Int(rest.next() ?? "") ?? 3_000
                options.chains = max(1, n * 4 / 5 / 4)
                options.posts = max(1, n / 5)
            case "--bulk": options.bulkDocuments = Int(rest.next() ?? "") ?? options.bulkDocuments
            case "--seed": options.seed = UInt64(rest.next() ?? "") ?? options.seed
            case "--concurrency": options.concurrency = Int(rest.next() ?? "") ?? options.concurrency
            case "--cancel-share": options.cancelShare = Double(rest.next() ?? "") ?? options.cancelShare
            default:
                print(
                    "usage: SwiftCouchChaos [--quick] [--operations N] [--bulk N] [--seed S] [--concurrency C] "
                        + "[--cancel-share F]")
                exit(2)
            }
        }
        return options
    }
}

/// A small deterministic generator (SplitMix64) for the soak's own choices.
struct ChaosRandom: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
