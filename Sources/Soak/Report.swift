import AgentCore
import AgentWire
import Foundation
#if canImport(Glibc)
import Glibc
import HarnessSupport
import LabClock
#endif

// MARK: - The timeline (hand-written SVG)

/// What the timeline shows for one agent.
public struct TimelineLane: Sendable {
    public var title: String
    /// getFeatureFlags: time, succeeded, fault kind.
    public var refreshes: [(Time, Bool, String?)] = []
    /// Restarts: time and signal (SIGTERM / SIGKILL).
    public var restarts: [(Time, Int32)] = []
    public var readies: [Time] = []
    /// Background periods (end nil: until the end).
    public var background: [(Time, Time?)] = []
    public var tracked: [(Time, TrackedState)] = []
    public var ages: [(Time, Double?)] = []
    public var violations: [Time] = []

    public init(title: String) { self.title = title }
}

public struct TimelineData: Sendable {
    public var title: String
    public var start: Time
    public var end: Time
    public var lifetime: Double
    public var refreshInterval: Double
    public var trackedFlag: String
    public var lanes: [TimelineLane]

    public init(title: String, start: Time, end: Time, lifetime: Double, refreshInterval: Double, trackedFlag: String, lanes: [TimelineLane]) {
        self.title = title
        self.start = start
        self.end = end
        self.lifetime = lifetime
        self.refreshInterval = refreshInterval
        self.trackedFlag = trackedFlag
        self.lanes = lanes
    }
}

public enum TimelineSVG {
    public static let maxLanes = 60

