import AgentCore
import AgentPosix
import AgentWire
import Dispatch
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
import ToolSupport
#endif

/// The steps of one run that `soak()` puts in order: the emulator, the soak's own flag, the
/// drivers, the checker loop, and the verdict.
extension SoakRunner {
    /// Starts the emulator with its lab (`--lab DIR`, whose devices run `agentd`) and waits (up to
    /// 10 s) for the port it prints; its admin and lab API, with the lab's token (`DIR/token`).
    func startEmulator(_ binary: String, apps: String, agentd: String, lab: String, environment: [String: String],
                       logPath: String) throws(SoakProcessError) -> LoopbackHTTP {
        let child = try EmulatorChild(binary: binary, arguments: ["--listen", "127.0.0.1:0", "--apps", apps, "--record-limit", "200000",
                                                                  "--lab", lab, "--agentd", agentd],
                                      environment: environment, logPath: logPath)
        emulator.withLock { $0 = child }
        // An emulator that exits at once is seen at once, with its exit.
        guard let port = ChildProcess.announcedPort(in: logPath, timeout: 10, alive: { child.exit() == nil }) else {
            throw SoakProcessError(name: "emulator", binary: binary, .noPort(within: 10, exit: child.exit(), logTail: tail(logPath, lines: 5)))
        }
        // The lab is always locked: its token is in the file it names ("lab token: FILE", before "listening on").
        let named = tail(logPath, lines: 50).last { $0.hasPrefix("lab token: ") }.map { String($0.dropFirst("lab token: ".count)) }
        do throws(AdminTokenFileError) {
            return LoopbackHTTP(port: port, bearerToken: try LoopbackHTTP.bearerToken(file: named ?? lab + "/token"))
        } catch {
            throw SoakProcessError(name: "emulator", binary: binary, .noLabToken(error.description))
        }
    }

    /// Adds the flag whose property names the user it was served for, and records the app's
    /// flags as the run's first flag states.
    func seedApp(_ http: LoopbackHTTP) throws(EmulatorCallError) -> [FlagChange] {
        let userFlag: JSONValue = .object([
            "key": .string(RunContext.userFlag),
            "properties": ["user": ["type": "string", "default": ""]],
            "rules": .array(RunContext.userPool.map { u in .object(["id": .string("r_u_\(u)"), "enabled": true,
                                                                     "when": ["userIds": .array([.string(u)])],
                                                                     "properties": ["user": .string(u)]]) }),
        ])
        _ = try http.json("PUT", "/admin/apps/\(RunContext.applicationCode)/flags/\(RunContext.userFlag)", json: userFlag)
        let app = try http.json("GET", "/admin/apps/\(RunContext.applicationCode)")
        var initial: [FlagChange] = []
        for f in app["flags"]?.arrayValue ?? [] {
            guard let key = f["key"]?.stringValue else { continue }
            initial.append(FlagChange(key: key, start: 0, end: 0, killed: f["killed"]?.boolValue ?? false,
                                      archived: f["archived"]?.boolValue ?? false, description: "initial"))
        }
        recorder.state.withLock { $0.changes = initial }
        return initial
    }

    /// One thread per agent driver, the chaos thread and (with the real timings) the clock
    /// driver; the group they leave when done.
    func startDrivers(_ ctx: RunContext, http: LoopbackHTTP, initial: [FlagChange]) -> DispatchGroup {
        let group = DispatchGroup()
        for i in 0..<options.agents {
            let d = AgentDriver(index: i, ctx: ctx)
            group.enter()
            ctx.firstStarts.enter()
            let t = Thread { d.run(); group.leave() }
            t.stackSize = 1 << 20
            t.start()
            if options.agents > 10 { usleep(20_000) }
        }
        let chaos = Chaos(http: http, ctx: ctx, initial: initial)
        if options.chaosEvery > 0 {
            group.enter()
            Thread { chaos.run(); group.leave() }.start()
        }
        if options.realTimings {
            let driver = ClockDriver(ctx: ctx, timeline: ctx.timeline, gate: ctx.gate)
            clockDriver = driver
            group.enter()
            Thread { driver.run(); group.leave() }.start()
        }
        timeline = ctx.timeline
        return group
    }

    /// The checker loop: crashes, the request log, the invariants and the watchdogs, once a
    /// second, and the progress line; until the deadline, a stop, or a violation.
    func checkUntilTheEnd(_ ctx: RunContext, http: LoopbackHTTP, deadline: Time) {
        var lastProgress = now(), lastFetch = 0.0, lastSample = 0.0
        while true {
            let t = now()
            if t - lastSample >= 1 { sampleResources(); lastSample = t }
            if t - lastFetch >= 1 {
                lastFetch = t
                checkCrashes(ctx.lab, at: t)
                do { try fetchLog(http) } catch {
                    if !recorder.stopping { recorder.violation(Violation("emulator", agent: nil, time: t, "cannot read the request log: \(error)")) }
                }
                evaluate(settled: min(horizon, now() - 20))
                checkWatchdogs(ctx.notify)
            }
            if !options.quiet, t - lastProgress >= options.progressEvery {
                lastProgress = t
                say(progressLine())
            }
            let failed = recorder.state.withLock { !$0.violations.isEmpty }
            if (failed && !options.keepGoing) || recorder.stopping || t >= deadline { break }
            usleep(100_000)
        }
    }

