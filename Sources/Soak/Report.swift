import AgentCore
import AgentWire
import Foundation
#if canImport(Glibc)
import Glibc
import HarnessSupport
#endif

// MARK: - The timeline (hand-written SVG)

/// One `getFeatureFlags` request as the emulator logged it.
public struct RefreshMark: Sendable, Equatable {
    public var time: Time
    public var succeeded: Bool
    /// HTTP status answered; nil: dropped.
    public var status: Int?
    /// The fault kind that fired, if any.
    public var fault: String?

    public init(time: Time, succeeded: Bool, status: Int? = 200, fault: String? = nil) {
        self.time = time
        self.succeeded = succeeded
        self.status = status
        self.fault = fault
    }

    /// `getFeatureFlags at 2027-01-15T08:00:00.000Z (device time): failed, HTTP 503 (fault http)`.
    public func tooltip(clock: String) -> String {
        let answer = status.map { "HTTP \($0)" } ?? "dropped"
        return "getFeatureFlags at \(iso8601(time)) (\(clock)): \(succeeded ? "ok" : "failed"), \(answer)" + (fault.map { " (fault \($0))" } ?? "")
    }
}

/// A span the timeline shades: a fault that was armed (from arming to its end), with what it was.
public struct TimelineSpan: Sendable, Equatable {
    public var start: Time
    public var end: Time
    public var label: String

    public init(start: Time, end: Time, label: String) {
        self.start = start
        self.end = end
        self.label = label
    }
}

/// A violation as its lane draws it: when, the invariant it broke, and what was wrong.
public struct ViolationMark: Sendable, Equatable {
    public var time: Time
    public var invariant: String
    public var message: String

    public init(time: Time, invariant: String, message: String) {
        (self.time, self.invariant, self.message) = (time, invariant, message)
    }
}

/// What the timeline shows for one agent.
public struct TimelineLane: Sendable {
    public var title: String
    /// Every getFeatureFlags request of this agent.
    public var refreshes: [RefreshMark] = []
    /// User switches: time and the new User ID.
    public var users: [(Time, String)] = []
    /// Faults scoped to this agent (an outage of its device).
    public var faults: [TimelineSpan] = []
    /// Restarts: time and signal (SIGTERM / SIGKILL).
    public var restarts: [(Time, Int32)] = []
    public var readies: [Time] = []
    /// Background periods (end nil: until the end).
    public var background: [(Time, Time?)] = []
    public var tracked: [(Time, TrackedState)] = []
    public var ages: [(Time, Double?)] = []
    public var violations: [ViolationMark] = []
    /// Processes of this agent that exited on their own (the `crash` invariant), device time.
    public var crashes: [Time] = []
    /// `featureFlagsDidUpdate` `expired` (ST-3) and `discarded` (ST-2), device time.
    public var expiries: [Time] = []
    public var discards: [Time] = []

    /// After each crash: when the device was up again (its next READY=1), nil when it never was.
    public var afterCrashes: [(crash: Time, up: Time?)] {
        crashes.sorted().map { c in (c, readies.filter { $0 > c }.min()) }
    }

    /// From when the device is down for good (a crash with no restart after it): nothing is
    /// drawn as served or ageing past it.
    public var deadFrom: Time? { afterCrashes.first { $0.up == nil }?.crash }

    /// The lane's element id in the report (`lane-0`).
    public var id = ""

    public init(title: String, id: String = "") {
        self.title = title
        self.id = id
    }
}

public struct TimelineData: Sendable {
    public var title: String
    public var start: Time
    public var end: Time
    public var lifetime: Double
    public var refreshInterval: Double
    public var trackedFlag: String
    public var lanes: [TimelineLane]
    /// What the axis measures: "device time" (--real-timings) or "real time".
    public var clock: String
    /// Faults that hit every device, drawn across every lane.
    public var faults: [TimelineSpan]
    /// Flag changes through the admin API: time and what (`kill new_checkout`).
    public var flagChanges: [(Time, String)]