    static func esc(_ s: String) -> String {
        var out = ""
        for c in s.unicodeScalars {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            default:
                if c.value < 0x20, c != "\n", c != "\t" { out += " " } else { out.unicodeScalars.append(c) }
            }
        }
        return out
    }

    static func f(_ x: Double) -> String { String(format: "%.1f", x) }

    static func stateColor(_ s: TrackedState) -> String {
        switch s {
        case .on: "#2e9d4f"
        case .off: "#9aa5b1"
        case .killed: "#d64545"
        case .absent: "#f0b429"
        case .none: "#ffffff"
        }
    }

    public static func render(_ d: TimelineData) -> String {
        let width = 1400.0, left = 120.0, right = 24.0, top = 96.0, laneHeight = 96.0
        let lanes = Array(d.lanes.prefix(maxLanes))
        let height = top + Double(lanes.count) * laneHeight + 40
        let span = max(1, d.end - d.start)
        func x(_ t: Time) -> Double { left + (min(max(t, d.start), d.end) - d.start) / span * (width - left - right) }
        var s = """
        <?xml version="1.0" encoding="UTF-8"?>
        <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" viewBox="0 0 \(Int(width)) \(Int(height))" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="11">
        <rect x="0" y="0" width="\(Int(width))" height="\(Int(height))" fill="#ffffff"/>
        <text x="12" y="22" font-size="15" font-weight="bold">\(esc(d.title))</text>

        """
        // Legend.
        var lx = 12.0
        let legend: [(String, String)] = [("#2e9d4f", "refresh ok"), ("#d64545", "refresh failed"), ("#e8eaed", "background"),
                                          ("#f08c00", "SIGTERM"), ("#7048e8", "SIGKILL"), ("#1c7ed6", "READY=1")]
        for (color, label) in legend {
            s += "<rect x=\"\(f(lx))\" y=\"34\" width=\"12\" height=\"12\" fill=\"\(color)\" stroke=\"#555\" stroke-width=\"0.5\"/>"
            s += "<text x=\"\(f(lx + 16))\" y=\"44\">\(esc(label))</text>\n"
            lx += 20 + Double(label.count) * 6.5 + 14
        }
        s += "<text x=\"\(f(lx))\" y=\"44\">\(esc(d.trackedFlag)):</text>\n"
        lx += Double(d.trackedFlag.count + 1) * 6.5 + 8
        for st in [TrackedState.on, .off, .killed, .absent, .none] {
            s += "<rect x=\"\(f(lx))\" y=\"34\" width=\"12\" height=\"12\" fill=\"\(stateColor(st))\" stroke=\"#555\" stroke-width=\"0.5\"/>"
            s += "<text x=\"\(f(lx + 16))\" y=\"44\">\(st == .none ? "no flags" : st.rawValue)</text>\n"
            lx += 20 + Double(st.rawValue.count) * 6.5 + 18
        }
        s += "<line x1=\"\(f(lx))\" y1=\"40\" x2=\"\(f(lx + 20))\" y2=\"40\" stroke=\"#1c7ed6\" stroke-width=\"1.5\"/><text x=\"\(f(lx + 24))\" y=\"44\">cache age (0…lifetime \(Int(d.lifetime)) s)</text>\n"
        lx += 200
        s += "<line x1=\"\(f(lx))\" y1=\"34\" x2=\"\(f(lx))\" y2=\"48\" stroke=\"#e03131\" stroke-width=\"2\"/><text x=\"\(f(lx + 5))\" y=\"44\">violation</text>\n"

        // Time axis.
        let steps: [Double] = [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400]
        let step = steps.first { span / $0 <= 14 } ?? 28800
        var tick = 0.0
        while tick <= span + 0.001 {
            let tx = x(d.start + tick)
            let label = tick >= 3600 ? String(format: "%dh%02dm", Int(tick) / 3600, Int(tick) % 3600 / 60)
                : tick >= 60 ? String(format: "%dm%02ds", Int(tick) / 60, Int(tick) % 60) : "\(Int(tick))s"
            s += "<line x1=\"\(f(tx))\" y1=\"\(f(top - 12))\" x2=\"\(f(tx))\" y2=\"\(f(height - 40))\" stroke=\"#eceff1\" stroke-width=\"1\"/>"
            s += "<text x=\"\(f(tx))\" y=\"\(f(top - 16))\" text-anchor=\"middle\" fill=\"#555\">\(label)</text>\n"
            tick += step
        }

        for (i, lane) in lanes.enumerated() {
            let y = top + Double(i) * laneHeight
            s += "<g>\n<rect x=\"\(f(left))\" y=\"\(f(y))\" width=\"\(f(width - left - right))\" height=\"\(f(laneHeight - 8))\" fill=\"#fafbfc\" stroke=\"#d0d7de\" stroke-width=\"0.5\"/>\n"
            s += "<text x=\"8\" y=\"\(f(y + 16))\" font-weight=\"bold\">\(esc(lane.title))</text>\n"
            s += "<text x=\"8\" y=\"\(f(y + 30))\" fill=\"#555\">refreshes</text><text x=\"8\" y=\"\(f(y + 47))\" fill=\"#555\">\(esc(d.trackedFlag))</text><text x=\"8\" y=\"\(f(y + 72))\" fill=\"#555\">cache age</text>\n"
            for (b, e) in lane.background {
                s += "<rect x=\"\(f(x(b)))\" y=\"\(f(y))\" width=\"\(f(max(0.5, x(e ?? d.end) - x(b))))\" height=\"\(f(laneHeight - 8))\" fill=\"#e8eaed\" opacity=\"0.8\"><title>background \(esc(iso8601(b)))</title></rect>\n"
            }
            for (t, ok, fault) in lane.refreshes where t >= d.start && t <= d.end {
                let color = ok ? "#2e9d4f" : "#d64545"
                let tip = "getFeatureFlags \(iso8601(t)) \(ok ? "ok" : "failed")" + (fault.map { " (fault \($0))" } ?? "")
                s += "<line x1=\"\(f(x(t)))\" y1=\"\(f(y + 20))\" x2=\"\(f(x(t)))\" y2=\"\(f(y + 36))\" stroke=\"\(color)\" stroke-width=\"\(ok ? 1.5 : 2.5)\"><title>\(esc(tip))</title></line>\n"
            }
            // Tracked flag state band.
            for (k, (t, st)) in lane.tracked.enumerated() {
                let next = k + 1 < lane.tracked.count ? lane.tracked[k + 1].0 : min(d.end, t + 2)
                s += "<rect x=\"\(f(x(t)))\" y=\"\(f(y + 40))\" width=\"\(f(max(0.8, x(next) - x(t))))\" height=\"10\" fill=\"\(stateColor(st))\" stroke=\"none\"><title>\(esc(d.trackedFlag)) \(st.rawValue) at \(esc(iso8601(t)))</title></rect>\n"
            }
            s += "<rect x=\"\(f(left))\" y=\"\(f(y + 40))\" width=\"\(f(width - left - right))\" height=\"10\" fill=\"none\" stroke=\"#bbb\" stroke-width=\"0.5\"/>\n"
            // Cache age line, 0 at the bottom, the lifetime at the dashed line.
            let ageTop = y + 56, ageBottom = y + laneHeight - 12
            func ay(_ age: Double) -> Double { ageBottom - min(age, d.lifetime * 1.05) / d.lifetime * (ageBottom - ageTop) }
            s += "<line x1=\"\(f(left))\" y1=\"\(f(ay(d.lifetime)))\" x2=\"\(f(width - right))\" y2=\"\(f(ay(d.lifetime)))\" stroke=\"#e03131\" stroke-width=\"0.7\" stroke-dasharray=\"4 3\"/>\n"
            var points = lane.ages.filter { $0.0 >= d.start && $0.0 <= d.end }
            if points.count > 3000 {
                let stride = Double(points.count) / 3000
                points = (0..<3000).map { points[Int(Double($0) * stride)] }
            }
            var run: [String] = []
            func flush() {
                if run.count > 1 { s += "<polyline fill=\"none\" stroke=\"#1c7ed6\" stroke-width=\"1.2\" points=\"\(run.joined(separator: " "))\"/>\n" }
                if run.count == 1 { s += "<circle cx=\"\(run[0].split(separator: ",")[0])\" cy=\"\(run[0].split(separator: ",")[1])\" r=\"1.2\" fill=\"#1c7ed6\"/>\n" }
                run.removeAll()
            }
            var previous: Double?
            for (t, age) in points {
                if let age {
                    // A drop in age is a new response: draw it as a step, not a slope.
                    if let p = previous, age < p - 0.5, let last = run.last {
                        let lastX = last.split(separator: ",")[0]
                        run.append("\(lastX),\(f(ay(age)))")
                        _ = t
                    }
                    run.append("\(f(x(t))),\(f(ay(age)))")
                    previous = age
                } else {
                    flush()
                    previous = nil
                }
            }
            flush()
            for (t, sig) in lane.restarts where t >= d.start && t <= d.end {
                let color = sig == SIGKILL ? "#7048e8" : "#f08c00"
                s += "<line x1=\"\(f(x(t)))\" y1=\"\(f(y))\" x2=\"\(f(x(t)))\" y2=\"\(f(y + laneHeight - 8))\" stroke=\"\(color)\" stroke-width=\"1.5\"><title>\(signalName(sig)) at \(esc(iso8601(t)))</title></line>"
                s += "<text x=\"\(f(x(t) + 2))\" y=\"\(f(y + 12))\" fill=\"\(color)\" font-size=\"9\">\(sig == SIGKILL ? "K" : "T")</text>\n"
            }
            for t in lane.readies where t >= d.start && t <= d.end {
                s += "<path d=\"M\(f(x(t))),\(f(y + laneHeight - 8)) l-3,-6 l6,0 z\" fill=\"#1c7ed6\"><title>READY=1 at \(esc(iso8601(t)))</title></path>\n"
            }
            for t in lane.violations {
                s += "<line x1=\"\(f(x(t)))\" y1=\"\(f(y))\" x2=\"\(f(x(t)))\" y2=\"\(f(y + laneHeight - 8))\" stroke=\"#e03131\" stroke-width=\"2.5\"><title>violation at \(esc(iso8601(t)))</title></line>\n"
            }
            s += "</g>\n"
        }
        if d.lanes.count > lanes.count {
            s += "<text x=\"\(f(left))\" y=\"\(f(height - 16))\" fill=\"#555\">\(d.lanes.count - lanes.count) more agents not drawn (see summary.json)</text>\n"
        }
        s += "</svg>\n"
        return s
    }
}

