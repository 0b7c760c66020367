import AgentPosix
import Foundation
import Glibc
import Synchronization
import ToolSupport

/// How a launched process ended: the raw `waitpid` status, said as the lab says it.
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

/// The one launcher of `pushwoosh-agentd` for the lab, the tools and the tests: its own
/// `NOTIFY_SOCKET` receiver (bound before the start, kept open) unless the caller supplies one
/// it bound and reads itself, the process under `setpriv --pdeathsig KILL` when there is one
/// (nothing outlives the launcher's process, even `kill -9`), in its own process group, its
/// output appended to a log; `waitForReady`, `reap`, `waitForExit`, `stop` (a signal, then
/// `SIGKILL` after a grace) and the log's `tail`. Its process's state is behind a lock, so a
/// supervisor's thread may `reap()` it (the lab's listing spots an exit so) while another signals and
/// stops it.
public final class AgentLauncher: Sendable {
    public struct Configuration: Sendable {
        public var agentd: String
        /// The daemon's own arguments (`--config PATH`).
        public var arguments: [String]
        /// Its environment; `NOTIFY_SOCKET` is `notifyPath`.
        public var environment: [String: String]
        /// Where its notify socket is: bound by the launcher (a stale socket there is
        /// replaced), or, when `callerBindsNotifySocket`, by the caller.
        public var notifyPath: String
        /// The caller bound `notifyPath` and reads it (`pushwoosh-fault kill9`'s one socket for
        /// the whole run, across its restarts): the launcher binds nothing and `notifications` is nil.
        public var callerBindsNotifySocket: Bool
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
                    notifyPath: String, callerBindsNotifySocket: Bool = false, logPath: String, stdoutToLog: Bool = true,
                    wrapper: [String] = [], parentDeathSignal: Bool = true, newProcessGroup: Bool = true) {
            self.agentd = agentd
            self.arguments = arguments
            self.environment = environment
            self.notifyPath = notifyPath
            self.callerBindsNotifySocket = callerBindsNotifySocket
            self.logPath = logPath
            self.stdoutToLog = stdoutToLog
            self.wrapper = wrapper
            self.parentDeathSignal = parentDeathSignal
            self.newProcessGroup = newProcessGroup
        }
    }

    /// The process while it runs (`pid`), how it ended and when (monotonic seconds).
    private struct Run {
        var pid: pid_t?
        var exit: AgentExit?
        var exitedAt: Double?
    }

    public let configuration: Configuration
    /// Its notify socket (nil when `callerBindsNotifySocket`); `reap()` drops what queued
    /// there once `waitForReady` is done, unless `keepsNotifications` (a test that reads them).
    public let notifications: NotifyReceiver?
    private let keeping = Atomic<Bool>(false)
    public var keepsNotifications: Bool {
        get { keeping.load(ordering: .relaxed) }
        set { keeping.store(newValue, ordering: .relaxed) }
    }
    /// The process started (kept once it is reaped).
    public let processID: pid_t
    private let run: Mutex<Run>
    /// While it runs (until reaped).
    public var pid: pid_t? { run.withLock { $0.pid } }
    public var exit: AgentExit? { run.withLock { $0.exit } }
    /// When the launcher saw the exit (`monotonicSeconds()`), once it is reaped.
    public var exitedAt: Double? { run.withLock { $0.exitedAt } }

    /// Binds the notify socket (unless the caller did) and starts the daemon.
    public init(_ configuration: Configuration) throws(AgentLaunchError) {
        self.configuration = configuration
        if configuration.callerBindsNotifySocket {
            notifications = nil
        } else {
            do { notifications = try NotifyReceiver(path: configuration.notifyPath) } catch {
                throw AgentLaunchError(binary: configuration.agentd, why: "cannot bind its notify socket: \(error)")
            }
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
        run = Mutex(Run(pid: processID))
    }

    deinit {
        if let pid = run.withLock({ $0.pid }) {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
    }

    /// Waits for `READY=1` on its own notify socket; the monotonic time it came, or nil once
    /// `timeout` passed, the process exited (`exit` says how), `alive` says to stop waiting, or
    /// at once when the caller binds the notify socket (it reads `READY=1` itself).
    public func waitForReady(timeout: Double, alive: () -> Bool = { true }) -> Double? {
        notifications?.wait(for: "READY=1", timeout: timeout, alive: { reap(draining: false) == nil && alive() })?.at
    }

    /// How the process ended, if it has (reaping it); nil while it runs. Any thread may ask.
    @discardableResult
    public func reap() -> AgentExit? { reap(draining: !keepsNotifications) }

    private func reap(draining: Bool) -> AgentExit? {
        if draining { notifications?.drain() }
        // `waitpid` under the lock: one thread reaps the process, and no thread waits for its
        // pid once it is reaped (the number may belong to another child by then).
        return run.withLock { run in
            guard let pid = run.pid else { return run.exit }
            var status: Int32 = 0
            guard waitpid(pid, &status, WNOHANG) == pid else { return nil }
            run = Run(pid: nil, exit: AgentExit(waitStatus: status), exitedAt: monotonicSeconds())
            return run.exit
        }
    }

    /// Sends `signal` while it runs.
    public func signal(_ signal: Int32) {
        run.withLock { run in
            if let pid = run.pid { kill(pid, signal) }
        }
    }

    /// Waits up to `timeout` seconds for the exit (reaping it); nil if it still runs.
    public func waitForExit(timeout: Double) -> AgentExit? {
        let deadline = monotonicSeconds() + timeout
        while true {
            if let exit = reap() { return exit }
            if monotonicSeconds() >= deadline { return nil }
            usleep(5_000)
        }
    }

    /// Sends `signal` and waits up to `grace` seconds for the exit; then `SIGKILL` and waits for it.
    @discardableResult
    public func stop(signal: Int32 = SIGTERM, grace: Double = 5) -> AgentExit {
        if let exit = reap() { return exit }
        self.signal(signal)
        if let exit = waitForExit(timeout: grace) { return exit }
        self.signal(SIGKILL)
        return wait()
    }

    /// Waits for the exit, however long it takes.
    @discardableResult
    public func wait() -> AgentExit {
        while true {
            if let exit = reap() { return exit }
            usleep(2_000)
        }
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
