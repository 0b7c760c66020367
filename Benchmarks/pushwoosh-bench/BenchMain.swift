import AgentCore
import AgentPosix
import AgentWire
import Foundation
import Glibc
import HarnessSupport
import Launcher
import ToolSupport

struct BenchOptions {
    var binDirectory: String
    var appsFile = "config/flags.example.json"
    var output = "Benchmarks/results/latest"
    var warmup = 0.5
    var duration = 3.0
    var clientCounts = [1, 8, 32, 128]
    var depths = [1, 16]
    var clientThreads = max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
    var flagCount = 1000
    var starts = 10
    var rssClients = 256
    var idleSeconds = 60.0
    var emulatorSeconds = 5.0
    var emulatorConnections = 64
    var only: Set<String> = ["socket", "http", "ready", "rss", "idle", "devices", "fleet", "emulator"]
    var httpClientCounts = [1, 32]
    var scrapes = 200
    var devices = 20
    /// `--device-flags`: the idle devices serve the `--flags` app instead of the example app.
    var devicesServeBenchApp = false
    var fleet = 200
    var fleetRuns = 3
    /// Where echo-server.c and load-client.c are (the C baseline, CBaseline.swift).
    var cSources = "Benchmarks/c"
    var cRuns = 3

    static let usage = """
        usage: pushwoosh-bench [run] [options]      the whole benchmark (what `make bench` runs)
               pushwoosh-bench echo-server --socket PATH
               pushwoosh-bench put-app --port PORT [--flags N] [--apps FILE]   (the bench's app, on a running emulator)
               pushwoosh-bench load --socket PATH [--method isEnabled|get] [--clients N] [--depth N] [--seconds S]
                                                  (one cell against a running server, e.g. under a profiler)

          --bin DIR              where pushwoosh-agentd and pushwoosh-emulator are (default: next to this binary)
          --apps FILE            emulator app definitions (default config/flags.example.json)
          --out PREFIX           write PREFIX.md and PREFIX.json (default Benchmarks/results/latest)
          --duration S           measured seconds per socket cell (default 3)
          --warmup S             warm-up seconds per socket cell (default 0.5)
          --clients LIST         client counts (default 1,8,32,128)
          --depths LIST          requests in flight per client (default 1,16)
          --client-threads N     load-driver threads (default: number of CPUs)
          --flags N              stored flags (default 1000)
          --starts N             agent starts timed to READY=1 (default 10)
          --rss-clients N        clients connected for the peak RSS (default 256)
          --idle-seconds S       idle observation window (default 60)
          --emulator-seconds S   wrk duration against the emulator (default 5)
          --devices N            idle agents whose memory is summed (default 20)
          --device-flags         those devices serve the --flags app (1,000 flags) instead of the example app
          --fleet N              agents under `agentctl fleet` (default 200)
          --fleet-runs N         timed runs of each fleet command (default 3)
          --c-sources DIR        the C echo server and load client, compiled with cc (default Benchmarks/c)
          --c-runs N             runs of each C-client cell against the C echo server and the agent (default 3)
          --only LIST            some of: socket,http,ready,rss,idle,devices,fleet,emulator
        """

    static func parse(_ args: [String]) throws -> BenchOptions {
        let selfPath = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var o = BenchOptions(binDirectory: (selfPath as NSString).deletingLastPathComponent)
        var k = 0
        func value() throws -> String {
            k += 1
            guard k < args.count else { throw BenchError("\(args[k - 1]) needs a value") }
            return args[k]
        }
        func number() throws -> Double {
            let text = try value()
            guard let n = Double(text), n >= 0 else { throw BenchError("\(args[k - 1]): not a number: \(text)") }
            return n
        }
        func list() throws -> [Int] {
            let text = try value()
            let items = text.split(separator: ",").compactMap { Int($0) }
            guard !items.isEmpty, items.allSatisfy({ $0 > 0 }) else { throw BenchError("\(args[k - 1]): bad list \(text)") }
            return items
        }
        while k < args.count {
            switch args[k] {
            case "run": break
            case "--bin": o.binDirectory = try value()
            case "--apps": o.appsFile = try value()
            case "--out": o.output = try value()
            case "--duration": o.duration = try number()
            case "--warmup": o.warmup = try number()
            case "--clients": o.clientCounts = try list()
            case "--depths": o.depths = try list()
            case "--client-threads": o.clientThreads = max(1, Int(try number()))
            case "--flags": o.flagCount = max(1, Int(try number()))
            case "--starts": o.starts = max(1, Int(try number()))
            case "--rss-clients": o.rssClients = max(1, Int(try number()))
            case "--idle-seconds": o.idleSeconds = try number()
            case "--emulator-seconds": o.emulatorSeconds = max(1, try number())
            case "--devices": o.devices = max(1, Int(try number()))
            case "--device-flags": o.devicesServeBenchApp = true
            case "--fleet": o.fleet = max(1, Int(try number()))
            case "--fleet-runs": o.fleetRuns = max(1, Int(try number()))
            case "--c-sources": o.cSources = try value()
            case "--c-runs": o.cRuns = max(1, Int(try number()))
            case "--only":
                o.only = Set(try value().split(separator: ",").map(String.init))
                let known: Set<String> = ["socket", "http", "ready", "rss", "idle", "devices", "fleet", "emulator"]
                guard o.only.isSubset(of: known) else { throw BenchError("--only: use some of \(known.sorted())") }
            case "--help", "-h":
                print(usage)
                exit(0)
            default:
                throw BenchError("unknown argument \(args[k])\n\(usage)")
            }
            k += 1
        }
        return o
    }
}