    /// The verdict: logs kept on failure, the report written, the last lines printed; the exit status.
    func finish(summaryLine: String, root: String, emulatorLog: String) throws(SoakFileError) -> Int32 {
        let result = recorder.state.withLock { $0 }
        let wasInterrupted = interrupted.withLock { $0 }
        let covered = coverage(result)
        // --require-coverage: a run that checked an invariant 0 times proves nothing about it.
        let uncovered = options.coverageRequired && !covered.notExercised.isEmpty
        let outcome = !result.violations.isEmpty ? "fail" : wasInterrupted ? "interrupted" : uncovered ? "uncovered" : "pass"
        if !result.violations.isEmpty {
            // Keep the logs that show what happened.
            let logs = options.reportDirectory + "/logs"
            try? FileManager.default.createDirectory(atPath: logs, withIntermediateDirectories: true)
            for i in 0..<options.agents {
                try? FileManager.default.copyItem(atPath: root + "/lab/devices/agent-\(i)/agent.log", toPath: logs + "/agent-\(i).log")
            }
            try? FileManager.default.copyItem(atPath: emulatorLog, toPath: logs + "/emulator.log")
        }
        let written = try writeReport(result, outcome: outcome, coverage: covered)
        say(summaryLine)
        for line in covered.lines { say(line) }
        if let first = result.violations.first {
            say("\n" + first.description)
            if result.violations.count > 1 { say("(\(result.violations.count - 1) more in \(options.reportDirectory)/summary.json)") }
        }
        for note in result.planNotes.prefix(10) { say("looked, checked nothing: " + note) }
        if result.planNotes.count > 10 { say("(\(result.planNotes.count - 10) more such notes in summary.json's plan.notes)") }
        if outcome == "uncovered" {
            say("pushwoosh-soak: --require-coverage: never checked: " + covered.notExercised.joined(separator: ", ")
                + " (exit 3; --no-require-coverage accepts such a run)")
        }
        say("pushwoosh-soak: \(outcome.uppercased()); wrote " + written.joined(separator: ", ")
            + (result.violations.isEmpty ? "" : " and the logs in \(options.reportDirectory)/logs"))
        switch outcome {
        case "fail": return 1
        case "interrupted": return 130
        case "uncovered": return 3
        default: return 0
        }
    }

    /// --require-coverage and a run that cannot cover every invariant: nothing is started; the
    /// refusal names each invariant and why (and is summary.json, result `refused`). Exit 3.
    func refuse(_ gaps: [CoveragePlan.Gap]) -> Int32 {
        say("pushwoosh-soak: --require-coverage: a run of \(options.span) with \(options.agents) agent(s) cannot check: "
            + gaps.map(\.description).joined(separator: "; "))
        say("pushwoosh-soak: REFUSED (exit 3): run at least \(CoveragePlan.minimumDeviceDays.formatted) device-day with at least "
            + "\(CoveragePlan.minimumAgents) agents, or pass --no-require-coverage")
        let summary: JSONValue = [
            "result": "refused", "seed": .number(Double(options.seed)), "agents": .number(Double(options.agents)),
            "deviceDays": options.realTimings ? .number(options.deviceDays) : .null,
            "notCoverable": .array(gaps.map { ["invariant": .string($0.invariant), "why": .string($0.why)] }),
        ]
        var written: [String] = []
        let summaryFile = options.reportDirectory + "/summary.json"
        do {
            try writeFileReplacing(summaryFile, prettyJSON(summary) + "\n", for: "summary.json")
            written.append(summaryFile)
        } catch { say("pushwoosh-soak: \(error)") }
        if let file = options.junitFile {
            let xml = JUnitReport.refusal(gaps.map { ($0.invariant, $0.why) }, exitCode: 3,
                                          summary: "--require-coverage: a run of \(options.span) with \(options.agents) agent(s) cannot check: "
                                            + gaps.map(\.description).joined(separator: "; "),
                                          timestamp: iso8601(started), properties: [("seed", "\(options.seed)")])
            do {
                try writeFileReplacing(file, xml, for: "the JUnit report")
                written.append(file)
            } catch { say("pushwoosh-soak: \(error)") }
        }
        if !written.isEmpty { say("pushwoosh-soak: wrote " + written.joined(separator: ", ")) }
        return 3
    }

    /// The report's directory and the JUnit file's, made (0755) if missing, before anything
    /// starts; one that group or others can write is refused (exit 2), naming it.
    func prepareOutputs() throws(SoakError) {
        var directories = [(options.reportDirectory, "the report")]
        if let file = options.junitFile { directories.append((parentDirectory(file), "the JUnit report")) }
        for (directory, what) in directories {
            do { try makeDirectories(directory, for: what) } catch { throw .file(error) }
            do { try checkOutputDirectory(directory, for: what) } catch { throw .unsafeDirectory(error) }
        }
    }
}
