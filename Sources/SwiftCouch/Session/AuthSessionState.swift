import Foundation

/// The state of a renewable credential — a CouchDB `AuthSession` cookie or an IAM bearer token —
/// for one client: a small value type with no I/O.
///
/// The ``InterceptableSession`` asks it what to do before each request and tells it what
/// happened; it answers with actions. It guarantees that however many requests meet a missing
/// or expired credential at once, only one login (`POST /_session`, or one IAM token request) is
/// started, and that a rejected login fails every waiting request instead of looping. (The
/// credential is called the cookie below.)
struct AuthSessionState: CustomReflectable {
    /// What to do with a request about to be sent.
    enum RequestAction: Equatable {
        /// Send it with this cookie (nil never happens in cookie mode once logged in).
        case send(cookie: String, generation: Int)
        /// Park it until the login in flight ends.
        case wait
        /// Fail it: logging in was refused and will not be retried until `reset()`.
        case fail
    }

    /// What to do with a request whose response said the session is not valid (401, or 403
    /// `credentials_expired`).
    enum RejectionAction: Equatable {
        /// A newer cookie arrived meanwhile: send it again at once.
        case resend
        /// Park it until the login in flight ends.
        case wait
        /// The cookie was rejected although it comes from a login made because of an earlier
        /// rejection: ask the server whether it is still alive (`GET /_session`, see
        /// ``sessionChecked(generation:alive:)``) before logging in again. A 401 for a resource the
        /// user may not read then costs one cheap check instead of a login per call.
        case check(startCheck: Bool)
    }

    /// The current `AuthSession` value, if logged in.
    private(set) var cookie: String?
    /// Increases every time a new cookie is taken, so an old cookie's rejection can be told apart.
    private(set) var generation = 0
    /// When the cookie stops working, when its lifetime is known.
    private(set) var expiresAt: Date?
    /// When to log in again ahead of expiry (80% of the lifetime).
    private(set) var renewAt: Date?
    /// Whether a login is in flight.
    private(set) var loginInFlight = false
    /// Set when the server refused the credentials: every request fails until `reset()`.
    private(set) var refused = false
    /// Whether the login in flight was started because a request's cookie was rejected.
    private var loginAfterRejection = false
    /// The generation a login started by a rejection produced: logging in again because of it
    /// waits for a check that it is dead (at most one login per generation).
    private var generationFromRejection: Int?
    /// Whether a check of the current cookie is in flight.
    private(set) var checkInFlight = false

