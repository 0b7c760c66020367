import AgentCore
import Foundation

/// A violation as report.html shows it: when on the device's clock, and the device's flags
/// requests around it.
public struct ReportViolation: Sendable {
    public var violation: Violation
    public var deviceTime: Time
    public var requestLog: [String]

    public init(violation: Violation, deviceTime: Time, requestLog: [String]) {
        self.violation = violation
        self.deviceTime = deviceTime
        self.requestLog = requestLog
    }

    /// The device's requests around `time`: up to `before` at or before it and `after` after it.
    public static func around(_ time: Time, calls: [DeviceCall], before: Int = 4, after: Int = 3) -> [String] {
        let split = calls.firstIndex { $0.time > time } ?? calls.count
        return calls[max(0, split - before)..<split].map { describe($0) } + ["── \(iso8601(time)): the violation"]
            + calls[split..<min(calls.count, split + after)].map { describe($0) }
    }
}

/// What report.html shows.
public struct ReportPage: Sendable {
    public var seed: UInt64
    public var agents: Int
    /// `1 device-day`, or the duration of a run on shortened timings.
    public var span: String
    public var deviceDaysCovered: Double?
    public var realSeconds: Double
    public var result: String
    /// The timings and settings, in a line.
    public var settings: String
    public var coverage: SoakCoverage
    public var plan: [CoveragePlan.Assignment]
    /// One per device, in lane order.
    public var counts: [SoakCounts]
    public var timeline: TimelineData
    public var violations: [ReportViolation]
    public var notes: [String]

    public init(seed: UInt64, agents: Int, span: String, deviceDaysCovered: Double?, realSeconds: Double, result: String, settings: String,
                coverage: SoakCoverage, plan: [CoveragePlan.Assignment], counts: [SoakCounts], timeline: TimelineData,
                violations: [ReportViolation], notes: [String]) {
        (self.seed, self.agents, self.span, self.deviceDaysCovered) = (seed, agents, span, deviceDaysCovered)
        (self.realSeconds, self.result, self.settings, self.coverage) = (realSeconds, result, settings, coverage)
        (self.plan, self.counts, self.timeline, self.violations, self.notes) = (plan, counts, timeline, violations, notes)
    }
}

/// report.html: one file that needs nothing else (inline CSS and SVG, no script, nothing
/// fetched), well-formed XML as well as HTML, every text escaped.
public enum ReportHTML {
    static func esc(_ s: String) -> String { TimelineSVG.esc(s) }

    static let style = """
    body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; font-size: 13px; margin: 16px 24px; color: #1f2328; }
    h1 { font-size: 20px; margin: 0 0 8px 0; }
    h2 { font-size: 16px; margin: 24px 0 8px 0; border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
    table { border-collapse: collapse; }
    th, td { border: 1px solid #d0d7de; padding: 3px 8px; text-align: left; vertical-align: top; }
    th { background: #f6f8fa; }
    td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
    tr.none td { background: #ffebe9; }
    tr.total td { font-weight: bold; }
    .pass { color: #1a7f37; } .fail, .uncovered, .interrupted { color: #cf222e; }
    pre { background: #f6f8fa; padding: 6px 8px; overflow-x: auto; font-size: 12px; margin: 4px 0; }
    article.violation { border-left: 4px solid #cf222e; padding-left: 10px; margin: 12px 0; }
    svg { max-width: 100%; height: auto; border: 1px solid #d0d7de; }
    """

    public static func render(_ p: ReportPage) -> String {
        var s = """
        <!DOCTYPE html>
        <html lang="en">
        <head>
        <meta charset="utf-8"/>
        <title>pushwoosh-soak \(esc(p.result.uppercased())) · seed \(p.seed) · \(esc(p.span))</title>
        <style>
        \(style)
        </style>
        </head>
        <body>

        """
        // What failed comes first: the tables of violations, before the coverage and the lanes.
        s += header(p) + failures(p) + coverage(p) + counts(p)
        s += "<section id=\"timeline\">\n<h2>Timeline: one lane per agent (\(esc(p.timeline.clock)))</h2>\n"
        s += TimelineSVG.render(p.timeline, standalone: false) + "</section>\n"
        s += violations(p)
        if !p.notes.isEmpty {
            s += "<section id=\"notes\">\n<h2>Looks that checked nothing</h2>\n<ul>\n"
            s += p.notes.map { "<li>\(esc($0))</li>\n" }.joined() + "</ul>\n</section>\n"
        }
        s += "</body>\n</html>\n"
        return s
    }

