import AgentCore
import AgentPosix
import AgentWire
import Foundation
import Glibc
import ToolSupport

/// Drives one agent from its own thread: starts it, sends random actions and observations
/// through the socket, restarts it, and finally stops it. Its mutable state is confined to
/// that thread (hence `@unchecked Sendable`: it is handed to the thread once).
public final class AgentDriver: @unchecked Sendable {
    let index: Int
    let ctx: RunContext
    var rng: SeededRandom
    var pid: pid_t = 0
    /// Where its socket is (its lab DEVICE record's `socket`).
    var socketPath = ""
    /// Whether the lab has it (started once: later starts are lab restarts).
    var inLab = false
    var client: LineClient?
    public private(set) var hwid = ""
    var userId = ""
    var active = true
    var backgroundUntil: Time?
    var nextRestart: Time = .infinity
    var primerAvailable = true
    var broken = false
    /// The coverage plan's duties of this device not done yet, earliest first.
    var duties: [CoveragePlan.Assignment]
    /// The expiry duty under way: the status that dated the flags, the two looks' device
    /// times, and what the first look saw.
    var expiry: (dated: StatusObservation, before: Time, after: Time, first: (StatusObservation, FlagObservation)?)?

    public init(index: Int, ctx: RunContext) {
        self.index = index
        self.ctx = ctx
        rng = SeededRandom(seed: ctx.options.seed &* 1_000_003 &+ UInt64(index) &* 7919)
        // The planned faults are the chaos thread's; the driver only meets them (`meet`).
        duties = (ctx.plan?.duties(of: index) ?? []).filter { !$0.duty.isFault }
    }

    /// A violation about the current process (`pid`).
    func violation(_ invariant: String, _ message: String, evidence: [String] = []) {
        ctx.recorder.violation(Violation(invariant, agent: index, pid: pid > 0 ? pid : nil, time: now(), message, evidence: evidence))
    }

    /// Whether the run is over: the driver then starts no process, so none is left
    /// starting while the runner winds down.
    var runEnding: Bool { ctx.recorder.stopping || now() >= ctx.deadline }

    /// The agent's configuration (docs/configuration.md C.1) with the run's timings, as the
    /// lab takes it (`config`: the lab adds its socket, state directory, server and clock).
    var configuration: [String: [String: String]] {
        let t = ctx.options.timings
        return [
            "Agent": ["ApplicationCode": RunContext.applicationCode, "RequestTimeout": "8s"],
            "FeatureFlags": ["StoredFlagsLifetime": TimeSpan.format(t.lifetime), "SessionTimeout": TimeSpan.format(t.sessionGap),
                             "RefreshInterval": TimeSpan.format(t.refresh), "ThrottleWindow": TimeSpan.format(t.throttle)],
            "Device": ["InitialAppState": "background"],
        ]
    }

    /// The last lines of its log, through the lab.
    func logTail(_ lines: Int) -> [String] { ctx.lab.log(index, lines: lines) }

