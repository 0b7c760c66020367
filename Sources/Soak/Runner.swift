import AgentCore
import AgentPosix
import AgentWire
import Dispatch
import Foundation
import HarnessSupport
import Synchronization
#if canImport(Glibc)
import Glibc
import ToolSupport
#endif

/// The soak run: the emulator, N agents with their drivers, the chaos thread, and the
/// checker loop on the calling thread.
public final class SoakRunner: @unchecked Sendable {
    public let options: SoakOptions
    /// The emulator (with the lab its agents live in), once started.
    let emulator = Mutex<EmulatorChild?>(nil)
    /// Which agent processes ended, and which ends were the runner's doing.
    let exits = ExitWatch()
    let resources = ResourceSampler()
    let recorder: Recorder
    let interrupted = Mutex(false)
    let started = now()

    // The request log, merged (checker thread only).
    var flagCalls: [String: [DeviceCall]] = [:]
    var impressionCalls: [String: [DeviceCall]] = [:]
    var methodCounts: [String: Int] = [:]
    var faultedCalls = 0
    var flagsOK = 0
    var flagsFailed = 0
    var seen: [String: Time] = [:]
    var logSince: Time = 0
    var horizon: Time = 0

    // Checkers (checker thread only).
    var lifetime: LifetimeChecker
    var status = StatusChecker()
    var provenance = ProvenanceChecker(userFlag: RunContext.userFlag, userPool: Set(RunContext.userPool))
    var schedule: ScheduleChecker
    var impressions = ImpressionChecker()
    var outages = OutageChecker()
    var expiry: ExpiryChecker
    var cache: CacheChecker
    var throttle: ThrottleChecker
    var userSwitch = UserSwitchChecker(userFlag: RunContext.userFlag, userPool: Set(RunContext.userPool))
    /// `--real-timings`: the duties that cover every invariant.
    let plan: CoveragePlan?
    /// `--real-timings`: the device clocks and their driver.
    var timeline = DeviceTimeline()
    var clockDriver: ClockDriver?
    var watchdogChecks = 0
    /// The emulator's own exit was reported (checker thread only).
    var emulatorCrashed = false

    public init(options: SoakOptions) {
        self.options = options
        recorder = Recorder(agents: options.agents)
        lifetime = LifetimeChecker(lifetime: options.timings.lifetime)
        schedule = ScheduleChecker(timings: options.timings, slack: options.slack, grace: 6 + options.slack)
        expiry = ExpiryChecker(lifetime: options.timings.lifetime)
        cache = CacheChecker(lifetime: options.timings.lifetime)
        throttle = ThrottleChecker(throttle: options.timings.throttle)
        plan = options.realTimings ? CoveragePlan(seed: options.seed, agents: options.agents, deviceDays: options.deviceDays,
                                                  lifetime: options.timings.lifetime) : nil
    }

    func say(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }

    /// Where the binaries are: `--bin`, else the directory of this executable.
    static func binDirectory(_ options: SoakOptions) -> String {
        if let dir = options.binDirectory { return dir }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return (exe as NSString).deletingLastPathComponent
    }

    /// The example flags: `--apps`, else config/flags.example.json found from here or the binaries.
    static func appsFile(_ options: SoakOptions, bin: String) -> String? {
        if let apps = options.apps { return apps }
        var candidates = [FileManager.default.currentDirectoryPath + "/config/flags.example.json"]
        var dir = bin
        for _ in 0..<5 {
            dir = (dir as NSString).deletingLastPathComponent
            candidates.append(dir + "/config/flags.example.json")
        }
        return candidates.first { FileManager.default.fileExists(atPath: $0) }
    }

