import AgentCore
import Foundation

/// `--junit FILE`: the run as JUnit XML, for CI systems. One test case per invariant (a
/// failure lists its violations; skipped when the run never checked it) and one per agent
/// (a failure lists the violations seen on it); the runner's own failures (its socket
/// calls, the emulator's admin API, the device clock) are one more test case.
public enum JUnitReport {
    public struct Agent: Sendable {
        public var name: String
        /// What the agent did, for the test case's output.
        public var details: String

        public init(name: String, details: String) {
            self.name = name
            self.details = details
        }
    }

    static func esc(_ s: String) -> String { TimelineSVG.esc(s) }

    /// A failure that is no violation: the test case's `type`, `message` and text.
    struct Failure {
        var type: String
        var message: String
        var text: String
    }

    static func testCase(_ className: String, _ name: String, failure: [Violation], skipped: String?, output: String,
                         other: Failure? = nil) -> String {
        var s = "    <testcase classname=\"\(esc(className))\" name=\"\(esc(name))\" time=\"0\">\n"
        if !failure.isEmpty {
            let first = failure[0]
            let message = "\(failure.count) violation\(failure.count == 1 ? "" : "s"); first: \(first.message)"
            s += "      <failure type=\"\(esc(first.invariant))\" message=\"\(esc(message))\">"
                + esc(failure.map(\.description).joined(separator: "\n\n")) + "</failure>\n"
        } else if let other {
            s += "      <failure type=\"\(esc(other.type))\" message=\"\(esc(other.message))\">\(esc(other.text))</failure>\n"
        } else if let skipped {
            s += "      <skipped message=\"\(esc(skipped))\"/>\n"
        }
        s += "      <system-out>\(esc(output))</system-out>\n    </testcase>\n"
        return s
    }

    static func suite(_ name: String, cases: [String], failures: Int, skipped: Int, seconds: Double, timestamp: String,
                      properties: [(String, String)] = []) -> String {
        var s = "  <testsuite name=\"\(esc(name))\" tests=\"\(cases.count)\" failures=\"\(failures)\" errors=\"0\" skipped=\"\(skipped)\" "
            + "time=\"\(String(format: "%.3f", seconds))\" timestamp=\"\(esc(timestamp))\">\n"
        if !properties.isEmpty {
            s += "    <properties>\n"
            for (k, v) in properties { s += "      <property name=\"\(esc(k))\" value=\"\(esc(v))\"/>\n" }
            s += "    </properties>\n"
        }
        return s + cases.joined() + "  </testsuite>\n"
    }

    /// The whole document. `violations` are every violation of the run, `agents` in index order.
    /// - Parameter coverageRequired: `--require-coverage`: an invariant the run never checked is
    ///   a failure (the run exits 3 for it), not a skipped test.
    public static func xml(coverage: SoakCoverage, violations: [Violation], agents: [Agent], seconds: Double, timestamp: String,
                           properties: [(String, String)] = [], coverageRequired: Bool = false) -> String {
        var invariantCases: [String] = []
        var failures = 0, skipped = 0
        for entry in coverage.entries {
            let broken = violations.filter { SoakCoverage.invariant(of: $0.invariant) == entry.name }
            let notRun = entry.checks == 0 && broken.isEmpty ? "not exercised: 0 checks in this run" : nil
            let uncovered = coverageRequired ? notRun.map {
                Failure(type: "notExercised", message: $0 + " (--require-coverage)",
                        text: "\(entry.name) was never checked, and coverage is required: the run proves nothing about it (exit 3)")
            } : nil
            if !broken.isEmpty || uncovered != nil { failures += 1 } else if notRun != nil { skipped += 1 }
            invariantCases.append(testCase("pushwoosh-soak.invariants", entry.name, failure: broken, skipped: notRun,
                                           output: "\(entry.checks) check\(entry.checks == 1 ? "" : "s"): \(entry.holds)", other: uncovered))
        }
        let harness = violations.filter { SoakCoverage.invariant(of: $0.invariant) == nil }
        if !harness.isEmpty { failures += 1 }
        invariantCases.append(testCase("pushwoosh-soak.invariants", "harness", failure: harness, skipped: nil,
                                       output: "the runner's own calls: the agents' sockets, the emulator's admin API, the device clocks"))
        var agentCases: [String] = []
        var agentFailures = 0
        for (i, agent) in agents.enumerated() {
            let broken = violations.filter { $0.agent == i }
            if !broken.isEmpty { agentFailures += 1 }
            agentCases.append(testCase("pushwoosh-soak.agents", agent.name, failure: broken, skipped: nil, output: agent.details))
        }
        let total = invariantCases.count + agentCases.count
        return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            + "<testsuites name=\"pushwoosh-soak\" tests=\"\(total)\" failures=\"\(failures + agentFailures)\" errors=\"0\" skipped=\"\(skipped)\" "
            + "time=\"\(String(format: "%.3f", seconds))\">\n"
            + suite("pushwoosh-soak invariants", cases: invariantCases, failures: failures, skipped: skipped, seconds: seconds,
                    timestamp: timestamp, properties: properties)
            + suite("pushwoosh-soak agents", cases: agentCases, failures: agentFailures, skipped: 0, seconds: seconds, timestamp: timestamp)
            + "</testsuites>\n"
    }

