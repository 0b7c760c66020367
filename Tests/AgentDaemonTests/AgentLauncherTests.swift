import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Launcher
import Testing

/// HarnessSupport's `AgentLauncher`, with the real `pushwoosh-agentd`.
@Suite struct AgentLauncherTests {
    func configuration(_ dir: TempDir, config: String? = nil, wrapper: [String] = []) throws -> AgentLauncher.Configuration {
        let text = config ?? AgentProcess.config(server: "http://127.0.0.1:9/json/1.3/", dir: dir.path)
        try text.write(toFile: dir.file("agent.conf"), atomically: true, encoding: .utf8)
        return AgentLauncher.Configuration(agentd: Binaries.agentd, arguments: ["--config", dir.file("agent.conf")],
                                           notifyPath: dir.file("notify.sock"), logPath: dir.file("agent.log"), wrapper: wrapper)
    }

    @Test("READY=1 is waited for; SIGTERM stops it with exit code 0; the log's tail has what it wrote")
    func readyThenStop() throws {
        let dir = TempDir()
        // A wrapper that writes a line to the log, then runs the daemon in its place.
        let launcher = try AgentLauncher(configuration(dir, wrapper: ["/bin/sh", "-c", "echo launched-by-wrapper >&2; exec \"$@\"", "sh"]))
        let pid = try #require(launcher.pid)
        #expect(launcher.waitForReady(timeout: 10) != nil, "\(launcher.tail(10))")
        #expect(launcher.reap() == nil && kill(pid, 0) == 0)
        #expect(launcher.tail(50).contains("launched-by-wrapper"))
        let exit = launcher.stop()
        #expect(exit.code == 0 && exit.description == "exit code 0", "\(launcher.tail(10))")
        #expect(launcher.pid == nil && launcher.exit == exit && launcher.processID == pid)
        #expect(launcher.stop() == exit, "stopping a stopped process says how it ended")
    }

    @Test("A daemon that exits at once: waitForReady gives up at once, and exit and tail say why")
    func exitsAtOnce() throws {
        let dir = TempDir()
        let launcher = try AgentLauncher(configuration(dir, config: "[Agent]\nNoSuchKey=1\n"))
        let started = monotonicSeconds()
        #expect(launcher.waitForReady(timeout: 10) == nil)
        #expect(monotonicSeconds() - started < 5)
        let exit = try #require(launcher.reap())
        #expect(exit.code != nil && exit.code != 0, "\(exit)")
        #expect(launcher.tail(5).joined(separator: "\n").contains("NoSuchKey"), "\(launcher.tail(5))")
    }

    @Test("A process that ignores SIGTERM is killed after the grace")
    func killAfterGrace() throws {
        let dir = TempDir()
        let launcher = try AgentLauncher(configuration(dir, wrapper: ["/bin/sh", "-c", "trap '' TERM; sleep 30", "sh"]))
        usleep(200_000)
        let started = monotonicSeconds()
        let exit = launcher.stop(grace: 0.3)
        #expect(exit.signal == SIGKILL && exit.description == "killed by signal 9")
        #expect(monotonicSeconds() - started < 5)
    }

    @Test("A notify socket the caller bound: the launcher binds none, READY=1 and STOPPING=1 reach the caller's, and another thread reaps")
    func callerBindsNotifySocket() throws {
        let dir = TempDir()
        let receiver = try NotifyReceiver(path: dir.file("notify.sock"))
        var configuration = try configuration(dir)
        configuration.callerBindsNotifySocket = true
        let launcher = try AgentLauncher(configuration)
        #expect(launcher.notifications == nil)
        #expect(launcher.waitForReady(timeout: 10) == nil, "the caller reads READY=1 itself")
        #expect(receiver.wait(for: "READY=1", timeout: 10) != nil, "\(launcher.tail(10))")
        // A supervisor's thread reaps it while this one signals and waits.
        let supervisor = Thread {
            while launcher.reap() == nil { usleep(1_000) }
        }
        supervisor.start()
        let signalled = monotonicSeconds()
        launcher.signal(SIGTERM)
        let exit = try #require(launcher.waitForExit(timeout: 5), "\(launcher.tail(10))")
        #expect(exit.code == 0 && launcher.pid == nil && launcher.exit == exit)
        #expect((launcher.exitedAt ?? 0) >= signalled)
        #expect(receiver.wait(for: "STOPPING=1", timeout: 1) != nil)
        #expect(launcher.waitForExit(timeout: 0) == exit, "an exit once seen stays")
    }

    @Test("A binary that cannot be started is named")
    func cannotStart() throws {
        let dir = TempDir()
        var configuration = try configuration(dir)
        configuration.agentd = dir.file("no-such-agentd")
        configuration.parentDeathSignal = false
        do {
            _ = try AgentLauncher(configuration)
            Issue.record("started")
        } catch {
            #expect(error.binary == dir.file("no-such-agentd"))
            #expect(error.description.hasPrefix("cannot launch \(dir.file("no-such-agentd")): posix_spawn: No such file"), "\(error)")
        }
    }
}
