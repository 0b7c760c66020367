import AgentCore
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import Glibc
import HarnessSupport
@testable import Soak
import Testing

/// Counts elements by name while parsing.
final class ElementCounter: NSObject, XMLParserDelegate {
    var counts: [String: Int] = [:]
    var texts: [String] = []
    /// Each element's attributes, in document order.
    var elements: [(name: String, attributes: [String: String])] = []
    /// The text of every `<title>`.
    var titles: [String] = []
    private var inTitle = false
    func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?,
                attributes: [String: String] = [:]) {
        counts[name, default: 0] += 1
        elements.append((name, attributes))
        if name == "title" { inTitle = true; titles.append("") }
    }
    func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
        if name == "title" { inTitle = false }
    }
    func parser(_ parser: XMLParser, foundCharacters string: String) {
        texts.append(string)
        if inTitle { titles[titles.count - 1] += string }
    }
}

func parseXML(_ data: Data) -> (ok: Bool, counter: ElementCounter, error: String?) {
    let parser = XMLParser(data: data)
    let counter = ElementCounter()
    parser.delegate = counter
    let ok = parser.parse()
    return (ok, counter, parser.parserError.map { "\($0)" })
}

@Suite struct TimelineSVGTests {
    @Test func theTimelineIsWellFormedSVG() {
        var lane = TimelineLane(title: "agent 0 <A&B> \"x\"")
        lane.refreshes = [RefreshMark(time: 10, succeeded: true), RefreshMark(time: 25, succeeded: false, status: 503, fault: "http"),
                          RefreshMark(time: 40, succeeded: true, fault: "partial"), RefreshMark(time: 42, succeeded: false, status: nil, fault: "drop")]
        lane.users = [(15, "bob <b>")]
        lane.faults = [TimelineSpan(start: 20, end: 28, label: "fault getFeatureFlags: drop, agent 0 only")]
        lane.restarts = [(30, SIGTERM), (50, SIGKILL)]
        lane.readies = [31, 51]
        lane.background = [(12, 18), (55, nil)]
        lane.tracked = [(5, .none), (11, .on), (20, .killed), (35, .absent), (45, .off)]
        lane.ages = [(5, nil), (11, 1), (20, 10), (26, 0.5), (30, nil), (31, 6), (59, 34)]
        lane.violations = [ViolationMark(time: 44, invariant: "cadence", message: "no getFeatureFlags for 40 s")]
        let data = TimelineData(title: "soak & <test>", start: 0, end: 60, lifetime: 60, refreshInterval: 15,
                                trackedFlag: "new_checkout", lanes: [lane, TimelineLane(title: "agent 1")], clock: "device time",
                                faults: [TimelineSpan(start: 30, end: 45, label: "fault getFeatureFlags: http 503, Retry-After 10 s")],
                                flagChanges: [(33, "kill new_checkout")])
        let svg = TimelineSVG.render(data)
        let (ok, counter, error) = parseXML(Data(svg.utf8))
        #expect(ok, "\(error ?? "")")
        // Every request is drawn with its tooltip; faults, flag changes and user switches are marked.
        let titles = counter.titles
        #expect(titles.filter { $0.hasPrefix("getFeatureFlags at ") }.count == 4)
        #expect(titles.contains("getFeatureFlags at 1970-01-01T00:00:25.000Z (device time): failed, HTTP 503 (fault http)" + " · agent 0 <A&B> \"x\""))
        #expect(titles.contains("getFeatureFlags at 1970-01-01T00:00:42.000Z (device time): failed, dropped (fault drop)" + " · agent 0 <A&B> \"x\""))
        #expect(titles.contains("getFeatureFlags at 1970-01-01T00:00:10.000Z (device time): ok, HTTP 200" + " · agent 0 <A&B> \"x\""))
        #expect(titles.contains { $0.hasPrefix("fault getFeatureFlags: http 503, Retry-After 10 s from 1970-01-01T00:00:30.000Z") })
        #expect(titles.contains { $0.hasPrefix("fault getFeatureFlags: drop, agent 0 only from") })
        #expect(titles.contains("flag change: kill new_checkout at 1970-01-01T00:00:33.000Z (device time)"))
        #expect(titles.contains("user switch to bob <b> at 1970-01-01T00:00:15.000Z (device time) · agent 0 <A&B> \"x\""))
        #expect(titles.contains { $0.hasPrefix("SIGKILL at") })
        #expect(counter.texts.joined().contains("time axis: device time"))
        #expect(counter.counts["svg"] == 1)
        #expect(counter.counts["g"] == 2)
        #expect((counter.counts["polyline"] ?? 0) >= 1)
        #expect(counter.texts.joined().contains("agent 0 <A&B> \"x\""))
        #expect(svg.contains("&lt;A&amp;B&gt;"))
        // Each violation mark names its invariant, in its title and beside it.
        #expect(titles.contains("violation [cadence] at 1970-01-01T00:00:44.000Z · agent 0 <A&B> \"x\": no getFeatureFlags for 40 s"))
        #expect(counter.texts.contains("cadence"))
    }

