import AgentCore
import Testing

/// The flags answer against the contract (A.1, A.3): each deviation named by its JSON path,
/// and fatal exactly when the agent's own parser refuses the answer.
@Suite struct ContractTests {
    private func deviations(_ json: String, status: Int = 200) -> [String] {
        PushwooshAPI.flagsAnswerDeviations(status: status, body: Array(json.utf8))
            .map { "\($0.path): \($0.problem)\($0.fatal ? " !" : "")" }
    }

    /// The agent's verdict on the same bytes.
    private func usable(_ json: String) -> Bool {
        let outcome = HTTPOutcome.response(status: 200, headers: [:], body: .init(json.utf8))
        if case .success = PushwooshAPI.classify(outcome).flatMap({ PushwooshAPI.parseFlags($0.response) }) { return true }
        return false
    }

    @Test func theContractsOwnExampleHasNoDeviation() {
        let json = #"{"status_code": 200, "status_message": "OK", "response": {"partial": false, "flags": [{"key": "new_checkout", "enabled": true, "rule_id": "r_1", "properties": {"button_color": "green"}}]}}"#
        #expect(deviations(json) == [])
        #expect(usable(json))
    }

    @Test(arguments: [
        (#"{"status_code": 200, "response": {"flags": "x"}}"#, "response.flags: string, expected an array !"),
        (#"{"status_code": 200, "response": {"flags": {"a": 1}}}"#, "response.flags: object, expected an array !"),
        (#"{"status_code": 200}"#, "response: missing !"),
        (#"{"status_code": 200, "response": []}"#, "response: array, expected an object !"),
        (#"{"response": {}}"#, "status_code: missing !"),
        (#"{"status_code": "200", "response": {}}"#, "status_code: string, expected a number !"),
        (#"{"status_code": 210, "status_message": "nope", "response": {}}"#, "status_code: 210, expected 200 !"),
        (#"{"status_code": 200, "response": {"partial": "no", "flags": []}}"#, "response.partial: string, expected a boolean !"),
        (#"{"status_code": 200, "response": {"flags": [3]}}"#, "response.flags[0]: number, expected an object !"),
        (#"{"status_code": 200, "response": {"flags": [{"enabled": true}]}}"#, "response.flags[0].key: missing !"),
        (#"{"status_code": 200, "response": {"flags": [{"key": "a", "enabled": 1}]}}"#, "response.flags[0].enabled: number, expected a boolean !"),
        ("not json", "(body): not JSON !"),
    ])
    func fatalDeviationsAreWhatTheAgentRefuses(_ json: String, _ expected: String) {
        #expect(deviations(json).contains(expected), "\(deviations(json))")
        #expect(!usable(json))
    }

    @Test func lenientDeviationsAreNamedAndTheAnswerStillServed() {
        let json = #"{"status_code": 200, "extra": 1, "response": {"segments": [], "flags": [{"key": "a", "enabled": true, "properties": [], "variant": "v"}, {"key": "a", "enabled": false, "rule_id": 7}]}}"#
        #expect(deviations(json) == [
            "extra: not in the contract (ignored)",
            "response.segments: not in the contract (ignored)",
            #"response.flags[0].rule_id: missing (served as "default")"#,
            "response.flags[0].properties: array, expected an object (served as {})",
            "response.flags[0].variant: not in the contract (ignored)",
            #"response.flags[1].key: "a" again (response.flags[0]); the last one wins"#,
            #"response.flags[1].rule_id: number, expected a string (served as "default")"#,
        ])
        #expect(usable(json))
        #expect(deviations(#"{"status_code": 200, "response": {}}"#) == ["response.flags: missing (read as no flags: a plan without feature flags)"])
    }

    @Test func anHTTPErrorIsADeviation() {
        #expect(deviations(#"{"status_code": 200, "response": {"flags": []}}"#, status: 503) == ["(HTTP status): 503, expected 200 !"])
    }

    /// Every kind of JSON value (or none) at every place of the contract's example: the doctor
    /// calls a deviation fatal exactly when the agent refuses the answer, and the agent's
    /// refusal names a place the doctor lists.
    @Test func everyKindAtEveryPlaceAgrees() {
        let kinds: [JSONValue?] = [nil, .null, .bool(true), .number(1), .string("x"), .array([]), .object([:])]
        let places: [[String]] = [["status_code"], ["status_message"], ["response"], ["response", "partial"], ["response", "flags"], ["response", "flags", "0"],
                                  ["response", "flags", "0", "key"], ["response", "flags", "0", "enabled"],
                                  ["response", "flags", "0", "rule_id"], ["response", "flags", "0", "properties"]]
        let flag: JSONValue = ["key": "a", "enabled": true, "rule_id": "r", "properties": ["n": 1]]
        let example: JSONValue = ["status_code": 200, "status_message": "OK", "response": ["partial": false, "flags": [flag, flag]]]
        for place in places {
            for kind in kinds {
                let json = JSONWriter.string(Self.replacing(example, at: place[...], with: kind))
                let fatal = PushwooshAPI.flagsAnswerDeviations(status: 200, body: Array(json.utf8)).filter(\.fatal)
                let outcome = HTTPOutcome.response(status: 200, headers: [:], body: .init(json.utf8))
                switch PushwooshAPI.classify(outcome).flatMap({ PushwooshAPI.parseFlags($0.response) }) {
                case .success: #expect(fatal.isEmpty, "\(json): served, but the doctor finds \(fatal)")
                case .failure(let failure):
                    #expect(!fatal.isEmpty, "\(json): refused (\(failure.message)), but the doctor finds nothing fatal")
                    #expect(fatal.contains { failure.message.contains($0.path + " ") }, "\(json): \(failure.message) against \(fatal)")
                }
            }
        }
    }

    /// `value` with the member at `path` (object keys, or array indexes as digits) set to
    /// `replacement`, or removed when it is nil.
    static func replacing(_ value: JSONValue, at path: ArraySlice<String>, with replacement: JSONValue?) -> JSONValue {
        guard let first = path.first else { return replacement ?? .null }
        switch value {
        case .object(var members):
            members[first] = path.count == 1 ? replacement : replacing(members[first] ?? .null, at: path.dropFirst(), with: replacement)
            return .object(members)
        case .array(var items):
            guard let index = Int(first), items.indices.contains(index) else { return value }
            if path.count == 1, replacement == nil {
                items.remove(at: index)
            } else {
                items[index] = path.count == 1 ? replacement! : replacing(items[index], at: path.dropFirst(), with: replacement)
            }
            return .array(items)
        default:
            return value
        }
    }
}
