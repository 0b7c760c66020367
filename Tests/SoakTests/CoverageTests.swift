import AgentCore
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
@testable import Soak
import Glibc
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

/// CI sees what the run saw: with required coverage an invariant never checked fails, and a
/// refused run still writes its JUnit file, the refusal as a failure.
@Suite struct JUnitCoverageAndRefusalTests {
    @Test func withRequiredCoverageAnInvariantNeverCheckedIsAFailure() throws {
        let coverage = SoakCoverage(checks: Dictionary(uniqueKeysWithValues: SoakCoverage.catalogue.map { ($0.name, $0.name == "expiry" ? 0 : 3) }))
        let agents: [JUnitReport.Agent] = [.init(name: "agent 0 (h0)", details: "x")]
        let required = JUnitReport.xml(coverage: coverage, violations: [], agents: agents, seconds: 1, timestamp: "t", coverageRequired: true)
        let (root, cases, _) = try JUnitReportTests.cases(required)
        #expect(cases["expiry"]?.failure == "not exercised: 0 checks in this run (--require-coverage)")
        #expect(cases["expiry"]?.skipped == nil)
        #expect(root["failures"] == "1" && root["skipped"] == "0")
        // Without it, the same run skips the invariant.
        let optional = JUnitReport.xml(coverage: coverage, violations: [], agents: agents, seconds: 1, timestamp: "t")
        let (root2, cases2, _) = try JUnitReportTests.cases(optional)
        #expect(cases2["expiry"]?.failure == nil && cases2["expiry"]?.skipped != nil)
        #expect(root2["failures"] == "0" && root2["skipped"] == "1")
    }

    @Test func aRefusedRunIsAFailurePerReason() throws {
        let xml = JUnitReport.refusal([("expiry", "needs at least 1 device-day"), ("outage", "needs at least 3 agents")], exitCode: 3,
                                      summary: "cannot check", timestamp: "t")
        let (root, cases, order) = try JUnitReportTests.cases(xml)
        #expect(order == ["expiry", "outage"])
        #expect(cases["outage"]?.failure == "refused (exit 3): needs at least 3 agents")
        #expect(root["failures"] == "2" && root["tests"] == "2")
    }

    @Test func aUsageErrorWritesTheJUnitFileItNames() throws {
        let dir = try OutputFileTests.directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let arguments = ["--real-timings", "--lifetime", "60s", "--junit", dir + "/j.xml"]
        var refused: SoakOptionError?
        do { _ = try SoakOptions.parse(arguments) } catch { refused = error }
        let error = try #require(refused)
        #expect(JUnitReport.writeUsageRefusal(arguments: arguments, error: error, timestamp: "t") == dir + "/j.xml")
        let (_, cases, _) = try JUnitReportTests.cases(try String(contentsOfFile: dir + "/j.xml", encoding: .utf8))
        #expect(cases["usage"]?.failure?.hasPrefix("refused (exit 2): --lifetime cannot be used with --real-timings") == true, "\(cases)")
        // --help is no refusal; a line without --junit writes nothing.
        #expect(JUnitReport.writeUsageRefusal(arguments: ["--help", "--junit", dir + "/h.xml"], error: SoakOptionError("--help", .help), timestamp: "t") == nil)
        #expect(JUnitReport.writeUsageRefusal(arguments: ["--lifetime", "x"], error: error, timestamp: "t") == nil)
    }
}

/// The run's outputs are written as `--record`'s: a temporary beside the file, created
/// O_EXCL|O_NOFOLLOW, renamed; nothing planted is followed; a directory others can write is refused.
@Suite struct OutputFileTests {
    static func directory() throws -> String {
        let dir = NSTemporaryDirectory() + "soak-out-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try #require(mkdir(dir, 0o755) == 0)
        return dir
    }

