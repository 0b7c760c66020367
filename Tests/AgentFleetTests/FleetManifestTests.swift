import AgentConfigFile
import AgentCore
import AgentFleet
import Foundation
import Testing

/// docs/fleet.md E.1: fleet.conf in, instances and generated unit files out, errors naming
/// file, line and key.
@Suite struct FleetManifestTests {
    static let example = """
        [Fleet]
        Devices=500                 # instances device-001 … device-500 (the width follows the count)
        NamePrefix=device-
        UserIds=user-{n}            # optional; {n} is the instance number; empty: no User ID
        AppStates=active:80 background:20   # optional mix, stable per instance
        StartSpread=60s             # instances start spread over this span, not all at once

        """

    @Test func protocolExample() throws {
        let m = try FleetManifest.parse(Self.example, file: "/etc/pushwoosh-agent/fleet.conf")
        #expect(m.devices == 500)
        #expect(m.namePrefix == "device-")
        #expect(m.startSpread == 60)
        let instances = m.instances
        #expect(instances.count == 500)
        #expect(instances.first?.name == "device-001")
        #expect(instances[6].name == "device-007")
        #expect(instances[6].userId == "user-7")
        #expect(instances.last?.name == "device-500")
        #expect(Set(instances.map(\.name)).count == 500)
        #expect(instances.filter { $0.appState == .active }.count == 400)
        #expect(instances.filter { $0.appState == .background }.count == 100)
        #expect(instances[0].startDelay == 0)
        #expect(abs(instances[499].startDelay - 60 * 499 / 500) < 1e-9)
        // Evenly spread: one instance every 120 ms.
        #expect(abs(instances[1].startDelay - 0.12) < 1e-9)
    }

    @Test func widthFollowsTheCount() throws {
        #expect(try FleetManifest.parse("[Fleet]\nDevices=9\n", file: "f").instances.map(\.name).last == "device-9")
        #expect(try FleetManifest.parse("[Fleet]\nDevices=10\n", file: "f").instances.map(\.name).first == "device-01")
        #expect(try FleetManifest.parse("[Fleet]\nDevices=1000\nNamePrefix=qa\n", file: "f").instances[41].name == "qa0042")
        let none = try FleetManifest.parse("[Fleet]\nDevices=0\n", file: "f")
        #expect(none.instances.isEmpty)
        let defaults = try FleetManifest.parse("[Fleet]\nDevices=2\n", file: "f").instances
        #expect(defaults.map(\.userId) == [nil, nil])
        #expect(defaults.map(\.appState) == [nil, nil])
        #expect(defaults.map(\.startDelay) == [0, 0])
    }

    /// An instance's state depends on its number and the mix only: growing the fleet
    /// keeps every existing device's state, and any prefix follows the mix within one.
    @Test func appStatesAreStablePerInstance() throws {
        let small = try FleetManifest.parse("[Fleet]\nDevices=50\nAppStates=active:80 background:20\n", file: "f").instances
        let big = try FleetManifest.parse("[Fleet]\nDevices=500\nAppStates=active:80 background:20\n", file: "f").instances
        #expect(small.map(\.appState) == big.prefix(50).map(\.appState))
        #expect(small.filter { $0.appState == .background }.count == 10)
        // Which ones (the VM test expects these to answer notReady: no session, no refresh).
        #expect(small.filter { $0.appState == .background }.map(\.number) == [3, 8, 13, 18, 23, 28, 33, 38, 43, 48])
        for n in 1...50 {
            let background = small.prefix(n).filter { $0.appState == .background }.count
            #expect(abs(Double(background) - Double(n) * 0.2) <= 1, "first \(n): \(background) background")
        }
        let onlyBackground = try FleetManifest.parse("[Fleet]\nDevices=3\nAppStates=active:0 background:1\n", file: "f").instances
        #expect(onlyBackground.map(\.appState) == [.background, .background, .background])
    }