    /// Starts the process as a lab device, or restarts it in the lab once it has been one (in
    /// the background: no session, so nothing refreshes before the runner has subscribed and
    /// looked at the stored flags); the lab answers once READY=1 came. False (with a
    /// violation) when it did not come, or not within 10 s of the start.
    @discardableResult
    public func start() -> Bool {
        var env: [String: String] = [:]
        if ctx.options.watchdog > 0 { env["WATCHDOG_USEC"] = String(Int(ctx.options.watchdog * 1_000_000)) }
        let t0 = now()
        let device: LabDeviceRecord
        do {
            device = try inLab ? ctx.lab.restart(index)
                : ctx.lab.start(index, config: configuration, controlled: ctx.options.realTimings, environment: env)
        } catch {
            violation("ready", "the lab did not start the agent: \(error)")
            return false
        }
        inLab = true
        guard let started = device.pid.map({ pid_t($0) }) else {
            violation("ready", "the lab started the agent but names no process (state \(device.state))")
            return false
        }
        (pid, socketPath) = (started, device.socket)
        ctx.exits.started(pid)
        let (i, p, socket) = (index, pid, socketPath)
        ctx.recorder.state.withLock { s in
            s.tracks[i].pids.append(p)
            s.tracks[i].socket = socket
        }
        ctx.lab.readNotifications(index, into: ctx.notify)
        guard let ready = ctx.notify.received(index, line: "READY=1", since: t0), ready.time - t0 <= 10 else {
            let late = ctx.notify.received(index, line: "READY=1", since: t0).map { String(format: " (it came after %.1f s)", $0.time - t0) } ?? ""
            violation("ready", "no READY=1 within 10 s of starting the agent" + late, evidence: logTail(15))
            return false
        }
        ctx.recorder.action(AgentAction(agent: index, kind: .started, start: t0, end: ready.time))
        ctx.recorder.action(AgentAction(agent: index, kind: .appState(active: false), start: ready.time, end: ready.time))
        active = false
        backgroundUntil = nil
        client = nil
        for _ in 0..<50 {
            if let c = try? LineClient(connecting: socketPath, timeout: 20) { client = c; break }
            usleep(20_000)
        }
        guard client != nil else {
            violation("socket", "READY=1 was sent but the socket does not accept connections", evidence: [socketPath])
            return false
        }
        if !NotificationWatcher.start(agent: index, socketPath: socketPath, recorder: ctx.recorder) {
            violation("socket", "subscribe (flags, refresh) was not accepted")
        }
        return true
    }

    /// One socket call; nil (after recording why) when the agent did not answer.
    func call(_ call: SocketCall) -> Result<JSONValue, RPCError>? {
        guard let client else { return nil }
        ctx.recorder.busy(index, since: now())
        defer { ctx.recorder.busy(index, since: nil) }
        do {
            return try client.call(method: call.method, params: call.params).outcome
        } catch {
            self.client = nil
            usleep(200_000)
            // A process that ended is a crash (the one violation), not a failed call.
            if ctx.exits.isUp(pid), !ctx.recorder.stopping {
                violation("socket", "\(AgentCallError(agent: index, hwid: hwid, method: call.method.rawValue, why: "\(error)"))",
                          evidence: logTail(10))
            }
            broken = true
            return nil
        }
    }

    func result(_ call: SocketCall) -> JSONValue? {
        switch self.call(call) {
        case .success(let v)?: return v
        case .failure(let e)?:
            violation("socket", "\(call.method) answered error \(e.code): \(e.message)", evidence: ["params \(JSONWriter.string(.object(call.params)))"])
            return nil
        case nil: return nil
        }
    }

    // MARK: - Observations

    /// A `status` answer, checked with the others (`record` false: only read).
    @discardableResult
    func observeStatus(record: Bool = true) -> StatusObservation? {
        let sent = now()
        guard let r = result(.status) else { return nil }
        do {
            let o = try StatusObservation(agent: index, sent: sent, received: now(), expectedUserId: userId, expectedActive: active, result: r)
            if record { ctx.recorder.observe(o) }
            return o
        } catch {
            violation("socket", "status answered a malformed result: \(error)", evidence: [JSONWriter.string(r)])
            return nil
        }
    }

    @discardableResult
    func observeFlag(_ key: String, afterUserSwitch: Bool = false) -> FlagObservation? {
        let sent = now()
        guard let r = result(.get(key: key)) else { return nil }
        do {
            var o = try FlagObservation(agent: index, hwid: hwid, key: key, sent: sent, received: now(), expectedUserId: userId, result: r)
            o.afterUserSwitch = afterUserSwitch
            ctx.recorder.observe(o, tracked: RunContext.trackedFlag)
            return o
        } catch {
            violation("socket", "get answered a malformed result: \(error)", evidence: [JSONWriter.string(r)])
            return nil
        }
    }

    func observe() {
        observeStatus()
        observeFlag(RunContext.userFlag)
        observeFlag(RunContext.trackedFlag)
        observeFlag(RunContext.observedKeys[Int(rng.next() % UInt64(RunContext.observedKeys.count))])
        let sent = now()
        if let r = result(.isEnabled(key: RunContext.trackedFlag, default: true)),
           r["enabled"]?.boolValue == nil || (r["ageSeconds"]?.numberValue ?? 0) > ctx.options.timings.lifetime + 0.0005 {
            violation("lifetime", "isEnabled answered \(JSONWriter.string(r))", evidence: ["sent \(iso8601(sent))"])
        }
    }

