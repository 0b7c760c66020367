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

/// The lab as a service (docs/lab.md): `/lab/*` beside the emulator's `/admin/*`. It starts
/// devices (`pushwoosh-agentd` children), attaches running ones, relays their calls, restarts
/// and stops them, and moves the lab's clock (the one implementation of the lab clock,
/// `LabClockDriver`, over the emulator and the devices).
///
/// Requests run side by side, each on a thread of its own, so that one slow device holds no
/// other request (a start waits up to its READY deadline): what one device does is
/// serialized by that device's lock, the clock's moves and the reset by the clock's lock, and
/// the table of devices is behind a mutex held only to look up, add or remove. The processes
/// themselves are forked on one thread that lives as long as the lab (`spawner`): their
/// parent-death signal follows the thread that forked them.
public final class LabService: Sendable {
    let directory: PrivateDirectory
    let agentd: String
    let emulator: LabEmulator
    private let spawner = LabThread()
    private let devices = Mutex<[String: LabDevice]>([:])
    /// Held by an advance and a reset: one move of the lab at a time.
    private let clock = NSLock()

    /// The most devices (owned and attached) a lab holds at once; one request starts at most
    /// `LabCommand.maximumCount`.
    public static let maximumDevices = 256

    public init(directory: PrivateDirectory, agentd: String, emulator: LabEmulator) {
        self.directory = directory
        self.agentd = agentd
        self.emulator = emulator
    }

