import AgentConfigFile
import AgentCore
import Foundation
import HarnessSupport
import Testing
@testable import AgentDaemon

private let file = "/etc/pushwoosh-agent/agent.conf"

private func parse(_ text: String, environment: [String: String] = [:]) throws -> AgentConfiguration {
    try AgentConfiguration.parse(text, file: file, environment: environment)
}

private func error(_ text: String) -> String? {
    do {
        _ = try parse(text)
        return nil
    } catch let e as ConfigurationError {
        return e.description
    } catch {
        return "unexpected \(error)"
    }
}

/// The example file of docs/configuration.md C.1, verbatim.
private let protocolExample = """
    [Agent]
    ApplicationCode=ABCDE-12345   # required
    ApiToken=                      # optional
    ServerURL=                     # optional; default https://{code}.api.pushwoosh.com/json/1.3/
    UserId=                        # optional; the User ID at first start
    Socket=                        # optional; see above
    SocketMode=0660
    SocketGroup=                   # optional
    ControlGroup=                  # optional; members may call the methods that change state
    MaxConnections=256
    StateDirectory=                # optional; see above
    RequestTimeout=30s

    [FeatureFlags]
    StoredFlagsLifetime=24h
    SessionTimeout=30min
    RefreshInterval=1h
    ThrottleWindow=5min
    DisableThrottle=no

    [Device]
    InitialAppState=active                 # active | background
    NotificationAuthorization=notDetermined
    PermissionPromptAnswer=allow           # what the simulated user answers the system prompt: allow | deny
    """

@Suite struct ConfigurationTests {
    @Test func protocolExampleGivesTheDefaults() throws {
        let c = try parse(protocolExample)
        #expect(c.server.applicationCode == "ABCDE-12345")
        #expect(c.server.apiToken == nil)
        #expect(c.server.serverURL == nil)
        #expect(c.server.requestTimeout == 30)
        #expect(c.initialUserId == nil)
        #expect(c.socket.path == "/run/pushwoosh-agent/agent.sock")
        #expect(c.socket.mode == 0o660)
        #expect(c.socket.group == nil)
        #expect(c.socket.controlGroup == nil)
        #expect(c.socket.maxConnections == 256)
        #expect(c.socket.idleTimeout == 600)
        #expect(c.stateDirectory == "/var/lib/pushwoosh-agent")
        #expect(c.featureFlags == FeatureFlagSettings())
        #expect(c.device == DeviceSettings())
        #expect(c.sourceFile == file)
    }

    @Test func everyKeySet() throws {
        let c = try parse("""
            # a comment
            ; another
            [Agent]
            ApplicationCode = XXXXX-00000
            ApiToken=secret-token-123
            ServerURL=  http://127.0.0.1:8080/json/1.3
            UserId=alice
            Socket=/tmp/agent.sock
            SocketMode=0600
            SocketGroup=pushwoosh
            ControlGroup=wheel
            MaxConnections=12
            StateDirectory=/tmp/state
            RequestTimeout=1500ms
            [FeatureFlags]
            StoredFlagsLifetime=2d
            SessionTimeout=0
            RefreshInterval=1h 30min
            ThrottleWindow=90
            DisableThrottle=YES
            [Device]
            InitialAppState=background
            NotificationAuthorization=denied
            PermissionPromptAnswer=deny
            """)
        #expect(c.server.applicationCode == "XXXXX-00000")
        #expect(c.server.apiToken == "secret-token-123")
        #expect(c.server.serverURL == "http://127.0.0.1:8080/json/1.3/")
        #expect(c.server.requestTimeout == 1.5)
        #expect(c.initialUserId == "alice")
        #expect(c.socket.path == "/tmp/agent.sock")
        #expect(c.socket.mode == 0o600)
        #expect(c.socket.group == "pushwoosh")
        #expect(c.socket.controlGroup == "wheel")
        #expect(c.socket.maxConnections == 12)
        #expect(c.stateDirectory == "/tmp/state")
        #expect(c.featureFlags.storedFlagsLifetime == 2 * 86400)
        #expect(c.featureFlags.sessionTimeout == 0)
        #expect(c.featureFlags.refreshInterval == 5400)
        #expect(c.featureFlags.throttleWindow == 90)
        #expect(c.featureFlags.disableThrottle)
        #expect(c.device.initialAppState == .background)
        #expect(c.device.notificationAuthorization == .denied)
        #expect(c.device.permissionPromptAnswer == .deny)
    }

