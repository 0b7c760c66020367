import AgentCore
import AgentPosix
import Foundation
#if canImport(Glibc)
import Glibc
import HarnessSupport
#endif

extension SoakRunner {
    /// How many times the run checked each invariant.
    func coverage(_ r: Recorder.State) -> SoakCoverage {
        var stops = 0, starts = 0
        for actions in r.actions {
            for a in actions {
                if case .stopped = a.kind { stops += 1 }
                if case .started = a.kind { starts += 1 }
            }
        }
        return SoakCoverage(checks: [
            "lifetime": lifetime.checks, "expiry": expiry.checks, "status": status.checks, "user": provenance.checks,
            "userSwitch": userSwitch.checks, "killed": provenance.killedChecks, "throttle": throttle.checks, "cache": cache.checks,
            "cadence": schedule.cadenceChecks, "storm": schedule.stormChecks, "retryAfter": schedule.retryAfterChecks,
            "impressions": impressions.checks, "outage": outages.checks,
            "ready": starts + r.violations.filter { $0.invariant == "ready" }.count, "stop": stops,
            "restart": r.restartsBySignal.values.reduce(0, +), "watchdog": watchdogChecks,
            // Every process the runner started (each agent process, and the emulator) was watched for an exit of its own.
            "crash": r.tracks.map(\.pids.count).reduce(0, +) + 1,
        ])
    }

    /// The timeline in the run's clock: device time with --real-timings (the request log's
    /// times already are; what the runner saw is converted), real time otherwise.
    func timelineData(_ r: Recorder.State, outcome: String, end: Time) -> TimelineData {
        let dev = timeline.device
        // Checkers stamp violations in device time, drivers in real time: a time past the
        // run's real end can only be a device time already.
        let violationTime: (Time) -> Time = { $0 <= end ? dev($0) : $0 }
        var lanes: [TimelineLane] = []
        for (i, t) in r.tracks.enumerated() {
            var lane = t.lane
            lane.title = "agent \(i) " + String(t.hwid.prefix(8))
            lane.refreshes = (flagCalls[t.hwid] ?? []).map { RefreshMark(time: $0.time, succeeded: $0.succeeded, status: $0.status, fault: $0.fault) }
            lane.restarts = lane.restarts.map { (dev($0.0), $0.1) }
            lane.readies = lane.readies.map(dev)
            lane.background = lane.background.map { (dev($0.0), $0.1.map(dev)) }
            lane.tracked = lane.tracked.map { (dev($0.0), $0.1) }
            lane.ages = lane.ages.map { (dev($0.0), $0.1) }
            lane.violations = lane.violations.map(violationTime)
            lane.users = t.users.map { (dev($0.0), $0.1) }
            lanes.append(lane)
        }
        let armed = r.faults.map { f in var f = f; f.start = dev(f.start); f.end = dev(f.end); return f }
        let faulted = (Array(flagCalls.values.joined()) + Array(impressionCalls.values.joined())).filter { $0.fault != nil }
        var shared: [TimelineSpan] = []
        for (span, agent) in TimelineSpan.faults(armed, faulted: faulted, hwids: r.tracks.map(\.hwid), end: dev(end)) {
            if let agent, agent < lanes.count { lanes[agent].faults.append(span) } else { shared.append(span) }
        }
        let changes = r.changes.filter { $0.start > 0 }.map { (dev($0.start), "\($0.description) \($0.key)") }
        let elapsed = end - started
        return TimelineData(
            title: "pushwoosh-soak \(outcome.uppercased()) · \(options.agents) agent(s) · "
                + (options.realTimings ? String(format: "%.2f device days in ", (dev(end) - dev(started)) / 86_400) : "")
                + "\(Int(elapsed)) s · seed \(options.seed) · "
                + "lifetime \(Int(options.timings.lifetime)) s, refresh \(Int(options.timings.refresh)) s, session gap \(Int(options.timings.sessionGap)) s",
            start: dev(started), end: dev(end), lifetime: options.timings.lifetime, refreshInterval: options.timings.refresh,
            trackedFlag: RunContext.trackedFlag, lanes: lanes, clock: options.realTimings ? "device time" : "real time",
            faults: shared, flagChanges: changes)
    }

