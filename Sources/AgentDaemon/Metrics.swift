import AgentCore
import AgentCurl
import AgentPosix
import AgentWire
import FoundationEssentials
import Glibc

/// The agent's counters (docs/http.md F.2), kept on the loop thread, and their Prometheus text
/// exposition (version 0.0.4). Counters live as long as the process; every one is counted
/// where the thing happens (agent events, the socket server, the metered transport), never
/// estimated.
final class Metrics {
    struct RefreshKey: Hashable {
        var trigger: String
        var outcome: String
        var code: Int
    }

    /// Upper bounds of the refresh-duration histogram, seconds.
    static let durationBuckets: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

    private(set) var refreshes: [RefreshKey: Int] = [:]
    private(set) var durationCounts = [Int](repeating: 0, count: Metrics.durationBuckets.count)
    private(set) var durationCount = 0
    private(set) var durationSum = 0.0
    /// Manual refreshes answered without a request (RF-6 throttle window, RF-8).
    var refreshesNotSent = 0
    var impressionsSent = 0
    var impressionsDeduplicated = 0
    var impressionsFailed = 0
    var socketConnectionsAccepted = 0
    var socketConnectionsRefused = 0
    var httpConnectionsRefused = 0
    /// HTTP connections closed at `MaxConnections=` to make room (docs/http.md F.2).
    var httpConnectionsEvicted = 0
    /// Connections closed for not completing a request within `RequestReadTimeout`.
    var socketRequestReadTimeouts = 0
    var httpRequestReadTimeouts = 0
    /// JSON-RPC requests by method label; the fast path's two methods are counted apart
    /// (`rpcFastRequest`, no name hashed per request) and added here.
    var rpcRequests: [String: Int] {
        var all = rpcRequestsByName
        if fastIsEnabledRequests > 0 { all[SocketMethod.isEnabled.rawValue, default: 0] += fastIsEnabledRequests }
        if fastGetRequests > 0 { all[SocketMethod.get.rawValue, default: 0] += fastGetRequests }
        return all
    }
    private var rpcRequestsByName: [String: Int] = [:]
    private var fastIsEnabledRequests = 0
    private var fastGetRequests = 0
    private(set) var rpcErrors: [Int: Int] = [:]
    private(set) var httpRequests: [Int: Int] = [:]
    var stateSaveFailures = 0
    /// Every failed save and every damaged state found at start, by operation.
    var storageErrors: [String: Int] = ["load": 0, "save": 0]
    /// Flags requests that got no HTTP answer, by what went wrong (`NetworkProblem`: TLS, proxy, …).
    private(set) var networkFailures: [String: Int] = [:]

    /// Method labels: the known methods, everything else is `other` (no label per typo).
    static let methodLabels: Set<String> = Set(SocketMethod.allCases.map { $0.rawValue })

    // MARK: - Recording

    func record(_ event: AgentEvent) {
        switch event {
        case .refreshSucceeded(let trigger, _, _):
            refreshes[RefreshKey(trigger: trigger.rawValue, outcome: "success", code: 200), default: 0] += 1
        case .refreshFailed(let trigger, let error, _):
            refreshes[RefreshKey(trigger: trigger.rawValue, outcome: "failure", code: error.code), default: 0] += 1
            if error.code == 0 && error.message.hasPrefix("no response") {
                networkFailures[NetworkProblem.of(message: error.message).rawValue, default: 0] += 1
            }
        case .callFinished(.postEvent, let error):
            // Impressions are the only events the agent posts (A.4).
            if error == nil { impressionsSent += 1 } else { impressionsFailed += 1 }
        case .refreshNotSent:
            refreshesNotSent += 1
        case .storeFailed:
            stateSaveFailures += 1
        case .storeDamaged:
            storageErrors["load", default: 0] += 1
        default:
            break
        }
    }

    func observeRefreshDuration(_ seconds: Double) {
        durationCount += 1
        durationSum += seconds
        for (index, bound) in Self.durationBuckets.enumerated() where seconds <= bound {
            durationCounts[index] += 1
        }
    }

    func rpcRequest(_ method: String) {
        rpcRequestsByName[Self.methodLabels.contains(method) ? method : "other", default: 0] += 1
    }

    /// The same count as `rpcRequest("isEnabled")` or `rpcRequest("get")`.
    @inline(__always)
    func rpcFastRequest(isEnabled: Bool) {
        if isEnabled { fastIsEnabledRequests += 1 } else { fastGetRequests += 1 }
    }

