import AgentCore
import AgentPosix
import AgentWire
import EmulatorCore
import Foundation
import Glibc
import HarnessSupport
import ToolSupport

/// Why a device could not be reached or did not answer.
struct DeviceProblem: Error, CustomStringConvertible {
    var description: String
    /// The JSON-RPC error code, when the device answered with an error.
    var code: Int?
    init(_ description: String, code: Int? = nil) {
        self.description = description
        self.code = code
    }

    /// `clock` and `advanceClock` on a device whose clock is the system's (docs/device-clock.md H).
    var isSystemClock: Bool { code == -32004 }
}

/// One device of the lab: an owned `pushwoosh-agentd` child (its directory, configuration,
/// log and process) or an attached one (a socket only, e.g. a systemd instance). Touched on
/// the lab's thread only.
final class LabDevice {
    let name: String
    let socket: String
    /// The lab started it (and stops it); false for an attached device.
    let owned: Bool
    /// `DIR/devices/NAME/` for an owned device.
    let directory: String?
    private(set) var pid: pid_t?
    /// How its process ended, when the lab saw it end.
    private(set) var exit: String?
    /// Its `NOTIFY_SOCKET`, kept open while it runs (its STATUS= lines are drained, so that
    /// the device never finds the socket gone or full).
    private var notifications: NotifyReceiver?

    init(attached name: String, socket: String) {
        self.name = name
        self.socket = socket
        owned = false
        directory = nil
    }

    init(owned name: String, directory: String) {
        self.name = name
        self.directory = directory
        socket = directory + "/agent.sock"
        owned = true
    }

    var logPath: String? { directory.map { $0 + "/agent.log" } }
    var configPath: String? { directory.map { $0 + "/agent.conf" } }

    // MARK: - The process

    /// Starts `agentd` on the device's configuration and waits for its READY=1, then for its
    /// first exchange with the emulator to end (a device on a controlled clock; on the system
    /// clock, whatever `status` says once READY=1 came).
    ///
    /// The child runs under `setpriv --pdeathsig KILL` (util-linux): it ends when the thread
    /// that started it does, and the lab starts every device from its one thread, which
    /// lives as long as the lab: so a lab killed with SIGKILL leaves no device behind.
    func launch(agentd: String, readyTimeout: Double = 15) throws(LabRefusal) {
        guard let directory, let configPath, let logPath else { return }
        let notifyPath = directory + "/notify.sock"
        notifications = nil  // the last run's (its release unlinks the path)
        unlink(notifyPath)
        let receiver: NotifyReceiver
        do { receiver = try NotifyReceiver(path: notifyPath) } catch {
            throw LabRefusal(500, "\(name): cannot make its notify socket \(notifyPath): \(error)")
        }
        notifications = receiver
        let setpriv = "/usr/bin/setpriv"
        var path = agentd
        var arguments = ["--config", configPath]
        if FileManager.default.isExecutableFile(atPath: setpriv) {
            path = setpriv
            arguments = ["--pdeathsig", "KILL", "--", agentd] + arguments
        }
        let environment = ["NOTIFY_SOCKET": notifyPath, "PATH": "/usr/bin:/bin"]
        switch ChildProcess.spawn(path: path, arguments: arguments, environment: environment, output: .appendBoth(logPath),
                                  newProcessGroup: true) {
        case .success(let started):
            pid = started
            exit = nil
        case .failure(let error):
            throw LabRefusal(500, "\(name): cannot start \(agentd): \(error.message)")
        }
        guard receiver.wait(for: "READY=1", timeout: readyTimeout, alive: { [self] in reap() == nil }) != nil else {
            let why = reap().map { "it exited (\($0))" } ?? "no READY=1 within \(Int(readyTimeout)) s"
            stop(signal: SIGKILL)
            throw LabRefusal(502, "\(name) did not start: \(why); its log ends: \(tail(5).joined(separator: " | "))")
        }
        let settled = Date().addingTimeInterval(readyTimeout)
        while Date() < settled, case .success(let clock) = call(.clock, timeout: 3),
              (clock["requestsInFlight"]?.numberValue ?? 0) > 0 {
            usleep(2_000)
        }
    }

    /// Drops what the device told its notify socket (STATUS= lines; the lab reads its status).
    func drainNotifications() { notifications?.drain() }

    /// How the process ended, if it has (reaping it); nil while it runs.
    @discardableResult
    func reap() -> String? {
        drainNotifications()
        guard let pid else { return exit }
        var status: Int32 = 0
        guard waitpid(pid, &status, WNOHANG) == pid else { return nil }
        self.pid = nil
        exit = status & 0x7f == 0 ? "exit code \((status >> 8) & 0xff)" : "killed by signal \(status & 0x7f)"
        return exit
    }

