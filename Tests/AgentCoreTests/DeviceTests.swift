import AgentCore
import AgentTestSupport
import Foundation
import Testing

/// docs/rules.md §6 and docs/device-api.md A: the device towards the server.
@Suite struct DeviceTests {
    @Test("SE-1: starts active unless configured; clients move it; 30-minute sessions")
    func appStateMachine() {
        let loop = VirtualLoop.serving([checkout])
        #expect(loop.agent.status().appState == .active)
        #expect(loop.agent.setAppState(.active) == false)
        loop.agent.setAppState(.background)
        #expect(loop.agent.status().appState == .background)
        loop.run(for: 1799)
        #expect(loop.agent.setAppState(.active) == false)
        loop.agent.setAppState(.background)
        loop.run(for: 1800)
        #expect(loop.agent.setAppState(.active) == true)
    }

    @Test("SE-2: an uppercase UUID, created once and kept across restarts")
    func hwidIsCreatedOnce() {
        let loop = VirtualLoop.serving([checkout])
        let hwid = loop.agent.hwid
        #expect(hwid.range(of: #"^[0-9A-F]{8}-[0-9A-F]{4}-4[0-9A-F]{3}-[89AB][0-9A-F]{3}-[0-9A-F]{12}$"#, options: .regularExpression) != nil)
        loop.restart()
        #expect(loop.agent.hwid == hwid)
        #expect(loop.agent.userId == hwid)  // A.1: userId is the HWID until set
        #expect(loop.flagRequests.last?.body["hwid"] == .string(hwid))
    }

    @Test("SE-3: registration with the simulated prompt and token; retries 1, 5, 10 s; skipped within 24 h; unregister")
    func pushRegistration() {
        let loop = VirtualLoop.serving([checkout])
        loop.transport.script = { r in
            r.method == "registerDevice" ? .answer(ScriptedTransport.http(503)) : .answer(ScriptedTransport.ok())
        }
        let first = loop.agent.registerForPushNotifications()
        #expect(first.granted)
        loop.run(for: 30)
        let attempts = loop.transport.requests("registerDevice")
        #expect(attempts.count == 4)
        let gaps = zip(attempts, attempts.dropFirst()).map { $1.sentAt - $0.sentAt }
        #expect(gaps == [1, 5, 10])
        #expect(attempts.map { $0.request.header("X-Retry-Count") } == [nil, "1", "2", "3"])
        let body = attempts[0].body
        #expect(body["push_token"] == .string(first.pushToken!))
        #expect(body["gateway"] == "production")
        #expect(body["notificationTypes"] == 7)
        for field in ["package", "timezone", "app_version", "os_version", "device_model", "language"] {
            #expect(body[field]?.stringValue != nil, "\(field)")
        }
        #expect(loop.agent.status().pushRegistered == false)

        loop.transport.script = { _ in .answer(ScriptedTransport.ok()) }
        #expect(loop.agent.registerForPushNotifications().pushToken == first.pushToken)  // same token
        loop.run(for: 1)
        #expect(loop.agent.status().pushRegistered)
        _ = loop.agent.registerForPushNotifications()
        loop.run(for: 1)
        #expect(loop.transport.requests("registerDevice").count == 5)  // nothing changed within 24 h
        loop.run(for: 24 * 3600)
        _ = loop.agent.registerForPushNotifications()
        loop.run(for: 1)
        #expect(loop.transport.requests("registerDevice").count == 6)

        loop.agent.unregisterForPushNotifications()
        loop.run(for: 1)
        #expect(loop.transport.requests("unregisterDevice").count == 1)
        #expect(loop.agent.status().pushRegistered == false)
        #expect(loop.agent.status().pushToken == nil)
    }

    @Test func deniedPromptGrantsNothing() {
        let loop = VirtualLoop.serving([checkout], settings: settings { $0.device.permissionPromptAnswer = .deny })
        let result = loop.agent.registerForPushNotifications()
        #expect(!result.granted)
        #expect(result.pushToken == nil)
        #expect(loop.agent.notificationAuthorization == .denied)
        loop.run(for: 1)
        #expect(loop.transport.requests("registerDevice").isEmpty)
    }

    @Test("SE-4: setUserId stores, tells the server (skipped for the same id within 24 h) and refreshes")
    func setUserId() {
        let loop = VirtualLoop.serving([checkout])
        loop.agent.setUserId("alice")
        loop.run(for: 1)
        #expect(loop.transport.requests("registerUser").count == 1)
        #expect(loop.transport.requests("registerUser")[0].body["userId"] == "alice")
        #expect(loop.store.committed?.userId == "alice")
        loop.agent.setUserId("alice")
        loop.run(for: 1)
        #expect(loop.transport.requests("registerUser").count == 1)
        #expect(loop.flagRequests.count == 2)
        loop.run(for: 24 * 3600)
        loop.agent.setUserId("alice")
        loop.run(for: 1)
        #expect(loop.transport.requests("registerUser").count == 2)
        loop.restart()
        #expect(loop.agent.userId == "alice")
    }

    @Test("SE-5: only the agent requests flags: one process, one request stream (no extension path exists)")
    func onlyTheAgentRequestsFlags() {
        let loop = VirtualLoop.serving([checkout])
        #expect(loop.flagRequests.allSatisfy { $0.body["hwid"] == .string(loop.agent.hwid) })
    }