    @Test func environmentDefaults() throws {
        let env = ["RUNTIME_DIRECTORY": "/run/pushwoosh-agent-x", "STATE_DIRECTORY": "/var/lib/private/pw:/var/lib/other"]
        let c = try parse("[Agent]\nApplicationCode=A\n", environment: env)
        #expect(c.socket.path == "/run/pushwoosh-agent-x/agent.sock")
        #expect(c.stateDirectory == "/var/lib/private/pw")
        // Configured values win over the environment.
        let d = try parse("[Agent]\nApplicationCode=A\nSocket=/tmp/s.sock\nStateDirectory=/tmp/st\n", environment: env)
        #expect(d.socket.path == "/tmp/s.sock")
        #expect(d.stateDirectory == "/tmp/st")
        let e = try parse("[Agent]\nApplicationCode=A\n", environment: ["RUNTIME_DIRECTORY": ""])
        #expect(e.socket.path == "/run/pushwoosh-agent/agent.sock")
    }

    @Test func errorsNameFileLineAndKey() {
        #expect(error("[Agent]\nApplicationCode=A\n\n[FeatureFlags]\nRefreshInterval=5 parsecs\n")
            == #"/etc/pushwoosh-agent/agent.conf:5: RefreshInterval: invalid time span "5 parsecs""#)
        #expect(error("[Agent]\nApplicationCode=A\nColour=blue\n")
            == "/etc/pushwoosh-agent/agent.conf:3: Colour: unknown key in [Agent]")
        #expect(error("[Agent]\nApplicationCode=A\nRefreshInterval=1h\n")
            == "/etc/pushwoosh-agent/agent.conf:3: RefreshInterval: unknown key in [Agent] (it belongs in [FeatureFlags])")
        #expect(error("[Agent]\napplicationcode=A\n")
            == "/etc/pushwoosh-agent/agent.conf:2: applicationcode: unknown key in [Agent] (did you mean ApplicationCode?)")
        #expect(error("[Agent]\nApplicationCode=A\n# c\n\n[Extra]\n")
            == "/etc/pushwoosh-agent/agent.conf:5: [Extra]: unknown section (expected [Agent], [FeatureFlags], [Device] or [HTTP])")
        #expect(error("[Agent]\nApplicationCode=A\n[Extra]\nFoo=1\n")?.hasPrefix("/etc/pushwoosh-agent/agent.conf:3: [Extra]: unknown section") == true)
        #expect(error("ApplicationCode=A\n")
            == "/etc/pushwoosh-agent/agent.conf:1: ApplicationCode: key outside a section (expected it under [Agent])")
        #expect(error("[Agent]\nApplicationCode=A\nthis is not a key\n")
            == "/etc/pushwoosh-agent/agent.conf:3: syntax error: expected [Section], Key=Value or a comment")
        #expect(error("[Agent\nApplicationCode=A\n")?.hasPrefix("/etc/pushwoosh-agent/agent.conf:1: syntax error") == true)
        #expect(error("[Agent]\nApiToken=x\n")
            == "/etc/pushwoosh-agent/agent.conf: ApplicationCode: required in [Agent], not set")
        #expect(error("[Agent]\nApplicationCode=   # nothing\n")
            == "/etc/pushwoosh-agent/agent.conf: ApplicationCode: required in [Agent], not set")
    }

    @Test func firstErrorWins() {
        // A syntax error on line 2 comes before a bad value on line 3.
        #expect(error("[Agent]\ngarbage\nMaxConnections=0\n")?.hasPrefix("/etc/pushwoosh-agent/agent.conf:2: syntax error") == true)
        #expect(error("[Agent]\nMaxConnections=0\ngarbage\n")?.hasPrefix("/etc/pushwoosh-agent/agent.conf:2: MaxConnections:") == true)
    }

    @Test(arguments: [
        ("ServerURL=ftp://x/", "ServerURL: invalid URL"),
        ("ServerURL=https://", "ServerURL: invalid URL"),
        ("ServerURL=example.com", "ServerURL: invalid URL"),
        ("SocketMode=660x", "SocketMode: invalid mode"),
        ("SocketMode=0999", "SocketMode: invalid mode"),
        ("SocketMode=7777", "SocketMode: invalid mode"),
        ("MaxConnections=0", "MaxConnections: invalid number"),
        ("MaxConnections=-3", "MaxConnections: invalid number"),
        ("MaxConnections=many", "MaxConnections: invalid number"),
        ("Socket=relative.sock", "Socket: not an absolute path"),
        ("Socket=/" + String(repeating: "a", count: 120), "Socket: socket path longer than 107 bytes"),
        ("StateDirectory=state", "StateDirectory: not an absolute path"),
        ("RequestTimeout=0", "RequestTimeout: time span must be above 0"),
        ("RequestTimeout=-1s", "RequestTimeout: invalid time span"),
        ("SocketGroup=a b", "SocketGroup: invalid group name"),
    ])
    func badAgentValues(_ line: String, _ expected: String) {
        let e = error("[Agent]\nApplicationCode=A\n\(line)\n")
        #expect(e?.hasPrefix("/etc/pushwoosh-agent/agent.conf:3: \(expected)") == true, "\(e ?? "accepted")")
    }

    @Test func badFlagAndDeviceValues() {
        #expect(error("[Agent]\nApplicationCode=A\n[FeatureFlags]\nDisableThrottle=maybe\n")
            == #"/etc/pushwoosh-agent/agent.conf:4: DisableThrottle: invalid boolean "maybe" (expected yes/no, true/false, 1/0 or on/off)"#)
        #expect(error("[Agent]\nApplicationCode=A\n[Device]\nInitialAppState=foreground\n")
            == #"/etc/pushwoosh-agent/agent.conf:4: InitialAppState: invalid value "foreground" (expected one of: active, background)"#)
        #expect(error("[Agent]\nApplicationCode=A\n[Device]\nNotificationAuthorization=yes\n")?.contains("notDetermined, denied, authorized, provisional, ephemeral") == true)
    }

    @Test func booleans() throws {
        for (text, value) in [("yes", true), ("no", false), ("TRUE", true), ("false", false), ("1", true),
                              ("0", false), ("On", true), ("off", false)] {
            let c = try parse("[Agent]\nApplicationCode=A\n[FeatureFlags]\nDisableThrottle=\(text)\n")
            #expect(c.featureFlags.disableThrottle == value)
        }
    }

    @Test func commentsAndWhitespace() throws {
        let c = try parse("""
            \u{FEFF}[Agent]
              ApplicationCode=AB#CD   # hash inside a word stays
            \tUserId = bob ; semicolon comment\r
            SocketGroup=\t# only a comment: unset
            """)
        #expect(c.server.applicationCode == "AB#CD")
        #expect(c.initialUserId == "bob")
        #expect(c.socket.group == nil)
    }

    @Test func laterLinesOverrideAndEmptyUnsets() throws {
        let c = try parse("[Agent]\nApplicationCode=A\nUserId=x\nUserId=\nMaxConnections=5\nMaxConnections=7\n")
        #expect(c.initialUserId == nil)
        #expect(c.socket.maxConnections == 7)
    }

    @Test func longLinesAreRefusedNotSplit() {
        let e = error("[Agent]\nApplicationCode=A\nUserId=" + String(repeating: "u", count: 400) + "\n")
        #expect(e?.hasPrefix("/etc/pushwoosh-agent/agent.conf:3: the line is longer than") == true, "\(e ?? "accepted")")
    }

    /// A key set twice in one file (same section): the later line wins and both lines are
    /// named for the warning; the same name in two sections is two keys.
    @Test func keysSetTwiceAreNamedWithBothLines() throws {
        let text = "[Agent]\nApplicationCode=A\nUserId=a\n# x\nUserId=b\nMaxConnections=3\n[HTTP]\nMaxConnections=4\n[Agent]\nUserId=c\n"
        let c = try AgentConfiguration.parse(text, file: "/etc/pushwoosh-agent/agent.conf", environment: [:])
        #expect(c.initialUserId == "c")
        #expect(c.repeatedKeys.map(\.description) == [
            "/etc/pushwoosh-agent/agent.conf:5: UserId: set again in [Agent] (first at line 3); the value of line 5 is used",
            "/etc/pushwoosh-agent/agent.conf:10: UserId: set again in [Agent] (first at line 3); the value of line 10 is used",
        ])
        #expect(try AgentConfiguration.parse("[Agent]\nApplicationCode=A\n", file: "f", environment: [:]).repeatedKeys.isEmpty)
    }

    @Test func lineNumbersCountCommentsAndBlankLines() {
        let text = "# 1\n\n; 3\n[Agent]\n\n  # 6\nApplicationCode=A\n\n\nMaxConnections=x\n"
        #expect(error(text)?.hasPrefix("/etc/pushwoosh-agent/agent.conf:10: MaxConnections:") == true)
    }

    @Test func loadNamesAMissingFile() throws {
        do {
            _ = try AgentConfiguration.load(file: "/nonexistent/agent.conf", environment: [:])
            Issue.record("loaded")
        } catch {
            #expect(error.description == "/nonexistent/agent.conf: cannot read the configuration file: no such file")
        }
        let dir = TempDir()
        let path = dir.file("agent.conf")
        try Data(protocolExample.utf8).write(to: URL(fileURLWithPath: path))
        let c = try AgentConfiguration.load(file: path, environment: [:])
        #expect(c.server.applicationCode == "ABCDE-12345")
        #expect(c.sourceFile == path)
        try Data("[Agent]\nApplicationCode=A\nBad=1\n".utf8).write(to: URL(fileURLWithPath: path))
        #expect(throws: ConfigurationError(file: path, line: 3, key: "Bad", message: "unknown key in [Agent]")) {
            try AgentConfiguration.load(file: path, environment: [:])
        }
    }

    @Test func apiTokenNeverShown() throws {
        let c = try parse("[Agent]\nApplicationCode=A\nApiToken=s3cr3t-T0KEN\n")
        #expect(c.server.apiToken == "s3cr3t-T0KEN")
        var dumped = ""
        dump(c, to: &dumped)
        for text in [c.description, "\(c)", String(reflecting: c), dumped] {
            #expect(!text.contains("s3cr3t"), "\(text)")
        }
        #expect(c.description.contains("apiToken=<redacted>"))
        #expect(c.description.contains("applicationCode=A"))
        let none = try parse("[Agent]\nApplicationCode=A\n")
        #expect(none.description.contains("apiToken=-"))
    }
}