    /// The daemon beside `executable` (the emulator's own binary), else on `PATH`.
    public static func defaultAgentd(besides executable: String) -> String? {
        let beside = URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent("pushwoosh-agentd").path
        if isExecutableFile(beside) { return beside }
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let candidate = "\(dir)/pushwoosh-agentd"
            if isExecutableFile(candidate) { return candidate }
        }
        return nil
    }

    /// Whether `path` is a regular file (after symbolic links) this user may execute.
    public static func isExecutableFile(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFREG && access(path, X_OK) == 0
    }

    /// Answers a lab request on a thread of its own; `reply` gets the answer there.
    public func handle(_ request: EmulatorRequest, reply: @escaping @Sendable (EmulatorResponse) -> Void) {
        Thread.detachNewThread { [self] in
            switch LabCommand.parse(request) {
            case .failure(let refusal): reply(refusal.response)
            case .success(let command):
                do throws(LabRefusal) { reply(try perform(command)) } catch { reply(error.response) }
            }
        }
    }

    /// Stops every owned device (SIGTERM, then SIGKILL), and waits for them: the emulator's stop.
    public func shutdown() {
        clock.lock()
        defer { clock.unlock() }
        releaseAll()
    }

    // MARK: - Commands

    private func perform(_ command: LabCommand) throws(LabRefusal) -> EmulatorResponse {
        switch command {
        case .start(let start): return try startDevices(start)
        case .attach(let name, let socket):
            let device = LabDevice(attached: name, socket: socket)
            try reserve([device])
            defer { device.unlock() }
            if case .failure(let why) = device.call(.status, timeout: 3) {
                forget([device])
                throw LabRefusal(502, "\(name) does not answer at \(socket): \(why)")
            }
            device.phase = .running
            return .json(201, .object(["devices": .array([device.json()])]))
        case .list:
            let all = devices.withLock { $0 }.sorted { $0.key < $1.key }.map(\.value)
            return .json(200, .object(["devices": .array(all.map { $0.lookedAt() })]))
        case .show(let name):
            return .json(200, try device(name).lookedAt())
        case .stop(let name): return try stop(device(name))
        case .restart(let name, let signal): return try restart(device(name), signal: signal)
        case .signal(let name, let signal):
            let d = try device(name)
            guard d.owned else { throw LabRefusal(409, "\(name) is attached, not the lab's: signal it where it runs (systemctl kill)") }
            d.lock()
            defer { d.unlock() }
            guard d.send(signal: LabCommand.signals[signal] ?? SIGTERM) else {
                throw LabRefusal(409, "\(name) is not running (\(d.exit ?? "stopped"))")
            }
            return .json(200, .object(["name": .string(name), "signal": .string(signal)]))
        case .notifications(let name, let after):
            let d = try device(name)
            guard d.owned else { throw LabRefusal(409, "\(name) is attached: its notifications go to its service manager") }
            d.lock()
            defer { d.unlock() }
            d.collectNotifications()
            let from = max(0, after - d.notifiedDropped)
            return .json(200, .object(["name": .string(name), "notifications": .array(d.notified.dropFirst(from).map(JSONValue.string)),
                                       "times": .array(d.notifiedAt.dropFirst(from).map { SocketTime.jsonMilliseconds($0) }),
                                       "next": .number(Double(d.notifiedDropped + d.notified.count)),
                                       "dropped": .number(Double(max(0, d.notifiedDropped - after)))]))
        case .call(let name, let method, let params):
            let d = try device(name)
            d.lock()
            defer { d.unlock() }
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
            do throws(PrivateDirectoryError) {
                return .json(200, .object(["name": .string(name), "lines": .array(try d.tail(tail).map(JSONValue.string))]))
            } catch {
                throw LabRefusal(409, "\(name)'s log: \(error.description)")
            }
        case .advance(let request):
            clock.lock()
            defer { clock.unlock() }
            return try advance(request)
        case .armFault(let name, var fault):
            guard let d = devices.withLock({ $0[name] }) else { throw LabRefusal(400, "no device named \(name) in the lab", path: "device") }
            d.lock()
            let status = d.call(.status, timeout: 3)
            d.unlock()
            guard case .success(let answer) = status, let hwid = answer["hwid"]?.stringValue else {
                throw LabRefusal(502, "\(name) does not tell its hwid: \(status)")
            }
            fault["hwid"] = .string(hwid)
            let armed = emulator.admin("POST", "/admin/faults", .object(fault))
            return .json(armed.status, armed.body)
        case .openAPI:
            return EmulatorResponse(status: 200, headers: [HTTPHeader("Content-Type", "application/json")], body: Array(LabOpenAPIDocument.text.utf8))
        case .reset:
            clock.lock()
            defer { clock.unlock() }
            let (owned, attached) = releaseAll()
            let reset = emulator.admin("POST", "/admin/reset", nil)
            guard reset.status == 200 else { throw LabRefusal(500, "the emulator's reset failed: \(JSONWriter.string(reset.body))") }
            return .json(200, .object(["reset": true, "stopped": .number(Double(owned)), "released": .number(Double(attached))]))
        }
    }

    /// `DELETE /lab/devices/NAME`: the device as it ended, then let go.
    private func stop(_ d: LabDevice) -> EmulatorResponse {
        d.phase = .stopping
        d.lock()
        defer { d.unlock() }
        if d.owned { d.stop() }
        var answer = d.json().objectValue ?? [:]  // as it ended, before its process is let go
        d.release()
        forget([d])
        answer["stopped"] = .bool(d.owned)
        answer["released"] = .bool(!d.owned)
        if d.owned { answer["notifications"] = .array(d.notified.map(JSONValue.string)) }
        return .json(200, .object(answer))
    }

    /// `POST /lab/devices/NAME/restart`: stopped with `signal`, started again on its directory.
    private func restart(_ d: LabDevice, signal: LabSignal) throws(LabRefusal) -> EmulatorResponse {
        guard d.owned else { throw LabRefusal(409, "\(d.name) is attached, not the lab's: restart it where it runs (systemctl restart)") }
        d.phase = .restarting
        d.lock()
        defer { d.unlock() }
        d.stop(signal: signal == .kill ? SIGKILL : SIGTERM)
        defer { d.phase = .running }
        try d.launch(spawner: spawner)
        return .json(200, d.json())
    }

    /// Ends or lets go every device; how many of each.
    @discardableResult
    private func releaseAll() -> (owned: Int, attached: Int) {
        let all = devices.withLock { table in
            defer { table.removeAll() }
            return Array(table.values)
        }
        for device in all {
            device.phase = .stopping
            device.lock()
            device.release()
            device.unlock()
        }
        let owned = all.filter(\.owned).count
        return (owned, all.count - owned)
    }

    private func device(_ name: String) throws(LabRefusal) -> LabDevice {
        guard let d = devices.withLock({ $0[name] }) else { throw LabRefusal(404, "no device named \(name) in the lab") }
        return d
    }

    /// Puts `new` in the table, each locked by this thread (so that others see it starting and
    /// wait for it), or refuses them all when a name is taken.
    private func reserve(_ new: [LabDevice]) throws(LabRefusal) {
        let refusal: LabRefusal? = devices.withLock { table in
            if let taken = new.first(where: { table[$0.name] != nil }) { return LabRefusal(409, "a device named \(taken.name) is in the lab already") }
            guard table.count + new.count <= Self.maximumDevices else {
                return LabRefusal(409, "the lab holds \(table.count) devices and takes at most \(Self.maximumDevices): stop some first")
            }
            for device in new { table[device.name] = device }
            return nil
        }
        if let refusal { throw refusal }
        for device in new { device.lock() }
    }

    private func forget(_ gone: [LabDevice]) {
        devices.withLock { table in
            for device in gone where table[device.name] === device { table[device.name] = nil }
        }
    }

    private func lastWords(_ d: LabDevice) -> String {
        let lines = (try? d.tail(3)) ?? []
        return lines.isEmpty ? "" : "; its log ends: " + lines.joined(separator: " | ")
    }

    private func startDevices(_ start: LabStart) throws(LabRefusal) -> EmulatorResponse {
        // The caller's daemon must be one: a path that is no executable file is the caller's mistake (400), found before
        // anything starts, not a device that fails to start (502).
        if let agentd = start.agentd, !Self.isExecutableFile(agentd) {
            throw LabRefusal(400, "\(agentd): not an executable file", path: "agentd")
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
        var own = start
        own.config = config
        let new = start.names.map {
            LabDevice(owned: $0, directory: start.directory ?? directory.file("devices/" + $0), agentd: start.agentd ?? agentd,
                      environment: start.environment)
        }
        try reserve(new)
        defer {
            for device in new { device.unlock() }
        }
        do throws(LabRefusal) {
            // Every device's directory and configuration, checked with the agent's own parser,
            // before any of them starts: a mistake is the caller's (400), found before a process runs.
            for (index, device) in new.enumerated() { try prepare(device, own, index: index) }
            for device in new {
                try device.launch(spawner: spawner)
                device.phase = .running
            }
        } catch {
            for device in new {
                device.release()
            }
            forget(new)
            throw error
        }
        return .json(201, .object(["devices": .array(new.map { $0.json() })]))
    }

    /// Device `index`'s directory (the lab's `DIR/devices/NAME/`, made afresh, or the caller's
    /// `directory`, kept as found: a second start there continues on its state), both the lab
    /// user's own, and its configuration, written there and checked by `agentd --check-config`.
    private func prepare(_ device: LabDevice, _ start: LabStart, index: Int) throws(LabRefusal) {
        let dir: PrivateDirectory
        do throws(PrivateDirectoryError) {
            let path = device.directoryPath!
            if start.directory == nil { try? FileManager.default.removeItem(atPath: path) }
            dir = try PrivateDirectory(path, create: true)
        } catch {
            throw LabRefusal(400, "\(error.description)", path: start.directory == nil ? "name" : "directory")
        }
        guard dir.file("agent.sock").utf8.count < 108 else {
            throw LabRefusal(400, "the lab's directory is too long for a socket path (\(dir.path)/agent.sock is over 107 bytes)", path: "name")
        }
        let server = start.config["Agent"]?["ServerURL"] == nil ? "ServerURL=\(emulator.serverURL)\n" : ""
        let body = start.configurationText(index: index)
        let tail = "[Agent]\n\(server)Socket=\(dir.path)/agent.sock\nStateDirectory=\(dir.path)/state\n"
            + "[Device]\nClock=\(start.controlledClock ? "controlled" : "system")\n"
        do throws(PrivateDirectoryError) {
            for name in ["agent.sock", "notify", "agent.log"] { try dir.refuseSymlink(name) }
            try dir.makeSubdirectory("state")
            try dir.write("agent.conf", body + tail)
        } catch {
            throw LabRefusal(400, error.description, path: start.directory == nil ? "name" : "directory")
        }
        device.directory = dir
        if let problem = ConfigCheck.run(agentd: device.agentd, config: dir.file("agent.conf"), environment: device.launchEnvironment,
                                         output: dir) {
            throw problem.refusal(start: start, index: index)
        }
    }

    // MARK: - The clock

    private func advance(_ request: LabAdvanceRequest) throws(LabRefusal) -> EmulatorResponse {
        let table = devices.withLock { $0 }
        let names = request.devices ?? table.keys.sorted()
        for name in names where table[name] == nil { throw LabRefusal(404, "no device named \(name) in the lab") }
        let targets = names.map { table[$0]! }
        for device in targets { device.lock() }
        defer { for device in targets { device.unlock() } }
        let clock = LabTime(emulator: emulator, devices: targets)
        return .json(200, try clock.advance(request))
    }
}

/// One thread that runs the lab's forks in order, for the lab's whole life (a device's
/// parent-death signal follows the thread that forked it).
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

    /// Runs `job` on the lab's thread and waits for its result.
    func sync<T: Sendable>(_ job: @escaping @Sendable () -> T) -> T {
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<T?>(nil)
        submit {
            let value = job()
            result.withLock { $0 = value }
            done.signal()
        }
        done.wait()
        return result.withLock { $0! }
    }
}
