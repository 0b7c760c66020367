import AgentCore
import AgentPosix
import Foundation
import Glibc
import HarnessSupport

/// The C baseline: a line-echo server in C (`Benchmarks/c/echo-server.c`: one thread,
/// level-triggered epoll, nonblocking Unix stream socket, each complete line written back)
/// driven by a load client in C (`Benchmarks/c/load-client.c`), so that neither the baseline
/// nor the client has any Swift in it. Both are compiled by the benchmark with the system
/// `cc`. The four cells of the targets (isEnabled at 1, 32 and 128 clients with one request
/// in flight, and 32 clients × 16 pipelined) run `cRuns` times, the C echo server and the
/// agent alternating cell by cell; the targets take the medians.
struct CBaselineRow: Sendable {
    struct Side: Sendable {
        var requestsPerSecond: Double
        var p50: Double
        var p99: Double
        var cpuPerRequest: Double
    }

    var run: Int
    var clients: Int
    var depth: Int
    var echo: Side
    var agent: Side
}

enum CBaseline {
    static let cells: [(clients: Int, depth: Int)] = [(1, 1), (32, 1), (128, 1), (32, 16)]

    /// Compiles the two C programs into `directory`; their paths.
    static func build(sources: String, into directory: String) throws -> (echo: String, client: String) {
        let echo = directory + "/echo-server-c"
        let client = directory + "/load-client-c"
        for (source, output) in [("echo-server.c", echo), ("load-client.c", client)] {
            let log = directory + "/cc-" + source + ".log"
            let pid = try Children.spawn("/usr/bin/cc", ["-O2", "-D_GNU_SOURCE", "-pthread", "-o", output, sources + "/" + source],
                                         stdout: log, stderr: log)
            guard Children.waitExit(pid, timeout: 60) == 0 else {
                throw BenchError("cc \(source) failed: \(readText(log) ?? "")")
            }
        }
        return (echo, client)
    }

    /// One cell with the C client: its printed figures.
    static func load(client: String, socket: String, clients: Int, depth: Int, seconds: Double, serverPID: pid_t,
                     threads: Int, directory: String) throws -> CBaselineRow.Side {
        let out = directory + "/load-client-c.out"
        let err = directory + "/load-client-c.err"
        let pid = try Children.spawn(client, [socket, "\(clients)", "\(depth)", "\(seconds)", "\(serverPID)", "\(threads)"],
                                     stdout: out, stderr: err)
        guard Children.waitExit(pid, timeout: seconds + 30) == 0, let text = readText(out) else {
            throw BenchError("C load client failed: \(readText(err) ?? "")")
        }
        // "rps N p50 N p99 N cpu_us N"
        let words = text.split(whereSeparator: { $0 == " " || $0 == "\n" })
        func value(_ name: String) -> Double? {
            guard let k = words.firstIndex(where: { $0 == name }), k + 1 < words.count else { return nil }
            return Double(words[k + 1])
        }
        guard let rps = value("rps"), let p50 = value("p50"), let p99 = value("p99"), let cpu = value("cpu_us") else {
            throw BenchError("C load client printed \(text)")
        }
        return .init(requestsPerSecond: rps, p50: p50, p99: p99, cpuPerRequest: cpu)
    }
}

extension Bench {
    /// The C echo server and the agent under the C client, cells alternating (see `CBaseline`).
    func measureCBaseline(agentPID: pid_t) throws {
        let tools: (echo: String, client: String)
        do {
            tools = try CBaseline.build(sources: options.cSources, into: directory)
        } catch {
            report.cBaselineNote = "not run: \(error)"
            log("C baseline \(report.cBaselineNote)")
            return
        }
        let echoSocket = directory + "/echo-c.sock"
        let (out, err) = (directory + "/echo-c.out", directory + "/echo-c.err")
        let echoPID = try Children.spawn(tools.echo, [echoSocket], stdout: out, stderr: err)
        defer { Children.stop(echoPID) }
        try Sockets.waitForListener(echoSocket, timeout: 5) { Children.isAlive(echoPID) }
        for run in 1...max(1, options.cRuns) {
            for cell in CBaseline.cells {
                func side(_ socket: String, _ pid: pid_t) throws -> CBaselineRow.Side {
                    defer { sleepSeconds(0.15) }  // the server closes the connections
                    return try CBaseline.load(client: tools.client, socket: socket, clients: cell.clients, depth: cell.depth,
                                              seconds: options.duration, serverPID: pid, threads: options.clientThreads,
                                              directory: directory)
                }
                let echo = try side(echoSocket, echoPID)
                let agent = try side(socketPath, agentPID)
                report.cBaseline.append(CBaselineRow(run: run, clients: cell.clients, depth: cell.depth, echo: echo, agent: agent))
                log(String(format: "C client, run %d, %d × %d: C echo %.0f req/s, agent %.0f req/s (%.2f); CPU µs per request %.3f / %.3f",
                           run, cell.clients, cell.depth, echo.requestsPerSecond, agent.requestsPerSecond,
                           agent.requestsPerSecond / max(echo.requestsPerSecond, 1), echo.cpuPerRequest, agent.cpuPerRequest))
            }
        }
    }
}