    func rpcError(_ code: Int) { rpcErrors[code, default: 0] += 1 }

    func httpRequest(status: Int) { httpRequests[status, default: 0] += 1 }

    // MARK: - Exposition

    /// What the text shows besides the counters: read when it is rendered.
    struct Snapshot {
        var status: AgentStatus
        var version: String
        var socketConnections: Int
        var httpConnections: Int
        /// OFREP event streams open now, and events sent on them (docs/http.md F.3).
        var eventStreams = 0
        var eventsSent = 0
    }

    func text(_ s: Snapshot) -> String {
        var out = PrometheusText()
        out.family("pushwoosh_agent_build_info", "gauge", "The agent's version and application code; always 1.")
        out.sample("pushwoosh_agent_build_info", [("version", s.version), ("application_code", s.status.applicationCode)], 1)
        out.family("pushwoosh_agent_state", "gauge", "The agent's state (docs/socket-api.md B.2 status.state): 1 for the current one.")
        for state in ["notReady", "ready", "stale", "error", "fatal"] {
            out.sample("pushwoosh_agent_state", [("state", state)], s.status.state.rawValue == state ? 1 : 0)
        }
        out.family("pushwoosh_agent_flags", "gauge", "Flags served now.")
        out.sample("pushwoosh_agent_flags", [], Double(s.status.flagsCount))
        out.family("pushwoosh_agent_flags_age_seconds", "gauge", "Age of the flags served now (NaN when none are valid).")
        out.sample("pushwoosh_agent_flags_age_seconds", [], s.status.flagsAgeSeconds ?? .nan)
        out.family("pushwoosh_agent_flags_expiry_timestamp_seconds", "gauge",
                   "Unix time at which the flags served now expire (NaN when none are valid).")
        out.sample("pushwoosh_agent_flags_expiry_timestamp_seconds", [], s.status.flagsExpireAt?.timeIntervalSince1970 ?? .nan)
        out.family("pushwoosh_agent_refreshes_total", "counter",
                   "Flags requests answered, by trigger and outcome; code is the HTTP status (0 no response, 200 with failure: unusable answer).")
        for (key, n) in refreshes.sorted(by: { ($0.key.trigger, $0.key.outcome, $0.key.code) < ($1.key.trigger, $1.key.outcome, $1.key.code) }) {
            out.sample("pushwoosh_agent_refreshes_total", [("trigger", key.trigger), ("outcome", key.outcome), ("code", String(key.code))], Double(n))
        }
        out.family("pushwoosh_agent_refreshes_not_sent_total", "counter",
                   "Manual refreshes answered from the stored flags without a request: inside the throttle window (RF-6) or with no flags URL.")
        out.sample("pushwoosh_agent_refreshes_not_sent_total", [], Double(refreshesNotSent))
        out.family("pushwoosh_agent_refresh_duration_seconds", "histogram", "Time from sending a flags request to its answer.")
        for (index, bound) in Self.durationBuckets.enumerated() {
            out.sample("pushwoosh_agent_refresh_duration_seconds_bucket", [("le", PrometheusText.number(bound))], Double(durationCounts[index]))
        }
        out.sample("pushwoosh_agent_refresh_duration_seconds_bucket", [("le", "+Inf")], Double(durationCount))
        out.sample("pushwoosh_agent_refresh_duration_seconds_sum", [], durationSum)
        out.sample("pushwoosh_agent_refresh_duration_seconds_count", [], Double(durationCount))
        out.family("pushwoosh_agent_impressions_total", "counter",
                   "Flag impressions: sent (the server took them), deduplicated (already sent this session), failed (to be sent again).")
        out.sample("pushwoosh_agent_impressions_total", [("outcome", "sent")], Double(impressionsSent))
        out.sample("pushwoosh_agent_impressions_total", [("outcome", "deduplicated")], Double(impressionsDeduplicated))
        out.sample("pushwoosh_agent_impressions_total", [("outcome", "failed")], Double(impressionsFailed))
        out.family("pushwoosh_agent_socket_connections", "gauge", "Clients connected to the socket now.")
        out.sample("pushwoosh_agent_socket_connections", [], Double(s.socketConnections))
        out.family("pushwoosh_agent_socket_connections_total", "counter", "Socket connections accepted, and refused over MaxConnections.")
        out.sample("pushwoosh_agent_socket_connections_total", [("result", "accepted")], Double(socketConnectionsAccepted))
        out.sample("pushwoosh_agent_socket_connections_total", [("result", "refused")], Double(socketConnectionsRefused))
        out.family("pushwoosh_agent_http_connections", "gauge", "HTTP connections open now.")
        out.sample("pushwoosh_agent_http_connections", [], Double(s.httpConnections))
        out.family("pushwoosh_agent_http_connections_refused_total", "counter", "HTTP connections refused over MaxConnections.")
        out.sample("pushwoosh_agent_http_connections_refused_total", [], Double(httpConnectionsRefused))
        out.family("pushwoosh_agent_http_connections_evicted_total", "counter",
                   "HTTP connections closed at MaxConnections to make room: each had waited longest for its request.")
        out.sample("pushwoosh_agent_http_connections_evicted_total", [], Double(httpConnectionsEvicted))
        out.family("pushwoosh_agent_ofrep_event_streams", "gauge", "OFREP change-event streams open now.")
        out.sample("pushwoosh_agent_ofrep_event_streams", [], Double(s.eventStreams))
        out.family("pushwoosh_agent_ofrep_events_total", "counter", "OFREP change events sent (one per stream told).")
        out.sample("pushwoosh_agent_ofrep_events_total", [], Double(s.eventsSent))
        out.family("pushwoosh_agent_request_read_timeouts_total", "counter",
                   "Connections closed for not completing a request within RequestReadTimeout, by door.")
        out.sample("pushwoosh_agent_request_read_timeouts_total", [("door", "socket")], Double(socketRequestReadTimeouts))
        out.sample("pushwoosh_agent_request_read_timeouts_total", [("door", "http")], Double(httpRequestReadTimeouts))
        out.family("pushwoosh_agent_http_requests_total", "counter", "HTTP requests answered, by status code.")
        for (code, n) in httpRequests.sorted(by: { $0.key < $1.key }) {
            out.sample("pushwoosh_agent_http_requests_total", [("code", String(code))], Double(n))
        }
        out.family("pushwoosh_agent_rpc_requests_total", "counter", "JSON-RPC requests on the socket, by method (other: unknown names).")
        for (method, n) in rpcRequests.sorted(by: { $0.key < $1.key }) {
            out.sample("pushwoosh_agent_rpc_requests_total", [("method", method)], Double(n))
        }
        out.family("pushwoosh_agent_rpc_errors_total", "counter", "JSON-RPC error answers on the socket, by error code.")
        for (code, n) in rpcErrors.sorted(by: { $0.key < $1.key }) {
            out.sample("pushwoosh_agent_rpc_errors_total", [("code", String(code))], Double(n))
        }
        out.family("pushwoosh_agent_state_save_failures_total", "counter",
                   "Times saving the state failed (a failure repeating the previous one counts once until a save succeeds).")
        out.sample("pushwoosh_agent_state_save_failures_total", [], Double(stateSaveFailures))
        out.family("pushwoosh_agent_storage_errors_total", "counter",
                   "Storage errors: every failed save of the state (save), a damaged state file set aside at start (load).")
        for (operation, n) in storageErrors.sorted(by: { $0.key < $1.key }) {
            out.sample("pushwoosh_agent_storage_errors_total", [("operation", operation)], Double(n))
        }
        out.family("pushwoosh_agent_refresh_network_failures_total", "counter",
                   "Flags requests without an HTTP answer (code 0), by problem: tls_untrusted, tls_expired, tls_not_yet_valid, tls_wrong_host, tls, proxy, name_resolution, connection, timeout, other.")
        for (problem, n) in networkFailures.sorted(by: { $0.key < $1.key }) {
            out.sample("pushwoosh_agent_refresh_network_failures_total", [("problem", problem)], Double(n))
        }
        ProcessMetrics.read().write(into: &out)
        return out.text
    }
}

