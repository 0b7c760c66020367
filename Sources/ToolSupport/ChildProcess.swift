import AgentPosix
import Glibc

/// Starts a child process with `posix_spawn`: standard input from /dev/null, output to
/// files, signal mask cleared and the usual terminating signals reset to their defaults
/// (a parent that blocks or ignores them must not pass that on). The one spawner of the
/// soak runner, the fault tool, the benchmarks and the tests' emulator fixture.
public enum ChildProcess {
    public enum Output: Sendable {
        /// Standard output truncated into this file; standard error into `stderr` (neither
        /// opened through a symbolic link).
        case files(stdout: String, stderr: String)
        /// Both appended to one log file (not opened through a symbolic link).
        case appendBoth(String)
    }

    /// Returns the child's pid, or the `posix_spawn` error number.
    public static func spawn(path: String, arguments: [String], environment: [String: String],
                             output: Output, newProcessGroup: Bool = false) -> Result<pid_t, PosixError> {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        switch output {
        case .files(let stdout, let stderr):
            posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0o644)
            posix_spawn_file_actions_addopen(&actions, 2, stderr, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0o644)
        case .appendBoth(let log):
            posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0o644)
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
        }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF
        if newProcessGroup {
            posix_spawnattr_setpgroup(&attributes, 0)
            flags |= POSIX_SPAWN_SETPGROUP
        }
        posix_spawnattr_setflags(&attributes, Int16(flags))

        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let rc = argv.withUnsafeBufferPointer { a in
            envp.withUnsafeBufferPointer { e in posix_spawn(&pid, path, &actions, &attributes, a.baseAddress!, e.baseAddress!) }
        }
        return rc == 0 ? .success(pid) : .failure(PosixError(errno: rc, call: "posix_spawn", path: path))
    }
}

extension ChildProcess {
    /// `setpriv`, where the system has it (util-linux).
    public static let setpriv = "/usr/bin/setpriv"

    /// `argv` (the executable's path first) run under `setpriv --pdeathsig KILL` when the
    /// system has it: the child gets SIGKILL when the thread that started it ends, so nothing
    /// outlives a tool even killed with `kill -9`. The soak runner's emulator and
    /// `AgentLauncher`'s daemons start so.
    public static func underParentDeathSignal(_ argv: [String]) -> [String] {
        access(setpriv, X_OK) == 0 ? [setpriv, "--pdeathsig", "KILL", "--"] + argv : argv
    }

    /// The port a server announced with a line `listening on HOST:PORT` (the emulator's
    /// first line) in the file at `path`, its standard output: waits up to `timeout` seconds
    /// while `alive()` holds; nil when none came.
    public static func announcedPort(in path: String, timeout: Double, alive: () -> Bool = { true }) -> UInt16? {
        let deadline = monotonicSeconds() + timeout
        while true {
            let text = (try? readWholeFile(path)).map { String(decoding: $0, as: UTF8.self) } ?? ""
            for line in text.split(separator: "\n") where line.hasPrefix("listening on ") {
                if let port = line.split(separator: ":").last.flatMap({ UInt16($0) }) { return port }
            }
            if !alive() || monotonicSeconds() >= deadline { return nil }
            usleep(10_000)
        }
    }

    /// Whether `pid`, a child of this process, has not exited yet (reaps it when it has).
    public static func isRunning(_ pid: pid_t) -> Bool {
        var status: Int32 = 0
        return waitpid(pid, &status, WNOHANG) == 0
    }

    /// Sends `signal` to `pid`, a child of this process, and waits for its exit.
    public static func stop(_ pid: pid_t, signal: Int32 = SIGTERM) {
        kill(pid, signal)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
    }
}
