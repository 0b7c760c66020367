import AgentConfigFile
import AgentCore
@testable import AgentDaemon
import AgentPosix
import Foundation
import Glibc
import Testing
import HarnessSupport
import ToolSupport

/// docs/http.md F against the real `pushwoosh-agentd` and `pushwoosh-emulator`: OFREP, the
/// operations endpoints, the token, every bad-input case, the limits, the loop (no thread
/// of its own), and the exactness of the counters.
@Suite(.serialized) struct HTTPInterfaceTests {
    /// Starts the emulator and an agent with `[HTTP] Listen=` (a Unix socket unless `listen`
    /// is given); waits for the first flags.
    func start(listen: String? = nil, extra: String = "", flags: String = "DisableThrottle=yes", http: String = "", environment: [String: String] = [:],
               server: String? = nil, waitReady: Bool = true) throws -> (EmulatorProcess, AgentProcess, HTTPEndpoint) {
        let emulator = try EmulatorProcess()
        let dir = TempDir()
        let endpoint: HTTPEndpoint = listen.map { .tcp(UInt16($0.split(separator: ":").last!)!) } ?? .unix(dir.path + "/http.sock")
        let listenValue = listen ?? dir.path + "/http.sock"
        let config = AgentProcess.config(server: server ?? emulator.serverURL, extra: "UserId=alice\n" + extra, dir: dir.path)
            + "\n[FeatureFlags]\n\(flags)\n[HTTP]\nListen=\(listenValue)\n\(http)\n"
        let agent = try AgentProcess(dir: dir, config: config, server: emulator.serverURL, environment: environment)
        guard agent.waitForNotify("READY=1") != nil else { throw FixtureError("no READY=1: \(agent.stderrText)") }
        if waitReady {
            let client = try LineClient(path: agent.socketPath)
            _ = eventually { client.call("status")["result"]?["state"] == "ready" }
        }
        return (emulator, agent, endpoint)
    }

    static let single = "/ofrep/v1/evaluate/flags/"