@Suite struct TimeSpanTests {
    @Test(arguments: [
        ("90s", 90.0), ("5min", 300), ("1h 30min", 5400), ("1h30min", 5400), ("24h", 86400), ("2d", 172_800),
        ("500ms", 0.5), ("1w", 604_800), ("42", 42), ("0", 0), ("1.5h", 5400), ("5 min", 300),
        ("2 hours 1 minute 3 seconds", 7263), ("100us", 0.0001), ("3usec", 0.000003), ("10msec", 0.01),
        ("1hr", 3600), ("1sec", 1), ("2m", 120), ("1day", 86400), ("3weeks", 1_814_400), (" 7s ", 7),
    ])
    func parses(_ text: String, _ seconds: Double) {
        #expect(TimeSpan.parse(text).map { abs($0 - seconds) < 1e-9 } == true, "\(text)")
    }

    @Test(arguments: ["", " ", "-5s", "5 parsecs", "h", "1h -30min", "5x", "1..5s", ".", "1e3s", "s5", "5,5s"])
    func refuses(_ text: String) {
        #expect(TimeSpan.parse(text) == nil, "\(text)")
    }

    @Test func formats() {
        #expect(TimeSpan.format(5400) == "1h 30min")
        #expect(TimeSpan.format(30) == "30s")
        #expect(TimeSpan.format(86400) == "1d")
        #expect(TimeSpan.format(1.5) == "1s 500ms")
        #expect(TimeSpan.format(0) == "0")
        for s: Double in [5400, 30, 86400, 1.5, 0.25, 604_861] {
            #expect(TimeSpan.parse(TimeSpan.format(s)) == s)
        }
    }
}

