import AgentCore
import AgentPosix
import AgentWire
import EmulatorCore
import Foundation
import Glibc
import Launcher
import Synchronization
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
/// log and process) or an attached one (a socket only, e.g. a systemd instance).
///
/// Its mutable parts are touched only by the thread holding its lock (`lock()`), one
/// request's work at a time; `phase` and the names may be read by anyone, so that a listing
/// never waits for a device that is starting or restarting (`lookedAt`).
final class LabDevice: @unchecked Sendable {
    enum Phase: String, Sendable {
        case starting, running, restarting, stopping
    }

    let name: String
    /// The lab started it (and stops it); false for an attached device.
    let owned: Bool
    private let attachedSocket: String?
    private let operation = NSLock()
    private let currentPhase: Mutex<Phase>
    /// `DIR/devices/NAME/` (or the caller's `directory`) for an owned device; opened and
    /// checked (`directory`) when it is prepared.
    let directoryPath: String?
    var directory: PrivateDirectory?
    var socket: String { attachedSocket ?? directoryPath.map { $0 + "/agent.sock" } ?? "" }
    /// Its process (the one launcher's, `AgentLauncher`): the current run, or the last one,
    /// which tells how it ended.
    private var launcher: AgentLauncher?
    /// While it runs.
    var pid: pid_t? { launcher?.pid }
    /// How its process ended, when the lab saw it end.
    var exit: String? { launcher?.exit?.description }
    /// What it told its `NOTIFY_SOCKET` (READY=1, STATUS=…, RELOADING=1, STOPPING=1), oldest
    /// first, across its restarts: the most recent `notifiedLimit`, after `notifiedDropped` older.
    private(set) var notified: [String] = []
    /// When the lab read each of `notified` from the socket (the host's clock), in step with it.
    private(set) var notifiedAt: [Date] = []
    private(set) var notifiedDropped = 0
    static let notifiedLimit = 1_000
    /// The daemon it runs and what its environment adds (kept for a restart).
    let agentd: String
    let environment: [String: String]

    init(attached name: String, socket: String) {
        self.name = name
        attachedSocket = socket
        owned = false
        directoryPath = nil
        agentd = ""
        environment = [:]
        currentPhase = Mutex(.starting)
    }

    init(owned name: String, directory: String, agentd: String, environment: [String: String]) {
        self.name = name
        attachedSocket = nil
        directoryPath = directory
        owned = true
        self.agentd = agentd
        self.environment = environment
        currentPhase = Mutex(.starting)
    }

    var phase: Phase {
        get { currentPhase.withLock { $0 } }
        set { currentPhase.withLock { $0 = newValue } }
    }

    func lock() { operation.lock() }
    func unlock() { operation.unlock() }

    var logPath: String? { directoryPath.map { $0 + "/agent.log" } }
    var configPath: String? { directoryPath.map { $0 + "/agent.conf" } }
    /// The environment its process gets (`NOTIFY_SOCKET` is the launcher's).
    var launchEnvironment: [String: String] { ["PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"].merging(environment) { $1 } }

    /// As a listing shows it: its record (`json()`) when it is free within half a second, else
    /// what it is busy with, without waiting for it (a start may take up to its READY deadline).
    func lookedAt() -> JSONValue {
        let now = phase
        if now == .running, operation.lock(before: Date().addingTimeInterval(0.5)) {
            defer { operation.unlock() }
            return json()
        }
        return LabDeviceRecord(name: name, socket: socket, owned: owned, directory: directoryPath, log: logPath, config: configPath,
                               condition: .busy(now == .running ? "busy" : now.rawValue)).json
    }

    // MARK: - The process