    /// Every colour of the legend means one thing (user switch and discarded, refresh failed and
    /// killed once shared theirs), and "no flags" is not the lane's own background (a device not
    /// yet observed).
    @Test func theLegendsColoursAreDistinct() {
        let colours = TimelineSVG.legendEntries.map(\.color) + TimelineSVG.stateLegend.map(\.color)
            + [TimelineSVG.ageColor, TimelineSVG.violationColor]
        #expect(Set(colours.map { $0.lowercased() }).count == colours.count, "\(colours)")
        #expect(TimelineSVG.stateColor(.none) != TimelineSVG.notObservedColor && TimelineSVG.stateColor(.none) != "#ffffff")
        let svg = TimelineSVG.render(TimelineData(title: "t", start: 0, end: 60, lifetime: 60, refreshInterval: 15, trackedFlag: "f", lanes: []))
        for (_, label) in TimelineSVG.legendEntries + TimelineSVG.stateLegend { #expect(svg.contains(">\(label)<"), "\(label)") }
    }

    @Test func manyLanesAndPointsStayBounded() {
        var lanes: [TimelineLane] = []
        for i in 0..<(TimelineSVG.maxLanes + 5) {
            var lane = TimelineLane(title: "agent \(i)")
            lane.ages = (0..<10_000).map { (Double($0) * 0.36, Double($0 % 100) * 0.6) }
            lanes.append(lane)
        }
        let svg = TimelineSVG.render(TimelineData(title: "big", start: 0, end: 3600, lifetime: 60, refreshInterval: 15,
                                                  trackedFlag: "f", lanes: lanes))
        let (ok, counter, error) = parseXML(Data(svg.utf8))
        #expect(ok, "\(error ?? "")")
        #expect(counter.counts["g"] == TimelineSVG.maxLanes)
        #expect(svg.contains("5 more agents not drawn"))
    }

    @Test func prettyJSONIsJSON() throws {
        let v: JSONValue = ["b": [1, 2, ["x": "y"]], "a": "s\"q", "c": [:], "d": []]
        let text = prettyJSON(v)
        let back = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
        #expect(back == v)
    }
}

/// One short run of the real binaries (the debug build next to this test bundle).
/// Serialized: each run blocks one of Swift Testing's cooperative threads (two on this
/// 2-core host) for its whole duration; two at once starved the async emulator tests,
/// whose timing checks then failed (a 2-s bound measured 20 s).
@Suite(.serialized) struct RealRunTests {
    static var binDirectory: String? {
        var candidates = [URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().path]
        if let env = ProcessInfo.processInfo.environment["SOAK_BIN"] { candidates.insert(env, at: 0) }
        // Inside the .xctest bundle on some layouts.
        candidates.append(URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().deletingLastPathComponent().path)
        return candidates.first { dir in
            ["pushwoosh-soak", "pushwoosh-agentd", "pushwoosh-emulator"].allSatisfy { FileManager.default.isExecutableFile(atPath: dir + "/" + $0) }
        }
    }

    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// Runs the real soak runner; its exit status, standard error, summary.json, timeline.svg,
    /// report.html and its JUnit XML (`--junit`); the files a refused run does not write are empty.
    static func soak(_ arguments: [String]) throws -> (status: Int32, output: String, summary: JSONValue, svg: Data, junit: Data, html: Data)? {
        guard let bin = Self.binDirectory else {
            Issue.record("pushwoosh-soak, pushwoosh-agentd and pushwoosh-emulator not found next to the test bundle (\(CommandLine.arguments[0])); set SOAK_BIN")
            return nil
        }
        let report = NSTemporaryDirectory() + "soak-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        defer { try? FileManager.default.removeItem(atPath: report) }
        let soak = try runCapturing(bin + "/pushwoosh-soak", arguments + [
            "--bin", bin, "--report", report, "--apps", Self.repository + "/config/flags.example.json", "--quiet", "--junit", report + "/junit.xml",
        ])
        let summary = try JSONDecoder().decode(JSONValue.self, from: Data(contentsOf: URL(fileURLWithPath: report + "/summary.json")))
        func file(_ name: String) -> Data { (try? Data(contentsOf: URL(fileURLWithPath: report + "/" + name))) ?? Data() }
        return (soak.status, soak.err, summary, file("timeline.svg"), file("junit.xml"), file("report.html"))
    }

