import AgentPosix
import Foundation
import Launcher
import Synchronization
#if canImport(Glibc)
import Glibc
import HarnessSupport
import ToolSupport
#endif

/// How a child process ended.
public enum ExitStatus: Sendable, Equatable, CustomStringConvertible {
    case exited(Int32)
    case signaled(Int32)

    init(wait status: Int32) {
        if status & 0x7f == 0 { self = .exited((status >> 8) & 0xff) } else { self = .signaled(status & 0x7f) }
    }

    init(_ exit: AgentExit) { self.init(wait: exit.status) }

    public var description: String {
        switch self {
        case .exited(let code): "exit code \(code)"
        case .signaled(let sig): "killed by signal \(sig) (\(signalName(sig)))"
        }
    }
}

public func signalName(_ sig: Int32) -> String {
    switch sig {
    case SIGTERM: "SIGTERM"
    case SIGKILL: "SIGKILL"
    case SIGINT: "SIGINT"
    case SIGSEGV: "SIGSEGV"
    case SIGABRT: "SIGABRT"
    case SIGILL: "SIGILL"
    case SIGTRAP: "SIGTRAP"
    case SIGBUS: "SIGBUS"
    default: "signal \(sig)"
    }
}

/// The runner's child processes: the agents started by HarnessSupport's `AgentLauncher`, the
/// emulator spawned here; each in its own process group (a terminal's Ctrl-C reaches only the
/// runner, which then stops them), with the parent-death signal set to SIGKILL through
/// `setpriv` when available (no leftovers even if the runner is killed). All reaped in one
/// place, `reap()` (an agent's by asking its launcher), which spots the exits nobody asked for.
public final class ChildProcesses: Sendable {
    public struct Child: Sendable {
        public var pid: pid_t
        public var name: String
        public var logPath: String
        public var startedAt: Time
        /// An agent's launcher, which signals and reaps it (nil: the emulator).
        public var launcher: AgentLauncher?
        /// Set before the runner signals it: its exit is not a crash.
        public var exitExpected = false
        public var exit: ExitStatus?
        public var exitedAt: Time?
        /// Last CPU sample (seconds of user + system time).
        public var cpuSeconds: Double = 0
        public var peakRSSKiB: Int = 0
    }

    private let children = Mutex<[pid_t: Child]>([:])
    /// CPU seconds of processes that have exited, by name prefix (`agent`, `emulator`).
    private let finishedCPU = Mutex<[String: Double]>([:])
    /// Exits nobody asked for, until `drainCrashes()` takes them.
    private let crashes = Mutex<[Child]>([])
    public init() {}

    /// Starts `executable` with `arguments`; standard output and error are appended to `logPath`.
    public func spawn(name: String, executable: String, arguments: [String], environment: [String: String],
                      logPath: String) throws(SoakProcessError) -> pid_t {
        let argv = ChildProcess.underParentDeathSignal([executable] + arguments)
        let pid: pid_t
        switch ChildProcess.spawn(path: argv[0], arguments: Array(argv.dropFirst()), environment: environment,
                                  output: .appendBoth(logPath), newProcessGroup: true) {
        case .success(let started): pid = started
        case .failure(let error): throw SoakProcessError(name: name, binary: executable, .spawn(error))
        }
        children.withLock { $0[pid] = Child(pid: pid, name: name, logPath: logPath, startedAt: now()) }
        return pid
    }

    /// Starts an agent through `AgentLauncher` (the caller's notify socket, the log appended
    /// to, under the parent-death signal, in its own process group), reaped here with the rest.
    public func launchAgent(name: String, _ configuration: AgentLauncher.Configuration) throws(AgentLaunchError) -> AgentLauncher {
        let launcher = try AgentLauncher(configuration)
        let child = Child(pid: launcher.processID, name: name, logPath: configuration.logPath, startedAt: now(), launcher: launcher)
        children.withLock { $0[child.pid] = child }
        return launcher
    }

    public func child(_ pid: pid_t) -> Child? { children.withLock { $0[pid] } }

