// The systemd units in systemd/: `systemd-analyze verify` must accept them
// without a word, and `systemd-analyze security --offline=yes` must rate the
// service's exposure at 2.0 or below. Both run as separate processes; no
// systemd instance is ever started (PID 1 is not systemd on the build hosts,
// and starting one could move the host's processes between cgroups).
//
// How the real binary fares under the sandbox the unit sets up (seccomp
// filter, MemoryDenyWriteExecute) is not something systemd-analyze checks;
// the unit file's comments say how that was checked.
#if os(Linux)
import Foundation
import Testing

@Suite struct SystemdUnitTests {
    @Test("systemd-analyze verify is silent on the units: the service's, and the template's with the fleet's",
          arguments: ["service", "template"])
    func verifyAcceptsTheUnitsSilently(units: String) throws {
        let dir = try UnitCopy.make()
        defer { dir.remove() }
        let files = units == "service" ? [dir.service, dir.socket, dir.httpSocket, dir.slice]
                                       : [dir.instanceService, dir.instanceSocket, dir.slice, dir.fleetTarget, dir.instanceTimer]
        let result = try Analyzer.run(["verify"] + files, in: dir.path)
        #expect(result.status == 0, "systemd-analyze verify exited \(result.status)\n\(result.output)")
        // verify exits 0 on unknown keys and bad values: only silence is a pass.
        #expect(result.stdout.isEmpty, "verify printed on stdout:\n\(result.stdout)")
        #expect(result.stderr.isEmpty, "verify printed on stderr:\n\(result.stderr)")
    }

    /// The check above is only worth something if verify does complain about
    /// a unit that is wrong in the ways that do not change its exit status.
    @Test func verifyComplainsAboutAnUnknownKey() throws {
        let dir = try UnitCopy.make(edit: { service in
            service.replacingOccurrences(of: "[Service]\n", with: "[Service]\nHardenEverything=yes\n")
        })
        defer { dir.remove() }
        let result = try Analyzer.run(["verify", dir.service, dir.socket, dir.httpSocket], in: dir.path)
        #expect(result.stderr.contains("HardenEverything"), "verify did not report the unknown key:\n\(result.output)")
    }