    /// Seed 864767728: the run ended while a driver was restarting its agent; the
    /// runner stopped reading the notify sockets, so the new process's READY=1 went unseen
    /// ("no READY=1 within 10 s") and, its notify queue full, the agent hung in a blocking
    /// sd_notify ("still running 5 s after SIGTERM"). With a restart every second on six
    /// agents, some restart always spans the end (4 of 4 runs failed before the fix).
    @Test(.timeLimit(.minutes(2)))
    func theEndOfTheRunDuringRestartsIsClean() throws {
        guard let run = try Self.soak(["--duration", "15s", "--agents", "6", "--seed", "864767728", "--restart-every", "1s",
                                       "--chaos-every", "1.5s", "--pace", "0.4s", "--keep-going"]) else { return }
        #expect(run.status == 0, "\(run.output)")
        #expect(run.summary["result"] == "pass")
        #expect(run.summary["violations"]?.arrayValue?.isEmpty == true, "\(run.output)")
        // The report names every process each agent ran as: one more than its restarts
        // that started again (a restart at the very end leaves the agent down).
        for agent in run.summary["perAgent"]?.arrayValue ?? [] {
            let pids = agent["pids"]?.arrayValue?.compactMap(\.numberValue) ?? []
            let restarts = agent["restarts"]?.numberValue ?? -1
            #expect(!pids.isEmpty && Set(pids).count == pids.count)
            #expect(Double(pids.count) == restarts + 1 || Double(pids.count) == restarts, "\(agent)")
        }
    }