    /// Each bad value: the file, its line and the key, as agent.conf's errors (C.1).
    @Test(arguments: [
        ("[Fleet]\nDevices=99999999\n", 2, "Devices", "more than the 10000"),
        ("[Fleet]\nDevices=-3\n", 2, "Devices", "invalid number"),
        ("[Fleet]\nDevices=ten\n", 2, "Devices", "invalid number"),
        ("[Fleet]\nDevices=5\nStartSpread=5 parsecs\n", 3, "StartSpread", "invalid time span"),
        ("[Fleet]\nDevices=5\nStartSpread=2d\n", 3, "StartSpread", "longer than 1 day"),
        ("[Fleet]\nDevices=5\n\nAppStates=active:80 asleep:20\n", 4, "AppStates", "invalid share \"asleep:20\""),
        ("[Fleet]\nDevices=5\nAppStates=active:x\n", 3, "AppStates", "invalid weight"),
        ("[Fleet]\nDevices=5\nAppStates=active:0\n", 3, "AppStates", "every weight is 0"),
        ("[Fleet]\nDevices=5\nAppStates=active:1 active:2\n", 3, "AppStates", "listed twice"),
        ("[Fleet]\nDevices=5\nUserIds=user-{name}\n", 3, "UserIds", "unknown placeholder"),
        ("[Fleet]\nDevices=5\nUserIds=a\"b\n", 3, "UserIds", "invalid character"),
        ("[Fleet]\nDevices=5\nNamePrefix=../x\n", 3, "NamePrefix", "invalid prefix"),
        ("[Fleet]\nDevices=5\nNamePrefix=.hidden\n", 3, "NamePrefix", "invalid prefix"),
        ("[Fleet]\nDevices=5\nDevice=6\n", 3, "Device", "unknown key in [Fleet]"),
        ("[Fleet]\nDevices=5\ndevices=6\n", 3, "devices", "(did you mean Devices?)"),
        ("[Fleet]\nDevices=5\n[Agent]\nUserId=x\n", 3, "[Agent]", "unknown section (expected [Fleet])"),
        ("Devices=5\n", 1, "Devices", "key outside a section"),
        ("[Fleet]\nDevices 5\n", 2, nil, "syntax error"),
    ] as [(String, Int, String?, String)])
    func errorsNameFileLineAndKey(text: String, line: Int, key: String?, message: String) {
        do {
            _ = try FleetManifest.parse(text, file: "/etc/pushwoosh-agent/fleet.conf")
            Issue.record("accepted:\n\(text)")
        } catch {
            #expect(error.file == "/etc/pushwoosh-agent/fleet.conf")
            #expect(error.line == line, "\(error)")
            #expect(error.key == key, "\(error)")
            #expect(error.message.contains(message), "\(error)")
            #expect("\(error)".hasPrefix("/etc/pushwoosh-agent/fleet.conf:\(line): "), "\(error)")
        }
    }

    @Test func fileWideErrors() {
        #expect(throws: ConfigurationError(file: "f", line: nil, key: "Devices", message: "required in [Fleet], not set")) {
            try FleetManifest.parse("[Fleet]\nNamePrefix=x-\n", file: "f")
        }
        let long = String(repeating: "x", count: 60)
        #expect {
            try FleetManifest.parse("[Fleet]\nDevices=10000\nNamePrefix=\(long)\n", file: "f")
        } throws: { ($0 as? ConfigurationError)?.key == "NamePrefix" && "\($0)".contains("longer than 64") }
        #expect {
            try FleetManifest.load("/nonexistent/fleet.conf")
        } throws: { "\($0)" == "/nonexistent/fleet.conf: cannot read the configuration file: no such file" }
    }

    // MARK: - The generator's output

    @Test func generatedUnits() throws {
        let m = try FleetManifest.parse("[Fleet]\nDevices=4\nUserIds=100%-{n}\nAppStates=active:1 background:1\nStartSpread=2s\n",
                                        file: "/etc/pushwoosh-agent/fleet.conf")
        let entries = FleetGenerator.entries(for: m, unitDirectory: "/lib/systemd/system")
        #expect(entries.count == 1 + 4 * 3)
        #expect(entries.first == .symlink(path: "multi-user.target.wants/pushwoosh-agent-fleet.target",
                                          target: "/lib/systemd/system/pushwoosh-agent-fleet.target"))
        #expect(entries.contains(.symlink(path: "pushwoosh-agent-fleet.target.wants/pushwoosh-agent-fleet@device-3.timer",
                                          target: "/lib/systemd/system/pushwoosh-agent-fleet@.timer")))
        let timer = try #require(entries.first { $0.path == "pushwoosh-agent-fleet@device-3.timer.d/50-fleet.conf" })
        guard case .file(_, let timerText) = timer else { Issue.record("not a file"); return }
        #expect(timerText.hasPrefix("# Generated by pushwoosh-agent-fleet-generator from /etc/pushwoosh-agent/fleet.conf"))
        #expect(timerText.hasSuffix("[Timer]\nOnActiveSec=\nOnActiveSec=1000000us\n"), "\(timerText)")
        let service = try #require(entries.first { $0.path == "pushwoosh-agent@device-2.service.d/50-fleet.conf" })
        guard case .file(_, let serviceText) = service else { Issue.record("not a file"); return }
        #expect(serviceText.hasSuffix("""
            # device 2 of 4.
            [Service]
            Environment="PUSHWOOSH_AGENT_USER_ID=100%%-2"
            Environment=PUSHWOOSH_AGENT_INITIAL_APP_STATE=background

            """), "\(serviceText)")
        // Every path is relative and unique.
        #expect(Set(entries.map(\.path)).count == entries.count)
        #expect(!entries.contains { $0.path.hasPrefix("/") || $0.path.contains("..") })
        // No overrides, no Environment= lines.
        let bare = FleetGenerator.entries(for: try FleetManifest.parse("[Fleet]\nDevices=1\n", file: "f"), unitDirectory: "/u")
        guard case .file(_, let bareService)? = bare.first(where: { $0.path.hasSuffix(".service.d/50-fleet.conf") }) else {
            Issue.record("no service drop-in"); return
        }
        #expect(!bareService.contains("Environment="))
    }
}