// MARK: - summary.json

/// Indented JSON with sorted keys (JSONWriter's compact form, laid out for people).
public func prettyJSON(_ v: JSONValue, indent: String = "") -> String {
    let inner = indent + "  "
    switch v {
    case .array(let a) where !a.isEmpty:
        if a.allSatisfy({ if case .object = $0 { return false }; if case .array = $0 { return false }; return true }), a.count <= 12 {
            return JSONWriter.string(v)
        }
        return "[\n" + a.map { inner + prettyJSON($0, indent: inner) }.joined(separator: ",\n") + "\n" + indent + "]"
    case .object(let o) where !o.isEmpty:
        return "{\n" + o.keys.sorted().map { inner + JSONWriter.string(.string($0)) + ": " + prettyJSON(o[$0]!, indent: inner) }
            .joined(separator: ",\n") + "\n" + indent + "}"
    default:
        return JSONWriter.string(v)
    }
}

extension SoakRunner {
    func writeReport(_ r: Recorder.State, outcome: String) throws(HTTPError) {
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
        var lanes: [TimelineLane] = []
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
            var lane = t.lane
            lane.title = "agent \(i) " + String(t.hwid.prefix(8))
            lane.refreshes = calls.map { ($0.time, $0.succeeded, $0.fault) }
            lanes.append(lane)
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
            "violations": .array(r.violations.map(\.json)),
            "perAgent": .array(perAgent),
            "realTimings": clockDriver.map { d in
                ["deviceDays": n(d.deviceSecondsCovered / 86_400), "clockSteps": n(d.steps), "speed": n(options.speed)]
            } ?? .null,
        ]
        let svg = TimelineSVG.render(TimelineData(
            title: "pushwoosh-soak \(outcome.uppercased()) · \(options.agents) agent(s) · \(Int(elapsed)) s · seed \(options.seed) · "
                + "lifetime \(Int(options.timings.lifetime)) s, refresh \(Int(options.timings.refresh)) s, session gap \(Int(options.timings.sessionGap)) s",
            start: started, end: end, lifetime: options.timings.lifetime, refreshInterval: options.timings.refresh,
            trackedFlag: RunContext.trackedFlag, lanes: lanes))
        do {
            try (prettyJSON(summary) + "\n").write(toFile: dir + "/summary.json", atomically: true, encoding: .utf8)
            try svg.write(toFile: dir + "/timeline.svg", atomically: true, encoding: .utf8)
        } catch {
            throw HTTPError("cannot write the report to \(dir): \(error)")
        }
    }
}
