// One `pushwoosh-fault kill9` run: the emulator, then `kills` cycles of start, refresh loop,
// SIGKILL and a check of the file on disk (ST-6), a last start, and the results.

import AgentCore
import AgentPosix
import AgentWire
import Foundation
import Glibc
import HarnessSupport
import Launcher
import ToolSupport

final class Kill9Run {
    let o: Kill9Options
    let app: VersionedApp
    var random: SeededRandom
    let stateDir: String
    let statePath: String
    let socketPath: String
    let logPath: String

    // Set up by `startEmulator` and `prepareAgent`.
    var emulator: pid_t?
    var admin = LoopbackHTTP(port: 0)
    var notify: NotifyReceiver?
    var environment: [String: String] = [:]

    let version = VersionCounter(1)
    /// The version on disk before the current cycle.
    var lastStored: Int?
    var outcomes: [String: Int] = [:]
    var violations: [String] = []
    var refreshesStarted = 0, refreshesAcked = 0, olderThanAcked = 0, tmpLeftovers = 0
    var cacheServed = 0
    var cacheMismatch: [String] = []
    var killDelays: [Double] = []
    let started = monotonicSeconds()

    init(_ o: Kill9Options) {
        self.o = o
        app = VersionedApp(count: o.flags)
        random = SeededRandom(seed: o.seed)
        stateDir = o.work + "/state"
        statePath = o.work + "/state/state.json"
        socketPath = o.work + "/agent.sock"
        logPath = o.work + "/agent.log"
    }

    func run() -> Int32 {
        try? FileManager.default.createDirectory(atPath: o.work, withIntermediateDirectories: true)
        let port = startEmulator()
        defer { stopEmulator() }
        prepareAgent(serverURL: "http://127.0.0.1:\(port)/json/1.3/")
        print("kill9: seed \(o.seed), \(o.kills) kills, \(o.flags) flags per response, emulator on port \(port)")
        fflush(nil)
        for cycle in 1...o.kills {
            guard runCycle(cycle), violations.count < 10 else { break }
            if cycle % 100 == 0 {
                print(String(format: "kill9: %d kills, %.0f s, %d refreshes started, %d answered, violations %d",
                             cycle, monotonicSeconds() - started, refreshesStarted, refreshesAcked, violations.count))
                fflush(nil)
            }
        }
        lastStart()
        printResults()
        return violations.isEmpty ? 0 : 1
    }

    /// The emulator, started with the version-1 application; its port.
    private func startEmulator() -> Int {
        let appsPath = o.work + "/apps.json"
        try? app.definition(version: 1).write(toFile: appsPath, atomically: true, encoding: .utf8)
        let output = o.work + "/emulator.out"
        let pid: pid_t
        do {
            pid = try spawn([o.bin + "/pushwoosh-emulator", "--listen", "127.0.0.1:0", "--apps", appsPath],
                            environment: ProcessInfo.processInfo.environment, stdoutPath: output, stderrPath: "/dev/null")
        } catch {
            die("cannot start the emulator: \(error)")
        }
        emulator = pid
        try? "\(pid)\n".write(toFile: o.work + "/emulator.pid", atomically: false, encoding: .utf8)
        guard let port = ChildProcess.announcedPort(in: output, timeout: 10, alive: { ChildProcess.isRunning(pid) }) else {
            die("the emulator did not say where it listens: \((try? String(contentsOfFile: output, encoding: .utf8)) ?? "")")
        }
        admin = LoopbackHTTP(port: port)
        return Int(port)
    }

    private func stopEmulator() {
        if let emulator { ChildProcess.stop(emulator) }
        unlink(o.work + "/emulator.pid")
    }

