import AgentCore
import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Testing
import ToolSupport

/// docs/fleet.md E.1: two real `pushwoosh-agentd` processes on one state directory. The second
/// exits non-zero before it binds its socket or touches the state, with one error line
/// naming the directory and the first one's pid; the first keeps serving.
@Suite(.serialized) struct StateDirectoryLockDaemonTests {
    @Test func aSecondAgentOnTheSameStateDirectoryRefusesToStart() throws {
        let emulator = try EmulatorProcess()
        let first = try AgentProcess(server: emulator.serverURL)
        guard first.waitForNotify("READY=1") != nil else { throw FixtureError("no READY=1: \(first.stderrText)") }
        let client = try LineClient(path: first.socketPath)
        #expect(eventually { client.call("status")["result"]?["flagsSource"] == "network" })
        let stateFile = first.stateDirectory + "/state.json"
        let before = try Data(contentsOf: URL(fileURLWithPath: stateFile))
        let pid = first.process.processIdentifier
        #expect(try String(contentsOfFile: first.stateDirectory + "/agent.lock", encoding: .utf8) == "\(pid)\n")

        // Its own configuration and socket, the first one's state directory.
        let otherDir = TempDir()
        let config = AgentProcess.config(server: emulator.serverURL, dir: otherDir.path)
            .replacingOccurrences(of: "StateDirectory=\(otherDir.path)/state", with: "StateDirectory=\(first.stateDirectory)")
        #expect(config.contains("StateDirectory=\(first.stateDirectory)\n"))
        let second = try AgentProcess(dir: otherDir, config: config, server: emulator.serverURL)
        #expect(eventually(timeout: 10) { !second.process.isRunning })
        second.process.waitUntilExit()
        #expect(second.process.terminationStatus == 1)
        let lines = second.stderrText.split(separator: "\n")
        #expect(lines.count == 1, "expected one line, got:\n\(lines.joined(separator: "\n"))")
        let line = String(lines.first ?? "")
        #expect(line.hasPrefix("pushwoosh-agentd[error]: cannot start"))
        #expect(line.contains("state directory \(first.stateDirectory) is in use by another agent (pid \(pid))"), "\(line)")
        #expect(second.waitForNotify("READY=1", timeout: 0.2) == nil)
        #expect(!FileManager.default.fileExists(atPath: second.socketPath), "the second agent bound its socket")

        // The first one is undisturbed: its connection, a new one, its state and its lock file.
        #expect(client.call("status")["result"]?["state"] == "ready")
        #expect(try LineClient(path: first.socketPath).call("status")["result"]?["state"] == "ready")
        #expect(try Data(contentsOf: URL(fileURLWithPath: stateFile)) == before)
        #expect(try String(contentsOfFile: first.stateDirectory + "/agent.lock", encoding: .utf8) == "\(pid)\n")
        #expect(first.stop().status == 0)

        // Once the first has exited, the directory is free again (the file stays; the lock went with the process).
        let third = try AgentProcess(dir: otherDir, config: config, server: emulator.serverURL)
        #expect(third.waitForNotify("READY=1") != nil, "\(third.stderrText)")
        #expect(try String(contentsOfFile: first.stateDirectory + "/agent.lock", encoding: .utf8) == "\(third.process.processIdentifier)\n")
        #expect(third.stop().status == 0)
    }

    /// Root starting a second agent by hand on an instance's directory (owned by that
    /// instance's dynamic user, as under systemd) is told the directory is in use, not that it
    /// is owned by another user: the lock is taken before the store checks the owner.
    @Test func aSecondAgentIsToldOfTheLockBeforeTheOwner() throws {
        guard geteuid() == 0 else { return }  // chown needs root (CI runs as root)
        let emulator = try EmulatorProcess()
        let dir = TempDir()
        let state = dir.path + "/instance-state"
        #expect(mkdir(state, 0o700) == 0)
        #expect(chown(state, 65_534, 65_534) == 0)
        let holder = try StateDirectoryLock(directory: state, pid: 4242)
        let config = AgentProcess.config(server: emulator.serverURL, dir: dir.path)
            .replacingOccurrences(of: "StateDirectory=\(dir.path)/state", with: "StateDirectory=\(state)")
        let second = try AgentProcess(dir: dir, config: config, server: emulator.serverURL)
        #expect(eventually(timeout: 10) { !second.process.isRunning })
        second.process.waitUntilExit()
        #expect(second.process.terminationStatus == 1)
        #expect(second.stderrText.contains("state directory \(state) is in use by another agent (pid 4242)"), "\(second.stderrText)")
        _ = consume holder
    }
}
