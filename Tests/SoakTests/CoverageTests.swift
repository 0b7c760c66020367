import AgentCore
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import Soak
import Testing

@Suite struct CoverageTests {
    @Test func notExercisedNamesTheInvariantsCheckedZeroTimes() {
        let coverage = SoakCoverage(checks: ["lifetime": 12, "cadence": 3, "ready": 2, "stop": 2, "crash": 3, "user": 9])
        #expect(coverage.entries.map(\.name) == SoakCoverage.catalogue.map(\.name))
        #expect(coverage.notExercised == ["expiry", "status", "userSwitch", "killed", "storm", "retryAfter", "throttle", "impressions",
                                          "outage", "restart", "cache", "watchdog"])
        #expect(coverage.json["lifetime"] == 12 && coverage.json["retryAfter"] == 0)
        #expect(coverage.json.objectValue?.count == SoakCoverage.catalogue.count)
        #expect(coverage.lines == [
            "coverage (checks per invariant): lifetime 12, expiry 0, status 0, user 9, userSwitch 0, killed 0, cadence 3, storm 0, "
                + "retryAfter 0, throttle 0, impressions 0, outage 0, ready 2, stop 2, restart 0, cache 0, watchdog 0, crash 3",
            "not exercised: expiry, status, userSwitch, killed, storm, retryAfter, throttle, impressions, outage, restart, cache, watchdog",
        ])
        let all = SoakCoverage(checks: Dictionary(uniqueKeysWithValues: SoakCoverage.catalogue.map { ($0.name, 1) }))
        #expect(all.notExercised.isEmpty && all.lines.last == "not exercised: none")
    }

    /// Every invariant name a check of the runner can report belongs to a catalogue entry
    /// (or is one of the runner's own failures): a new check cannot go uncounted.
    @Test func everyViolationTheRunnerReportsHasAnInvariant() throws {
        let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/Soak")
        var names: Set<String> = []
        for file in try FileManager.default.contentsOfDirectory(atPath: sources.path) where file.hasSuffix(".swift") {
            let text = try String(contentsOf: sources.appendingPathComponent(file), encoding: .utf8)
            for marker in ["Violation(\"", "violation(\""] {
                for piece in text.components(separatedBy: marker).dropFirst() {
                    names.insert(String(piece.prefix { $0 != "\"" }))
                }
            }
        }
        #expect(names.count >= 15, "\(names.sorted())")
        let harness: Set<String> = ["socket", "emulator", "clock"]
        for name in names.sorted() where !harness.contains(name) {
            #expect(SoakCoverage.invariant(of: name) != nil, "\(name) is reported but counted by no invariant")
        }
        #expect(SoakCoverage.invariant(of: "provenance") == "user" && SoakCoverage.invariant(of: "socket") == nil)
        #expect(Set(SoakCoverage.catalogue.map(\.name)).count == SoakCoverage.catalogue.count)
    }
}

@Suite struct JUnitReportTests {
    /// Test cases by name: (failure message, skipped message) from the parsed document.
    static func cases(_ xml: String) throws -> (root: [String: String], cases: [String: (failure: String?, skipped: String?)], order: [String]) {
        let (ok, counter, error) = parseXML(Data(xml.utf8))
        try #require(ok, "\(error ?? "")")
        var cases: [String: (failure: String?, skipped: String?)] = [:]
        var order: [String] = []
        var current: String?
        for (name, attributes) in counter.elements {
            switch name {
            case "testcase":
                current = attributes["name"]
                order.append(current ?? "")
                cases[current ?? ""] = (nil, nil)
            case "failure": cases[current ?? ""]?.failure = attributes["message"]
            case "skipped": cases[current ?? ""]?.skipped = attributes["message"]
            default: break
            }
        }
        return (counter.elements.first { $0.name == "testsuites" }?.attributes ?? [:], cases, order)
    }