    /// Starts `agentd` on the device's configuration (forked on `spawner`, the lab's
    /// long-lived thread) and waits for its READY=1, then for its first exchange with the
    /// emulator to end (a device on a controlled clock; on the system clock, whatever `status`
    /// says once READY=1 came).
    ///
    /// The child runs under `setpriv --pdeathsig KILL` (util-linux): it ends when the thread
    /// that forked it does, which lives as long as the lab: so a lab killed with SIGKILL
    /// leaves no device behind.
    func launch(spawner: LabThread, readyTimeout: Double = 15) throws(LabRefusal) {
        guard let directory, let configPath, let logPath else { return }
        collectNotifications()
        let mark = notifiedDropped + notified.count
        launcher = nil  // the last run's notify socket is released before the next is bound
        do throws(PrivateDirectoryError) {
            for name in ["agent.sock", "notify", "agent.log"] { try directory.refuseSymlink(name) }
        } catch {
            throw LabRefusal(409, "\(name) not started: \(error.description)")
        }
        let configuration = AgentLauncher.Configuration(agentd: agentd, arguments: ["--config", configPath], environment: launchEnvironment,
                                                        notifyPath: directory.file("notify"),  // not *.sock: `fleet --socket-dir` takes those for devices
                                                        logPath: logPath)
        let started = spawner.sync { () -> Result<AgentLauncher, AgentLaunchError> in
            do throws(AgentLaunchError) { return .success(try AgentLauncher(configuration)) } catch { return .failure(error) }
        }
        switch started {
        case .success(let process):
            process.keepsNotifications = true  // read into `notified`, here
            launcher = process
        case .failure(let error):
            throw LabRefusal(500, "\(name): \(error)")
        }
        guard waitForNotification("READY=1", after: mark, timeout: readyTimeout) else {
            let why = reap().map { "it exited (\($0))" } ?? "no READY=1 within \(Int(readyTimeout)) s"
            stop(signal: SIGKILL)
            throw LabRefusal(502, "\(name) did not start: \(why); its log ends: \(((try? tail(5)) ?? []).joined(separator: " | "))")
        }
        let settled = Date().addingTimeInterval(readyTimeout)
        while Date() < settled, case .success(let clock) = call(.clock, timeout: 3),
              (clock["requestsInFlight"]?.numberValue ?? 0) > 0 {
            usleep(2_000)
        }
    }

    /// Reads what the device told its notify socket since the last look.
    func collectNotifications() {
        guard let receiver = launcher?.notifications else { return }
        while let message = receiver.receive(timeout: 0) { keep(message) }
        if notified.count > Self.notifiedLimit {
            notifiedDropped += notified.count - Self.notifiedLimit
            notified.removeFirst(notified.count - Self.notifiedLimit)
            notifiedAt.removeFirst(notifiedAt.count - Self.notifiedLimit)
        }
    }

    /// One notification as it was read, with the time it was read.
    private func keep(_ message: String) {
        notified.append(message)
        notifiedAt.append(Date())
    }

    /// Waits up to `timeout` for a notification at index `after` or later with a line equal to
    /// `line`; false once the process has ended without one.
    func waitForNotification(_ line: String, after: Int, timeout: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        func seen() -> Bool {
            notified.dropFirst(max(0, after - notifiedDropped)).contains { $0.split(separator: "\n").contains { $0 == line } }
        }
        while true {
            collectNotifications()
            if seen() { return true }
            if Date() >= deadline { return false }
            if reap() != nil {
                collectNotifications()  // what it sent just before it ended
                return seen()
            }
            _ = launcher?.notifications?.receive(timeout: 0.02).map { keep($0) }
        }
    }

    /// How the process ended, if it has (reaping it); nil while it runs.
    @discardableResult
    func reap() -> String? {
        collectNotifications()
        return launcher?.reap()?.description
    }

    /// Sends `signal` to the running process; false when it is not running.
    func send(signal: Int32) -> Bool {
        guard reap() == nil, let launcher, launcher.pid != nil else { return false }
        launcher.signal(signal)
        return true
    }

    /// Stops an owned device: `signal` (TERM waits up to 5 s for it, then KILL).
    func stop(signal: Int32 = SIGTERM) {
        collectNotifications()
        launcher?.stop(signal: signal, grace: signal == SIGTERM ? 5 : 2)
        collectNotifications()
    }

    /// Stops it and closes its notify socket: it leaves the lab.
    func release() {
        if owned { stop() }
        collectNotifications()
        launcher = nil
    }

    /// The last `lines` lines of its log (at most the last MiB of it), read without following
    /// a symbolic link.
    func tail(_ lines: Int) throws(PrivateDirectoryError) -> [String] {
        guard let directory else { return [] }
        return try directory.tail("agent.log", lines: lines)
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
    func json() -> JSONValue { record().json }

    func record() -> LabDeviceRecord {
        var r = LabDeviceRecord(name: name, socket: socket, owned: owned, pid: pid.map { Int($0) }, directory: directoryPath,
                                log: logPath, config: configPath, condition: .busy(""))
        if owned, reap() != nil, pid == nil {
            let ended = launcher?.exit
            r.condition = .exited(exit: exit, code: ended?.code.map { Int($0) }, signal: ended?.signal.map { Int($0) })
            return r
        }
        var clockAnswer = call(.clock, timeout: 3)
        if case .failure(let problem) = clockAnswer, problem.isSystemClock {
            clockAnswer = .success(["controlled": false, "now": SocketTime.json(Date())])
        }
        switch (call(.status, timeout: 3), clockAnswer) {
        case (.success(let status), .success(let clock)): r.condition = .answering(.init(status: status, clock: clock))
        case (.failure(let why), _), (_, .failure(let why)): r.condition = .down(error: why.description)
        }
        return r
    }
}
