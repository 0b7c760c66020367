import Foundation
import Glibc
import Testing

/// The built `pushwoosh-agent-fleet-generator` as systemd runs it (systemd.generator(7)):
/// three output directories, nothing on standard output, errors on standard error.
@Suite struct GeneratorProcessTests {
    static var binary: String {
        var dir = URL(fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? "")
            .deletingLastPathComponent()
        if dir.lastPathComponent.hasSuffix(".xctest") { dir = dir.deletingLastPathComponent() }
        return dir.path + "/pushwoosh-agent-fleet-generator"
    }

    struct Run {
        var status: Int32
        var stdout: String
        var stderr: String
        var out: String
    }

    func run(manifest: String?) throws -> Run {
        // On tmpfs where there is one, as /run/systemd/generator is.
        let base = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : FileManager.default.temporaryDirectory.path
        let dir = base + "/fleetgen-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir + "/normal", withIntermediateDirectories: true)
        if let manifest { try manifest.write(toFile: dir + "/fleet.conf", atomically: true, encoding: .utf8) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.binary)
        process.arguments = ["--manifest", dir + "/fleet.conf", "--unit-dir", "/lib/systemd/system",
                             dir + "/normal", dir + "/early", dir + "/late"]
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        process.waitUntilExit()
        return Run(status: process.terminationStatus,
                   stdout: String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self),
                   stderr: String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self),
                   out: dir + "/normal")
    }

    func listing(_ dir: String) -> [String] {
        (FileManager.default.enumerator(atPath: dir)?.allObjects as? [String] ?? []).sorted()
    }

    @Test func writesTheFleetQuietly() throws {
        let r = try run(manifest: "[Fleet]\nDevices=12\nUserIds=u{n}\nStartSpread=12s\n")
        defer { try? FileManager.default.removeItem(atPath: URL(fileURLWithPath: r.out).deletingLastPathComponent().path) }
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        #expect(r.stderr.isEmpty)
        let wants = r.out + "/pushwoosh-agent-fleet.target.wants"
        #expect(try FileManager.default.contentsOfDirectory(atPath: wants).sorted().first == "pushwoosh-agent-fleet@device-01.timer")
        #expect(try FileManager.default.contentsOfDirectory(atPath: wants).count == 12)
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: wants + "/pushwoosh-agent-fleet@device-12.timer")
            == "/lib/systemd/system/pushwoosh-agent-fleet@.timer")
        let dropIn = try String(contentsOfFile: r.out + "/pushwoosh-agent@device-12.service.d/50-fleet.conf", encoding: .utf8)
        #expect(dropIn.contains("Environment=\"PUSHWOOSH_AGENT_USER_ID=u12\"\n"))
        let timer = try String(contentsOfFile: r.out + "/pushwoosh-agent-fleet@device-12.timer.d/50-fleet.conf", encoding: .utf8)
        #expect(timer.hasSuffix("OnActiveSec=11000000us\n"))
        #expect(FileManager.default.fileExists(atPath: r.out + "/multi-user.target.wants/pushwoosh-agent-fleet.target") == false
                || (try? FileManager.default.destinationOfSymbolicLink(atPath: r.out + "/multi-user.target.wants/pushwoosh-agent-fleet.target"))
                   == "/lib/systemd/system/pushwoosh-agent-fleet.target")
        #expect(listing(r.out).contains("multi-user.target.wants/pushwoosh-agent-fleet.target"))
        #expect(!FileManager.default.fileExists(atPath: URL(fileURLWithPath: r.out).deletingLastPathComponent().path + "/early"))
    }

    @Test func aBadManifestWritesNothingAndSaysWhere() throws {
        let r = try run(manifest: "[Fleet]\nDevices=5\nStartSpread=soon\n")
        defer { try? FileManager.default.removeItem(atPath: URL(fileURLWithPath: r.out).deletingLastPathComponent().path) }
        #expect(r.status == 1)
        #expect(r.stdout.isEmpty)
        let lines = r.stderr.split(separator: "\n")
        #expect(lines.count == 1, "\(r.stderr)")
        #expect(r.stderr.contains("fleet.conf:3: StartSpread: invalid time span \"soon\""), "\(r.stderr)")
        #expect(listing(r.out).isEmpty)
    }

    @Test func noManifestNoFleet() throws {
        let r = try run(manifest: nil)
        defer { try? FileManager.default.removeItem(atPath: URL(fileURLWithPath: r.out).deletingLastPathComponent().path) }
        #expect(r.status == 0)
        #expect(r.stdout.isEmpty && r.stderr.isEmpty)
        #expect(listing(r.out).isEmpty)
    }

    /// What the generator writes is what systemd reads: `systemd-analyze verify` takes the
    /// shipped templates as device 2's units with the generated drop-ins beside them, without
    /// a word; the same check reports a corrupted drop-in (so silence counts).
    @Test func generatedDropInsVerify() throws {
        let r = try run(manifest: "[Fleet]\nDevices=3\nUserIds=100% u-{n}\nAppStates=active:1 background:1\nStartSpread=3s\n")
        let dir = URL(fileURLWithPath: r.out).deletingLastPathComponent().path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(r.status == 0, "\(r.stderr)")
        let units = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().path + "/systemd/"
        let fm = FileManager.default
        let verifyDir = dir + "/verify"
        try fm.createDirectory(atPath: verifyDir, withIntermediateDirectories: true)
        for (source, target) in [("pushwoosh-agent@.service", "pushwoosh-agent@device-2.service"),
                                 ("pushwoosh-agent@.socket", "pushwoosh-agent@device-2.socket"),
                                 ("pushwoosh-agent-fleet@.timer", "pushwoosh-agent-fleet@device-2.timer"),
                                 ("pushwoosh-agent-fleet.target", "pushwoosh-agent-fleet.target"),
                                 ("pushwoosh-agent.slice", "pushwoosh-agent.slice")] {
            let text = try String(contentsOfFile: units + source, encoding: .utf8)
                .replacingOccurrences(of: "ExecStart=/usr/local/bin/pushwoosh-agentd ", with: "ExecStart=/bin/true ")
            try text.write(toFile: verifyDir + "/" + target, atomically: true, encoding: .utf8)
        }
        for dropIn in ["pushwoosh-agent@device-2.service.d", "pushwoosh-agent-fleet@device-2.timer.d"] {
            try fm.copyItem(atPath: r.out + "/" + dropIn, toPath: verifyDir + "/" + dropIn)
        }
        func verify() throws -> String {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/systemd-analyze")
            process.arguments = ["verify", verifyDir + "/pushwoosh-agent@device-2.service",
                                 verifyDir + "/pushwoosh-agent-fleet@device-2.timer", verifyDir + "/pushwoosh-agent-fleet.target"]
            process.environment = ["SYSTEMD_LOG_LEVEL": "notice", "SYSTEMD_COLORS": "0", "PATH": "/usr/bin:/bin"]
            let out = Pipe()
            process.standardOutput = out
            process.standardError = out
            try process.run()
            let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return text
        }
        #expect(try verify() == "")
        let timerDropIn = verifyDir + "/pushwoosh-agent-fleet@device-2.timer.d/50-fleet.conf"
        let good = try String(contentsOfFile: timerDropIn, encoding: .utf8)
        #expect(good.contains("OnActiveSec=1000000us"))
        try good.replacingOccurrences(of: "OnActiveSec=1000000us", with: "OnActiveSec=1000000xs")
            .write(toFile: timerDropIn, atomically: true, encoding: .utf8)
        let serviceDropIn = verifyDir + "/pushwoosh-agent@device-2.service.d/50-fleet.conf"
        try (try String(contentsOfFile: serviceDropIn, encoding: .utf8)).replacingOccurrences(of: "%%", with: "%")
            .write(toFile: serviceDropIn, atomically: true, encoding: .utf8)
        let complaint = try verify()
        #expect(complaint.contains("1000000xs"), "\(complaint)")
        #expect(complaint.contains("50-fleet.conf"), "\(complaint)")
    }

    /// Fast, as generators must be: 1,000 instances (3,001 entries) well under a second
    /// (76 ms measured on tmpfs with the debug build).
    @Test func aThousandInstancesQuickly() throws {
        let start = Date()
        let r = try run(manifest: "[Fleet]\nDevices=1000\nUserIds=user-{n}\nAppStates=active:80 background:20\nStartSpread=60s\n")
        let elapsed = Date().timeIntervalSince(start)
        defer { try? FileManager.default.removeItem(atPath: URL(fileURLWithPath: r.out).deletingLastPathComponent().path) }
        #expect(r.status == 0, "\(r.stderr)")
        #expect(listing(r.out).filter { $0.hasSuffix("50-fleet.conf") }.count == 2000)
        #expect(elapsed < 1, "took \(elapsed) s")
    }
}