    /// A run refused before it started (a usage error, exit 2; coverage it cannot give, exit 3):
    /// one failed test case per reason (`name`: the invariant, or `usage`), so that CI sees
    /// the refusal rather than no report at all.
    public static func refusal(_ reasons: [(name: String, why: String)], exitCode: Int32, summary: String, timestamp: String,
                               properties: [(String, String)] = []) -> String {
        let cases = reasons.map { r in
            testCase("pushwoosh-soak.refused", r.name, failure: [], skipped: nil, output: summary,
                     other: Failure(type: "refused", message: "refused (exit \(exitCode)): \(r.why)", text: summary))
        }
        return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            + "<testsuites name=\"pushwoosh-soak\" tests=\"\(cases.count)\" failures=\"\(cases.count)\" errors=\"0\" skipped=\"0\" time=\"0.000\">\n"
            + suite("pushwoosh-soak refused", cases: cases, failures: cases.count, skipped: 0, seconds: 0, timestamp: timestamp,
                    properties: [("result", "refused"), ("exitCode", "\(exitCode)")] + properties)
            + "</testsuites>\n"
    }

    /// A command line refused with a usage error (exit 2) that names a JUnit file: that file,
    /// written with the refusal as a failure; nil when the line names none (or it cannot be written).
    public static func writeUsageRefusal(arguments: [String], error: SoakOptionError, timestamp: String) -> String? {
        guard error.exitCode == 2, let at = arguments.lastIndex(of: "--junit"), at + 1 < arguments.count else { return nil }
        let file = arguments[at + 1]
        guard !file.isEmpty, !file.hasSuffix("/") else { return nil }
        let xml = refusal([(name: "usage", why: error.description.components(separatedBy: "\n").first ?? "")], exitCode: 2,
                          summary: error.description, timestamp: timestamp)
        do {
            try checkOutputDirectory(parentDirectory(file), for: "the JUnit report")
            try writeFileReplacing(file, xml, for: "the JUnit report")
        } catch {
            return nil
        }
        return file
    }
}

/// One armed fault as the run saw it (summary.json `faults`, the timeline's spans): what it
/// was, the devices it could hit (nil: every device), from its arming to its end, and how many
/// requests it failed.
public struct FaultRecord: Sendable, Equatable {
    public var method: String
    public var kind: String
    public var agent: Int?
    public var from: Time
    public var to: Time
    public var requestsHit: Int
    public var retryAfter: Double?
    public var forSeconds: Double?

    /// Each armed fault (its times already in the run's clock): from its arming to the end of
    /// its window (`forSeconds`; a counted one to its last request once its `times` are
    /// spent), else to the last request it failed before the next fault was armed (one fault
    /// is armed at a time), else, when it never fired, to the next arming or the run's end.
    public static func all(_ armed: [ArmedFault], faulted: [DeviceCall], hwids: [String], end: Time) -> [FaultRecord] {
        let sorted = armed.sorted { $0.start < $1.start }
        return sorted.enumerated().map { k, fault in
            let next = k + 1 < sorted.count ? sorted[k + 1].start : end
            let hwid = fault.agent.flatMap { $0 < hwids.count ? hwids[$0] : nil }
            let fired = faulted.filter {
                $0.method == fault.method && $0.fault != nil && $0.time >= fault.start && $0.time < next && (hwid == nil || $0.hwid == hwid)
            }
            let times = fault.json["times"]?.numberValue.map { Int($0) }
            let stop: Time
            if let window = fault.window {
                stop = times.map { fired.count >= $0 } == true ? fired.map(\.time).max() ?? window.to : min(window.to, end)
            } else {
                stop = fired.map(\.time).max() ?? next
            }
            return FaultRecord(method: fault.method, kind: fault.kindName, agent: fault.agent, from: fault.start, to: max(fault.start, stop),
                               requestsHit: fired.count, retryAfter: fault.retryAfter, forSeconds: fault.json["forSeconds"]?.numberValue)
        }
    }

    /// summary.json's entry: kind, devices, from, to, requests hit.
    public var json: JSONValue {
        [
            "method": .string(method), "kind": .string(kind),
            "devices": agent.map { .array([.number(Double($0))]) } ?? "all",
            "from": .string(iso8601(from)), "to": .string(iso8601(to)),
            "hours": .number(((to - from) / 3600 * 1000).rounded() / 1000),
            "requestsHit": .number(Double(requestsHit)),
        ]
    }

    /// The longest fault on every device, in seconds (0 when none).
    public static func longestGlobal(_ records: [FaultRecord]) -> Double {
        records.filter { $0.agent == nil }.map { $0.to - $0.from }.max() ?? 0
    }
}

extension TimelineSpan {
    /// Each armed fault as a span (FaultRecord.all), labelled. `agent`: the one agent it was scoped to.
    public static func faults(_ armed: [ArmedFault], faulted: [DeviceCall], hwids: [String], end: Time) -> [(span: TimelineSpan, agent: Int?)] {
        FaultRecord.all(armed, faulted: faulted, hwids: hwids, end: end).map { r in
            var label = "fault \(r.method): \(r.kind)"
            if let retryAfter = r.retryAfter { label += ", Retry-After \(Int(retryAfter)) s" }
            if let seconds = r.forSeconds { label += ", for \(Int(seconds)) s" }
            if let agent = r.agent { label += ", agent \(agent) only" }
            label += ", hit \(r.requestsHit) request\(r.requestsHit == 1 ? "" : "s")"
            return (TimelineSpan(start: r.from, end: r.to, label: label), r.agent)
        }
    }
}
