import AgentWire
import AgentCore
import Testing
@testable import EmulatorCore

/// docs/lab.md M: the lab's routes and bodies read, and every bad input refused with a
/// 400 naming its field (or 404/405), before the lab does anything.
@Suite struct LabCommandTests {
    func parse(_ method: String, _ path: String, _ body: String = "", query: [String: String] = [:]) -> Result<LabCommand, LabRefusal> {
        LabCommand.parse(EmulatorRequest(method: method, path: path, query: query, body: Array(body.utf8)))
    }

    func refusal(_ method: String, _ path: String, _ body: String = "", query: [String: String] = [:]) -> LabRefusal? {
        if case .failure(let r) = parse(method, path, body, query: query) { return r }
        return nil
    }

    @Test func routes() throws {
        #expect(try parse("GET", "/lab/devices").get() == .list)
        #expect(try parse("GET", "/lab/devices/qa-0").get() == .show("qa-0"))
        #expect(try parse("DELETE", "/lab/devices/qa-0").get() == .stop("qa-0"))
        #expect(try parse("POST", "/lab/devices/qa-0/restart", #"{"signal":"KILL"}"#).get() == .restart("qa-0", signal: .kill))
        #expect(try parse("POST", "/lab/devices/qa-0/restart").get() == .restart("qa-0", signal: .term))
        #expect(try parse("POST", "/lab/devices/qa-0/call", #"{"method":"get","params":{"key":"k"}}"#).get()
                == .call("qa-0", method: "get", params: .object(["key": "k"])))
        #expect(try parse("GET", "/lab/devices/qa-0/log", query: ["tail": "5"]).get() == .log("qa-0", tail: 5))
        #expect(try parse("POST", "/lab/reset").get() == .reset)
        #expect(try parse("POST", "/lab/devices/qa-0/signal", #"{"signal":"HUP"}"#).get() == .signal("qa-0", signal: "HUP"))
        #expect(try parse("GET", "/lab/devices/qa-0/notifications").get() == .notifications("qa-0", after: 0))
        #expect(try parse("GET", "/lab/devices/qa-0/notifications", query: ["after": "3"]).get() == .notifications("qa-0", after: 3))
        #expect(try parse("POST", "/lab/advance", #"{"until":"nextRefresh","devices":["a"]}"#).get()
                == .advance(LabAdvanceRequest(until: .nextRefresh, devices: ["a"])))
        #expect(try parse("POST", "/lab/advance", #"{"seconds":3600}"#).get() == .advance(LabAdvanceRequest(until: .seconds(3600), devices: nil)))
        #expect(try parse("POST", "/lab/devices", #"{"attach":"/run/pushwoosh-agent/qa1.sock","name":"qa1"}"#).get()
                == .attach(name: "qa1", socket: "/run/pushwoosh-agent/qa1.sock"))
    }

    // M: `count` devices named NAME-i, `{n}` their index, values as the file has them.
    @Test func startAndItsConfiguration() throws {
        let command = try parse("POST", "/lab/devices",
                                #"{"count":2,"name":"qa","clock":"system","config":{"Agent":{"UserId":"user-{n}"},"FeatureFlags":{"DisableThrottle":true,"RefreshInterval":60}}}"#).get()
        guard case .start(let start) = command else { Issue.record("not a start: \(command)"); return }
        #expect(start.names == ["qa-0", "qa-1"])
        #expect(!start.controlledClock)
        #expect(start.configurationText(index: 1) == "[Agent]\nUserId=user-1\n[FeatureFlags]\nDisableThrottle=yes\nRefreshInterval=60\n")
        guard case .start(let one) = try parse("POST", "/lab/devices", "{}").get() else { Issue.record("not a start"); return }
        #expect(one.names == ["device"] && one.controlledClock)
        // A test's own directory, environment, daemon and text; a device pointed at another server.
        let own = try parse("POST", "/lab/devices", #"{"name":"t","directory":"/tmp/t","environment":{"SSL_CERT_FILE":"/ca.pem"},"#
                            + ##""agentd":"/opt/agentd","extraConfig":"# the end","config":{"Agent":{"ServerURL":"http://127.0.0.1:9/"}}}"##).get()
        guard case .start(let t) = own else { Issue.record("not a start: \(own)"); return }
        #expect(t.directory == "/tmp/t" && t.environment == ["SSL_CERT_FILE": "/ca.pem"] && t.agentd == "/opt/agentd")
        #expect(t.configurationText(index: 0) == "[Agent]\nServerURL=http://127.0.0.1:9/\n# the end\n")
    }

    @Test func badInputNamesTheField() {
        let cases: [(String, String, String, Int, String?)] = [
            ("POST", "/lab/devices", #"{"count":0}"#, 400, "count"),
            ("POST", "/lab/devices", #"{"count":65}"#, 400, "count"),
            ("POST", "/lab/devices", #"{"count":1.5}"#, 400, "count"),
            ("POST", "/lab/devices", #"{"name":"../x"}"#, 400, "name"),
            ("POST", "/lab/devices", #"{"name":""}"#, 400, "name"),
            ("POST", "/lab/devices", #"{"clock":"fast"}"#, 400, "clock"),
            ("POST", "/lab/devices", #"{"colour":1}"#, 400, "colour"),
            ("POST", "/lab/devices", #"{"config":[]}"#, 400, "config"),
            ("POST", "/lab/devices", #"{"config":{"Agent":{"Socket":"/x"}}}"#, 400, "config.Agent.Socket"),
            ("POST", "/lab/devices", #"{"config":{"Agent":{"StateDirectory":"/x"}}}"#, 400, "config.Agent.StateDirectory"),
            ("POST", "/lab/devices", #"{"directory":"relative"}"#, 400, "directory"),
            ("POST", "/lab/devices", #"{"directory":"/"# + String(repeating: "d", count: 100) + #""}"#, 400, "directory"),
            ("POST", "/lab/devices", #"{"directory":"/x","count":2}"#, 400, "directory"),
            ("POST", "/lab/devices", #"{"directory":5}"#, 400, "directory"),
            ("POST", "/lab/devices", #"{"agentd":"pushwoosh-agentd"}"#, 400, "agentd"),
            ("POST", "/lab/devices", #"{"environment":[]}"#, 400, "environment"),
            ("POST", "/lab/devices", #"{"environment":{"NOTIFY_SOCKET":"/x"}}"#, 400, "environment.NOTIFY_SOCKET"),
            ("POST", "/lab/devices", #"{"environment":{"A B":"x"}}"#, 400, "environment.A B"),
            ("POST", "/lab/devices", #"{"environment":{"1A":"x"}}"#, 400, "environment.1A"),
            ("POST", "/lab/devices", #"{"environment":{"A":1}}"#, 400, "environment.A"),
            ("POST", "/lab/devices", #"{"extraConfig":"a\u0000b"}"#, 400, "extraConfig"),
            ("POST", "/lab/devices", #"{"extraConfig":7}"#, 400, "extraConfig"),
            ("POST", "/lab/devices/a/signal", #"{"signal":"STOP"}"#, 400, "signal"),
            ("POST", "/lab/devices/a/signal", "{}", 400, "signal"),
            ("POST", "/lab/devices/a/signal", #"{"signal":"HUP","x":1}"#, 400, "x"),
            ("GET", "/lab/devices/a/signal", "", 405, nil),
            ("GET", "/lab/devices/a/notifications", "", 400, "after"),
            ("POST", "/lab/devices/a/notifications", "", 405, nil),
            ("POST", "/lab/devices", #"{"config":{"Device":{"Clock":"system"}}}"#, 400, "config.Device.Clock"),
            ("POST", "/lab/devices", #"{"config":{"Agent":{"UserId":"a\nb"}}}"#, 400, "config.Agent.UserId"),
            ("POST", "/lab/devices", #"{"config":{"Agent":{"UserId":null}}}"#, 400, "config.Agent.UserId"),
            ("POST", "/lab/devices", #"{"config":{"A-b":{}}}"#, 400, "config.A-b"),
            ("POST", "/lab/devices", #"{"attach":"relative.sock","name":"x"}"#, 400, "attach"),
            ("POST", "/lab/devices", #"{"attach":"/x.sock"}"#, 400, "name"),
            ("POST", "/lab/devices", #"{"count":1,"count":2}"#, 400, ""),
            ("POST", "/lab/devices", "not json", 400, ""),
            ("POST", "/lab/advance", "{}", 400, ""),
            ("POST", "/lab/advance", #"{"seconds":0}"#, 400, "seconds"),
            ("POST", "/lab/advance", #"{"seconds":-5}"#, 400, "seconds"),
            ("POST", "/lab/advance", #"{"seconds":"1h"}"#, 400, "seconds"),
            ("POST", "/lab/advance", #"{"seconds":5,"until":"nextTimer"}"#, 400, "until"),
            ("POST", "/lab/advance", #"{"until":"tomorrow"}"#, 400, "until"),
            ("POST", "/lab/advance", #"{"until":"nextTimer","devices":[]}"#, 400, "devices"),
            ("POST", "/lab/advance", #"{"until":"nextTimer","devices":[3]}"#, 400, "devices[0]"),
            ("POST", "/lab/devices/a/restart", #"{"signal":"HUP"}"#, 400, "signal"),
            ("POST", "/lab/devices/a/call", #"{"params":{}}"#, 400, "method"),
            ("POST", "/lab/devices/a/call", #"{"method":"get","params":5}"#, 400, "params"),
            ("GET", "/lab/devices/a/log", "", 400, "tail"),
            ("GET", "/lab/devices", "", 400, "x"),
            ("PUT", "/lab/devices", "", 405, nil),
            ("GET", "/lab/advance", "", 405, nil),
            ("POST", "/lab/devices/a", "", 405, nil),
            ("GET", "/lab/clock", "", 404, nil),
            ("GET", "/lab/devices/a/b/c", "", 404, nil),
        ]
        for (method, path, body, status, field) in cases {
            let query: [String: String] = path.hasSuffix("/log") ? ["tail": "0"]
                : path.hasSuffix("/notifications") && method == "GET" ? ["after": "-1"]
                : (path == "/lab/devices" && method == "GET" ? ["x": "1"] : [:])
            let r = refusal(method, path, body, query: query)
            #expect(r?.status == status, "\(method) \(path) \(body): \(String(describing: r))")
            #expect(r?.path == field, "\(method) \(path) \(body): \(String(describing: r))")
        }
    }

    // /lab/* is read through the route table like /admin/*: a path's methods (405 with Allow)
    // and its query parameters come from its row.
    @Test(arguments: [
        ("PUT", "/lab/devices", "GET, POST"), ("POST", "/lab/devices/a", "GET, DELETE"), ("GET", "/lab/devices/a/restart", "POST"),
        ("DELETE", "/lab/advance", "POST"), ("GET", "/lab/reset", "POST"), ("POST", "/lab/openapi.json", "GET"),
        ("POST", "/lab/devices/a/log", "GET"),
    ])
    func aWrongMethodIsA405WithTheRowsMethods(_ method: String, _ path: String, _ allow: String) {
        guard case .failure(let refusal) = parse(method, path) else { Issue.record("\(method) \(path) parsed"); return }
        #expect(refusal.status == 405 && refusal.message.hasSuffix("not \(method)"), "\(refusal)")
        #expect(refusal.response.headers.contains { $0.isNamed("allow") && $0.value == allow }, "\(refusal.response.headers)")
    }

    @Test func queryParametersAreTheRowsAndUnknownRoutesAre404s() throws {
        #expect(try parse("GET", "/lab/devices/a/log", query: ["tail": "5"]).get() == .log("a", tail: 5))
        #expect(try parse("GET", "/lab/devices/a/notifications", query: ["after": "2"]).get() == .notifications("a", after: 2))
        for (path, query) in [("/lab/devices", ["x": "1"]), ("/lab/devices/a/log", ["after": "1"])] {
            guard case .failure(let refusal) = parse("GET", path, query: query) else { Issue.record("\(path) parsed"); continue }
            #expect(refusal.status == 400 && refusal.path == query.keys.first, "\(refusal)")
        }
        for path in ["/lab", "/lab/", "/lab/devices/a/b/c", "/lab/devices/a/frobnicate", "/lab/devices//log"] {
            guard case .failure(let refusal) = parse("GET", path) else { Issue.record("\(path) parsed"); continue }
            #expect(refusal.status == 404, "\(path): \(refusal)")
        }
    }
}
