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

    static func testCase(_ className: String, _ name: String, failure: [Violation], skipped: String?, output: String) -> String {
        var s = "    <testcase classname=\"\(esc(className))\" name=\"\(esc(name))\" time=\"0\">\n"
        if !failure.isEmpty {
            let first = failure[0]
            let message = "\(failure.count) violation\(failure.count == 1 ? "" : "s"); first: \(first.message)"
            s += "      <failure type=\"\(esc(first.invariant))\" message=\"\(esc(message))\">"
                + esc(failure.map(\.description).joined(separator: "\n\n")) + "</failure>\n"
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
    public static func xml(coverage: SoakCoverage, violations: [Violation], agents: [Agent], seconds: Double, timestamp: String,
                           properties: [(String, String)] = []) -> String {
        var invariantCases: [String] = []
        var failures = 0, skipped = 0
        for entry in coverage.entries {
            let broken = violations.filter { SoakCoverage.invariant(of: $0.invariant) == entry.name }
            let notRun = entry.checks == 0 && broken.isEmpty ? "not exercised: 0 checks in this run" : nil
            if !broken.isEmpty { failures += 1 } else if notRun != nil { skipped += 1 }
            invariantCases.append(testCase("pushwoosh-soak.invariants", entry.name, failure: broken, skipped: notRun,
                                           output: "\(entry.checks) check\(entry.checks == 1 ? "" : "s"): \(entry.holds)"))
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
}

extension TimelineSpan {
    /// Each armed fault as a span (its times already in the timeline's clock): from its
    /// arming to the end of its window (`forSeconds`), else to the last request it failed
    /// before the next fault was armed (one fault is armed at a time), else, when it never
    /// fired, to the next arming or the run's end. `agent`: the one agent it was scoped to.
    public static func faults(_ armed: [ArmedFault], faulted: [DeviceCall], hwids: [String], end: Time) -> [(span: TimelineSpan, agent: Int?)] {
        let sorted = armed.sorted { $0.start < $1.start }
        var spans: [(span: TimelineSpan, agent: Int?)] = []
        for (k, fault) in sorted.enumerated() {
            let next = k + 1 < sorted.count ? sorted[k + 1].start : end
            let hwid = fault.agent.flatMap { $0 < hwids.count ? hwids[$0] : nil }
            let fired = faulted.filter {
                $0.method == fault.method && $0.fault != nil && $0.time >= fault.start && $0.time < next && (hwid == nil || $0.hwid == hwid)
            }
            let stop: Time
            if let window = fault.window { stop = min(window.to, end) } else { stop = fired.map(\.time).max() ?? next }
            var label = "fault \(fault.method): \(fault.kindName)"
            if let retryAfter = fault.retryAfter { label += ", Retry-After \(Int(retryAfter)) s" }
            if let seconds = fault.json["forSeconds"]?.numberValue { label += ", for \(Int(seconds)) s" }
            if let agent = fault.agent { label += ", agent \(agent) only" }
            label += ", hit \(fired.count) request\(fired.count == 1 ? "" : "s")"
            spans.append((TimelineSpan(start: fault.start, end: max(fault.start, stop), label: label), fault.agent))
        }
        return spans
    }
}
