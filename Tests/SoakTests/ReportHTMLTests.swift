import AgentCore
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import Glibc
import Soak
import Testing

/// report.html: one self-contained file, well-formed, every lane and violation in it.
@Suite struct ReportHTMLTests {
    static func page(violations: [ReportViolation] = []) -> ReportPage {
        var lanes: [TimelineLane] = []
        for i in 0..<3 {
            var lane = TimelineLane(title: "agent \(i) · H\(i)", id: "lane-\(i)")
            lane.refreshes = [RefreshMark(time: 100, succeeded: true), RefreshMark(time: 3_700, succeeded: false, status: 503, fault: "http")]
            lane.ages = [(200, 100), (1_000, 900)]
            lane.tracked = [(200, .on), (300, .on), (400, .on), (2_000, .killed)]
            lane.restarts = i == 1 ? [(1_500, SIGKILL)] : []
            lane.users = i == 1 ? [(2_500, "<bob & co>")] : []
            lane.expiries = i == 0 ? [86_500] : []
            lanes.append(lane)
        }
        let timeline = TimelineData(title: "t", start: 0, end: 86_700, lifetime: 86_400, refreshInterval: 3_600, trackedFlag: "new_checkout",
                                    lanes: lanes, clock: "device time", faults: [TimelineSpan(start: 3_600, end: 3_800, label: "fault x")],
                                    flagChanges: [(2_000, "kill new_checkout")])
        var heard = HeardCounts()
        heard.hear(.refreshCompleted(trigger: .periodic, error: nil, sent: true, at: Date()))
        heard.hear(.refreshCompleted(trigger: .manual, error: nil, sent: false, at: Date()))
        heard.hear(.flagsDidUpdate(reason: .expired, changed: ["new_checkout"], at: Date(timeIntervalSince1970: 86_500)))
        let counts = [SoakCounts(heard: heard, calls: [DutyCheckerTests.request(100), DutyCheckerTests.request(3_700, status: 503, fault: "http")],
                                 restarts: 0, userSwitches: 0),
                      SoakCounts(heard: HeardCounts(), calls: [], restarts: 1, userSwitches: 1),
                      SoakCounts(heard: HeardCounts(), calls: [], restarts: 0, userSwitches: 0)]
        return ReportPage(seed: 7, agents: 3, span: "1 device-day", deviceDaysCovered: 1.001, realSeconds: 48.2, result: violations.isEmpty ? "pass" : "fail",
                          settings: "lifetime 1d", coverage: SoakCoverage(checks: ["lifetime": 3, "expiry": 1]),
                          plan: CoveragePlan(seed: 7, agents: 3, deviceDays: 1).assignments, counts: counts, timeline: timeline,
                          violations: violations, notes: [])
    }

    static func parse(_ html: String) throws -> ElementCounter {
        // Well-formed XML as it is (the doctype names no DTD to fetch).
        let (ok, counter, error) = parseXML(Data(html.utf8))
        try #require(ok, "\(error ?? "")")
        return counter
    }