    public init(title: String, start: Time, end: Time, lifetime: Double, refreshInterval: Double, trackedFlag: String, lanes: [TimelineLane],
                clock: String = "real time", faults: [TimelineSpan] = [], flagChanges: [(Time, String)] = []) {
        self.title = title
        self.start = start
        self.end = end
        self.lifetime = lifetime
        self.refreshInterval = refreshInterval
        self.trackedFlag = trackedFlag
        self.lanes = lanes
        self.clock = clock
        self.faults = faults
        self.flagChanges = flagChanges
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

    // One colour per meaning (a test holds them distinct): the legend's and the lanes'.
    static let okColor = "#2f9e44", failedColor = "#e03131", backgroundColor = "#e8eaed", termColor = "#996300",
               killColor = "#7048e8", readyColor = "#1c7ed6", faultColor = "#ff922b", changeColor = "#0b7285",
               userColor = "#862e9c", expiredColor = "#d6336c", discardedColor = "#495057", crashColor = "#000000",
               downColor = "#868e96", ageColor = "#4dabf7", violationColor = "#c92a2a", notObservedColor = "#fafbfc"

    /// Every colour of the legend with what it means, in its order.
    static let legendEntries: [(color: String, label: String)] = [
        (okColor, "refresh ok"), (failedColor, "refresh failed"), (backgroundColor, "background"), (termColor, "SIGTERM"),
        (killColor, "SIGKILL"), (readyColor, "READY=1"), (faultColor, "fault armed"), (changeColor, "flag change"),
        (userColor, "user switch"), (expiredColor, "expired"), (discardedColor, "discarded"), (crashColor, "crash"),
        (downColor, "down (crashed)"),
    ]

    static func spanTitle(_ span: TimelineSpan, _ clock: String) -> String {
        "\(span.label) from \(iso8601(span.start)) to \(iso8601(span.end)) (\(clock))"
    }

    static func stateColor(_ s: TrackedState) -> String {
        switch s {
        case .on: "#8ce99a"
        case .off: "#adb5bd"
        case .killed: "#ffc9c9"
        case .absent: "#ffe066"
        case .none: "#d0bfff"
        }
    }

    /// The tracked flag's legend: its states, and a stretch before the first look (not observed).
    static var stateLegend: [(color: String, label: String)] {
        [TrackedState.on, .off, .killed, .absent, .none].map { (stateColor($0), $0 == .none ? "no flags" : $0.rawValue) }
            + [(notObservedColor, "not observed")]
    }

    /// The page's geometry: where a time falls on the x axis.
    struct Canvas {
        let d: TimelineData
        let width = 1400.0, left = 120.0, right = 24.0, top = 112.0, laneHeight = 96.0
        let height: Double
        func x(_ t: Time) -> Double {
            left + (min(max(t, d.start), d.end) - d.start) / max(1, d.end - d.start) * (width - left - right)
        }
    }

    /// The timeline; `standalone` false leaves out the XML declaration (for report.html's inline SVG).
    public static func render(_ d: TimelineData, standalone: Bool = true) -> String {
        let lanes = Array(d.lanes.prefix(maxLanes))
        let c = Canvas(d: d, height: 112.0 + Double(lanes.count) * 96.0 + 40)
        let width = c.width, height = c.height
        var s = standalone ? "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" : ""
        s += """
        <svg\(standalone ? " xmlns=\"http://www.w3.org/2000/svg\"" : "") width="\(Int(width))" height="\(Int(height))" viewBox="0 0 \(Int(width)) \(Int(height))" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="11">
        <rect x="0" y="0" width="\(Int(width))" height="\(Int(height))" fill="#ffffff"/>

        """
        // Inline, the page's header says it already.
        if standalone { s += "<text x=\"12\" y=\"22\" font-size=\"15\" font-weight=\"bold\">\(esc(d.title))</text>\n" }
        s += legend(d) + axis(c)
        for (i, lane) in lanes.enumerated() {
            s += self.lane(lane, y: c.top + Double(i) * c.laneHeight, c)
        }
        s += overlays(c, lanes: lanes.count)
        s += "</svg>\n"
        return s
    }

    /// The two legend rows: the marks, the tracked flag's states, the cache age, violations.
    static func legend(_ d: TimelineData) -> String {
        var s = ""
        var lx = 12.0
        for (color, label) in legendEntries {
            s += "<rect x=\"\(f(lx))\" y=\"34\" width=\"12\" height=\"12\" fill=\"\(color)\" stroke=\"#555\" stroke-width=\"0.5\"/>"
            s += "<text x=\"\(f(lx + 16))\" y=\"44\">\(esc(label))</text>\n"
            lx += 20 + Double(label.count) * 6.5 + 14
        }
        lx = 12  // second row: the tracked flag, the cache age, violations
        s += "<text x=\"\(f(lx))\" y=\"64\">\(esc(d.trackedFlag)):</text>\n"
        lx += Double(d.trackedFlag.count + 1) * 6.5 + 8
        for (color, label) in stateLegend {
            s += "<rect x=\"\(f(lx))\" y=\"54\" width=\"12\" height=\"12\" fill=\"\(color)\" stroke=\"#555\" stroke-width=\"0.5\"/>"
            s += "<text x=\"\(f(lx + 16))\" y=\"64\">\(label)</text>\n"
            lx += 20 + Double(label.count) * 6.5 + 14
        }
        s += "<line x1=\"\(f(lx))\" y1=\"60\" x2=\"\(f(lx + 20))\" y2=\"60\" stroke=\"\(ageColor)\" stroke-width=\"1.5\"/><text x=\"\(f(lx + 24))\" y=\"64\">cache age (0…lifetime \(Int(d.lifetime)) s)</text>\n"
        lx += 24 + Double("cache age (0…lifetime \(Int(d.lifetime)) s)".count) * 6.5 + 14
        s += "<line x1=\"\(f(lx))\" y1=\"54\" x2=\"\(f(lx))\" y2=\"68\" stroke=\"\(violationColor)\" stroke-width=\"2\"/><text x=\"\(f(lx + 5))\" y=\"64\">violation (its invariant in its title)</text>\n"
        return s
    }

    /// The time axis, from the start, in the run's clock, with its grid lines.
    static func axis(_ c: Canvas) -> String {
        let d = c.d, left = c.left, top = c.top, height = c.height, span = max(1, d.end - d.start)
        var s = ""
        s += "<text x=\"\(f(left))\" y=\"\(f(top - 32))\" fill=\"#555\">time axis: \(esc(d.clock)), from \(esc(iso8601(d.start)))</text>\n"
        let steps: [Double] = [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400]
        let step = steps.first { span / $0 <= 14 } ?? 172_800
        var tick = 0.0
        while tick <= span + 0.001 {
            let tx = c.x(d.start + tick)
            let label = tick >= 86400 ? String(format: "%dd%02dh", Int(tick) / 86400, Int(tick) % 86400 / 3600)
                : tick >= 3600 ? String(format: "%dh%02dm", Int(tick) / 3600, Int(tick) % 3600 / 60)
                : tick >= 60 ? String(format: "%dm%02ds", Int(tick) / 60, Int(tick) % 60) : "\(Int(tick))s"
            s += "<line x1=\"\(f(tx))\" y1=\"\(f(top - 12))\" x2=\"\(f(tx))\" y2=\"\(f(height - 40))\" stroke=\"#eceff1\" stroke-width=\"1\"/>"
            s += "<text x=\"\(f(tx))\" y=\"\(f(top - 16))\" text-anchor=\"middle\" fill=\"#555\">\(label)</text>\n"
            tick += step
        }
        return s
    }

    /// One agent's lane: background periods, faults, requests, user switches, the tracked
    /// flag, the cache age, restarts, READY=1 and violations.
    static func lane(_ lane: TimelineLane, y: Double, _ c: Canvas) -> String {
        let d = c.d, width = c.width, left = c.left, right = c.right, laneHeight = c.laneHeight
        func x(_ t: Time) -> Double { c.x(t) }
        // Each title names its lane: two agents' marks at one time are told apart.
        let of = " · " + esc(lane.title)
        var s = "<g class=\"lane\"\(lane.id.isEmpty ? "" : " id=\"\(esc(lane.id))\"")>\n<rect x=\"\(f(left))\" y=\"\(f(y))\" width=\"\(f(width - left - right))\" height=\"\(f(laneHeight - 8))\" fill=\"#fafbfc\" stroke=\"#d0d7de\" stroke-width=\"0.5\"/>\n"
        s += "<text x=\"8\" y=\"\(f(y + 16))\" font-weight=\"bold\">\(esc(lane.title))</text>\n"
        s += "<text x=\"8\" y=\"\(f(y + 30))\" fill=\"#555\">refreshes</text><text x=\"8\" y=\"\(f(y + 47))\" fill=\"#555\">\(esc(d.trackedFlag))</text><text x=\"8\" y=\"\(f(y + 72))\" fill=\"#555\">cache age</text>\n"
        // A device down for good is drawn as neither serving nor in the background past its crash.
        let dead = lane.deadFrom
        let laneEnd = min(d.end, dead ?? d.end)
        for (b, e) in lane.background where b < laneEnd {
            let until = min(e ?? laneEnd, laneEnd)
            s += "<rect x=\"\(f(x(b)))\" y=\"\(f(y))\" width=\"\(f(max(0.5, x(until) - x(b))))\" height=\"\(f(laneHeight - 8))\" fill=\"\(backgroundColor)\" opacity=\"0.8\"><title>background from \(esc(iso8601(b))) to \(esc(iso8601(until)))\(of)</title></rect>\n"
        }
        for (crash, up) in lane.afterCrashes {
            let until = up ?? d.end
            let what = up.map { "restarted: READY=1 at \(iso8601($0))" } ?? "not restarted: down to the run's end"
            s += "<rect x=\"\(f(x(crash)))\" y=\"\(f(y))\" width=\"\(f(max(1.5, x(until) - x(crash))))\" height=\"\(f(laneHeight - 8))\" fill=\"\(downColor)\" opacity=\"0.35\"><title>down after the crash at \(esc(iso8601(crash))): \(esc(what))\(of)</title></rect>\n"
            if up == nil {
                s += "<text x=\"\(f(min(x(crash) + 4, width - right - 90)))\" y=\"\(f(y + 62))\" fill=\"#212529\" font-weight=\"bold\">not restarted</text>\n"
            }
        }
        for span in lane.faults {
            s += "<rect x=\"\(f(x(span.start)))\" y=\"\(f(y))\" width=\"\(f(max(1.5, x(span.end) - x(span.start))))\" height=\"\(f(laneHeight - 8))\" "
                + "fill=\"\(faultColor)\" opacity=\"0.3\"><title>\(esc(spanTitle(span, d.clock)))</title></rect>\n"
        }
        // Every request, each with its tooltip (a run's requests stay in the thousands).
        for mark in lane.refreshes {
            let color = mark.succeeded ? okColor : failedColor
            s += "<line x1=\"\(f(x(mark.time)))\" y1=\"\(f(y + 20))\" x2=\"\(f(x(mark.time)))\" y2=\"\(f(y + 36))\" stroke=\"\(color)\" "
                + "stroke-width=\"\(mark.succeeded ? 1.5 : 2.5)\"><title>\(esc(mark.tooltip(clock: d.clock)))\(of)</title></line>\n"
        }
        for (t, user) in lane.users {
            s += "<path d=\"M\(f(x(t))),\(f(y + 3)) l4,5 l-4,5 l-4,-5 z\" fill=\"\(userColor)\"><title>user switch to \(esc(user)) at \(esc(iso8601(t))) (\(esc(d.clock)))\(of)</title></path>\n"
        }
        // Tracked flag state band: one piece per state, from the first look that saw it to the next change.
        var pieces: [(from: Time, state: TrackedState)] = []
        for (t, st) in lane.tracked.sorted(by: { $0.0 < $1.0 }) where pieces.last?.state != st { pieces.append((t, st)) }
        for (k, piece) in pieces.enumerated() where piece.from < laneEnd {
            let next = min(k + 1 < pieces.count ? pieces[k + 1].from : d.end, laneEnd)
            s += "<rect x=\"\(f(x(piece.from)))\" y=\"\(f(y + 40))\" width=\"\(f(max(0.8, x(next) - x(piece.from))))\" height=\"10\" fill=\"\(stateColor(piece.state))\" stroke=\"none\">"
                + "<title>\(esc(d.trackedFlag)) \(piece.state == .none ? "not served (no flags)" : piece.state.rawValue) from \(esc(iso8601(piece.from))) to \(esc(iso8601(next)))\(of)</title></rect>\n"
        }
        s += "<rect x=\"\(f(left))\" y=\"\(f(y + 40))\" width=\"\(f(width - left - right))\" height=\"10\" fill=\"none\" stroke=\"#bbb\" stroke-width=\"0.5\"/>\n"
        s += ageLine(lane, y: y, c)
        for (t, sig) in lane.restarts where t >= d.start && t <= d.end {
            let color = sig == SIGKILL ? killColor : termColor
            s += "<line x1=\"\(f(x(t)))\" y1=\"\(f(y))\" x2=\"\(f(x(t)))\" y2=\"\(f(y + laneHeight - 8))\" stroke=\"\(color)\" stroke-width=\"1.5\"><title>\(signalName(sig)) at \(esc(iso8601(t)))\(of)</title></line>"
            s += "<text x=\"\(f(x(t) + 2))\" y=\"\(f(y + 12))\" fill=\"\(color)\" font-size=\"9\">\(sig == SIGKILL ? "K" : "T")</text>\n"
        }
        for t in lane.readies where t >= d.start && t <= d.end {
            s += "<path d=\"M\(f(x(t))),\(f(y + laneHeight - 8)) l-3,-6 l6,0 z\" fill=\"\(readyColor)\"><title>READY=1 at \(esc(iso8601(t)))\(of)</title></path>\n"
        }
        for t in lane.expiries {
            s += "<path d=\"M\(f(x(t))),\(f(y + 52)) l5,-5 l5,5 l-5,5 z\" transform=\"translate(-5,0)\" fill=\"\(expiredColor)\"><title>flags expired at \(esc(iso8601(t))) (\(esc(d.clock)), ST-3)\(of)</title></path>\n"
        }
        for t in lane.discards {
            s += "<path d=\"M\(f(x(t))),\(f(y + 52)) l4,-4 l4,4 l-4,4 z\" transform=\"translate(-4,0)\" fill=\"\(discardedColor)\"><title>flags discarded at \(esc(iso8601(t))) (\(esc(d.clock)), ST-2)\(of)</title></path>\n"
        }
        for t in lane.crashes {
            s += "<path d=\"M\(f(x(t) - 5)),\(f(y + 2)) l10,10 m0,-10 l-10,10\" stroke=\"\(crashColor)\" stroke-width=\"2.5\"><title>crash: the process exited on its own at \(esc(iso8601(t))) (\(esc(d.clock)))\(of)</title></path>\n"
        }
        for v in lane.violations {
            let t = v.time
            let message = v.message.count > 160 ? String(v.message.prefix(160)) + "…" : v.message
            s += "<line x1=\"\(f(x(t)))\" y1=\"\(f(y))\" x2=\"\(f(x(t)))\" y2=\"\(f(y + laneHeight - 8))\" stroke=\"\(violationColor)\" stroke-width=\"2.5\"><title>violation [\(esc(v.invariant))] at \(esc(iso8601(t)))\(of): \(esc(message))</title></line>\n"
            s += "<text x=\"\(f(x(t) + 3))\" y=\"\(f(y + laneHeight - 12))\" fill=\"\(violationColor)\" font-size=\"9\">\(esc(v.invariant))</text>\n"
        }
        s += "</g>\n"
        return s
    }

