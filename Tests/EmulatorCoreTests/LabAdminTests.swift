import AgentCore
import EmulatorCore
import Foundation
import Testing

@Suite struct LabWaitTests {
    @Test func aWaitParksUntilEnoughMatchingCallsArrive() throws {
        var lab = try Lab()
        let parked = lab.admin("GET", "/admin/requests/wait", query: ["hwid": "h7", "count": "2", "timeout": "30"])
        let ticket = try #require(parked.ticket)
        #expect(parked.wait == RequestWait(filter: RequestFilter(hwid: "h7"), count: 2, timeout: 30))
        #expect(parked.render() == nil && lab.state.parkedWaits == 1)
        #expect(lab.call(hwid: "h1").woken.isEmpty)  // another device's call
        #expect(lab.call(hwid: "h7").woken.isEmpty)  // one of two
        let woken = lab.call(hwid: "h7").woken
        #expect(woken.map(\.ticket) == [ticket])
        #expect(woken.first?.outcome.status == 200)
        #expect(woken.first?.outcome.json?["count"] == 2)
        #expect(woken.first?.outcome.json?["requests"]?.arrayValue?.allSatisfy { $0["hwid"] == "h7" } == true)
        #expect(lab.state.parkedWaits == 0)
        let late = lab.state.timeOutWait(ticket)
        #expect(late == nil)  // answered already: the timer finds nothing
    }

    @Test func aWaitTimesOutWithWhatArrived() throws {
        var lab = try Lab()
        let parked = lab.admin("GET", "/admin/requests/wait", query: ["method": "postEvent", "count": "3"])
        let ticket = try #require(parked.ticket)
        _ = lab.call("postEvent", ["event": "PW_Purchase"])
        let answer = lab.state.timeOutWait(ticket)
        let timedOut = try #require(answer)
        #expect(timedOut.status == 408)
        #expect(timedOut.json?["count"] == 1)
        #expect(timedOut.json?["requests"]?.arrayValue?.count == 1)
        #expect(timedOut.json?["error"] == "timed out after 10.0 s: 1 of 3 requests arrived")
        #expect(lab.state.parkedWaits == 0)
    }

    @Test func aWaitAlreadySatisfiedOrWithTimeoutZeroAnswersAtOnce() throws {
        var lab = try Lab()
        _ = lab.call(hwid: "h1")
        let now = lab.admin("GET", "/admin/requests/wait", query: ["hwid": "h1"])
        #expect(now.status == 200 && now.ticket == nil && now.json?["count"] == 1)
        let since = lab.admin("GET", "/admin/requests/wait", query: ["hwid": "h1", "since": "\(t0.timeIntervalSince1970 + 1)", "timeout": "0"])
        #expect(since.status == 408 && since.ticket == nil && since.json?["count"] == 0)
    }

    @Test func clearedRequestsAreNotCountedTwice() throws {
        var lab = try Lab()
        let parked = lab.admin("GET", "/admin/requests/wait", query: ["count": "2"])
        let ticket = try #require(parked.ticket)
        _ = lab.call()
        #expect(lab.admin("DELETE", "/admin/requests").status == 200)
        #expect(lab.call().woken.isEmpty)  // one before the clear, one after: not two
        #expect(lab.call().woken.map(\.ticket) == [ticket])
    }

    @Test func requestsFilterByHWIDAndUserId() throws {
        var lab = try Lab()
        _ = lab.call(hwid: "h1", userId: "alice")
        _ = lab.call(hwid: "h2", userId: "bob")
        _ = lab.call("applicationOpen", hwid: "h2", userId: "bob")
        #expect(lab.admin("GET", "/admin/requests", query: ["userId": "bob"]).json?["count"] == 2)
        #expect(lab.admin("GET", "/admin/requests", query: ["hwid": "h2", "method": "getFeatureFlags"]).json?["count"] == 1)
        #expect(lab.count(["hwid": "h1", "userId": "bob"]) == 0)
        #expect(lab.count([:]) == 3)
    }
}

