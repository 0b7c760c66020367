import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Testing
import ToolSupport

/// Files the real `pushwoosh-agentd` reads for trust (docs/shared-host.md L.4): a configuration
/// file, a CA file or a token file replaced by a FIFO or a device never blocks it nor fills its
/// memory, and a key set twice in the configuration is told.
@Suite(.serialized) struct TrustedFileDaemonTests {
    /// `pushwoosh-agentd --config PATH`, killed after 10 s (and held to 4 GB of address space) if
    /// it does not stop on its own.
    func start(config path: String) throws -> CapturedRun {
        try runCapturing("/usr/bin/prlimit", ["--as=4000000000", "/usr/bin/timeout", "-s", "KILL", "10", Binaries.agentd, "--config", path])
    }

    /// (Before: blocked in `open` until killed, SIGTERM included; on /dev/zero it read until
    /// the memory ran out.)
    @Test func aConfigurationFileThatIsAFIFOOrADeviceIsRefusedAtOnce() throws {
        let dir = TempDir()
        let fifo = dir.file("agent.conf")
        #expect(mkfifo(fifo, 0o600) == 0)
        for (path, kind) in [(fifo, "a FIFO"), ("/dev/zero", "a character device")] {
            let run = try start(config: path)
            #expect(run.status == 1, "\(path): exit \(run.status) after \(run.seconds) s")
            #expect(run.seconds < 5)
            #expect(run.err.contains("\(path): cannot read the configuration file: not a regular file (\(kind))"), "\(run.err)")
        }
        // A symlink to a FIFO is no better; a symlink to a regular file is read (configuration
        // management links files into place).
        #expect(symlink(fifo, dir.file("link.conf")) == 0)
        let linked = try start(config: dir.file("link.conf"))
        #expect(linked.status == 1 && linked.err.contains("not a regular file (a FIFO)"), "\(linked.err)")
        try "[Agent]\n".write(toFile: dir.file("real.conf"), atomically: true, encoding: .utf8)
        #expect(symlink(dir.file("real.conf"), dir.file("real-link.conf")) == 0)
        let real = try start(config: dir.file("real-link.conf"))
        #expect(real.err.contains("ApplicationCode: required in [Agent], not set"), "\(real.err)")
    }

    /// A CA file swapped for a FIFO, then SIGHUP: the reload fails at once naming the file, the
    /// running configuration is kept and `status` keeps answering.
    @Test func aCAFileSwappedForAFIFOFailsTheReloadPromptly() throws {
        let emulator = try EmulatorProcess()
        let dir = TempDir(files: ["ca.pem": NetworkSettingsTests.certificate])
        let ca = dir.file("ca.pem")
        let agent = try AgentProcess(dir: dir, config: AgentProcess.config(server: emulator.serverURL, extra: "CAFile=\(ca)", dir: dir.path),
                                     server: emulator.serverURL)
        #expect(agent.waitForNotify("READY=1") != nil)
        unlink(ca)
        #expect(mkfifo(ca, 0o644) == 0)
        agent.signal(SIGHUP)
        #expect(agent.waitForNotify("RELOADING=1") != nil)
        #expect(agent.waitForNotify("READY=1") != nil)
        let started = Date()
        #expect(try LineClient(path: agent.socketPath, timeout: 2).call("status")["result"]?["hwid"] != nil)
        #expect(Date().timeIntervalSince(started) < 1)
        #expect(agent.stop().status == 0)
        let log = agent.stderrText
        #expect(log.contains("configuration not reloaded") && log.contains("CAFile: \\\"\(ca)\\\": not a regular file (a FIFO)"), "\(log)")
    }

    /// A key set twice in one file: a warning naming the key, its section and both lines; the
    /// later line wins.
    @Test func aKeySetTwiceIsAWarningNamingBothLines() throws {
        let emulator = try EmulatorProcess()
        let dir = TempDir()
        let config = AgentProcess.config(server: emulator.serverURL, extra: "UserId=first\nUserId=second", dir: dir.path)
        let agent = try AgentProcess(dir: dir, config: config, server: emulator.serverURL)
        #expect(agent.waitForNotify("READY=1") != nil)
        #expect(try LineClient(path: agent.socketPath).call("status")["result"]?["userId"] == "second")
        #expect(agent.stop().status == 0)
        let lines = config.split(separator: "\n", omittingEmptySubsequences: false)
        let first = (lines.firstIndex(of: "UserId=first") ?? 0) + 1
        let log = agent.stderrText
        #expect(log.contains("configuration key set twice; the later line wins file=\(dir.path)/agent.conf section=Agent key=UserId first_line=\(first) line=\(first + 1)"),
                "\(log)")
    }
}
