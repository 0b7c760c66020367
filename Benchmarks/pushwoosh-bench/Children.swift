import AgentPosix
import Foundation
import Glibc
import Synchronization
import HarnessSupport
import ToolSupport

/// The benchmark's child processes (emulator, echo server, agents): spawned with
/// `posix_spawn`, registered so that every way out of the benchmark (normal exit, an
/// error, SIGINT/SIGTERM/SIGHUP) kills them, and reaped with bounded waits.
enum Children {
    private static let live = Mutex<Set<pid_t>>([])
    private static let tempDirectory = Mutex<String?>(nil)

    /// Blocks the terminating signals and starts a thread that waits for them; must run
    /// before any other thread exists. Also installs the `atexit` cleanup.
    static func installCleanup(removing directory: String) {
        tempDirectory.withLock { $0 = directory }
        var set = sigset_t()
        sigemptyset(&set)
        for signal in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&set, signal) }
        pthread_sigmask(SIG_BLOCK, &set, nil)
        signal(SIGPIPE, SIG_IGN)
        atexit { Children.cleanup() }
        let waiter = Thread {
            var set = sigset_t()
            sigemptyset(&set)
            for signal in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&set, signal) }
            var received: Int32 = 0
            sigwait(&set, &received)
            FileHandle.standardError.write(Data("pushwoosh-bench: signal \(received), stopping children\n".utf8))
            Children.cleanup()
            _exit(128 + received)
        }
        waiter.start()
    }

    /// Kills every live child (SIGKILL), reaps it, and removes the temporary directory.
    static func cleanup() {
        let pids = live.withLock { pids in
            let all = pids
            pids.removeAll()
            return all
        }
        for pid in pids {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
        if let directory = tempDirectory.withLock({ $0 }) {
            removeTree(directory)
        }
    }

    /// Starts `path` with `arguments`; standard input is /dev/null, output goes to the files.
    /// `environment` entries are added to (or replace) the benchmark's own.
    static func spawn(_ path: String, _ arguments: [String], environment extra: [String: String] = [:],
                      stdout: String, stderr: String) throws -> pid_t {
        var environment = ProcessInfo.processInfo.environment
        for (key, value) in extra { environment[key] = value }
        // Not inherited: a systemd watchdog or socket activation meant for us.
        for key in ["WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"] where extra[key] == nil {
            environment[key] = nil
        }
        if extra["NOTIFY_SOCKET"] == nil { environment["NOTIFY_SOCKET"] = nil }

        let pid: pid_t
        switch ChildProcess.spawn(path: path, arguments: arguments, environment: environment,
                                  output: .files(stdout: stdout, stderr: stderr)) {
        case .success(let started): pid = started
        case .failure(let error): throw BenchError("cannot start \(path): \(error.message)")
        }
        live.withLock { _ = $0.insert(pid) }
        return pid
    }

    /// Sends `signal` and waits up to `timeout` seconds for the exit (then SIGKILL).
    /// Returns the seconds it took to exit, or nil when it had to be killed.
    @discardableResult
    static func stop(_ pid: pid_t, signal: Int32 = SIGTERM, timeout: Double = 5) -> Double? {
        let started = monotonicSeconds()
        kill(pid, signal)
        var status: Int32 = 0
        while monotonicSeconds() - started < timeout {
            let reaped = waitpid(pid, &status, WNOHANG)
            if reaped == pid || (reaped == -1 && errno == ECHILD) {
                live.withLock { _ = $0.remove(pid) }
                return monotonicSeconds() - started
            }
            usleep(1000)
        }
        kill(pid, SIGKILL)
        waitpid(pid, &status, 0)
        live.withLock { _ = $0.remove(pid) }
        return nil
    }

    /// Waits for `pid` to exit (polling every 0.2 ms, at most `timeout` seconds; then
    /// SIGKILL): its exit status (128 + signal when a signal ended it), nil when it had to be killed.
    static func waitExit(_ pid: pid_t, timeout: Double) -> Int32? {
        let deadline = monotonicSeconds() + timeout
        var status: Int32 = 0
        while monotonicSeconds() < deadline {
            if waitpid(pid, &status, WNOHANG) == pid {
                live.withLock { _ = $0.remove(pid) }
                return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
            }
            usleep(200)
        }
        stop(pid, signal: SIGKILL)
        return nil
    }

    /// True while `pid` has not exited (reaps it when it has).
    static func isAlive(_ pid: pid_t) -> Bool {
        var status: Int32 = 0
        let reaped = waitpid(pid, &status, WNOHANG)
        if reaped == pid {
            live.withLock { _ = $0.remove(pid) }
            return false
        }
        return reaped == 0
    }

    static func removeTree(_ path: String) {
        try? FileManager.default.removeItem(atPath: path)
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Reads a whole small file (proc files, logs); nil when it cannot be read.

func printErr(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}