@Suite struct LabClockTests {
    @Test func theClockStartsAtTheHostsTimeAndOnlyMovesForward() throws {
        var lab = try Lab()
        #expect(lab.admin("GET", "/admin/clock").json == ["now": .string(Timestamp.format(t0)), "unixTime": .number(t0.timeIntervalSince1970),
                                                          "offsetSeconds": 0])
        #expect(lab.admin("POST", "/admin/clock", ["advanceSeconds": 90]).json?["offsetSeconds"] == 90)
        lab.clock.advance(by: 10)
        #expect(lab.state.now == t0.addingTimeInterval(100))
        let later = t0.addingTimeInterval(86_400)
        #expect(lab.admin("POST", "/admin/clock", ["set": .string(Timestamp.format(later))]).json?["now"] == .string(Timestamp.format(later)))
        #expect(lab.state.clockOffset == 86_390)
        let back = lab.admin("POST", "/admin/clock", ["set": .string(Timestamp.format(t0))])
        #expect(back.status == 400 && back.json?["path"] == "set")
        #expect(lab.state.now == later)
    }

    @Test func emulatorTimeStampsTheLogAndDecidesSawFeature() throws {
        var lab = try Lab()
        let flag: JSONValue = ["key": "seen", "rules": [["id": "r_seen", "enabled": true, "when": ["sawFeature": ["flag": "seen", "days": 1]]]]]
        #expect(lab.admin("PUT", "/admin/apps/ABCDE-12345/flags/seen", flag).status == 200)
        _ = lab.call("postEvent", ["event": "PW_FeatureFlagImpression", "attributes": ["flag_key": "seen"]])
        #expect(lab.call().ruleIds["seen"] == "r_seen")
        _ = lab.admin("POST", "/admin/clock", ["advanceSeconds": 86_401])
        #expect(lab.call().ruleIds["seen"] == "default")
        let times = lab.state.requestLog.select(method: "getFeatureFlags", since: nil).map(\.time)
        #expect(times == [t0, t0.addingTimeInterval(86_401)])
        #expect(lab.count(["since": "\(t0.timeIntervalSince1970 + 86_400)"]) == 1)
    }
}

@Suite struct LabResetAndStateTests {
    @Test func resetGoesBackToTheAppsFile() throws {
        var lab = try Lab()
        let fresh = lab.snapshot
        _ = lab.call("registerDevice", ["push_token": "ab12"])
        _ = lab.arm(["method": "getFeatureFlags", "drop": true])
        _ = lab.admin("POST", "/admin/clock", ["advanceSeconds": 3600])
        _ = lab.admin("DELETE", "/admin/apps/ABCDE-12345")
        #expect(lab.snapshot != fresh)
        let reset = lab.admin("POST", "/admin/reset")
        #expect(reset.status == 200 && reset.json == ["reset": true])
        #expect(lab.state.apps.keys.sorted() == ["ABCDE-12345"] && lab.state.devices.isEmpty && lab.state.faults.isEmpty)
        #expect(lab.state.clockOffset == 0 && lab.state.requestLog.select(method: nil, since: nil).isEmpty)
        #expect(!lab.call().failed)
    }

    @Test func stateRoundTrip() throws {
        var lab = try Lab()
        _ = lab.call("registerDevice", hwid: "h1", userId: "alice", ["push_token": "ab12", "gateway": "sandbox"])
        _ = lab.call("postEvent", hwid: "h1", ["event": "PW_Purchase", "attributes": ["sum": 5]])
        _ = lab.call("postEvent", hwid: "h2", ["event": "PW_FeatureFlagImpression", "attributes": ["flag_key": "new_checkout"]])
        _ = lab.admin("POST", "/admin/clock", ["advanceSeconds": 120])
        _ = lab.admin("POST", "/admin/apps/ABCDE-12345/flags/push_only/kill")
        let got = lab.admin("GET", "/admin/state")
        let saved = try #require(got.json)
        #expect(saved["version"] == 1 && saved["clockOffsetSeconds"] == 120)
        #expect(saved["devices"]?.arrayValue?.map { $0["hwid"] } == ["h1", "h2"])
        #expect(saved["devices"]?.arrayValue?[1]["lastImpressions"]?["new_checkout"] == .string(Timestamp.format(t0)))

        var other = try Lab(apps: [])
        let loaded = other.admin("PUT", "/admin/state", saved)
        #expect(loaded.status == 200)
        #expect(loaded.json == saved)
        #expect(other.admin("GET", "/admin/state").json == saved)
        #expect(other.state.document == lab.state.document)
        #expect(try StateDocument(json: saved) == lab.state.document)
        #expect(other.call(hwid: "h1", userId: "alice").ruleIds == lab.call(hwid: "h1", userId: "alice").ruleIds)
    }
}

