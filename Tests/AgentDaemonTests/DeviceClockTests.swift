import AgentCore
import AgentPosix
import AgentWire
import Foundation
import Glibc
import HarnessSupport
import Testing
import ToolSupport

/// docs/device-clock.md H: the SDK's timed rules with their real, default timings (24 h lifetime, 1 h
/// refresh, 30 min session, 5 min throttle), against the real daemon and emulator, in
/// device time: `[Device] Clock=controlled` and `advanceClock`. None of these waits for a
/// timer in real time.
@Suite(.serialized) struct DeviceClockTests {
    /// An emulator and a controlled-clock agent with the default timings.
    final class Device {
        let emulator: EmulatorProcess
        let dir = TempDir()
        var agent: AgentProcess
        let extra: String

        init(extra: String = "", emulator: EmulatorProcess? = nil) throws {
            self.emulator = try emulator ?? EmulatorProcess()
            self.extra = extra
            agent = try Self.launch(dir, self.emulator, extra)
        }

        static func launch(_ dir: TempDir, _ emulator: EmulatorProcess, _ extra: String) throws -> AgentProcess {
            let config = AgentProcess.config(server: emulator.serverURL, extra: "[Device]\nClock=controlled\n" + extra, dir: dir.path)
            let agent = try AgentProcess(dir: dir, config: config, server: emulator.serverURL)
            guard agent.waitForNotify("READY=1") != nil else { throw FixtureError("no READY=1: \(agent.stderrText)") }
            return agent
        }

        /// A method's result; records the error answer otherwise.
        @discardableResult
        func call(_ method: String, _ params: String = "{}", sourceLocation: SourceLocation = #_sourceLocation) -> JSONValue {
            let answer = (try? LineClient(path: agent.socketPath, timeout: 60))?.call(method, params) ?? .null
            if answer["result"] == nil { Issue.record("\(method) \(params): \(answer)", sourceLocation: sourceLocation) }
            return answer["result"] ?? .null
        }

        /// The whole answer (for errors).
        func answer(_ method: String, _ params: String = "{}") -> JSONValue {
            (try? LineClient(path: agent.socketPath, timeout: 60))?.call(method, params) ?? .null
        }