    /// docs/device-clock.md H: the SDK's real timings (24 h, 30 min, 1 h, 5 min) on controlled device
    /// clocks, stepped together with the emulator's: a device day in seconds, every invariant
    /// checked (docs/soak.md "Coverage steers the chaos"), the expiry among them. (It failed
    /// one run in four when the clock's first step came before an agent's first start: that
    /// agent then ran 600 s behind the others' device time. The first step now waits.)
    @Test(.timeLimit(.minutes(2)))
    func aDeviceDayOfThreeAgentsWithTheRealTimingsCoversEverything() throws {
        guard let run = try Self.soak(["--real-timings", "--device-days", "1", "--speed", "4000", "--agents", "3", "--seed", "1202",
                                       "--keep-going"]) else { return }
        #expect(run.status == 0, "\(run.output)")
        #expect(run.summary["result"] == "pass")
        #expect(run.summary["timings"]?["lifetimeSeconds"] == 86_400)
        // In the run's own terms: device days, no unused duration.
        #expect(run.summary["deviceDays"] == 1 && run.summary["durationSeconds"] == .null)
        #expect(run.output.contains(", 1 device-day, "), "\(run.output)")
        #expect(run.summary["realTimings"]?["deviceDays"] == 1)
        #expect((run.summary["realTimings"]?["deviceDaysCovered"]?.numberValue ?? 0) >= 1)
        #expect(run.summary["notExercised"]?.arrayValue?.isEmpty == true, "\(run.output)")
        #expect(run.summary["checks"] == run.summary["coverage"])
        let total = try #require(run.summary["counts"]?["total"])
        #expect((total["expiries"]?.numberValue ?? 0) >= 1, "\(total)")
        #expect((total["userSwitches"]?.numberValue ?? 0) >= 1 && (total["restarts"]?.numberValue ?? 0) >= 1)
        #expect((total["notSentThrottled"]?.numberValue ?? 0) >= 1)
        let triggers = try #require(total["refreshesByTrigger"]?.objectValue)
        #expect(Set(triggers.keys) == Set(HeardCounts.triggerNames))
        #expect((triggers["periodic"]?.numberValue ?? 0) > 0 && (triggers["sessionStart"]?.numberValue ?? 0) > 0)
        let perAgent = run.summary["perAgent"]?.arrayValue ?? []
        #expect(perAgent.count == 3 && perAgent.allSatisfy { $0["counts"]?["refreshesByTrigger"] != nil })
        // Every request heard as sent is in the log (the subscription starts before anything can refresh).
        let heard = triggers.values.compactMap(\.numberValue).reduce(0, +)
        #expect(heard == total["flagsRequests"]?.numberValue, "\(total)")
        // report.html: a lane per agent, nothing fetched.
        let html = String(decoding: run.html, as: UTF8.self)
        let page = try ReportHTMLTests.parse(html)
        #expect(page.elements.compactMap { $0.attributes["id"] }.filter { $0.hasPrefix("lane-") } == ["lane-0", "lane-1", "lane-2"])
        #expect(!html.contains("http://") && !html.contains("https://") && !html.contains("<script"))
        #expect((run.summary["realTimings"]?["clockSteps"]?.numberValue ?? 0) > 50)
        #expect((run.summary["checks"]?["cadence"]?.numberValue ?? 0) > 0)
        let requests = run.summary["counts"]?["requestsByMethod"]?["getFeatureFlags"]?.numberValue ?? 0
        #expect(requests >= 3 * 10)

        // The report shows the run: the axis is device time and every flags request is drawn
        // with its tooltip, spread over the half day (not piled up at the real run's end).
        let svg = parseXML(run.svg)
        #expect(svg.ok)
        #expect(svg.counter.texts.joined().contains("time axis: device time"))
        let marks = svg.counter.titles.filter { $0.hasPrefix("getFeatureFlags at ") }
        #expect(Double(marks.count) == requests, "\(marks.count) drawn of \(requests)")
        #expect(Set(svg.counter.titles).count == svg.counter.titles.count, "no title twice")
        #expect(marks.allSatisfy { $0.contains("(device time): ok, HTTP 200") || $0.contains("(device time): failed, ") })
        // Agent 1's requests (agent 0 keeps its flags for the expiry: one request).
        let xs = svg.counter.elements.filter { $0.name == "line" && $0.attributes["y1"] == "228.0" }.compactMap { Double($0.attributes["x1"] ?? "") }
        #expect(Set(xs).count >= 10, "\(xs)")
        // What was checked, and what never was, in summary.json, the last lines and the JUnit report.
        let coverage = try #require(run.summary["coverage"]?.objectValue)
        #expect(Set(coverage.keys) == Set(SoakCoverage.catalogue.map(\.name)))
        #expect((coverage["cadence"]?.numberValue ?? 0) > 0)
        let zero = SoakCoverage.catalogue.map(\.name).filter { coverage[$0]?.numberValue == 0 }
        #expect(run.summary["notExercised"]?.arrayValue?.compactMap(\.stringValue) == zero)
        let last = run.output.split(separator: "\n").suffix(4).joined(separator: "\n")
        #expect(last.contains("coverage (checks per invariant): lifetime "), "\(last)")
        #expect(last.contains("not exercised: " + (zero.isEmpty ? "none" : zero.joined(separator: ", "))), "\(last)")
        let (root, cases, order) = try JUnitReportTests.cases(String(decoding: run.junit, as: UTF8.self))
        #expect(order == SoakCoverage.catalogue.map(\.name) + ["harness"] + order.suffix(3))
        #expect(order.suffix(3).allSatisfy { $0.hasPrefix("agent ") })
        #expect(root["failures"] == "0" && root["skipped"] == "\(zero.count)")
        #expect(zero.allSatisfy { cases[$0]?.skipped != nil })
    }