@Suite struct DaemonCommandLineTests {
    @Test func defaults() throws {
        #expect(try DaemonCommandLine.parse([]) == .run(DaemonOptions()))
        #expect(DaemonOptions().configFile == "/etc/pushwoosh-agent/agent.conf")
    }

    @Test func options() throws {
        #expect(try DaemonCommandLine.parse(["--config", "/tmp/a.conf", "--socket", "/tmp/s.sock", "--state-dir", "/tmp/st"])
            == .run(DaemonOptions(configFile: "/tmp/a.conf", socketPath: "/tmp/s.sock", stateDirectory: "/tmp/st")))
        #expect(try DaemonCommandLine.parse(["--config=/tmp/b.conf", "--socket=/tmp/x.sock"])
            == .run(DaemonOptions(configFile: "/tmp/b.conf", socketPath: "/tmp/x.sock")))
        #expect(try DaemonCommandLine.parse(["--help"]) == .help)
        #expect(try DaemonCommandLine.parse(["-h", "--bogus"]) == .help)
        #expect(try DaemonCommandLine.parse(["--version"]) == .version)
    }

    @Test(arguments: [
        (["--config"], "option --config needs a value"),
        (["--config="], "option --config needs a value"),
        (["--socket", "rel.sock"], #"--socket: not an absolute path: "rel.sock""#),
        (["--state-dir", "x"], #"--state-dir: not an absolute path: "x""#),
        (["--frobnicate"], "unknown option --frobnicate"),
        (["-x"], "unknown option -x"),
        (["run"], #"unexpected argument "run""#),
    ])
    func errors(_ arguments: [String], _ message: String) {
        #expect(throws: CommandLineError(message)) { try DaemonCommandLine.parse(arguments) }
    }

    @Test func doctorOptions() throws {
        #expect(try DaemonCommandLine.parse(["--doctor"]) == .doctor(DaemonOptions(), json: false))
        #expect(try DaemonCommandLine.parse(["--config", "/x.conf", "--doctor", "--json"])
            == .doctor(DaemonOptions(configFile: "/x.conf"), json: true))
        #expect(throws: CommandLineError("--json goes with --doctor or --check-config")) { try DaemonCommandLine.parse(["--json"]) }
    }

    // The lab checks a device's configuration with the daemon's own parser before it starts one.
    @Test func checkConfigOptions() throws {
        #expect(try DaemonCommandLine.parse(["--check-config"]) == .checkConfig(DaemonOptions(), json: false))
        #expect(try DaemonCommandLine.parse(["--check-config", "--json", "--config", "/x.conf"])
            == .checkConfig(DaemonOptions(configFile: "/x.conf"), json: true))
        #expect(throws: CommandLineError("--doctor and --check-config exclude each other")) {
            try DaemonCommandLine.parse(["--doctor", "--check-config"])
        }
    }

    @Test func checkConfigRunsTheParserAndStartsNothing() throws {
        let dir = TempDir(files: ["good.conf": "[Agent]\nApplicationCode=A\n", "bad.conf": "[Agent]\nApplicationCode=A\nRequestTimeout=soon\n"])
        let good = try runCapturing(Binaries.agentd, ["--check-config", "--json", "--config", dir.file("good.conf")])
        #expect(good.status == 0 && good.out == #"{"file":"\#(dir.file("good.conf"))","ok":true}"# + "\n", "\(good)")
        let bad = try runCapturing(Binaries.agentd, ["--check-config", "--json", "--config", dir.file("bad.conf")])
        let answer = try JSONReader.parse(Array(bad.out.utf8))
        #expect(bad.status == 1 && answer["ok"] == false && answer["line"] == 3 && answer["key"] == "RequestTimeout", "\(bad)")
        let plain = try runCapturing(Binaries.agentd, ["--check-config", "--config", dir.file("bad.conf")])
        #expect(plain.status == 1 && plain.err.contains("bad.conf:3: RequestTimeout: invalid time span"), "\(plain)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() == ["bad.conf", "good.conf"], "nothing written")
    }

    @Test func errorDescriptionPointsToHelp() {
        #expect(CommandLineError("unknown option -x").description == "unknown option -x\nTry 'pushwoosh-agentd --help'.")
    }

    @Test func commandLineOverridesTheFile() throws {
        var c = try AgentConfiguration.parse("[Agent]\nApplicationCode=A\nSocket=/tmp/file.sock\nStateDirectory=/tmp/fs\n",
                                             file: "x", environment: [:])
        DaemonOptions(socketPath: "/tmp/cli.sock").apply(to: &c)
        #expect(c.socket.path == "/tmp/cli.sock")
        #expect(c.stateDirectory == "/tmp/fs")
        DaemonOptions(stateDirectory: "/tmp/cs").apply(to: &c)
        #expect(c.stateDirectory == "/tmp/cs")
    }

    @Test func loadConfigurationAppliesOverrides() throws {
        let dir = TempDir()
        let path = dir.file("agent.conf")
        try Data("[Agent]\nApplicationCode=A\n".utf8).write(to: URL(fileURLWithPath: path))
        let options = DaemonOptions(configFile: path, socketPath: "/tmp/o.sock")
        let c = try options.loadConfiguration(environment: ["STATE_DIRECTORY": "/srv/state"])
        #expect(c.socket.path == "/tmp/o.sock")
        #expect(c.stateDirectory == "/srv/state")
    }

    // MARK: docs/fleet.md E: --instance NAME and NAME.conf

    @Test func instanceFileOverridesKeys() throws {
        let dir = TempDir(files: ["agent.conf": "[Agent]\nApplicationCode=A\nUserId=base\n[Device]\nInitialAppState=active\n",
                               "qa1.conf": "[Agent]\nUserId=alice\n[Device]\nInitialAppState=background\n"])
        let options = DaemonOptions(configFile: dir.file("agent.conf"), instance: "qa1")
        #expect(options.overrideFile == dir.file("qa1.conf"))
        let c = try options.loadConfiguration(environment: [:])
        #expect(c.server.applicationCode == "A")
        #expect(c.initialUserId == "alice")
        #expect(c.device.initialAppState == .background)
        // Outside systemd the instance's own socket and state directory.
        #expect(c.socket.path == "/run/pushwoosh-agent/qa1.sock")
        #expect(c.stateDirectory == "/var/lib/pushwoosh-agent@qa1")
        // Under systemd its directories win.
        let s = try options.loadConfiguration(environment: ["RUNTIME_DIRECTORY": "/run/pushwoosh-agentd@qa1",
                                                            "STATE_DIRECTORY": "/var/lib/pushwoosh-agent@qa1"])
        #expect(s.socket.path == "/run/pushwoosh-agentd@qa1/agent.sock")
    }

    // docs/fleet.md E.1: a fleet instance's generated drop-in sets these variables; they lay over
    // agent.conf, and NAME.conf (the operator's file for one device) still wins.
    @Test func fleetEnvironmentLaysBetweenAgentConfAndNAMEConf() throws {
        let dir = TempDir(files: ["agent.conf": "[Agent]\nApplicationCode=A\nUserId=base\n",
                               "device-02.conf": "[Device]\nInitialAppState=active\n"])
        let env = ["PUSHWOOSH_AGENT_USER_ID": "user 2", "PUSHWOOSH_AGENT_INITIAL_APP_STATE": "background"]
        let plain = try DaemonOptions(configFile: dir.file("agent.conf"), instance: "device-01")
            .loadConfiguration(environment: env)
        #expect(plain.initialUserId == "user 2")
        #expect(plain.device.initialAppState == .background)
        #expect(plain.sourceFile?.hasSuffix(",environment") == true)
        let overridden = try DaemonOptions(configFile: dir.file("agent.conf"), instance: "device-02")
            .loadConfiguration(environment: env)
        #expect(overridden.initialUserId == "user 2")
        #expect(overridden.device.initialAppState == .active)
        #expect(try DaemonOptions(configFile: dir.file("agent.conf")).loadConfiguration(environment: [:])
            .initialUserId == "base")
        #expect {
            try DaemonOptions(configFile: dir.file("agent.conf"))
                .loadConfiguration(environment: ["PUSHWOOSH_AGENT_INITIAL_APP_STATE": "asleep"])
        } throws: { error in
            let text = "\(error)"
            return text.contains("PUSHWOOSH_AGENT_INITIAL_APP_STATE") && text.contains("InitialAppState") && text.contains("asleep")
        }
    }

    @Test func missingInstanceFileIsNoError() throws {
        let dir = TempDir(files: ["agent.conf": "[Agent]\nApplicationCode=A\nUserId=base\n"])
        let c = try DaemonOptions(configFile: dir.file("agent.conf"), instance: "qa2")
            .loadConfiguration(environment: [:])
        #expect(c.initialUserId == "base")
    }

    @Test func errorsNameTheFileTheyAreIn() throws {
        let dir = TempDir(files: ["agent.conf": "[Agent]\nApplicationCode=A\n",
                               "bad.conf": "# override\n[Agent]\nMaxConnections=lots\n",
                               "worse.conf": "[Agent]\nColour=blue\n"])
        let base = dir.file("agent.conf")
        let bad = dir.file("bad.conf")
        #expect(throws: ConfigurationError(file: bad, line: 3, key: "MaxConnections",
                                           message: "invalid number \"lots\" (expected a whole number from 1 to 65536)")) {
            try DaemonOptions(configFile: base, instance: "bad").loadConfiguration(environment: [:])
        }
        do {
            _ = try DaemonOptions(configFile: base, instance: "worse").loadConfiguration(environment: [:])
            Issue.record("an unknown key in the override file was accepted")
        } catch {
            #expect(error.description.hasPrefix(dir.file("worse.conf") + ":2: Colour: unknown key"))
        }
        // An override may even supply the required key; without any, the base file is named.
        let none = TempDir(files: ["agent.conf": "[Agent]\nUserId=x\n", "x.conf": "[Agent]\nApplicationCode=B\n"])
        let nonePath = none.file("agent.conf")
        #expect(try DaemonOptions(configFile: nonePath, instance: "x").loadConfiguration(environment: [:]).server.applicationCode == "B")
        #expect(throws: ConfigurationError(file: nonePath, line: nil, key: "ApplicationCode", message: "required in [Agent], not set")) {
            try DaemonOptions(configFile: nonePath, instance: "y").loadConfiguration(environment: [:])
        }
    }

    @Test func instanceOptionParses() throws {
        #expect(try DaemonCommandLine.parse(["--instance", "qa-1"]) == .run(DaemonOptions(instance: "qa-1")))
        #expect(try DaemonCommandLine.parse(["--instance=a.b_c"]) == .run(DaemonOptions(instance: "a.b_c")))
        for bad in ["../x", ".hidden", "a/b", "a b", ""] {
            #expect(throws: CommandLineError.self) { try DaemonCommandLine.parse(["--instance", bad]) }
        }
    }
}

