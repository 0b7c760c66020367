import AgentCore
import Emulator
import EmulatorCore
import Foundation
import Synchronization
import Testing
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

let exampleFile = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().appendingPathComponent("config/flags.example.json").path

/// Starts a server on a free loopback port, runs `body`, stops the server.
func withServer<R>(token: String? = nil, threads: Int = 2, apps: [Application]? = nil,
                   _ body: (EmulatorServer, Client) async throws -> R) async throws -> R {
    let server = try EmulatorServer(listen: "127.0.0.1:0", configuration: EmulatorConfiguration(requireToken: token),
                                    apps: try apps ?? EmulatorCommand.loadApps(path: exampleFile), threads: threads)
    let port = try server.start()
    #expect(port != 0)
    defer { server.stop() }
    return try await body(server, Client(port: port))
}

extension Client.Reply {
    var ruleIds: [String: String] {
        var out: [String: String] = [:]
        for f in json?["response"]?["flags"]?.arrayValue ?? [] { out[f["key"]!.stringValue!] = f["rule_id"]!.stringValue! }
        return out
    }
}

@Suite struct DeviceAPITests {
    @Test func servesTheExampleFlags() async throws {
        try await withServer { (_, client) async throws in
            let alice = try await client.device("getFeatureFlags", ["userId": "alice"])
            #expect(alice.status == 200)
            #expect(alice.header("Content-Type") == "application/json; charset=utf-8")
            let json = try #require(alice.json)
            #expect(json["status_code"] == 200)
            #expect(json["status_message"] == "OK")
            #expect(json["response"]?["partial"] == false)
            let flags = try #require(json["response"]?["flags"]?.arrayValue)
            #expect(flags.map { $0["key"]!.stringValue! } == ["new_checkout", "promo_banner", "rich_notifications", "home_layout"])
            #expect(flags[0] == ["key": "new_checkout", "enabled": true, "rule_id": "r_qa_team",
                                 "properties": ["button_color": "green", "max_items": 10]])
            #expect(flags[1] == ["key": "promo_banner", "enabled": false, "rule_id": "",
                                 "properties": ["text": "Spring sale: 20% off", "dismissible": true]])
            #expect(flags[3]["properties"]?["layout"] == ["columns": 1, "sections": ["recent", "recommended"]])
        }
    }

    @Test func rolloutSplitsUsersAboutInHalf() async throws {
        try await withServer { (_, client) async throws in
            var enabled = 0
            for k in 0..<200 {
                let reply = try await client.device("getFeatureFlags", ["userId": .string("user-\(k)")], hwid: "hw-\(k)")
                if reply.ruleIds["new_checkout"] == "r_rollout_50" { enabled += 1 }
            }
            #expect((70...130).contains(enabled))
        }
    }

    @Test func deviceStateFeedsRulesAndAdminDevices() async throws {
        try await withServer { (_, client) async throws in
            #expect(try await client.device("getFeatureFlags").ruleIds["rich_notifications"] == "default")
            #expect(try await client.device("applicationOpen", ["package": "com.example", "timezone": "3600"]).status == 200)
            #expect(try await client.device("registerDevice", ["push_token": "0a1b2c", "gateway": "sandbox"]).status == 200)
            #expect(try await client.device("registerUser", ["userId": "carol"]).status == 200)
            let impression: JSONValue = ["flag_key": "new_checkout", "rule_id": "default", "enabled": false]
            #expect(try await client.device("postEvent", ["event": "PW_FeatureFlagImpression", "attributes": impression,
                                                          "timestampUTC": .number(Date().timeIntervalSince1970.rounded())]).status == 200)
            #expect(try await client.device("postEvent", ["event": "PW_Purchase", "attributes": [:], "userId": "carol"]).status == 200)

            let ids = try await client.device("getFeatureFlags", ["userId": "carol"]).ruleIds
            #expect(ids["rich_notifications"] == "r_push_registered")
            #expect(ids["home_layout"] == "r_returning_buyers")

            let devices = try #require(try await client.send("GET", "/admin/devices").json?["devices"]?.arrayValue)
            #expect(devices.count == 1)
            #expect(devices[0]["hwid"] == "hw-1")
            #expect(devices[0]["userId"] == "carol")
            #expect(devices[0]["pushToken"] == "0a1b2c")
            #expect(devices[0]["events"]?.arrayValue?.map { $0["event"] } == ["PW_FeatureFlagImpression", "PW_Purchase"])
            #expect(devices[0]["events"]?.arrayValue?.first?["attributes"] == impression)

            #expect(try await client.device("unregisterDevice").status == 200)
            #expect(try await client.send("GET", "/admin/devices").json?["devices"]?.arrayValue?.first?["pushToken"] == .null)
        }
    }

    @Test func unknownApplicationAnswersLikePushwoosh() async throws {
        try await withServer { (_, client) async throws in
            let reply = try await client.device("getFeatureFlags", app: "NOPE-00000")
            #expect(reply.status == 200)
            #expect(reply.json?["status_code"] == 210)
            #expect(reply.json?["status_message"] == "Application not found")
        }
    }

    @Test func unknownMethodIsRecordedAndAnswered404() async throws {
        try await withServer { (_, client) async throws in
            let reply = try await client.device("setTags", ["tags": ["plan": "gold"]])
            #expect(reply.status == 404)
            #expect(reply.json?["status_code"] == 404)
            #expect(reply.json?["status_message"]?.stringValue?.hasPrefix("unknown device API method \"setTags\" (known: applicationOpen, ") == true)
            let recorded = try await client.send("GET", "/admin/requests?method=setTags").json
            #expect(recorded?["count"] == 1)
            #expect(recorded?["requests"]?.arrayValue?.first?["status"] == 404)
            #expect(recorded?["requests"]?.arrayValue?.first?["body"]?["request"]?["tags"] == ["plan": "gold"])
        }
    }

    /// What the emulator cannot honour is refused: a fault for a method the device API does
    /// not have (it would never fire), a state document missing a section (it would wipe it).
    @Test func refusesFaultsForUnknownMethodsAndPartialStateDocuments() async throws {
        try await withServer { (_, client) async throws in
            let typo = try await client.send("POST", "/admin/faults", json: ["method": "getFeatureFlag", "http": 503])
            #expect(typo.status == 400)
            #expect(typo.json?["path"] == "method")
            #expect(typo.json?["error"]?.stringValue?.contains("did you mean getFeatureFlags? known: applicationOpen, getFeatureFlags, postEvent") == true)
            #expect(try await client.send("GET", "/admin/faults").json?["faults"] == [])
            let noKind = try await client.send("POST", "/admin/faults", json: ["method": "getFeatureFlags"])
            #expect(noKind.status == 400 && noKind.json?["path"] == "")
            #expect(noKind.json?["error"]?.stringValue?.contains("truncateAfterBytes, stallAfterHeaders, reset") == true)

            let before = try #require(try await client.send("GET", "/admin/state").json)
            let partial = try await client.send("PUT", "/admin/state", json: ["version": 1, "clockOffsetSeconds": 0, "apps": []])
            #expect(partial.status == 400)
            #expect(partial.json?["path"] == "devices")
            #expect(try await client.send("GET", "/admin/state").json == before)
        }
    }

    @Test func malformedBodyIsHTTP400() async throws {
        try await withServer { (_, client) async throws in
            let reply = try await client.send("POST", "/json/1.3/getFeatureFlags", body: Data("{\"request\": ".utf8))
            #expect(reply.status == 400)
            #expect(reply.json?["status_code"] == 400)
            let noHwid = try await client.send("POST", "/json/1.3/getFeatureFlags", json: ["request": ["application": "ABCDE-12345"]])
            #expect(noHwid.status == 400)
            #expect(noHwid.json?["status_message"] == "request.hwid: missing (expected a string)")
        }
    }

    @Test func requireTokenAnswers401WithoutTheToken() async throws {
        try await withServer(token: "s3cret") { (_, client) async throws in
            #expect(try await client.device("getFeatureFlags").status == 401)
            #expect(try await client.device("getFeatureFlags", headers: ["Authorization": "Token nope"]).status == 401)
            #expect(try await client.device("getFeatureFlags", headers: ["Authorization": "Token s3cret"]).status == 200)
            // Unauthorized calls are recorded too.
            #expect(try await client.send("GET", "/admin/requests").json?["requests"]?.arrayValue?.map { $0["status"] }
                == [401, 401, 200])
        }
    }

    @Test func largeBodiesArriveInPieces() async throws {
        try await withServer { (_, client) async throws in
            let flags: [JSONValue] = (0..<2_000).map { k in
                ["key": .string("flag_\(k)"), "properties": ["note": ["type": "string", "default": .string(String(repeating: "x", count: 100))]],
                 "rules": [["id": "r", "enabled": true, "when": ["rolloutPercent": 50]]]]
            }
            let put = try await client.send("PUT", "/admin/apps/BIG-00001", json: ["flags": .array(flags)])
            #expect(put.status == 200)
            let reply = try await client.device("getFeatureFlags", app: "BIG-00001")
            #expect(reply.json?["response"]?["flags"]?.arrayValue?.count == 2_000)
        }
    }
}

