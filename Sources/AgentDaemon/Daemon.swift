import AgentCore
import AgentCurl
import AgentPosix
import AgentSystemd
import AgentWire
import FoundationEssentials
import Glibc

/// The composition root of `pushwoosh-agentd`: configuration, the core agent with its real
/// clock, network and store, the socket server, signals and systemd notifications, all on
/// one event loop.
public final class Daemon {
    private let options: DaemonOptions
    private let environment: [String: String]
    private var configuration: AgentConfiguration
    private let log: Log
    private let loop: EventLoop
    private let notifications: Notifications
    private let host: AgentOnLoop
    private var server: ControlServer!
    private var listener: UnixListener!
    private var signals: SignalSource?
    private var lastStatusLine = ""
    private let metrics = Metrics()
    private var http: HTTPService?
    /// What the store held at start (read before the agent exists: the device clock's
    /// offset is in it, docs/device-clock.md H). Handed to the agent by `run` and dropped there: kept,
    /// it would hold a second copy of the stored flags once a refresh replaced them.
    private var loaded: StoreLoad?
    /// The state's clock offset while `Clock=system` runs: cleared at start.
    private let abandonedOffset: Seconds?
    private var lastState: AgentStatus.State?
    /// docs/fleet.md E.1: this process's exclusive lock on its state directory, held until exit.
    private let stateLock: StateDirectoryLock
    /// The state file, with a heap trim after each save.
    private let store: TrimmingStore
    /// libcurl, set up after READY=1.
    private let network: DeferredTransport

    /// Prepares everything that can fail before the loop runs; errors name what is wrong.
    /// Must be called before any other thread exists (signals are blocked here).
    public init(options: DaemonOptions, environment: [String: String], log: Log = Log()) throws {
        try SignalSource.block([SIGHUP, SIGTERM, SIGINT])
        ignoreSIGPIPE()
        let inherited = SystemdNotifier.namedListenFDs()  // before threads: it unsets LISTEN_*
        self.options = options
        self.environment = environment
        self.log = log
        configuration = try options.loadConfiguration(environment: environment)
        loop = try EventLoop()
        notifications = Notifications(loop: loop, log: log)

        try FileStateStore.createDirectory(configuration.stateDirectory)  // 0700 when missing
        // Before anything binds a socket or reads the state: a second agent on the same
        // directory stops here, naming the directory and the holder's pid (a root-run second
        // agent on an instance's directory included, which the owner check would refuse first).
        let lock = try StateDirectoryLock(directory: configuration.stateDirectory)
        if let error = lock.pidNotRecorded {
            log(.warning, "state directory locked, but the pid not recorded in the lock file", ["error": error])
        }
        stateLock = lock
        let files = try FileStateStore(directory: configuration.stateDirectory)  // refuses a directory others may write to
        // A state file that cannot be read (permission, EIO) is neither trusted nor
        // overwritten: the agent stops here, naming the file and the error.
        let loaded = try files.load()
        self.loaded = loaded
        let storedOffset = loaded.state?.clockOffset ?? 0
        let mode = configuration.device.clock
        abandonedOffset = mode == .system && storedOffset > 0 ? storedOffset : nil
        let clock = DeviceClock(base: SystemClock(), mode: mode, offset: storedOffset)
        network = DeferredTransport { [loop, options = configuration.network.options] in
            CurlTransport(loop: loop, userAgent: "pushwoosh-agentd/\(StatusReport.version)", network: options)
        }
        let transport = MeteredTransport(network, metrics: metrics)
        store = TrimmingStore(files, loop: loop)
        store.onSaveFailure = { [metrics] in metrics.storageErrors["save", default: 0] += 1 }
        host = AgentOnLoop(loop: loop, clock: clock, settings: Self.agentSettings(configuration, environment: environment),
                           transport: transport, store: store)
        server = ControlServer(loop: loop, host: host, settings: configuration.socket, log: log)
        if mode == .controlled {
            server.clockController = DeviceClockController(clock: clock, host: host, transport: transport, loop: loop, log: log)
        }
        server.metrics = metrics
        server.metricsText = { [unowned self] in self.metricsText() }
        host.onEvent = { [unowned self] event in self.handle(event) }
        // docs/http.md F: the socket named `http` is the HTTP interface's; any other is the socket API's.
        let httpFD = inherited.first { $0.name == "http" }?.fd
        if configuration.http.listen != nil || httpFD != nil {
            http = try makeHTTPService(inheritedFD: httpFD)
            if httpFD == nil { server.httpAddress = http?.address }
            if let warning = http?.tokenWarning { log(.warning, "HTTP token file readable by others", ["detail": warning]) }
        }

        if let fd = inherited.first(where: { $0.name != "http" })?.fd {
            listener = try UnixListener(adopting: fd)  // socket activation: systemd owns the path
        } else {
            listener = try UnixListener(path: configuration.socket.path, mode: mode_t(configuration.socket.mode),
                                        group: configuration.socket.group)
        }
    }

