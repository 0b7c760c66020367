import AgentCore
import Foundation
import HarnessSupport
import Testing

/// Every executable the package builds answers `--version` and `--help` with exit 0, on
/// standard output, as the built binaries do.
@Suite struct ExecutableBasicsTests {
    static let executables = ["pushwoosh-agentd", "pushwoosh-agentctl", "pushwoosh-emulator", "pushwoosh-soak", "pushwoosh-fault",
                              "pushwoosh-agent-fleet-generator"]

    static func run(_ name: String, _ argument: String) throws -> CapturedRun {
        try runCapturing(Binaries.directory + "/" + name, [argument])
    }

    @Test(arguments: executables)
    func versionAndHelp(_ name: String) throws {
        let version = try Self.run(name, "--version")
        #expect(version.status == 0, "\(name) --version: \(version.err)")
        #expect(version.out == "\(name) \(PackageVersion.current)\n", "\(name) --version printed \(version.out)")
        #expect(version.err.isEmpty, "\(name) --version: \(version.err)")
        let help = try Self.run(name, "--help")
        #expect(help.status == 0, "\(name) --help: \(help.err)")
        #expect(help.out.lowercased().hasPrefix("usage: \(name)"), "\(name) --help printed \(help.out.prefix(200))")
        #expect(help.out.contains("--version"), "\(name) --help does not mention --version")
        #expect(help.err.isEmpty, "\(name) --help: \(help.err)")
    }
}