    @Test func aPlantedTemporarySymlinkIsLeftUntouched() throws {
        let dir = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // Someone plants report.html.tmp pointing at a file of theirs (and one at nothing).
        let victim = dir + "/victim"
        try "theirs\n".write(toFile: victim, atomically: false, encoding: .utf8)
        try #require(symlink(victim, dir + "/report.html.tmp") == 0)
        try #require(symlink(dir + "/nowhere", dir + "/summary.json.tmp") == 0)
        try writeFileReplacing(dir + "/report.html", "<html/>\n", for: "report.html")
        try writeFileReplacing(dir + "/summary.json", "{}\n", for: "summary.json")
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "theirs\n")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: dir + "/report.html.tmp") == victim)
        #expect(!FileManager.default.fileExists(atPath: dir + "/nowhere"))
        #expect(try String(contentsOfFile: dir + "/report.html", encoding: .utf8) == "<html/>\n")
        #expect(try String(contentsOfFile: dir + "/summary.json", encoding: .utf8) == "{}\n")
        var info = stat()
        #expect(lstat(dir + "/report.html", &info) == 0 && info.st_mode & S_IFMT == S_IFREG && info.st_mode & 0o777 == 0o644)
        // No temporary left behind: only the two outputs, the victim and the planted links.
        let left = try FileManager.default.contentsOfDirectory(atPath: dir).sorted()
        #expect(left == ["report.html", "report.html.tmp", "summary.json", "summary.json.tmp", "victim"])
        // A file replaced by a symlink is replaced, the link's target untouched.
        unlink(dir + "/report.html")
        try #require(symlink(victim, dir + "/report.html") == 0)
        try writeFileReplacing(dir + "/report.html", "new\n", for: "report.html")
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "theirs\n")
        #expect(lstat(dir + "/report.html", &info) == 0 && info.st_mode & S_IFMT == S_IFREG)
    }

    @Test func anOutputDirectoryOthersCanWriteIsRefused() throws {
        let dir = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        chmod(dir, 0o777)
        var options = try SoakOptions.parse(["--quiet"])
        options.reportDirectory = dir
        let runner = SoakRunner(options: options)
        do {
            try runner.prepareOutputs()
            Issue.record("a directory others can write was taken")
        } catch {
            guard case .unsafeDirectory(let unsafe) = error else { Issue.record("\(error)"); return }
            #expect(unsafe.path == dir)
            #expect(error.description.contains("refusing to write the report into \(dir)"), "\(error)")
        }
        chmod(dir, 0o755)
        options.junitFile = dir + "/ci/junit.xml"
        try SoakRunner(options: options).prepareOutputs()
        chmod(dir + "/ci", 0o775)
        #expect(throws: SoakError.self) { try SoakRunner(options: options).prepareOutputs() }
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

/// The progress line's `checks` is the coverage's sum (it once left out starts, stops,
/// restarts, crashes and the plan's checks: `checks 692` against a coverage of 1,039).
@Suite struct ProgressLineTests {
    @Test func theProgressLinesChecksAreTheCoveragesSum() throws {
        let runner = SoakRunner(options: try SoakOptions.parse(["--agents", "2", "--quiet"]))
        runner.recorder.action(AgentAction(agent: 0, kind: .started, start: 1, end: 2))
        runner.recorder.action(AgentAction(agent: 1, kind: .started, start: 1, end: 2))
        runner.recorder.action(AgentAction(agent: 1, kind: .stopped(signal: SIGTERM), start: 3, end: 3))
        runner.recorder.state.withLock { $0.tracks[0].pids = [10]; $0.tracks[1].pids = [11] }
        let line = runner.progressLine()
        let checks = try #require(line.components(separatedBy: "· checks ").last?.split(separator: " ").first.flatMap { Int($0) })
        let coverage = runner.coverage(runner.recorder.state.withLock { $0 })
        #expect(checks == coverage.total, "\(line)")
        #expect(checks == 2 + 1 + 1 + 3, "two starts, a stop, a restart, three processes watched for a crash")
    }
}