extension Report {
    /// The rows of one cell, one per run.
    func cRows(clients: Int, depth: Int) -> [CBaselineRow] {
        cBaseline.filter { $0.clients == clients && $0.depth == depth }
    }

    /// Median over the runs of agent req/s ÷ C echo req/s.
    func cRatio(clients: Int, depth: Int) -> Double? {
        let rows = cRows(clients: clients, depth: depth)
        guard !rows.isEmpty else { return nil }
        return median(rows.map { $0.agent.requestsPerSecond / max($0.echo.requestsPerSecond, 1) })
    }

    var cBaselineTargets: [Target] {
        var list: [Target] = []
        for cell in CBaseline.cells {
            let name = cell.depth == 1
                ? "isEnabled, \(cell.clients) client\(cell.clients == 1 ? "" : "s"), vs C echo (C client, median of runs)"
                : "isEnabled, \(cell.clients) clients × \(cell.depth) pipelined, vs C echo (C client, median of runs)"
            let r = cRatio(clients: cell.clients, depth: cell.depth)
            list.append(Target(name: name, goal: "≥ 85 %", measured: r.map { String(format: "%.0f %%", $0 * 100) } ?? "not run",
                               pass: r.map { $0 >= 0.85 }))
        }
        let piped = cRows(clients: 32, depth: 16)
        if !piped.isEmpty {
            let agent = median(piped.map(\.agent.cpuPerRequest)), echo = median(piped.map(\.echo.cpuPerRequest))
            let factor = agent / max(echo, 1e-9)
            list.append(Target(name: "server CPU per isEnabled, 32 × 16 pipelined, vs C echo (medians)", goal: "≤ 2×",
                               measured: String(format: "%.2f× (%.2f vs %.2f µs)", factor, agent, echo), pass: factor <= 2))
        }
        return list
    }

    var cBaselineMarkdown: String {
        guard !cBaseline.isEmpty || !cBaselineNote.isEmpty else { return "" }
        var md = "\n## Socket against a C echo server, C client\n\n"
        guard !cBaseline.isEmpty else { return md + "The C baseline was \(cBaselineNote).\n" }
        md += "`isEnabled` for `new_checkout`, the same request bytes to both servers, driven by `Benchmarks/c/load-client.c` "
        md += "(\(options?.clientThreads ?? 0) threads; blocking `send`/`recv` for a thread with one connection, `epoll` for several; "
        md += "each answer replaced at once). The baseline is `Benchmarks/c/echo-server.c`, a line-echo server in C on the same kind of "
        md += "Unix stream socket (one thread, level-triggered epoll). Both compiled with the system `cc -O2` by the benchmark. "
        md += String(format: "0.5 s warm-up + %.1f s measured per cell, C echo and agent alternating cell by cell; ", options?.duration ?? 0)
        md += "CPU µs per request is the server's CPU time over its answers.\n\n"
        md += "| clients × in flight | run | C echo req/s | agent req/s | ratio | C echo p50 / p99 µs | agent p50 / p99 µs | CPU µs per request C echo / agent |\n"
        md += "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        for cell in CBaseline.cells {
            for r in cRows(clients: cell.clients, depth: cell.depth) {
                md += String(format: "| %d × %d | %d | %.0f | %.0f | %.0f %% | %.0f / %.0f | %.0f / %.0f | %.3f / %.3f |\n",
                             r.clients, r.depth, r.run, r.echo.requestsPerSecond, r.agent.requestsPerSecond,
                             r.agent.requestsPerSecond / max(r.echo.requestsPerSecond, 1) * 100, r.echo.p50, r.echo.p99,
                             r.agent.p50, r.agent.p99, r.echo.cpuPerRequest, r.agent.cpuPerRequest)
            }
            if let ratio = cRatio(clients: cell.clients, depth: cell.depth) {
                md += String(format: "| %d × %d | median | | | %.0f %% | | | |\n", cell.clients, cell.depth, ratio * 100)
            }
        }
        return md
    }

    var cBaselineJSON: JSONValue {
        func side(_ s: CBaselineRow.Side) -> JSONValue {
            ["requestsPerSecond": .number(s.requestsPerSecond.rounded()), "p50Microseconds": .number(s.p50),
             "p99Microseconds": .number(s.p99), "serverCPUMicrosecondsPerRequest": .number((s.cpuPerRequest * 1000).rounded() / 1000)]
        }
        return ["note": .string(cBaselineNote),
                "rows": .array(cBaseline.map { r in
                    ["run": .number(Double(r.run)), "clients": .number(Double(r.clients)), "inFlight": .number(Double(r.depth)),
                     "cEcho": side(r.echo), "agent": side(r.agent)]
                }),
                "medianRatios": .array(CBaseline.cells.map { cell in
                    ["clients": .number(Double(cell.clients)), "inFlight": .number(Double(cell.depth)),
                     "ratio": cRatio(clients: cell.clients, depth: cell.depth).map { .number(($0 * 1000).rounded() / 1000) } ?? .null]
                })]
    }
}