    // MARK: - Actions

    @discardableResult
    func setUser() -> Bool {
        var candidates = RunContext.userPool + ["device-\(index)-\(rng.next() % 3)"]
        candidates.removeAll { $0 == userId }
        let next = candidates[Int(rng.next() % UInt64(candidates.count))]
        let t0 = now()
        guard result(.setUserId(next)) != nil else { return false }
        userId = next
        ctx.recorder.action(AgentAction(agent: index, kind: .userChanged(next), start: t0, end: now()))
        ctx.recorder.count(agent: index, SocketMethod.setUserId.rawValue)
        // RF-4: straight away, the previous user's flags must be gone.
        observeFlag(RunContext.userFlag, afterUserSwitch: true)
        return true
    }

    func goBackground() {
        let t0 = now()
        guard let r = result(.setAppState(.background)) else { return }
        active = false
        ctx.recorder.action(AgentAction(agent: index, kind: .appState(active: false), start: t0, end: now()))
        ctx.recorder.count(agent: index, "background")
        if r["sessionStarted"]?.boolValue == true { violation("status", "going to background started a session") }
        // Device time: with --real-timings the 30-min session gap passes in device time.
        backgroundUntil = ctx.timeline.deviceNow() + 1 + rng.unit() * ctx.options.timings.sessionGap * 1.8
    }

    func goActive() {
        let t0 = now()
        guard let r = result(.setAppState(.active)) else { return }
        let end = now()
        active = true
        backgroundUntil = nil
        ctx.recorder.action(AgentAction(agent: index, kind: .appState(active: true), start: t0, end: end))
        ctx.recorder.count(agent: index, "active")
        if r["sessionStarted"]?.boolValue == true {
            ctx.recorder.action(AgentAction(agent: index, kind: .sessionStarted, start: t0, end: end))
            ctx.recorder.count(agent: index, "sessionStarted")
        }
    }

    func push() {
        if rng.chance(0.7) {
            let t0 = now()
            guard let r = result(.registerForPushNotifications) else { return }
            ctx.recorder.count(agent: index, "registerForPush")
            if r["granted"]?.boolValue == true {
                ctx.recorder.action(AgentAction(agent: index, kind: .pushRegistration, start: t0, end: now() + 2))
            }
        } else {
            guard result(.unregisterForPushNotifications) != nil else { return }
            ctx.recorder.count(agent: index, "unregisterForPush")
        }
    }

    func authorization() {
        let all = NotificationAuthorization.allCases
        guard result(.setNotificationAuthorization(all[Int(rng.next() % UInt64(all.count))])) != nil else { return }
        ctx.recorder.count(agent: index, SocketMethod.setNotificationAuthorization.rawValue)
    }

    func primer() {
        guard primerAvailable else { return }
        var primer = PrimerConfiguration(title: "Stay in the loop", message: "Allow notifications?",
                                         acceptButton: "Allow", declineButton: "Not now")
        primer.answer = rng.chance(0.6) ? .accept : .decline
        if rng.chance(0.5) { primer.style = rng.chance(0.5) ? .alert : .sheet }
        if rng.chance(0.3) { primer.minInterval = Double(rng.next() % 30) }
        if rng.chance(0.3) { primer.fallbackToSettings = rng.chance(0.5) }
        let t0 = now()
        switch call(.presentPushPrimer(primer)) {
        case .success(let r)?:
            ctx.recorder.count(agent: index, SocketMethod.presentPushPrimer.rawValue)
            ctx.recorder.state.withLock { $0.primerAvailable = true }
            if r["outcome"]?.stringValue == "accepted" {
                // PR-4: accepting runs the ordinary registration, which may refresh (RF-3).
                ctx.recorder.action(AgentAction(agent: index, kind: .pushRegistration, start: t0, end: now() + 2))
            }
        case .failure(let e)? where e.code == RPCError.methodNotFoundCode:
            primerAvailable = false
            ctx.recorder.state.withLock { if $0.primerAvailable == nil { $0.primerAvailable = false } }
        case .failure(let e)?:
            violation("socket", "presentPushPrimer answered error \(e.code): \(e.message)", evidence: [JSONWriter.string(.object(primer.params))])
        case nil: break
        }
    }

