import AgentCore
import AgentWire
import Foundation
import Testing

/// The lab's wire values (docs/lab.md M.2): what agentctl sends is what the lab reads, and what
/// the lab answers is what agentctl reads, through one definition; bad bodies name the field.
@Suite struct LabWireTests {
    static func anyName(_ text: String, _: String) throws(AnswerError) -> String { text }

    @Test(arguments: [
        LabAdvanceRequest(until: .seconds(3600)),
        LabAdvanceRequest(until: .nextRefresh, devices: ["a", "b"], strict: true),
        LabAdvanceRequest(until: .nextTimer, devices: ["a"]),
        LabAdvanceRequest(until: .time(Date(timeIntervalSince1970: 1_796_620_459.125)), strict: true),
    ])
    func aRequestReadsBackAsItself(_ request: LabAdvanceRequest) throws {
        #expect(try LabAdvanceRequest(json: request.json.objectValue ?? [:], name: Self.anyName) == request)
    }

    @Test(arguments: [
        (#"{"seconds": 0}"#, "seconds"), (#"{"seconds": 1e9}"#, "seconds"), (#"{"until": "soon"}"#, "until"),
        (#"{"until": 3}"#, "until"), (#"{"seconds": 1, "until": "nextTimer"}"#, "until"), ("{}", ""),
        (#"{"seconds": 1, "devices": []}"#, "devices"), (#"{"seconds": 1, "devices": ["a", 2]}"#, "devices[1]"),
        (#"{"seconds": 1, "strict": "yes"}"#, "strict"), (#"{"seconds": 1, "speed": 2}"#, "speed"),
    ])
    func aBadRequestNamesItsField(_ body: String, _ field: String) throws {
        let json = try JSONReader.parse(Array(body.utf8)).objectValue ?? [:]
        #expect(throws: AnswerError.self) { try LabAdvanceRequest(json: json, name: Self.anyName) }
        do {
            _ = try LabAdvanceRequest(json: json, name: Self.anyName)
        } catch {
            #expect(error.field == field, "\(body): \(error)")
        }
    }

    @Test func anAnswerReadsBackAsItself() throws {
        let answer = LabAdvanceAnswer(now: Date(timeIntervalSince1970: 1_796_620_459.5), steps: 3,
                                      fired: ["a": [FiredTimer(at: Date(timeIntervalSince1970: 1_796_620_400), event: "refresh", trigger: .periodic)], "b": []],
                                      requests: 2, skipped: [.init(name: "c", reason: "does not answer")])
        #expect(try LabAdvanceAnswer(json: answer.json) == answer)
        #expect(throws: AnswerError.self) { try LabAdvanceAnswer(json: ["now": "2026-12-07T00:00:00Z", "steps": 1, "requests": 0, "fired": [:]]) }
    }

    @Test(arguments: [
        LabDeviceRecord.Condition.answering(.init(hwid: "H", userId: "u", state: "ready", appState: "active", controlledClock: true,
                                                  deviceTime: Date(timeIntervalSince1970: 1_796_620_459), lastRefreshAt: Date(timeIntervalSince1970: 1_796_620_400),
                                                  lastRefreshAgeSeconds: 59, nextRefreshAt: nil, flagsCount: 4, flagsSource: "cache", http: nil)),
        .exited(exit: "killed by signal 9", code: nil, signal: 9), .down(error: "cannot connect"), .busy("starting"),
    ])
    func aDeviceRecordReadsBackAsItself(_ condition: LabDeviceRecord.Condition) throws {
        let record = LabDeviceRecord(name: "qa-0", socket: "/lab/devices/qa-0/agent.sock", owned: true, pid: 42, directory: "/lab/devices/qa-0",
                                     log: "/lab/devices/qa-0/agent.log", config: "/lab/devices/qa-0/agent.conf", condition: condition)
        #expect(try LabDeviceRecord(json: record.json) == record)
    }

    // The facts of a device come from its own status and clock answers, leniently.
    @Test func factsFromTheDevicesAnswers() {
        let facts = LabDeviceRecord.Facts(status: ["hwid": "H", "state": "ready", "lastRefreshAt": "2026-12-07T10:00:00Z", "flagsCount": 3,
                                                   "flagsSource": "network", "httpAddress": "127.0.0.1:8016"],
                                          clock: ["controlled": true, "now": "2026-12-07T10:05:00Z"])
        #expect(facts.lastRefreshAgeSeconds == 300 && facts.controlledClock && facts.http == "127.0.0.1:8016" && facts.userId == nil)
    }
}
