import AgentCore
import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Testing
import ToolSupport

/// A service manager (or harness) that stops reading its notify socket must not
/// stop the agent. With `net.unix.max_dgram_qlen` at Debian's 10, libsystemd's blocking
/// `sd_notify` hung the whole event loop at the 12th unread datagram: no answers on the
/// socket, no SIGTERM handling. The watchdog at 20 ms makes the agent send a datagram
/// every 10 ms, so the queue is full a fraction of a second after start.
@Suite(.serialized) struct NotifyBacklogTests {
    func startUnread() throws -> (EmulatorProcess, AgentProcess) {
        let emulator = try EmulatorProcess()
        let agent = try AgentProcess(server: emulator.serverURL, environment: ["WATCHDOG_USEC": "20000"])
        // Nothing is read from the notify socket in this test until it says so. Once the
        // socket answers, the loop runs and pings; half a second of real time is ~50 pings
        // against a queue of 11.
        #expect(eventually { (try? LineClient(path: agent.socketPath, timeout: 0.5))?.call("status")["result"] != nil })
        usleep(500_000)
        return (emulator, agent)
    }

    /// SIGTERM, then at most `limit` seconds (a hung agent fails the test instead of hanging it).
    func stop(_ agent: AgentProcess, limit: Double = 3) -> (status: Int32?, seconds: Double) {
        let start = monotonicSeconds()
        agent.signal(SIGTERM)
        guard eventually(timeout: limit, { !agent.process.isRunning }) else {
            agent.signal(SIGKILL)
            agent.process.waitUntilExit()
            return (nil, monotonicSeconds() - start)
        }
        return (agent.process.terminationStatus, monotonicSeconds() - start)
    }

    /// The queue fills (real time: the watchdog's 50-ms beat has to produce 12 datagrams);
    /// then the agent must still answer, and deliver what waited once the receiver reads.
    @Test func aFullNotifySocketDoesNotStopTheLoop() throws {
        let (_, agent) = try startUnread()
        let client = try LineClient(path: agent.socketPath, timeout: 3)
        let status = client.call("status")["result"]
        #expect(status?["state"] != nil, "no answer while the notify socket is full")
        // The first datagram is READY=1; the backlog follows once the receiver reads.
        let first = agent.notify.receive(timeout: 1)
        #expect(first?.split(separator: "\n").first == "READY=1")
        var later: [String] = []
        let deadline = monotonicSeconds() + 3
        while monotonicSeconds() < deadline, !later.contains(where: { $0.contains("WATCHDOG=1") }) || later.count < 15 {
            if let m = agent.notify.receive(timeout: 0.2) { later.append(m) }
        }
        #expect(later.count >= 15, "the agent did not go on notifying: \(later.count) datagrams")
        expectCleanStop(agent, logging: ["systemd notify socket full", "systemd notifications delivered again"])
    }

    /// Nobody ever reads: SIGTERM still stops the agent cleanly, within docs/configuration.md C's second.
    @Test func sigtermIsHandledWhileTheNotifySocketIsFull() throws {
        let (_, agent) = try startUnread()
        expectCleanStop(agent, logging: ["stopping signal=SIGTERM", "exiting with systemd notifications undelivered"])
    }

    /// SIGTERM: exit 0 within docs/configuration.md C's second (1.5 s with slack), and these lines in the log.
    func expectCleanStop(_ agent: AgentProcess, logging lines: [String], sourceLocation: SourceLocation = #_sourceLocation) {
        let stop = stop(agent)
        #expect(stop.status == 0, sourceLocation: sourceLocation)
        #expect(stop.seconds < 1.5, sourceLocation: sourceLocation)
        let log = agent.stderrText
        for line in lines { #expect(log.contains(line), "\(log)", sourceLocation: sourceLocation) }
    }
}