    @Test("systemd-analyze security: an exposure of at most 2.0, for the service and for the template instance",
          arguments: ["service", "template"])
    func securityExposureIsAtMostTwo(unit: String) throws {
        let dir = try UnitCopy.make()
        defer { dir.remove() }
        // --threshold=20: exit non-zero when the exposure (×10) is above 20.
        let result = try Analyzer.run(["security", "--offline=yes", "--threshold=20", "--no-pager",
                                       unit == "service" ? dir.service : dir.instanceService], in: dir.path)
        #expect(result.status == 0, "systemd-analyze security exited \(result.status)\n\(result.output)")
        let exposure = try #require(Analyzer.exposure(in: result.stdout),
                                    "no 'Overall exposure level' line in:\n\(result.output)")
        #expect(exposure <= 2.0, "exposure \(exposure) > 2.0:\n\(result.stdout)")
        #expect(exposure > 0, "an exposure of 0 means the analysis did not read the unit")
    }

    @Test func exposureLineIsParsed() {
        let line = "→ Overall exposure level for pushwoosh-agent.service: 1.2 OK 🙂\n"
        #expect(Analyzer.exposure(in: "stuff\n" + line) == 1.2)
        #expect(Analyzer.exposure(in: "Overall exposure level for x.service: 9.6 UNSAFE 😨") == 9.6)
        #expect(Analyzer.exposure(in: "no such line") == nil)
    }

    /// The contract with the daemon and with `make install` (docs/configuration.md C).
    @Test func unitsMatchTheDaemonsContract() throws {
        let service = try String(contentsOfFile: UnitCopy.source("pushwoosh-agent.service"), encoding: .utf8)
        let socket = try String(contentsOfFile: UnitCopy.source("pushwoosh-agent.socket"), encoding: .utf8)
        let serviceKeys = Set(service.split(separator: "\n").map(String.init))
        for line in [
            "Type=notify", "NotifyAccess=main", "WatchdogSec=30s", "Restart=on-failure", "TimeoutStopSec=5s",
            "ExecStart=/usr/local/bin/pushwoosh-agentd --config /etc/pushwoosh-agent/agent.conf",
            "ExecReload=/bin/kill -HUP $MAINPID",
            "DynamicUser=yes", "StateDirectory=pushwoosh-agent", "StateDirectoryMode=0700",
            "RuntimeDirectory=pushwoosh-agentd", "ConfigurationDirectory=pushwoosh-agent",
            "MemoryDenyWriteExecute=yes", "CapabilityBoundingSet=", "UMask=0077",
            "SystemCallFilter=@system-service", "SystemCallFilter=~@privileged @resources",
        ] {
            #expect(serviceKeys.contains(line), "pushwoosh-agent.service lacks \(line)")
        }
        // No libdispatch thread calls setpriority(2) any more, so a filtered call
        // kills the agent instead of failing quietly with EPERM (the VM test runs it so).
        #expect(!service.contains("SystemCallErrorNumber="))
        // Wants=, not Requires=: the service must also start without the socket unit.
        #expect(serviceKeys.contains("Wants=pushwoosh-agent.socket"))
        #expect(!service.contains("Requires=pushwoosh-agent.socket"))
        let socketKeys = Set(socket.split(separator: "\n").map(String.init))
        for line in ["ListenStream=/run/pushwoosh-agent/agent.sock", "SocketMode=0660", "SocketGroup=pushwoosh",
                     "RemoveOnStop=yes", "WantedBy=sockets.target"] {
            #expect(socketKeys.contains(line), "pushwoosh-agent.socket lacks \(line)")
        }
        // docs/http.md F: the optional HTTP socket, told apart by its name, loopback only.
        let http = try String(contentsOfFile: UnitCopy.source("pushwoosh-agent-http.socket"), encoding: .utf8)
        let httpKeys = Set(http.split(separator: "\n").map(String.init))
        for line in ["FileDescriptorName=http", "ListenStream=127.0.0.1:8016", "Service=pushwoosh-agent.service"] {
            #expect(httpKeys.contains(line), "pushwoosh-agent-http.socket lacks \(line)")
        }
        #expect(!socket.contains("FileDescriptorName=http"))
    }

    /// Under systemd 252, a preserved RuntimeDirectory of a DynamicUser=
    /// service moves to /run/private (0700), and a removed one unlinks a socket
    /// inside it. So no unit preserves it and no socket unit listens inside one.
    @Test func socketsLiveOutsideEveryRuntimeDirectory() throws {
        for (service, socket) in [("pushwoosh-agent.service", "pushwoosh-agent.socket"),
                                  ("pushwoosh-agent@.service", "pushwoosh-agent@.socket")] {
            let serviceText = try String(contentsOfFile: UnitCopy.source(service), encoding: .utf8)
            let socketText = try String(contentsOfFile: UnitCopy.source(socket), encoding: .utf8)
            let serviceLines = serviceText.split(separator: "\n").map(String.init)
            #expect(!serviceLines.contains { $0.hasPrefix("RuntimeDirectoryPreserve=") }, "\(service) preserves its RuntimeDirectory")
            let runtime = try #require(serviceLines.first { $0.hasPrefix("RuntimeDirectory=") }).dropFirst("RuntimeDirectory=".count)
            let listen = try #require(socketText.split(separator: "\n").first { $0.hasPrefix("ListenStream=") })
                .dropFirst("ListenStream=".count)
            #expect(listen.hasPrefix("/run/pushwoosh-agent/"), "\(socket) listens on \(listen)")
            #expect(!listen.hasPrefix("/run/\(runtime)/"), "\(socket) listens inside \(service)'s RuntimeDirectory")
        }
    }

    /// docs/fleet.md E: instance NAME is its own device, socket and configuration override.
    @Test func templateUnitsMatchProtocolE() throws {
        let service = try String(contentsOfFile: UnitCopy.source("pushwoosh-agent@.service"), encoding: .utf8)
        let socket = try String(contentsOfFile: UnitCopy.source("pushwoosh-agent@.socket"), encoding: .utf8)
        let serviceKeys = Set(service.split(separator: "\n").map(String.init))
        for line in ["ExecStart=/usr/local/bin/pushwoosh-agentd --config /etc/pushwoosh-agent/agent.conf --instance %i",
                     "StateDirectory=pushwoosh-agent@%i", "RuntimeDirectory=pushwoosh-agentd@%i",
                     "Wants=pushwoosh-agent@%i.socket", "DynamicUser=yes", "Group=pushwoosh", "Type=notify"] {
            #expect(serviceKeys.contains(line), "pushwoosh-agent@.service lacks \(line)")
        }
        let socketKeys = Set(socket.split(separator: "\n").map(String.init))
        for line in ["ListenStream=/run/pushwoosh-agent/%i.sock", "Service=pushwoosh-agent@%i.service",
                     "SocketGroup=pushwoosh", "SocketMode=0660"] {
            #expect(socketKeys.contains(line), "pushwoosh-agent@.socket lacks \(line)")
        }
    }

    /// docs/fleet.md E.1: every agent, plain or instance, runs in pushwoosh-agent.slice, whose
    /// limits are set (and documented as overridable).
    @Test func everyServiceRunsInTheSliceWithLimits() throws {
        for name in ["pushwoosh-agent.service", "pushwoosh-agent@.service"] {
            let lines = try String(contentsOfFile: UnitCopy.source(name), encoding: .utf8).split(separator: "\n")
            #expect(lines.filter { $0.hasPrefix("Slice=") } == ["Slice=pushwoosh-agent.slice"], "\(name)")
        }
        let slice = try String(contentsOfFile: UnitCopy.source("pushwoosh-agent.slice"), encoding: .utf8)
        let keys = Dictionary(slice.split(separator: "\n").filter { !$0.hasPrefix("#") && $0.contains("=") }
            .map { line -> (String, String) in
                let parts = line.split(separator: "=", maxSplits: 1)
                return (String(parts[0]), parts.count > 1 ? String(parts[1]) : "")
            }, uniquingKeysWith: { _, b in b })
        #expect(keys["MemoryMax"] == "4G")
        #expect(keys["MemoryHigh"] == "3584M")
        #expect(keys["TasksMax"] == "4096")
        #expect(keys["CPUWeight"] == "50")
        #expect(slice.contains("systemctl set-property pushwoosh-agent.slice"), "the slice does not say how to override it")
    }

    /// docs/fleet.md E.1: the fleet's target wants a timer per device (the generator's symlinks);
    /// the timer starts the device and is part of the target; the device is part of its timer.
    @Test func fleetUnitsChainTargetTimerAndDevice() throws {
        func lines(_ name: String) throws -> Set<String> {
            Set(try String(contentsOfFile: UnitCopy.source(name), encoding: .utf8).split(separator: "\n").map(String.init))
        }
        let timer = try lines("pushwoosh-agent-fleet@.timer")
        for line in ["Unit=pushwoosh-agent@%i.service", "PartOf=pushwoosh-agent-fleet.target", "OnActiveSec=0",
                     "AccuracySec=1ms", "RemainAfterElapse=yes"] {
            #expect(timer.contains(line), "pushwoosh-agent-fleet@.timer lacks \(line)")
        }
        #expect(try lines("pushwoosh-agent-fleet.target").contains("WantedBy=multi-user.target"))
        for name in ["pushwoosh-agent@.service", "pushwoosh-agent@.socket"] {
            #expect(try lines(name).contains("PartOf=pushwoosh-agent-fleet@%i.timer"), "\(name)")
        }
        #expect(!(try lines("pushwoosh-agent.service")).contains { $0.hasPrefix("PartOf=") })
    }

    /// verify reads the slice's values: a bad limit is reported (so the silent pass above counts).
    @Test func verifyComplainsAboutABadSliceLimit() throws {
        let dir = try UnitCopy.make(editSlice: { $0.replacingOccurrences(of: "MemoryMax=4G", with: "MemoryMax=lots") })
        defer { dir.remove() }
        let result = try Analyzer.run(["verify", dir.slice, dir.instanceService], in: dir.path)
        #expect(result.stderr.contains("Invalid memory limit 'lots'"), "verify did not report the bad limit:\n\(result.output)")
    }
}

