import AgentCore
@testable import AgentDaemon
import AgentPosix
import Foundation
import Glibc
import Testing
import HarnessSupport
import ToolSupport

/// The real `pushwoosh-agentd` binary against the real emulator, a real socket and a
/// real NOTIFY_SOCKET receiver (docs/socket-api.md B and C).
@Suite(.serialized) struct DaemonIntegrationTests {
    /// Starts the emulator and an agent; waits for READY=1 and the first flags.
    func start(extra: String = "", socketMode: String = "0660", environment: [String: String] = [:])
        throws -> (EmulatorProcess, AgentProcess)
    {
        let emulator = try EmulatorProcess()
        let dir = TempDir()
        let agent = try AgentProcess(dir: dir, config: AgentProcess.config(server: emulator.serverURL, extra: extra, socketMode: socketMode, dir: dir.path),
                                     server: emulator.serverURL, environment: environment)
        guard agent.waitForNotify("READY=1") != nil else { throw FixtureError("no READY=1: \(agent.stderrText)") }
        let client = try LineClient(path: agent.socketPath)
        _ = eventually { client.call("status")["result"]?["state"] == "ready" }
        return (emulator, agent)
    }

    // C: READY=1 with a STATUS= line; B.1 reads with provenance; FF-* over the socket.
    @Test("FF-5, FF-6, FF-8: over the socket, a killed flag is off, a missing key gives the default, a wrong-typed read the default")
    func readinessAndReads() throws {
        let (_, agent) = try start()
        let c = try LineClient(path: agent.socketPath)
        let status = c.call("status")["result"]
        #expect(status?["state"] == "ready")
        #expect(status?["applicationCode"] == "ABCDE-12345")
        #expect(status?["flagsSource"] == "network")
        let isEnabled = c.call("isEnabled", #"{"key":"promo_banner","default":true}"#)["result"]
        #expect(isEnabled?["enabled"] == false)  // FF-8: killed
        #expect(isEnabled?["reason"] == "DISABLED")
        let missing = c.call("isEnabled", #"{"key":"nope","default":true}"#)["result"]
        #expect(missing?["enabled"] == true)  // FF-6
        #expect(missing?["errorCode"] == "FLAG_NOT_FOUND")
        let flag = c.call("get", #"{"key":"new_checkout"}"#)["result"]
        #expect(flag?["flag"]?["key"] == "new_checkout")
        #expect(flag?["source"] == "network")
        #expect(flag?["ageSeconds"]?.numberValue != nil)
        let prop = c.call("property", #"{"key":"new_checkout","property":"max_items","type":"number","default":1}"#)["result"]
        #expect(prop?["value"]?.numberValue != nil)
        let wrong = c.call("property", #"{"key":"new_checkout","property":"max_items","type":"bool","default":false}"#)["result"]
        #expect(wrong?["value"] == false)
        #expect(wrong?["errorCode"] == "TYPE_MISMATCH")
        let stop = agent.stop()
        #expect(stop.status == 0)
        #expect(stop.seconds < 1)
    }

    // B: every protocol error, notifications, batches.
    @Test func protocolErrors() throws {
        let (_, agent) = try start()
        let c = try LineClient(path: agent.socketPath)
        c.send("{not json\n")
        #expect(json(c.readLine()!)["error"]?["code"] == -32700)
        c.send(Array<UInt8>([0xFF, 0xFE, 0x0A]).map { String(UnicodeScalar($0)) }.joined())
        #expect(json(c.readLine()!)["error"]?["code"] != nil)
        c.send(#"{"jsonrpc":"1.0","id":1,"method":"status"}"# + "\n")
        #expect(json(c.readLine()!)["error"]?["code"] == -32600)
        c.send(#"{"jsonrpc":"2.0","id":2,"method":"frobnicate"}"# + "\n")
        #expect(json(c.readLine()!)["error"]?["code"] == -32601)
        c.send(#"{"jsonrpc":"2.0","id":3,"method":"isEnabled","params":{"key":"x"}}"# + "\n")
        let invalid = json(c.readLine()!)
        #expect(invalid["error"]?["code"] == -32602)
        #expect(invalid["id"] == 3)
        c.send("[]\n")
        #expect(json(c.readLine()!)["error"]?["code"] == -32600)
        // A notification gets no answer; the next request's answer comes first.
        c.send(#"{"jsonrpc":"2.0","method":"logImpression","params":{"key":"new_checkout"}}"# + "\n")
        c.send(#"{"jsonrpc":"2.0","id":"s","method":"status"}"# + "\n")
        #expect(json(c.readLine()!)["id"] == "s")
        // A batch gets an array of answers, notifications left out.
        c.send(#"[{"jsonrpc":"2.0","id":1,"method":"isEnabled","params":{"key":"new_checkout","default":false}},{"jsonrpc":"2.0","method":"status"},{"jsonrpc":"2.0","id":2,"method":"nope"},5]"# + "\n")
        let batch = json(c.readLine()!)
        #expect(batch.arrayValue?.count == 3)
        #expect(batch.arrayValue?[1]["error"]?["code"] == -32601)
        #expect(batch.arrayValue?[2]["error"]?["code"] == -32600)
        // A line over 1 MiB: -32600, then the connection is closed; the agent goes on.
        let big = try LineClient(path: agent.socketPath)
        big.send(String(repeating: "x", count: (1 << 20) + 10) + "\n")
        #expect(json(big.readLine() ?? "")["error"]?["code"] == -32600)
        #expect(big.readsEOF())
        #expect(c.call("status")["result"]?["state"] == "ready")
    }

    // B: pipelining: a refresh waiting on the network never holds up a get sent after it.
    @Test func pipeliningAnswersOutOfOrder() throws {
        let (emulator, agent) = try start(extra: "[FeatureFlags]\nDisableThrottle=yes")
        emulator.admin("POST", "/admin/faults", #"{"method":"getFeatureFlags","times":1,"delayMs":1500}"#)
        let c = try LineClient(path: agent.socketPath)
        c.send(#"{"jsonrpc":"2.0","id":1,"method":"refresh"}"# + "\n" + #"{"jsonrpc":"2.0","id":2,"method":"get","params":{"key":"new_checkout"}}"# + "\n")
        let first = json(c.readLine()!)
        let second = json(c.readLine()!)
        #expect(first["id"] == 2)
        #expect(second["id"] == 1)
        #expect(second["result"]?["error"] == .null)
    }

    @Test("LS-2: subscribers get featureFlagsDidUpdate after a refresh that changed flags")
    func subscriptionNotifies() throws {
        let (emulator, agent) = try start(extra: "[FeatureFlags]\nDisableThrottle=yes")
        let watcher = try LineClient(path: agent.socketPath)
        #expect(watcher.call("subscribe")["result"] == [:])
        emulator.admin("POST", "/admin/apps/ABCDE-12345/flags/new_checkout/kill")
        let c = try LineClient(path: agent.socketPath)
        #expect(c.call("refresh")["result"]?["error"] == .null)
        let note = json(watcher.readLine() ?? "")
        #expect(note["method"] == "featureFlagsDidUpdate")
        #expect(note["params"]?["reason"] == "refresh")
        #expect(note["params"]?["changed"] == ["new_checkout"])
        #expect(c.call("isEnabled", #"{"key":"new_checkout","default":true}"#)["result"]?["enabled"] == false)
    }

    @Test("LS-2: a client that unsubscribes hears no more notifications; one still subscribed does")
    func unsubscribeEndsTheSubscription() throws {
        let (emulator, agent) = try start(extra: "[FeatureFlags]\nDisableThrottle=yes")
        let left = try LineClient(path: agent.socketPath)
        let stayed = try LineClient(path: agent.socketPath)
        #expect(left.call("subscribe")["result"] == [:])
        #expect(stayed.call("subscribe")["result"] == [:])
        #expect(left.call("unsubscribe")["result"] == [:])
        emulator.admin("POST", "/admin/apps/ABCDE-12345/flags/new_checkout/kill")
        let c = try LineClient(path: agent.socketPath)
        #expect(c.call("refresh")["result"]?["error"] == .null)
        #expect(json(stayed.readLine() ?? "")["method"] == "featureFlagsDidUpdate")
        // Every subscriber is sent the notification in the same turn of the loop: had `left`
        // still been subscribed, its notification would come before this answer.
        let next = left.call("status", id: 2)
        #expect(next["id"] == 2, "\(next)")
    }

    // B: 256 concurrent clients.
    @Test func manyClients() throws {
        let (_, agent) = try start()
        let clients = try (0..<256).map { _ in try LineClient(path: agent.socketPath) }
        for (i, c) in clients.enumerated() {
            c.send(#"{"jsonrpc":"2.0","id":\#(i),"method":"isEnabled","params":{"key":"new_checkout","default":false}}"# + "\n")
        }
        var answered = 0
        for (i, c) in clients.enumerated() where json(c.readLine() ?? "")["id"] == .number(Double(i)) { answered += 1 }
        #expect(answered == 256)
        // Root (this test) has the reserved slots past MaxConnections; past those it is told
        // why and closed too.
        let reserved = try (0..<SocketSettings.reservedControlSlots).map { _ in try LineClient(path: agent.socketPath) }
        for c in reserved { #expect(c.call("status")["result"]?["hwid"] != nil) }
        let extra = try LineClient(path: agent.socketPath)
        #expect(json(extra.readLine() ?? "")["error"]?["code"] == -32000)
    }

    // B.3: a client running as nobody may read but not change state.
    @Test func nobodyIsRefusedStateChanges() throws {
        let (_, agent) = try start(socketMode: "0666")
        chmod(agent.dir.path, 0o755)
        func asNobody(_ args: [String]) -> Int32 {
            let run = try? runCapturing("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", Binaries.agentctl,
                                                             "--socket", agent.socketPath] + args)
            return run?.status ?? -1
        }
        #expect(asNobody(["is-enabled", "new_checkout"]) == 0)
        #expect(asNobody(["set-user", "mallory"]) == 4)
        let c = try LineClient(path: agent.socketPath)
        #expect(c.call("status")["result"]?["userId"] != "mallory")
    }

    @Test("ST-1, ST-4: across a restart of the process, with the server gone, flags come from the cache")
    func restartKeepsFlags() throws {
        let (emulator, agent) = try start()
        #expect(agent.stop().status == 0)
        emulator.stop()
        let again = try AgentProcess(dir: agent.dir, server: emulator.serverURL)
        let ready = again.waitForNotify("READY=1")
        #expect(ready?.contains("flags") == true)
        let c = try LineClient(path: again.socketPath)
        let e = c.call("get", #"{"key":"new_checkout"}"#)["result"]
        #expect(e?["source"] == "cache")
        #expect(e?["flag"]?["key"] == "new_checkout")
    }

    // C: RELOADING=1 with MONOTONIC_USEC on SIGHUP, then READY=1; a bad file keeps the running configuration.
    @Test func reloadAndStop() throws {
        let (_, agent) = try start()
        agent.signal(SIGHUP)
        let reloading = agent.waitForNotify("RELOADING=1")
        #expect(reloading?.contains("MONOTONIC_USEC=") == true)
        #expect(agent.waitForNotify("READY=1") != nil)
        try "[Agent]\nBogus=1\n".write(toFile: agent.configPath, atomically: true, encoding: .utf8)
        agent.signal(SIGHUP)
        #expect(agent.waitForNotify("READY=1") != nil)
        let c = try LineClient(path: agent.socketPath)
        #expect(c.call("status")["result"]?["state"] == "ready")
        agent.signal(SIGTERM)
        #expect(agent.waitForNotify("STOPPING=1") != nil)
        agent.process.waitUntilExit()
        #expect(agent.process.terminationStatus == 0)
        #expect(agent.stderrText.contains("Bogus"))
        #expect(!FileManager.default.fileExists(atPath: agent.socketPath))  // its own socket is removed
    }

    // C.1: keys the table marks `restart` (Socket=, Clock=) keep their running value on
    // reload, each with a warning naming it; the reload itself still applies the rest.
    @Test func restartOnlyKeysWaitForTheNextStart() throws {
        let (emulator, agent) = try start()
        let config = AgentProcess.config(server: emulator.serverURL, dir: agent.dir.path)
            .replacingOccurrences(of: "Socket=\(agent.socketPath)", with: "Socket=\(agent.dir.path)/moved.sock")
            + "[Device]\nClock=controlled\n"
        #expect(config.contains("moved.sock"))
        try config.write(toFile: agent.configPath, atomically: true, encoding: .utf8)
        agent.signal(SIGHUP)
        #expect(agent.waitForNotify("RELOADING=1") != nil)
        #expect(agent.waitForNotify("READY=1") != nil)
        let c = try LineClient(path: agent.socketPath)
        #expect(c.call("clock")["error"]?["code"] == -32004)  // still Clock=system
        #expect(!FileManager.default.fileExists(atPath: agent.dir.path + "/moved.sock"))
        agent.signal(SIGTERM)
        agent.process.waitUntilExit()
        let err = agent.stderrText
        #expect(err.contains("Socket= changes at the next start, not on reload"))
        #expect(err.contains("Clock= changes at the next start, not on reload"))
        #expect(err.contains("configuration reloaded"))
    }

    // C: WATCHDOG=1 at half of WatchdogSec.
    @Test func watchdogPings() throws {
        let (_, agent) = try start(environment: ["WATCHDOG_USEC": "400000"])
        #expect(agent.waitForNotify("WATCHDOG=1", timeout: 2) != nil)
        #expect(agent.waitForNotify("WATCHDOG=1", timeout: 2) != nil)
    }

    // C.1: a bad configuration stops the start with file, line and key.
    @Test func badConfigurationIsRefused() throws {
        let dir = TempDir()
        let agent = try AgentProcess(dir: dir, config: "[Agent]\nApplicationCode=X\nRefreshInterval=5 parsecs\n", server: "")
        agent.process.waitUntilExit()
        #expect(agent.process.terminationStatus == 1)
        let err = agent.stderrText
        #expect(err.contains("agent.conf:3"))
        #expect(err.contains("RefreshInterval"))
    }

    // B.3: a live agent on the same path makes the second refuse to start; a stale socket file is replaced.
    // (The second has a state directory of its own: on the same one, the state directory's lock
    // stops it first, StateDirectoryLockDaemonTests.)
    @Test func secondAgentRefusesAndStaleSocketIsReplaced() throws {
        let (emulator, agent) = try start()
        let otherDir = TempDir()
        let config = AgentProcess.config(server: emulator.serverURL, dir: otherDir.path)
            .replacingOccurrences(of: "Socket=\(otherDir.path)/agent.sock", with: "Socket=\(agent.socketPath)")
        #expect(config.contains("Socket=\(agent.socketPath)\n"))
        let second = try AgentProcess(dir: otherDir, config: config, server: emulator.serverURL)
        second.process.waitUntilExit()
        #expect(second.process.terminationStatus == 1)
        #expect(second.stderrText.contains("already listening"))
        // SIGKILL leaves a stale socket file behind; the next start replaces it.
        agent.signal(SIGKILL)
        agent.process.waitUntilExit()
        #expect(FileManager.default.fileExists(atPath: agent.socketPath))
        let third = try AgentProcess(dir: agent.dir, server: emulator.serverURL)
        #expect(third.waitForNotify("READY=1") != nil)
    }

    // C: socket activation through systemd-socket-activate; the passed socket is never unlinked.
    @Test func socketActivation() throws {
        let emulator = try EmulatorProcess()
        let dir = TempDir()
        let path = dir.path + "/agent.sock"
        let agent = try AgentProcess(dir: dir, server: emulator.serverURL,
                                     launcher: ["/usr/bin/systemd-socket-activate", "-E", "NOTIFY_SOCKET", "-l", path])
        let c = try #require(firstConnection { try LineClient(path: path) })  // it starts the agent
        #expect(eventually(timeout: 15) { c.call("status")["result"]?["applicationCode"] == "ABCDE-12345" })
        #expect(agent.waitForNotify("READY=1") != nil)
    }

    // Bad input never crashes the agent: binary garbage, half lines, vanished clients.
    @Test func garbageAndVanishingClients() throws {
        let (_, agent) = try start()
        for _ in 0..<20 {
            let c = try LineClient(path: agent.socketPath)
            var junk = [UInt8](repeating: 0, count: 4096)
            for i in junk.indices { junk[i] = UInt8.random(in: 0...255) }
            junk.withUnsafeBytes { _ = Glibc.send(c.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            c.send(#"{"jsonrpc":"2.0","id":1,"method":"sta"#)  // half a line, then gone
        }
        let c = try LineClient(path: agent.socketPath)
        #expect(c.call("status")["result"]?["state"] == "ready")
        #expect(agent.process.isRunning)
    }

    // PR-1, PR-3, PR-4 end to end: the primer's accept runs the registration chain against the
    // emulator (registerDevice with the token, then the RF-3 flags refresh); PR-2 persists.
    @Test("PR-1, PR-2, PR-3, PR-4: the primer end to end: accept registers, the RF-3 refresh follows, minInterval survives a restart")
    func primerRegistrationChain() throws {
        let (emulator, agent) = try start()
        let c = try LineClient(path: agent.socketPath)
        let primer = #"{"title":"Hi","message":"News","acceptButton":"Allow","declineButton":"Later","answer":"accept","minInterval":3600}"#
        let first = c.call("presentPushPrimer", primer)["result"]
        #expect(first?["outcome"] == "accepted")
        #expect(first?["presentation"]?["style"] == "sheet")
        #expect(first?["presentation"]?["position"] == "bottom")
        var token = JSONValue.null
        #expect(eventually { token = c.call("status")["result"]?["pushToken"] ?? .null; return c.call("status")["result"]?["pushRegistered"] == true })
        let (_, devices) = emulator.admin("GET", "/admin/devices")
        #expect(devices.contains(token.stringValue ?? "no token"))
        // RF-3: a flags request follows the registration (the first one was the session start's).
        #expect(eventually { (json(emulator.admin("GET", "/admin/requests?method=getFeatureFlags").1)["count"]?.numberValue ?? 0) >= 2 })
        // Authorized now: suppressed. Denied with the fallback: redirected to settings, unless minInterval holds it.
        #expect(c.call("presentPushPrimer", primer)["result"]?["outcome"] == "suppressed")
        #expect(c.call("setNotificationAuthorization", #"{"status":"denied"}"#)["result"] == [:])
        #expect(c.call("presentPushPrimer", primer)["result"]?["outcome"] == "suppressed")  // shown < 1 h ago
        #expect(agent.stop().status == 0)
        let again = try AgentProcess(dir: agent.dir, server: emulator.serverURL)
        #expect(again.waitForNotify("READY=1") != nil)
        let c2 = try LineClient(path: again.socketPath)
        #expect(c2.call("presentPushPrimer", primer)["result"]?["outcome"] == "suppressed")  // PR-2 survives restarts
        let noInterval = #"{"title":"Hi","message":"News","acceptButton":"Allow","declineButton":"Later","answer":"accept"}"#
        #expect(c2.call("presentPushPrimer", noInterval)["result"]?["outcome"] == "redirectedToSettings")
        let missing = c2.call("presentPushPrimer", #"{"title":"Hi"}"#)
        #expect(missing["error"]?["code"] == -32602)
    }
}