enum BenchMain {
    static func run(_ args: [String]) -> Int32 {
        if args.first == "echo-server" { return EchoCommand.run(Array(args.dropFirst())) }
        if args.first == "load" { return LoadCommand.run(Array(args.dropFirst())) }
        if args.first == "put-app" { return BenchApp.command(Array(args.dropFirst())) }
        let options: BenchOptions
        do {
            options = try BenchOptions.parse(args)
        } catch {
            printErr("pushwoosh-bench: \(error)")
            return 2
        }
        var template = Array("/tmp/pwb.XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else {
            printErr("pushwoosh-bench: mkdtemp: \(String(cString: strerror(errno)))")
            return 1
        }
        let directory = String(cString: made)
        Children.installCleanup(removing: directory)
        do {
            let bench = try Bench(options: options, directory: directory)
            let report = try bench.runAll()
            try report.write(prefix: options.output)
            print(report.markdown)
            return 0
        } catch {
            printErr("pushwoosh-bench: \(error)")
            return 1
        }
    }
}

/// Runs the scenarios; owns the temporary directory's layout and the emulator.
final class Bench {
    let options: BenchOptions
    let directory: String
    let agentd: String
    let emulatorBinary: String
    let applicationCode = BenchApp.code
    var report = Report()
    private var emulatorPID: pid_t = 0
    private(set) var emulatorPort: UInt16 = 0
    private var logCounter = 0

    init(options: BenchOptions, directory: String) throws {
        self.options = options
        self.directory = directory
        agentd = options.binDirectory + "/pushwoosh-agentd"
        var info = stat()
        if stat(agentd, &info) == 0 { report.agentBinaryBytes = Int(info.st_size) }
        emulatorBinary = options.binDirectory + "/pushwoosh-emulator"
        for binary in [agentd, emulatorBinary] where access(binary, X_OK) != 0 {
            throw BenchError("\(binary) not found: build with `swift build -c release` or pass --bin")
        }
        guard FileManager.default.fileExists(atPath: options.appsFile) else {
            throw BenchError("\(options.appsFile) not found (run from the repository root or pass --apps)")
        }
    }

    func log(_ text: String) { printErr("[bench] " + text) }

    private func logPaths(_ name: String) -> (String, String) {
        logCounter += 1
        return ("\(directory)/\(logCounter)-\(name).out", "\(directory)/\(logCounter)-\(name).err")
    }

    func runAll() throws -> Report {
        report.machine = Machine.current()
        report.options = options
        let started = monotonicSeconds()
        let needsAgent = !options.only.isDisjoint(with: ["socket", "http", "ready", "rss", "idle"])
        if needsAgent || !options.only.isDisjoint(with: ["devices", "fleet"]) { try startEmulator() }
        if needsAgent || (options.devicesServeBenchApp && options.only.contains("devices")) {
            try loadFlags()
        }
        if needsAgent {
            try prepareState()  // first agent: fetches the flags, serves the socket cells, stops
        }
        if options.only.contains("ready") { try measureReady() }
        if options.only.contains("rss") { try measureRSS() }
        if options.only.contains("idle") { try measureIdle() }
        if options.only.contains("devices") { try measureDevices() }
        if options.only.contains("fleet") { try measureFleet() }
        if emulatorPID != 0 {
            Children.stop(emulatorPID)
            emulatorPID = 0
        }
        if options.only.contains("emulator") { try measureEmulator() }
        report.machine.loadAverageEnd = Machine.loadAverage()
        report.totalSeconds = monotonicSeconds() - started
        return report
    }