    static func row(_ cells: [String], header: Bool = false, numeric: Set<Int> = [], cls: String? = nil) -> String {
        let tag = header ? "th" : "td"
        return "<tr\(cls.map { " class=\"\($0)\"" } ?? "")>" + cells.enumerated().map { i, c in
            "<\(tag)\(numeric.contains(i) && !header ? " class=\"n\"" : "")>\(esc(c))</\(tag)>"
        }.joined() + "</tr>\n"
    }

    static func header(_ p: ReportPage) -> String {
        var s = "<header id=\"header\">\n<h1>pushwoosh-soak: <span class=\"\(esc(p.result))\">\(esc(p.result.uppercased()))</span></h1>\n<table class=\"facts\">\n"
        var facts: [(String, String)] = [("result", p.result), ("seed", "\(p.seed)"), ("agents", "\(p.agents)"), ("run", p.span)]
        if let covered = p.deviceDaysCovered { facts.append(("device-days covered", String(format: "%.3f", covered))) }
        facts += [("real seconds", String(format: "%.1f", p.realSeconds)), ("timings", p.settings),
                  ("not exercised", p.coverage.notExercised.isEmpty ? "none" : p.coverage.notExercised.joined(separator: ", ")),
                  ("violations", "\(p.violations.count)")]
        for (k, v) in facts { s += "<tr><th>\(esc(k))</th><td>\(esc(v))</td></tr>\n" }
        return s + "</table>\n</header>\n"
    }

    /// The violations per invariant and per device, and what required coverage missed; empty
    /// for a run that passed.
    static func failures(_ p: ReportPage) -> String {
        let missed = p.result == "uncovered" ? p.coverage.notExercised : []
        guard !p.violations.isEmpty || !missed.isEmpty else { return "" }
        var s = "<section id=\"failures\">\n<h2>What failed</h2>\n"
        if !missed.isEmpty {
            s += "<p class=\"fail\">Never checked, and coverage is required: \(esc(missed.joined(separator: ", ")))</p>\n"
        }
        guard !p.violations.isEmpty else { return s + "</section>\n" }
        let byInvariant = Dictionary(grouping: p.violations) { $0.violation.invariant }
        s += "<table id=\"violations-per-invariant\">\n" + row(["invariant", "violations", "devices", "first (\(p.timeline.clock))", "first message"], header: true)
        for name in byInvariant.keys.sorted(by: { (byInvariant[$0]!.count, $1) > (byInvariant[$1]!.count, $0) }) {
            let list = byInvariant[name]!.sorted { $0.deviceTime < $1.deviceTime }
            let devices = Dictionary(grouping: list) { $0.violation.agent ?? -1 }
            let who = devices.keys.sorted().map { ($0 < 0 ? "no agent" : "agent \($0)") + " (\(devices[$0]!.count))" }.joined(separator: ", ")
            s += row([name, "\(list.count)", who, iso8601(list[0].deviceTime), list[0].violation.message], numeric: [1], cls: "none")
        }
        s += "</table>\n"
        let byDevice = Dictionary(grouping: p.violations) { $0.violation.agent ?? -1 }
        s += "<table id=\"violations-per-device\">\n" + row(["device", "violations", "by invariant"], header: true)
        for agent in byDevice.keys.sorted() {
            let names = Dictionary(grouping: byDevice[agent]!) { $0.violation.invariant }
            s += row([agent < 0 ? "no agent" : "agent \(agent)", "\(byDevice[agent]!.count)",
                      names.keys.sorted().map { "\($0) \(names[$0]!.count)" }.joined(separator: ", ")], numeric: [1])
        }
        return s + "</table>\n<p>Each one below (at most \(cardsPerGroup) per invariant and device) and on its lane, named by its invariant.</p>\n</section>\n"
    }

    /// Cards shown per invariant and device; the rest are counted (summary.json lists them all).
    static let cardsPerGroup = 3

    static func coverage(_ p: ReportPage) -> String {
        var s = "<section id=\"coverage\">\n<h2>Coverage: checks per invariant</h2>\n<table>\n"
        s += row(["invariant", "checks", "planned", "what it holds"], header: true)
        for e in p.coverage.entries {
            let planned = p.plan.filter { $0.duty.invariant == e.name }.map { "agent \($0.device) at +\(TimeSpan.format($0.at))" }
            s += row([e.name, "\(e.checks)", planned.isEmpty ? "" : planned.joined(separator: ", "), e.holds], numeric: [1],
                     cls: e.checks == 0 ? "none" : nil)
        }
        return s + "</table>\n</section>\n"
    }

    static func counts(_ p: ReportPage) -> String {
        let triggers = HeardCounts.triggerNames
        var s = "<section id=\"counts\">\n<h2>Counts per agent</h2>\n<table>\n"
        s += "<tr><th rowspan=\"2\">agent</th><th rowspan=\"2\">flags requests</th><th colspan=\"\(triggers.count)\">refreshes sent, by trigger</th>"
            + "<th rowspan=\"2\">not sent (throttled)</th><th colspan=\"2\">failed requests</th>"
            + "<th rowspan=\"2\">expiries</th><th rowspan=\"2\">discards</th><th rowspan=\"2\">restarts</th><th rowspan=\"2\">user switches</th></tr>\n"
        s += row(triggers + ["all", "by kind"], header: true)
        let numeric = Set(0..<(triggers.count + 10)).subtracting([0, triggers.count + 4])
        func cells(_ name: String, _ c: SoakCounts) -> [String] {
            [name, "\(c.requests)"] + triggers.map { "\(c.heard.byTrigger[$0] ?? 0)" }
                + ["\(c.heard.notSentThrottled)", "\(c.failures)",
                   c.failuresByKind.keys.sorted().map { "\($0): \(c.failuresByKind[$0]!)" }.joined(separator: ", "),
                   "\(c.heard.expiries.count)", "\(c.heard.discards.count)", "\(c.restarts)", "\(c.userSwitches)"]
        }
        for (i, c) in p.counts.enumerated() { s += row(cells("agent \(i)", c), numeric: numeric) }
        s += row(cells("total", SoakCounts.total(p.counts)), numeric: numeric, cls: "total")
        return s + "</table>\n</section>\n"
    }

    static func violations(_ p: ReportPage) -> String {
        var s = "<section id=\"violations\">\n<h2>Violations</h2>\n"
        if p.violations.isEmpty { return s + "<p>None.</p>\n</section>\n" }
        var shown: [String: Int] = [:]
        for v in p.violations {
            let who = v.violation.agent.map { "agent \($0)" } ?? "no agent"
            let group = "[\(v.violation.invariant)] \(who)"
            shown[group, default: 0] += 1
            guard shown[group]! <= cardsPerGroup else { continue }
            s += "<article class=\"violation\">\n<h3>[\(esc(v.violation.invariant))] \(esc(who)) at \(esc(iso8601(v.deviceTime))) (\(esc(p.timeline.clock)))"
                + (v.violation.pid.map { ", pid \($0)" } ?? "") + "</h3>\n"
            s += "<p>\(esc(v.violation.message))</p>\n"
            if !v.violation.evidence.isEmpty { s += "<pre>\(esc(v.violation.evidence.joined(separator: "\n")))</pre>\n" }
            if !v.requestLog.isEmpty {
                s += "<p>The device's flags requests around it:</p>\n<pre>\(esc(v.requestLog.joined(separator: "\n")))</pre>\n"
            }
            s += "</article>\n"
        }
        for (group, count) in shown.sorted(by: { $0.key < $1.key }) where count > cardsPerGroup {
            s += "<p class=\"more\">\(esc(group)): \(count - cardsPerGroup) more like these (summary.json lists them all)</p>\n"
        }
        return s + "</section>\n"
    }
}
