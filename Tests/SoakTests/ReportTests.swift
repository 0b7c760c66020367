import AgentCore
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import Glibc
import Soak
import Testing

/// Counts elements by name while parsing.
final class ElementCounter: NSObject, XMLParserDelegate {
    var counts: [String: Int] = [:]
    var texts: [String] = []
    func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?,
                attributes: [String: String] = [:]) {
        counts[name, default: 0] += 1
    }
    func parser(_ parser: XMLParser, foundCharacters string: String) { texts.append(string) }
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
        lane.refreshes = [(10, true, nil), (25, false, "http"), (40, true, "partial")]
        lane.restarts = [(30, SIGTERM), (50, SIGKILL)]
        lane.readies = [31, 51]
        lane.background = [(12, 18), (55, nil)]
        lane.tracked = [(5, .none), (11, .on), (20, .killed), (35, .absent), (45, .off)]
        lane.ages = [(5, nil), (11, 1), (20, 10), (26, 0.5), (30, nil), (31, 6), (59, 34)]
        lane.violations = [44]
        let data = TimelineData(title: "soak & <test>", start: 0, end: 60, lifetime: 60, refreshInterval: 15,
                                trackedFlag: "new_checkout", lanes: [lane, TimelineLane(title: "agent 1")])
        let svg = TimelineSVG.render(data)
        let (ok, counter, error) = parseXML(Data(svg.utf8))
        #expect(ok, "\(error ?? "")")
        #expect(counter.counts["svg"] == 1)
        #expect(counter.counts["g"] == 2)
        #expect((counter.counts["polyline"] ?? 0) >= 1)
        #expect(counter.texts.joined().contains("agent 0 <A&B> \"x\""))
        #expect(svg.contains("&lt;A&amp;B&gt;"))
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
        let (ok, counter, _) = parseXML(Data(svg.utf8))
        #expect(ok)
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
@Suite struct RealRunTests {
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

    @Test(.timeLimit(.minutes(2)))
    func aShortSoakOfTwoAgentsPasses() throws {
        guard let bin = Self.binDirectory else {
            Issue.record("pushwoosh-soak, pushwoosh-agentd and pushwoosh-emulator not found next to the test bundle (\(CommandLine.arguments[0])); set SOAK_BIN")
            return
        }
        let report = NSTemporaryDirectory() + "soak-test-\(getpid())-\(Int(Date().timeIntervalSince1970))"
        defer { try? FileManager.default.removeItem(atPath: report) }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: bin + "/pushwoosh-soak")
        p.arguments = ["--duration", "20s", "--agents", "2", "--seed", "42", "--bin", bin, "--report", report,
                       "--apps", Self.repository + "/config/flags.example.json",
                       "--restart-every", "8s", "--chaos-every", "1.5s", "--pace", "0.4s", "--quiet"]
        let err = Pipe()
        p.standardError = err
        try p.run()
        let output = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        #expect(p.terminationStatus == 0, "\(output)")
        let summary = try JSONDecoder().decode(JSONValue.self, from: Data(contentsOf: URL(fileURLWithPath: report + "/summary.json")))
        #expect(summary["result"] == "pass")
        #expect((summary["checks"]?["provenance"]?.numberValue ?? 0) > 0)
        #expect((summary["checks"]?["restartsWithReady"]?.numberValue ?? 0) >= 2)
        let restarts = (summary["counts"]?["restarts"]?["SIGTERM"]?.numberValue ?? 0) + (summary["counts"]?["restarts"]?["SIGKILL"]?.numberValue ?? 0)
        #expect(restarts >= 1)
        let svg = try Data(contentsOf: URL(fileURLWithPath: report + "/timeline.svg"))
        #expect(parseXML(svg).ok)
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