    @Test func theReportIsOneSelfContainedWellFormedFile() throws {
        let html = ReportHTML.render(Self.page())
        let counter = try Self.parse(html)
        // Nothing fetched: no URL, no script, no reference to another file.
        for needle in ["http://", "https://", "<script", "src=", "href=", "url(", "@import", "<link"] {
            #expect(!html.contains(needle), "\(needle)")
        }
        #expect(counter.counts["style"] == 1 && counter.counts["svg"] == 1)
        // The header, the coverage table, the counts and a lane per agent.
        let ids = counter.elements.compactMap { $0.attributes["id"] }
        #expect(ids == ["header", "coverage", "counts", "timeline", "lane-0", "lane-1", "lane-2", "violations"])
        let text = counter.texts.joined()
        for fact in ["seed", "7", "agents", "1 device-day", "real seconds", "48.2", "not exercised"] { #expect(text.contains(fact), "\(fact)") }
        for name in SoakCoverage.catalogue.map(\.name) { #expect(text.contains(name)) }
        for trigger in ["sessionStart", "periodic", "push", "userId", "manual", "retry"] { #expect(text.contains(trigger)) }
        #expect(text.contains("http 503: 1") && text.contains("agent 0 at +0"))
        // Text is escaped; titles are not repeated; an expiry is drawn.
        #expect(html.contains("&lt;bob &amp; co&gt;") && !html.contains("<bob"))
        #expect(Set(counter.titles).count == counter.titles.count, "\(counter.titles)")
        #expect(counter.titles.filter { $0.hasPrefix("new_checkout on from") }.count == 3)
        #expect(counter.titles.contains { $0.hasPrefix("flags expired at 1970-01-02T00:01:40.000Z") })
        #expect(counter.counts["polyline"] == 3)
        #expect(text.contains("None."))
    }

    @Test func eachViolationHasItsAgentDeviceTimeAndTheRequestsAroundIt() throws {
        let calls = (0..<10).map { DutyCheckerTests.request(Double($0) * 3_600) }
        let v = Violation("cadence", agent: 1, time: 20_000, "no getFeatureFlags for 4000 s <late>", evidence: ["last request: x"])
        let html = ReportHTML.render(Self.page(violations: [ReportViolation(violation: v, deviceTime: 20_000,
                                                                            requestLog: ReportViolation.around(20_000, calls: calls))]))
        let counter = try Self.parse(html)
        let text = counter.texts.joined()
        #expect(text.contains("[cadence] agent 1 at 1970-01-01T05:33:20.000Z (device time)"))
        #expect(text.contains("no getFeatureFlags for 4000 s <late>") && html.contains("&lt;late&gt;"))
        // Four requests before, the violation, three after.
        let log = ReportViolation.around(20_000, calls: calls)
        #expect(log.count == 8 && log[4] == "── 1970-01-01T05:33:20.000Z: the violation")
        #expect(log[3].hasPrefix("1970-01-01T05:00:00.000Z getFeatureFlags") && log[5].hasPrefix("1970-01-01T06:00:00.000Z"))
        #expect(text.contains(log[0]) && text.contains(log[7]))
        #expect(counter.elements.filter { $0.attributes["class"] == "violation" }.count == 1)
    }

    /// report.html opens with what failed: a table per invariant and per device, before the
    /// coverage and the lanes; a cascade of alike violations is counted, not a wall of cards.
    @Test func aFailingReportOpensWithWhatFailed() throws {
        let violations = (0..<8).map { k in
            ReportViolation(violation: Violation("cadence", agent: 1, time: 20_000 + Double(k), "late \(k)"), deviceTime: 20_000 + Double(k), requestLog: [])
        } + [ReportViolation(violation: Violation("crash", agent: 2, time: 100, "agent-2 exited on its own"), deviceTime: 100, requestLog: [])]
        let html = ReportHTML.render(Self.page(violations: violations))
        let counter = try Self.parse(html)
        let ids = counter.elements.compactMap { $0.attributes["id"] }
        #expect(Array(ids.prefix(4)) == ["header", "failures", "violations-per-invariant", "violations-per-device"])
        let text = counter.texts.joined(separator: "|")
        #expect(text.contains("cadence|8|agent 1 (8)|1970-01-01T05:33:20.000Z|late 0"), "\(text)")
        #expect(text.contains("crash|1|agent 2 (1)"))
        #expect(text.contains("agent 1|8|cadence 8") && text.contains("agent 2|1|crash 1"))
        #expect(counter.elements.filter { $0.attributes["class"] == "violation" }.count == 3 + 1)
        #expect(text.contains("[cadence] agent 1: 5 more like these"))
        // A passing page has no such section.
        #expect(!ReportHTML.render(Self.page()).contains("id=\"failures\""))
    }
}