@Suite struct AdminAPITests {
    @Test func appsReadReplaceRemove() async throws {
        try await withServer { (_, client) async throws in
            let app = try await client.send("GET", "/admin/apps/ABCDE-12345")
            #expect(app.status == 200)
            #expect(app.json?["flags"]?.arrayValue?.count == 5)
            #expect(try await client.send("GET", "/admin/apps/NOPE").status == 404)

            let put = try await client.send("PUT", "/admin/apps/QA-00001", json: [
                "featureFlagsInPlan": true,
                "flags": [["key": "dark_mode", "rules": [["id": "r_all", "enabled": true]]]],
            ])
            #expect(put.status == 200)
            #expect(put.json?["code"] == "QA-00001")
            #expect(try await client.device("getFeatureFlags", app: "QA-00001").ruleIds == ["dark_mode": "r_all"])

            // The plan switch: no flags in the answer at all.
            #expect(try await client.send("PUT", "/admin/apps/QA-00001", json: ["featureFlagsInPlan": false]).status == 200)
            let noPlan = try await client.device("getFeatureFlags", app: "QA-00001")
            #expect(noPlan.json?["status_code"] == 200)
            #expect(noPlan.json?["response"]?["flags"] == nil)

            #expect(try await client.send("DELETE", "/admin/apps/QA-00001").status == 200)
            #expect(try await client.send("DELETE", "/admin/apps/QA-00001").status == 404)
            #expect(try await client.device("getFeatureFlags", app: "QA-00001").json?["status_code"] == 210)
        }
    }

