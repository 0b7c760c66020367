import AgentCore
import AgentPosix
import Foundation
import Glibc
import HarnessSupport

/// A real `pushwoosh-agentd` process with its own state directory, socket and
/// `NOTIFY_SOCKET` datagram receiver.
final class AgentProcess {
    let dir: TempDir
    let process = Process()
    let notify: NotifyReceiver
    let stderrPipe = Pipe()
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
        notify = try NotifyReceiver(path: dir.path + "/notify-\(UUID().uuidString.prefix(8)).sock")
        let args = arguments ?? ["--config", dir.path + "/agent.conf"]
        if launcher.isEmpty {
            process.executableURL = URL(fileURLWithPath: Binaries.agentd)
            process.arguments = args
        } else {
            process.executableURL = URL(fileURLWithPath: launcher[0])
            process.arguments = Array(launcher.dropFirst()) + [Binaries.agentd] + args
        }
        var env = ["NOTIFY_SOCKET": notify.path, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"]
        env.merge(environment) { $1 }
        process.environment = env
        process.standardError = stderrPipe
        process.standardOutput = FileHandle.nullDevice
        try process.run()
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

    func signal(_ sig: Int32) { kill(process.processIdentifier, sig) }

    /// Sends SIGTERM and waits; returns the exit status and how long it took.
    func stop() -> (status: Int32, seconds: Double) {
        let start = Date()
        signal(SIGTERM)
        process.waitUntilExit()
        return (process.terminationStatus, Date().timeIntervalSince(start))
    }

    var stderrText: String { String(decoding: stderrPipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
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
