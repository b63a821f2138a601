import Testing

/// Keeps tests with wall-clock bounds and tests that keep a core busy for a long time apart.
///
/// Every test target runs in one process, in parallel. A test that checks a deadline (a trickled
/// body must fail within 10 s) measures the machine as much as the code when, beside it, another test
/// makes a debug TestServer digest 256 MiB: on a 2-core runner the bound is then missed. Both kinds
/// stay in the plain `swift test`; this gate only keeps them from overlapping. Many timing-sensitive
/// tests may run together, a heavy test runs only when none of them does, and once a heavy test
/// waits, new timing-sensitive tests wait behind it (so it is not starved). A heavy test never waits
/// for anything inside the gate, so the gate cannot deadlock.
public actor LoadGate {
    /// The one gate of the test process.
    public static let shared = LoadGate()

    /// A gate of its own (the shared one is for tests; this is for testing the gate).
    public init() {}

    private var timingSensitive = 0
    private var heavyRunning = false
    private var heavyWaiting = 0
    private var waiters: [CheckedContinuation<Void, Never>] = []

    /// Waits until no heavy test runs or waits, then counts a timing-sensitive test in.
    public func enterTimingSensitive() async {
        while heavyRunning || heavyWaiting > 0 { await suspend() }
        timingSensitive += 1
    }

    /// Ends what ``enterTimingSensitive()`` began.
    public func leaveTimingSensitive() {
        timingSensitive -= 1
        wakeAll()
    }

    /// Waits until no timing-sensitive test and no other heavy test runs.
    public func enterHeavy() async {
        heavyWaiting += 1
        while heavyRunning || timingSensitive > 0 { await suspend() }
        heavyWaiting -= 1
        heavyRunning = true
    }

    /// Ends what ``enterHeavy()`` began.
    public func leaveHeavy() {
        heavyRunning = false
        wakeAll()
    }

    /// How many tests are inside the gate now: for the gate's own test.
    public var occupancy: (timingSensitive: Int, heavy: Bool) { (timingSensitive, heavyRunning) }

    private func suspend() async {
        await withCheckedContinuation { waiters.append($0) }
    }

    private func wakeAll() {
        let woken = waiters
        waiters = []
        for waiter in woken { waiter.resume() }
    }
}

/// A trait that runs each test of a suite (or one test) through ``LoadGate/shared``.
public struct LoadGateTrait: SuiteTrait, TestTrait, TestScoping {
    /// What the test is to the gate.
    public enum Kind: Sendable {
        /// It asserts wall-clock bounds.
        case timingSensitive
        /// It keeps a core busy for a long time (hundreds of MiB digested, gzipped or copied).
        case heavy
    }

    /// What the test is to the gate.
    public let kind: Kind

    /// Applies to every test of a suite.
    public var isRecursive: Bool { true }

    /// Runs the test inside the gate.
    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let gate = LoadGate.shared
        switch kind {
        case .timingSensitive: await gate.enterTimingSensitive()
        case .heavy: await gate.enterHeavy()
        }
        let outcome: Result<Void, any Error>
        do {
            try await function()
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        switch kind {
        case .timingSensitive: await gate.leaveTimingSensitive()
        case .heavy: await gate.leaveHeavy()
        }
        try outcome.get()
    }
}

extension Trait where Self == LoadGateTrait {
    /// The test asserts wall-clock bounds: it never runs beside a `.heavyLoad` test.
    public static var timingSensitive: Self { LoadGateTrait(kind: .timingSensitive) }

    /// The test keeps a core busy for a long time: it never runs beside a `.timingSensitive` test.
    public static var heavyLoad: Self { LoadGateTrait(kind: .heavy) }
}