    @Test func invalidDefinitionsAre400NamingThePath() async throws {
        try await withServer { (_, client) async throws in
            let reply = try await client.send("PUT", "/admin/apps/QA-00001", json: [
                "flags": [["key": "a"], ["key": "b"], ["key": "c", "rules": [["id": "r", "enabled": true, "when": ["rolloutPercent": 120]]]]],
            ])
            #expect(reply.status == 400)
            #expect(reply.json?["error"] == "flags[2].rules[0].when.rolloutPercent: expected a number 0-100, found 120")
            #expect(reply.json?["path"] == "flags[2].rules[0].when.rolloutPercent")

            let dup = try await client.send("PUT", "/admin/apps/QA-00001", json: ["flags": [["key": "a"], ["key": "a"]]])
            #expect(dup.status == 400)
            #expect(dup.json?["error"] == #"flags[1].key: duplicate flag key "a" (first at flags[0])"#)

            let unknown = try await client.send("PUT", "/admin/apps/ABCDE-12345/flags/new_checkout", json: ["rulez": []])
            #expect(unknown.status == 400)
            #expect(unknown.json?["error"]?.stringValue?.hasPrefix("rulez: unknown field") == true)

            let notJSON = try await client.send("PUT", "/admin/apps/QA-00001", body: Data("{flags".utf8))
            #expect(notJSON.status == 400)
            #expect(notJSON.json?["error"]?.stringValue?.hasPrefix("invalid JSON at byte 1") == true)
            #expect(try await client.send("GET", "/admin/apps/QA-00001").status == 404)  // nothing was stored
        }
    }

