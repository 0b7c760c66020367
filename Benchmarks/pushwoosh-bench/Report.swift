import AgentCore
import AgentWire
import Foundation
import Glibc
import HarnessSupport

struct Machine {
    var cpus = 0
    var cpuModel = "?"
    var kernel = "?"
    var loadAverageStart = "?"
    var loadAverageEnd = "?"
    var date = ""

    static func current() -> Machine {
        var m = Machine()
        m.cpus = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        if let info = readText("/proc/cpuinfo"),
           let line = info.split(separator: "\n").first(where: { $0.hasPrefix("model name") }),
           let colon = line.firstIndex(of: ":") {
            m.cpuModel = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var uts = utsname()
        if uname(&uts) == 0 {
            m.kernel = withUnsafeBytes(of: &uts.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        }
        m.loadAverageStart = loadAverage()
        let formatter = ISO8601DateFormatter()
        m.date = formatter.string(from: Date())
        return m
    }

    static func loadAverage() -> String {
        (readText("/proc/loadavg") ?? "?").split(separator: " ").prefix(3).joined(separator: " ")
    }
}

struct SocketRow {
    var server: String
    var method: String
    var clients: Int
    var depth: Int
    var result: LoadResult
}

struct IdleThread {
    var tid: Int
    var name: String
    var isMain: Bool
    var wakeups: Int
    var blockedIn: String
    var isNew: Bool
}

struct Target {
    var name: String
    var goal: String
    var measured: String
    var pass: Bool?
}

struct Report {
    var machine = Machine()
    var options: BenchOptions?
    var socket: [SocketRow] = []
    /// The C echo server and the agent under the C client (CBaseline.swift).
    var cBaseline: [CBaselineRow] = []
    var cBaselineNote = ""
    var http: [HTTPRow] = []
    var metricsScrape: MetricsScrape?
    var stopSeconds: Double?
    var readySeconds: [Double] = []
    var readyStatus = ""
    /// `systemd-notify --ready` spawned the same way: spawn → READY=1.
    var readyBaselineSeconds: [Double] = []
    var deviceMemory: DeviceMemory?
    var fleet: FleetTiming?
    var rssIdleKiB: Int?
    var rssConnectedKiB: Int?
    var rssPeakKiB: Int?
    /// With the clients connected: proportional set size, pages no other process maps
    /// (private clean + dirty), and file pages shared with other processes (libraries).
    var pssKiB: Int?
    var privateKiB: Int?
    var sharedCleanKiB: Int?
    var rssClientsConnected = 0
    var rssAnswers = 0
    var idleThreads: [IdleThread] = []
    var idleSecondsMeasured = 0.0
    var emulatorRequestsPerSecond: Double?
    var emulatorCPU: Double?
    var emulatorLatency: [String: String] = [:]
    var emulatorNote = ""
    var totalSeconds = 0.0
    /// Size of the `pushwoosh-agentd` file measured (release builds link the Swift runtime in).
    var agentBinaryBytes: Int?

    func row(_ server: String, _ method: String, clients: Int, depth: Int) -> SocketRow? {
        socket.first { $0.server == server && $0.method == method && $0.clients == clients && $0.depth == depth }
    }

    /// Agent req/s over echo req/s for the same request, clients and depth.
    func ratio(_ method: String, clients: Int, depth: Int) -> Double? {
        guard let agent = row("agent", method, clients: clients, depth: depth),
              let echo = row("echo", method, clients: clients, depth: depth), echo.result.requestsPerSecond > 0 else { return nil }
        return agent.result.requestsPerSecond / echo.result.requestsPerSecond
    }

    var idleWakeups: Int { idleThreads.reduce(0) { $0 + $1.wakeups } }

    var targets: [Target] {
        var list: [Target] = cBaselineTargets
        func ratioTarget(_ name: String, clients: Int, depth: Int, goal: Double) {
            let r = ratio("isEnabled", clients: clients, depth: depth)
            list.append(Target(name: name, goal: "≥ \(Int(goal * 100)) %",
                               measured: r.map { String(format: "%.0f %%", $0 * 100) } ?? "not run",
                               pass: r.map { $0 >= goal }))
        }
        ratioTarget("isEnabled, 1 client, vs AgentPosix echo", clients: 1, depth: 1, goal: 0.70)
        ratioTarget("isEnabled, 32 clients, vs AgentPosix echo", clients: 32, depth: 1, goal: 0.50)
        ratioTarget("isEnabled, 128 clients, vs AgentPosix echo", clients: 128, depth: 1, goal: 0.50)
        ratioTarget("isEnabled, 32 clients × 16 pipelined, vs AgentPosix echo", clients: 32, depth: 16, goal: 0.25)
        if let agent = row("agent", "isEnabled", clients: 32, depth: 16), let echo = row("echo", "isEnabled", clients: 32, depth: 16),
           echo.result.cpuPerRequest > 0 {
            let factor = agent.result.cpuPerRequest / echo.result.cpuPerRequest
            list.append(Target(name: "server CPU per isEnabled, 32 × 16 pipelined, vs AgentPosix echo", goal: "≤ 2.5×",
                               measured: String(format: "%.2f× (%.2f vs %.2f µs)", factor, agent.result.cpuPerRequest,
                                                echo.result.cpuPerRequest),
                               pass: factor <= 2.5))
        } else {
            list.append(Target(name: "server CPU per isEnabled, 32 × 16 pipelined, vs AgentPosix echo", goal: "≤ 2.5×", measured: "not run", pass: nil))
        }
        if let agent = row("agent", "isEnabled", clients: 32, depth: 1), let echo = row("echo", "isEnabled", clients: 32, depth: 1) {
            let factor = agent.result.p99 / max(echo.result.p99, 0.001)
            list.append(Target(name: "isEnabled p99, 32 clients, vs AgentPosix echo", goal: "≤ 3×",
                               measured: String(format: "%.2f× (%.0f vs %.0f µs)", factor, agent.result.p99, echo.result.p99),
                               pass: factor <= 3))
        } else {
            list.append(Target(name: "isEnabled p99, 32 clients, vs AgentPosix echo", goal: "≤ 3×", measured: "not run", pass: nil))
        }
        let readyMedian = median(readySeconds) * 1000
        list.append(Target(name: "start to READY=1, \(options?.flagCount ?? 1000) stored flags (median)", goal: "≤ 15 ms",
                           measured: readySeconds.isEmpty ? "not run" : String(format: "%.1f ms", readyMedian),
                           pass: readySeconds.isEmpty ? nil : readyMedian <= 15))
        if !readyBaselineSeconds.isEmpty, !readySeconds.isEmpty {
            let factor = median(readySeconds) / max(median(readyBaselineSeconds), 1e-6)
            list.append(Target(name: "start to READY=1 vs `systemd-notify --ready` (medians, alternated)", goal: "≤ 2×",
                               measured: String(format: "%.2f× (%.1f vs %.1f ms)", factor, median(readySeconds) * 1000,
                                                median(readyBaselineSeconds) * 1000), pass: factor <= 2))
        }
        if let m = deviceMemory, m.devices > 0 {
            let pss = Double(m.agentPss) / Double(m.devices)
            list.append(Target(name: "idle Pss per device, \(m.devices) devices", goal: "≤ 1 MiB",
                               measured: String(format: "%.2f MiB (private %.2f MiB; echo-server %.2f / %.2f MiB)", pss / 1024,
                                                Double(m.agentPrivate) / Double(m.devices) / 1024,
                                                Double(m.echoPss) / Double(m.devices) / 1024,
                                                Double(m.echoPrivate) / Double(m.devices) / 1024),
                               pass: pss <= 1024))
        }
        if let f = fleet, let call = f.runs["fleet call refresh"], let status = f.runs["fleet status"] {
            list.append(Target(name: "`fleet call refresh`, \(f.devices) devices, vs `fleet status` (medians)", goal: "–",
                               measured: String(format: "%.2f× (%.0f vs %.0f ms)", median(call) / max(median(status), 1e-6),
                                                median(call) * 1000, median(status) * 1000), pass: nil))
        }
        list.append(Target(name: "peak RSS, \(options?.flagCount ?? 1000) flags, \(options?.rssClients ?? 256) clients", goal: "≤ 16 MiB",
                           measured: rssPeakKiB.map { String(format: "%.1f MiB", Double($0) / 1024) } ?? "not run",
                           pass: rssPeakKiB.map { $0 <= 16 * 1024 }))
        list.append(Target(name: "idle wake-ups in \(Int(idleSecondsMeasured)) s (no timer due, no watchdog)", goal: "0",
                           measured: idleThreads.isEmpty ? "not run" : "\(idleWakeups)",
                           pass: idleThreads.isEmpty ? nil : idleWakeups == 0))
        list.append(Target(name: "threads while idle", goal: "1",
                           measured: idleThreads.isEmpty ? "not run" : "\(idleThreads.count)",
                           pass: idleThreads.isEmpty ? nil : idleThreads.count == 1))
        list.append(Target(name: "pushwoosh-agentd binary", goal: "≤ 30 MB",
                           measured: agentBinaryBytes.map { String(format: "%.1f MB", Double($0) / 1e6) } ?? "not run",
                           pass: agentBinaryBytes.map { $0 <= 30_000_000 }))
        list.append(Target(name: "emulator getFeatureFlags, \(options?.emulatorConnections ?? 64) clients", goal: "≥ 5,000/s",
                           measured: emulatorRequestsPerSecond.map { String(format: "%.0f/s", $0) } ?? "not run",
                           pass: emulatorRequestsPerSecond.map { $0 >= 5000 }))
        return list
    }

    // MARK: - Markdown

    var markdown: String {
        var md = "# pushwoosh-agent benchmark\n\n"
        md += "\(machine.date) · \(machine.cpus) CPUs, \(machine.cpuModel) · Linux \(machine.kernel) · "
        md += "load average \(machine.loadAverageStart) at start, \(machine.loadAverageEnd) at end · "
        md += String(format: "%.0f s in all\n\n", totalSeconds)

        md += "## Targets\n\n| target | goal | measured | |\n| --- | --- | --- | --- |\n"
        for t in targets {
            md += "| \(t.name) | \(t.goal) | \(t.measured) | \(t.pass.map { $0 ? "PASS" : "**MISS**" } ?? "–") |\n"
        }

        md += cBaselineMarkdown

        if !socket.isEmpty, let o = options {
            md += "\n## Socket: requests per second and latency\n\n"
            md += "Unix stream socket; the baseline is AgentPosix's `EchoServer` (same event loop, listener and connections) "
            md += "in its own process, driven by the same client with the same request bytes. "
            md += String(format: "%.1f s warm-up + %.1f s measured per cell; ", o.warmup, o.duration)
            md += "\(o.clientThreads) client threads (blocking `send`/`recv` for a thread with one connection, `epoll` for several). "
            md += "Latency is send → answer per request; with 16 in flight it includes queueing. Server CPU is % of one core in the measured window; "
            md += "CPU µs per request (server CPU time / answers) is the figure least disturbed by other load on the machine.\n\n"
            md += "| request | clients × in flight | echo req/s | agent req/s | ratio | echo p50 / p99 µs | agent p50 / p99 µs | p99 ratio | server CPU echo / agent | CPU µs per request echo / agent |\n"
            md += "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
            for method in ["isEnabled", "get"] {
                for clients in o.clientCounts {
                    for depth in o.depths {
                        guard let agent = row("agent", method, clients: clients, depth: depth),
                              let echo = row("echo", method, clients: clients, depth: depth) else { continue }
                        let a = agent.result, e = echo.result
                        md += "| \(method) | \(clients) × \(depth) | \(Int(e.requestsPerSecond)) | \(Int(a.requestsPerSecond)) | "
                        md += String(format: "%.0f %% | %.0f / %.0f | %.0f / %.0f | %.2f | %.0f / %.0f %% | %.2f / %.2f |\n",
                                     a.requestsPerSecond / max(e.requestsPerSecond, 1) * 100, e.p50, e.p99, a.p50, a.p99,
                                     a.p99 / max(e.p99, 0.001), e.serverCPU, a.serverCPU,
                                     e.cpuPerRequest, a.cpuPerRequest)
                    }
                }
            }
        }

        md += httpMarkdown

        if !readySeconds.isEmpty {
            let ms = readySeconds.map { $0 * 1000 }
            md += "\n## Start to READY=1\n\n"
            md += String(format: "%d starts with %d stored flags (spawn → `READY=1` datagram on `NOTIFY_SOCKET`): median %.1f ms, min %.1f, max %.1f. ",
                         ms.count, options?.flagCount ?? 0, median(ms), ms.min() ?? 0, ms.max() ?? 0)
            md += "First start's status: \(readyStatus)."
            if !readyBaselineSeconds.isEmpty {
                let b = readyBaselineSeconds.map { $0 * 1000 }
                md += String(format: " Baseline, `systemd-notify --ready` spawned the same way (same environment and receiver, "
                             + "alternating with the agent's starts): median %.1f ms, min %.1f, max %.1f; the agent takes %.2f× as long.",
                             median(b), b.min() ?? 0, b.max() ?? 0, median(ms) / max(median(b), 1e-6))
            }
            if let stopSeconds { md += String(format: " SIGTERM → exit: %.0f ms.", stopSeconds * 1000) }
            md += "\n"
        }

        if let peak = rssPeakKiB {
            md += "\n## Memory\n\n"
            md += String(format: "VmHWM %.1f MiB after %d clients made %d requests (isEnabled, get, property, status over many flags); ",
                         Double(peak) / 1024, rssClientsConnected, rssAnswers)
            md += String(format: "VmRSS %.1f MiB with them connected, %.1f MiB idle before they came.\n",
                         Double(rssConnectedKiB ?? 0) / 1024, Double(rssIdleKiB ?? 0) / 1024)
            if let pss = pssKiB, let own = privateKiB, let shared = sharedCleanKiB {
                md += String(format: "Of the resident pages with the clients connected (smaps_rollup): %.1f MiB the agent's own "
                             + "(private clean + dirty), %.1f MiB shared clean (library and binary pages that every agent on the host "
                             + "shares); Pss %.1f MiB.\n", Double(own) / 1024, Double(shared) / 1024, Double(pss) / 1024)
            }
        }

        if let m = deviceMemory, m.devices > 0 {
            let n = Double(m.devices)
            md += "\n## Idle devices: memory per device\n\n"
            md += "\(m.devices) agents, each its own device (state directory, User ID, socket) of \(m.app) against the emulator, "
            md += String(format: "all ready with their start-up refresh done (%.1f s from the first spawn), summed from /proc/PID/smaps_rollup; "
                         + "the baseline is %d idle `pushwoosh-bench echo-server` processes in the same run (the same event loop and "
                         + "socket listener, the Swift runtime linked in statically the same way, no device; libcurl and its "
                         + "libraries are loaded, never initialised: pushwoosh-bench links AgentPosix).\n\n",
                         m.startSeconds, m.devices)
            md += "| per process | agent | echo-server | agent ÷ echo |\n| --- | ---: | ---: | ---: |\n"
            md += String(format: "| Pss | %.0f KiB | %.0f KiB | %.2f |\n", Double(m.agentPss) / n, Double(m.echoPss) / n,
                         Double(m.agentPss) / max(Double(m.echoPss), 1))
            md += String(format: "| private (clean + dirty) | %.0f KiB | %.0f KiB | %.2f |\n", Double(m.agentPrivate) / n,
                         Double(m.echoPrivate) / n, Double(m.agentPrivate) / max(Double(m.echoPrivate), 1))
            md += "\nOne agent's private pages by mapping: "
            md += m.breakdown.map { "\($0.kind) \($0.kib) KiB" }.joined(separator: ", ") + ".\n"
        }

        if let f = fleet {
            md += "\n## Fleet: one command over many devices\n\n"
            md += "\(f.devices) agents as in the section above, their sockets in one directory (as `scripts/measure-fleet`); "
            md += String(format: "all ready %.1f s after the first spawn. ", f.readySeconds)
            md += "Wall time of `pushwoosh-agentctl` from spawn to exit, \(f.runs.values.first?.count ?? 0) runs each after one untimed round, "
            md += "commands alternating: `fleet call refresh` (every device fetches its flags from the emulator and answers), "
            md += "against `fleet status` over the same devices (answered from memory) and one device's `refresh`.\n\n"
            md += "| command | median ms | min / max ms | output lines | ÷ fleet status |\n| --- | ---: | ---: | ---: | ---: |\n"
            let status = median(f.runs["fleet status"] ?? [])
            for name in ["fleet call refresh", "fleet status", "one refresh"] {
                guard let runs = f.runs[name] else { continue }
                md += String(format: "| `%@` | %.0f | %.0f / %.0f | %d | %.2f |\n", name, median(runs) * 1000, (runs.min() ?? 0) * 1000,
                             (runs.max() ?? 0) * 1000, f.lines[name] ?? 0, median(runs) / max(status, 1e-6))
            }
        }

        if !idleThreads.isEmpty {
            md += "\n## Idle wake-ups\n\n"
            md += "Context switches (voluntary + involuntary, /proc/PID/task/*/status) of each thread of an agent with no clients, "
            md += "over \(Int(idleSecondsMeasured)) s, after its start-up refresh settled; no agent timer was due and no watchdog was set.\n\n"
            md += "| thread | tid | wake-ups | blocked in |\n| --- | ---: | ---: | --- |\n"
            for t in idleThreads {
                md += "| \(t.name)\(t.isMain ? " (event loop)" : "")\(t.isNew ? " (new)" : "") | \(t.tid) | \(t.wakeups) | \(t.blockedIn) |\n"
            }
        }

        if let rate = emulatorRequestsPerSecond {
            md += "\n## Emulator\n\n"
            md += String(format: "wrk, %d connections, %.0f s, 1,000 devices (as `scripts/bench-emulator`): %.0f getFeatureFlags/s",
                         options?.emulatorConnections ?? 64, options?.emulatorSeconds ?? 0, rate)
            if let p50 = emulatorLatency["50%"], let p99 = emulatorLatency["99%"] { md += ", p50 \(p50), p99 \(p99)" }
            if let cpu = emulatorCPU { md += String(format: ", emulator CPU %.0f %%", cpu) }
            md += emulatorNote.isEmpty ? ".\n" : "; \(emulatorNote).\n"
        } else if !emulatorNote.isEmpty {
            md += "\n## Emulator\n\n\(emulatorNote)\n"
        }
        return md
    }

    // MARK: - JSON

    var json: JSONValue {
        func number(_ value: Double?) -> JSONValue { value.map { .number(($0 * 1000).rounded() / 1000) } ?? .null }
        var o: [String: JSONValue] = [:]
        o["machine"] = ["date": .string(machine.date), "cpus": .number(Double(machine.cpus)), "cpuModel": .string(machine.cpuModel),
                        "kernel": .string(machine.kernel), "loadAverageStart": .string(machine.loadAverageStart),
                        "loadAverageEnd": .string(machine.loadAverageEnd)]
        if let opt = options {
            o["options"] = ["warmupSeconds": number(opt.warmup), "durationSeconds": number(opt.duration),
                            "clientThreads": .number(Double(opt.clientThreads)), "flags": .number(Double(opt.flagCount)),
                            "starts": .number(Double(opt.starts)), "rssClients": .number(Double(opt.rssClients)),
                            "idleSeconds": number(opt.idleSeconds), "emulatorSeconds": number(opt.emulatorSeconds),
                            "emulatorConnections": .number(Double(opt.emulatorConnections))]
        }
        o["targets"] = .array(targets.map { t in
            ["name": .string(t.name), "goal": .string(t.goal), "measured": .string(t.measured),
             "result": t.pass.map { .string($0 ? "PASS" : "MISS") } ?? .null]
        })
        o["socket"] = .array(socket.map { r in
            [
                "server": .string(r.server), "method": .string(r.method), "clients": .number(Double(r.clients)),
                "inFlight": .number(Double(r.depth)), "requestsPerSecond": number(r.result.requestsPerSecond),
                "p50Microseconds": number(r.result.p50), "p99Microseconds": number(r.result.p99),
                "serverCPUPercent": number(r.result.serverCPU), "clientCPUPercent": number(r.result.clientCPU),
                "serverCPUMicrosecondsPerRequest": number(r.result.cpuPerRequest),
                "ratioToEcho": r.server == "agent" ? number(ratio(r.method, clients: r.clients, depth: r.depth)) : .null,
            ]
        })
        o["ready"] = ["milliseconds": .array(readySeconds.map { number($0 * 1000) }),
                      "medianMilliseconds": readySeconds.isEmpty ? .null : number(median(readySeconds) * 1000),
                      "stopMilliseconds": number(stopSeconds.map { $0 * 1000 }),
                      "systemdNotifyMilliseconds": .array(readyBaselineSeconds.map { number($0 * 1000) }),
                      "systemdNotifyMedianMilliseconds": readyBaselineSeconds.isEmpty ? .null : number(median(readyBaselineSeconds) * 1000)]
        o["memory"] = ["peakKiB": rssPeakKiB.map { .number(Double($0)) } ?? .null,
                       "connectedKiB": rssConnectedKiB.map { .number(Double($0)) } ?? .null,
                       "idleKiB": rssIdleKiB.map { .number(Double($0)) } ?? .null,
                       "clients": .number(Double(rssClientsConnected)), "answers": .number(Double(rssAnswers)),
                       "pssKiB": pssKiB.map { .number(Double($0)) } ?? .null,
                       "privateKiB": privateKiB.map { .number(Double($0)) } ?? .null,
                       "sharedCleanKiB": sharedCleanKiB.map { .number(Double($0)) } ?? .null]
        if let m = deviceMemory {
            o["devices"] = ["count": .number(Double(m.devices)), "app": .string(m.app), "agentPssKiB": .number(Double(m.agentPss)),
                            "agentPrivateKiB": .number(Double(m.agentPrivate)), "echoPssKiB": .number(Double(m.echoPss)),
                            "echoPrivateKiB": .number(Double(m.echoPrivate)),
                            "privateByMappingKiB": .object(Dictionary(uniqueKeysWithValues: m.breakdown.map { ($0.kind, JSONValue.number(Double($0.kib))) }))]
        }
        if let f = fleet {
            o["fleet"] = ["devices": .number(Double(f.devices)), "readySeconds": number(f.readySeconds),
                          "runsSeconds": .object(f.runs.mapValues { .array($0.map { number($0) }) })]
        }
        o["agentBinaryBytes"] = agentBinaryBytes.map { .number(Double($0)) } ?? .null
        o["idle"] = ["seconds": number(idleSecondsMeasured), "wakeups": .number(Double(idleWakeups)),
                     "threads": .array(idleThreads.map { t in
                         ["tid": .number(Double(t.tid)), "name": .string(t.name), "eventLoop": .bool(t.isMain),
                          "wakeups": .number(Double(t.wakeups)), "blockedIn": .string(t.blockedIn), "new": .bool(t.isNew)]
                     })]
        o["emulator"] = ["requestsPerSecond": number(emulatorRequestsPerSecond), "cpuPercent": number(emulatorCPU),
                         "p50": emulatorLatency["50%"].map(JSONValue.string) ?? .null,
                         "p99": emulatorLatency["99%"].map(JSONValue.string) ?? .null, "note": .string(emulatorNote)]
        o["http"] = httpJSON
        o["cBaseline"] = cBaselineJSON
        o["totalSeconds"] = number(totalSeconds)
        return .object(o)
    }

    func write(prefix: String) throws {
        let directory = (prefix as NSString).deletingLastPathComponent
        if !directory.isEmpty { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) }
        try markdown.write(toFile: prefix + ".md", atomically: true, encoding: .utf8)
        try (JSONWriter.string(json) + "\n").write(toFile: prefix + ".json", atomically: true, encoding: .utf8)
    }
}
