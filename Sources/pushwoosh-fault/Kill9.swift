// pushwoosh-fault kill9: SIGKILL the agent during refreshes and check the state on disk (ST-6).

import AgentCore
import AgentPosix
import AgentWire
import Foundation
import Glibc
import HarnessSupport

// MARK: - The state file (HarnessSupport's reader: FileStateStore's own format check)

// MARK: - The kill -9 application: every response is one version, all keys

/// `count` flags whose every field depends on the version `v`, so a file mixing two
/// responses, or holding part of one, cannot pass `check`.
struct VersionedApp {
    let count: Int
    let code = "ABCDE-12345"

    func key(_ i: Int) -> String { String(format: "f%03d", i) }
    func killed(_ i: Int, _ v: Int) -> Bool { (i + v) % 3 == 0 }
    func defaultPad(_ i: Int, _ v: Int) -> String { "d-\(v)-\(i)-" + String(repeating: "x", count: 120 + (v % 37)) }
    func overridePad(_ i: Int, _ v: Int) -> String { "o-\(v)-\(i)-" + String(repeating: "y", count: 90 + (v % 53)) }

    func definition(version v: Int) -> String {
        let flags = (0..<count).map { i -> String in
            """
            {"key":"\(key(i))","killed":\(killed(i, v)),"properties":{"v":{"type":"number","default":\(v)},\
            "pad":{"type":"string","default":"\(defaultPad(i, v))"}},\
            "rules":[{"id":"r_\(v)_\(i)","enabled":true,"when":{},"properties":{"pad":"\(overridePad(i, v))"}}]}
            """
        }
        return #"{"code":"\#(code)","featureFlagsInPlan":true,"flags":["# + flags.joined(separator: ",") + "]}"
    }

    func expected(_ i: Int, _ v: Int) -> FeatureFlag {
        killed(i, v)
            ? FeatureFlag(key: key(i), isEnabled: false, ruleId: "", properties: ["v": .number(Double(v)), "pad": .string(defaultPad(i, v))])
            : FeatureFlag(key: key(i), isEnabled: true, ruleId: "r_\(v)_\(i)", properties: ["v": .number(Double(v)), "pad": .string(overridePad(i, v))])
    }

    /// The version a stored flag carries (its `v` property), -1 when it has none.
    static func version(_ flag: FeatureFlag) -> Int { flag.properties["v"]?.numberValue.map { Int($0) } ?? -1 }

    /// The single version the snapshot holds, or why it is not one complete response.
    func check(_ snapshot: FlagSnapshot) throws -> Int {
        guard !snapshot.partial else { throw Failure("a partial response was stored") }
        guard snapshot.flags.count == count else { throw Failure("\(snapshot.flags.count) flags stored, expected \(count)") }
        guard let first = snapshot.flags[key(0)] else { throw Failure("\(key(0)) missing") }
        let v = Self.version(first)
        var versions: Set<Int> = []
        var wrong: [String] = []
        for i in 0..<count {
            guard let flag = snapshot.flags[key(i)] else { throw Failure("\(key(i)) missing") }
            versions.insert(Self.version(flag))
            if flag != expected(i, v) { wrong.append(key(i)) }
        }
        guard versions.count == 1, wrong.isEmpty else {
            throw Failure("mixed: versions \(versions.sorted()), flags not matching version \(v): \(wrong.prefix(8))")
        }
        return v
    }
}

/// What the refresh loop saw; shared between the loop thread and the killer.
final class LoopRecord: @unchecked Sendable {
    private let lock = NSLock()
    private var starts: [Double] = []
    private var startedVersions: [Int] = []
    private var acknowledged: [Int] = []
    private var errors: [String] = []
    private var finished = false
    private var cacheCheck: String?

    func started(at t: Double, version v: Int) {
        lock.withLock {
            starts.append(t)
            startedVersions.append(v)
        }
    }
    func acked(_ v: Int) { lock.withLock { acknowledged.append(v) } }
    func error(_ e: String) { lock.withLock { errors.append(e) } }
    func finish() { lock.withLock { finished = true } }
    func setCacheCheck(_ s: String) { lock.withLock { cacheCheck = s } }

    func start(_ k: Int) -> Double? { lock.withLock { starts.count >= k ? starts[k - 1] : nil } }
    var isFinished: Bool { lock.withLock { finished } }
    var snapshot: (starts: Int, lastStarted: Int?, acked: [Int], errors: [String], cache: String?) {
        lock.withLock { (starts.count, startedVersions.last, acknowledged, errors, cacheCheck) }
    }
}

/// The version counter shared with the loop thread (the only writer while it runs).
final class VersionCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Int
    init(_ v: Int) { value = v }
    func next() -> Int { lock.withLock { value += 1; return value } }
    var current: Int { lock.withLock { value } }
}

