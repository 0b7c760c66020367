import AgentCore
import AgentPosix
import Foundation
#if canImport(Glibc)
import Glibc
import HarnessSupport
import ToolSupport
#endif

/// The server side of the soak: flag changes and faults through the emulator's admin API
/// (docs/emulator.md D.2), from its own thread. One fault is armed at a time, so each faulted
/// request in the log belongs to the fault armed last.
public final class Chaos: @unchecked Sendable {
    let http: LoopbackHTTP
    let ctx: RunContext
    var rng: SeededRandom
    /// Killed / archived as last set, per key.
    var killed: [String: Bool] = [:]
    var archived: [String: Bool] = [:]
    /// The coverage plan's faults not armed yet, earliest first.
    var planned: [CoveragePlan.Assignment]

    static let killable = ["new_checkout", "promo_banner", "rich_notifications", "home_layout"]
    static let archivable = ["new_checkout", "rich_notifications", "home_layout", "legacy_onboarding"]

    init(http: LoopbackHTTP, ctx: RunContext, initial: [FlagChange]) {
        self.http = http
        self.ctx = ctx
        rng = SeededRandom(seed: ctx.options.seed ^ 0xC4A0_5C4A_05)
        planned = (ctx.plan?.assignments ?? []).filter(\.duty.isFault)
        for c in initial {
            killed[c.key] = c.killed
            archived[c.key] = c.archived
        }
    }

    var path: String { "/admin/apps/\(RunContext.applicationCode)/flags" }

    func run() {
        if ctx.options.realTimings { return runInDeviceTime() }
        while !ctx.recorder.stopping, now() < ctx.deadline {
            let pause = min(rng.exponential(mean: ctx.options.chaosEvery), ctx.options.chaosEvery * 4)
            let until = now() + pause
            while now() < until, !ctx.recorder.stopping {
                usleep(100_000)
                do { try armPlanned() } catch { report(error) }
            }
            if ctx.recorder.stopping || now() >= ctx.deadline { break }
            do {
                if ctx.options.faults, rng.chance(0.5), try faultsIdle() {
                    if ctx.options.agents > 1, rng.chance(0.15) { try takeOneDeviceOffline() } else { try armFault() }
                } else {
                    try changeFlag()
                }
            } catch { report(error) }
        }
        _ = try? http.call("DELETE", "/admin/faults")
    }

    /// With the real timings: events paced in device time, faults sized in it (ChaosPlanner).
    func runInDeviceTime() {
        var planner = ChaosPlanner(seed: ctx.options.seed, lifetime: ctx.options.timings.lifetime, refresh: ctx.options.timings.refresh,
                                   runEnd: ctx.planStart + ctx.options.deviceDays * 86_400)
        while !ctx.recorder.stopping, now() < ctx.deadline {
            let next = ctx.timeline.deviceNow() + planner.pause()
            while ctx.timeline.deviceNow() < next, !ctx.recorder.stopping, now() < ctx.deadline {
                usleep(100_000)
                do { try armPlanned() } catch { report(error) }
            }
            if ctx.recorder.stopping || now() >= ctx.deadline { break }
            do {
                if ctx.options.faults, rng.chance(0.5), try faultsIdle(),
                   let fault = planner.fault(at: ctx.timeline.deviceNow(), targets: targets(), agents: ctx.options.agents,
                                             plannedWaiting: !planned.isEmpty) {
                    let json = JSONValue.object(fault.agent.map { a in fault.json.merging(["hwid": .string(hwid(a))]) { $1 } } ?? fault.json)
                    let t0 = now()
                    _ = try http.json("POST", "/admin/faults", json: json)
                    ctx.recorder.fault(ArmedFault(method: json["method"]?.stringValue ?? "", start: t0, end: now(), json: json, agent: fault.agent))
                } else {
                    try changeFlag()
                }
            } catch { report(error) }
        }
        _ = try? http.call("DELETE", "/admin/faults")
    }

