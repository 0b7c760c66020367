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
}
