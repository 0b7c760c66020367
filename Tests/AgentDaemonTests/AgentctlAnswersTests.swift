import AgentCore
import AgentWire
import Foundation
import Glibc
import HarnessSupport
import Testing

/// What `pushwoosh-agentctl` tells a tester, against the real binaries: a refresh says
/// whether it was sent (and until when the throttle holds it), a fallback read warns on
/// standard error, `--strict` exits 5, and `watch` stamps every line with device time and
/// survives a restart with `--reconnect`.
@Suite(.serialized) struct AgentctlAnswersTests {
    static func agentctl(_ socket: String, _ arguments: [String]) throws -> CapturedRun {
        try runCapturing(Binaries.agentctl, ["--socket", socket] + arguments)
    }

    @Test("RF-6: refresh says sent or not sent (and until when, in device time); --strict exits 5 when not sent")
    func refreshTellsSentFromNotSent() throws {
        let d = try DeviceClockTests.Device()
        #expect(d.waitForFlags())
        let socket = d.agent.socketPath
        _ = d.advance(2 * 86400)  // the device's time is now days ahead of the host's
        // A sent refresh opens a throttle window now (an hourly one may have opened one already).
        var opening = d.call("refresh")
        if opening["sent"] == false {
            _ = d.advance(6 * 60)
            opening = d.call("refresh")
        }
        #expect(opening["sent"] == true)
        let requests = d.flagRequests
        let opened = try #require((d.call("status")["lastRefreshAt"]?.stringValue).flatMap(SocketTime.parse))

        let throttled = try Self.agentctl(socket, ["refresh"])
        // The window's end: 5 min after the answer that opened it (the status shows its second).
        let printed = throttled.out.firstMatch(of: #/^refresh: not sent \(throttle window until (\S+); the stored flags are in use\)\n$/#)
        let until = try #require(printed.map { String($0.output.1) }, "\(throttled.out)")
        let end = try #require(SocketTime.parse(until))
        #expect(end.timeIntervalSince(opened) >= 300 && end.timeIntervalSince(opened) <= 302, "\(opened) \(until)")
        #expect(throttled.status == 0)
        #expect(throttled.err.isEmpty, "\(throttled.err)")
        let strict = try Self.agentctl(socket, ["refresh", "--strict"])
        #expect(strict.status == 5 && strict.out == throttled.out)
        let json = try Self.agentctl(socket, ["--json", "refresh"])
        #expect(json.out == #"{"error":null,"sent":false,"throttledUntil":"\#(until)"}"# + "\n")
        #expect(json.err.hasPrefix("warning: refresh not sent: answered from the stored flags inside the throttle window"))
        #expect(d.flagRequests == requests)

        _ = d.advance(6 * 60)
        #expect(d.emulator.admin("POST", "/admin/apps/ABCDE-12345/flags/new_checkout/kill").0 == 200)
        let sent = try Self.agentctl(socket, ["refresh", "--strict"])
        #expect(sent.status == 0)
        #expect(sent.out == "refresh: sent; changed new_checkout\n", "\(sent.out)")
        _ = d.advance(6 * 60)
        let unchanged = try Self.agentctl(socket, ["refresh"])
        #expect(unchanged.out == "refresh: sent; no flags changed\n", "\(unchanged.out)")
        #expect(d.flagRequests == requests + 2)

        // fleet call refresh says the same, per instance.
        let fleet = try Self.agentctl(socket, ["fleet", "--socket-dir", (socket as NSString).deletingLastPathComponent, "call", "refresh"])
        #expect(fleet.out.split(separator: "\n").contains { $0.hasPrefix("agent ") && $0.contains("  not sent  throttle window until ") },
                "\(fleet.out)")
        print("AgentctlAnswersTests: \(throttled.out.trimmingCharacters(in: .newlines)) | \(sent.out.trimmingCharacters(in: .newlines))")
    }

    @Test("A read answered with the caller's default warns on stderr naming the code and the key; --strict exits 5")
    func fallbacksAreNeverSilent() throws {
        let d = try DeviceClockTests.Device()
        #expect(d.waitForFlags())
        let socket = d.agent.socketPath

        let missing = try Self.agentctl(socket, ["is-enabled", "nosuchflag"])
        #expect(missing.status == 0 && missing.out == "false\n")
        #expect(missing.err == "warning: FLAG_NOT_FOUND: no flag \"nosuchflag\" in the served flags; printed the default\n")
        #expect(try Self.agentctl(socket, ["is-enabled", "nosuchflag", "--strict"]).status == 5)
        #expect(try Self.agentctl(socket, ["--strict", "is-enabled", "nosuchflag"]).status == 2)  // a command's option, after it

        let mismatch = try Self.agentctl(socket, ["property", "new_checkout", "max_items", "--type", "string", "--default", "none"])
        #expect(mismatch.status == 0 && mismatch.out == "none\n")
        #expect(mismatch.err
            == "warning: TYPE_MISMATCH: property \"max_items\" of flag \"new_checkout\" is a number, not a string; printed the default\n")
        let absent = try Self.agentctl(socket, ["property", "new_checkout", "max_itemz", "--type", "number", "--default", "7"])
        #expect(absent.status == 0 && absent.out == "7\n")
        #expect(absent.err == "warning: TYPE_MISMATCH: flag \"new_checkout\" has no property \"max_itemz\"; printed the default\n")
        #expect(try Self.agentctl(socket, ["property", "new_checkout", "max_items", "--type", "string", "--strict"]).status == 5)
        let get = try Self.agentctl(socket, ["get", "nosuchflag", "--strict"])
        #expect(get.status == 5 && get.err.hasPrefix("warning: FLAG_NOT_FOUND: no flag \"nosuchflag\""))