/// docs/device-clock.md H: `[Device] Clock=`.
@Suite struct DeviceClockConfigurationTests {
    @Test func clockIsSystemUnlessControlled() throws {
        #expect(try parse("[Agent]\nApplicationCode=A\n").device.clock == .system)
        #expect(try parse("[Agent]\nApplicationCode=A\n[Device]\nClock=controlled\n").device.clock == .controlled)
        #expect(try parse("[Agent]\nApplicationCode=A\n[Device]\nClock=controlled\nClock=\n").device.clock == .system)
    }

    @Test func aBadClockNamesTheLineAndKey() {
        let message = error("[Agent]\nApplicationCode=A\n[Device]\nClock=fake\n")
        #expect(message?.hasPrefix("/etc/pushwoosh-agent/agent.conf:4: Clock:") == true, "\(message ?? "nil")")
        #expect(message?.contains("controlled") == true, "\(message ?? "nil")")
    }
}

/// C.1: one table of keys (`AgentConfiguration.keys`) and every list made from it.
@Suite struct ConfigurationKeyTableTests {
    /// The man page lists every key of the table with when a change applies.
    @Test func theManPageListsEveryKeyWithItsChangeRule() throws {
        let man = try String(contentsOfFile: Binaries.repositoryRoot + "/packaging/man/pushwoosh-agentd.1", encoding: .utf8)
        for key in AgentConfiguration.keys {
            #expect(man.contains(".TP\n.B \(key.qualifiedName)\n\(key.change.summary)"), "\(key.qualifiedName)")
            if let variable = key.environment { #expect(man.contains("set it with \(variable)."), "\(variable)") }
        }
        #expect(man.components(separatedBy: "\n.TP\n.B [").count - 1 == AgentConfiguration.keys.count)
    }

    /// config/agent.conf documents every key of the table and sets only ApplicationCode
    /// (the rest shows defaults, commented out), in the table's sections.
    @Test func theExampleConfigurationListsEveryKey() throws {
        let text = try String(contentsOfFile: Binaries.repositoryRoot + "/config/agent.conf", encoding: .utf8)
        let lines = text.split(separator: "\n").map(String.init)
        var section = ""
        var seen: [String: String] = [:]
        for line in lines {
            if line.hasPrefix("[") { section = String(line.dropFirst().dropLast()) }
            let bare = line.hasPrefix("#") ? String(line.dropFirst()) : line
            if let eq = bare.firstIndex(of: "="), !bare.contains(" "), bare.first?.isUppercase == true {
                seen[section + "." + bare[..<eq]] = section  // a name may be in two sections (MaxConnections)
            }
        }
        for key in AgentConfiguration.keys {
            #expect(seen[key.section + "." + key.name] == key.section, "config/agent.conf: \(key.qualifiedName)")
        }
        #expect(Set(seen.keys) == Set(AgentConfiguration.keys.map { $0.section + "." + $0.name }))
        #expect(lines.filter { !$0.hasPrefix("#") && $0.contains("=") } == ["ApplicationCode=ABCDE-12345"])
    }

    /// `--list-keys` is the table; the schema, the fleet variables and the log line come from it.
    @Test func everyListComesFromTheTable() throws {
        let rows = AgentConfiguration.keyList.split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }
        #expect(rows.map { $0[1] } == AgentConfiguration.keys.map(\.name))
        #expect(rows.first == ["Agent", "ApplicationCode", "reload", "-"])
        #expect(rows.contains(["Device", "Clock", "restart", "-"]))
        #expect(rows.contains(["Agent", "UserId", "first-start", "PUSHWOOSH_AGENT_USER_ID"]))
        #expect(AgentConfiguration.fleetEnvironment.map(\.key) == ["UserId", "InitialAppState"])
        #expect(AgentConfiguration.schema.sections.map(\.name) == ["Agent", "FeatureFlags", "Device", "HTTP"])
        let c = try AgentConfiguration.parse("[Agent]\nApplicationCode=A\n", file: "t", environment: [:])
        #expect(c.description.split(separator: " ").count == AgentConfiguration.keys.count)
        #expect(c.description.hasPrefix("applicationCode=A apiToken=- serverURL=- userId=-"))
    }

    /// An empty value restores the default, as in systemd, for each kind of key.
    @Test func anEmptyValueRestoresTheDefault() throws {
        let c = try AgentConfiguration.parse("""
            [Agent]
            ApplicationCode=A
            MaxConnections=3
            MaxConnections=
            ServerURL=http://127.0.0.1:1/json/1.3/
            ServerURL=
            [FeatureFlags]
            RefreshInterval=5s
            RefreshInterval=
            [Device]
            Clock=controlled
            Clock=
            """, file: "t", environment: ["STATE_DIRECTORY": "/tmp/s"])
        let defaults = AgentConfiguration(applicationCode: "A", environment: ["STATE_DIRECTORY": "/tmp/s"])
        #expect(c.socket.maxConnections == defaults.socket.maxConnections)
        #expect(c.server.serverURL == nil)
        #expect(c.featureFlags.refreshInterval == defaults.featureFlags.refreshInterval)
        #expect(c.device.clock == .system)
        #expect(c.stateDirectory == "/tmp/s")
    }
}