    @discardableResult
    func refresh() -> RefreshAnswer? {
        let t0 = now()
        guard let r = result(.refresh) else { return nil }
        let end = now()
        ctx.recorder.action(AgentAction(agent: index, kind: .manualRefresh, start: t0, end: end))
        do throws(AnswerError) {  // decoding checks the error's domain too (PWFeatureFlagsErrorDomain)
            let answer = try RefreshAnswer(json: r)
            ctx.recorder.count(agent: index, answer.soakCount)
            let probe = RefreshProbe(agent: index, sent: t0, received: end, wasSent: answer.sent, failed: answer.error != nil,
                                     throttledUntil: answer.throttledUntil?.timeIntervalSince1970)
            ctx.recorder.state.withLock { $0.refreshProbes.append(probe) }
            return answer
        } catch {
            violation("socket", "refresh answer: \(error): \(JSONWriter.string(r))")
            return nil
        }
    }

    func impression() {
        let keys = ["new_checkout", "promo_banner", "rich_notifications", "home_layout", "soak_user", "no_such_flag"]
        let key = keys[Int(rng.next() % UInt64(keys.count))]
        guard let r = result(.logImpression(key: key)) else { return }
        ctx.recorder.count(agent: index, r["logged"]?.boolValue == true ? "impressionLogged" : "impressionSkipped")
    }

    func property() {
        guard let r = result(.property(key: "new_checkout", property: "button_color", type: .string, default: "none")) else { return }
        ctx.recorder.count(agent: index, SocketMethod.property.rawValue)
        if r["value"]?.stringValue == nil { violation("socket", "property(string) answered a non-string: \(JSONWriter.string(r))") }
    }

    /// The driver's thread.
    public func run() {
        ctx.recorder.busy(index, since: now())
        let up = ctx.gate.shared { start() }
        ctx.firstStarts.leave()
        ctx.recorder.busy(index, since: nil)
        guard up else { return }
        ctx.gate.shared {
            if let r = result(.status) {
                userId = r["userId"]?.stringValue ?? ""
                hwid = r["hwid"]?.stringValue ?? ""
                let (i, h) = (index, hwid)
                ctx.recorder.state.withLock { $0.tracks[i].hwid = h }
            }
            observeStatus()
            goActive()
            // A duty due from the start (the expiry of a 1-device-day run) before the clock moves.
            if let first = duties.first, first.at <= 0, perform(first.duty) { duties.removeFirst() }
        }
        scheduleRestart()
        while !runEnding, !broken {
            let pause = min(rng.exponential(mean: ctx.options.pace), ctx.options.pace * 4)
            // A look the clock waits for cuts the pause short.
            let until = now() + pause
            while now() < until, ctx.board.due(agent: index, deviceNow: ctx.timeline.deviceNow()) == nil { usleep(10_000) }
            if runEnding { break }
            ctx.gate.shared { act() }
            if client == nil { break }
        }
        ctx.board.releaseAll(agent: index)
        shutdown()
    }

    /// One step of the driver: a restart, a return to the foreground, or a random action.
    func act() {
        if expiry != nil { keepForExpiry(); return }
        if now() >= nextRestart { restart(); return }
        if client == nil { return }
        if let i = duties.firstIndex(where: { ctx.planStart + $0.at <= ctx.timeline.deviceNow() }) {
            if perform(duties[i].duty) { duties.remove(at: i) }
            return
        }
        if !ctx.board.takeArmed(agent: index).isEmpty { meet(); return }
        if !active, let until = backgroundUntil, ctx.timeline.deviceNow() >= until { goActive(); return }
        let roll = rng.unit() * 100
        switch roll {
        case ..<35: observe()
        case ..<50: impression()
        case ..<57: setUser()
        case ..<63: if active { goBackground() } else { observe() }
        case ..<68: push()
        case ..<71: authorization()
        case ..<75: primer()
        case ..<85: refresh()
        case ..<90: property()
        default: observe()
        }
    }
}