    // MARK: - Emulator and agents

    private func startEmulator() throws {
        let (out, err) = logPaths("emulator")
        emulatorPID = try Children.spawn(emulatorBinary, ["--listen", "127.0.0.1:0", "--apps", options.appsFile],
                                         stdout: out, stderr: err)
        emulatorPort = try waitForListening(out: out, err: err, pid: emulatorPID)
        log("emulator on 127.0.0.1:\(emulatorPort)")
    }

    private func waitForListening(out: String, err: String, pid: pid_t) throws -> UInt16 {
        if let port = ChildProcess.announcedPort(in: out, timeout: 10, alive: { Children.isAlive(pid) }) { return port }
        guard Children.isAlive(pid) else { throw BenchError("emulator exited: \(readText(err) ?? "")") }
        throw BenchError("emulator did not start: \(readText(err) ?? "")")
    }

    /// The example app's flags plus generated ones, `flagCount` served flags in all (`BenchApp`).
    private func loadFlags() throws {
        let count = try BenchApp.put(port: emulatorPort, appsFile: options.appsFile, flagCount: options.flagCount)
        log("emulator app \(applicationCode): \(count) flags (\(options.flagCount) served)")
    }

    var socketPath: String { directory + "/agent.sock" }
    var httpPath: String { directory + "/http.sock" }
    var notifyPath: String { directory + "/notify.sock" }
    var stateDirectory: String { directory + "/state" }

