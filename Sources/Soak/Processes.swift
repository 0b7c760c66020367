import AgentPosix
import Foundation
import HarnessSupport
import Synchronization
#if canImport(Glibc)
import Glibc
import ToolSupport
#endif

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

/// The last `count` lines of a file (for evidence).
public func tail(_ path: String, lines count: Int) -> [String] {
    guard let data = FileManager.default.contents(atPath: path) else { return [] }
    let text = String(decoding: data.suffix(64 * 1024), as: UTF8.self)
    return text.split(separator: "\n").suffix(count).map(String.init)
}

/// The runner's one child: the emulator, which serves the lab its agents live in. It runs in
/// its own process group (a terminal's Ctrl-C reaches only the runner, which then stops it)
/// under the parent-death signal (`setpriv --pdeathsig KILL`), and its lab runs each agent
/// under one too: nothing outlives the runner, even `kill -9`.
public final class EmulatorChild: Sendable {
    public let pid: pid_t
    public let logPath: String
    private let ended = Mutex<String?>(nil)

    public init(binary: String, arguments: [String], environment: [String: String], logPath: String) throws(SoakProcessError) {
        let argv = ChildProcess.underParentDeathSignal([binary] + arguments)
        switch ChildProcess.spawn(path: argv[0], arguments: Array(argv.dropFirst()), environment: environment,
                                  output: .appendBoth(logPath), newProcessGroup: true) {
        case .success(let started): pid = started
        case .failure(let error): throw SoakProcessError(name: "emulator", binary: binary, .spawn(error))
        }
        self.logPath = logPath
    }

    /// How it ended (`exit code N`, `killed by signal N (NAME)`), reaping it; nil while it runs.
    public func exit() -> String? {
        ended.withLock { ended in
            if ended == nil {
                var status: Int32 = 0
                if waitpid(pid, &status, WNOHANG) == pid {
                    ended = status & 0x7f == 0 ? "exit code \((status >> 8) & 0xff)" : "killed by signal \(status & 0x7f) (\(signalName(status & 0x7f)))"
                }
            }
            return ended
        }
    }

    public func signal(_ sig: Int32) {
        if exit() == nil { kill(pid, sig) }
    }

    /// SIGTERM (its lab stops its devices first), then SIGKILL after `grace` seconds.
    public func stop(grace: Double = 15) {
        signal(SIGTERM)
        let deadline = now() + grace
        while exit() == nil, now() < deadline { usleep(20_000) }
        signal(SIGKILL)
        while exit() == nil { usleep(10_000) }
    }
}

/// Which processes of the run were seen to end, and which ends were the runner's doing: an
/// agent is a child of the lab, so the runner sees it end in /proc (gone, or a zombie the lab
/// has not reaped yet) and asks the lab how (its DEVICE record). The first time a process is
/// seen ended is kept: a crash falls on the time it was first seen, and a number the system
/// gives to a new process later is not taken for the old one.
public final class ExitWatch: Sendable {
    private struct State {
        var expected: Set<Int32> = []
        var endedAt: [Int32: Time] = [:]
        var reported: Set<Int32> = []
    }

    private let state = Mutex(State())
    public init() {}

    /// The lab started a process as `pid`: a number seen before belonged to a process that ended.
    public func started(_ pid: Int32) {
        state.withLock { s in
            s.expected.remove(pid)
            s.endedAt[pid] = nil
            s.reported.remove(pid)
        }
    }

    /// The runner is about to signal `pid`: its end is no crash.
    public func expect(_ pid: Int32) { state.withLock { _ = $0.expected.insert(pid) } }

    /// Whether `pid` runs (a process ended once stays ended).
    public func isUp(_ pid: Int32) -> Bool {
        if state.withLock({ $0.endedAt[pid] != nil }) { return false }
        if ProcStats.isAlive(pid) { return true }
        let t = now()
        state.withLock { s in if s.endedAt[pid] == nil { s.endedAt[pid] = t } }
        return false
    }

    /// When `pid` was first seen ended.
    public func endedAt(_ pid: Int32) -> Time? { state.withLock { $0.endedAt[pid] } }

