import Foundation
import SwiftCouchTestSupport
import Testing

@testable import SwiftCouch

@Suite("AuthSessionState: one login, renewals, refusals", .ownThreads)
struct AuthSessionStateTests {
    let t0 = Date(timeIntervalSince1970: 1_000_000)

    @Test("The first request starts a login; the ones that follow wait for it")
    func firstLogin() {
        var state = AuthSessionState()
        let first = state.prepareRequest(now: t0)
        #expect(first.action == .wait)
        #expect(first.startLogin)
        for _ in 0..<10 {
            let next = state.prepareRequest(now: t0)
            #expect(next.action == .wait)
            #expect(!next.startLogin)
        }
        state.loginSucceeded(cookie: "c1", maxAge: 600, now: t0)
        #expect(state.prepareRequest(now: t0) == (.send(cookie: "c1", generation: 1), false))
    }

    @Test("At 80% of the lifetime a renewal starts while requests keep using the cookie")
    func renewAhead() {
        var state = AuthSessionState()
        _ = state.prepareRequest(now: t0)
        state.loginSucceeded(cookie: "c1", maxAge: 600, now: t0)
        #expect(state.prepareRequest(now: t0 + 479).startLogin == false)
        let at80 = state.prepareRequest(now: t0 + 481)
        #expect(at80.action == .send(cookie: "c1", generation: 1))
        #expect(at80.startLogin)
        #expect(state.prepareRequest(now: t0 + 490).startLogin == false)  // one renewal at a time
        state.loginSucceeded(cookie: "c2", maxAge: 600, now: t0 + 491)
        #expect(state.prepareRequest(now: t0 + 500).action == .send(cookie: "c2", generation: 2))
    }

    @Test("An expired cookie is not sent: requests wait for a new login")
    func expired() {
        var state = AuthSessionState()
        _ = state.prepareRequest(now: t0)
        state.loginSucceeded(cookie: "c1", maxAge: 600, now: t0)
        let late = state.prepareRequest(now: t0 + 601)
        #expect(late.action == .wait)
        #expect(late.startLogin)
    }

    @Test("N rejections of the same cookie start one login; a rejection of an older cookie resends")
    func oneRenewalForManyRejections() {
        var state = AuthSessionState()
        _ = state.prepareRequest(now: t0)
        state.loginSucceeded(cookie: "c1", maxAge: nil, now: t0)
        var logins = 0
        for _ in 0..<25 {
            let (action, start) = state.requestRejected(usedGeneration: 1)
            #expect(action == .wait)
            if start { logins += 1 }
        }
        #expect(logins == 1)
        state.loginSucceeded(cookie: "c2", maxAge: nil, now: t0)
        #expect(state.requestRejected(usedGeneration: 1) == (.resend, false))
    }

    @Test("Refused credentials fail every later request without another login until reset")
    func refused() {
        var state = AuthSessionState()
        _ = state.prepareRequest(now: t0)
        state.loginFailed(credentialsRejected: true)
        for _ in 0..<5 { #expect(state.prepareRequest(now: t0) == (.fail, false)) }
        state.reset()
        #expect(state.prepareRequest(now: t0) == (.wait, true))
    }

    @Test("A login that failed for another reason (5xx, network) is tried again by the next request")
    func transientLoginFailure() {
        var state = AuthSessionState()
        _ = state.prepareRequest(now: t0)
        state.loginFailed(credentialsRejected: false)
        #expect(state.prepareRequest(now: t0) == (.wait, true))
    }

    @Test("Refreshed cookies from responses replace the current one")
    func refreshed() {
        var state = AuthSessionState()
        _ = state.prepareRequest(now: t0)
        state.loginSucceeded(cookie: "c1", maxAge: 600, now: t0)
        state.cookieRefreshed(cookie: "c1", maxAge: 600, now: t0 + 100)
        #expect(state.generation == 1)
        state.cookieRefreshed(cookie: "c2", maxAge: 600, now: t0 + 100)
        // The first cookie would have expired at t0+600; the refreshed one lives until t0+700.
        let after = state.prepareRequest(now: t0 + 650)
        #expect(after.action == .send(cookie: "c2", generation: 2))
    }

    @Test("Set-Cookie parsing finds AuthSession and Max-Age, ignores other cookies")
    func parseSetCookie() {
        let header =
            "AuthSession=YWRtaW46NjU1:abc-_; Version=1; Expires=Sun, 22 Nov 2026 08:00:00 GMT; Max-Age=600; Path=/; HttpOnly"
        let parsed = SetCookieParser.authSession(in: header)
        #expect(parsed?.value == "YWRtaW46NjU1:abc-_")
        #expect(parsed?.maxAge == 600)
        #expect(SetCookieParser.authSession(in: "other=1; Path=/") == nil)
        #expect(SetCookieParser.authSession(in: "AuthSession=; Version=1; Max-Age=600; Path=/")?.value == "")
        let joined = "x=1; Max-Age=5, AuthSession=zz; Max-Age=42; Path=/"
        #expect(SetCookieParser.authSession(in: joined)?.maxAge == 42)
    }
}

private func == (lhs: (AuthSessionState.RequestAction, Bool), rhs: (AuthSessionState.RequestAction, Bool)) -> Bool {
    lhs.0 == rhs.0 && lhs.1 == rhs.1
}

private func == (lhs: (AuthSessionState.RejectionAction, Bool), rhs: (AuthSessionState.RejectionAction, Bool))
    -> Bool
{
    lhs.0 == rhs.0 && lhs.1 == rhs.1
}
