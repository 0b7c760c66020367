import AgentCore
import EmulatorCore
import Testing

func faultError(_ json: JSONValue) -> String? {
    do {
        _ = try Fault(json: json)
        return nil
    } catch {
        return error.description
    }
}

@Suite struct FaultTests {
    @Test func decodesEveryKind() throws {
        #expect(try Fault(json: ["method": "getFeatureFlags", "times": 3, "http": 503, "retryAfter": 10])
            == Fault(method: "getFeatureFlags", times: 3, kind: .http(status: 503, retryAfter: 10)))
        #expect(try Fault(json: ["method": "m", "http": 500]) == Fault(method: "m", kind: .http(status: 500, retryAfter: nil)))
        #expect(try Fault(json: ["method": "m", "statusCode": 210]) == Fault(method: "m", kind: .statusCode(210)))
        #expect(try Fault(json: ["method": "m", "body": "garbage"]) == Fault(method: "m", kind: .garbage))
        #expect(try Fault(json: ["method": "m", "drop": true]) == Fault(method: "m", kind: .drop))
        #expect(try Fault(json: ["method": "m", "partial": true]) == Fault(method: "m", kind: .partial))
        #expect(try Fault(json: ["method": "m", "delayMs": 250]) == Fault(method: "m", delayMs: 250, kind: .delayOnly))
        #expect(try Fault(json: ["method": "m", "delayMs": 250, "drop": true]) == Fault(method: "m", delayMs: 250, kind: .drop))
    }

    @Test(arguments: [
        (["times": 1, "http": 503] as JSONValue, "method: missing (expected a string)"),
        (["method": "m"], "expected one of http, statusCode, body, drop, partial, delayMs"),
        (["method": "m", "http": 503, "drop": true], "expected only one of http, statusCode, body, drop, partial (delayMs may accompany any)"),
        (["method": "m", "http": 200], "http: expected an HTTP status 300-599, found 200"),
        (["method": "m", "http": "503"], "http: expected an HTTP status 300-599, found string"),
        (["method": "m", "http": 503, "retryAfter": -1], "retryAfter: expected an integer number of seconds 0-86400, found -1"),
        (["method": "m", "statusCode": 500, "retryAfter": 5], "retryAfter: only allowed with \"http\""),
        (["method": "m", "statusCode": 200], "statusCode: expected an integer status code other than 200"),
        (["method": "m", "body": "html"], "body: expected \"garbage\", found \"html\""),
        (["method": "m", "drop": false], "drop: expected true"),
        (["method": "m", "partial": 1], "partial: expected a boolean, found number"),
        (["method": "m", "delayMs": 1.5], "delayMs: expected an integer 0-600000, found 1.5"),
        (["method": "m", "drop": true, "times": 0], "times: expected an integer 1-1000000, found 0"),
        (["method": "m", "drop": true, "count": 2], "count: unknown field (expected one of: body, delayMs, drop, forSeconds, http, hwid, method, partial, probability, reset, retryAfter, seed, stallAfterHeaders, statusCode, times, truncateAfterBytes, userId)"),
    ] as [(JSONValue, String)])
    func rejectsInvalidFaults(_ json: JSONValue, _ expected: String) {
        #expect(faultError(json) == expected)
    }

    @Test func queueCountsTimesPerMethodInOrder() {
        var q = FaultQueue()
        q.arm(Fault(method: "getFeatureFlags", times: 2, kind: .http(status: 503, retryAfter: nil)))
        q.arm(Fault(method: "getFeatureFlags", times: 1, kind: .drop))
        q.arm(Fault(method: "postEvent", times: 1, kind: .garbage))

        #expect(q.next(for: "applicationOpen") == nil)
        let first = q.next(for: "getFeatureFlags")
        #expect(first?.fault.kind == .http(status: 503, retryAfter: nil))
        #expect(first?.remaining == 2)
        #expect(q.next(for: "getFeatureFlags")?.fault.kind == .http(status: 503, retryAfter: nil))
        let third = q.next(for: "getFeatureFlags")
        #expect(third?.fault.kind == .drop)
        #expect(third?.remaining == 0)
        #expect(q.next(for: "getFeatureFlags") == nil)
        #expect(q.pending.map(\.method) == ["postEvent"])
        #expect(q.next(for: "postEvent")?.fault.kind == .garbage)
        #expect(q.isEmpty)
    }

    @Test func clearRemovesEverything() {
        var q = FaultQueue()
        q.arm(Fault(method: "a", times: 5, kind: .drop))
        q.arm(Fault(method: "b", times: 5, kind: .drop))
        #expect(q.pending.count == 2)
        q.clear()
        #expect(q.next(for: "a") == nil && q.next(for: "b") == nil && q.isEmpty)
    }
}
