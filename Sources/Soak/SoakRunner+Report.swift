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
            lane.title = "agent \(i) · " + String(t.hwid.prefix(4))
            lane.id = "lane-\(i)"
            lane.expiries = t.heard.expiries
            lane.discards = t.heard.discards
            lane.refreshes = (flagCalls[t.hwid] ?? []).map { RefreshMark(time: $0.time, succeeded: $0.succeeded, status: $0.status, fault: $0.fault) }
            lane.restarts = lane.restarts.map { (dev($0.0), $0.1) }
            lane.readies = lane.readies.map(dev)
            lane.background = lane.background.map { (dev($0.0), $0.1.map(dev)) }
            lane.tracked = lane.tracked.map { (dev($0.0), $0.1) }
            lane.ages = lane.ages.map { (dev($0.0), $0.1) }
            lane.violations = lane.violations.map { v in var v = v; v.time = violationTime(v.time); return v }
            lane.crashes = lane.crashes.map(violationTime)
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
                + (options.realTimings ? "\(options.span) (" + String(format: "%.3f", (dev(end) - dev(started)) / 86_400) + " covered) in " : "")
                + "\(Int(elapsed)) s · seed \(options.seed) · "
                + "lifetime \(Int(options.timings.lifetime)) s, refresh \(Int(options.timings.refresh)) s, session gap \(Int(options.timings.sessionGap)) s",
            start: dev(started), end: dev(end), lifetime: options.timings.lifetime, refreshInterval: options.timings.refresh,
            trackedFlag: RunContext.trackedFlag, lanes: lanes, clock: options.realTimings ? "device time" : "real time",
            faults: shared, flagChanges: changes)
    }

    /// Every armed fault, in the run's clock.
    func faultRecords(_ r: Recorder.State, end: Time) -> [FaultRecord] {
        let dev = timeline.device
        let armed = r.faults.map { f in var f = f; f.start = dev(f.start); f.end = dev(f.end); return f }
        let faulted = (Array(flagCalls.values.joined()) + Array(impressionCalls.values.joined())).filter { $0.fault != nil }
        return FaultRecord.all(armed, faulted: faulted, hwids: r.tracks.map(\.hwid), end: dev(end))
    }

    /// report.html's content: the header, coverage, counts, the lanes and the violations in device time.
    func reportPage(_ r: Recorder.State, outcome: String, coverage: SoakCoverage, counts: [SoakCounts], timeline data: TimelineData,
                    end: Time) -> ReportPage {
        let dev = timeline.device
        let hwids = r.tracks.map(\.hwid)
        let violations = r.violations.map { v in
            // Checkers stamp device time, drivers real time (as in the timeline).
            let t = v.time <= end ? dev(v.time) : v.time
            let calls = v.agent.flatMap { $0 < hwids.count ? flagCalls[hwids[$0]] : nil } ?? []
            return ReportViolation(violation: v, deviceTime: t, requestLog: v.agent == nil ? [] : ReportViolation.around(t, calls: calls))
        }
        let t = options.timings
        return ReportPage(seed: options.seed, agents: options.agents, span: options.span,
                          deviceDaysCovered: clockDriver.map { $0.deviceSecondsCovered / 86_400 }, realSeconds: end - started,
                          result: outcome,
                          settings: "lifetime \(TimeSpan.format(t.lifetime)), refresh \(TimeSpan.format(t.refresh)), "
                            + "session gap \(TimeSpan.format(t.sessionGap)), throttle \(TimeSpan.format(t.throttle))"
                            + (options.realTimings ? " (the SDK's own), speed \(options.speed.formatted)" : ""),
                          coverage: coverage, plan: plan?.assignments ?? [], counts: counts, timeline: data, violations: violations,
                          notes: r.planNotes)
    }

    /// Each device's counts, from what its subscriptions heard, its requests and its restarts.
    func deviceCounts(_ r: Recorder.State) -> [SoakCounts] {
        r.tracks.map { t in SoakCounts(heard: t.heard, calls: flagCalls[t.hwid] ?? [], restarts: t.lane.restarts.count, userSwitches: t.users.count) }
    }

    /// summary.json.
    func summaryJSON(_ r: Recorder.State, outcome: String, coverage: SoakCoverage, counts: [SoakCounts], perAgent: [JSONValue],
                     end: Time) -> JSONValue {
        let elapsed = end - started
        func n(_ x: Double) -> JSONValue { .number((x * 1000).rounded() / 1000) }
        func n(_ x: Int) -> JSONValue { .number(Double(x)) }
        let faults = faultRecords(r, end: end)
        let agentCPU = resources.cpuSeconds(prefix: "agent"), emulatorCPU = resources.cpuSeconds(prefix: "emulator")
        let runnerCPU = ProcStats.selfCPUSeconds()
        let cores = Double(ProcessInfo.processInfo.activeProcessorCount)
        return [
            "result": .string(outcome),
            "seed": .number(Double(options.seed)),
            "startedAt": .string(iso8601(started)), "endedAt": .string(iso8601(end)),
            // The run's own terms: device days with the real timings, else the duration.
            "durationSeconds": options.realTimings ? .null : n(options.duration), "elapsedSeconds": n(elapsed),
            "deviceDays": options.realTimings ? n(options.deviceDays) : .null,
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
                "total": SoakCounts.total(counts).json,
            ],
            // One vocabulary: the coverage's names and counts.
            "checks": coverage.json,
            "resources": [
                "cores": n(cores),
                "cpuSeconds": ["agents": n(agentCPU), "emulator": n(emulatorCPU), "runner": n(runnerCPU)],
                "cpuPercentOfOneCore": ["agentsTotal": n(agentCPU / elapsed * 100), "perAgent": n(agentCPU / elapsed * 100 / Double(options.agents)),
                                        "emulator": n(emulatorCPU / elapsed * 100), "runner": n(runnerCPU / elapsed * 100)],
                "hostCPUPercent": n((agentCPU + emulatorCPU + runnerCPU) / elapsed / cores * 100),
                "peakRSSKiB": ["agent": n(resources.peakRSS(prefix: "agent")), "emulator": n(resources.peakRSS(prefix: "emulator"))],
            ],
            "coverage": coverage.json,
            // Every fault of the run, in the run's clock (device time with --real-timings).
            "faults": .array(faults.map(\.json)),
            "longestFaultOnEveryDeviceHours": n(FaultRecord.longestGlobal(faults) / 3600),
            "notExercised": .array(coverage.notExercised.map(JSONValue.string)),
            "violations": .array(r.violations.map(\.json)),
            "perAgent": .array(perAgent),
            "realTimings": clockDriver.map { d in
                ["deviceDays": n(options.deviceDays), "deviceDaysCovered": n(d.deviceSecondsCovered / 86_400),
                 "clockSteps": n(d.steps), "speed": n(options.speed)]
            } ?? .null,
            "plan": plan.map { p in
                ["duties": .array(p.assignments.map { ["device": n($0.device), "duty": .string("\($0.duty)"), "invariant": .string($0.duty.invariant),
                                                       "atDeviceSeconds": n($0.at)] }),
                 "notes": .array(r.planNotes.map(JSONValue.string))]
            } ?? .null,
        ]
    }

    /// Writes summary.json, timeline.svg, report.html and the JUnit file; the paths written.
    func writeReport(_ r: Recorder.State, outcome: String, coverage: SoakCoverage) throws(SoakFileError) -> [String] {
        let end = now()
        let elapsed = end - started
        let dir = options.reportDirectory
        try makeDirectories(dir, for: "the report")
        func n(_ x: Double) -> JSONValue { .number((x * 1000).rounded() / 1000) }
        func n(_ x: Int) -> JSONValue { .number(Double(x)) }
        var perAgent: [JSONValue] = []
        var junitAgents: [JUnitReport.Agent] = []
        let counts = deviceCounts(r)
        for (i, t) in r.tracks.enumerated() {
            let calls = flagCalls[t.hwid] ?? []
            let ok = calls.filter(\.succeeded).count
            perAgent.append([
                "counts": counts[i].json,
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
        let summary = summaryJSON(r, outcome: outcome, coverage: coverage, counts: counts, perAgent: perAgent, end: end)
        let data = timelineData(r, outcome: outcome, end: end)
        let svg = TimelineSVG.render(data)
        let html = ReportHTML.render(reportPage(r, outcome: outcome, coverage: coverage, counts: counts, timeline: data, end: end))
        try writeFileReplacing(dir + "/summary.json", prettyJSON(summary) + "\n", for: "summary.json")
        try writeFileReplacing(dir + "/timeline.svg", svg, for: "the timeline")
        try writeFileReplacing(dir + "/report.html", html, for: "report.html")
        var written = [dir + "/report.html", dir + "/summary.json", dir + "/timeline.svg"]
        if let file = options.junitFile {
            let xml = JUnitReport.xml(coverage: coverage, violations: r.violations, agents: junitAgents, seconds: elapsed,
                                      timestamp: iso8601(started), properties: [("seed", "\(options.seed)"), ("result", outcome),
                                                                               ("realTimings", "\(options.realTimings)")],
                                      coverageRequired: options.coverageRequired)
            try writeFileReplacing(file, xml, for: "the JUnit report")
            written.append(file + " (JUnit)")
        }
        return written
    }
}
