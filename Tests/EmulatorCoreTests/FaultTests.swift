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

let allKinds = "http, statusCode, body, drop, partial, delayMs, truncateAfterBytes, stallAfterHeaders, reset"
let allMethods = "applicationOpen, getFeatureFlags, postEvent, registerDevice, registerUser, unregisterDevice"
let others = "device, forSeconds, hwid, method, probability, retryAfter, seed, times, userId"

@Suite struct FaultTests {
    @Test func decodesEveryKind() throws {
        #expect(try Fault(json: ["method": "getFeatureFlags", "times": 3, "http": 503, "retryAfter": 10])
            == Fault(method: "getFeatureFlags", times: 3, kind: .http(status: 503, retryAfter: 10)))
        #expect(try Fault(json: ["method": "getFeatureFlags", "http": 500]) == Fault(method: "getFeatureFlags", kind: .http(status: 500, retryAfter: nil)))
        #expect(try Fault(json: ["method": "getFeatureFlags", "statusCode": 210]) == Fault(method: "getFeatureFlags", kind: .statusCode(210)))
        #expect(try Fault(json: ["method": "getFeatureFlags", "body": "garbage"]) == Fault(method: "getFeatureFlags", kind: .garbage))
        #expect(try Fault(json: ["method": "getFeatureFlags", "drop": true]) == Fault(method: "getFeatureFlags", kind: .drop))
        #expect(try Fault(json: ["method": "getFeatureFlags", "partial": true]) == Fault(method: "getFeatureFlags", kind: .partial))
        #expect(try Fault(json: ["method": "getFeatureFlags", "delayMs": 250]) == Fault(method: "getFeatureFlags", delayMs: 250, kind: .delayOnly))
        #expect(try Fault(json: ["method": "getFeatureFlags", "delayMs": 250, "drop": true]) == Fault(method: "getFeatureFlags", delayMs: 250, kind: .drop))
    }

    @Test(arguments: [
        (["times": 1, "http": 503] as JSONValue, "method: missing (expected a string)"),
        (["method": "getFeatureFlags"], "no fault kind (expected one of: \(allKinds))"),
        (["method": "getFeatureFlags", "http": 503, "drop": true],
         "drop: cannot be combined with http (expected only one kind of: \(allKinds); delayMs may accompany any)"),
        (["method": "getFeatureFlags", "kind": "drop"], "kind: unknown field (a fault's kind is its own field; kinds: \(allKinds); besides: \(others))"),
        (["method": "getFeatureFlags", "timeout": true], "timeout: unknown field (a fault has method, one kind; kinds: \(allKinds); besides: \(others))"),
        (["method": "getFeatureFlag", "http": 503],
         "method: unknown device API method \"getFeatureFlag\" (did you mean getFeatureFlags? known: \(allMethods))"),
        (["method": "m", "http": 503], "method: unknown device API method \"m\" (known: \(allMethods))"),
        (["method": "GETFEATUREFLAGS", "drop": true],
         "method: unknown device API method \"GETFEATUREFLAGS\" (did you mean getFeatureFlags? known: \(allMethods))"),
        (["method": "getFeatureFlags", "http": 200], "http: expected an HTTP status 300-599, found 200"),
        (["method": "getFeatureFlags", "http": "503"], "http: expected an HTTP status 300-599, found string"),
        (["method": "getFeatureFlags", "http": 503, "retryAfter": -1], "retryAfter: expected an integer number of seconds 0-86400, found -1"),
        (["method": "getFeatureFlags", "statusCode": 500, "retryAfter": 5], "retryAfter: only allowed with \"http\""),
        (["method": "getFeatureFlags", "statusCode": 200], "statusCode: expected an integer status code other than 200"),
        (["method": "getFeatureFlags", "body": "html"], "body: expected \"garbage\", found \"html\""),
        (["method": "getFeatureFlags", "drop": false], "drop: expected true"),
        (["method": "getFeatureFlags", "partial": 1], "partial: expected a boolean, found number"),
        (["method": "getFeatureFlags", "delayMs": 1.5], "delayMs: expected an integer 0-600000, found 1.5"),
        (["method": "getFeatureFlags", "drop": true, "times": 0], "times: expected an integer 1-1000000, found 0"),
        (["method": "getFeatureFlags", "drop": true, "count": 2], "count: unknown field (a fault has method, one kind; kinds: \(allKinds); besides: \(others))"),
    ] as [(JSONValue, String)])
    func rejectsInvalidFaults(_ json: JSONValue, _ expected: String) {
        #expect(faultError(json) == expected)
    }

    /// A fault can be armed for every method of the device API, and the kinds named in the
    /// error messages are exactly the fields that arm one.
    @Test func everyDeviceMethodTakesAFaultAndTheKindListIsComplete() throws {
        for method in PushwooshAPI.Method.allCases.map(\.rawValue) {
            #expect(try Fault(json: ["method": .string(method), "drop": true]).method == method)
        }
        #expect(DeviceMethods.known.joined(separator: ", ") == allMethods)
        #expect(Fault.kindFields.joined(separator: ", ") == allKinds)
        #expect(Set(Fault.kindFields).isSubset(of: Fault.fields))
        let scope: Set<String> = ["method", "times", "retryAfter", "hwid", "device", "userId", "forSeconds", "probability", "seed"]
        #expect(Fault.fields.subtracting(scope) == Set(Fault.kindFields))
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