    func hwid(_ agent: Int) -> String { ctx.recorder.state.withLock { $0.tracks[agent].hwid } }

    /// The devices a fault can hit: started, their process up, and no duty keeping them silent
    /// (the expiry's day in the background).
    func targets() -> [Int] {
        let silent = ctx.board.silentAgents
        let tracks = ctx.recorder.state.withLock { $0.tracks.map { ($0.hwid, $0.pids.last) } }
        return tracks.indices.filter { i in
            guard !tracks[i].0.isEmpty, !silent.contains(i), let pid = tracks[i].1 else { return false }
            return ctx.exits.isUp(pid)
        }
    }

    func report(_ error: EmulatorCallError) {
        if !ctx.recorder.stopping {
            ctx.recorder.violation(Violation("emulator", agent: nil, time: now(), "admin API call failed: \(error)"))
        }
    }

    /// Arms the plan's next fault once it is due, its device has started and no other fault is armed
    /// (one at a time: each faulted request belongs to the fault armed last).
    func armPlanned() throws(EmulatorCallError) {
        guard let next = planned.first, ctx.planStart + next.at <= ctx.timeline.deviceNow() else { return }
        // Aimed only where it can hit: a device kept silent by its duty waits until it is over.
        guard targets().contains(next.device), try faultsIdle() else { return }
        let hwid = hwid(next.device)
        let method = JSONValue.string(PushwooshAPI.Method.getFeatureFlags.rawValue)
        let f: JSONValue
        switch next.duty {
        case .retryAfter(let seconds): f = ["method": method, "hwid": .string(hwid), "http": 503, "retryAfter": .number(seconds), "times": 1]
        case .outage(let seconds): f = ["method": method, "hwid": .string(hwid), "forSeconds": .number(seconds), "drop": true]
        default: planned.removeFirst(); return
        }
        let t0 = now()
        _ = try http.json("POST", "/admin/faults", json: f)
        planned.removeFirst()
        ctx.recorder.fault(ArmedFault(method: PushwooshAPI.Method.getFeatureFlags.rawValue, start: t0, end: now(), json: f, agent: next.device))
        ctx.board.armed(agent: next.device, next.duty)
    }

    func faultsIdle() throws(EmulatorCallError) -> Bool {
        let r = try http.json("GET", "/admin/faults")
        return r["faults"]?.arrayValue?.isEmpty ?? true
    }

    func armFault() throws(EmulatorCallError) {
        let times = JSONValue.number(Double(1 + rng.next() % 3))
        let retryAfter = JSONValue.number(Double(2 + rng.next() % UInt64(max(2, ctx.options.timings.refresh - 4))))
        var f: [String: JSONValue]
        // While a planned fault waits for its turn, no outage of every device holds it back for days.
        switch rng.next() % 14 {
        case 12 where planned.isEmpty:
            // An outage long enough for stored flags to expire (ST-3, ST-4): every agent's
            // requests fail for about lifetime + 2 refresh intervals.
            let perAgent = (ctx.options.timings.lifetime / ctx.options.timings.retryFloor).rounded(.up) + 2
            f = ["http": 503, "times": .number(perAgent * Double(ctx.options.agents))]
        case 0, 12: f = ["http": .number([500, 502, 504][Int(rng.next() % 3)])]
        case 1: f = ["http": 503]
        case 2: f = ["http": 503, "retryAfter": retryAfter]
        case 3: f = ["http": 429, "retryAfter": retryAfter]
        case 4: f = ["drop": true]
        case 5: f = ["delayMs": .number(Double(300 + rng.next() % 3000))]
        case 6: f = ["body": "garbage"]
        case 7: f = ["statusCode": .number([210, 500][Int(rng.next() % 2)])]
        case 8: f = ["partial": true]
        case 9: f = ["drop": true, "delayMs": .number(Double(200 + rng.next() % 1500))]
        case 10: f = ["http": 429]
        case 11: f = ["http": 500, "delayMs": .number(Double(200 + rng.next() % 2000))]
        default:
            // Impressions that fail are sent again on the next logImpression (IM-4).
            f = rng.chance(0.5) ? ["http": 500] : ["drop": true]
            f["method"] = .string(PushwooshAPI.Method.postEvent.rawValue)
        }
        if f["method"] == nil { f["method"] = .string(PushwooshAPI.Method.getFeatureFlags.rawValue) }
        if f["times"] == nil { f["times"] = times }
        let t0 = now()
        _ = try http.json("POST", "/admin/faults", json: .object(f))
        ctx.recorder.fault(ArmedFault(method: f["method"]!.stringValue!, start: t0, end: now(), json: .object(f)))
    }