    /// Waits up to `timeout` for `pid` to end; when it was seen ended, or nil.
    public func waitEnd(_ pid: Int32, timeout: Double) -> Time? {
        let deadline = now() + timeout
        while isUp(pid) {
            if now() >= deadline { return nil }
            usleep(5_000)
        }
        return endedAt(pid)
    }

    /// `pid` ended on its own and was not reported yet: when (nil otherwise).
    public func unreportedCrash(_ pid: Int32) -> Time? {
        guard !isUp(pid) else { return nil }
        return state.withLock { s in s.expected.contains(pid) || s.reported.contains(pid) ? nil : s.endedAt[pid] }
    }

    public func reported(_ pid: Int32) { state.withLock { _ = $0.reported.insert(pid) } }
}

/// What each agent told its `NOTIFY_SOCKET`, as the lab read it (`GET
/// /lab/devices/NAME/notifications`, each with the time the lab read it), and how far each
/// agent's notifications are known: `readAt`, when the last reading that came back was asked for
/// (everything sent before then is in).
public final class NotifyLog: Sendable {
    public struct Message: Sendable {
        public var time: Time
        public var text: String
        public init(time: Time, text: String) {
            self.time = time
            self.text = text
        }
    }

    private struct Agent {
        var messages: [Message] = []
        var next = 0
        var readAt: Time?
    }

    private let agents: Mutex<[Agent]>

    public init(agents count: Int) {
        agents = Mutex(Array(repeating: Agent(), count: count))
    }

    /// Where the next reading of `agent` starts (the lab's `after`).
    public func cursor(_ agent: Int) -> Int { agents.withLock { $0[agent].next } }

    /// What a reading asked for at `asked` brought.
    public func add(_ agent: Int, _ new: [Message], next: Int, asked: Time) {
        agents.withLock { all in
            all[agent].messages += new
            all[agent].next = next
            all[agent].readAt = max(all[agent].readAt ?? asked, asked)
        }
    }

    public func readAt(_ agent: Int) -> Time? { agents.withLock { $0[agent].readAt } }

    /// The messages of agent `index` that came at or after `since`.
    public func messages(_ index: Int, since: Time = 0) -> [Message] {
        agents.withLock { $0[index].messages.filter { $0.time >= since } }
    }

    /// The first message with line `line` (e.g. `READY=1`) that came at or after `since`.
    public func received(_ index: Int, line: String, since: Time) -> Message? {
        agents.withLock { all in
            all[index].messages.first { $0.time >= since && $0.text.split(separator: "\n").contains { $0 == line } }
        }
    }

    /// Forgets messages older than `before` (long runs).
    public func trim(before: Time) {
        agents.withLock { all in
            for i in all.indices where all[i].messages.count > 2000 { all[i].messages.removeAll { $0.time < before } }
        }
    }
}

/// CPU time and peak RSS of the run's processes (the emulator, and every agent the lab ran),
/// sampled from /proc; a process keeps its last sample once it has ended.
public final class ResourceSampler: Sendable {
    private struct Sample {
        var prefix: String
        var cpu: Double
        var rss: Int
    }

    private let samples = Mutex<[Int32: Sample]>([:])
    public init() {}

    /// Samples `pids` (each with its kind: `agent`, `emulator`) that still run.
    public func sample(_ pids: [(prefix: String, pid: Int32)]) {
        for (prefix, pid) in pids where ProcStats.isAlive(pid) {
            guard let cpu = ProcStats.cpuSeconds(pid: pid) else { continue }
            let rss = ProcStats.status(pid: pid, field: "VmRSS") ?? 0
            samples.withLock { all in
                let peak = max(all[pid]?.rss ?? 0, rss)
                all[pid] = Sample(prefix: prefix, cpu: cpu, rss: peak)
            }
        }
    }

    /// CPU seconds of the processes of kind `prefix`.
    public func cpuSeconds(prefix: String) -> Double {
        samples.withLock { $0.values.filter { $0.prefix == prefix }.reduce(0) { $0 + $1.cpu } }
    }

    /// The largest peak RSS among the processes of kind `prefix`, in KiB.
    public func peakRSS(prefix: String) -> Int {
        samples.withLock { $0.values.filter { $0.prefix == prefix }.map(\.rss).max() ?? 0 }
    }
}