/// Prometheus text format 0.0.4: `# HELP`, `# TYPE`, then samples.
struct PrometheusText {
    private(set) var text = ""

    init() { text.reserveCapacity(8192) }

    mutating func family(_ name: String, _ type: String, _ help: String) {
        text += "# HELP \(name) \(help.replacingAll("\\", "\\\\").replacingAll("\n", "\\n"))\n# TYPE \(name) \(type)\n"
    }

    mutating func sample(_ name: String, _ labels: [(String, String)], _ value: Double) {
        text += name
        if !labels.isEmpty {
            text += "{"
            for (index, (key, raw)) in labels.enumerated() {
                if index > 0 { text += "," }
                text += key + "=\"" + raw.replacingAll("\\", "\\\\").replacingAll("\"", "\\\"").replacingAll("\n", "\\n") + "\""
            }
            text += "}"
        }
        text += " " + Self.number(value) + "\n"
    }

    static func number(_ v: Double) -> String {
        if v.isNaN { return "NaN" }
        if v.isInfinite { return v > 0 ? "+Inf" : "-Inf" }
        if v.magnitude < 1e15, let i = Int64(exactly: v) { return String(i) }
        return String(v)
    }
}

extension String {
    func replacingAll(_ target: Character, _ replacement: String) -> String {
        guard contains(target) else { return self }
        var out = ""
        for c in self { if c == target { out += replacement } else { out.append(c) } }
        return out
    }
}

