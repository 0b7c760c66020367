import AgentCore
import AgentPosix
import AgentWire
import EmulatorCore
import Foundation
import Glibc
import Synchronization

/// What the lab needs of the emulator it lives in: its device API's URL and its admin API,
/// called in-process (the clock, the apps, the reset).
public struct LabEmulator: Sendable {
    public var serverURL: String
    public var admin: @Sendable (_ method: String, _ path: String, _ body: JSONValue?) -> (status: Int, body: JSONValue)

    public init(serverURL: String, admin: @escaping @Sendable (String, String, JSONValue?) -> (status: Int, body: JSONValue)) {
        self.serverURL = serverURL
        self.admin = admin
    }
}

/// The lab as a service (docs/lab.md M): `/lab/*` beside the emulator's `/admin/*`. It
/// starts devices (`pushwoosh-agentd` children), attaches running ones, relays
/// their calls, restarts and stops them, and moves the lab's clock (the one implementation of
/// the lab clock, `LabClockDriver`, over the emulator and the devices).
///
/// Everything runs on one thread of its own, one request after another: devices are started
/// from it (their parent-death signal follows it: it lives as long as the lab), and the
/// emulator's threads only hand requests over and get answers back.
public final class LabService: Sendable {
    let directory: String
    let agentd: String
    let emulator: LabEmulator
    private let worker = LabThread()
    /// Touched on the lab's thread only.
    private let state: LabState

    public init(directory: String, agentd: String, emulator: LabEmulator) {
        self.directory = directory
        self.agentd = agentd
        self.emulator = emulator
        state = LabState()
    }

