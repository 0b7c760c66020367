import AgentPosix
import Foundation
import Glibc
import ToolSupport

/// How a launched process ended: the raw `waitpid` status, said as the lab and the soak say it.
public struct AgentExit: Sendable, Equatable, CustomStringConvertible {
    public let status: Int32

    public init(waitStatus: Int32) { status = waitStatus }

    /// The exit code, when it exited on its own.
    public var code: Int32? { status & 0x7f == 0 ? (status >> 8) & 0xff : nil }
    /// The signal that ended it, when one did.
    public var signal: Int32? { status & 0x7f == 0 ? nil : status & 0x7f }
    public var description: String { code.map { "exit code \($0)" } ?? "killed by signal \(signal ?? 0)" }
}

/// `pushwoosh-agentd` could not be launched: the binary and why.
public struct AgentLaunchError: Error, Sendable, CustomStringConvertible {
    public let binary: String
    public let why: String
    public var description: String { "cannot launch \(binary): \(why)" }
}

/// The one launcher of `pushwoosh-agentd` for the tools and the tests: its own
/// `NOTIFY_SOCKET` receiver (bound before the start, kept open), the process under
/// `setpriv --pdeathsig KILL` when there is one (nothing outlives the launcher's process, even
/// `kill -9`), in its own process group, its output appended to a log; `waitForReady`,
/// `reap`, `stop` (a signal, then `SIGKILL` after a grace) and the log's `tail`. Used from one
/// thread at a time.
public final class AgentLauncher {
    public struct Configuration: Sendable {
        public var agentd: String
        /// The daemon's own arguments (`--config PATH`).
        public var arguments: [String]
        /// Its environment; `NOTIFY_SOCKET` is the launcher's.
        public var environment: [String: String]
        /// Where its notify socket is bound (a stale socket there is replaced).
        public var notifyPath: String
        /// Standard error appended here; standard output too unless `stdoutToLog` is false
        /// (then /dev/null).
        public var logPath: String
        public var stdoutToLog: Bool
        /// A command that runs the daemon (`systemd-socket-activate -l PATH`), its arguments
        /// before `agentd`'s path.
        public var wrapper: [String]
        /// Under `setpriv --pdeathsig KILL` when `/usr/bin/setpriv` exists.
        public var parentDeathSignal: Bool
        public var newProcessGroup: Bool

        public init(agentd: String, arguments: [String], environment: [String: String] = ["PATH": "/usr/bin:/bin"],
                    notifyPath: String, logPath: String, stdoutToLog: Bool = true, wrapper: [String] = [],
                    parentDeathSignal: Bool = true, newProcessGroup: Bool = true) {
            self.agentd = agentd
            self.arguments = arguments
            self.environment = environment
            self.notifyPath = notifyPath
            self.logPath = logPath
            self.stdoutToLog = stdoutToLog
            self.wrapper = wrapper
            self.parentDeathSignal = parentDeathSignal
            self.newProcessGroup = newProcessGroup
        }
    }

    public let configuration: Configuration
    /// Its notify socket; `reap()` drops what queued there once `waitForReady` is done, unless
    /// `keepsNotifications` (a test that reads them).
    public let notifications: NotifyReceiver
    public var keepsNotifications = false
    /// The process started (kept once it is reaped).
    public let processID: pid_t
    /// While it runs (until reaped).
    public private(set) var pid: pid_t?
    public private(set) var exit: AgentExit?

    /// Binds the notify socket and starts the daemon.
    public init(_ configuration: Configuration) throws(AgentLaunchError) {
        self.configuration = configuration
        do { notifications = try NotifyReceiver(path: configuration.notifyPath) } catch {
            throw AgentLaunchError(binary: configuration.agentd, why: "cannot bind its notify socket: \(error)")
        }
        var argv = configuration.wrapper + [configuration.agentd] + configuration.arguments
        if configuration.parentDeathSignal { argv = ChildProcess.underParentDeathSignal(argv) }
        var environment = configuration.environment
        environment["NOTIFY_SOCKET"] = configuration.notifyPath
        let output: ChildProcess.Output = configuration.stdoutToLog
            ? .appendBoth(configuration.logPath) : .files(stdout: "/dev/null", stderr: configuration.logPath)
        switch ChildProcess.spawn(path: argv[0], arguments: Array(argv.dropFirst()), environment: environment, output: output,
                                  newProcessGroup: configuration.newProcessGroup) {
        case .success(let started): processID = started
        case .failure(let error):
            // Named by the daemon's binary, and by the command that failed if it was another.
            let command = argv[0] == configuration.agentd ? "" : " \(argv[0])"
            throw AgentLaunchError(binary: configuration.agentd, why: "\(error.call)\(command): \(error.message)")
        }
        pid = processID
    }

    deinit {
        if let pid {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
    }

    /// Waits for `READY=1`; the monotonic time it came, or nil once `timeout` passed, the
    /// process exited (`exit` says how) or `alive` says to stop waiting.
    public func waitForReady(timeout: Double, alive: () -> Bool = { true }) -> Double? {
        notifications.wait(for: "READY=1", timeout: timeout, alive: { reap(draining: false) == nil && alive() })?.at
    }

    /// How the process ended, if it has (reaping it); nil while it runs.
    @discardableResult
    public func reap() -> AgentExit? { reap(draining: !keepsNotifications) }

    private func reap(draining: Bool) -> AgentExit? {
        if draining { notifications.drain() }
        guard let pid else { return exit }
        var status: Int32 = 0
        guard waitpid(pid, &status, WNOHANG) == pid else { return nil }
        self.pid = nil
        exit = AgentExit(waitStatus: status)
        return exit
    }

    /// Sends `signal` while it runs.
    public func signal(_ signal: Int32) {
        if let pid { kill(pid, signal) }
    }

    /// Sends `signal` and waits up to `grace` seconds for the exit; then `SIGKILL` and waits for it.
    @discardableResult
    public func stop(signal: Int32 = SIGTERM, grace: Double = 5) -> AgentExit {
        if let exit = reap() { return exit }
        self.signal(signal)
        let deadline = monotonicSeconds() + grace
        while reap() == nil, monotonicSeconds() < deadline { usleep(5_000) }
        if reap() == nil { self.signal(SIGKILL) }
        return wait()
    }

    /// Waits for the exit, however long it takes.
    @discardableResult
    public func wait() -> AgentExit {
        if let pid {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1, errno == EINTR {}
            self.pid = nil
            exit = AgentExit(waitStatus: status)
        }
        return exit ?? AgentExit(waitStatus: 0)
    }

    /// The last `lines` lines of its log (read from at most its last MiB).
    public func tail(_ lines: Int) -> [String] {
        guard let handle = FileHandle(forReadingAtPath: configuration.logPath) else { return [] }
        defer { try? handle.close() }
        let size = (try? handle.seekToEnd()) ?? 0
        try? handle.seek(toOffset: size > 1 << 20 ? size - (1 << 20) : 0)
        let text = String(decoding: (try? handle.readToEnd()) ?? Data(), as: UTF8.self)
        return Array(text.split(separator: "\n", omittingEmptySubsequences: true).suffix(lines).map(String.init))
    }
}