/// The standard `process_*` metrics, from /proc/self.
struct ProcessMetrics {
    var cpuSeconds: Double?
    var residentBytes: Double?
    var virtualBytes: Double?
    var startTime: Double?
    var openFDs: Double?
    var maxFDs: Double?

    static func read() -> ProcessMetrics {
        var m = ProcessMetrics()
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let page = Double(sysconf(Int32(_SC_PAGESIZE)))
        if let stat = try? readWholeFile("/proc/self/stat"), let close = stat.lastIndex(of: UInt8(ascii: ")")) {
            // Fields after "(comm)", from field 3 (state): utime is field 14, stime 15,
            // starttime 22, vsize 23, rss 24 (proc(5)).
            let fields = stat[(close + 2)...].split(separator: UInt8(ascii: " ")).map { Double(String(decoding: $0, as: UTF8.self)) }
            if fields.count > 21, let utime = fields[11], let stime = fields[12], let start = fields[19], let vsize = fields[20], let rss = fields[21] {
                m.cpuSeconds = (utime + stime) / ticks
                m.virtualBytes = vsize
                m.residentBytes = rss * page
                if let boot = bootTime() { m.startTime = boot + start / ticks }
            }
        }
        if let dir = opendir("/proc/self/fd") {
            var count = 0
            while let entry = readdir(dir) {
                let isDot = withUnsafeBytes(of: entry.pointee.d_name) { $0.first == UInt8(ascii: ".") }
                if !isDot { count += 1 }
            }
            closedir(dir)
            m.openFDs = Double(count - 1)  // the directory's own descriptor
        }
        var limit = rlimit()
        if getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 { m.maxFDs = Double(limit.rlim_cur) }
        return m
    }

    func write(into out: inout PrometheusText) {
        func one(_ name: String, _ type: String, _ help: String, _ value: Double?) {
            guard let value else { return }
            out.family(name, type, help)
            out.sample(name, [], value)
        }
        one("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", cpuSeconds)
        one("process_open_fds", "gauge", "Number of open file descriptors.", openFDs)
        one("process_max_fds", "gauge", "Maximum number of open file descriptors.", maxFDs)
        one("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", virtualBytes)
        one("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", residentBytes)
        one("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", startTime)
    }

    private static func bootTime() -> Double? {
        guard let text = try? readWholeFile("/proc/stat") else { return nil }
        for line in text.split(separator: UInt8(ascii: "\n")) where line.starts(with: Array("btime ".utf8)) {
            return Double(String(decoding: line.dropFirst(6), as: UTF8.self))
        }
        return nil
    }
}

extension ControlServer {
    /// Counts an answer's error code, and a `logImpression` answered `false` for a flag that
    /// exists as deduplicated (IM-2: already sent this session).
    func countingAnswer(_ request: RPCRequest, _ answer: @escaping (RPCOutcome) -> Void) -> (RPCOutcome) -> Void {
        guard let metrics else { return answer }
        return { [host] outcome in
            switch outcome {
            case .failure(let error):
                metrics.rpcError(error.code)
            case .success(let result):
                if request.method == SocketMethod.logImpression.rawValue, result["logged"] == false,
                   let key = try? request.params.string("key"), host.agent.get(key).value != nil {
                    metrics.impressionsDeduplicated += 1
                }
            }
            answer(outcome)
        }
    }
}