/// A scratch copy of the units in which ExecStart= names a binary that exists.
///
/// `systemd-analyze verify` checks that ExecStart='s program exists and is
/// executable. The unit names the installed path, /usr/local/bin/pushwoosh-agentd,
/// which is not there on a build host, so the copy runs /bin/true instead:
/// verify only looks at the path, never runs it, and /bin/true is on every
/// host (a freshly built pushwoosh-agentd may not be when only this target is
/// built). Everything else in the copy is the file as shipped.
struct UnitCopy {
    static let installedBinary = "ExecStart=/usr/local/bin/pushwoosh-agentd "
    static let standIn = "ExecStart=/bin/true "

    let path: String
    var service: String { path + "/pushwoosh-agent.service" }
    var socket: String { path + "/pushwoosh-agent.socket" }
    var httpSocket: String { path + "/pushwoosh-agent-http.socket" }
    var slice: String { path + "/pushwoosh-agent.slice" }
    var fleetTarget: String { path + "/pushwoosh-agent-fleet.target" }
    var instanceTimer: String { path + "/pushwoosh-agent-fleet@test.timer" }
    /// The template units, as instance "test" (verify needs an instance).
    var instanceService: String { path + "/pushwoosh-agent@test.service" }
    var instanceSocket: String { path + "/pushwoosh-agent@test.socket" }

