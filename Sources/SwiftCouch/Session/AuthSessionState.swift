import Foundation

/// The state of a renewable credential — a CouchDB `AuthSession` cookie or an IAM bearer token —
/// for one client: a small value type with no I/O.
///
/// The ``InterceptableSession`` asks it what to do before each request and tells it what
/// happened; it answers with actions. It guarantees that however many requests meet a missing
/// or expired credential at once, only one login (`POST /_session`, or one IAM token request) is
/// started, and that a rejected login fails every waiting request instead of looping. (The
/// credential is called the cookie below.)
struct AuthSessionState {
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
    }

    /// Called when a login failed. When `credentialsRejected` (401/403 from `/_session`), every
    /// later request fails too until `reset()`, so wrong credentials never cause a login loop or
    /// CouchDB's lock-out. Waiting requests must be failed by the caller either way.
    mutating func loginFailed(credentialsRejected: Bool) {
        loginInFlight = false
        if credentialsRejected {
            refused = true
            cookie = nil
        }
    }

    /// Called with every `AuthSession` cookie a response sets (CouchDB refreshes it as it ages).
    mutating func cookieRefreshed(cookie newCookie: String, maxAge: TimeInterval?, now: Date) {
        guard !newCookie.isEmpty, newCookie != cookie else { return }
        take(cookie: newCookie, maxAge: maxAge, now: now)
    }

    /// Called when a request sent with the cookie of `usedGeneration` was rejected.
    mutating func requestRejected(usedGeneration: Int) -> (action: RejectionAction, startLogin: Bool) {
        if usedGeneration < generation, cookie != nil { return (.resend, false) }
        cookie = nil
        expiresAt = nil
        renewAt = nil
        let startLogin = !loginInFlight
        loginInFlight = true
        return (.wait, startLogin)
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