    @Test func aCasePerInvariantAndPerAgent() throws {
        let coverage = SoakCoverage(checks: ["lifetime": 40, "cadence": 7, "ready": 2, "stop": 2, "crash": 3])
        let violations = [
            Violation("cadence", agent: 1, time: 100, "requests 95 s apart <expected ≤ 18 s> & more", evidence: ["a", "b"]),
            Violation("cadence", agent: 1, time: 200, "again"),
            Violation("provenance", agent: 0, time: 150, "served flags from no request"),
            Violation("emulator", agent: nil, time: 160, "cannot read the request log"),
        ]
        let xml = JUnitReport.xml(coverage: coverage, violations: violations,
                                  agents: [.init(name: "agent 0 (h0)", details: "x"), .init(name: "agent 1 (h1)", details: "y"),
                                           .init(name: "agent 2 (h2)", details: "z")],
                                  seconds: 12.5, timestamp: "2027-01-15T08:00:00.000Z", properties: [("seed", "7")])
        let (root, cases, order) = try Self.cases(xml)
        #expect(order == SoakCoverage.catalogue.map(\.name) + ["harness", "agent 0 (h0)", "agent 1 (h1)", "agent 2 (h2)"])
        #expect(cases["cadence"]?.failure == "2 violations; first: requests 95 s apart <expected ≤ 18 s> & more")
        #expect(cases["user"]?.failure == "1 violation; first: served flags from no request")
        #expect(cases["harness"]?.failure == "1 violation; first: cannot read the request log")
        #expect(cases["lifetime"]?.failure == nil && cases["lifetime"]?.skipped == nil)
        #expect(cases["retryAfter"]?.skipped == "not exercised: 0 checks in this run")
        #expect(cases["user"]?.skipped == nil)  // broken, so exercised whatever it counted
        #expect(cases["agent 1 (h1)"]?.failure == "2 violations; first: requests 95 s apart <expected ≤ 18 s> & more")
        #expect(cases["agent 2 (h2)"]?.failure == nil)
        let skipped = coverage.notExercised.filter { $0 != "user" }.count
        #expect(root["tests"] == "\(SoakCoverage.catalogue.count + 1 + 3)")
        #expect(root["failures"] == "5")  // cadence, user, harness; agents 0 and 1
        #expect(root["skipped"] == "\(skipped)")
        #expect(xml.contains("<property name=\"seed\" value=\"7\"/>"))
        #expect(xml.contains("    b"))  // the evidence travels in the failure's text
    }
}

@Suite struct FaultSpanTests {
    @Test func eachFaultFromItsArmingToItsEnd() {
        let window = ArmedFault(method: "getFeatureFlags", start: 100, end: 100.2,
                                json: ["method": "getFeatureFlags", "hwid": "h1", "forSeconds": 600, "drop": true], agent: 1)
        let counted = ArmedFault(method: "getFeatureFlags", start: 900, end: 900.1,
                                 json: ["method": "getFeatureFlags", "http": 503, "retryAfter": 10, "times": 2])
        let silent = ArmedFault(method: "postEvent", start: 1500, end: 1500.1, json: ["method": "postEvent", "http": 500])
        let calls = [
            DeviceCall(time: 300, method: "getFeatureFlags", hwid: "h1", userId: "u", status: nil, fault: "drop"),
            DeviceCall(time: 950, method: "getFeatureFlags", hwid: "h0", userId: "u", status: 503, fault: "http"),
            DeviceCall(time: 1200, method: "getFeatureFlags", hwid: "h1", userId: "u", status: 503, fault: "http"),
        ]
        let spans = TimelineSpan.faults([counted, window, silent], faulted: calls, hwids: ["h0", "h1"], end: 2000)
        #expect(spans.count == 3)
        #expect(spans[0].agent == 1 && spans[0].span == TimelineSpan(start: 100, end: 700,
                                                                      label: "fault getFeatureFlags: drop, for 600 s, agent 1 only, hit 1 request"))
        #expect(spans[1].agent == nil && spans[1].span == TimelineSpan(start: 900, end: 1200,
                                                                        label: "fault getFeatureFlags: http 503, Retry-After 10 s, hit 2 requests"))
        // Never fired: armed until the run's end.
        #expect(spans[2].span == TimelineSpan(start: 1500, end: 2000, label: "fault postEvent: http 500, hit 0 requests"))
    }
}
