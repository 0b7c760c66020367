import AgentCore
import FoundationEssentials

/// A lab device as `GET /lab/devices` shows it (DEVICE, docs/lab.md M.1): what it is and where it
/// lives, then what the lab could read of it. One definition for the lab that writes it and the
/// Swift clients that read it; every time and age is in the device's own time.
public struct LabDeviceRecord: Sendable, Equatable {
    /// What the device answered of `status` and `clock` (each field as the device gave it; a
    /// field it did not give is nil).
    public struct Facts: Sendable, Equatable {
        public var hwid: String?
        public var userId: String?
        public var state: String?
        public var appState: String?
        public var controlledClock: Bool
        public var deviceTime: Date?
        public var lastRefreshAt: Date?
        public var lastRefreshAgeSeconds: Double?
        public var nextRefreshAt: Date?
        public var flagsCount: Int?
        public var flagsSource: String?
        /// Where its HTTP interface listens (`status`'s `httpAddress`).
        public var http: String?

        public init(hwid: String? = nil, userId: String? = nil, state: String? = nil, appState: String? = nil, controlledClock: Bool,
                    deviceTime: Date? = nil, lastRefreshAt: Date? = nil, lastRefreshAgeSeconds: Double? = nil, nextRefreshAt: Date? = nil,
                    flagsCount: Int? = nil, flagsSource: String? = nil, http: String? = nil) {
            self.hwid = hwid
            self.userId = userId
            self.state = state
            self.appState = appState
            self.controlledClock = controlledClock
            self.deviceTime = deviceTime
            self.lastRefreshAt = lastRefreshAt
            self.lastRefreshAgeSeconds = lastRefreshAgeSeconds
            self.nextRefreshAt = nextRefreshAt
            self.flagsCount = flagsCount
            self.flagsSource = flagsSource
            self.http = http
        }

        /// From the device's own `status` and `clock` results, leniently (an agent of another
        /// version may leave a field out): the age of its last refresh in its own time.
        public init(status: JSONValue, clock: JSONValue) {
            let now = clock["now"]?.stringValue.flatMap(SocketTime.parse)
            let last = status["lastRefreshAt"]?.stringValue.flatMap(SocketTime.parse)
            self.init(hwid: status["hwid"]?.stringValue, userId: status["userId"]?.stringValue, state: status["state"]?.stringValue,
                      appState: status["appState"]?.stringValue, controlledClock: clock["controlled"] == .bool(true), deviceTime: now,
                      lastRefreshAt: last,
                      lastRefreshAgeSeconds: now.flatMap { now in last.map { (now.timeIntervalSince($0) * 1000).rounded() / 1000 } },
                      nextRefreshAt: status["nextRefreshAt"]?.stringValue.flatMap(SocketTime.parse),
                      flagsCount: status["flagsCount"]?.numberValue.map { Int($0) }, flagsSource: status["flagsSource"]?.stringValue,
                      http: status["httpAddress"]?.stringValue)
        }
    }

    /// What the lab could tell of it.
    public enum Condition: Sendable, Equatable {
        /// It answered `status` and `clock`.
        case answering(Facts)
        /// An owned device whose process ended: how (`exit code 0`, `killed by signal 9`).
        case exited(exit: String?, code: Int?, signal: Int?)
        /// It did not answer: why.
        case down(error: String)
        /// Starting, restarting or stopping (or busy with another request past half a second):
        /// not asked, so that a listing never waits for it.
        case busy(String)
    }

    public var name: String
    public var socket: String
    /// The lab started it (and stops it); false for an attached device.
    public var owned: Bool
    /// Its process while it runs (nil when attached, ended or busy).
    public var pid: Int?
    /// An owned device's directory, log and configuration file.
    public var directory: String?
    public var log: String?
    public var config: String?
    public var condition: Condition

    public init(name: String, socket: String, owned: Bool, pid: Int? = nil, directory: String? = nil, log: String? = nil,
                config: String? = nil, condition: Condition) {
        self.name = name
        self.socket = socket
        self.owned = owned
        self.pid = pid
        self.directory = directory
        self.log = log
        self.config = config
        self.condition = condition
    }

    public var json: JSONValue {
        func text(_ s: String?) -> JSONValue { s.map(JSONValue.string) ?? .null }
        func number(_ n: Int?) -> JSONValue { n.map { .number(Double($0)) } ?? .null }
        func time(_ d: Date?) -> JSONValue { d.map { SocketTime.json($0) } ?? .null }
        var o: [String: JSONValue] = ["name": .string(name), "socket": .string(socket), "owned": .bool(owned), "pid": number(pid),
                                      "directory": text(directory), "log": text(log), "config": text(config)]
        switch condition {
        case .answering(let f):
            o.merge(["hwid": text(f.hwid), "userId": text(f.userId), "state": text(f.state), "appState": text(f.appState),
                     "clock": .string(f.controlledClock ? "controlled" : "system"), "deviceTime": time(f.deviceTime),
                     "lastRefreshAt": time(f.lastRefreshAt), "lastRefreshAgeSeconds": f.lastRefreshAgeSeconds.map(JSONValue.number) ?? .null,
                     "nextRefreshAt": time(f.nextRefreshAt), "flagsCount": number(f.flagsCount), "flagsSource": text(f.flagsSource),
                     "http": text(f.http)]) { $1 }
        case .exited(let exit, let code, let signal):
            o.merge(["state": "exited", "exit": text(exit), "exitCode": number(code), "exitSignal": number(signal)]) { $1 }
        case .down(let error):
            o.merge(["state": "down", "error": .string(error)]) { $1 }
        case .busy(let phase):
            o["state"] = .string(phase)
        }
        return .object(o)
    }

    /// Reads a DEVICE as `json` writes it; an error names the field.
    public init(json: JSONValue) throws(AnswerError) {
        let r = AnswerReader(json)
        name = try r.string("name")
        socket = try r.string("socket")
        owned = try r.bool("owned")
        pid = try r.optionalNumber("pid").map { Int($0) }
        directory = try r.optionalString("directory")
        log = try r.optionalString("log")
        config = try r.optionalString("config")
        let state = try r.optionalString("state")
        switch state ?? "" {
        case "exited":
            condition = .exited(exit: try r.optionalString("exit"), code: try r.optionalNumber("exitCode").map { Int($0) },
                                signal: try r.optionalNumber("exitSignal").map { Int($0) })
        case "down":
            condition = .down(error: try r.string("error"))
        case "starting", "restarting", "stopping", "busy":
            condition = .busy(state ?? "busy")
        default:
            guard let clock = try r.optionalString("clock") else { throw AnswerError("clock", "expected \"controlled\" or \"system\"") }
            condition = .answering(Facts(
                hwid: try r.optionalString("hwid"), userId: try r.optionalString("userId"), state: state,
                appState: try r.optionalString("appState"), controlledClock: clock == "controlled", deviceTime: try r.optionalTime("deviceTime"),
                lastRefreshAt: try r.optionalTime("lastRefreshAt"), lastRefreshAgeSeconds: try r.optionalNumber("lastRefreshAgeSeconds"),
                nextRefreshAt: try r.optionalTime("nextRefreshAt"), flagsCount: try r.optionalNumber("flagsCount").map { Int($0) },
                flagsSource: try r.optionalString("flagsSource"), http: try r.optionalString("http")))
        }
    }
}
