import AgentCore
import EmulatorCore
import Foundation
import Testing

let exampleApp: JSONValue = [
    "code": "ABCDE-12345",
    "flags": [
        ["key": "new_checkout",
         "properties": ["button_color": ["type": "string", "default": "blue"]],
         "rules": [["id": "r_alice", "enabled": true, "when": ["userIds": ["alice"]], "properties": ["button_color": "green"]]]],
        ["key": "push_only", "rules": [["id": "r_push", "enabled": true, "when": ["pushRegistered": true]]]],
        ["key": "buyers", "rules": [["id": "r_buy", "enabled": true, "when": ["eventsPosted": ["PW_Purchase"]]]]],
    ],
]

/// A state with the example app and helpers to call it like a device would.
struct Harness {
    var state: EmulatorState
    var now = t0

    init(token: String? = nil) throws {
        state = EmulatorState(configuration: EmulatorConfiguration(requireToken: token),
                              apps: [try Application(json: exampleApp)])
    }

    mutating func call(_ method: String, _ fields: [String: JSONValue] = [:], hwid: String = "h1",
                       app: String = "ABCDE-12345", headers: [HTTPHeader] = []) -> Outcome {
        var request: [String: JSONValue] = ["application": .string(app), "hwid": .string(hwid), "v": "7.2.10", "device_type": 1]
        request.merge(fields) { _, new in new }
        return state.handle(EmulatorRequest(method: "POST", path: "/json/1.3/\(method)", headers: headers,
                                            body: JSONWriter.encode(["request": .object(request)])), now: now)
    }

    mutating func admin(_ verb: String, _ path: String, _ body: JSONValue? = nil, query: [String: String] = [:]) -> Outcome {
        state.handle(EmulatorRequest(method: verb, path: path, query: query, body: body.map(JSONWriter.encode) ?? []), now: now)
    }
}

extension Outcome {
    var json: JSONValue? { render().flatMap(\.jsonBody) }
    /// `{key: rule_id}` of a getFeatureFlags answer.
    var ruleIds: [String: String] {
        var out: [String: String] = [:]
        for f in json?["response"]?["flags"]?.arrayValue ?? [] { out[f["key"]!.stringValue!] = f["rule_id"]!.stringValue! }
        return out
    }
}

@Suite struct DeviceAPIStateTests {
    @Test func deviceCallsFeedTheRules() throws {
        var h = try Harness()
        #expect(h.call("getFeatureFlags").ruleIds == ["new_checkout": "default", "push_only": "default", "buyers": "default"])
        #expect(h.call("registerDevice", ["push_token": "abc123", "gateway": "sandbox"]).status == 200)
        #expect(h.call("postEvent", ["event": "PW_Purchase", "attributes": [:], "timestampUTC": 1_800_000_000]).status == 200)
        #expect(h.call("registerUser", ["userId": "alice"]).status == 200)
        #expect(h.call("getFeatureFlags", ["userId": "alice"]).ruleIds
            == ["new_checkout": "r_alice", "push_only": "r_push", "buyers": "r_buy"])
        #expect(h.call("unregisterDevice").status == 200)
        #expect(h.call("getFeatureFlags", ["userId": "alice"]).ruleIds["push_only"] == "default")
        // Another device knows nothing of h1's state.
        #expect(h.call("getFeatureFlags", hwid: "h2").ruleIds["buyers"] == "default")

