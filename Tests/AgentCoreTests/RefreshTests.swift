import AgentCore
import AgentTestSupport
import Foundation
import Testing

/// docs/rules.md §3: when flags are refreshed.
@Suite struct RefreshTests {
    @Test("RF-1: the first activation and a return after 30 minutes start a session and a refresh")
    func sessionStartRefreshes() {
        let loop = VirtualLoop.serving([checkout])
        #expect(loop.flagRequests.count == 1)
        loop.agent.setAppState(.background)
        loop.run(for: 29 * 60)
        #expect(loop.agent.setAppState(.active) == false)
        loop.settle()
        #expect(loop.flagRequests.count == 1)
        loop.agent.setAppState(.background)
        loop.run(for: 30 * 60)
        #expect(loop.agent.setAppState(.active) == true)
        loop.settle()
        #expect(loop.flagRequests.count == 2)
    }

    @Test func backgroundStartDoesNotRefresh() {
        let loop = VirtualLoop(settings: settings { $0.device.initialAppState = .background })
        loop.run(for: 5 * 3600)
        #expect(loop.flagRequests.isEmpty)
        #expect(loop.agent.setAppState(.active))
        loop.settle()
        #expect(loop.flagRequests.count == 1)
    }

    @Test("RF-2, RF-12: hourly in the foreground, offset within 10% of the period; none in the background")
    func hourlyWhileActive() {
        let loop = VirtualLoop.serving([checkout])
        let start = loop.flagRequests[0].sentAt
        loop.run(for: 5 * 3600)
        let times = loop.flagRequests.map(\.sentAt)
        #expect(times.count == 5)
        // The first lies within 10% past the hour (offset and jitter); then each keeps its
        // slot an hour after the one before, moved by its own jitter (1% either way).
        #expect(times[1] - times[0] >= 3600 && times[1] - times[0] < 3600 * 1.1)
        for (a, b) in zip(times.dropFirst(), times.dropFirst(2)) {
            #expect(abs(b - a - 3600) <= 3600 * 0.02)
        }
        #expect(times[0] == start)
        loop.agent.setAppState(.background)
        loop.run(for: 10 * 3600)
        #expect(loop.flagRequests.count == 5)
    }

    @Test("RF-12: the offset is stable per device and spreads devices across the window")
    func perDeviceOffsetIsStableAndSpread() {
        let hwids = (0..<1000).map { "DEVICE-\($0)" }
        let offsets = hwids.map { Agent.deviceOffset(hwid: $0, period: 3600) }
        #expect(offsets.allSatisfy { $0 >= 36 && $0 < 36 + 288 })  // 1% to 9%: with the jitter, within 10%
        #expect(Agent.deviceOffset(hwid: "A", period: 3600) == Agent.deviceOffset(hwid: "A", period: 3600))
        let buckets = Set(offsets.map { Int($0 / 36) })
        #expect(buckets.count >= 7)  // spread over most of the 8% window
    }

    @Test("RF-3: after push registration, when the previous flags request preceded it")
    func pushRegistrationRefreshes() {
        let loop = VirtualLoop.serving([checkout])
        loop.run(for: 400)
        let result = loop.agent.registerForPushNotifications()
        #expect(result.granted)
        #expect(result.pushToken?.count == 64)
        loop.run(for: 1)
        #expect(loop.transport.requests("registerDevice").count == 1)
        #expect(loop.flagRequests.count == 2)
        #expect(loop.flagRequests.last!.sentAt > loop.transport.requests("registerDevice")[0].sentAt)
    }

    @Test("RF-4: a User ID change refreshes, and an answer for the previous user is dropped")
    func userChangeDropsLateAnswer() {
        let loop = VirtualLoop.serving([dark])
        loop.transport.script = { _ in .hold }
        loop.run(for: 301)
        var manual: RefreshError??
        loop.agent.refresh { manual = .some($0) }  // in flight for the HWID user
        loop.agent.setUserId("bob")
        // RF-9: no overlapping request for bob yet.
        #expect(loop.transport.heldCount("getFeatureFlags") == 1)
        loop.transport.answerHeld("getFeatureFlags", with: ScriptedTransport.flags([checkout]))  // alice's answer
        loop.settle()
        #expect(loop.agent.get("new_checkout").value == nil)  // never shown to bob
        #expect(manual == nil)  // the waiter now waits for bob's request
        #expect(loop.transport.heldCount("getFeatureFlags") == 1)
        #expect(loop.flagRequests.last!.body["userId"] == "bob")
        loop.transport.answerHeld("getFeatureFlags", with: ScriptedTransport.flags([banner]))
        loop.settle()
        #expect(manual! == nil)
        #expect(loop.agent.get("promo_banner").value == banner)
        #expect(loop.store.committed?.flags?.userId == "bob")
    }

    @Test("RF-5: refresh on demand; the completion runs once")
    func manualRefreshCompletesOnce() {
        let loop = VirtualLoop.serving([dark], settings: settings { $0.flags.disableThrottle = true })
        loop.serve([checkout])
        var calls = 0
        loop.agent.refresh { _ in calls += 1 }
        loop.run(for: 10)
        #expect(calls == 1)
        #expect(loop.agent.get("new_checkout").value == checkout)
    }