    static func agentSettings(_ c: AgentConfiguration, environment: [String: String]) -> AgentSettings {
        var s = AgentSettings(server: c.server)
        s.flags = c.featureFlags
        s.device = c.device
        s.initialUserId = c.initialUserId
        var info = DeviceInfo()
        var now = time(nil), local = tm()
        if localtime_r(&now, &local) != nil { info.timezoneOffset = local.tm_gmtoff }  // A.2 `timezone`
        var uts = utsname()
        if uname(&uts) == 0 {
            info.osVersion = withUnsafeBytes(of: &uts.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            info.deviceModel = "Linux " + withUnsafeBytes(of: &uts.machine) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        }
        if let lang = environment["LANG"]?.prefix(2), lang.count == 2, lang != "C." { info.language = String(lang) }
        s.deviceInfo = info
        return s
    }

    /// Runs until SIGTERM or SIGINT. Returns the process exit code.
    public func run() -> Int32 {
        let started = monotonicSeconds()
        do {
            try listener.start(on: loop, onError: { [log] error in log(.warning, "accept failed", ["error": error]) }) {
                [unowned self] fd in self.server.accept(fd)
            }
            signals = try SignalSource(loop: loop, signals: [SIGHUP, SIGTERM, SIGINT]) { [unowned self] signal in
                self.handle(signal: signal)
            }
        } catch {
            log(.error, "cannot start", ["error": error])
            return 1
        }
        host.agent.start(loaded.take() ?? StoreLoad(state: nil))  // stored flags; requests go out without being waited for
        if let offset = abandonedOffset {
            // docs/device-clock.md H: back to the host's clock from a device clock that was ahead: a
            // backward clock step, treated as one (stored flags from the future are not trusted).
            log(.warning, "device clock was ahead of the host's; Clock=system goes back to the host's time",
                ["ahead_s": Int(offset.rounded())])
            host.agent.clockOffsetChanged(0)
        }
        if host.clock.mode == .controlled {
            log(.info, "device clock controlled", ["now": host.clock.wall.formatted(.iso8601), "offset_s": Int(host.clock.offset.rounded())])
        }
        warnAboutUnrealTimings()
        let status = host.agent.status()
        lastState = status.state
        lastStatusLine = StatusReport.line(status, now: host.clock.wall)
        notifications.ready(status: lastStatusLine)
        log(.info, "ready", [
            "socket": listener.path ?? "fd \(listener.fd) (socket activation)", "state_dir": configuration.stateDirectory,
            "application": configuration.server.applicationCode, "hwid": status.hwid, "flags": status.flagsCount,
            "source": status.flagsSource.rawValue, "http": http?.address, "startup_ms": Int((monotonicSeconds() - started) * 1000),
        ])
        // The HTTP interface's socket listens since `init`; libmicrohttpd is loaded and serves it
        // from here (docs/configuration.md, systemd): a connection made before waits in the backlog.
        do {
            try http?.start()
        } catch {
            log(.error, "cannot start the HTTP interface", ["error": error])
            return 1
        }
        network.open()  // libcurl's set-up, then the start-up requests go out
        startWatchdog()
        store.trimSoon()  // what reading the stored state left free, once READY=1 is out
        do {
            try loop.run()
        } catch {
            log(.error, "event loop failed", ["error": error])
            return 1
        }
        notifications.finish()
        return 0
    }

    // MARK: - Signals

    private func handle(signal: Int32) {
        switch signal {
        case SIGHUP:
            reload()
        default:
            notifications.stopping(status: "stopping")
            log(.info, "stopping", ["signal": signal == SIGTERM ? "SIGTERM" : "SIGINT"])
            server.closeAll()
            http?.stop()
            listener.close()
            loop.stop()
        }
    }

    /// SIGHUP: RELOADING=1, read the configuration again (a bad file keeps the running
    /// one), apply it, READY=1.
    private func reload() {
        notifications.reloading(status: "reloading configuration")
        do {
            var fresh = try options.loadConfiguration(environment: environment)
            // Where the socket and state live, the clock and the like change at the next start.
            for key in AgentConfiguration.keys where key.change == .restart && !key.equal(fresh, configuration) {
                log(.warning, "\(key.name)= changes at the next start, not on reload",
                    ["running": key.show(configuration) ?? "-", "file": key.show(fresh) ?? "-"])
                key.keep(&fresh, configuration)
            }
            for warning in try http?.reload(fresh.http, socket: fresh.socket) ?? [] { log(.warning, "HTTP token", ["detail": warning]) }
            configuration = fresh
            server.update(settings: fresh.socket)
            (network.opened as? CurlTransport)?.network = fresh.network.options  // CAFile=, Proxy=: the next request on
            host.agent.reload(Self.agentSettings(fresh, environment: environment))
            log(.info, "configuration reloaded", ["file": options.configFile])
            warnAboutUnrealTimings()
        } catch {
            log(.error, "configuration not reloaded; keeping the running one", ["error": error])
        }
        lastStatusLine = StatusReport.line(host.agent.status(), now: host.clock.wall)
        notifications.ready(status: lastStatusLine)
    }

    // MARK: - Watchdog and STATUS=

    /// WATCHDOG=1 at half of WatchdogSec, from the loop that serves requests: a wedged
    /// loop stops the pings. The status line is refreshed on the same beat.
    private func startWatchdog() {
        guard let interval = SystemdNotifier.watchdogInterval() else { return }
        log(.info, "watchdog enabled", ["interval_s": interval])
        func ping() {
            notifications.watchdog()
            updateStatus()
            _ = loop.schedule(after: interval / 2, ping)
        }
        ping()
    }

    private func updateStatus() {
        let status = host.agent.status()
        if status.state != lastState {
            server?.broadcast(.stateChanged(state: status.state, previous: lastState, at: host.clock.wall))
            lastState = status.state
        }
        let line = StatusReport.line(status, now: host.clock.wall)
        guard line != lastStatusLine else { return }
        lastStatusLine = line
        notifications.status(line)
    }

    // MARK: - Agent events

    private func handle(_ event: AgentEvent) {
        metrics.record(event)
        switch event {
        case .flagsChanged(let reason, let keys):
            server?.broadcast(.flagsDidUpdate(reason: reason, changed: keys, at: host.clock.wall))
            http?.flagsMayHaveChanged()
            log(.info, "flags changed", ["reason": reason.rawValue, "count": keys.count, "keys": keys.prefix(10).joined(separator: ",")])
        case .refreshSucceeded(let trigger, let count, let partial):
            log(.debug, "refresh ok", ["trigger": trigger.rawValue, "flags": count, "partial": partial ? "yes" : nil])
            server?.broadcast(.refreshCompleted(trigger: trigger, error: nil, sent: true, at: host.clock.wall))
        case .refreshFailed(let trigger, let error, let retryIn):
            server?.broadcast(.refreshCompleted(trigger: trigger, error: error, sent: true, at: host.clock.wall))
            // 401/403 stop the automatic refresh until a reload (RF-11): an error, not a warning.
            let level: Log.Level = error.code == 401 || error.code == 403 ? .error : .warning
            log(level, "refresh failed", ["trigger": trigger.rawValue, "code": error.code, "error": error.message,
                                          "retry_in_s": retryIn.map { Int(min($0, 1e12)) }])
        case .refreshNotSent(let error):
            server?.broadcast(.refreshCompleted(trigger: .manual, error: error, sent: false, at: host.clock.wall))
        case .callFinished(let method, let error):
            if let error { log(.warning, "server call failed", ["method": method.rawValue, "code": error.code, "error": error.message]) }
        case .storeFailed(let message):
            log(.error, "state not saved; serving from memory", ["error": message])
        case .storeRecovered:
            log(.info, "state saved again")
        case .storeDamaged(let message):
            log(.error, "stored state damaged; starting without it", ["detail": message])
        case .baseURLChanged(let url):
            log(.info, "server base URL changed", ["base_url": url])
        }
        if server != nil { updateStatus() }
    }

    /// Timings no real device has (docs/device-clock.md H: test with the device clock instead),
    /// and keys set twice in one file (docs/configuration.md C.1: the later line wins).
    private func warnAboutUnrealTimings() {
        for repeated in configuration.repeatedKeys {
            log(.warning, "configuration key set twice; the later line wins",
                ["file": repeated.file, "section": repeated.section, "key": repeated.key, "first_line": repeated.firstLine, "line": repeated.line])
        }
        let f = configuration.featureFlags
        guard f.storedFlagsLifetime < f.refreshInterval else { return }
        log(.warning, "StoredFlagsLifetime is shorter than RefreshInterval: an idle device will sit without flags between refreshes, which no real device does (the SDK keeps 24 h and refreshes hourly); to test expiry, use [Device] Clock=controlled and advanceClock",
            ["lifetime": TimeSpan.format(f.storedFlagsLifetime), "refresh_interval": TimeSpan.format(f.refreshInterval)])
    }

    // MARK: - HTTP interface and metrics (docs/http.md F)

    private func makeHTTPService(inheritedFD: Int32?) throws(HTTPServiceError) -> HTTPService {
        var settings = configuration.http
        if let seconds = environment["PUSHWOOSH_AGENT_HTTP_IDLE_TIMEOUT"].flatMap({ UInt32($0) }) { settings.idleTimeout = seconds }
        // For tests of the keep-alive comment (docs/http.md F.3), which would otherwise wait 10 s.
        let keepAlive = environment["PUSHWOOSH_AGENT_SSE_KEEPALIVE"].flatMap { Double($0) }.flatMap { $0 > 0 && $0 <= 15 ? $0 : nil }
        return try HTTPService(
            loop: loop, host: host, metrics: metrics, settings: settings, socket: configuration.socket, inheritedFD: inheritedFD,
            keepAliveSeconds: keepAlive ?? OFREPEvents.keepAliveSeconds,
            onRefused: { [unowned self] in
                self.metrics.httpConnectionsRefused += 1
                self.server.warnings.warn("HTTP connection refused: too many connections, every one being answered",
                                          ["max": self.configuration.http.maxConnections])
            },
            onEvicted: { [unowned self] in
                self.metrics.httpConnectionsEvicted += 1
                self.server.warnings.warn("HTTP connection closed to make room: it had waited longest for its request",
                                          ["max": self.configuration.http.maxConnections])
            },
            onRequestTimeout: { [unowned self] in
                self.metrics.httpRequestReadTimeouts += 1
                self.server.warnings.warn("HTTP connection closed: no request within RequestReadTimeout",
                         ["timeout": TimeSpan.format(self.configuration.socket.requestReadTimeout)])
            },
            metricsText: { [unowned self] in self.metricsText() })
    }

    private func metricsText() -> String {
        metrics.text(Metrics.Snapshot(status: host.agent.status(), version: StatusReport.version,
                                      socketConnections: server.connectionCount, httpConnections: http?.connectionCount ?? 0,
                                      eventStreams: http?.interface.events.openStreams ?? 0,
                                      eventsSent: http?.interface.events.eventsSent ?? 0))
    }
}