    /// The cache age line, 0 at the bottom, the lifetime at the dashed line; a drop in age (a
    /// new response) drawn as a step.
    static func ageLine(_ lane: TimelineLane, y: Double, _ c: Canvas) -> String {
        let d = c.d, width = c.width, left = c.left, right = c.right, laneHeight = c.laneHeight
        func x(_ t: Time) -> Double { c.x(t) }
        var s = ""
        let ageTop = y + 56, ageBottom = y + laneHeight - 12
        func ay(_ age: Double) -> Double { ageBottom - min(age, d.lifetime * 1.05) / d.lifetime * (ageBottom - ageTop) }
        s += "<line x1=\"\(f(left))\" y1=\"\(f(ay(d.lifetime)))\" x2=\"\(f(width - right))\" y2=\"\(f(ay(d.lifetime)))\" stroke=\"#e03131\" stroke-width=\"0.7\" stroke-dasharray=\"4 3\"/>\n"
        let renewals = lane.refreshes.filter(\.succeeded).map(\.time)
        // A device down for good has no cache age past its crash.
        let end = min(d.end, lane.deadFrom ?? d.end)
        var runs = CacheAgeLine.runs(ages: lane.ages.filter { $0.0 <= end }, renewals: renewals.filter { $0 <= end }, discards: lane.discards,
                                     end: end, lifetime: d.lifetime)
        if runs.count > 1000 {
            let keep = Double(runs.count) / 1000
            runs = (0..<1000).map { runs[Int(Double($0) * keep)] }
        }
        let total = runs.map(\.count).reduce(0, +)
        if total > 3000 {
            // Thinned evenly, each run's ends kept.
            let keep = Double(3000) / Double(total)
            runs = runs.map { run in run.enumerated().filter { i, _ in i == 0 || i == run.count - 1 || Int(Double(i) * keep) != Int(Double(i - 1) * keep) }.map(\.1) }
        }
        for run in runs {
            let points = run.map { "\(f(x($0.0))),\(f(ay($0.1)))" }
            if points.count > 1 {
                s += "<polyline class=\"age\" fill=\"none\" stroke=\"\(ageColor)\" stroke-width=\"1.2\" points=\"\(points.joined(separator: " "))\"/>\n"
            } else if let only = run.first {
                s += "<circle class=\"age\" cx=\"\(f(x(only.0)))\" cy=\"\(f(ay(only.1)))\" r=\"1.2\" fill=\"\(ageColor)\"/>\n"
            }
        }
        return s
    }