    @Test("RF-6: at most one request per 5 minutes while flags are valid; the switch disables it")
    func throttle() {
        let loop = VirtualLoop.serving([checkout])
        #expect(loop.refreshAndWait()! == nil)
        #expect(loop.flagRequests.count == 1)
        loop.run(for: 299)
        #expect(loop.refreshAndWait()! == nil)
        #expect(loop.flagRequests.count == 1)
        loop.run(for: 2)
        #expect(loop.refreshAndWait()! == nil)
        #expect(loop.flagRequests.count == 2)

        let open = VirtualLoop.serving([checkout], settings: settings { $0.flags.disableThrottle = true })
        _ = open.refreshAndWait()
        _ = open.refreshAndWait()
        #expect(open.flagRequests.count == 3)
    }

    @Test("RF-6: (interpretation) the throttle applies to `refresh` only, not to automatic triggers")
    func throttleDoesNotHoldAutomaticTriggers() {
        let loop = VirtualLoop.serving([checkout])
        loop.agent.setUserId("bob")
        loop.settle()
        #expect(loop.flagRequests.count == 2)
    }

    @Test("RF-6: without valid flags, refresh always asks the server")
    func throttleNeedsValidFlags() {
        let loop = VirtualLoop.serving([checkout], settings: settings { $0.flags.storedFlagsLifetime = 60 })
        loop.run(for: 61)
        _ = loop.refreshAndWait()
        #expect(loop.flagRequests.count >= 2)
    }

    @Test("RF-7: error codes: HTTP status; 0 no response; 200 unusable")
    func errorCodes() {
        let cases: [(HTTPOutcome, Int)] = [
            (ScriptedTransport.http(503), 503),
            (ScriptedTransport.http(404), 404),
            (.noResponse(reason: "connection refused"), 0),
            (.response(status: 200, headers: [:], body: Data("garbage".utf8)), 200),
            (ScriptedTransport.envelope(["status_code": 210, "status_message": "Application not found"]), 200),
            (ScriptedTransport.envelope(["status_code": 200, "response": ["flags": "nope"]]), 200),
            (ScriptedTransport.envelope(["status_code": 200, "response": ["flags": [["key": "k", "enabled": 1]]]]), 200),
            (ScriptedTransport.envelope(["status_code": "200", "response": [:]]), 200),
        ]
        for (outcome, code) in cases {
            let loop = VirtualLoop.serving([checkout], settings: settings { $0.flags.disableThrottle = true })
            loop.failFlags(with: outcome)
            let error = loop.refreshAndWait()!
            #expect(error?.code == code, "\(outcome)")
            #expect(loop.agent.get("new_checkout").value == checkout)  // stored flags stay in effect
        }
    }

    @Test("RF-8: no request when the server URL does not end with json/1.3/")
    func proxyURLNeverRequestsFlags() {
        let loop = VirtualLoop(settings: settings { $0.server.serverURL = "https://proxy.example/pushwoosh/" })
        loop.run(for: 3 * 3600)
        #expect(loop.flagRequests.isEmpty)
        #expect(loop.transport.requests("applicationOpen").count == 1)
        #expect(loop.refreshAndWait()??.code == 0)
        #expect(loop.agent.isEnabled("x", default: true).value == true)
    }

    @Test("RF-9: requests never overlap; callers join the request in flight")
    func requestsNeverOverlap() {
        let loop = VirtualLoop.serving([dark], settings: settings { $0.flags.disableThrottle = true })
        loop.transport.script = { _ in .hold }
        var results: [RefreshError?] = []
        for _ in 0..<5 { loop.agent.refresh { results.append($0) } }
        loop.agent.setAppState(.background)
        loop.run(for: 3600)
        loop.agent.setAppState(.active)
        #expect(loop.transport.heldCount("getFeatureFlags") == 1)
        loop.transport.answerHeld("getFeatureFlags", with: ScriptedTransport.flags([checkout]))
        loop.settle()
        #expect(results.count == 5)
        #expect(results.allSatisfy { $0 == nil })
    }