    // F.1: flags and KEY.P with reasons, variants and metadata; FLAG_NOT_FOUND; the bulk
    // ETag and 304; F.2 health and readiness. Over the Unix-socket form of Listen=.
    @Test func ofrepAndOperations() throws {
        let (emulator, agent, endpoint) = try start()
        let h = try HTTPClient(endpoint)
        var r = h.request("POST", Self.single + "new_checkout", body: #"{"context":{}}"#)
        #expect(r.status == 200)
        #expect(r.json["value"] == true)
        #expect(r.json["reason"] == "TARGETING_MATCH")
        #expect(r.json["variant"] == "r_qa_team")
        #expect(r.json["metadata"]?["ruleId"] == "r_qa_team")
        #expect(r.json["metadata"]?["source"] == "network")
        #expect(r.json["metadata"]?["fetchedAt"]?.stringValue?.hasSuffix("Z") == true)
        r = h.request("POST", Self.single + "new_checkout.max_items", body: #"{"context":{"targetingKey":"alice","plan":"x"}}"#)
        #expect(r.json["value"] == 10)
        #expect(r.json["key"] == "new_checkout.max_items")
        r = h.request("POST", Self.single + "promo_banner", body: #"{"context":{}}"#)
        #expect(r.json["value"] == false)
        #expect(r.json["reason"] == "DISABLED")
        #expect(r.json["variant"] == "killed")
        r = h.request("POST", Self.single + "home_layout.layout", body: #"{"context":{}}"#)
        #expect(r.json["reason"] == "STATIC")  // OFREP's schema has no DEFAULT
        #expect(r.json["metadata"]?["reason"] == "DEFAULT")
        #expect(r.json["value"]?["columns"] == 1)
        // The same answer as the socket's reads: one evaluation.
        let c = try LineClient(path: agent.socketPath)
        let socketValue = c.call("property", #"{"key":"new_checkout","property":"button_color","type":"string","default":"x"}"#)["result"]?["value"]
        #expect(h.request("POST", Self.single + "new_checkout.button_color", body: #"{"context":{}}"#).json["value"] == socketValue)

        r = h.request("POST", Self.single + "nope", body: #"{"context":{}}"#)
        #expect(r.status == 404)
        #expect(r.json["errorCode"] == "FLAG_NOT_FOUND")
        #expect(r.json["key"] == "nope")
        #expect(h.request("POST", Self.single + "new_checkout.nope", body: #"{"context":{}}"#).json["errorCode"] == "FLAG_NOT_FOUND")

        // Bulk: strong ETag, 304 with no body, a new ETag exactly when the flags change.
        r = h.request("POST", "/ofrep/v1/evaluate/flags", body: #"{"context":{"targetingKey":"alice"}}"#)
        #expect(r.status == 200)
        let etag = try #require(r.headers["etag"])
        #expect(etag.hasPrefix("\"") && !etag.hasPrefix("W/"))
        let keys = r.json["flags"]?.arrayValue?.compactMap { $0["key"]?.stringValue } ?? []
        #expect(keys.contains("new_checkout") && keys.contains("new_checkout.button_color") && keys.contains("promo_banner.text"))
        #expect(h.request("POST", "/ofrep/v1/evaluate/flags", body: #"{"context":{}}"#).headers["etag"] == etag)
        r = h.request("POST", "/ofrep/v1/evaluate/flags", headers: ["If-None-Match": etag], body: #"{"context":{}}"#)
        #expect(r.status == 304)
        #expect(r.body.isEmpty)
        #expect(r.headers["etag"] == etag)
        emulator.admin("POST", "/admin/apps/ABCDE-12345/flags/new_checkout/kill")
        #expect(c.call("refresh")["result"]?["error"] == .null)
        r = h.request("POST", "/ofrep/v1/evaluate/flags", headers: ["If-None-Match": etag], body: #"{"context":{}}"#)
        #expect(r.status == 200)
        #expect(r.headers["etag"] != etag)
        #expect(h.request("POST", Self.single + "new_checkout", body: #"{"context":{}}"#).json["variant"] == "killed")

        // F.2
        r = h.request("GET", "/healthz")
        #expect(r.status == 200)
        r = h.request("GET", "/readyz")
        #expect(r.status == 200)
        #expect(r.json["state"] == "ready")
        #expect(r.json["applicationCode"] == "ABCDE-12345")
        r = h.request("GET", "/metrics")
        #expect(r.status == 200)
        #expect(r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8")
        #expect(r.body.contains("pushwoosh_agent_build_info{version=\"\(StatusReport.version)\",application_code=\"ABCDE-12345\"} 1"))
        #expect(c.call("metrics")["result"]?["text"]?.stringValue?.contains("# TYPE pushwoosh_agent_refreshes_total counter") == true)
        #expect(agent.stop().status == 0)
        #expect(!FileManager.default.fileExists(atPath: agent.dir.path + "/http.sock"))
    }

    // Every bad input: 405 with Allow, 404, 400 PARSE_ERROR, 400 INVALID_CONTEXT naming both
    // ids, 413, and nothing that changes state (no route but reads).
    @Test func badInput() throws {
        let (emulator, agent, endpoint) = try start(listen: "127.0.0.1:\(try freePort())")
        let h = try HTTPClient(endpoint)
        let c = try LineClient(path: agent.socketPath)
        let statusBefore = c.call("status")["result"]
        let serverCallsBefore = json(emulator.admin("GET", "/admin/requests").1)["count"]
        #expect((serverCallsBefore?.numberValue ?? 0) > 0)
        var r = h.request("GET", Self.single + "new_checkout")
        #expect(r.status == 405)
        #expect(r.headers["allow"] == "POST")
        r = h.request("POST", "/metrics", body: "{}")
        #expect(r.status == 405)
        #expect(r.headers["allow"] == "GET, HEAD")
        for method in ["PUT", "DELETE", "PATCH"] {
            #expect(h.request(method, "/ofrep/v1/evaluate/flags", body: #"{"context":{}}"#).status == 405)
        }
        r = h.request("GET", "/refresh")
        #expect(r.status == 404)
        #expect(h.request("POST", "/ofrep/v2/evaluate/flags/x", body: #"{"context":{}}"#).status == 404)
        r = h.request("POST", Self.single + "new_checkout", body: "{not json")
        #expect(r.status == 400)
        #expect(r.json["errorCode"] == "PARSE_ERROR")
        #expect(h.request("POST", "/ofrep/v1/evaluate/flags", body: "[1]").json["errorCode"] == "PARSE_ERROR")
        r = h.request("POST", Self.single + "new_checkout", body: #"{"context":{"targetingKey":"mallory"}}"#)
        #expect(r.status == 400)
        #expect(r.json["errorCode"] == "INVALID_CONTEXT")
        let details = r.json["errorDetails"]?.stringValue ?? ""
        #expect(details.contains("mallory") && details.contains("alice"))
        #expect(h.request("POST", "/ofrep/v1/evaluate/flags", body: #"{"context":"alice"}"#).json["errorCode"] == "INVALID_CONTEXT")
        // 413: over 64 KiB; the connection is closed after the answer, the agent goes on.
        let big = String(repeating: " ", count: HTTPSettings.maximumBodyBytes + 1)
        r = h.request("POST", Self.single + "new_checkout", body: big)
        #expect(r.status == 413)
        let fresh = try HTTPClient(endpoint)
        let context = #"{"context":{}}"#
        let largest = context + String(repeating: " ", count: HTTPSettings.maximumBodyBytes - context.utf8.count)
        #expect(fresh.request("POST", Self.single + "new_checkout", body: largest).status == 200)
        // No body, or a body without a context: the schema's 400s.
        #expect(fresh.request("POST", Self.single + "new_checkout").json["errorCode"] == "PARSE_ERROR")
        #expect(fresh.request("POST", "/ofrep/v1/evaluate/flags", body: "{}").json["errorCode"] == "INVALID_CONTEXT")
        // Reading never changes state nor reaches the network (FF-3).
        for path in ["/ofrep/v1/evaluate/flags", Self.single + "new_checkout", "/readyz", "/metrics", "/healthz"] {
            for method in ["GET", "POST"] { _ = fresh.request(method, path, body: "{}") }
        }
        #expect(json(emulator.admin("GET", "/admin/requests").1)["count"] == serverCallsBefore)
        var statusAfter = c.call("status")["result"]?.objectValue ?? [:]
        var before = statusBefore?.objectValue ?? [:]
        for clockField in ["flagsAgeSeconds", "now"] { statusAfter[clockField] = nil; before[clockField] = nil }
        #expect(statusAfter == before)
        #expect(agent.process.isRunning)
    }

    // TokenFile=: Bearer or X-API-Key, else 401; the token never appears in the log.
    @Test func token() throws {
        let tokenDir = TempDir()
        let secret = "s3cr3t-\(UUID().uuidString)"
        try (secret + "\n").write(toFile: tokenDir.path + "/token", atomically: true, encoding: .utf8)
        let (_, agent, endpoint) = try start(http: "TokenFile=\(tokenDir.path)/token")
        let h = try HTTPClient(endpoint)
        #expect(h.request("GET", "/healthz").status == 401)
        #expect(h.request("POST", Self.single + "new_checkout", body: #"{"context":{}}"#).headers["www-authenticate"] == "Bearer")
        #expect(h.request("GET", "/metrics", headers: ["Authorization": "Bearer wrong"]).status == 401)
        #expect(h.request("GET", "/metrics", headers: ["Authorization": "Bearer " + secret]).status == 200)
        #expect(h.request("POST", Self.single + "new_checkout", headers: ["X-API-Key": secret], body: #"{"context":{}}"#).json["value"] == true)
        #expect(agent.stop().status == 0)
        #expect(!agent.stderrText.contains(secret))
    }

    // B.1 PROVIDER_NOT_READY: no valid flags is a 400 PROVIDER_NOT_READY; /readyz 503.
    @Test func notReady() throws {
        let (_, agent, endpoint) = try start(server: "http://127.0.0.1:\(try freePort())/json/1.3/", waitReady: false)
        let h = try HTTPClient(endpoint)
        var r = h.request("POST", Self.single + "new_checkout", body: #"{"context":{}}"#)
        #expect(r.status == 400)
        #expect(r.json["errorCode"] == "PROVIDER_NOT_READY")
        #expect(h.request("POST", "/ofrep/v1/evaluate/flags", body: #"{"context":{}}"#).json["errorCode"] == "PROVIDER_NOT_READY")
        r = h.request("GET", "/readyz")
        #expect(r.status == 503)
        #expect(r.json["state"] == "notReady" || r.json["state"] == "error")
        #expect(h.request("GET", "/healthz").status == 200)
        #expect(agent.process.isRunning)
    }

    // A client sending one byte a second never holds up others; idle connections are closed.
    @Test func slowClientAndIdleTimeout() throws {
        let (_, agent, endpoint) = try start(environment: ["PUSHWOOSH_AGENT_HTTP_IDLE_TIMEOUT": "2"])
        let slow = try HTTPClient(endpoint)
        let request = Array("POST \(Self.single)new_checkout HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}".utf8)
        let h = try HTTPClient(endpoint)
        var slowest = 0.0
        for i in 0..<4 {
            slow.sendBytes([request[i]])  // one byte a second, never finished within the test
            let started = Date()
            #expect(h.request("POST", Self.single + "new_checkout", body: #"{"context":{}}"#).status == 200)
            slowest = max(slowest, Date().timeIntervalSince(started))
            usleep(1_000_000)  // real time on purpose: a client that sends a byte a second
        }
        #expect(slowest < 0.5, "an answer took \(slowest) s while a slow client was connected")
        // The slow client stops: its connection is idle and closed within the timeout (+1 s).
        let started = Date()
        #expect(slow.readsEOF(timeout: 5))
        #expect(Date().timeIntervalSince(started) < 3.5)
        let idle = try HTTPClient(endpoint)
        #expect(idle.readsEOF(timeout: 5))
        #expect(agent.process.isRunning)
    }

    // B.3 + F: each door has its own limit: [HTTP] MaxConnections= for HTTP, the socket's
    // MaxConnections= apart; a full HTTP door refuses no socket client. At the limit a new
    // HTTP connection takes the place of the one idle longest.
    @Test func connectionLimit() throws {
        let (_, agent, endpoint) = try start(extra: "MaxConnections=3", http: "MaxConnections=2")
        let h1 = try HTTPClient(endpoint)
        #expect(h1.request("GET", "/healthz").status == 200)
        let h2 = try HTTPClient(endpoint)
        #expect(h2.request("GET", "/healthz").status == 200)
        // Full: a third HTTP connection is served in place of the first (idle longest).
        let h3 = try HTTPClient(endpoint)
        #expect(h3.request("GET", "/healthz").status == 200)
        #expect(h1.readsEOF(timeout: 2))
        #expect(h2.request("GET", "/healthz").status == 200)
        let s1 = try LineClient(path: agent.socketPath)
        #expect(s1.call("status")["result"] != nil)
        let text = s1.call("metrics")["result"]?["text"]?.stringValue ?? ""
        #expect(metric(text, "pushwoosh_agent_http_connections_evicted_total") == 1)
        #expect(metric(text, "pushwoosh_agent_http_connections_refused_total") == 0)
        #expect(metric(text, "pushwoosh_agent_socket_connections_total{result=\"refused\"}") == 0)
    }

    // F: no thread of its own. libmicrohttpd's threads would be named MHD-*; the agent's
    // only threads besides the main one are libdispatch's (URLSession), and serving HTTP adds
    // none. (Debug builds also assert that every request is handled on the loop thread.)
    @Test func noThreadOfItsOwn() throws {
        let (_, agent, endpoint) = try start()
        func threads() -> [String] {
            let dir = "/proc/\(agent.process.processIdentifier)/task"
            return ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).map {
                ((try? String(contentsOfFile: dir + "/" + $0 + "/comm", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
            }
        }
        let before = threads()
        #expect(before.filter { !$0.contains("qos") } == ["pushwoosh-agent"], "\(before)")
        let h = try HTTPClient(endpoint)
        for _ in 0..<100 { #expect(h.request("POST", Self.single + "new_checkout", body: #"{"context":{}}"#).status == 200) }
        let others = try (0..<8).map { _ in try HTTPClient(endpoint) }
        for o in others { #expect(o.request("GET", "/metrics").status == 200) }
        let after = threads()
        #expect(after.count == before.count, "\(before) → \(after)")
        #expect(!after.contains { $0.hasPrefix("MHD") })
    }

    // F.2: the counters are exact. Known numbers of refreshes (ok and failed), impressions
    // (sent, deduplicated, failed) and requests (by method, errors by code), read back.
    @Test func metricsAreExact() throws {
        let (emulator, agent, endpoint) = try start()
        let c = try LineClient(path: agent.socketPath)
        for _ in 0..<3 { #expect(c.call("refresh")["result"]?["error"] == .null) }
        emulator.admin("POST", "/admin/faults", #"{"method":"getFeatureFlags","times":2,"http":503}"#)
        for _ in 0..<2 { #expect(c.call("refresh")["result"]?["error"]?["code"] == 503) }
        // Impressions: new_checkout once sent, twice deduplicated; home_layout fails once, then is sent.
        func text() -> String { c.call("metrics")["result"]?["text"]?.stringValue ?? "" }
        for _ in 0..<3 { _ = c.call("logImpression", #"{"key":"new_checkout"}"#) }
        // Its postEvent answered before the fault is armed (a busy host once let the fault take it).
        #expect(eventually { metric(text(), "pushwoosh_agent_impressions_total{outcome=\"sent\"}") == 1 })
        emulator.admin("POST", "/admin/faults", #"{"method":"postEvent","times":1,"http":500}"#)
        #expect(c.call("logImpression", #"{"key":"home_layout"}"#)["result"]?["logged"] == true)
        #expect(eventually { metric(text(), "pushwoosh_agent_impressions_total{outcome=\"failed\"}") == 1 })
        #expect(c.call("logImpression", #"{"key":"home_layout"}"#)["result"]?["logged"] == true)
        #expect(c.call("logImpression", #"{"key":"no_such_flag"}"#)["result"]?["logged"] == false)
        #expect(eventually { metric(text(), "pushwoosh_agent_impressions_total{outcome=\"sent\"}") == 2 })

        var t = text()
        #expect(metric(t, "pushwoosh_agent_refreshes_total{trigger=\"sessionStart\",outcome=\"success\",code=\"200\"}") == 1)
        #expect(metric(t, "pushwoosh_agent_refreshes_total{trigger=\"manual\",outcome=\"success\",code=\"200\"}") == 3)
        #expect(metric(t, "pushwoosh_agent_refreshes_total{trigger=\"manual\",outcome=\"failure\",code=\"503\"}") == 2)
        #expect(metric(t, "pushwoosh_agent_refresh_duration_seconds_count") == 6)
        #expect(metric(t, "pushwoosh_agent_refresh_duration_seconds_bucket{le=\"+Inf\"}") == 6)
        #expect(metric(t, "pushwoosh_agent_impressions_total{outcome=\"sent\"}") == 2)
        #expect(metric(t, "pushwoosh_agent_impressions_total{outcome=\"deduplicated\"}") == 2)
        #expect(metric(t, "pushwoosh_agent_impressions_total{outcome=\"failed\"}") == 1)
        #expect(metric(t, "pushwoosh_agent_state{state=\"stale\"}") == 1)
        #expect(metric(t, "pushwoosh_agent_flags") == 4)
        #expect(metric(t, "pushwoosh_agent_socket_connections") == 1)
        #expect(metric(t, "pushwoosh_agent_state_save_failures_total") == 0)
        #expect(metric(t, "process_resident_memory_bytes") ?? 0 > 1_000_000)
        #expect(metric(t, "process_open_fds") ?? 0 > 3)

        // Requests by method and errors by code: a known batch between two reads.
        let before = t
        for _ in 0..<5 { _ = c.call("isEnabled", #"{"key":"new_checkout","default":false}"#) }  // fast path
        for _ in 0..<3 { _ = c.call("get", #"{"key":"new_checkout"}"#) }
        for _ in 0..<2 { _ = c.call("frobnicate") }
        _ = c.call("isEnabled", #"{"key":"new_checkout"}"#)  // -32602: no default
        c.send("{not json\n")
        _ = c.readLine()
        let h = try HTTPClient(endpoint)
        #expect(h.request("POST", Self.single + "nope", body: #"{"context":{}}"#).status == 404)
        t = text()
        func delta(_ name: String) -> Double { (metric(t, name) ?? 0) - (metric(before, name) ?? 0) }
        #expect(delta("pushwoosh_agent_rpc_requests_total{method=\"isEnabled\"}") == 6)
        #expect(delta("pushwoosh_agent_rpc_requests_total{method=\"get\"}") == 3)
        #expect(delta("pushwoosh_agent_rpc_requests_total{method=\"other\"}") == 2)
        #expect(delta("pushwoosh_agent_rpc_requests_total{method=\"metrics\"}") == 1)
        #expect(delta("pushwoosh_agent_rpc_errors_total{code=\"-32601\"}") == 2)
        #expect(delta("pushwoosh_agent_rpc_errors_total{code=\"-32602\"}") == 1)
        #expect(delta("pushwoosh_agent_rpc_errors_total{code=\"-32700\"}") == 1)
        #expect(delta("pushwoosh_agent_http_requests_total{code=\"404\"}") == 1)
        // The HTTP interface never changes state: the refresh counters did not move.
        #expect(delta("pushwoosh_agent_refresh_duration_seconds_count") == 0)
    }

    // [HTTP] Listen= accepts loopback and paths only; other values are FILE:LINE: KEY errors.
    @Test func listenValues() throws {
        func parse(_ value: String) throws(ConfigurationError) -> AgentConfiguration {
            try AgentConfiguration.parse("[Agent]\nApplicationCode=A-1\n[HTTP]\nListen=\(value)\n", file: "/etc/a.conf", environment: [:])
        }
        #expect(try parse("127.0.0.1:8080").http.listen == .ipv4Loopback(port: 8080))
        #expect(try parse("localhost:9").http.listen == .ipv4Loopback(port: 9))
        #expect(try parse("[::1]:8080").http.listen == .ipv6Loopback(port: 8080))
        #expect(try parse("/run/x/http.sock").http.listen == .unix(path: "/run/x/http.sock"))
        #expect(try parse("").http.listen == nil)
        for bad in ["0.0.0.0:8080", "192.168.1.1:80", "[::]:80", "example.com:80", "8080", "127.0.0.1", "127.0.0.1:99999", "http.sock"] {
            #expect(throws: ConfigurationError.self) { try parse(bad) }
            do {
                _ = try parse(bad)
            } catch {
                #expect(error.description.hasPrefix("/etc/a.conf:4: Listen: "), "\(bad): \(error)")
            }
        }
        #expect(throws: ConfigurationError.self) {
            try AgentConfiguration.parse("[Agent]\nApplicationCode=A-1\n[HTTP]\nTokenFile=token\n", file: "/etc/a.conf", environment: [:])
        }
    }

    // F: with socket activation, the socket named `http` is the HTTP interface's.
    @Test func socketActivation() throws {
        let emulator = try EmulatorProcess()
        let dir = TempDir()
        let path = dir.path + "/agent.sock", httpPath = dir.path + "/http.sock"
        let agent = try AgentProcess(dir: dir, server: emulator.serverURL,
                                     launcher: ["/usr/bin/systemd-socket-activate", "-E", "NOTIFY_SOCKET", "-l", path, "-l", httpPath,
                                                "--fdname=pushwoosh-agent:http"])
        let h = try #require(firstConnection { try HTTPClient(.unix(httpPath)) })  // it starts the agent
        #expect(eventually(timeout: 15) { h.request("GET", "/readyz").json["applicationCode"] == "ABCDE-12345" })
        let c = try LineClient(path: path)
        #expect(c.call("status")["result"]?["applicationCode"] == "ABCDE-12345")
        #expect(agent.waitForNotify("READY=1") != nil)
    }
}

/// The value of the sample `series` (name with labels, exactly as exposed).
func metric(_ text: String, _ series: String) -> Double? {
    for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
        return Double(line.dropFirst(series.count + 1))
    }
    return nil
}

/// A loopback port free a moment ago.
func freePort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    var len = socklen_t(MemoryLayout<sockaddr_in>.size)
    let ok = withUnsafeMutablePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 }
    }
    guard ok else { throw FixtureError("no free port") }
    return Int(UInt16(bigEndian: addr.sin_port))
}

enum HTTPEndpoint {
    case unix(String)
    case tcp(UInt16)
}

/// A blocking HTTP/1.1 client on one keep-alive connection, TCP or Unix socket.
final class HTTPClient {
    private(set) var fd: Int32
    private var reader: HTTPResponseReader

    struct Response {
        var status: Int
        var headers: [String: String]
        var body: String
        var json: JSONValue { (try? JSONReader.parse(body)) ?? .null }
    }

    init(_ endpoint: HTTPEndpoint, timeout: Double = 10) throws {
        switch endpoint {
        case .unix(let path):
            fd = try UnixSocket.connect(to: path).take()
        case .tcp(let port):
            guard let connected = try? BlockingSocket.connectTCP(port: port) else { throw FixtureError("cannot connect to port \(port)") }
            fd = connected
        }
        BlockingSocket.setReceiveTimeout(fd, timeout)
        reader = HTTPResponseReader(fd: fd)
    }

    deinit { close() }

    func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    /// Sends all of `bytes`; a server that has gone away ends it quietly (the read tells).
    func sendBytes(_ bytes: [UInt8]) {
        try? BlockingSocket.sendAll(fd, bytes)
    }

    /// One request; status 0 when the connection was closed without an answer.
    func request(_ method: String, _ path: String, headers: [String: String] = [:], body: String? = nil) -> Response {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: localhost\r\n"
        for (k, v) in headers { head += "\(k): \(v)\r\n" }
        if let body { head += "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n" }
        head += "\r\n"
        sendBytes(Array(head.utf8) + Array((body ?? "").utf8))
        return readResponse(head: method == "HEAD")
    }

    func readResponse(head: Bool = false) -> Response {
        guard let answer = reader.next(request: head ? "HEAD" : "GET") else { return Response(status: 0, headers: [:], body: "") }
        var headers: [String: String] = [:]
        for field in answer.head.headers { headers[field.name] = field.value }
        return Response(status: answer.status, headers: headers, body: String(decoding: answer.body, as: UTF8.self))
    }

    /// Whether the server closes the connection within `timeout` seconds.
    func readsEOF(timeout: Double) -> Bool {
        var tv = timeval(tv_sec: Int(timeout), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var byte: UInt8 = 0
        while true {
            let n = recv(fd, &byte, 1, 0)
            if n == 0 { return true }
            if n < 0 { return errno == ECONNRESET }
        }
    }
}