    @Test func flagsReplaceRemoveAndSwitch() async throws {
        try await withServer { (_, client) async throws in
            let path = "/admin/apps/ABCDE-12345/flags"
            let put = try await client.send("PUT", "\(path)/new_checkout", json: [
                "properties": ["button_color": ["type": "string", "default": "red"]],
                "rules": [["id": "r_everyone", "enabled": true]],
            ])
            #expect(put.status == 200)
            var flags = try await client.device("getFeatureFlags").json?["response"]?["flags"]?.arrayValue ?? []
            #expect(flags.first?["rule_id"] == "r_everyone")
            #expect(flags.first?["properties"] == ["button_color": "red"])

            #expect(try await client.send("POST", "\(path)/new_checkout/kill").json?["killed"] == true)
            #expect(try await client.device("getFeatureFlags").ruleIds["new_checkout"] == "")
            #expect(try await client.send("POST", "\(path)/new_checkout/unkill").json?["killed"] == false)
            #expect(try await client.device("getFeatureFlags").ruleIds["new_checkout"] == "r_everyone")
            #expect(try await client.send("POST", "\(path)/new_checkout/archive").status == 200)
            #expect(try await client.device("getFeatureFlags").ruleIds["new_checkout"] == nil)
            #expect(try await client.send("POST", "\(path)/legacy_onboarding/unarchive").status == 200)
            #expect(try await client.device("getFeatureFlags").ruleIds["legacy_onboarding"] == "r_everyone")

            #expect(try await client.send("POST", "\(path)/nope/kill").status == 404)
            #expect(try await client.send("POST", "/admin/apps/NOPE/flags/x/kill").status == 404)
            #expect(try await client.send("GET", "\(path)/new_checkout/kill").status == 405)

            #expect(try await client.send("DELETE", "\(path)/new_checkout").status == 200)
            #expect(try await client.send("DELETE", "\(path)/new_checkout").status == 404)
            flags = try await client.device("getFeatureFlags").json?["response"]?["flags"]?.arrayValue ?? []
            #expect(!flags.contains { $0["key"] == "new_checkout" })
        }
    }

    @Test func unknownRoutesAndWrongVerbs() async throws {
        try await withServer { (_, client) async throws in
            #expect(try await client.send("GET", "/").status == 404)
            #expect(try await client.send("GET", "/admin/other").status == 404)
            let wrong = try await client.send("PATCH", "/admin/faults", json: [:])
            #expect(wrong.status == 405)
            #expect(wrong.header("Allow") == "GET, POST, DELETE")
            #expect(try await client.send("GET", "/json/1.3/getFeatureFlags").status == 405)
        }
    }

    @Test func requestsAreRecordedAndFiltered() async throws {
        try await withServer { (_, client) async throws in
            _ = try await client.device("applicationOpen", headers: ["X-Retry-Count": "2"])
            // `between` is 20 ms clear of the calls on both sides: the log and an ISO `since`
            // have a millisecond's resolution, so a time in the first call's millisecond
            // selects that call (as it should), which made this test fail one run in many.
            try await Task.sleep(for: .milliseconds(20))
            let between = Date().timeIntervalSince1970
            try await Task.sleep(for: .milliseconds(20))
            _ = try await client.device("getFeatureFlags")
            _ = try await client.device("applicationOpen")

            let all = try #require(try await client.send("GET", "/admin/requests").json)
            #expect(all["count"] == 3)
            let first = try #require(all["requests"]?.arrayValue?.first)
            #expect(first["method"] == "applicationOpen")
            #expect(first["headers"]?["X-Retry-Count"] == "2")
            #expect(first["headers"]?["Content-Type"] == "application/json; charset=utf-8")
            #expect(first["body"]?["request"]?["v"] == "7.2.10")
            #expect(first["time"]?.stringValue?.hasSuffix("Z") == true)

            #expect(try await client.send("GET", "/admin/requests?method=applicationOpen").json?["count"] == 2)
            #expect(try await client.send("GET", "/admin/requests?since=\(between)").json?["count"] == 2)
            let iso = Timestamp.format(Date(timeIntervalSince1970: between))
            #expect(try await client.send("GET", "/admin/requests?method=applicationOpen&since=\(iso)").json?["count"] == 1)
            #expect(try await client.send("GET", "/admin/requests?since=soon").status == 400)

            #expect(try await client.send("DELETE", "/admin/requests").status == 200)
            #expect(try await client.send("GET", "/admin/requests").json?["count"] == 0)
        }
    }
}