    /// The package root: this file is Tests/SystemdUnitTests/SystemdUnitTests.swift.
    static var root: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().path
    }

    static func source(_ name: String) -> String { root + "/systemd/" + name }

    static func make(edit: (String) -> String = { $0 }, editSlice: (String) -> String = { $0 }) throws -> UnitCopy {
        let path = FileManager.default.temporaryDirectory
            .appendingPathComponent("systemd-unit-tests-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let copy = UnitCopy(path: path)
        let service = try String(contentsOfFile: source("pushwoosh-agent.service"), encoding: .utf8)
        #expect(service.contains("\n" + installedBinary), "ExecStart= no longer names \(installedBinary)")
        try edit(service.replacingOccurrences(of: installedBinary, with: standIn))
            .write(toFile: copy.service, atomically: true, encoding: .utf8)
        try FileManager.default.copyItem(atPath: source("pushwoosh-agent.socket"), toPath: copy.socket)
        try FileManager.default.copyItem(atPath: source("pushwoosh-agent-http.socket"), toPath: copy.httpSocket)
        let template = try String(contentsOfFile: source("pushwoosh-agent@.service"), encoding: .utf8)
        #expect(template.contains("\n" + installedBinary), "the template's ExecStart= no longer names \(installedBinary)")
        try template.replacingOccurrences(of: installedBinary, with: standIn)
            .write(toFile: copy.instanceService, atomically: true, encoding: .utf8)
        try FileManager.default.copyItem(atPath: source("pushwoosh-agent@.socket"), toPath: copy.instanceSocket)
        try FileManager.default.copyItem(atPath: source("pushwoosh-agent-fleet.target"), toPath: copy.fleetTarget)
        try FileManager.default.copyItem(atPath: source("pushwoosh-agent-fleet@.timer"), toPath: copy.instanceTimer)
        try editSlice(try String(contentsOfFile: source("pushwoosh-agent.slice"), encoding: .utf8))
            .write(toFile: copy.slice, atomically: true, encoding: .utf8)
        return copy
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// Runs systemd-analyze, collecting its output through files (no pipe to fill).
enum Analyzer {
    struct Result {
        var status: Int32
        var stdout: String
        var stderr: String
        var output: String { "--- stdout\n\(stdout)--- stderr\n\(stderr)" }
    }

    static func executable() throws -> String {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for dir in path.split(separator: ":").map(String.init) + ["/usr/bin", "/bin"] {
            let candidate = dir + "/systemd-analyze"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw AnalyzerMissing()
    }

    struct AnalyzerMissing: Error, CustomStringConvertible {
        var description: String { "systemd-analyze not found: install the Debian package systemd (make deps)" }
    }

    static func run(_ arguments: [String], in directory: String) throws -> Result {
        let out = directory + "/analyze.stdout", err = directory + "/analyze.stderr"
        guard FileManager.default.createFile(atPath: out, contents: nil),
              FileManager.default.createFile(atPath: err, contents: nil)
        else { throw CocoaError(.fileWriteUnknown) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try executable())
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        var environment = ProcessInfo.processInfo.environment
        environment["SYSTEMD_COLORS"] = "0"
        environment["SYSTEMD_PAGER"] = "cat"
        environment["SYSTEMD_LOG_LEVEL"] = "notice"
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        let outHandle = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        let errHandle = try FileHandle(forWritingTo: URL(fileURLWithPath: err))
        process.standardOutput = outHandle
        process.standardError = errHandle
        try process.run()
        process.waitUntilExit()
        try outHandle.close()
        try errHandle.close()
        return Result(status: process.terminationStatus,
                      stdout: try String(contentsOfFile: out, encoding: .utf8),
                      stderr: try String(contentsOfFile: err, encoding: .utf8))
    }

    /// The number in "→ Overall exposure level for NAME: 1.2 OK 🙂".
    static func exposure(in output: String) -> Double? {
        for line in output.split(separator: "\n") {
            guard let marker = line.range(of: "Overall exposure level for ") else { continue }
            let rest = line[marker.upperBound...]
            guard let colon = rest.range(of: ": ") else { continue }
            let number = rest[colon.upperBound...].prefix { $0.isNumber || $0 == "." }
            return Double(number)
        }
        return nil
    }
}
#endif