    /// Marks `pid`'s coming exit as the runner's doing and sends `signal`.
    public func signal(_ pid: pid_t, _ sig: Int32) {
        let child = children.withLock { all in
            all[pid]?.exitExpected = true
            return all[pid]
        }
        if let child { Self.send(sig, to: child) }
    }

    /// Sends `sig` through the agent's launcher (nothing once it is reaped), or to the pid.
    private static func send(_ sig: Int32, to child: Child) {
        if let launcher = child.launcher { launcher.signal(sig) } else if child.exit == nil { _ = kill(child.pid, sig) }
    }

    /// How `child` ended, if it has (reaping it); nil while it runs.
    private static func exit(of child: Child) -> ExitStatus? {
        if let launcher = child.launcher { return launcher.reap().map(ExitStatus.init) }
        var status: Int32 = 0
        return waitpid(child.pid, &status, WNOHANG) == child.pid ? ExitStatus(wait: status) : nil
    }

    /// Waits up to `timeout` for `pid` to be reaped; its exit status, or nil. Every child is
    /// reaped meanwhile: a driver stopping its agent spots the others' crashes too.
    public func waitExit(_ pid: pid_t, timeout: Double) -> ExitStatus? {
        let deadline = now() + timeout
        while true {
            reap()
            if let e = children.withLock({ $0[pid]?.exit }) { return e }
            if now() >= deadline { return nil }
            usleep(10_000)
        }
    }

    /// Reaps exited children; returns those whose exit was not expected.
    @discardableResult
    public func reap() -> [Child] {
        let running = children.withLock { $0.values.filter { $0.exit == nil } }
        var unexpected: [Child] = []
        for candidate in running {
            guard let exit = Self.exit(of: candidate) else { continue }
            let pid = candidate.pid
            // Once: a launcher tells every thread that asks how its agent ended.
            let child: Child? = children.withLock { all in
                guard all[pid]?.exit == nil else { return nil }
                all[pid]?.exit = exit
                all[pid]?.exitedAt = now()
                return all[pid]
            }
            if let child {
                let prefix = child.name.split(separator: "-").first.map(String.init) ?? child.name
                finishedCPU.withLock { $0[prefix, default: 0] += child.cpuSeconds }
                if !child.exitExpected { unexpected.append(child) }
            }
        }
        if !unexpected.isEmpty { crashes.withLock { $0 += unexpected } }
        return unexpected
    }

    /// The unexpected exits seen since the last call.
    public func drainCrashes() -> [Child] {
        crashes.withLock { c in
            defer { c.removeAll() }
            return c
        }
    }

    /// Samples CPU time and peak RSS of the running children from /proc.
    public func sample() {
        let running = children.withLock { $0.values.filter { $0.exit == nil }.map(\.pid) }
        for pid in running {
            guard let (cpu, rss) = Self.procUsage(pid) else { continue }
            children.withLock { all in
                guard var c = all[pid] else { return }
                c.cpuSeconds = cpu
                c.peakRSSKiB = max(c.peakRSSKiB, rss)
                all[pid] = c
            }
        }
    }

    /// CPU seconds of all processes whose name starts with `prefix` (running and exited).
    public func cpuSeconds(prefix: String) -> Double {
        let running = children.withLock { $0.values.filter { $0.exit == nil && $0.name.hasPrefix(prefix) }.reduce(0) { $0 + $1.cpuSeconds } }
        return running + finishedCPU.withLock { $0[prefix] ?? 0 }
    }

    /// The largest peak RSS among processes whose name starts with `prefix`, in KiB.
    public func peakRSS(prefix: String) -> Int {
        children.withLock { $0.values.filter { $0.name.hasPrefix(prefix) }.map(\.peakRSSKiB).max() ?? 0 }
    }

    /// Sends `sig` to every running child (marking the exits as expected).
    public func signalAll(_ sig: Int32) {
        let running = children.withLock { all in
            all.keys.forEach { all[$0]?.exitExpected = true }
            return all.values.filter { $0.exit == nil }
        }
        for child in running { Self.send(sig, to: child) }
    }