    /// Stops an owned device: `signal` (TERM waits up to 5 s for it, then KILL).
    func stop(signal: Int32 = SIGTERM) {
        guard let pid else { return }
        kill(pid, signal)
        let deadline = Date().addingTimeInterval(signal == SIGTERM ? 5 : 2)
        while reap() == nil, Date() < deadline { usleep(5_000) }
        if let still = self.pid {
            kill(still, SIGKILL)
            var status: Int32 = 0
            waitpid(still, &status, 0)
            self.pid = nil
            exit = "killed by signal \(SIGKILL)"
        }
    }

    /// The last `lines` lines of its log (at most the last MiB of it).
    func tail(_ lines: Int) -> [String] {
        guard let logPath, let handle = FileHandle(forReadingAtPath: logPath) else { return [] }
        defer { try? handle.close() }
        let size = (try? handle.seekToEnd()) ?? 0
        try? handle.seek(toOffset: size > 1 << 20 ? size - (1 << 20) : 0)
        let text = String(decoding: (try? handle.readToEnd()) ?? Data(), as: UTF8.self)
        return Array(text.split(separator: "\n", omittingEmptySubsequences: true).suffix(lines).map(String.init))
    }

    // MARK: - Its socket

    /// One socket call; the JSON-RPC answer line as it came, or why there is none.
    func relay(_ line: [UInt8], timeout: Double = 10) -> Result<[UInt8], DeviceProblem> {
        let client: LineClient
        do { client = try LineClient(connecting: socket, timeout: timeout) } catch { return .failure(DeviceProblem("cannot connect to \(socket): \(error)")) }
        guard client.send(line + [0x0A]) else { return .failure(DeviceProblem("the device closed its socket")) }
        guard let answer = client.readLineBytes() else { return .failure(DeviceProblem("no answer within \(Int(timeout)) s")) }
        return .success(answer)
    }

    /// One call's result, or why there is none (an error answer included).
    func call(_ call: SocketCall, timeout: Double = 10) -> Result<JSONValue, DeviceProblem> {
        let client: LineClient
        do { client = try LineClient(connecting: socket, timeout: timeout) } catch { return .failure(DeviceProblem("cannot connect to \(socket): \(error)")) }
        guard let answer = client.request(call) else { return .failure(DeviceProblem("no answer to \(call.method.rawValue)")) }
        if let result = answer["result"] { return .success(result) }
        let message = answer["error"]?["message"]?.stringValue ?? JSONWriter.string(answer)
        return .failure(DeviceProblem("\(call.method.rawValue) answered an error: \(message)",
                                      code: answer["error"]?["code"]?.numberValue.map { Int($0) }))
    }

    /// As `GET /lab/devices` shows it: every age and time in the device's own time.
    func json() -> JSONValue {
        var o: [String: JSONValue] = ["name": .string(name), "socket": .string(socket), "owned": .bool(owned),
                                      "pid": pid.map { .number(Double($0)) } ?? .null]
        if owned, reap() != nil, pid == nil {
            o["state"] = .string("exited")
            o["exit"] = exit.map(JSONValue.string) ?? .null
            return .object(o)
        }
        var clockAnswer = call(.clock, timeout: 3)
        if case .failure(let problem) = clockAnswer, problem.isSystemClock {
            clockAnswer = .success(["controlled": false, "now": SocketTime.json(Date())])
        }
        switch (call(.status, timeout: 3), clockAnswer) {
        case (.success(let status), .success(let clock)):
            let deviceNow = clock["now"]?.stringValue.flatMap(SocketTime.parse)
            let last = status["lastRefreshAt"]?.stringValue.flatMap(SocketTime.parse)
            o["hwid"] = status["hwid"] ?? .null
            o["userId"] = status["userId"] ?? .null
            o["state"] = status["state"] ?? .null
            o["appState"] = status["appState"] ?? .null
            o["clock"] = .string(clock["controlled"] == .bool(true) ? "controlled" : "system")
            o["deviceTime"] = clock["now"] ?? .null
            o["lastRefreshAt"] = status["lastRefreshAt"] ?? .null
            o["lastRefreshAgeSeconds"] = deviceNow.flatMap { now in last.map { .number((now.timeIntervalSince($0) * 1000).rounded() / 1000) } } ?? .null
            o["nextRefreshAt"] = status["nextRefreshAt"] ?? .null
            o["flagsCount"] = status["flagsCount"] ?? .null
        case (.failure(let why), _), (_, .failure(let why)):
            o["state"] = .string("down")
            o["error"] = .string(why.description)
        }
        return .object(o)
    }
}
