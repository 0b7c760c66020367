import AgentPosix
import AgentWire
import Foundation
import Glibc
import HarnessSupport
import Launcher
import ToolSupport

/// Many idle devices on one host: the memory each costs (`--devices`), and one
/// `pushwoosh-agentctl fleet` command over many of them (`--fleet`).
struct DeviceMemory {
    var devices = 0
    /// The app the devices serve and its served flags' count (`--device-flags`: the `--flags` app).
    var app = "the example app"
    /// Sums over the N processes (KiB).
    var agentPss = 0
    var agentPrivate = 0
    var echoPss = 0
    var echoPrivate = 0
    /// One idle agent's private pages (clean + dirty) by mapping kind, KiB, largest first.
    var breakdown: [(kind: String, kib: Int)] = []
    var startSeconds = 0.0
}

struct FleetTiming {
    var devices = 0
    var readySeconds = 0.0
    /// Wall seconds of each run, per command.
    var runs: [String: [Double]] = [:]
    var lines: [String: Int] = [:]
}

extension Bench {
    /// The agents' configuration: the example app (a device with a handful of flags), its
    /// own state directory, User ID and socket `sockets/device-NNN.sock`, no refresh throttle
    /// (as scripts/measure-fleet).
    /// Each is started by the one launcher of long-running agents (Launcher's `AgentLauncher`:
    /// its notify socket, a parent-death signal, its log).
    private func startDevices(_ count: Int, root: String, app: String = "ABCDE-12345") throws -> Devices {
        try FileManager.default.createDirectory(atPath: root + "/sockets", withIntermediateDirectories: true)
        var launchers: [AgentLauncher] = []
        var sockets: [String] = []
        for n in 1...count {
            let name = String(format: "%04d", n)
            let d = root + "/a" + name
            try FileManager.default.createDirectory(atPath: d + "/state", withIntermediateDirectories: true)
            let socket = root + "/sockets/device-\(name).sock"
            try """
                [Agent]
                ApplicationCode=\(app)
                ServerURL=http://127.0.0.1:\(emulatorPort)/json/1.3/
                Socket=\(socket)
                StateDirectory=\(d)/state
                UserId=user-\(n)
                [FeatureFlags]
                DisableThrottle=yes

                """.write(toFile: d + "/agent.conf", atomically: true, encoding: .utf8)
            launchers.append(try AgentLauncher(.init(agentd: agentd, arguments: ["--config", d + "/agent.conf"], notifyPath: d + "/notify",
                                                     logPath: d + "/log", stdoutToLog: false)))
            sockets.append(socket)
        }
        return Devices(launchers: launchers, sockets: sockets)
    }

    /// Devices started, their sockets, in order.
    struct Devices {
        var launchers: [AgentLauncher]
        var sockets: [String]
        var pids: [pid_t] { launchers.map(\.processID) }
    }

    /// Waits until every device is ready and its start-up refresh is over.
    /// `count` devices started and serving, the seconds that took, then a second to settle
    /// (the status connections closed, the start-up done). The caller stops them.
    private func startReadyDevices(_ count: Int, root: String, app: String = "ABCDE-12345", timeout: Double) throws -> (devices: Devices, seconds: Double) {
        let started = monotonicSeconds()
        let agents = try startDevices(count, root: root, app: app)
        do {
            try waitReady(agents, timeout: timeout)
        } catch {
            stopAll(agents)
            throw error
        }
        let seconds = monotonicSeconds() - started
        sleepSeconds(1.0)
        return (agents, seconds)
    }

    private func waitReady(_ devices: Devices, timeout: Double) throws {
        let deadline = monotonicSeconds() + timeout
        for (index, socket) in devices.sockets.enumerated() {
            while true {
                if let status = try? LineClient.call(socket, .status), status["state"]?.stringValue == "ready",
                   status["lastRefreshAt"].map({ !$0.isNull }) ?? false {
                    break
                }
                guard devices.launchers[index].reap() == nil else { throw BenchError("device \(index + 1) exited") }
                guard monotonicSeconds() < deadline else { throw BenchError("device \(index + 1) not ready after \(Int(timeout)) s") }
                sleepSeconds(0.02)
            }
        }
    }

    private func stopAll(_ devices: Devices) {
        for launcher in devices.launchers { launcher.signal(SIGTERM) }
        for launcher in devices.launchers { launcher.stop(grace: 10) }
    }

    private func stopAll(_ pids: [pid_t]) {
        for pid in pids { kill(pid, SIGTERM) }
        for pid in pids { Children.stop(pid, timeout: 10) }
    }