    /// The daemon beside `executable` (the emulator's own binary), else on `PATH`.
    public static func defaultAgentd(besides executable: String) -> String? {
        let beside = URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent("pushwoosh-agentd").path
        if FileManager.default.isExecutableFile(atPath: beside) { return beside }
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let candidate = "\(dir)/pushwoosh-agentd"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    /// Answers a `/lab/*` request on the lab's thread; `reply` gets the answer there.
    public func handle(_ request: EmulatorRequest, reply: @escaping @Sendable (EmulatorResponse) -> Void) {
        worker.submit { [self] in
            switch LabCommand.parse(request) {
            case .failure(let refusal): reply(refusal.response)
            case .success(let command):
                do throws(LabRefusal) { reply(try perform(command)) } catch { reply(error.response) }
            }
        }
    }

    /// Stops every owned device (SIGTERM, then SIGKILL), and waits for them: the emulator's stop.
    public func shutdown() {
        worker.sync { [self] in
            for device in state.devices.values { device.release() }
            state.devices.removeAll()
        }
    }

    // MARK: - Commands

    private func perform(_ command: LabCommand) throws(LabRefusal) -> EmulatorResponse {
        switch command {
        case .start(let start): return try startDevices(start)
        case .attach(let name, let socket):
            guard state.devices[name] == nil else { throw LabRefusal(409, "a device named \(name) is in the lab already") }
            let device = LabDevice(attached: name, socket: socket)
            if case .failure(let why) = device.call(.status, timeout: 3) {
                throw LabRefusal(502, "\(name) does not answer at \(socket): \(why)")
            }
            state.devices[name] = device
            return .json(201, .object(["devices": .array([device.json()])]))
        case .list:
            return .json(200, .object(["devices": .array(state.devices.keys.sorted().map { state.devices[$0]!.json() })]))
        case .show(let name):
            return .json(200, try device(name).json())
        case .stop(let name):
            let d = try device(name)
            if d.owned { d.stop() }
            var answer = d.json().objectValue ?? [:]  // as it ended, before its process is let go
            d.release()
            state.devices[name] = nil
            answer["stopped"] = .bool(d.owned)
            answer["released"] = .bool(!d.owned)
            if d.owned { answer["notifications"] = .array(d.notified.map(JSONValue.string)) }
            return .json(200, .object(answer))
        case .restart(let name, let signal):
            let d = try device(name)
            guard d.owned else { throw LabRefusal(409, "\(name) is attached, not the lab's: restart it where it runs (systemctl restart)") }
            d.stop(signal: signal == .kill ? SIGKILL : SIGTERM)
            try d.launch()
            return .json(200, d.json())
        case .signal(let name, let signal):
            let d = try device(name)
            guard d.owned else { throw LabRefusal(409, "\(name) is attached, not the lab's: signal it where it runs (systemctl kill)") }
            guard d.send(signal: LabCommand.signals[signal] ?? SIGTERM) else {
                throw LabRefusal(409, "\(name) is not running (\(d.exit ?? "stopped"))")
            }
            return .json(200, .object(["name": .string(name), "signal": .string(signal)]))
        case .notifications(let name, let after):
            let d = try device(name)
            guard d.owned else { throw LabRefusal(409, "\(name) is attached: its notifications go to its service manager") }
            d.collectNotifications()
            let from = max(0, after - d.notifiedDropped)
            return .json(200, .object(["name": .string(name), "notifications": .array(d.notified.dropFirst(from).map(JSONValue.string)),
                                       "next": .number(Double(d.notifiedDropped + d.notified.count)),
                                       "dropped": .number(Double(max(0, d.notifiedDropped - after)))]))
        case .call(let name, let method, let params):
            let d = try device(name)
            var request: [String: JSONValue] = ["jsonrpc": "2.0", "id": 1, "method": .string(method)]
            if let params { request["params"] = params }
            switch d.relay(JSONWriter.encode(.object(request))) {
            case .success(let line):
                return EmulatorResponse(status: 200, headers: [HTTPHeader("Content-Type", "application/json; charset=utf-8")], body: line)
            case .failure(let why):
                throw LabRefusal(502, "\(name) did not answer \(method): \(why)\(lastWords(d))")
            }
        case .log(let name, let tail):
            let d = try device(name)
            guard d.owned else { throw LabRefusal(409, "\(name) is attached: its log is where it runs (journalctl)") }
            return .json(200, .object(["name": .string(name), "lines": .array(d.tail(tail).map(JSONValue.string))]))
        case .advance(let request):
            return try advance(request)
        case .reset:
            let owned = state.devices.values.filter(\.owned).count
            let attached = state.devices.count - owned
            for device in state.devices.values { device.release() }
            state.devices.removeAll()
            let reset = emulator.admin("POST", "/admin/reset", nil)
            guard reset.status == 200 else { throw LabRefusal(500, "the emulator's reset failed: \(JSONWriter.string(reset.body))") }
            return .json(200, .object(["reset": true, "stopped": .number(Double(owned)), "released": .number(Double(attached))]))
        }
    }

    private func device(_ name: String) throws(LabRefusal) -> LabDevice {
        guard let d = state.devices[name] else { throw LabRefusal(404, "no device named \(name) in the lab") }
        return d
    }

    private func lastWords(_ d: LabDevice) -> String {
        let lines = d.tail(3)
        return lines.isEmpty ? "" : "; its log ends: " + lines.joined(separator: " | ")
    }

    private func startDevices(_ start: LabStart) throws(LabRefusal) -> EmulatorResponse {
        let names = start.names
        if let taken = names.first(where: { state.devices[$0] != nil }) {
            throw LabRefusal(409, "a device named \(taken) is in the lab already")
        }
        var config = start.config
        // The application, unless `config` or `extraConfig` names it (as a shipped agent.conf does).
        let named = start.extraConfig.split(separator: "\n").contains { $0.trimmingCharacters(in: .whitespaces).hasPrefix("ApplicationCode=") }
        if config["Agent"]?["ApplicationCode"] == nil, !named {
            let apps = emulator.admin("GET", "/admin/apps", nil).body["apps"]?.arrayValue?.compactMap { $0["code"]?.stringValue } ?? []
            guard apps.count == 1 else {
                throw LabRefusal(400, "the emulator has \(apps.count) applications: name one (\(apps.joined(separator: ", ")))",
                                 path: "config.Agent.ApplicationCode")
            }
            config["Agent", default: [:]]["ApplicationCode"] = apps[0]
        }
        // A device pointed elsewhere (config.Agent.ServerURL) keeps that server.
        let server = config["Agent"]?["ServerURL"] == nil ? "ServerURL=\(emulator.serverURL)\n" : ""
        var started: [LabDevice] = []
        for (index, name) in names.enumerated() {
            let dir = start.directory ?? directory + "/devices/" + name
            guard (dir + "/agent.sock").utf8.count < 108 else {
                throw LabRefusal(400, "the lab's directory is too long for a socket path (\(dir)/agent.sock is over 107 bytes)", path: "name")
            }
            do {
                // The lab's own directory for a device is made afresh; a test's (`directory`) is
                // kept as found: a second start there continues on its state.
                if start.directory == nil {
                    try? FileManager.default.removeItem(atPath: dir)
                    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
                    chmod(dir, 0o700)
                }
                try FileManager.default.createDirectory(atPath: dir + "/state", withIntermediateDirectories: true,
                                                        attributes: [.posixPermissions: 0o700])
                var own = start
                own.config = config
                let text = own.configurationText(index: index)
                    + "[Agent]\n\(server)Socket=\(dir)/agent.sock\nStateDirectory=\(dir)/state\n"
                    + "[Device]\nClock=\(start.controlledClock ? "controlled" : "system")\n"
                try text.write(toFile: dir + "/agent.conf", atomically: true, encoding: .utf8)
            } catch {
                throw LabRefusal(500, "cannot prepare \(dir): \(error)")
            }
            let device = LabDevice(owned: name, directory: dir)
            device.agentd = start.agentd ?? agentd
            device.environment = start.environment
            do throws(LabRefusal) {
                try device.launch()
            } catch {
                device.release()
                for d in started { d.release() }
                started.forEach { state.devices[$0.name] = nil }
                throw error
            }
            state.devices[name] = device
            started.append(device)
        }
        return .json(201, .object(["devices": .array(started.map { $0.json() })]))
    }

    // MARK: - The clock

    private func advance(_ request: LabAdvance) throws(LabRefusal) -> EmulatorResponse {
        let names = request.devices ?? state.devices.keys.sorted()
        for name in names where state.devices[name] == nil { throw LabRefusal(404, "no device named \(name) in the lab") }
        let clock = LabTime(emulator: emulator, devices: names.map { state.devices[$0]! })
        return .json(200, try clock.advance(request.until))
    }
}

/// The lab's devices by name; touched on the lab's thread only.
private final class LabState: @unchecked Sendable {
    var devices: [String: LabDevice] = [:]
}

/// One thread that runs the lab's work in order, for the lab's whole life.
final class LabThread: Sendable {
    private let jobs = Mutex<[@Sendable () -> Void]>([])
    private let ready = DispatchSemaphore(value: 0)

    init() {
        let thread = Thread { [self] in
            while true {
                ready.wait()
                let job = jobs.withLock { $0.removeFirst() }
                job()
            }
        }
        thread.name = "lab"
        thread.start()
    }

    func submit(_ job: @escaping @Sendable () -> Void) {
        jobs.withLock { $0.append(job) }
        ready.signal()
    }

    /// Runs `job` on the lab's thread and waits for it.
    func sync(_ job: @escaping @Sendable () -> Void) {
        let done = DispatchSemaphore(value: 0)
        submit {
            job()
            done.signal()
        }
        done.wait()
    }
}