struct Kill9Options {
    var bin = ""
    var work = ""
    var kills = 1000
    var seed: UInt64 = UInt64(time(nil))
    var flags = 40
}

func runKill9(_ o: Kill9Options) -> Int32 {
    let app = VersionedApp(count: o.flags)
    var random = SeededRandom(seed: o.seed)
    let stateDir = o.work + "/state"
    let statePath = stateDir + "/state.json"
    let socketPath = o.work + "/agent.sock"
    let logPath = o.work + "/agent.log"
    try? FileManager.default.createDirectory(atPath: o.work, withIntermediateDirectories: true)

    // The emulator, started with the version-1 application.
    let appsPath = o.work + "/apps.json"
    try? app.definition(version: 1).write(toFile: appsPath, atomically: true, encoding: .utf8)
    let emulator = Process()
    emulator.executableURL = URL(fileURLWithPath: o.bin + "/pushwoosh-emulator")
    emulator.arguments = ["--listen", "127.0.0.1:0", "--apps", appsPath]
    let emulatorOut = Pipe()
    emulator.standardOutput = emulatorOut
    emulator.standardError = FileHandle(forWritingAtPath: "/dev/null")
    do { try emulator.run() } catch { die("cannot start the emulator: \(error)") }
    try? "\(emulator.processIdentifier)\n".write(toFile: o.work + "/emulator.pid", atomically: false, encoding: .utf8)
    defer {
        emulator.terminate()
        emulator.waitUntilExit()
        unlink(o.work + "/emulator.pid")
    }
    var line = Data()
    while true {
        let byte = emulatorOut.fileHandleForReading.readData(ofLength: 1)
        if byte.isEmpty || byte == Data("\n".utf8) { break }
        line.append(byte)
    }
    guard let port = Int(String(decoding: line, as: UTF8.self).split(separator: ":").last ?? "") else {
        die("the emulator did not say where it listens: \(String(decoding: line, as: UTF8.self))")
    }
    let base = "http://127.0.0.1:\(port)"
    let admin = LoopbackHTTP(port: UInt16(port))
    let config = """
        [Agent]
        ApplicationCode=\(app.code)
        ServerURL=\(base)/json/1.3/
        Socket=\(socketPath)
        StateDirectory=\(stateDir)
        RequestTimeout=5s
        [FeatureFlags]
        DisableThrottle=yes
        """
    try? config.write(toFile: o.work + "/agent.conf", atomically: true, encoding: .utf8)
    let notify: NotifyReceiver
    do { notify = try NotifyReceiver(path: o.work + "/notify.sock") } catch { die("\(error)") }
    let environment = ["NOTIFY_SOCKET": notify.path, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"]

    let version = VersionCounter(1)
    var lastStored: Int? = nil  // the version on disk before the current cycle
    var outcomes: [String: Int] = [:]
    var violations: [String] = []
    var refreshesStarted = 0, refreshesAcked = 0, olderThanAcked = 0, tmpLeftovers = 0
    var cacheServed = 0, cacheMismatch: [String] = []
    var killDelays: [Double] = []
    let started = monotonicSeconds()
    print("kill9: seed \(o.seed), \(o.kills) kills, \(o.flags) flags per response, emulator on port \(port)")
    fflush(nil)

    func violation(_ text: String, cycle: Int) {
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

    for cycle in 1...o.kills {
        // Every 50th cycle starts from an empty state directory: the very first write is a target too.
        if cycle % 50 == 1 {
            try? FileManager.default.removeItem(atPath: stateDir)
            lastStored = nil
        }
        notify.drain()
        let pid: pid_t
        do {
            pid = try spawn([o.bin + "/pushwoosh-agentd", "--config", o.work + "/agent.conf"],
                            environment: environment, stderrPath: logPath)
        } catch { die("\(error)") }
        try? "\(pid)\n".write(toFile: o.work + "/agent.pid", atomically: false, encoding: .utf8)
        guard notify.wait(containing: "READY=1", timeout: 15) != nil else {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            unlink(o.work + "/agent.pid")
            violation("no READY=1 within 15 s after start", cycle: cycle)
            break
        }
        if let log = try? String(contentsOfFile: logPath, encoding: .utf8), log.contains("stored state damaged") {
            violation("the agent logged 'stored state damaged' at start: \(log.split(separator: "\n").filter { $0.contains("damaged") }.first ?? "")", cycle: cycle)
        }

        // The refresh loop: bump the emulator's version, refresh, repeat until the agent dies.
        let record = LoopRecord()
        let expectedCache = lastStored
        let loop = Thread {
            defer { record.finish() }
            guard let client = try? LineClient(path: socketPath, timeout: 10) else {
                record.error("cannot connect to the agent")
                return
            }
            // The flags served from the cache must be exactly what is on disk.
            if let status = client.request(.status, id: 1)?["result"], (try? StatusAnswer(json: status))?.status.flagsSource == .cache {
                if let get = client.request(.get, ["key": "f000"], id: 2)?["result"], let r = try? FlagAnswer(json: get),
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
                guard client.send(RPCEncoder.request(id: .number(Double(id)), method: .refresh)),
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
                guard client.send(RPCEncoder.request(id: .number(Double(id)), method: .get, params: ["key": "f000"])),
                      let get = client.readLine() else { return }  // killed
                if let result = (try? JSONReader.parse(get))?["result"], let answer = try? FlagAnswer(json: result),
                   let served = answer.flag?.properties["v"]?.numberValue {
                    record.acked(Int(served))
                }
            }
        }
        loop.start()

        // Kill 0–50 ms after refresh number k (1…3) started.
        let k = Int.random(in: 1...3, using: &random)
        let delay = Double.random(in: 0...0.050, using: &random)
        let waitDeadline = monotonicSeconds() + 15
        var kStart: Double?
        while kStart == nil && !record.isFinished && monotonicSeconds() < waitDeadline {
            kStart = record.start(k)
            if kStart == nil { sleepSeconds(0.0002) }
        }
        if let kStart { sleepSeconds(kStart + delay - monotonicSeconds()) }
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        unlink(o.work + "/agent.pid")
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

        // ST-6: the file on disk now.
        if access(statePath + ".tmp", F_OK) == 0 { tmpLeftovers += 1 }
        do {
            switch try StateFile.read(statePath) {
            case .missing:
                outcomes["no file (killed before the first save)", default: 0] += 1
                if lastStored != nil { violation("the state file vanished (it held version \(lastStored!))", cycle: cycle) }
            case .noFlags:
                outcomes["no flags stored (killed before the first response was saved)", default: 0] += 1
                if lastStored != nil { violation("stored flags vanished (version \(lastStored!) was on disk)", cycle: cycle) }
            case .flags(let snapshot):
                let v = try app.check(snapshot)
                if let old = lastStored, v < old {
                    violation("version went back: \(v) on disk after \(old)", cycle: cycle)
                }
                if v > version.current { violation("version \(v) was never served", cycle: cycle) }
                if let inFlight = seen.lastStarted, v == inFlight {
                    outcomes["complete: the response of the last refresh started (new)", default: 0] += 1
                } else if let old = lastStored, v == old {
                    outcomes["complete: the response stored before this run of the agent (old)", default: 0] += 1
                } else {
                    outcomes["complete: an earlier response of this run (old)", default: 0] += 1
                }
                if let lastAcked = seen.acked.last, v < lastAcked { olderThanAcked += 1 }
                lastStored = v
            }
        } catch {
            outcomes["INVALID", default: 0] += 1
            violation("state file invalid: \(error)", cycle: cycle)
        }
        if violations.count >= 10 { break }
        if cycle % 100 == 0 {
            print(String(format: "kill9: %d kills, %.0f s, %d refreshes started, %d answered, violations %d",
                         cycle, monotonicSeconds() - started, refreshesStarted, refreshesAcked, violations.count))
            fflush(nil)
        }
    }

    // A last start: the agent must come up from whatever the last kill left, without damage.
    notify.drain()
    if let pid = try? spawn([o.bin + "/pushwoosh-agentd", "--config", o.work + "/agent.conf"],
                            environment: environment, stderrPath: logPath) {
        try? "\(pid)\n".write(toFile: o.work + "/agent.pid", atomically: false, encoding: .utf8)
        if notify.wait(containing: "READY=1", timeout: 15) == nil { violation("no READY=1 after the last kill", cycle: o.kills + 1) }
        kill(pid, SIGTERM)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        unlink(o.work + "/agent.pid")
        if let log = try? String(contentsOfFile: logPath, encoding: .utf8), log.contains("stored state damaged") {
            violation("the agent logged 'stored state damaged' after the last kill", cycle: o.kills + 1)
        }
    }
    let damagedAside = ((try? FileManager.default.contentsOfDirectory(atPath: stateDir)) ?? []).filter { $0.contains(".damaged-") }
    if !damagedAside.isEmpty { violation("damaged files set aside: \(damagedAside)", cycle: o.kills + 1) }

    let sortedDelays = killDelays.sorted()
    print("kill9 results (seed \(o.seed)):")
    print("  kills: \(killDelays.count) (SIGKILL 0–50 ms after refresh 1–3 started; delay median \(String(format: "%.1f", (sortedDelays.isEmpty ? 0 : sortedDelays[sortedDelays.count / 2]) * 1000)) ms)")
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
    return violations.isEmpty ? 0 : 1
}
