import AgentCore
import AgentTestSupport
import Foundation
import Testing

/// 30 simulated days of random app-state changes, user switches, registrations, refreshes,
/// server faults, flag changes and restarts, with invariants checked on every read.
/// Covers ST-1..ST-6, RF-4, RF-9, IM-3 together.
@Suite struct VirtualSoakTests {
    /// A tiny server: evaluates flags per user, marks every flag with who it was for.
    final class Server {
        var version = 0
        var faultRate = 0.0
        var partialRate = 0.0
        var failedImpressions = 0
        var rng = SeededRandom(seed: 99)

        func answer(_ r: ScriptedTransport.Recorded) -> ScriptedTransport.Reply {
            let latency = Double.random(in: 0.01...2, using: &rng)
            if Double.random(in: 0..<1, using: &rng) < faultRate {
                let faults: [HTTPOutcome] = [
                    ScriptedTransport.http(503, headers: ["retry-after": "120"]), ScriptedTransport.http(500),
                    .noResponse(reason: "timeout"), .response(status: 200, headers: [:], body: Data("<html>".utf8)),
                    ScriptedTransport.http(429),
                ]
                if r.body["event"] == "PW_FeatureFlagImpression" { failedImpressions += 1 }
                return .answer(faults.randomElement(using: &rng)!, after: latency)
            }
            guard r.method == "getFeatureFlags" else { return .answer(ScriptedTransport.ok(), after: latency) }
            let user = r.body["userId"]?.stringValue ?? "?"
            let app = r.body["application"]?.stringValue ?? "?"
            let partial = Double.random(in: 0..<1, using: &rng) < partialRate
            let flags = (0..<5).map { i in
                FeatureFlag(key: "flag_\(i)", isEnabled: (version + i) % 2 == 0, ruleId: "r_\(version % 3)",
                            properties: ["user": .string(user), "app": .string(app), "partial": .bool(partial),
                                         "version": .number(Double(version))])
            }
            return .answer(ScriptedTransport.flags(flags, partial: partial), after: latency)
        }
    }

    @Test func thirtyDays() {
        var s = VirtualLoop.defaultSettings()
        s.flags.disableThrottle = false
        let loop = VirtualLoop(settings: s, start: false)
        let server = Server()
        loop.transport.script = { server.answer($0) }
        loop.agent.start()
        var rng = SeededRandom(seed: 7)
        let users = ["alice", "bob", "carol"]
        let lifetime = s.flags.storedFlagsLifetime
        let days = 30.0
        var simulated: Seconds = 0  // the monotonic clock restarts with the process
        var reads = 0, restarts = 0, violations: [String] = []
        var impressionsLogged: [String: Int] = [:]
        var sessionId = 0
        var lastRequestCount = 0
        let began = Date()

        func check(_ where_: String) {
            for i in 0..<5 {
                let e = loop.agent.get("flag_\(i)")
                reads += 1
                guard let flag = e.value else { continue }
                if (e.provenance.ageSeconds ?? .infinity) >= lifetime { violations.append("\(where_): served past lifetime") }
                if flag.properties["user"] != .string(loop.agent.userId) { violations.append("\(where_): another user's flags") }
                if flag.properties["app"] != .string(loop.settings.server.applicationCode) { violations.append("\(where_): another app's flags") }
                if e.provenance.source == .cache, flag.properties["partial"] == true { violations.append("\(where_): partial after restart") }
            }
        }

        while simulated < days * 86_400 {
            let step = Double.random(in: 1...(3 * 3600), using: &rng)
            simulated += step
            loop.run(for: step)
            check("after \(Int(step)) s")
            let roll = Int.random(in: 0..<100, using: &rng)
            switch roll {
            case 0..<25:
                let state: AppState = Bool.random(using: &rng) ? .active : .background
                if loop.agent.setAppState(state) { sessionId += 1 }
            case 25..<32:
                loop.agent.setUserId(users.randomElement(using: &rng)!)
                sessionId += 1  // IM-3: a new user starts a fresh set
            case 32..<38:
                _ = loop.agent.registerForPushNotifications()
            case 38..<50:
                loop.agent.refresh { _ in }
            case 50..<65:
                let key = "flag_\(Int.random(in: 0..<5, using: &rng))"
                let before = loop.agent.get(key).value
                if loop.agent.logImpression(key), let f = before {
                    let id = "\(sessionId)|\(f.key)|\(f.ruleId)|\(f.isEnabled)"
                    impressionsLogged[id, default: 0] += 1
                }
            case 65..<75:
                server.version += 1
            case 75..<82:
                server.faultRate = [0, 0, 0.3, 0.9, 1].randomElement(using: &rng)!
                server.partialRate = [0, 0, 0.3].randomElement(using: &rng)!
            case 82..<88:
                let downtime = Double.random(in: 1...(6 * 3600), using: &rng)
                simulated += downtime
                loop.restart(after: downtime)
                restarts += 1
                sessionId += 1
                check("after restart")
            default:
                loop.clock.stepWall(by: Double.random(in: -600...600, using: &rng))
            }
            check("after action \(roll)")
            // RF-9 and no storms: at most one flags request per 60 s on average per step window.
            let newRequests = loop.transport.count("getFeatureFlags") - lastRequestCount
            if newRequests > Int(step / 60) + 4 { violations.append("request storm: \(newRequests) in \(Int(step)) s") }
            lastRequestCount = loop.transport.count("getFeatureFlags")
        }
        let elapsed = Date().timeIntervalSince(began)
        print("soak: \(Int(days)) simulated days in \(String(format: "%.2f", elapsed)) s (\(String(format: "%.0f", days / elapsed)) days/s), \(reads) reads, \(restarts) restarts, \(loop.flagRequests.count) flag requests, \(impressionsLogged.count) impressions, violations: \(violations.count)")
        #expect(violations.isEmpty, "\(violations.prefix(5))")
        // IM-3, IM-4: a second impression for the same flag, rule, state and session only after a failed send.
        let repeats = impressionsLogged.values.reduce(0) { $0 + $1 - 1 }
        #expect(repeats <= server.failedImpressions)
        #expect(impressionsLogged.count > 20)
        #expect(restarts > 10)
        #expect(loop.flagRequests.count > 100)
    }

    @Test("RF-9: under load the server never has two flags requests from the agent at once")
    func flagsRequestsNeverOverlap() {
        let loop = VirtualLoop(start: false)
        loop.transport.script = { r in r.method == "getFeatureFlags" ? .hold : .answer(ScriptedTransport.ok()) }
        loop.agent.start()
        var rng = SeededRandom(seed: 3)
        var maxHeld = 0
        for _ in 0..<2000 {
            switch Int.random(in: 0..<5, using: &rng) {
            case 0: loop.agent.refresh { _ in }
            case 1: loop.agent.setUserId(["a", "b"].randomElement(using: &rng)!)
            case 2: loop.agent.setAppState(Bool.random(using: &rng) ? .active : .background)
            case 3: _ = loop.agent.registerForPushNotifications()
            default:
                if loop.transport.heldCount("getFeatureFlags") > 0 {
                    loop.transport.answerHeld("getFeatureFlags", with: ScriptedTransport.flags([checkout]))
                }
            }
            maxHeld = max(maxHeld, loop.transport.heldCount("getFeatureFlags"))
            loop.run(for: Double.random(in: 0...600, using: &rng))
        }
        #expect(maxHeld == 1)
        #expect(loop.flagRequests.count > 100)
    }
}