    private func writeConfig() throws -> String {
        let path = directory + "/agent.conf"
        let text = """
            [Agent]
            ApplicationCode=\(applicationCode)
            ServerURL=http://127.0.0.1:\(emulatorPort)/json/1.3/
            Socket=\(socketPath)
            StateDirectory=\(stateDirectory)
            [HTTP]
            Listen=\(httpPath)

            """
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Starts an agent and waits for READY=1; returns its pid and the seconds from spawn. The one
    /// place an agent is spawned bare rather than by Launcher's `AgentLauncher`: the READY=1
    /// timing compares exec-to-READY with `systemd-notify --ready` started the same way, so
    /// neither may carry the launcher's `setpriv` exec in front of it.
    private func startAgent(_ receiver: NotifyReceiver, name: String) throws -> (pid: pid_t, ready: Double) {
        let config = try writeConfig()
        let (out, err) = logPaths(name)
        receiver.drain()
        let spawned = monotonicSeconds()
        let pid = try Children.spawn(agentd, ["--config", config], environment: ["NOTIFY_SOCKET": receiver.path],
                                     stdout: out, stderr: err)
        guard let ready = receiver.wait(for: "READY=1", timeout: 15, alive: { Children.isAlive(pid) }) else {
            Children.stop(pid, signal: SIGKILL)
            throw BenchError("agent sent no READY=1: \(readText(err)?.suffix(2000) ?? "")")
        }
        return (pid, ready.at - spawned)
    }

    /// Waits until the agent serves `flagCount` flags and its start-up refresh is over.
    private func waitForFlags(source: String?, timeout: Double = 20) throws -> JSONValue {
        let deadline = monotonicSeconds() + timeout
        var last: JSONValue = .null
        while monotonicSeconds() < deadline {
            last = try LineClient.call(socketPath, .status)
            let count = Int(last["flagsCount"]?.numberValue ?? -1)
            let refreshed = last["lastRefreshAt"].map { !$0.isNull } ?? false
            if count == options.flagCount, refreshed, source == nil || last["flagsSource"]?.stringValue == source {
                return last
            }
            sleepSeconds(0.05)
        }
        throw BenchError("agent never served \(options.flagCount) flags: \(JSONWriter.string(last))")
    }

    /// First start: an empty state directory; the agent fetches the flags from the emulator
    /// and stores them. It then serves the socket cells and is stopped with SIGTERM.
    private func prepareState() throws {
        Children.removeTree(stateDirectory)
        let receiver = try NotifyReceiver(path: notifyPath)
        let agent = try startAgent(receiver, name: "agent-prepare")
        defer { Children.stop(agent.pid) }
        let status = try waitForFlags(source: "network")
        log("agent fetched \(Int(status["flagsCount"]?.numberValue ?? 0)) flags; state \(status["state"]?.stringValue ?? "?")")
        if options.only.contains("socket") {
            try measureCBaseline(agentPID: agent.pid)
            try measureSocket(agentPID: agent.pid)
        }
        if options.only.contains("http") { try measureHTTP(agentPID: agent.pid) }
        let stopped = Children.stop(agent.pid)
        report.stopSeconds = stopped
        guard FileManager.default.fileExists(atPath: stateDirectory + "/state.json") else {
            throw BenchError("the agent stored no state in \(stateDirectory)")
        }
    }

    // MARK: - 1. Socket throughput and latency

    private func measureSocket(agentPID: pid_t) throws {
        let echoSocket = directory + "/echo.sock"
        let (out, err) = logPaths("echo")
        let selfPath = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let echoPID = try Children.spawn(selfPath, ["echo-server", "--socket", echoSocket], stdout: out, stderr: err)
        defer { Children.stop(echoPID) }
        try Sockets.waitForListener(echoSocket, timeout: 5) { Children.isAlive(echoPID) }

        let prefix = Array(#"{"jsonrpc":"2.0","id":"#.utf8)
        let methods: [(name: String, suffix: String)] = [
            ("isEnabled", #","method":"isEnabled","params":{"key":"new_checkout","default":false}}"#),
            ("get", #","method":"get","params":{"key":"new_checkout"}}"#),
        ]
        // Check that the agent answers these requests with results, not errors.
        let check = try LineClient(path: socketPath)
        for method in methods {
            try BlockingSocket.sendAll(check.fd, prefix + Array("1".utf8) + Array(method.suffix.utf8) + [0x0A])
            guard let line = check.readLine() else { throw BenchError("agent did not answer \(method.name)") }
            guard line.contains(#""result""#), !line.contains(#""source":"none""#) else {
                throw BenchError("agent answered \(method.name) with \(line)")
            }
        }

        for clients in options.clientCounts {
            for depth in options.depths {
                var targets: [(server: String, method: String, socket: String, pid: pid_t, suffix: String)] = []
                for method in methods {
                    targets.append(("echo", method.name, echoSocket, echoPID, method.suffix))
                    targets.append(("agent", method.name, socketPath, agentPID, method.suffix))
                }
                for target in targets {
                    let cell = LoadCell(socket: target.socket, prefix: prefix, suffix: Array(target.suffix.utf8) + [0x0A],
                                        clients: clients, depth: depth, warmup: options.warmup, duration: options.duration,
                                        threads: options.clientThreads, serverPID: target.pid)
                    let result = try LoadDriver.run(cell)
                    report.socket.append(SocketRow(server: target.server, method: target.method, clients: clients,
                                                   depth: depth, result: result))
                    log(String(format: "%@ %@ clients=%d depth=%d: %.0f req/s p50 %.1f µs p99 %.1f µs (server CPU %.0f%%, client CPU %.0f%%)",
                               target.server, target.method, clients, depth, result.requestsPerSecond,
                               result.p50, result.p99, result.serverCPU, result.clientCPU))
                    sleepSeconds(0.15)  // let the server close the connections
                }
            }
        }
    }

    // MARK: - 1b. The HTTP interface (docs/http.md F)

    /// OFREP single-flag evaluation on keep-alive connections against the socket's
    /// `isEnabled` and against `/healthz` (the smallest answer of the same HTTP server on the
    /// same loop), 1 request in flight per client, cells alternating; then the cost of one
    /// `/metrics` scrape with the stored flags served.
    private func measureHTTP(agentPID: pid_t) throws {
        let id = "X-Request-Id: "
        let targets: [(kind: String, prefix: String, suffix: String, http: Bool)] = [
            ("socket isEnabled", #"{"jsonrpc":"2.0","id":"#, #","method":"isEnabled","params":{"key":"new_checkout","default":false}}"# + "\n", false),
            ("OFREP evaluate", "POST /ofrep/v1/evaluate/flags/new_checkout HTTP/1.1\r\nHost: agent\r\n" + id,
             "\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n{\"context\":{}}", true),
            ("HTTP /healthz", "GET /healthz HTTP/1.1\r\nHost: agent\r\n" + id, "\r\n\r\n", true),
        ]
        var lengths: [String: Int] = [:]
        for t in targets where t.http {
            let answer = try HTTPOverUnix.exchange(httpPath, Array((t.prefix + "1" + t.suffix).utf8))
            guard answer.status == 200 else { throw BenchError("\(t.kind): HTTP \(answer.status) \(answer.text)") }
            lengths[t.kind] = answer.bytes
        }
        for clients in options.httpClientCounts {
            for t in targets {
                var cell = LoadCell(socket: t.http ? httpPath : socketPath, prefix: Array(t.prefix.utf8), suffix: Array(t.suffix.utf8),
                                    clients: clients, depth: 1, warmup: options.warmup, duration: options.duration,
                                    threads: options.clientThreads, serverPID: agentPID)
                cell.answerBytes = lengths[t.kind] ?? 0
                let result = try LoadDriver.run(cell)
                report.http.append(HTTPRow(kind: t.kind, clients: clients, result: result))
                log(String(format: "%@ clients=%d: %.0f req/s p50 %.1f µs p99 %.1f µs (agent CPU %.0f%%, %.1f µs per request)",
                           t.kind, clients, result.requestsPerSecond, result.p50, result.p99, result.serverCPU, result.cpuPerRequest))
                sleepSeconds(0.15)
            }
        }
        // One /metrics scrape: sequential GETs on one keep-alive connection.
        let connection = try HTTPOverUnix(httpPath)
        let request = Array("GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n".utf8)
        var times: [Double] = []
        let cpu0 = ProcStats.cpuSeconds(pid: agentPID) ?? 0
        var size = 0
        for _ in 0..<options.scrapes {
            let started = monotonicSeconds()
            let answer = try connection.exchange(request)
            times.append(monotonicSeconds() - started)
            guard answer.status == 200 else { throw BenchError("/metrics: HTTP \(answer.status)") }
            size = answer.bytes
        }
        let cpu1 = ProcStats.cpuSeconds(pid: agentPID) ?? 0
        report.metricsScrape = MetricsScrape(count: options.scrapes, medianSeconds: median(times),
                                             p99Seconds: times.sorted()[min(times.count - 1, Int(Double(times.count) * 0.99))],
                                             cpuSecondsPerScrape: (cpu1 - cpu0) / Double(options.scrapes), bytes: size)
        log(String(format: "/metrics: median %.0f µs, agent CPU %.0f µs per scrape, %d bytes",
                   median(times) * 1e6, (cpu1 - cpu0) / Double(options.scrapes) * 1e6, size))
    }

    // MARK: - 2. Start to READY=1 with stored flags

    private func measureReady() throws {
        let receiver = try NotifyReceiver(path: notifyPath)
        // The baseline: `systemd-notify --ready` spawned the same way (same environment and
        // receiver), alternating with the agent's starts.
        let notify = ([String](["/usr/bin/systemd-notify", "/bin/systemd-notify"])).first { access($0, X_OK) == 0 }
        var times: [Double] = []
        var baseline: [Double] = []
        for n in 0..<options.starts {
            if let notify {
                let (out, err) = logPaths("systemd-notify")
                receiver.drain()
                let spawned = monotonicSeconds()
                let pid = try Children.spawn(notify, ["--ready"], environment: ["NOTIFY_SOCKET": receiver.path], stdout: out, stderr: err)
                guard let ready = receiver.wait(for: "READY=1", timeout: 5) else {
                    Children.stop(pid, signal: SIGKILL)
                    throw BenchError("systemd-notify --ready sent no READY=1: \(readText(err) ?? "")")
                }
                baseline.append(ready.at - spawned)
                _ = Children.waitExit(pid, timeout: 5)
            }
            let agent = try startAgent(receiver, name: "agent-ready-\(n)")
            times.append(agent.ready)
            if n == 0 {
                // The flags it was ready with came from the disk.
                let status = try LineClient.call(socketPath, .status)
                report.readyStatus = "flagsCount \(Int(status["flagsCount"]?.numberValue ?? -1)), source \(status["flagsSource"]?.stringValue ?? "?")"
                guard Int(status["flagsCount"]?.numberValue ?? -1) == options.flagCount,
                      status["flagsSource"]?.stringValue == "cache" || status["flagsSource"]?.stringValue == "network" else {
                    throw BenchError("agent started without its stored flags: \(JSONWriter.string(status))")
                }
            }
            Children.stop(agent.pid)
        }
        report.readySeconds = times
        report.readyBaselineSeconds = baseline
        log(String(format: "start to READY=1: median %.1f ms (min %.1f, max %.1f) over %d starts",
                   median(times) * 1000, (times.min() ?? 0) * 1000, (times.max() ?? 0) * 1000, times.count)
            + (baseline.isEmpty ? "" : String(format: "; systemd-notify --ready: median %.1f ms", median(baseline) * 1000)))
    }

    // MARK: - 3. Peak RSS with stored flags and many clients

    private func measureRSS() throws {
        let receiver = try NotifyReceiver(path: notifyPath)
        let agent = try startAgent(receiver, name: "agent-rss")
        defer { Children.stop(agent.pid) }
        _ = try waitForFlags(source: nil)
        sleepSeconds(0.1)  // the status connections are closed
        report.rssIdleKiB = ProcStats.status(pid: agent.pid, field: "VmRSS")

        var fds: [Int32] = []
        defer { fds.forEach { close($0) } }
        for _ in 0..<options.rssClients {
            let fd = try Sockets.connectUnix(socketPath)
            BlockingSocket.setReceiveTimeout(fd, 10)
            fds.append(fd)
        }
        // Each client: 3 rounds of 24 pipelined requests over many flags, all clients at once.
        var answers = 0
        var buffer = [UInt8](repeating: 0, count: 256 * 1024)
        for round in 0..<3 {
            for (index, fd) in fds.enumerated() {
                var lines = ""
                for r in 0..<24 {
                    let id = round * 100 + r
                    let key = String(format: "bench_flag_%04d", (index * 24 + r) % max(1, options.flagCount - 4))
                    switch r % 4 {
                    case 0: lines += #"{"jsonrpc":"2.0","id":\#(id),"method":"isEnabled","params":{"key":"\#(key)","default":false}}"# + "\n"
                    case 1: lines += #"{"jsonrpc":"2.0","id":\#(id),"method":"get","params":{"key":"\#(key)"}}"# + "\n"
                    case 2: lines += #"{"jsonrpc":"2.0","id":\#(id),"method":"property","params":{"key":"\#(key)","property":"color","type":"string","default":"x"}}"# + "\n"
                    default: lines += #"{"jsonrpc":"2.0","id":\#(id),"method":"status"}"# + "\n"
                    }
                }
                try BlockingSocket.sendAll(fd, Array(lines.utf8))
            }
            for fd in fds {
                var lines = 0
                while lines < 24 {
                    let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                    guard n > 0 else { throw BenchError("RSS client: the agent closed the connection or timed out") }
                    lines += buffer[..<n].reduce(0) { $0 + ($1 == 0x0A ? 1 : 0) }
                }
                answers += lines
            }
        }
        report.rssClientsConnected = fds.count
        report.rssAnswers = answers
        report.rssConnectedKiB = ProcStats.status(pid: agent.pid, field: "VmRSS")
        report.rssPeakKiB = ProcStats.status(pid: agent.pid, field: "VmHWM")
        report.pssKiB = ProcStats.smaps(pid: agent.pid, field: "Pss")
        report.privateKiB = (ProcStats.smaps(pid: agent.pid, field: "Private_Dirty") ?? 0)
            + (ProcStats.smaps(pid: agent.pid, field: "Private_Clean") ?? 0)
        report.sharedCleanKiB = ProcStats.smaps(pid: agent.pid, field: "Shared_Clean")
        log("peak RSS \(report.rssPeakKiB ?? -1) KiB with \(fds.count) clients (\(answers) answers); idle before: \(report.rssIdleKiB ?? -1) KiB")
    }

    // MARK: - 4. Idle wake-ups

    private func measureIdle() throws {
        let receiver = try NotifyReceiver(path: notifyPath)
        let agent = try startAgent(receiver, name: "agent-idle")
        defer { Children.stop(agent.pid) }
        _ = try waitForFlags(source: nil)
        sleepSeconds(1.0)  // the start-up requests and the status connections settle
        let before = ProcStats.threads(pid: agent.pid)
        log("idle: watching \(before.count) threads for \(options.idleSeconds) s")
        sleepSeconds(options.idleSeconds)
        let after = ProcStats.threads(pid: agent.pid)
        var rows: [IdleThread] = []
        for thread in after {
            let earlier = before.first { $0.tid == thread.tid }
            rows.append(IdleThread(tid: thread.tid, name: thread.name, isMain: thread.tid == Int(agent.pid),
                                   wakeups: thread.voluntary + thread.nonvoluntary - (earlier.map { $0.voluntary + $0.nonvoluntary } ?? 0),
                                   blockedIn: thread.syscall, isNew: earlier == nil))
        }
        for thread in before where !after.contains(where: { $0.tid == thread.tid }) {
            rows.append(IdleThread(tid: thread.tid, name: thread.name, isMain: false, wakeups: 0, blockedIn: "exited", isNew: false))
        }
        report.idleThreads = rows
        report.idleSecondsMeasured = options.idleSeconds
        log("idle wake-ups: " + rows.map { "\($0.name)[\($0.tid)]=\($0.wakeups) (\($0.blockedIn))" }.joined(separator: ", "))
    }

    // MARK: - 5. The emulator's getFeatureFlags rate

    private func measureEmulator() throws {
        guard let wrk = ([String](["/usr/bin/wrk", "/usr/local/bin/wrk"])).first(where: { access($0, X_OK) == 0 }) else {
            report.emulatorNote = "wrk not installed (apt-get install wrk)"
            log("emulator: wrk not installed; skipped")
            return
        }
        try startEmulator()
        defer {
            Children.stop(emulatorPID)
            emulatorPID = 0
        }
        let lua = directory + "/post.lua"
        // The same requests as scripts/bench-emulator: 1,000 different devices and users.
        try """
            local n = 0
            wrk.method = "POST"
            wrk.headers["Content-Type"] = "application/json; charset=utf-8"
            request = function()
              n = n + 1
              local id = n % 1000
              local body = string.format('{"request":{"application":"ABCDE-12345","hwid":"hw-%d","userId":"user-%d","v":"7.2.10","device_type":1}}', id, id)
              return wrk.format(nil, "/json/1.3/getFeatureFlags", nil, body)
            end

            """.write(toFile: lua, atomically: true, encoding: .utf8)
        let probe = try HTTP.request(port: emulatorPort, method: "POST", path: "/json/1.3/getFeatureFlags",
                                     body: Array(#"{"request":{"application":"ABCDE-12345","hwid":"hw-0","userId":"user-0"}}"#.utf8))
        guard probe.status == 200, probe.body.contains(#""status_code":200"#) else {
            throw BenchError("emulator getFeatureFlags: HTTP \(probe.status) \(probe.body.prefix(200))")
        }
        let (out, err) = logPaths("wrk")
        let threads = max(1, options.clientThreads)
        let pid = try Children.spawn(wrk, ["-t\(threads)", "-c\(options.emulatorConnections)", "-d\(Int(options.emulatorSeconds))s",
                                           "--latency", "-s", lua, "http://127.0.0.1:\(emulatorPort)"],
                                     stdout: out, stderr: err)
        let server0 = ProcStats.cpuSeconds(pid: emulatorPID)
        let wall0 = monotonicSeconds()
        let deadline = monotonicSeconds() + options.emulatorSeconds + 20
        while Children.isAlive(pid) {
            guard monotonicSeconds() < deadline else {
                Children.stop(pid, signal: SIGKILL)
                throw BenchError("wrk did not finish")
            }
            sleepSeconds(0.05)
        }
        let server1 = ProcStats.cpuSeconds(pid: emulatorPID)
        let text = readText(out) ?? ""
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("Requests/sec:") }),
              let rate = Double(line.split(separator: " ").last ?? "") else {
            throw BenchError("wrk output without Requests/sec: \(text) \(readText(err) ?? "")")
        }
        report.emulatorRequestsPerSecond = rate
        report.emulatorCPU = ((server1 ?? 0) - (server0 ?? 0)) / (monotonicSeconds() - wall0) * 100
        if let bad = text.split(separator: "\n").first(where: { $0.contains("Non-2xx") }) {
            report.emulatorNote = String(bad.trimmingCharacters(in: .whitespaces))
        }
        for percentile in ["50%", "99%"] {
            if let row = text.split(separator: "\n").first(where: { $0.trimmingCharacters(in: .whitespaces).hasPrefix(percentile) }) {
                report.emulatorLatency[percentile] = String(row.split(separator: " ").last ?? "")
            }
        }
        log(String(format: "emulator: %.0f getFeatureFlags/s with %d connections", rate, options.emulatorConnections))
    }
}

func median(_ values: [Double]) -> Double {
    guard !values.isEmpty else { return 0 }
    let sorted = values.sorted()
    return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}