    /// Runs the soak; returns the exit code (0 pass, 1 violation, 2 setup error, 130 interrupted).
    public func run() -> Int32 {
        // Signals go to the signal thread only (threads inherit the mask); children get defaults.
        var mask = sigset_t()
        sigemptyset(&mask)
        for s in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&mask, s) }
        pthread_sigmask(SIG_BLOCK, &mask, nil)
        // A shell's background job starts with SIGINT ignored, and an ignored signal never
        // reaches sigwait: take the default back (it stays blocked, so sigwait gets it).
        for s in [SIGINT, SIGTERM, SIGHUP] { signal(s, SIG_DFL) }
        signal(SIGPIPE, SIG_IGN)
        let blocked = mask
        let signalThread = Thread { [self] in
            var set = blocked
            var received: Int32 = 0
            while true {
                guard sigwait(&set, &received) == 0 else { continue }
                let again = interrupted.withLock { was in defer { was = true }; return was }
                if again {
                    // The agents end with it: the lab runs each under the parent-death signal.
                    emulator.withLock { $0 }?.signal(SIGKILL)
                    _exit(130)
                }
                say("pushwoosh-soak: \(signalName(received)) received; stopping (again to kill at once)")
                recorder.requestStop()
            }
        }
        signalThread.start()

        let code: Int32
        do {
            code = try soak()
        } catch {
            say("pushwoosh-soak: \(error)")
            emulator.withLock { $0 }?.stop()
            return 2
        }
        return code
    }

    func soak() throws(SoakError) -> Int32 {
        try prepareOutputs()
        if options.coverageRequired, let plan, !plan.refusal.isEmpty {
            return refuse(plan.refusal)
        }
        let bin = Self.binDirectory(options)
        let agentd = bin + "/pushwoosh-agentd", emulatorBinary = bin + "/pushwoosh-emulator"
        for (name, b) in [("agent", agentd), ("emulator", emulatorBinary)] where !FileManager.default.isExecutableFile(atPath: b) {
            throw .process(SoakProcessError(name: name, binary: b, .notExecutable))
        }
        guard let apps = Self.appsFile(options, bin: bin) else { throw .noApps }
        var template = Array("/tmp/pushwoosh-soak.XXXXXX".utf8CString)
        guard let root = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }).map({ String(cString: $0) }) else {
            let code = errno
            throw .file(SoakFileError("the work directory", path: "/tmp/pushwoosh-soak.XXXXXX", call: "mkdtemp", errno: code))
        }
        defer { try? FileManager.default.removeItem(atPath: root) }

        var env = ProcessInfo.processInfo.environment
        for k in env.keys where k.hasPrefix("NOTIFY_") || k.hasPrefix("LISTEN_") || k.hasPrefix("WATCHDOG_") { env[k] = nil }

        // The lab: the emulator with --lab, whose devices the agents are (its children, not the runner's).
        let emulatorLog = root + "/emulator.log", labDirectory = root + "/lab"
        let http: LoopbackHTTP
        do {
            http = try startEmulator(emulatorBinary, apps: apps, agentd: agentd, lab: labDirectory, environment: env, logPath: emulatorLog)
        } catch { throw .process(error) }
        let initial: [FlagChange]
        do { initial = try seedApp(http) } catch { throw .emulator(error) }

        let notify = NotifyLog(agents: options.agents)
        let deadline = now() + options.duration
        var ctx = RunContext(options: options, lab: LabDevices(http: http), exits: exits, notify: notify, recorder: recorder, deadline: deadline)
        ctx.plan = plan
        say("pushwoosh-soak: seed \(options.seed), \(options.agents) agent(s), \(options.span), emulator and lab on 127.0.0.1:\(http.port), "
            + "lifetime \(TimeSpan.format(options.timings.lifetime)), session gap \(TimeSpan.format(options.timings.sessionGap)), "
            + "refresh \(TimeSpan.format(options.timings.refresh)), throttle \(TimeSpan.format(options.timings.throttle)); work dir \(root)")

        // The agents' notifications are read from the lab until every driver has finished: a
        // driver still starts, restarts and stops agents after the checker loop ends, and its
        // READY=1 and STOPPING=1 checks read them. One reader per agent: a device the lab is
        // busy with (a restart) holds no other's reading up.
        let pumping = Atomic<Bool>(true)
        for agent in 0..<options.agents {
            let lab = ctx.lab
            Thread {
                while pumping.load(ordering: .relaxed) {
                    lab.readNotifications(agent, into: notify)
                    usleep(200_000)
                }
            }.start()
        }

        let group = startDrivers(ctx, http: http, initial: initial)
        checkUntilTheEnd(ctx, http: http, deadline: deadline)

        // Wind down: drivers stop their agents (checking clean exits), then a last look at the log.
        recorder.requestStop()
        if group.wait(timeout: .now() + 30) == .timedOut { say("pushwoosh-soak: some drivers did not finish in 30 s") }
        pumping.store(false, ordering: .relaxed)
        sampleResources()
        usleep(300_000)
        try? fetchLog(http)
        horizon = now()
        evaluate(settled: horizon, final: true)
        checkCrashes(ctx.lab, at: now())
        let summaryLine = progressLine()
        emulator.withLock { $0 }?.stop()
        do { return try finish(summaryLine: summaryLine, root: root, emulatorLog: emulatorLog) } catch { throw .file(error) }
    }

    // MARK: - The request log

    func fetchLog(_ http: LoopbackHTTP) throws(EmulatorCallError) {
        let fetchStart = now()
        let since = max(0, logSince - 3)
        let r = try http.json("GET", "/admin/requests?since=\(String(format: "%.6f", since))")
        var newest = logSince
        for entry in r["requests"]?.arrayValue ?? [] {
            guard let call = DeviceCall(json: entry) else { continue }
            let key = "\(call.time)|\(call.hwid)|\(call.method)"
            newest = max(newest, call.time)
            guard seen.updateValue(call.time, forKey: key) == nil else { continue }
            methodCounts[call.method, default: 0] += 1
            if call.fault != nil { faultedCalls += 1 }
            switch call.method {
            case PushwooshAPI.Method.getFeatureFlags.rawValue:
                if call.succeeded { flagsOK += 1 } else { flagsFailed += 1 }
                insert(call, into: &flagCalls)
            case PushwooshAPI.Method.postEvent.rawValue where call.impression != nil:
                insert(call, into: &impressionCalls)
            default: break
            }
        }
        logSince = newest
        seen = seen.filter { $0.value >= newest - 4 }
        horizon = fetchStart - 0.5
    }

    func insert(_ call: DeviceCall, into store: inout [String: [DeviceCall]]) {
        var list = store[call.hwid, default: []]
        list.append(call)
        if list.count > 1, list[list.count - 2].time > call.time { list.sort { $0.time < $1.time } }
        store[call.hwid] = list
    }

    // MARK: - Checks

    func evaluate(settled realSettled: Time, final: Bool = false) {
        var (flags, statuses, actions, changes, faults, hwids, busy): ([FlagObservation], [StatusObservation], [[AgentAction]], [FlagChange], [ArmedFault], [String], [Time?]) =
            recorder.state.withLock { [realHorizon = self.horizon] s in
                let h = realHorizon
                let ready = s.pendingFlags.filter { $0.received <= h }
                s.pendingFlags.removeAll { $0.received <= h }
                let st = s.pendingStatus
                s.pendingStatus.removeAll()
                return (ready, st, s.actions, s.changes.sorted { $0.start < $1.start }, s.faults, s.tracks.map(\.hwid), s.busySince)
            }
        // The checkers judge in device time, the emulator's log's (the identity unless --real-timings).
        let dev = timeline.device
        for i in flags.indices { flags[i].sent = dev(flags[i].sent); flags[i].received = dev(flags[i].received) }
        for i in statuses.indices { statuses[i].sent = dev(statuses[i].sent); statuses[i].received = dev(statuses[i].received) }
        actions = actions.map { $0.map { a in var a = a; a.start = dev(a.start); a.end = dev(a.end); return a } }
        for i in changes.indices where changes[i].start > 0 { changes[i].start = dev(changes[i].start); changes[i].end = dev(changes[i].end) }
        for i in faults.indices { faults[i].start = dev(faults[i].start); faults[i].end = dev(faults[i].end) }
        busy = busy.map { $0.map(dev) }
        let horizon = dev(self.horizon)
        let settled = dev(realSettled)
        var found: [Violation] = []
        found += checkDuties(dev: dev, realHorizon: self.horizon, hwids: hwids)
        for s in statuses {
            found += lifetime.check(s)
            found += status.check(s)
        }
        for o in flags {
            found += lifetime.check(o)
            let hwid = o.hwid.isEmpty ? hwids[o.agent] : o.hwid
            found += provenance.check(o, calls: flagCalls[hwid] ?? [], changes: changes)
            found += userSwitch.check(o)
        }
        for (i, hwid) in hwids.enumerated() where !hwid.isEmpty {
            // What the runner is doing right now is not recorded yet: judge only what came before it.
            let limit = min(horizon, (busy[i] ?? .infinity) - 0.05)
            found += schedule.check(agent: i, calls: flagCalls[hwid] ?? [], actions: actions[i], faults: faults, horizon: limit)
            found += impressions.check(agent: i, impressions: impressionCalls[hwid] ?? [], actions: actions[i], settled: min(settled, limit))
        }
        found += outages.check(faults: faults, calls: flagCalls, hwids: hwids, horizon: horizon)
        for v in found { recorder.violation(v) }
    }

    /// The plan's looks whose requests the log holds by now (`realHorizon`): the expiries,
    /// the restarts' caches and the throttled refreshes, in device time.
    func checkDuties(dev: (Time) -> Time, realHorizon: Time, hwids: [String]) -> [Violation] {
        let (expiries, caches, refreshes, heard) = recorder.state.withLock { s in
            let e = s.expiryProbes.filter { $0.afterFlag.received <= realHorizon }
            s.expiryProbes.removeAll { $0.afterFlag.received <= realHorizon }
            let c = s.cacheProbes.filter { $0.after.received <= realHorizon }
            s.cacheProbes.removeAll { $0.after.received <= realHorizon }
            let r = s.refreshProbes.filter { $0.received <= realHorizon }
            s.refreshProbes.removeAll { $0.received <= realHorizon }
            return (e, c, r, s.tracks.map(\.expiredArrivals))
        }
        var found: [Violation] = []
        for var p in expiries {
            p.convert(dev)
            let before = expiry.notes.count
            found += expiry.check(p, calls: flagCalls[hwids[p.agent]] ?? [], expiries: heard[p.agent].map(dev))
            for note in expiry.notes.dropFirst(before) { recorder.note(note) }
        }
        for var p in caches {
            for keyPath in [\CacheProbe.before, \.after] {
                p[keyPath: keyPath].sent = dev(p[keyPath: keyPath].sent)
                p[keyPath: keyPath].received = dev(p[keyPath: keyPath].received)
            }
            let before = cache.notes.count
            found += cache.check(p, calls: flagCalls[hwids[p.agent]] ?? [])
            for note in cache.notes.dropFirst(before) { recorder.note(note) }
        }
        for var p in refreshes {
            (p.sent, p.received) = (dev(p.sent), dev(p.received))
            found += throttle.check(p, calls: flagCalls[hwids[p.agent]] ?? [])
        }
        return found
    }

    /// With `WatchdogSec`, a running agent pings at least every WatchdogSec (systemd would kill
    /// it otherwise). Each agent is judged at the time its notifications are known up to (the
    /// last reading of them the lab answered), not later.
    func checkWatchdogs(_ notify: NotifyLog) {
        guard options.watchdog > 0 else { return }
        let tracks = recorder.state.withLock { $0.tracks }
        for (i, track) in tracks.enumerated() {
            guard let t = notify.readAt(i) else { continue }
            guard let ready = track.lane.readies.last, ready > (track.lane.restarts.last?.0 ?? 0), t - ready > options.watchdog * 2 else { continue }
            // A process that died is not watched: its crash is the one violation (one SIGKILL
            // from outside once made 26 watchdog violations on the dead PID).
            guard let pid = track.pids.last, exits.isUp(pid) else { continue }
            watchdogChecks += 1
            let last = notify.messages(i, since: ready).last { $0.text.contains("WATCHDOG=1") }?.time ?? ready
            if t - last > options.watchdog + options.slack {
                // A restart may be under way; only a process that is still up counts.
                let stillUp = recorder.state.withLock { ($0.tracks[i].lane.restarts.last?.0 ?? 0) < ready }
                if stillUp {
                    recorder.violation(Violation("watchdog", agent: i, pid: track.pids.last, time: t,
                                                 String(format: "no WATCHDOG=1 for %.1f s (WatchdogSec %.0f s)", t - last, options.watchdog)))
                }
            }
        }
        notify.trim(before: now() - 60)
    }

    /// A crash: an agent process that ended without the runner's doing, as its lab DEVICE record
    /// says (`"state": "exited"`, how it ended); nil while the record does not say it exited.
    static func crash(agent: Int, pid: Int32, at: Time, record: LabDeviceRecord, log: [String]) -> Violation? {
        guard record.exited else { return nil }
        return Violation("crash", agent: agent, pid: pid, time: at, "agent-\(agent) (pid \(pid)) exited on its own: \(record.ended)",
                         evidence: ["last lines of its log:"] + log)
    }

    /// Every agent process that ended on its own since the last look, and the emulator if it did:
    /// one violation each, and the agent's lane ends there (no refreshes expected of it).
    func checkCrashes(_ lab: LabDevices, at t: Time) {
        let pids = recorder.state.withLock { $0.tracks.map(\.pids.last) }
        for (agent, pid) in pids.enumerated() {
            guard let pid, let at = exits.unreportedCrash(pid), let record = try? lab.record(agent),
                  let crash = Self.crash(agent: agent, pid: pid, at: at, record: record, log: lab.log(agent, lines: 20)) else { continue }
            exits.reported(pid)
            recorder.action(AgentAction(agent: agent, kind: .crashed, start: at, end: at))
            recorder.violation(crash)
        }
        if !emulatorCrashed, let child = emulator.withLock({ $0 }), let exit = child.exit(), !recorder.stopping {
            emulatorCrashed = true
            recorder.violation(Violation("crash", agent: nil, pid: child.pid, time: t, "the emulator (pid \(child.pid)) exited on its own: \(exit)",
                                         evidence: ["last lines of \(child.logPath):"] + tail(child.logPath, lines: 20)))
        }
    }

    /// CPU and memory of the emulator and the agents' current processes.
    func sampleResources() {
        var pids = recorder.state.withLock { $0.tracks.compactMap(\.pids.last) }.map { (prefix: "agent", pid: $0) }
        if let child = emulator.withLock({ $0 }) { pids.append((prefix: "emulator", pid: child.pid)) }
        resources.sample(pids)
    }

    func progressLine() -> String {
        let state = recorder.state.withLock { $0 }
        let s = (state.restartsBySignal, state.faults.count, state.changes.filter { $0.start > 0 }.count, state.violations.count,
                 state.tracks.map(\.observations).reduce(0, +))
        let elapsed = Int(now() - started)
        let requests = methodCounts.values.reduce(0, +)
        // The coverage's own sum: the line and the last coverage line never disagree.
        let checks = coverage(state).total
        // With --real-timings the line leads with the device time (the request log's and the checks' clock).
        let at = clockDriver.map { String(format: "[device %@ · day %.2f of %g · real %ds] ", iso8601(timeline.deviceNow()),
                                          $0.deviceSecondsCovered / 86_400, options.deviceDays, elapsed) }
            ?? "[\(elapsed)s/\(Int(options.duration))s] "
        let up = recorder.state.withLock { $0.tracks.compactMap(\.pids.last) }.filter { exits.isUp($0) }.count
        return "\(at)agents \(up)/\(options.agents) · requests \(requests) · "
            + "refreshes \(flagsOK) ok / \(flagsFailed) failed · faults armed \(s.1), fired \(faultedCalls) · flag changes \(s.2) · "
            + "restarts \(s.0[SIGTERM] ?? 0) TERM + \(s.0[SIGKILL] ?? 0) KILL · observations \(s.4) · checks \(checks) · violations \(s.3)"
    }
}
