import AgentCore
import AgentCurl
import AgentPosix
import FoundationEssentials
import Glibc

/// `pushwoosh-agentd --doctor [--config FILE] [--json]`: one exchange with the configured
/// server as the device would make it at start (`applicationOpen`, then `getFeatureFlags`),
/// writing nothing (no state directory, no lock, no socket), and a report of each step:
/// configuration, name resolution, connection, TLS (the chain's subject, issuer and expiry),
/// HTTP status, `status_code`, the flags answer against the contract with the JSON path of
/// each deviation, the flags the agent would serve, and the time each took. Usable (exit 0)
/// when the agent would serve the flags answer; otherwise exit 1. The API token is never
/// printed: the report says whether one is set, and any text that holds it is redacted.
public struct Doctor {
    public struct Step: Sendable, Equatable {
        public enum Outcome: String, Sendable { case ok, warning, failed, skipped }
        public var name: String
        public var outcome: Outcome
        public var detail: String
        /// Milliseconds, when the step took time on the network.
        public var milliseconds: Int?
    }

    public struct Report: Sendable {
        public var configFile: String
        public var steps: [Step] = []
        public var deviations: [PushwooshAPI.Deviation] = []
        public var flags: [FeatureFlag] = []
        public var partial = false
        public var totalMilliseconds = 0
        public var usable: Bool { !steps.contains { $0.outcome == .failed } }
    }

    let configuration: AgentConfiguration
    let environment: [String: String]
    let exchange: (HTTPRequest) -> CurlProbe.Result

    public init(configuration: AgentConfiguration, environment: [String: String],
                exchange: ((HTTPRequest) -> CurlProbe.Result)? = nil) {
        self.configuration = configuration
        self.environment = environment
        let network = configuration.network.options
        self.exchange = exchange ?? { CurlProbe.exchange($0, network: network, userAgent: "pushwoosh-agentd/\(StatusReport.version) (doctor)") }
    }

    public func run() -> Report {
        let started = monotonicSeconds()
        var report = Report(configFile: configuration.sourceFile ?? "-")
        let c = configuration
        var stored: PersistentState?
        var unreadable: String?
        do {
            stored = try FileStateStore.read(c.stateDirectory + "/" + FileStateStore.fileName)
        } catch {
            unreadable = "\(error)"
        }
        let baseURL = c.server.serverURL ?? stored?.baseURL ?? PushwooshAPI.defaultBaseURL(applicationCode: c.server.applicationCode)
        let urlSource = c.server.serverURL != nil ? "ServerURL=" : stored?.baseURL != nil ? "base_url the server handed out" : "default"
        var settings = [
            "application \(c.server.applicationCode)", "server \(ConfigValue.redactedProxy(baseURL)) (\(urlSource))",
            "token \(c.server.apiToken?.isEmpty == false ? "set" : "not set")",
            "CAFile \(c.network.caFile.map { "\($0.path) (\($0.certificates) certificates)" } ?? "none: the system's CAs")",
            "proxy \(proxyInUse(baseURL))",
        ]
        if !PushwooshAPI.supportsFeatureFlags(baseURL: baseURL) {
            settings.append("the URL does not end with \(PushwooshAPI.flagsPathSuffix): the agent requests no flags from it")
        }
        let flagsURLOK = PushwooshAPI.supportsFeatureFlags(baseURL: baseURL)
        report.steps.append(Step(name: "configuration", outcome: flagsURLOK ? .ok : .failed, detail: settings.joined(separator: "; ")))

        // The device: the stored one, read only, else a new one as on a first start.
        var random = SystemRandomNumberGenerator()
        let hwid = stored?.hwid ?? AgentMachine.makeHWID(using: &random)
        let userId = stored?.userId ?? hwid
        let origin = stored != nil ? "from the stored state, read only"
            : unreadable.map { "new: the stored state could not be read (\($0)); nothing is written" }
            ?? "new: no stored state in \(c.stateDirectory); nothing is written"
        report.steps.append(Step(name: "device", outcome: unreadable == nil ? .ok : .warning,
                                 detail: "HWID \(hwid), User ID \(userId) (\(origin))"))

        let host = URL(string: baseURL)?.host ?? ""
        report.steps.append(resolve(host, proxied: proxyInUse(baseURL) != "none"))

        let common = PushwooshAPI.CommonFields(applicationCode: c.server.applicationCode, hwid: hwid, userId: userId)
        let info = Daemon.agentSettings(c, environment: environment).deviceInfo
        let authorization = stored?.notificationAuthorization ?? c.device.notificationAuthorization
        let open = PushwooshAPI.request(.applicationOpen, baseURL: baseURL, common: common,
                                        fields: AgentMachine.deviceFields(info, authorization: authorization),
                                        apiToken: c.server.apiToken, timeout: c.server.requestTimeout)
        let opened = exchange(open)
        report.steps += transportSteps(opened)
        report.steps.append(callStep("applicationOpen", opened, required: false))

        if flagsURLOK, opened.problem == nil || opened.problem == .timeout {
            let request = PushwooshAPI.request(.getFeatureFlags, baseURL: baseURL, common: common,
                                               apiToken: c.server.apiToken, timeout: c.server.requestTimeout)
            let answer = exchange(request)
            if opened.problem != nil { report.steps += transportSteps(answer) }
            report.steps.append(callStep("getFeatureFlags", answer, required: true))
            checkFlags(answer, into: &report)
        } else {
            report.steps.append(Step(name: "getFeatureFlags", outcome: .failed,
                                     detail: flagsURLOK ? "not sent: the server could not be reached" : "not sent: no flags URL"))
        }
        report.totalMilliseconds = Int(((monotonicSeconds() - started) * 1000).rounded())
        return report
    }

    /// Where the flags request goes through: `Proxy=`, the environment's variable, or none.
    func proxyInUse(_ url: String) -> String {
        let bypass = (environment["no_proxy"] ?? environment["NO_PROXY"]).map { "; no_proxy=\($0) may bypass it" } ?? ""
        if let proxy = configuration.network.proxy { return "\(ConfigValue.redactedProxy(proxy)) (Proxy=\(bypass))" }
        let names = url.lowercased().hasPrefix("https") ? ["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
                                                         : ["http_proxy", "all_proxy", "ALL_PROXY"]
        for name in names {
            if let value = environment[name], !value.isEmpty { return "\(ConfigValue.redactedProxy(value)) (\(name)\(bypass))" }
        }
        return "none"
    }

    private func resolve(_ host: String, proxied: Bool) -> Step {
        let started = monotonicSeconds()
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, nil, &hints, &list)
        let ms = Int(((monotonicSeconds() - started) * 1000).rounded())
        guard rc == 0, let list else {
            let why = String(cString: gai_strerror(rc))
            return Step(name: "resolution", outcome: proxied ? .warning : .failed,
                        detail: "\(host): \(why)\(proxied ? " (the proxy resolves it)" : "")", milliseconds: ms)
        }
        defer { freeaddrinfo(list) }
        var addresses: [String] = []
        var item: UnsafeMutablePointer<addrinfo>? = list
        while let node = item {
            var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            if getnameinfo(node.pointee.ai_addr, node.pointee.ai_addrlen, &buffer, socklen_t(buffer.count), nil, 0, NI_NUMERICHOST) == 0 {
                let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                if !addresses.contains(text) { addresses.append(text) }
            }
            item = node.pointee.ai_next
        }
        return Step(name: "resolution", outcome: .ok, detail: "\(host) → \(addresses.joined(separator: ", "))", milliseconds: ms)
    }
}