    /// docs/emulator.md D.3: one device's network goes away for a while (a fault scoped to its
    /// HWID, for a window of emulator time) while the others keep refreshing. The
    /// `outage` check then holds the log to it: inside the window every flags request of
    /// that device is dropped, and nobody else's is.
    func takeOneDeviceOffline() throws(EmulatorCallError) {
        let hwids = ctx.recorder.state.withLock { $0.tracks.map(\.hwid) }
        let candidates = targets()
        guard !candidates.isEmpty else { return try armFault() }
        let agent = candidates[Int(rng.next() % UInt64(candidates.count))]
        let window = (ctx.options.timings.refresh * (0.5 + rng.unit() * 1.5)).rounded()
        let f: JSONValue = ["method": .string(PushwooshAPI.Method.getFeatureFlags.rawValue), "hwid": .string(hwids[agent]), "forSeconds": .number(window), "drop": true]
        let t0 = now()
        _ = try http.json("POST", "/admin/faults", json: f)
        ctx.recorder.fault(ArmedFault(method: PushwooshAPI.Method.getFeatureFlags.rawValue, start: t0, end: now(), json: f, agent: agent))
    }

    func changeFlag() throws(EmulatorCallError) {
        let roll = rng.unit()
        let t0 = now()
        let response: JSONValue
        let key: String
        let kind: String
        if roll < 0.3 {
            // A rollout percentage and a property default of new_checkout.
            key = "new_checkout"
            var flag = try http.json("GET", "\(path)/\(key)")
            let percent = Double(rng.next() % 101)
            let color = ["blue", "red", "teal", "black"][Int(rng.next() % 4)]
            if case .object(var o) = flag {
                if case .object(var props)? = o["properties"], case .object(var bc)? = props["button_color"] {
                    bc["default"] = .string(color)
                    props["button_color"] = .object(bc)
                    o["properties"] = .object(props)
                }
                if case .array(var rules)? = o["rules"] {
                    for i in rules.indices {
                        if case .object(var rule) = rules[i], case .object(var when)? = rule["when"], when["rolloutPercent"] != nil {
                            when["rolloutPercent"] = .number(percent)
                            rule["when"] = .object(when)
                            rules[i] = .object(rule)
                        }
                    }
                    o["rules"] = .array(rules)
                }
                flag = .object(o)
            }
            response = try http.json("PUT", "\(path)/\(key)", json: flag)
            kind = "rollout/default"
        } else if roll < 0.7 {
            key = Self.killable[Int(rng.next() % UInt64(Self.killable.count))]
            let action = killed[key] == true ? "unkill" : "kill"
            response = try http.json("POST", "\(path)/\(key)/\(action)")
            kind = action
        } else {
            key = Self.archivable[Int(rng.next() % UInt64(Self.archivable.count))]
            let action = archived[key] == true ? "unarchive" : "archive"
            response = try http.json("POST", "\(path)/\(key)/\(action)")
            kind = action
        }
        let k = response["killed"]?.boolValue ?? false
        let a = response["archived"]?.boolValue ?? false
        killed[key] = k
        archived[key] = a
        ctx.recorder.flagChange(FlagChange(key: key, start: t0, end: now(), killed: k, archived: a, description: kind), kind: kind)
    }
}