    /// Idle PSS and private pages per device: N agents against the emulator, each ready with
    /// its flags refreshed; the baseline is N `pushwoosh-bench echo-server` processes (the
    /// same event loop and socket listener, the Swift runtime linked in the same way, no
    /// device), measured in the same run.
    func measureDevices() throws {
        let count = options.devices
        let root = directory + "/devices"
        let bench = options.devicesServeBenchApp
        let (agents, readySeconds) = try startReadyDevices(count, root: root, app: bench ? applicationCode : "ABCDE-12345", timeout: 60)
        defer { stopAll(agents) }
        var memory = DeviceMemory(devices: count)
        if bench { memory.app = "the app \(applicationCode) (\(options.flagCount) flags, `--device-flags`)" }
        memory.startSeconds = readySeconds

        let selfPath = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var echoes: [pid_t] = []
        defer { stopAll(echoes) }
        for n in 1...count {
            let socket = root + "/echo-\(n).sock"
            echoes.append(try Children.spawn(selfPath, ["echo-server", "--socket", socket], stdout: "/dev/null", stderr: "/dev/null"))
            try Sockets.waitForListener(socket, timeout: 5) { Children.isAlive(echoes[n - 1]) }
        }
        sleepSeconds(0.5)
        func sums(_ pids: [pid_t]) -> (pss: Int, own: Int) {
            pids.reduce((0, 0)) { total, pid in
                (total.0 + (ProcStats.smaps(pid: pid, field: "Pss") ?? 0),
                 total.1 + (ProcStats.smaps(pid: pid, field: "Private_Clean") ?? 0) + (ProcStats.smaps(pid: pid, field: "Private_Dirty") ?? 0))
            }
        }
        (memory.agentPss, memory.agentPrivate) = sums(agents.pids)
        (memory.echoPss, memory.echoPrivate) = sums(echoes)
        memory.breakdown = Self.privateByMapping(pid: agents.pids[0], binary: agentd)
        report.deviceMemory = memory
        log(String(format: "devices: %d idle agents, Pss %.0f KiB, private %.0f KiB per device; echo-server Pss %.0f KiB, private %.0f KiB",
                   count, Double(memory.agentPss) / Double(count), Double(memory.agentPrivate) / Double(count),
                   Double(memory.echoPss) / Double(count), Double(memory.echoPrivate) / Double(count)))
    }

    /// Private clean + dirty of `pid` from /proc/PID/smaps, by kind of mapping.
    static func privateByMapping(pid: pid_t, binary: String) -> [(kind: String, kib: Int)] {
        guard let text = readText("/proc/\(pid)/smaps") else { return [] }
        var totals: [String: Int] = [:]
        var kind = ""
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            if let first = fields.first, first.contains("-"), fields.count >= 5, first.allSatisfy({ $0.isHexDigit || $0 == "-" }) {
                let path = fields.count >= 6 ? String(fields[5]) : ""
                if path.isEmpty { kind = "anonymous" }
                else if path == "[heap]" { kind = "heap" }
                else if path.hasPrefix("[") { kind = path }
                else if path.hasSuffix("/pushwoosh-agentd") { kind = "pushwoosh-agentd (\(fields[1]))" }
                else if path.contains("libcrypto") { kind = "libcrypto" }
                else { kind = "other libraries" }
            } else if line.hasPrefix("Private_Clean:") || line.hasPrefix("Private_Dirty:") {
                totals[kind, default: 0] += Int(fields[1]) ?? 0
            }
        }
        return totals.filter { $0.value > 0 }.map { ($0.key, $0.value) }.sorted { $0.kib > $1.kib }
    }

    /// `pushwoosh-agentctl fleet call refresh` over N devices against `fleet status` (each
    /// device answers from memory) and one `refresh` of one device, runs alternating.
    func measureFleet() throws {
        let count = options.fleet
        let agentctl = options.binDirectory + "/pushwoosh-agentctl"
        guard access(agentctl, X_OK) == 0 else { throw BenchError("\(agentctl) not found") }
        let root = directory + "/fleet"
        let (agents, readySeconds) = try startReadyDevices(count, root: root, timeout: 120)
        defer { stopAll(agents) }
        var timing = FleetTiming(devices: count)
        timing.readySeconds = readySeconds
        let commands: [(name: String, arguments: [String])] = [
            ("fleet status", ["fleet", "--socket-dir", root + "/sockets", "--timeout", "30", "status"]),
            ("fleet call refresh", ["fleet", "--socket-dir", root + "/sockets", "--timeout", "30", "call", "refresh"]),
            ("one refresh", ["--socket", agents.sockets[0], "--timeout", "30", "refresh"]),
        ]
        for run in 0..<(options.fleetRuns + 1) {  // the first round warms the page cache
            for command in commands {
                let out = "\(root)/\(run)-\(command.name.replacingOccurrences(of: " ", with: "-")).out"
                let t0 = monotonicSeconds()
                let pid = try Children.spawn(agentctl, command.arguments, stdout: out, stderr: out + ".err")
                let status = Children.waitExit(pid, timeout: 120)
                let seconds = monotonicSeconds() - t0
                guard status == 0 else {
                    throw BenchError("agentctl \(command.arguments.joined(separator: " ")): exit \(status.map(String.init) ?? "timeout"): \(readText(out + ".err") ?? "")")
                }
                let lines = (readText(out) ?? "").split(separator: "\n").count
                if run > 0 {
                    timing.runs[command.name, default: []].append(seconds)
                    timing.lines[command.name] = lines
                }
            }
        }
        report.fleet = timing
        log(String(format: "fleet of %d: call refresh median %.3f s, status %.3f s, one refresh %.3f s",
                   count, median(timing.runs["fleet call refresh"] ?? []), median(timing.runs["fleet status"] ?? []),
                   median(timing.runs["one refresh"] ?? [])))
    }
}