    @Test func applicationOpenOncePerProcess() {
        let loop = VirtualLoop.serving([checkout])
        loop.agent.setAppState(.background)
        loop.run(for: 3600)
        loop.agent.setAppState(.active)
        loop.run(for: 1)
        #expect(loop.transport.requests("applicationOpen").count == 1)
        loop.restart()
        loop.run(for: 1)
        #expect(loop.transport.requests("applicationOpen").count == 2)
    }
}

/// docs/device-api.md A: envelope, headers, base URL.
@Suite struct ServerAPITests {
    @Test func requestShape() {
        let loop = VirtualLoop.serving([checkout], settings: settings { $0.server.apiToken = "s3cret" })
        let r = loop.flagRequests[0]
        #expect(r.request.url == "http://127.0.0.1:1/json/1.3/getFeatureFlags")
        #expect(r.request.header("Content-Type") == "application/json; charset=utf-8")
        #expect(r.request.header("Authorization") == "Token s3cret")
        #expect(r.request.header("X-Retry-Count") == nil)
        #expect(r.body["application"] == "ABCDE-12345")
        #expect(r.body["v"] == "7.2.10")
        #expect(r.body["device_type"] == 1)
        let plain = VirtualLoop.serving([checkout])
        #expect(plain.flagRequests[0].request.header("Authorization") == nil)
    }

    @Test func serverURLNormalisation() {
        #expect(PushwooshAPI.normalizedServerURL("  http://127.0.0.1:8080/json/1.3 ") == "http://127.0.0.1:8080/json/1.3/")
        #expect(PushwooshAPI.normalizedServerURL("ftp://x/json/1.3/") == nil)
        #expect(PushwooshAPI.normalizedServerURL("https:///json/1.3/") == nil)
        #expect(PushwooshAPI.defaultBaseURL(applicationCode: "ABCDE-12345") == "https://ABCDE-12345.api.pushwoosh.com/json/1.3/")
    }

    @Test func baseURLSwitchesOnlyFromSuccessAndWithoutConfiguredURL() {
        var s = VirtualLoop.defaultSettings()
        s.server.serverURL = nil
        let loop = VirtualLoop(settings: s, start: false)
        loop.transport.script = { r in
            r.method == "getFeatureFlags"
                ? .answer(ScriptedTransport.flags([checkout], baseURL: "http://127.0.0.2:9/json/1.3/"))
                : .answer(ScriptedTransport.envelope(["status_code": 210, "response": ["base_url": "http://evil/json/1.3/"]]))
        }
        loop.agent.start()
        loop.settle()
        #expect(loop.flagRequests[0].request.url == "https://ABCDE-12345.api.pushwoosh.com/json/1.3/getFeatureFlags")
        #expect(loop.store.committed?.baseURL == "http://127.0.0.2:9/json/1.3/")
        loop.restart()
        #expect(loop.flagRequests.last?.request.url == "http://127.0.0.2:9/json/1.3/getFeatureFlags")

        let configured = VirtualLoop(start: false)
        configured.transport.script = { _ in .answer(ScriptedTransport.flags([checkout], baseURL: "http://127.0.0.2:9/json/1.3/")) }
        configured.agent.start()
        configured.settle()
        #expect(configured.store.committed?.baseURL == nil)
    }

    @Test func retryableClassification() {
        for status in [408, 429, 500, 502, 503, 504] {
            guard case .failure(let f) = PushwooshAPI.classify(ScriptedTransport.http(status)) else { Issue.record(); continue }
            #expect(f.retryable)
        }
        guard case .failure(let f) = PushwooshAPI.classify(ScriptedTransport.envelope(["status_code": 500])) else { Issue.record(); return }
        #expect(!f.retryable)  // a 200 whose status_code is not 200 is not retried
        #expect(f.code == 200)
        guard case .failure(let n) = PushwooshAPI.classify(.noResponse(reason: "x")) else { Issue.record(); return }
        #expect(n.retryable && n.code == 0)
    }

    @Test func duplicateKeysLastWins() throws {
        let response: JSONValue = ["flags": [["key": "k", "enabled": true, "rule_id": "a"], ["key": "k", "enabled": false, "rule_id": "b"]]]
        let parsed = try PushwooshAPI.parseFlags(response).get()
        #expect(parsed.flags["k"]?.ruleId == "b")
    }
}

/// Answers that once crashed the agent (found by the fuzzer): they are failures, never traps.
@Suite struct HostileAnswerTests {
    @Test(arguments: [#"{"status_code":1e20,"response":{}}"#, #"{"status_code":-1e300}"#, #"{"status_code":1.5}"#])
    func hugeStatusCodes(_ body: String) {
        guard case .failure(let f) = PushwooshAPI.classify(.response(status: 200, headers: [:], body: Data(body.utf8))) else {
            Issue.record("expected a failure")
            return
        }
        #expect(f.code == 200)  // RF-7
    }

    @Test("RF-10: Retry-After is honoured up to a day; a huge one neither traps nor stops refreshing forever")
    func hugeRetryAfter() {
        guard case .failure(let f) = PushwooshAPI.classify(ScriptedTransport.http(503, headers: ["retry-after": "1e300"])) else {
            Issue.record("expected a failure")
            return
        }
        #expect(f.retryAfter == PushwooshAPI.maximumRetryAfter)
        let loop = VirtualLoop.serving([checkout])
        loop.failFlags(with: ScriptedTransport.http(503, headers: ["retry-after": "1e300"]))
        loop.run(for: 3600 * 1.1)
        let n = loop.flagRequests.count
        loop.serve([checkout])
        loop.run(for: 86_400 + 3600)
        #expect(loop.flagRequests.count > n)
    }
}