    @Test("RF-10: failed automatic refreshes back off with jitter, at most once a minute, honouring Retry-After")
    func backoffAfterFailures() {
        let loop = VirtualLoop.serving([checkout])
        loop.failFlags(with: ScriptedTransport.http(500))
        loop.run(for: 3600 * 1.1)  // the hourly refresh fails
        let failedAt = loop.flagRequests.count
        loop.run(for: 3 * 3600)
        let times = loop.flagRequests.dropFirst(failedAt - 1).map(\.sentAt)
        #expect(times.count >= 4)
        let gaps = zip(times, times.dropFirst()).map { $1 - $0 }
        #expect(gaps.allSatisfy { $0 >= 60 })
        #expect(gaps.allSatisfy { $0 <= 3600 * 1.1 })
        #expect(gaps.prefix(3).last! > gaps.first!)  // growing
        // A.1: a retry after N failures carries `X-Retry-Count: N`; the first (successful)
        // request and the hourly ones carry none. RF-2: the hourly ones keep their slots
        // while the retries go on ("until the next scheduled trigger").
        let counts = loop.flagRequests.map { $0.request.header("X-Retry-Count") }
        #expect(counts.prefix(3) == [nil, nil, "1"], "\(counts)")
        let start = loop.flagRequests[0].sentAt
        let offset = Agent.deviceOffset(hwid: loop.agent.hwid, period: 3600)
        for (i, request) in loop.flagRequests.enumerated().dropFirst(2) {
            if let count = counts[i] {
                #expect(count == String(i - 1), "request \(i): \(counts)")
            } else {
                let off = (request.sentAt - start - offset).truncatingRemainder(dividingBy: 3600)
                #expect(min(off, 3600 - off) <= 36, "request \(i) without a retry count is off the hourly slots by \(off) s")
            }
        }
        // A success ends the count: the next hourly request carries none.
        loop.serve([checkout])
        loop.run(for: 3600 * 1.2)
        #expect(loop.agent.status().state == .ready)
        #expect(loop.flagRequests.last!.request.header("X-Retry-Count") == nil)
    }

    @Test("RF-10: after a 503 with Retry-After 900, no flags request goes out before it has passed")
    func retryAfterIsHonoured() {
        let loop = VirtualLoop.serving([checkout])
        loop.run(for: 301)
        loop.failFlags(with: ScriptedTransport.http(503, headers: ["retry-after": "900"]))
        loop.agent.setAppState(.background)
        loop.run(for: 1800)
        loop.agent.setAppState(.active)  // session start, fails with Retry-After: 900
        loop.run(for: 1)
        let n = loop.flagRequests.count
        loop.run(for: 899)
        #expect(loop.flagRequests.count == n)
        loop.run(for: 900 * 0.5 + 2)
        #expect(loop.flagRequests.count == n + 1)
    }

    @Test("RF-11: 401/403 stop automatic refreshes until reload, a new User ID or a client's refresh")
    func unauthorizedStopsAutomaticRefreshes() {
        for status in [401, 403] {
            let loop = VirtualLoop.serving([checkout])
            loop.failFlags(with: ScriptedTransport.http(status))
            loop.run(for: 3600 * 1.1)
            let n = loop.flagRequests.count
            loop.run(for: 10 * 3600)
            #expect(loop.flagRequests.count == n)
            #expect(loop.agent.status().state == .fatal)
            #expect(loop.agent.get("new_checkout").value == checkout)  // still served until expiry
            loop.serve([checkout])
            loop.agent.reload(loop.settings)
            loop.run(for: 1)
            #expect(loop.flagRequests.count == n + 1)
            #expect(loop.agent.status().state == .ready)

            // A client's refresh lifts the stop (and may meet 401 again).
            loop.failFlags(with: ScriptedTransport.http(status))
            loop.run(for: 3600 * 1.1)
            #expect(loop.agent.status().state == .fatal)
            let m = loop.flagRequests.count
            #expect(loop.refreshAndWait()??.code == status)
            #expect(loop.flagRequests.count == m + 1)
            // So does a new User ID.
            loop.agent.setUserId("carol")
            loop.settle()
            #expect(loop.flagRequests.count == m + 2)
        }
    }
}

/// RF-10 with a Retry-After longer than the refresh period (found by the soak runner).
@Suite struct RetryAfterTests {
    @Test("RF-10: a Retry-After longer than the refresh period holds the periodic trigger, not a client's refresh")
    func retryAfterHoldsThePeriodicTrigger() {
        let loop = VirtualLoop.serving([checkout], settings: settings { $0.flags.refreshInterval = 15 })
        loop.failFlags(with: ScriptedTransport.http(503, headers: ["retry-after": "40"]))
        loop.run(for: 16.6)  // the periodic refresh fails with Retry-After: 40
        let failedAt = loop.flagRequests.last!.sentAt
        let n = loop.flagRequests.count
        loop.serve([checkout])
        loop.run(for: 39)
        #expect(loop.flagRequests.count == n, "no automatic request within Retry-After")
        // Then the retry, or the hourly refresh when it comes less than the retry floor (here the
        // period, 15 s) after it: both would go out within seconds.
        loop.run(for: 2 + 15)
        let next = loop.flagRequests.dropFirst(n).first?.sentAt ?? .infinity
        #expect(next - failedAt >= 40 && next - failedAt <= 40 + 15, "\(loop.flagRequests.map { $0.sentAt - failedAt })")
        // A client's refresh is not held.
        let manual = VirtualLoop.serving([checkout], settings: settings { $0.flags.disableThrottle = true })
        manual.failFlags(with: ScriptedTransport.http(429, headers: ["retry-after": "600"]))
        _ = manual.refreshAndWait()
        let m = manual.flagRequests.count
        _ = manual.refreshAndWait()
        #expect(manual.flagRequests.count == m + 1)
    }
}