    /// Everything but the cookie itself.
    var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "cookie": cookie == nil ? "none" : Redaction.placeholder, "generation": generation,
                "loginInFlight": loginInFlight, "refused": refused,
            ])
    }

    /// The fraction of a cookie's lifetime after which it is renewed ahead of expiry.
    static let renewalFraction = 0.8

    /// Called before each request. `startLogin` is true when the caller must start a login now.
    mutating func prepareRequest(now: Date) -> (action: RequestAction, startLogin: Bool) {
        if refused { return (.fail, false) }
        if let cookie, expiresAt.map({ now < $0 }) ?? true {
            var startLogin = false
            if let renewAt, now >= renewAt, !loginInFlight {
                loginInFlight = true
                startLogin = true
            }
            return (.send(cookie: cookie, generation: generation), startLogin)
        }
        cookie = nil
        let startLogin = !loginInFlight
        loginInFlight = true
        return (.wait, startLogin)
    }

    /// Called when a login answered with a cookie. Waiting requests may go now.
    mutating func loginSucceeded(cookie: String, maxAge: TimeInterval?, now: Date) {
        loginInFlight = false
        take(cookie: cookie, maxAge: maxAge, now: now)
        if loginAfterRejection { generationFromRejection = generation }
        loginAfterRejection = false
    }

    /// Called when a login failed. When `credentialsRejected` (401/403 from `/_session`), every
    /// later request fails too until `reset()`, so wrong credentials never cause a login loop or
    /// CouchDB's lock-out. Waiting requests must be failed by the caller either way.
    mutating func loginFailed(credentialsRejected: Bool) {
        loginInFlight = false
        loginAfterRejection = false
        if credentialsRejected {
            refused = true
            cookie = nil
        }
    }

    /// Called with every `AuthSession` cookie a response sets (CouchDB refreshes it as it ages).
    mutating func cookieRefreshed(cookie newCookie: String, maxAge: TimeInterval?, now: Date) {
        guard !newCookie.isEmpty, newCookie != cookie else { return }
        let continuesRejectionLogin = generationFromRejection == generation
        take(cookie: newCookie, maxAge: maxAge, now: now)
        // The same session, refreshed: it still counts as the login a rejection caused.
        if continuesRejectionLogin { generationFromRejection = generation }
    }

    /// Called when a request sent with the cookie of `usedGeneration` was rejected; `expired` when
    /// the server said the session expired (403 `credentials_expired`), which needs no check.
    mutating func requestRejected(usedGeneration: Int, expired: Bool = false) -> (
        action: RejectionAction, startLogin: Bool
    ) {
        if usedGeneration < generation, cookie != nil { return (.resend, false) }
        if !expired, cookie != nil, generationFromRejection == generation, !loginInFlight {
            defer { checkInFlight = true }
            return (.check(startCheck: !checkInFlight), false)
        }
        return (.wait, dropCookieForLogin())
    }

    /// Called when the check of `generation`'s cookie ended. Alive: the rejections were answers
    /// about permissions, to report as they are. Dead (or unknown): as a rejection, log in again;
    /// `startLogin` says whether the caller must start the login.
    mutating func sessionChecked(generation checked: Int, alive: Bool) -> CheckOutcome {
        checkInFlight = false
        if alive { return .report }
        if checked < generation, cookie != nil { return .resend }  // renewed meanwhile
        return .wait(startLogin: dropCookieForLogin())
    }

    /// What to do with the requests whose rejection waited for a check of their cookie.
    enum CheckOutcome: Equatable {
        /// The cookie is alive: the rejection is the answer (say, a 401 for a database the user
        /// may not read); report it.
        case report
        /// A newer cookie arrived meanwhile: send them again with it.
        case resend
        /// The cookie is dead: park them until the login ends (start it when `startLogin`).
        case wait(startLogin: Bool)
    }

    private mutating func dropCookieForLogin() -> Bool {
        cookie = nil
        expiresAt = nil
        renewAt = nil
        let startLogin = !loginInFlight
        loginInFlight = true
        if startLogin { loginAfterRejection = true }
        return startLogin
    }

    /// Forgets the cookie and any refusal, so the next request logs in again.
    mutating func reset() {
        self = AuthSessionState()
    }

    private mutating func take(cookie newCookie: String, maxAge: TimeInterval?, now: Date) {
        cookie = newCookie
        generation += 1
        if let maxAge, maxAge > 0 {
            expiresAt = now.addingTimeInterval(maxAge)
            renewAt = now.addingTimeInterval(maxAge * AuthSessionState.renewalFraction)
        } else {
            expiresAt = nil
            renewAt = nil
        }
    }
}

/// Reads `AuthSession` cookies out of `Set-Cookie` header values.
enum SetCookieParser {
    /// The `AuthSession` value and its `Max-Age` from a `Set-Cookie` value (several cookies joined
    /// by commas are handled). Returns nil when there is no `AuthSession` cookie.
    static func authSession(in header: String) -> (value: String, maxAge: TimeInterval?)? {
        guard let range = header.range(of: "AuthSession=") else { return nil }
        let rest = header[range.upperBound...]
        let value = rest.prefix { $0 != ";" && $0 != "," && $0 != " " }
        var maxAge: TimeInterval?
        let attributes = rest.dropFirst(value.count)
        let cookieEnd = attributes.range(of: "AuthSession=")?.lowerBound ?? attributes.endIndex
        for part in attributes[..<cookieEnd].split(separator: ";") {
            let trimmed = part.trimmingCharacters(in: .whitespaces)
            if trimmed.lowercased().hasPrefix("max-age=") {
                maxAge = TimeInterval(trimmed.dropFirst("max-age=".count).prefix { $0.isNumber || $0 == "-" })
            }
        }
        return (String(value), maxAge)
    }
}