@Suite struct LabBadInputTests {
    /// Each call is a 400 whose `path` (and message) names the field, and changes nothing stored.
    @Test(arguments: [
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags", "http": 503, "probability": 1.5] as JSONValue, "probability"),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags", "http": 503, "probability": "0.5"], "probability"),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags", "drop": true, "truncateAfterBytes": 10], "truncateAfterBytes"),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags", "reset": true, "stallAfterHeaders": true], "reset"),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags", "http": 503, "forSeconds": -1], "forSeconds"),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags", "http": 503, "forSeconds": 0], "forSeconds"),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags", "http": 503, "forSeconds": 1e12], "forSeconds"),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags", "http": 503, "seed": 7], "seed"),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags", "http": 503, "probability": 0.5, "seed": -1], "seed"),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags", "http": 503, "hwid": 7], "hwid"),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags", "http": 503, "userId": ""], "userId"),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags", "truncateAfterBytes": -3], "truncateAfterBytes"),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags", "stallAfterHeaders": false], "stallAfterHeaders"),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags", "reset": "yes"], "reset"),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags", "http": 503, "hwids": ["h1"]], "hwids"),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlag", "http": 503], "method"),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags"], ""),
        ("POST", "/admin/faults", [:], ["method": "getFeatureFlags", "kind": "drop"], "kind"),
        ("POST", "/admin/reset", [:], ["a", "b"], ""),
        ("GET", "/admin/faults", ["verbose": "1"], .null, "verbose"),
        ("GET", "/admin/requests", ["metod": "getFeatureFlags"], .null, "metod"),
        ("GET", "/admin/requests", ["wait": "2"], .null, "wait"),
        ("GET", "/admin/requests", ["since": "soon"], .null, "since"),
        ("GET", "/admin/requests/wait", ["count": "100001"], .null, "count"),
        ("GET", "/admin/requests/wait", ["count": "0"], .null, "count"),
        ("GET", "/admin/requests/wait", ["count": "two"], .null, "count"),
        ("GET", "/admin/requests/wait", ["timeout": "301"], .null, "timeout"),
        ("GET", "/admin/requests/wait", ["timeout": "-1"], .null, "timeout"),
        ("GET", "/admin/requests/wait", ["timeout": "nan"], .null, "timeout"),
        ("GET", "/admin/requests/wait", ["hwid": "h1", "user": "x"], .null, "user"),
        ("GET", "/admin/requests/count", ["count": "1"], .null, "count"),
        ("DELETE", "/admin/requests", ["method": "getFeatureFlags"], .null, "method"),
        ("GET", "/admin/devices", ["hwid": "h1"], .null, "hwid"),
        ("GET", "/admin/apps", ["code": "x"], .null, "code"),
        ("GET", "/admin/apps/ABCDE-12345", ["pretty": "1"], .null, "pretty"),
        ("POST", "/admin/apps/ABCDE-12345/flags/new_checkout/kill", [:], ["reason": "x"], "reason"),
        ("POST", "/admin/clock", [:], ["advanceSeconds": -5], "advanceSeconds"),
        ("POST", "/admin/clock", [:], ["advanceSeconds": "60"], "advanceSeconds"),
        ("POST", "/admin/clock", [:], ["advanceSeconds": 60, "set": "2030-01-01T00:00:00Z"], "set"),
        ("POST", "/admin/clock", [:], ["set": "tomorrow"], "set"),
        ("POST", "/admin/clock", [:], ["set": "2020-01-01T00:00:00Z"], "set"),
        ("POST", "/admin/clock", [:], ["advance": 60], "advance"),
        ("POST", "/admin/clock", ["advanceSeconds": "60"], ["advanceSeconds": 60], "advanceSeconds"),
        ("POST", "/admin/reset", [:], ["apps": []], "apps"),
        ("POST", "/admin/reset", ["hard": "1"], .null, "hard"),
        ("PUT", "/admin/state", [:], ["version": 2], "version"),
        ("PUT", "/admin/state", [:], ["apps": []], "version"),
        ("PUT", "/admin/state", [:], ["version": 1, "faults": []], "faults"),
        ("PUT", "/admin/state", [:], ["version": 1, "clockOffsetSeconds": -1, "apps": [], "devices": []], "clockOffsetSeconds"),
        ("PUT", "/admin/state", [:], ["version": 1, "apps": [], "devices": []], "clockOffsetSeconds"),
        ("PUT", "/admin/state", [:], ["version": 1, "clockOffsetSeconds": 0, "devices": []], "apps"),
        ("PUT", "/admin/state", [:], ["version": 1, "clockOffsetSeconds": 0, "apps": []], "devices"),
        ("PUT", "/admin/state", [:], ["clockOffsetSeconds": 0, "apps": [], "devices": []], "version"),
        ("PUT", "/admin/state", [:], ["version": 1, "clockOffsetSeconds": 0, "devices": [], "apps": [["code": "A", "flags": [["key": "f", "killed": 1]]]]], "apps[0].flags[0].killed"),
        ("PUT", "/admin/state", [:], ["version": 1, "clockOffsetSeconds": 0, "apps": [], "devices": [["hwid": "h1"], ["hwid": "h1"]]], "devices[1].hwid"),
        ("PUT", "/admin/state", [:], ["version": 1, "clockOffsetSeconds": 0, "apps": [], "devices": [["hwid": "h1", "events": [["event": "e", "time": "later"]]]]], "devices[0].events[0].time"),
        ("PUT", "/admin/state", [:], ["version": 1, "clockOffsetSeconds": 0, "apps": [], "devices": [["hwid": "h1", "color": "red"]]], "devices[0].color"),
        ("PUT", "/admin/state", [:], ["version": 1, "clockOffsetSeconds": 0, "apps": [], "devices": [["hwid": "h1", "lastSeen": "1e300"]]], "devices[0].lastSeen"),
        ("GET", "/admin/state", ["apps": "1"], .null, "apps"),
    ] as [(String, String, [String: String], JSONValue, String)])
    func isA400NamingItAndChangesNothing(_ verb: String, _ path: String, _ query: [String: String], _ body: JSONValue, _ field: String) throws {
        var lab = try Lab()
        _ = lab.call("registerDevice", ["push_token": "ab12"])
        _ = lab.arm(["method": "getFeatureFlags", "hwid": "h9", "drop": true])
        let before = lab.snapshot
        var sent: JSONValue? = body
        if case .null = body { sent = nil }
        let answer = lab.admin(verb, path, sent, query: query)
        #expect(answer.status == 400, "\(answer.json.map(JSONWriter.string) ?? "-")")
        #expect(answer.json?["path"] == .string(field), "\(answer.json.map(JSONWriter.string) ?? "-")")
        #expect(answer.json?["error"]?.stringValue?.hasPrefix(field) == true || answer.json?["error"]?.stringValue?.contains(field) == true)
        #expect(lab.snapshot == before)
        #expect(answer.ticket == nil && lab.state.parkedWaits == 0)
    }
}