    func writeReport(_ r: Recorder.State, outcome: String, coverage: SoakCoverage) throws(HTTPError) {
        let end = now()
        let elapsed = end - started
        let dir = options.reportDirectory
        do {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        } catch {
            throw HTTPError("cannot create \(dir): \(error)")
        }
        func n(_ x: Double) -> JSONValue { .number((x * 1000).rounded() / 1000) }
        func n(_ x: Int) -> JSONValue { .number(Double(x)) }
        var perAgent: [JSONValue] = []
        var junitAgents: [JUnitReport.Agent] = []
        for (i, t) in r.tracks.enumerated() {
            let calls = flagCalls[t.hwid] ?? []
            let ok = calls.filter(\.succeeded).count
            perAgent.append([
                "agent": n(i), "hwid": .string(t.hwid), "pids": .array(t.pids.map { n(Int($0)) }),
                "restarts": n(t.lane.restarts.count), "refreshesOk": n(ok), "refreshesFailed": n(calls.count - ok),
                "impressions": n((impressionCalls[t.hwid] ?? []).filter(\.succeeded).count),
                "observations": n(t.observations), "maxAgeSeconds": n(t.maxAge), "userChanges": n(t.users.count),
                "actions": .object(t.actions.mapValues { n($0) }), "violations": n(t.lane.violations.count),
            ])
            junitAgents.append(JUnitReport.Agent(
                name: "agent \(i) (\(t.hwid.isEmpty ? "never started" : t.hwid))",
                details: "pids \(t.pids.map(String.init).joined(separator: ", ")); \(ok) refreshes ok, \(calls.count - ok) failed; "
                    + "\(t.lane.restarts.count) restarts; \(t.users.count) user switches; \(t.observations) observations"))
        }
        let agentCPU = processes.cpuSeconds(prefix: "agent"), emulatorCPU = processes.cpuSeconds(prefix: "emulator")
        let runnerCPU = ChildProcesses.selfCPU()
        let cores = Double(ProcessInfo.processInfo.activeProcessorCount)
        let summary: JSONValue = [
            "result": .string(outcome),
            "seed": .number(Double(options.seed)),
            "startedAt": .string(iso8601(started)), "endedAt": .string(iso8601(end)),
            "durationSeconds": n(options.duration), "elapsedSeconds": n(elapsed),
            "agents": n(options.agents),
            "timings": ["lifetimeSeconds": n(options.timings.lifetime), "sessionGapSeconds": n(options.timings.sessionGap),
                        "refreshIntervalSeconds": n(options.timings.refresh), "throttleWindowSeconds": n(options.timings.throttle),
                        "retryFloorSeconds": n(options.timings.retryFloor)],
            "settings": ["paceSeconds": n(options.pace), "restartEverySeconds": n(options.restartEvery),
                         "chaosEverySeconds": n(options.chaosEvery), "faults": .bool(options.faults),
                         "slackSeconds": n(options.slack), "watchdogSeconds": n(options.watchdog)],
            "counts": [
                "requestsByMethod": .object(methodCounts.mapValues { n($0) }),
                "refreshesOk": n(flagsOK), "refreshesFailed": n(flagsFailed),
                "faultsArmed": n(r.faults.count), "faultsByKind": .object(r.faultCounts.mapValues { n($0) }),
                "faultedRequests": n(faultedCalls),
                "flagChanges": .object(r.flagChangeCounts.mapValues { n($0) }),
                "restarts": ["SIGTERM": n(r.restartsBySignal[SIGTERM] ?? 0), "SIGKILL": n(r.restartsBySignal[SIGKILL] ?? 0)],
                "observations": n(r.tracks.map(\.observations).reduce(0, +)),
                "primerAvailable": r.primerAvailable.map(JSONValue.bool) ?? .null,
            ],
            "checks": [
                "lifetime": n(lifetime.checks), "status": n(status.checks), "provenance": n(provenance.checks),
                "killedArchivedLive": n(provenance.killedChecks), "cadence": n(schedule.cadenceChecks),
                "storm": n(schedule.stormChecks), "retryAfter": n(schedule.retryAfterChecks),
                "impressions": n(impressions.checks), "watchdog": n(watchdogChecks), "outage": n(outages.checks),
                "restartsWithReady": n(r.tracks.map(\.lane.readies.count).reduce(0, +)),
            ],
            "resources": [
                "cores": n(cores),
                "cpuSeconds": ["agents": n(agentCPU), "emulator": n(emulatorCPU), "runner": n(runnerCPU)],
                "cpuPercentOfOneCore": ["agentsTotal": n(agentCPU / elapsed * 100), "perAgent": n(agentCPU / elapsed * 100 / Double(options.agents)),
                                        "emulator": n(emulatorCPU / elapsed * 100), "runner": n(runnerCPU / elapsed * 100)],
                "hostCPUPercent": n((agentCPU + emulatorCPU + runnerCPU) / elapsed / cores * 100),
                "peakRSSKiB": ["agent": n(processes.peakRSS(prefix: "agent")), "emulator": n(processes.peakRSS(prefix: "emulator"))],
            ],
            "coverage": coverage.json,
            "notExercised": .array(coverage.notExercised.map(JSONValue.string)),
            "violations": .array(r.violations.map(\.json)),
            "perAgent": .array(perAgent),
            "realTimings": clockDriver.map { d in
                ["deviceDays": n(d.deviceSecondsCovered / 86_400), "clockSteps": n(d.steps), "speed": n(options.speed)]
            } ?? .null,
        ]
        let svg = TimelineSVG.render(timelineData(r, outcome: outcome, end: end))
        do {
            try (prettyJSON(summary) + "\n").write(toFile: dir + "/summary.json", atomically: true, encoding: .utf8)
            try svg.write(toFile: dir + "/timeline.svg", atomically: true, encoding: .utf8)
        } catch {
            throw HTTPError("cannot write the report to \(dir): \(error)")
        }
        if let file = options.junitFile {
            let xml = JUnitReport.xml(coverage: coverage, violations: r.violations, agents: junitAgents, seconds: elapsed,
                                      timestamp: iso8601(started), properties: [("seed", "\(options.seed)"), ("result", outcome),
                                                                               ("realTimings", "\(options.realTimings)")])
            do {
                let parent = (file as NSString).deletingLastPathComponent
                if !parent.isEmpty { try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true) }
                try xml.write(toFile: file, atomically: true, encoding: .utf8)
            } catch {
                throw HTTPError("cannot write the JUnit report to \(file): \(error)")
            }
        }
    }
}