    /// What hit every device: faults armed for everyone, flag changes, across all lanes.
    static func overlays(_ c: Canvas, lanes: Int) -> String {
        let d = c.d, left = c.left, top = c.top, height = c.height
        func x(_ t: Time) -> Double { c.x(t) }
        var s = ""
        let bottom = top + Double(lanes) * c.laneHeight - 8
        for span in d.faults {
            s += "<rect x=\"\(f(x(span.start)))\" y=\"\(f(top - 10))\" width=\"\(f(max(1.5, x(span.end) - x(span.start))))\" height=\"\(f(bottom - top + 10))\" "
                + "fill=\"\(faultColor)\" opacity=\"0.22\"><title>\(esc(spanTitle(span, d.clock)))</title></rect>\n"
        }
        for (t, what) in d.flagChanges {
            s += "<line x1=\"\(f(x(t)))\" y1=\"\(f(top - 10))\" x2=\"\(f(x(t)))\" y2=\"\(f(bottom))\" stroke=\"\(changeColor)\" stroke-width=\"1\" "
                + "stroke-dasharray=\"3 2\" opacity=\"0.7\"><title>flag change: \(esc(what)) at \(esc(iso8601(t))) (\(esc(d.clock)))</title></line>\n"
        }
        if d.lanes.count > lanes {
            s += "<text x=\"\(f(left))\" y=\"\(f(height - 16))\" fill=\"#555\">\(d.lanes.count - lanes) more agents not drawn (see summary.json)</text>\n"
        }
        return s
    }
}