    /// Stops every child: SIGTERM, then SIGKILL for those still there after `grace`.
    public func stopAll(grace: Double = 2) {
        signalAll(SIGTERM)
        let deadline = now() + grace
        while now() < deadline {
            reap()
            if children.withLock({ $0.values.allSatisfy { $0.exit != nil } }) { return }
            usleep(20_000)
        }
        signalAll(SIGKILL)
        let hard = now() + 2
        while now() < hard {
            reap()
            if children.withLock({ $0.values.allSatisfy { $0.exit != nil } }) { return }
            usleep(20_000)
        }
    }

    public var runningCount: Int { children.withLock { $0.values.filter { $0.exit == nil }.count } }

    /// (CPU seconds, resident KiB) from /proc/PID/stat and /proc/PID/status.
    static func procUsage(_ pid: pid_t) -> (Double, Int)? {
        guard let cpu = ProcStats.cpuSeconds(pid: pid) else { return nil }
        return (cpu, ProcStats.status(pid: pid, field: "VmRSS") ?? 0)
    }

    /// The runner's own CPU seconds (user + system).
    public static func selfCPU() -> Double {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    }
}

/// The last `count` lines of a file (for evidence).
public func tail(_ path: String, lines count: Int) -> [String] {
    guard let data = FileManager.default.contents(atPath: path) else { return [] }
    let text = String(decoding: data.suffix(64 * 1024), as: UTF8.self)
    return text.split(separator: "\n").suffix(count).map(String.init)
}

/// A systemd notification receiver per agent: `SOCK_DGRAM` Unix sockets, all read by
/// one thread (`pump`). Keeps each agent's messages with their arrival times.
public final class NotifySockets: Sendable {
    public struct Message: Sendable {
        public var time: Time
        public var text: String
    }

    private let fds: [Int32]
    public let paths: [String]
    private let messages: Mutex<[[Message]]>

    public init(paths: [String]) throws(SoakError) {
        var fds: [Int32] = []
        for path in paths {
            let fd: Int32
            do {
                fd = try NotifyReceiver.bindDatagramSocket(path)
            } catch {
                throw .notifySocket(path: path, error)
            }
            var size: Int32 = 1 << 20
            _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            fds.append(fd)
        }
        self.fds = fds
        self.paths = paths
        messages = Mutex(Array(repeating: [], count: paths.count))
    }

    deinit {
        for fd in fds { close(fd) }
        for p in paths { unlink(p) }
    }

    /// Reads what has arrived, waiting up to `timeout` seconds for the first datagram.
    public func pump(timeout: Double) {
        var polls = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        guard poll(&polls, nfds_t(polls.count), Int32(timeout * 1000)) > 0 else { return }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        for (index, p) in polls.enumerated() where p.revents & Int16(POLLIN) != 0 {
            while true {
                let n = buffer.withUnsafeMutableBytes { recv(fds[index], $0.baseAddress, $0.count, 0) }
                if n <= 0 { break }
                let text = String(decoding: buffer[0..<n], as: UTF8.self)
                let t = now()
                messages.withLock { $0[index].append(Message(time: t, text: text)) }
            }
        }
    }

    /// The messages of agent `index` that arrived at or after `since`.
    public func messages(_ index: Int, since: Time = 0) -> [Message] {
        messages.withLock { $0[index].filter { $0.time >= since } }
    }

    /// Whether a datagram containing line `line` (e.g. `READY=1`) arrived at or after `since`.
    public func received(_ index: Int, line: String, since: Time) -> Message? {
        messages.withLock { all in
            all[index].first { $0.time >= since && $0.text.split(separator: "\n").contains { $0 == line } }
        }
    }

    /// Forgets messages older than `before` (long runs).
    public func trim(before: Time) {
        messages.withLock { all in
            for i in all.indices where all[i].count > 2000 { all[i].removeAll { $0.time < before } }
        }
    }
}
