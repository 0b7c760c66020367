import AgentCore
import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Launcher

/// A real `pushwoosh-agentd` process with its own state directory, socket and
/// `NOTIFY_SOCKET` datagram receiver, started by HarnessSupport's `AgentLauncher` (its
/// notifications kept for the test to read; standard error in a log of its own).
final class AgentProcess {
    let dir: TempDir
    let launcher: AgentLauncher
    /// Where its standard error goes (apart from `dir`, which tests look into).
    private let logs = TempDir()
    /// The launcher's own notify socket (the fixture does not bind one itself).
    var notify: NotifyReceiver { launcher.notifications! }
    /// What the tests ask of the process, in Foundation's `Process` words.
    var process: Handle { Handle(launcher: launcher) }
    var socketPath: String { dir.path + "/agent.sock" }
    var configPath: String { dir.path + "/agent.conf" }
    var stateDirectory: String { dir.path + "/state" }

    static func config(server: String, extra: String = "", socketMode: String = "0660", dir: String) -> String {
        """
        [Agent]
        ApplicationCode=ABCDE-12345
        ServerURL=\(server)
        Socket=\(dir)/agent.sock
        SocketMode=\(socketMode)
        StateDirectory=\(dir)/state
        RequestTimeout=5s
        \(extra)
        """
    }

    init(dir: TempDir = TempDir(), config: String? = nil, server: String, environment: [String: String] = [:],
         arguments: [String]? = nil, launcher: [String] = []) throws {
        self.dir = dir
        let text = config ?? Self.config(server: server, dir: dir.path)
        try text.write(toFile: dir.path + "/agent.conf", atomically: true, encoding: .utf8)
        var env = ["PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"]
        env.merge(environment) { $1 }
        // No parent-death signal: a test's thread may end before the test does.
        self.launcher = try AgentLauncher(AgentLauncher.Configuration(
            agentd: Binaries.agentd, arguments: arguments ?? ["--config", dir.path + "/agent.conf"], environment: env,
            notifyPath: dir.path + "/notify-\(UUID().uuidString.prefix(8)).sock", logPath: logs.file("stderr"),
            stdoutToLog: false, wrapper: launcher, parentDeathSignal: false, newProcessGroup: false))
        self.launcher.keepsNotifications = true
    }

    /// `Process`'s names over the launcher: running, its pid, waiting for it, how it ended
    /// (the exit code, or the signal that killed it).
    struct Handle {
        let launcher: AgentLauncher
        var isRunning: Bool { launcher.reap() == nil }
        var processIdentifier: Int32 { launcher.processID }
        func waitUntilExit() { launcher.wait() }
        var terminationStatus: Int32 {
            let exit = launcher.wait()
            return exit.code ?? exit.signal ?? 0
        }
    }

    /// Waits for a datagram containing `needle`; returns it.
    func waitForNotify(_ needle: String, timeout: Double = 10) -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let message = notify.receive(timeout: max(0.01, deadline.timeIntervalSinceNow)), message.contains(needle) {
                return message
            }
        }
        return nil
    }

    func signal(_ sig: Int32) { launcher.signal(sig) }

    /// Sends SIGTERM and waits; returns the exit status and how long it took.
    func stop() -> (status: Int32, seconds: Double) {
        let start = Date()
        signal(SIGTERM)
        let exit = launcher.wait()
        return (exit.code ?? exit.signal ?? 0, Date().timeIntervalSince(start))
    }

    /// Its standard error, once it has exited (as a pipe read to its end would be).
    var stderrText: String {
        launcher.wait()
        return String(decoding: (try? readWholeFile(logs.file("stderr"))) ?? [], as: UTF8.self)
    }
}

/// Parses a line into a JSONValue (kinds kept apart: a Boolean is never a Number).
func json(_ line: String) -> JSONValue {
    (try? JSONDecoder().decode(JSONValue.self, from: Data(line.utf8))) ?? .null
}

/// Polls `condition` for up to `timeout` seconds.
func eventually(timeout: Double = 10, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if condition() { return true }
        usleep(20_000)
    }
    return condition()
}

/// The first connection `connect` makes within `timeout` seconds. A socket's file exists from
/// `bind` on but takes connections only from `listen` on (systemd-socket-activate does both), so
/// a test waits for a connection, not for the file; nil when none came.
func firstConnection<Client>(timeout: Double = 10, _ connect: () throws -> Client) -> Client? {
    var client: Client?
    _ = eventually(timeout: timeout) { client = try? connect(); return client != nil }
    return client
}