        // What the agent serves: no warning, exit 0, --strict or not.
        for args in [["is-enabled", "new_checkout", "--strict"], ["is-enabled", "promo_banner", "--strict"],
                     ["property", "new_checkout", "max_items", "--type", "number", "--strict"], ["get", "new_checkout", "--strict"]] {
            let run = try Self.agentctl(socket, args)
            #expect(run.status == 0 && run.err.isEmpty, "\(args): \(run.status) \(run.err)")
        }
        // One vocabulary of property types: json, jsonObject and json-object alike.
        let spelled = try ["json", "jsonObject", "json-object"].map { try Self.agentctl(socket, ["property", "home_layout", "layout", "--type", $0]).out }
        #expect(Set(spelled).count == 1 && spelled[0].hasPrefix("{"), "\(spelled)")
        let bad = try Self.agentctl(socket, ["property", "home_layout", "layout", "--type", "object"])
        #expect(bad.status == 2 && bad.err.contains("--type must be one of string, number, bool, jsonObject (or json, json-object), jsonArray (or json-array)"))

        // No valid flags at all: PROVIDER_NOT_READY.
        _ = d.call("setAppState", #"{"state":"background"}"#)
        _ = d.advance(25 * 3600)
        let notReady = try Self.agentctl(socket, ["is-enabled", "new_checkout", "--default", "true"])
        #expect(notReady.out == "true\n" && notReady.status == 0)
        #expect(notReady.err == "warning: PROVIDER_NOT_READY: no valid flags are served (none received yet, or past their lifetime); printed the default\n")
        #expect(try Self.agentctl(socket, ["is-enabled", "new_checkout", "--strict"]).status == 5)
    }

    @Test("watch --events flags,refresh,state --reconnect: device time on every line, and it keeps watching across a restart")
    func watchInDeviceTimeAcrossRestarts() throws {
        let d = try DeviceClockTests.Device()
        #expect(d.waitForFlags())
        _ = d.advance(3 * 86400)  // device time three days ahead of the host's
        let watch = try WatchProcess(socket: d.agent.socketPath, ["watch", "--events", "flags,refresh,state", "--reconnect"])
        defer { watch.stop() }
        #expect(eventually { watch.err.contains("watching \(d.agent.socketPath) for flags, refresh, state") })

        _ = d.advance(3600 + 400)  // the hourly refresh
        #expect(eventually { watch.lines.contains { $0.contains(" refresh (periodic): sent") } }, "\(watch.lines)")
        _ = d.advance(10 * 60)
        #expect(d.emulator.admin("POST", "/admin/apps/ABCDE-12345/flags/new_checkout/kill").0 == 200)
        _ = d.call("refresh")
        #expect(eventually { watch.lines.contains { $0.hasSuffix(" refresh: changed new_checkout") } }, "\(watch.lines)")

        try d.restart()
        #expect(eventually(timeout: 15) { watch.err.contains("reconnected to \(d.agent.socketPath)") }, "\(watch.err)")
        _ = d.advance(3600 + 400)
        #expect(eventually { watch.lines.filter { $0.contains(" refresh (periodic): sent") }.count >= 2 }, "\(watch.lines)")
        _ = d.call("setAppState", #"{"state":"background"}"#)
        _ = d.advance(25 * 3600)
        #expect(eventually { watch.lines.contains { $0.contains(" state: notReady (was ready)") } }, "\(watch.lines)")

        // Every line starts with a device time: days ahead of the host's clock, never the host's.
        let deviceNow = try #require((d.call("clock")["now"]?.stringValue).flatMap(SocketTime.parse))
        for line in watch.lines {
            let stamp = try #require(line.split(separator: " ").first.flatMap { SocketTime.parse(String($0)) }, "\(line)")
            #expect(stamp.timeIntervalSinceNow > 2 * 86400, "\(line) is not in device time")
            #expect(stamp <= deviceNow.addingTimeInterval(1), "\(line)")
        }
        print("AgentctlAnswersTests: watch printed \(watch.lines.count) lines, e.g. \(watch.lines.first ?? "-")")
    }
}

/// A `pushwoosh-agentctl` that keeps running (`watch`), its output collected as it comes.
final class WatchProcess: @unchecked Sendable {
    let process = Process()
    private let lock = NSLock()
    private var outText = ""
    private var errText = ""

    init(socket: String, _ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: Binaries.agentctl)
        process.arguments = ["--socket", socket] + arguments
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        out.fileHandleForReading.readabilityHandler = { [weak self] h in
            let data = h.availableData
            self?.lock.withLock { self?.outText += String(decoding: data, as: UTF8.self) }
        }
        err.fileHandleForReading.readabilityHandler = { [weak self] h in
            let data = h.availableData
            self?.lock.withLock { self?.errText += String(decoding: data, as: UTF8.self) }
        }
        try process.run()
    }

    var lines: [String] { lock.withLock { outText.split(separator: "\n").map(String.init) } }
    var err: String { lock.withLock { errText } }

    /// SIGKILL: a child of the test runner may inherit a mask that blocks SIGTERM.
    func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    deinit { stop() }
}