    /// --require-coverage refuses a run that cannot cover every invariant, before starting
    /// anything, naming each invariant and why.
    @Test(.timeLimit(.minutes(1)))
    func aTooShortRunIsRefusedWithExit3() throws {
        guard let short = try Self.soak(["--real-timings", "--device-days", "0.1", "--agents", "3", "--seed", "1"]) else { return }
        #expect(short.status == 3, "\(short.output)")
        #expect(short.output.contains("cannot check: expiry (needs at least 1 device-day"), "\(short.output)")
        #expect(short.summary["result"] == "refused")
        #expect(short.summary["notCoverable"]?.arrayValue?.compactMap { $0["invariant"]?.stringValue } == ["expiry"])
        // CI is told: the JUnit file has the refusal as a failure.
        let (root, cases, _) = try JUnitReportTests.cases(String(decoding: short.junit, as: UTF8.self))
        #expect(root["failures"] == "1" && cases["expiry"]?.failure?.hasPrefix("refused (exit 3): needs at least 1 device-day") == true)
        #expect(short.output.contains("wrote ") && short.output.contains("junit.xml"), "\(short.output)")
        guard let one = try Self.soak(["--real-timings", "--device-days", "1", "--agents", "1", "--seed", "1"]) else { return }
        #expect(one.status == 3)
        for name in ["userSwitch", "retryAfter", "throttle", "outage", "restart", "cache"] { #expect(one.output.contains(name + " ("), "\(one.output)") }
        #expect(!one.output.contains("expiry ("))
    }

    @Test(.timeLimit(.minutes(2)))
    func aShortSoakOfTwoAgentsPasses() throws {
        guard let run = try Self.soak(["--duration", "20s", "--agents", "2", "--seed", "42",
                                       "--restart-every", "8s", "--chaos-every", "1.5s", "--pace", "0.4s"]) else { return }
        let (output, summary) = (run.output, run.summary)
        #expect(run.status == 0, "\(output)")
        #expect(summary["result"] == "pass")
        #expect((summary["checks"]?["user"]?.numberValue ?? 0) > 0)
        #expect((summary["checks"]?["ready"]?.numberValue ?? 0) >= 2)
        #expect(summary["durationSeconds"] == 20 && summary["deviceDays"] == .null)
        let restarts = (summary["counts"]?["restarts"]?["SIGTERM"]?.numberValue ?? 0) + (summary["counts"]?["restarts"]?["SIGKILL"]?.numberValue ?? 0)
        #expect(restarts >= 1)
        #expect(parseXML(run.svg).ok)
        // No agent or emulator left behind: no process mentions the run's work directory.
        let workDir = output.components(separatedBy: "work dir ").dropFirst().first?.split(separator: "\n").first.map(String.init)
        #expect(workDir != nil, "\(output)")
        if let workDir {
            var leftovers: [String] = []
            for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where Int(entry) != nil {
                if let cmd = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline"),
                   String(decoding: cmd, as: UTF8.self).contains(workDir) {
                    leftovers.append(entry)
                }
            }
            #expect(leftovers.isEmpty, "processes left behind: \(leftovers)")
            #expect(!FileManager.default.fileExists(atPath: workDir))
        }
    }
}