@Suite struct TimestampTests {
    /// The state document's times come back as they were saved.
    @Test func formatThenParseGivesTheSameText() throws {
        for k in 0..<2000 {
            let text = Timestamp.format(Date(timeIntervalSince1970: 1_796_173_234 + Double(k) * 0.000_137))
            #expect(Timestamp.format(try #require(Timestamp.parse(text))) == text)
        }
        #expect(Timestamp.format(Date(timeIntervalSince1970: 1_800_000_000.005)) == "2027-01-15T08:00:00.005Z")
        #expect(Timestamp.format(Date(timeIntervalSince1970: -0.25)) == "1969-12-31T23:59:59.750Z")
    }
}

@Suite struct SinceResolutionTests {
    /// `since=` selects every call from its millisecond on, in both forms: a time the caller
    /// took just before a call in the same millisecond never misses that call (a wait on it
    /// would hang), and a record's own printed time selects it.
    @Test func sinceSelectsFromItsMillisecondOn() throws {
        let record = RecordedRequest(time: Date(timeIntervalSince1970: 1_796_173_234.123_9), method: "applicationOpen",
                                     headers: [], body: .null, status: 200)
        let printed = Timestamp.format(record.time), second = printed.prefix(19)  // "…T…:34.123Z", "…T…:34"
        #expect(printed.hasSuffix(".123Z"))
        for since in ["1796173234.1234", "1796173234.123", "1796173234.1239", printed, second + ".1234Z"] {
            #expect(try RequestFilter(query: ["since": since]).matches(record), "\(since)")
        }
        for since in ["1796173234.124", second + ".124Z"] {
            #expect(try !RequestFilter(query: ["since": since]).matches(record), "\(since)")
        }
    }
}

@Suite struct RolloutBucketExamples {
    /// The README's table of User IDs on each side of 50 % for `new_checkout`.
    @Test func theREADMEsExamples() {
        let examples = ["alice": 28, "dave": 13, "frank": 18, "user-1": 13, "user-3": 9, "user-5": 39,
                        "bob": 75, "carol": 83, "erin": 95, "user-2": 77, "user-4": 89, "user-6": 77,
                        "fleet-user-0": 80, "fleet-user-7": 9]
        for (user, bucket) in examples {
            #expect(RolloutBucket.bucket(flagKey: "new_checkout", userId: user) == bucket, "\(user)")
        }
    }
}