    /// The agent's configuration and its notify socket.
    private func prepareAgent(serverURL: String) {
        let config = """
            [Agent]
            ApplicationCode=\(app.code)
            ServerURL=\(serverURL)
            Socket=\(socketPath)
            StateDirectory=\(stateDir)
            RequestTimeout=5s
            [FeatureFlags]
            DisableThrottle=yes
            """
        try? config.write(toFile: o.work + "/agent.conf", atomically: true, encoding: .utf8)
        do { notify = try NotifyReceiver(path: o.work + "/notify.sock") } catch { die("\(error)") }
        environment = ["NOTIFY_SOCKET": notify!.path, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"]
    }

    private func violation(_ text: String, cycle: Int) {
        let copy = o.work + "/violation-\(cycle)"
        try? FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
        for name in (try? FileManager.default.contentsOfDirectory(atPath: stateDir)) ?? [] {
            try? FileManager.default.copyItem(atPath: stateDir + "/" + name, toPath: copy + "/" + name)
        }
        try? FileManager.default.copyItem(atPath: logPath, toPath: copy + "/agent.log")
        violations.append("cycle \(cycle): \(text) (files kept in \(copy))")
        print("VIOLATION cycle \(cycle): \(text)")
        fflush(nil)
    }

    /// Starts the agent (by the one launcher of long-running agents, on the run's own notify
    /// socket) and waits for READY=1; nil (after recording why) when it did not come.
    private func startAgent(cycle: Int) -> AgentLauncher? {
        notify?.drain()
        let agent: AgentLauncher
        do {
            agent = try AgentLauncher(.init(agentd: o.bin + "/pushwoosh-agentd", arguments: ["--config", o.work + "/agent.conf"],
                                            environment: environment, notifyPath: notify!.path, callerBindsNotifySocket: true,
                                            logPath: logPath, stdoutToLog: false))
        } catch { die("\(error)") }
        try? "\(agent.processID)\n".write(toFile: o.work + "/agent.pid", atomically: false, encoding: .utf8)
        guard notify?.wait(containing: "READY=1", timeout: 15) != nil else {
            stopAgent(agent, signal: SIGKILL)
            violation("no READY=1 within 15 s after start", cycle: cycle)
            return nil
        }
        return agent
    }

    /// `signal` to the agent, then waits for its exit, however long.
    private func stopAgent(_ agent: AgentLauncher, signal: Int32) {
        agent.signal(signal)
        agent.wait()
        unlink(o.work + "/agent.pid")
    }

    private func logSaysDamaged() -> String? {
        guard let log = try? String(contentsOfFile: logPath, encoding: .utf8), log.contains("stored state damaged") else { return nil }
        return log.split(separator: "\n").first { $0.contains("damaged") }.map(String.init) ?? ""
    }

    /// One cycle: start, refresh in a loop, SIGKILL 0–50 ms after refresh k (1…3) started,
    /// then check the file. False when the run cannot go on.
    private func runCycle(_ cycle: Int) -> Bool {
        // Every 50th cycle starts from an empty state directory: the very first write is a target too.
        if cycle % 50 == 1 {
            try? FileManager.default.removeItem(atPath: stateDir)
            lastStored = nil
        }
        guard let agent = startAgent(cycle: cycle) else { return false }
        if let line = logSaysDamaged() { violation("the agent logged 'stored state damaged' at start: \(line)", cycle: cycle) }

        let record = LoopRecord()
        let loop = Thread { [socketPath, app, version, admin, lastStored] in
            Self.refreshLoop(socketPath: socketPath, app: app, version: version, admin: admin, expectedCache: lastStored, record: record)
        }
        loop.start()

        let k = Int.random(in: 1...3, using: &random)
        let delay = Double.random(in: 0...0.050, using: &random)
        let waitDeadline = monotonicSeconds() + 15
        var kStart: Double?
        while kStart == nil && !record.isFinished && monotonicSeconds() < waitDeadline {
            kStart = record.start(k)
            if kStart == nil { sleepSeconds(0.0002) }
        }
        if let kStart { sleepSeconds(kStart + delay - monotonicSeconds()) }
        stopAgent(agent, signal: SIGKILL)
        while !record.isFinished { sleepSeconds(0.001) }
        killDelays.append(delay)
        let seen = record.snapshot
        refreshesStarted += seen.starts
        refreshesAcked += seen.acked.count
        if kStart == nil { violation("refresh \(k) never started: \(seen.errors.first ?? "the loop stopped")", cycle: cycle) }
        if let e = seen.errors.first { violation("refresh loop: \(e)", cycle: cycle) }
        if let c = seen.cache {
            cacheServed += 1
            if c != "ok" { cacheMismatch.append("cycle \(cycle): \(c)") }
        }
        checkDisk(cycle: cycle, lastStarted: seen.lastStarted, lastAcked: seen.acked.last)
        return true
    }

    /// The refresh loop, on its own thread: bump the emulator's version, refresh, read what is
    /// served, repeat until the agent dies.
    private static func refreshLoop(socketPath: String, app: VersionedApp, version: VersionCounter, admin: LoopbackHTTP,
                                    expectedCache: Int?, record: LoopRecord) {
        defer { record.finish() }
        guard let client = try? LineClient(path: socketPath, timeout: 10) else {
            record.error("cannot connect to the agent")
            return
        }
        // The flags served from the cache must be exactly what is on disk.
        if let status = client.request(.status, id: 1)?["result"], (try? StatusAnswer(json: status))?.status.flagsSource == .cache {
            if let get = client.request(.get(key: "f000"), id: 2)?["result"], let r = try? FlagAnswer(json: get),
               let v = r.flag?.properties["v"]?.numberValue.map({ Int($0) }), r.provenance.source == .cache {
                record.setCacheCheck(expectedCache == v ? "ok" : "cache serves v\(v), disk had \(expectedCache.map(String.init) ?? "none")")
            }
        }
        var id = 10
        while true {
            let v = version.next()
            do {
                let r = try admin.call("PUT", "/admin/apps/\(app.code)", body: Array(app.definition(version: v).utf8))
                guard r.status == 200 else { record.error("admin PUT: HTTP \(r.status) \(String(decoding: r.body.prefix(200), as: UTF8.self))"); return }
            } catch {
                record.error("admin PUT: \(error)")
                return
            }
            id += 1
            record.started(at: monotonicSeconds(), version: v)
            guard client.send(RPCEncoder.request(id: .number(Double(id)), .refresh)),
                  let answer = client.readLine() else { return }  // killed
            // The refresh must have gone to the server (the agent runs without the throttle):
            // one answered from the stored flags would ack a version never fetched.
            guard let result = (try? JSONReader.parse(answer))?["result"], let refresh = try? RefreshAnswer(json: result),
                  refresh.error == nil, refresh.sent else {
                record.error("refresh: \(answer.prefix(200))")
                return
            }
            // The version now served (a refresh that joined one in flight answers with that
            // one's response, which may be older than `v`).
            id += 1
            guard client.send(RPCEncoder.request(id: .number(Double(id)), .get(key: "f000"))),
                  let get = client.readLine() else { return }  // killed
            if let result = (try? JSONReader.parse(get))?["result"], let answer = try? FlagAnswer(json: result),
               let served = answer.flag?.properties["v"]?.numberValue {
                record.acked(Int(served))
            }
        }
    }

    /// ST-6: the file on disk after a kill holds one complete response, never older than before.
    private func checkDisk(cycle: Int, lastStarted: Int?, lastAcked: Int?) {
        if access(statePath + ".tmp", F_OK) == 0 { tmpLeftovers += 1 }
        do {
            switch try StateFile.read(statePath) {
            case .missing:
                outcomes["no file (killed before the first save)", default: 0] += 1
                if let old = lastStored { violation("the state file vanished (it held version \(old))", cycle: cycle) }
            case .noFlags:
                outcomes["no flags stored (killed before the first response was saved)", default: 0] += 1
                if let old = lastStored { violation("stored flags vanished (version \(old) was on disk)", cycle: cycle) }
            case .flags(let snapshot):
                let v = try app.check(snapshot)
                if let old = lastStored, v < old { violation("version went back: \(v) on disk after \(old)", cycle: cycle) }
                if v > version.current { violation("version \(v) was never served", cycle: cycle) }
                if let inFlight = lastStarted, v == inFlight {
                    outcomes["complete: the response of the last refresh started (new)", default: 0] += 1
                } else if let old = lastStored, v == old {
                    outcomes["complete: the response stored before this run of the agent (old)", default: 0] += 1
                } else {
                    outcomes["complete: an earlier response of this run (old)", default: 0] += 1
                }
                if let lastAcked, v < lastAcked { olderThanAcked += 1 }
                lastStored = v
            }
        } catch {
            outcomes["INVALID", default: 0] += 1
            violation("state file invalid: \(error)", cycle: cycle)
        }
    }

    /// A last start: the agent must come up from whatever the last kill left, without damage.
    private func lastStart() {
        let cycle = o.kills + 1
        if let agent = startAgent(cycle: cycle) {
            stopAgent(agent, signal: SIGTERM)
            if logSaysDamaged() != nil { violation("the agent logged 'stored state damaged' after the last kill", cycle: cycle) }
        }
        let damagedAside = ((try? FileManager.default.contentsOfDirectory(atPath: stateDir)) ?? []).filter { $0.contains(".damaged-") }
        if !damagedAside.isEmpty { violation("damaged files set aside: \(damagedAside)", cycle: cycle) }
    }

    private func printResults() {
        let sortedDelays = killDelays.sorted()
        let median = (sortedDelays.isEmpty ? 0 : sortedDelays[sortedDelays.count / 2]) * 1000
        print("kill9 results (seed \(o.seed)):")
        print("  kills: \(killDelays.count) (SIGKILL 0–50 ms after refresh 1–3 started; delay median \(String(format: "%.1f", median)) ms)")
        print("  refreshes started: \(refreshesStarted), answered before the kill: \(refreshesAcked)")
        print("  state found after each kill:")
        for (kind, n) in outcomes.sorted(by: { $0.key < $1.key }) { print("    \(kind): \(n)") }
        print("  restarts that served the stored flags from the cache: \(cacheServed) (mismatches with disk: \(cacheMismatch.count))")
        for m in cacheMismatch.prefix(5) { print("    \(m)") }
        print("  on disk older than the flags served after the last answered refresh (expected 0: the agent saves before it answers): \(olderThanAcked)")
        print("  kills that landed inside a write (state.json.tmp left behind; never read, truncated by the next save): \(tmpLeftovers)")
        print(String(format: "  time: %.0f s", monotonicSeconds() - started))
        print("  violations: \(violations.count)")
        for v in violations { print("    \(v)") }
        fflush(nil)
    }
}