        let record = try #require(h.state.devices["h1"])
        #expect(record.userId == "alice")
        #expect(record.pushToken == nil)
        #expect(record.events.map(\.name) == ["PW_Purchase"])
    }

    @Test func envelopeAndErrors() throws {
        var h = try Harness()
        let ok = h.call("applicationOpen")
        #expect(ok.status == 200)
        #expect(ok.json == ["status_code": 200, "status_message": "OK", "response": [:]])
        let unknownApp = h.call("getFeatureFlags", app: "NOPE-00000")
        #expect(unknownApp.status == 200)
        #expect(unknownApp.json?["status_code"] == 210)
        #expect(h.call("registerDevice").json?["status_message"] == "request.push_token: expected a non-empty string")
        #expect(h.call("registerDevice").status == 400)
        let notJSON = h.state.handle(EmulatorRequest(method: "POST", path: "/json/1.3/getFeatureFlags", body: Array("{".utf8)), now: t0)
        #expect(notJSON.status == 400)
        #expect(h.call("getFeatureFlags", ["hwid": 5]).json?["status_message"] == "request.hwid: expected a string, found number")
        // Unknown methods: recorded and answered 404, naming the known ones.
        let unknown = h.call("setTags", ["tags": ["a": 1]])
        #expect(unknown.status == 404)
        #expect(unknown.json?["status_code"] == 404)
        #expect(unknown.json?["status_message"] == .string("unknown device API method \"setTags\" (known: \(allMethods))"))
        #expect(h.state.requestLog.select(method: "setTags", since: nil).count == 1)
        #expect(h.call("getFeatureFlag").json?["status_message"]?.stringValue?.contains("did you mean getFeatureFlags?") == true)
        // A refused call names where in the body ("" for the body itself).
        #expect(h.call("getFeatureFlags", ["hwid": 5]).json?["path"] == "request.hwid")
        let noRequest = h.state.handle(EmulatorRequest(method: "POST", path: "/json/1.3/getFeatureFlags", body: Array(#"{"req": {}}"#.utf8)), now: t0)
        #expect(noRequest.status == 400 && noRequest.json?["path"] == "request")
        let array = h.state.handle(EmulatorRequest(method: "POST", path: "/json/1.3/getFeatureFlags", body: Array("[]".utf8)), now: t0)
        #expect(array.status == 400 && array.json?["path"] == "" && array.json?["status_message"] == #"expected {"request": {…}}, found array"#)
    }

    @Test func requireToken() throws {
        var h = try Harness(token: "s3cret")
        #expect(h.call("getFeatureFlags").status == 401)
        #expect(h.call("getFeatureFlags", headers: [HTTPHeader("Authorization", "Token wrong")]).status == 401)
        #expect(h.call("getFeatureFlags", headers: [HTTPHeader("authorization", "Token s3cret")]).status == 200)
        // Admin calls need no token.
        #expect(h.admin("GET", "/admin/apps/ABCDE-12345").status == 200)
    }

    @Test func faultsFireOnTheirMethodAndAreRecorded() throws {
        var h = try Harness()
        #expect(h.admin("POST", "/admin/faults", ["method": "getFeatureFlags", "times": 2, "http": 503, "retryAfter": 7]).status == 200)
        let failed = h.call("getFeatureFlags")
        #expect(failed.status == 503)
        #expect(failed.headers.contains(HTTPHeader("Retry-After", "7")))
        #expect(failed.events.first?.hasPrefix("fault fired method=getFeatureFlags kind=http") == true)
        #expect(h.call("applicationOpen").status == 200)  // another method: untouched
        #expect(h.call("getFeatureFlags").status == 503)
        #expect(h.call("getFeatureFlags").status == 200)
        let recorded = h.state.requestLog.select(method: "getFeatureFlags", since: nil)
        #expect(recorded.map(\.status) == [503, 503, 200])
        #expect(recorded.map(\.fault) == ["http", "http", nil])

        _ = h.admin("POST", "/admin/faults", ["method": "registerDevice", "statusCode": 210])
        let coded = h.call("registerDevice", ["push_token": "t"])
        #expect(coded.status == 200 && coded.json?["status_code"] == 210)
        #expect(h.state.devices["h1"]?.pushToken == nil)  // a failed call changes nothing

        _ = h.admin("POST", "/admin/faults", ["method": "getFeatureFlags", "body": "garbage"])
        let garbage = h.call("getFeatureFlags")
        #expect(garbage.status == 200 && garbage.json == nil)

        _ = h.admin("POST", "/admin/faults", ["method": "getFeatureFlags", "drop": true, "delayMs": 20])
        let dropped = h.call("getFeatureFlags")
        #expect(dropped.drop && dropped.render() == nil && dropped.delayMs == 20)

        _ = h.admin("POST", "/admin/faults", ["method": "getFeatureFlags", "partial": true])
        #expect(h.call("getFeatureFlags").json?["response"]?["partial"] == true)
        #expect(h.call("getFeatureFlags").json?["response"]?["partial"] == false)

        _ = h.admin("POST", "/admin/faults", ["method": "getFeatureFlags", "delayMs": 5, "times": 10])
        #expect(h.admin("GET", "/admin/faults").json?["faults"]?.arrayValue?.count == 1)
        #expect(h.admin("DELETE", "/admin/faults").status == 200)
        #expect(h.call("getFeatureFlags").delayMs == 0)
    }
}

@Suite struct AdminStateTests {
    @Test func routesAndVerbs() throws {
        var h = try Harness()
        #expect(h.admin("GET", "/admin/nothing").status == 404)
        #expect(h.admin("GET", "/admin/apps/ABCDE-12345/").status == 404)
        #expect(h.admin("GET", "/admin/apps/ABCDE-12345/flags/new_checkout/explode").status == 404)
        let wrongVerb = h.admin("POST", "/admin/apps/ABCDE-12345")
        #expect(wrongVerb.status == 405)
        #expect(wrongVerb.headers.contains(HTTPHeader("Allow", "GET, PUT, DELETE")))
        #expect(h.admin("GET", "/json/1.3/getFeatureFlags").status == 405)
    }

    @Test func appsAndFlags() throws {
        var h = try Harness()
        #expect(h.admin("GET", "/admin/apps/NOPE").status == 404)
        let put = h.admin("PUT", "/admin/apps/NEW-1", ["flags": [["key": "a", "rules": [["id": "r", "enabled": true]]]]])
        #expect(put.status == 200)
        #expect(put.events == ["app loaded code=NEW-1 flags=1"])
        #expect(h.admin("GET", "/admin/apps").json?["apps"]?.arrayValue?.count == 2)
        #expect(h.call("getFeatureFlags", app: "NEW-1").ruleIds == ["a": "r"])

        let bad = h.admin("PUT", "/admin/apps/NEW-1", ["flags": [["key": "a", "rules": [["id": "r", "enabled": "yes"]]]]])
        #expect(bad.status == 400)
        #expect(bad.json == ["error": "flags[0].rules[0].enabled: expected a boolean, found string", "path": "flags[0].rules[0].enabled"])
        let dup = h.state.handle(EmulatorRequest(method: "PUT", path: "/admin/apps/NEW-1",
                                                 body: Array(#"{"flags": [{"key": "a", "key": "b"}]}"#.utf8)), now: t0)
        #expect(dup.status == 400)
        #expect(dup.json?["error"] == #"flags[0]: duplicate key "key""#)

        #expect(h.admin("PUT", "/admin/apps/NEW-1/flags/b", ["rules": [["id": "rb", "enabled": true]]]).status == 200)
        #expect(h.call("getFeatureFlags", app: "NEW-1").ruleIds == ["a": "r", "b": "rb"])
        #expect(h.admin("PUT", "/admin/apps/NEW-1/flags/b", ["key": "c"]).status == 400)
        #expect(h.admin("PUT", "/admin/apps/NOPE/flags/b", [:]).status == 404)

        #expect(h.admin("POST", "/admin/apps/NEW-1/flags/a/kill").json?["killed"] == true)
        #expect(h.call("getFeatureFlags", app: "NEW-1").ruleIds["a"] == "")
        #expect(h.admin("POST", "/admin/apps/NEW-1/flags/a/unkill").status == 200)
        #expect(h.call("getFeatureFlags", app: "NEW-1").ruleIds["a"] == "r")
        #expect(h.admin("POST", "/admin/apps/NEW-1/flags/a/archive").status == 200)
        #expect(h.call("getFeatureFlags", app: "NEW-1").ruleIds["a"] == nil)
        #expect(h.admin("POST", "/admin/apps/NEW-1/flags/a/unarchive").status == 200)
        #expect(h.call("getFeatureFlags", app: "NEW-1").ruleIds["a"] == "r")
        #expect(h.admin("POST", "/admin/apps/NEW-1/flags/zzz/kill").status == 404)

        #expect(h.admin("DELETE", "/admin/apps/NEW-1/flags/b").status == 200)
        #expect(h.admin("DELETE", "/admin/apps/NEW-1/flags/b").status == 404)
        #expect(h.admin("DELETE", "/admin/apps/NEW-1").status == 200)
        #expect(h.admin("DELETE", "/admin/apps/NEW-1").status == 404)
        #expect(h.call("getFeatureFlags", app: "NEW-1").json?["status_code"] == 210)
    }

    @Test func requestsFilterByMethodAndTime() throws {
        var h = try Harness()
        _ = h.call("applicationOpen")
        h.now = t0.addingTimeInterval(10)
        _ = h.call("getFeatureFlags")
        _ = h.call("applicationOpen")
        func count(_ query: [String: String]) -> Int? {
            h.admin("GET", "/admin/requests", query: query).json?["count"]?.numberValue.map { Int($0) }
        }
        #expect(count([:]) == 3)
        #expect(count(["method": "applicationOpen"]) == 2)
        #expect(count(["since": "1800000005"]) == 2)
        #expect(count(["since": "1800000010"]) == 2)
        #expect(count(["since": "1800000010.001"]) == 0)
        #expect(count(["since": Timestamp.format(t0.addingTimeInterval(5)), "method": "applicationOpen"]) == 1)
        #expect(count(["since": "2027-01-15T08:00:05Z"]) == 2)  // t0 + 5 s = 2027-01-15T08:00:00Z + 5
        #expect(h.admin("GET", "/admin/requests", query: ["since": "yesterday"]).status == 400)
        let entry = h.admin("GET", "/admin/requests", query: ["method": "getFeatureFlags"]).json?["requests"]?.arrayValue?.first
        #expect(entry?["body"]?["request"]?["hwid"] == "h1")
        #expect(entry?["status"] == 200)
        #expect(h.admin("DELETE", "/admin/requests").status == 200)
        #expect(count([:]) == 0)
    }

    @Test func requestLogKeepsTheNewest() {
        var log = RequestLog(limit: 10)
        for k in 0..<100 { log.append(RecordedRequest(time: t0, method: "m\(k)", headers: [], body: nil, status: 200)) }
        #expect(log.select(method: nil, since: nil).map(\.method) == (90..<100).map { "m\($0)" })
    }

    @Test func devicesListsWhatIsKnown() throws {
        var h = try Harness()
        _ = h.call("registerDevice", ["push_token": "tok", "gateway": "production", "userId": "bob"])
        _ = h.call("postEvent", ["event": "PW_FeatureFlagImpression",
                                 "attributes": ["flag_key": "new_checkout", "rule_id": "default", "enabled": false]])
        let devices = try #require(h.admin("GET", "/admin/devices").json?["devices"]?.arrayValue)
        #expect(devices.count == 1)
        #expect(devices[0]["hwid"] == "h1")
        #expect(devices[0]["userId"] == "bob")
        #expect(devices[0]["pushToken"] == "tok")
        #expect(devices[0]["events"]?.arrayValue?.first?["event"] == "PW_FeatureFlagImpression")
        #expect(devices[0]["events"]?.arrayValue?.first?["attributes"]?["enabled"] == false)
        #expect(h.admin("DELETE", "/admin/devices").status == 200)
        #expect(h.admin("GET", "/admin/devices").json?["devices"] == [])
    }
}