        func advance(_ seconds: Double) -> JSONValue { call("advanceClock", #"{"seconds":\#(seconds)}"#) }

        func waitForFlags() -> Bool { eventually { self.call("status")["state"] == "ready" } }

        /// The emulator's count of `getFeatureFlags` requests.
        var flagRequests: Int {
            Int(json(emulator.admin("GET", "/admin/requests?method=getFeatureFlags").1)["count"]?.numberValue ?? -1)
        }

        func restart(kill signal: Int32 = SIGTERM) throws {
            agent.signal(signal)
            agent.process.waitUntilExit()
            agent = try Self.launch(dir, emulator, extra)
        }

        func fired(_ result: JSONValue, _ event: String) -> [JSONValue] {
            (result["fired"]?.arrayValue ?? []).filter { $0["event"]?.stringValue == event }
        }
    }

    @Test("ST-3: stored flags are served at 23 h 59 min and gone at 24 h 01 min, in the background, with no request meanwhile")
    func storedFlagsExpireAfterTwentyFourHours() throws {
        let d = try Device()
        #expect(d.waitForFlags())
        #expect(d.call("setAppState", #"{"state":"background"}"#)["sessionStarted"] == false)
        let requests = d.flagRequests
        let age = d.call("status")["flagsAgeSeconds"]?.numberValue ?? 0
        let before = d.advance(23 * 3600 + 59 * 60 - age)
        #expect(before["requests"] == 0, "RF-2 runs in the foreground only: \(before)")
        let served = d.call("isEnabled", #"{"key":"new_checkout","default":true}"#)
        #expect(served["source"] == "network" && served["errorCode"] == nil, "\(served)")
        #expect((served["ageSeconds"]?.numberValue ?? 0) >= 23 * 3600 + 59 * 60 - 1)
        let after = d.advance(120)
        #expect(d.fired(after, "expired").count == 1, "\(after)")
        let gone = d.call("isEnabled", #"{"key":"new_checkout","default":true}"#)
        #expect(gone["enabled"] == true && gone["reason"] == "ERROR" && gone["errorCode"] == "PROVIDER_NOT_READY", "\(gone)")
        #expect(d.call("status")["state"] == "notReady")
        #expect(d.flagRequests == requests)
    }

    @Test("ST-1: after a restart at 23 h the cached flags are 23 h old and expire one hour later; the clock continues")
    func aRestartContinuesAtTheDevicesTime() throws {
        let d = try Device(extra: "InitialAppState=background\n")
        // In the background from the start: no session, so the flags come from a refresh.
        #expect(d.call("refresh")["error"] == .null)
        let age = d.call("status")["flagsAgeSeconds"]?.numberValue ?? 0
        _ = d.advance(23 * 3600 - age)
        let offset = d.call("clock")["offsetSeconds"]?.numberValue ?? 0
        #expect(offset >= 23 * 3600 - 60)
        try d.restart()
        let clock = d.call("clock")
        #expect((clock["offsetSeconds"]?.numberValue ?? 0) >= offset, "\(clock)")
        let status = d.call("status")
        #expect(status["flagsSource"] == "cache" && status["state"] == "ready", "\(status)")
        let cachedAge = status["flagsAgeSeconds"]?.numberValue ?? 0
        #expect(cachedAge >= 23 * 3600 - 1 && cachedAge < 23 * 3600 + 60, "\(status)")
        let later = d.advance(24 * 3600 - cachedAge + 30)
        #expect(d.fired(later, "expired").count == 1, "\(later)")
        #expect(d.call("status")["state"] == "notReady")
    }

    @Test("RF-2, RF-12: ten device hours (and the 10% a slot may lie past its hour) bring exactly 10 hourly requests, each on its slot")
    func tenHoursOfHourlyRefreshes() throws {
        let d = try Device()
        #expect(d.waitForFlags())
        let requests = d.flagRequests
        let startedAt = (d.call("status")["lastRefreshAt"]?.stringValue).flatMap(SocketTime.parse)
        let result = d.advance(10 * 3600 + 360)
        let refreshes = d.fired(result, "refresh")
        #expect(refreshes.count == 10, "\(result)")
        #expect(refreshes.allSatisfy { $0["trigger"] == "periodic" })
        #expect(result["requests"]?.numberValue == Double(refreshes.count))
        #expect(d.flagRequests - requests == refreshes.count)
        // RF-12: refresh k lies k hours after the session's request plus this device's offset
        // (a phase, 1% to 9% of the hour), moved by its own jitter (1% either way, to the second).
        let offset = Agent.deviceOffset(hwid: d.call("status")["hwid"]?.stringValue ?? "", period: 3600)
        let times = refreshes.compactMap { $0["at"]?.stringValue.flatMap(SocketTime.parse) }
        #expect(times.count == 10)
        if let startedAt {
            for (k, t) in times.enumerated() {
                let off = t.timeIntervalSince(startedAt) - Double(k + 1) * 3600 - offset
                #expect(abs(off) <= 36 + 2, "refresh \(k + 1) is \(off) s off its slot (offset \(offset)): \(times)")
            }
        }
        #expect(d.call("status")["state"] == "ready")
    }

    @Test("H: a timer that comes due on its own, as device time flows between two advances, is told in the next one's firedBefore")
    func aTimerThatRunsOnItsOwnIsToldInFiredBefore() throws {
        let d = try Device()
        #expect(d.waitForFlags())
        let first = d.advance(1)
        #expect(first["firedBefore"] == [] && first["firedBeforeDropped"] == 0, "\(first)")
        let clock = d.call("clock")
        guard let next = (clock["nextTimerAt"]?.stringValue).flatMap(SocketTime.parse), let offset = clock["offsetSeconds"]?.numberValue else {
            Issue.record("no timer armed: \(clock)")
            return
        }
        // Leave the timer half a second ahead, then let device time flow to it on its own.
        let requests = d.flagRequests
        _ = d.advance(next.timeIntervalSince(Date()) - offset - 0.5)
        #expect(eventually { d.flagRequests == requests + 1 })
        let after = d.advance(0.001)
        let before = after["firedBefore"]?.arrayValue ?? []
        #expect(before.map { $0["event"] } == ["refresh"] && before.first?["trigger"] == "periodic" && before.first?["requests"] == 1, "\(after)")
        let at = (before.first?["at"]?.stringValue).flatMap(SocketTime.parse)
        #expect(at.map { abs($0.timeIntervalSince(next)) < 1 } == true, "fired at \(String(describing: at)), due at \(next)")
        #expect(after["fired"] == [] && after["requests"] == 0 && after["firedBeforeDropped"] == 0)
        // Told once: the next advance starts afresh.
        #expect(d.advance(0.001)["firedBefore"] == [])
    }

    @Test("RF-6: a second refresh within 5 min is answered from the throttle window (sent: false); after 5 min it goes out")
    func theThrottleWindowInDeviceTime() throws {
        let d = try Device()
        #expect(d.waitForFlags())
        // The first refresh's complete answer opened the window.
        let requests = d.flagRequests
        let opened = (d.call("status")["lastRefreshAt"]?.stringValue).flatMap(SocketTime.parse)
        let first = d.call("refresh")
        #expect(first["error"] == .null && first["sent"] == false, "\(first)")
        // The window's end in device time: the answer that opened it plus 5 min, to the second above.
        let until = (first["throttledUntil"]?.stringValue).flatMap(SocketTime.parse)
        if let opened, let until {
            #expect(until.timeIntervalSince(opened) >= 300 && until.timeIntervalSince(opened) <= 302, "\(opened) \(until)")
        } else {
            Issue.record("no throttledUntil or lastRefreshAt: \(first)")
        }
        _ = d.advance(4 * 60)
        let second = d.call("refresh")
        #expect(second["sent"] == false && second["throttledUntil"] == first["throttledUntil"], "\(second)")
        #expect(d.flagRequests == requests)
        _ = d.advance(61)
        #expect(d.call("refresh") == ["error": .null, "sent": true, "throttledUntil": .null])
        #expect(d.flagRequests == requests + 1)
        let metrics = d.call("metrics")["text"]?.stringValue ?? ""
        #expect(metrics.contains("pushwoosh_agent_refreshes_not_sent_total 2\n"), "\(metrics)")
    }

    @Test("RF-1, SE-1: back to the foreground after 29 min is the same session; after 31 min a new one, with a refresh")
    func sessionsInDeviceTime() throws {
        let d = try Device()
        #expect(d.waitForFlags())
        _ = d.advance(6 * 60)  // past the throttle window, so nothing else explains a request
        #expect(d.call("setAppState", #"{"state":"background"}"#)["sessionStarted"] == false)
        #expect(d.fired(d.advance(29 * 60), "sessionEnd").isEmpty)
        let requests = d.flagRequests
        #expect(d.call("setAppState", #"{"state":"active"}"#)["sessionStarted"] == false)
        #expect(d.flagRequests == requests)
        #expect(d.call("setAppState", #"{"state":"background"}"#)["sessionStarted"] == false)
        let away = d.call("clock")["now"]?.stringValue.flatMap(SocketTime.parse)
        let ended = d.fired(d.advance(31 * 60), "sessionEnd")  // docs/device-clock.md H: reported at its device time
        #expect(ended.count == 1)
        if let away, let at = ended.first?["at"]?.stringValue.flatMap(SocketTime.parse) {
            #expect(abs(at.timeIntervalSince(away) - 30 * 60) <= 1, "session ended at \(at), background since \(away)")
        }
        #expect(d.call("setAppState", #"{"state":"active"}"#)["sessionStarted"] == true)
        #expect(eventually { d.flagRequests == requests + 1 })
    }

    @Test("RF-10: after a 503 with Retry-After 600, the retry waits 10 device minutes, then runs as fired 'retry'")
    func retryAfterInDeviceTime() throws {
        let d = try Device()
        #expect(d.waitForFlags())
        _ = d.advance(6 * 60)
        d.emulator.admin("POST", "/admin/faults", #"{"method":"getFeatureFlags","times":1,"http":503,"retryAfter":600}"#)
        let hour = d.advance(2 * 3600)  // the hourly refresh fails; its retry must wait for Retry-After
        let refresh = d.fired(hour, "refresh")
        #expect(!refresh.isEmpty, "\(hour)")
        let failedAt = refresh.first?["at"]?.stringValue.flatMap(SocketTime.parse)
        let retries = d.fired(hour, "retry").compactMap { $0["at"]?.stringValue.flatMap(SocketTime.parse) }
        #expect(!retries.isEmpty, "\(hour)")
        if let failedAt, let first = retries.first {
            #expect(first.timeIntervalSince(failedAt) >= 600 - 1, "retry \(first) after failure \(failedAt)")
        }
        #expect(d.call("status")["state"] == "ready")
        #expect(d.call("status")["consecutiveFailures"] == 0)
    }

    @Test("ST-6, H: kill -9 in the middle of a 30-day advanceClock loses neither the flags nor the offset")
    func aCrashDuringAnAdvance() throws {
        let d = try Device()
        #expect(d.waitForFlags())
        let client = try LineClient(path: d.agent.socketPath, timeout: 60)
        client.send(#"{"jsonrpc":"2.0","id":1,"method":"advanceClock","params":{"seconds":2592000}}"# + "\n")
        #expect(eventually(timeout: 20) { d.flagRequests >= 20 })
        try d.restart(kill: SIGKILL)
        let clock = d.call("clock")
        #expect((clock["offsetSeconds"]?.numberValue ?? 0) >= 19 * 3600, "\(clock)")
        let status = d.call("status")
        #expect(status["state"] == "ready" && status["flagsCount"] != 0, "\(status)")
        // Flags received at device time T are never younger than the clock says (not "from the future").
        let age = status["flagsAgeSeconds"]?.numberValue ?? -1
        #expect(age >= 0 && age < 2 * 3600, "\(status)")
        _ = d.agent.stop()  // its standard error ends with it
        #expect(!d.agent.stderrText.contains("damaged"))
    }

    @Test("H: 30 device days in one call fire the hourly refreshes a 30-day run would, in seconds")
    func thirtyDaysInOneCall() throws {
        let d = try Device()
        #expect(d.waitForFlags())
        let offsetBefore = d.call("clock")["offsetSeconds"]?.numberValue ?? -1
        let started = monotonicSeconds()
        let result = d.advance(30 * 86400)
        // The jumps sum to exactly what was asked; the network's time is flow, not jump.
        let offsetAfter = d.call("clock")["offsetSeconds"]?.numberValue ?? -1
        #expect(abs(offsetAfter - offsetBefore - 30 * 86400) < 0.002, "offset \(offsetBefore) → \(offsetAfter)")
        let elapsed = monotonicSeconds() - started
        let refreshes = d.fired(result, "refresh").count
        // RF-2, RF-12: the device keeps its hour: 24 a day, the last slot of the 30 days
        // (720) falling inside the advance or just after it, by the device's phase.
        #expect((719...720).contains(refreshes), "\(refreshes) refreshes, expected 24 a day: 719 or 720")
        #expect(d.fired(result, "expired").isEmpty)
        #expect(elapsed < 60, "30 days took \(elapsed) s")
        print("DeviceClockTests: 30 device days, \(refreshes) refreshes, in \(String(format: "%.2f", elapsed)) s")
        #expect(d.call("status")["state"] == "ready")
    }

    @Test("H: subscribe events refresh and state: refreshCompleted after every refresh, stateChanged on expiry")
    func refreshAndStateNotifications() throws {
        let d = try Device()
        #expect(d.waitForFlags())
        let watcher = try LineClient(path: d.agent.socketPath, timeout: 10)
        #expect(watcher.call("subscribe", #"{"events":["refresh","state"]}"#)["result"] == [:])
        #expect(d.call("refresh")["sent"] != nil)
        let first = json(watcher.readLine() ?? "")
        #expect(first["method"] == "refreshCompleted" && first["params"]?["trigger"] == "manual", "\(first)")
        _ = d.call("setAppState", #"{"state":"background"}"#)
        _ = d.advance(25 * 3600)
        var methods: [String] = []
        while !methods.contains("stateChanged"), let line = watcher.readLine() { methods.append(json(line)["method"]?.stringValue ?? "?") }
        #expect(methods.contains("stateChanged"), "\(methods)")
    }

    @Test("IM-3: an impression is sent once per session; after 31 min in the background a new session sends it again")
    func impressionSessionsInDeviceTime() throws {
        let d = try Device()
        #expect(d.waitForFlags())
        let key = #"{"key":"new_checkout"}"#
        #expect(d.call("logImpression", key)["logged"] == true)
        #expect(d.call("logImpression", key)["logged"] == false)  // the same session
        _ = d.call("setAppState", #"{"state":"background"}"#)
        _ = d.advance(29 * 60)
        #expect(d.call("setAppState", #"{"state":"active"}"#)["sessionStarted"] == false)
        #expect(d.call("logImpression", key)["logged"] == false)  // still the same session
        _ = d.call("setAppState", #"{"state":"background"}"#)
        _ = d.advance(31 * 60)
        #expect(d.call("setAppState", #"{"state":"active"}"#)["sessionStarted"] == true)
        #expect(d.call("logImpression", key)["logged"] == true)
    }

    @Test("RF-4: an answer for the previous user that comes late, while the clock moves, is dropped")
    func aLateAnswerForThePreviousUser() throws {
        let d = try Device(extra: "", emulator: nil)
        #expect(d.waitForFlags())
        _ = d.call("setUserId", #"{"userId":"alice"}"#)
        #expect(eventually { d.call("get", #"{"key":"new_checkout"}"#)["flag"]?["ruleId"] == "r_qa_team" })
        _ = d.advance(6 * 60)  // past the throttle window
        // alice's next answer is held back 1.5 s; meanwhile the user becomes erin (in no rule:
        // her rollout bucket is 95, README).
        d.emulator.admin("POST", "/admin/faults", #"{"method":"getFeatureFlags","times":1,"delayMs":1500}"#)
        let slow = try LineClient(path: d.agent.socketPath, timeout: 30)
        slow.send(#"{"jsonrpc":"2.0","id":7,"method":"refresh","params":{}}"# + "\n")
        #expect(eventually { (json(d.emulator.admin("GET", "/admin/requests?method=getFeatureFlags&userId=alice").1)["count"]?.numberValue ?? 0) >= 2 })
        _ = d.call("setUserId", #"{"userId":"erin"}"#)
        #expect(d.call("get", #"{"key":"new_checkout"}"#)["flag"] == .null)  // alice's flags are gone at once
        // The clock moves an hour while alice's answer is late; it waits for the network.
        _ = d.advance(3600)
        #expect(json(slow.readLine() ?? "")["id"] == 7)
        let flag = d.call("get", #"{"key":"new_checkout"}"#)
        #expect(flag["flag"]?["ruleId"] == "default", "alice's late answer was served to erin: \(flag)")
        #expect(d.call("status")["userId"] == "erin" && d.call("status")["state"] == "ready")
    }

    @Test("H: bad advanceClock params are -32602 naming the field, and the clock does not move")
    func badParams() throws {
        let d = try Device()
        let before = d.call("clock")["offsetSeconds"]
        let cases: [(String, String)] = [
            (#"{"seconds":-5}"#, "seconds"), (#"{"seconds":0}"#, "seconds"), (#"{"seconds":"1h"}"#, "seconds"),
            (#"{}"#, "seconds"), (#"{"seconds":5,"to":"2030-01-01T00:00:00Z"}"#, "to"), (#"{"to":"2001-01-01T00:00:00Z"}"#, "to"),
            (#"{"to":"tomorrow"}"#, "to"), (#"{"to":5}"#, "to"), (#"{"seconds":1e12}"#, "seconds"), (#"{"secs":5}"#, "secs"),
        ]
        for (params, field) in cases {
            let answer = d.answer("advanceClock", params)
            #expect(answer["error"]?["code"] == -32602, "\(params): \(answer)")
            #expect(answer["error"]?["data"]?["parameter"]?.stringValue == field, "\(params): \(answer)")
        }
        #expect(d.call("clock")["offsetSeconds"] == before)
        let unknown = d.answer("subscribe", #"{"events":["flags","nope"]}"#)
        #expect(unknown["error"]?["code"] == -32602 && unknown["error"]?["data"]?["parameter"] == "events", "\(unknown)")
    }

    @Test("H: with Clock=system, clock and advanceClock answer -32004 and nothing changes")
    func notControlled() throws {
        let emulator = try EmulatorProcess()
        let agent = try AgentProcess(server: emulator.serverURL)
        #expect(agent.waitForNotify("READY=1") != nil)
        let c = try LineClient(path: agent.socketPath)
        for (method, params) in [("clock", "{}"), ("advanceClock", #"{"seconds":60}"#)] {
            let answer = c.call(method, params)
            #expect(answer["error"]?["code"] == -32004, "\(answer)")
            #expect(answer["error"]?["message"]?.stringValue?.contains("Clock=controlled") == true)
        }
    }
}
