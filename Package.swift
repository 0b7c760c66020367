// swift-tools-version:6.0
// pushwoosh-agent: the Pushwoosh iOS SDK core as a headless Linux device agent.
//
// Dependencies point inward:
//   AgentJSON (leaf) <- AgentCore (pure SDK rules) <- AgentWire (wire formats), AgentPosix (the
//   syscall floor every executable stands on) <- AgentCurl (libcurl) <- AgentDaemon (composition
//   root) <- executables. The tools' blocking clients and spawner (ToolSupport) stand beside the
//   daemon's modules: the daemon does not link them.
// Tests use AgentTestSupport (deterministic doubles) instead of AgentPosix.
// Each target's dependencies are exactly the package modules its sources import
// (Tests/PackageTests checks it).
import PackageDescription

let strict: [SwiftSetting] = [.swiftLanguageMode(.v6)]
// The modules on the socket's hot path (docs/performance.md "Where the time went"): release
// builds leave out the run-time exclusivity checks (debug builds and tests keep them; the
// compile-time checks stay). Measured with callgrind at 128 clients, one request each in
// flight: swift_beginAccess and its access set were 22 % of the agent's instructions.
let hot: [SwiftSetting] = strict + [.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release))]

let package = Package(
    name: "pushwoosh-agent",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "pushwoosh-agentd", targets: ["pushwoosh-agentd"]),
        .executable(name: "pushwoosh-agentctl", targets: ["pushwoosh-agentctl"]),
        .executable(name: "pushwoosh-agent-fleet-generator", targets: ["pushwoosh-agent-fleet-generator"]),
        .executable(name: "pushwoosh-emulator", targets: ["pushwoosh-emulator"]),
        .executable(name: "pushwoosh-soak", targets: ["pushwoosh-soak"]),
    ],
    targets: [
        // MARK: C libraries from Debian (pkg-config)
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd",
                       providers: [.apt(["libsystemd-dev"])]),
        .systemLibrary(name: "CInih", pkgConfig: "inih",
                       providers: [.apt(["libinih-dev"])]),
        // libmicrohttpd's headers only, as for libcurl below: MicroHTTPD loads libmicrohttpd.so.12
        // with dlopen when an HTTP server starts (for the agent, after READY=1).
        .systemLibrary(name: "CMicroHTTPD", providers: [.apt(["libmicrohttpd-dev"])]),
        // libcurl's headers only (no pkg-config, whose `--libs` would link it): AgentCurl loads
        // libcurl.so.4 with dlopen when the agent first needs it, after READY=1 (docs/performance.md
        // "Where the time went": it and the libraries it brings were most of the dynamic loader's work).
        .systemLibrary(name: "CCurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        // epoll, eventfd, signalfd: in glibc, but not imported by the toolchain's Glibc module.
        .systemLibrary(name: "CLinux"),

        // MARK: The agent
        // Strict JSON values, reader and writer: a leaf.
        .target(name: "AgentJSON", swiftSettings: hot),
        .target(name: "AgentCore", dependencies: ["AgentJSON"], swiftSettings: hot),
        .target(name: "AgentWire", dependencies: ["AgentCore"], swiftSettings: hot),
        // The syscall floor (sockets, descriptors, the event loop, the monotonic clock, files):
        // no libcurl, so every executable can stand on it.
        .target(name: "AgentPosix", dependencies: ["AgentCore", "CLinux"], swiftSettings: hot),
        // The real network: libcurl on the event loop (the agent's transport, the doctor's probe).
        .target(name: "AgentCurl", dependencies: ["AgentCore", "AgentPosix", "CCurl"], swiftSettings: strict),
        .target(name: "AgentSystemd", dependencies: ["AgentPosix", "CSystemd"], swiftSettings: strict),
        // systemd-style INI files (libinih; read through AgentPosix's TrustedFile), time spans, instance names: agent.conf and fleet.conf.
        .target(name: "AgentConfigFile", dependencies: ["AgentCore", "AgentPosix", "CInih"], swiftSettings: strict),
        .target(name: "AgentDaemon",
                dependencies: ["AgentConfigFile", "AgentCore", "AgentCurl", "AgentWire", "AgentPosix", "AgentSystemd", "MicroHTTPD"],
                swiftSettings: hot),
        .executableTarget(name: "pushwoosh-agentd", dependencies: ["AgentDaemon"], swiftSettings: strict),
        // docs/fleet.md E.1: fleet.conf and the systemd generator that realises it (pure logic, then the executable).
        .target(name: "AgentFleet", dependencies: ["AgentConfigFile", "AgentCore"], swiftSettings: strict),
        .executableTarget(name: "pushwoosh-agent-fleet-generator", dependencies: ["AgentConfigFile", "AgentCore", "AgentFleet", "AgentPosix"],
                          swiftSettings: strict),
        .target(name: "AgentControl", dependencies: ["AgentConfigFile", "AgentCore", "AgentFleet", "AgentPosix", "AgentWire", "ToolSupport"], swiftSettings: strict),
        .executableTarget(name: "pushwoosh-agentctl", dependencies: ["AgentControl"], swiftSettings: strict),

        // MARK: The Pushwoosh emulator
        .target(name: "EmulatorCore", dependencies: ["AgentCore", "AgentWire"], swiftSettings: strict),
        .target(name: "Emulator", dependencies: ["AgentCore", "AgentCurl", "AgentPosix", "EmulatorCore", "Lab", "MicroHTTPD"], swiftSettings: strict),
        // The lab as a service (docs/emulator.md M): devices started, attached, called and moved together.
        .target(name: "Lab", dependencies: ["AgentCore", "AgentPosix", "AgentWire", "EmulatorCore", "LabClock", "Launcher", "ToolSupport"], swiftSettings: strict),
        // What the agent's HTTP interface and the emulator share of libmicrohttpd.
        .target(name: "MicroHTTPD", dependencies: ["AgentPosix", "CMicroHTTPD"], swiftSettings: strict),
        .executableTarget(name: "pushwoosh-emulator", dependencies: ["Emulator"], swiftSettings: strict),

        // MARK: The soak runner
        .target(name: "Soak", dependencies: ["AgentWire", "AgentCore", "AgentPosix", "HarnessSupport", "LabClock", "ToolSupport"], swiftSettings: strict),
        .executableTarget(name: "pushwoosh-soak", dependencies: ["AgentCore", "Soak"], swiftSettings: strict),
        .executableTarget(name: "pushwoosh-bench", dependencies: ["AgentPosix", "AgentWire", "AgentCore", "HarnessSupport", "Launcher", "ToolSupport"],
                          path: "Benchmarks/pushwoosh-bench", swiftSettings: strict),

        // MARK: The blocking tools' floor, which the daemon does not link: the line client of a
        // Unix socket, the loopback HTTP client of the emulator's admin API, the HTTP/1.1 response
        // framing, the spawner (agentctl, the lab, the soak runner, the fault tool, the benchmarks, tests)
        .target(name: "ToolSupport", dependencies: ["AgentCore", "AgentPosix", "AgentWire"], swiftSettings: strict),
        // MARK: What tests, benchmarks, the soak runner and the fault tools share beyond AgentPosix
        // (echo server, NOTIFY_SOCKET receiver, state file reader; the tests' process fixtures:
        // the built binaries, temporary directories, a real emulator)
        .target(name: "HarnessSupport", dependencies: ["AgentCore", "AgentPosix", "ToolSupport"], swiftSettings: strict),
        // The one launcher of long-running `pushwoosh-agentd` processes (a NOTIFY_SOCKET receiver,
        // a parent-death signal, a log) and the notify receiver: the lab's, and the soak's, the
        // bench's and the fault tool's, without the tests' harness.
        .target(name: "Launcher", dependencies: ["AgentPosix", "ToolSupport"], swiftSettings: strict),
        // The lab clock (the emulator's and every device's moved together, timer to timer): the
        // lab's and the soak runner's, without the daemon's modules.
        .target(name: "LabClock", dependencies: ["AgentCore", "AgentWire", "ToolSupport"], swiftSettings: strict),

        // The fault suite's helper (scripts/fault-kill9, scripts/fault-disk).
        .executableTarget(name: "pushwoosh-fault", dependencies: ["AgentCore", "AgentPosix", "AgentWire", "HarnessSupport", "Launcher", "ToolSupport"], swiftSettings: strict),

        // MARK: Deterministic doubles for tests
        .target(name: "AgentTestSupport", dependencies: ["AgentCore"], swiftSettings: strict),

        // MARK: Tests, one target per module (a module's line is enabled when its tests land)
        .testTarget(name: "AgentJSONTests", dependencies: ["AgentJSON"], swiftSettings: strict),
        .testTarget(name: "AgentCoreTests", dependencies: ["AgentCore", "AgentTestSupport"], swiftSettings: strict),
        .testTarget(name: "AgentWireTests", dependencies: ["AgentWire", "AgentCore"], swiftSettings: strict),
        .testTarget(name: "AgentPosixTests", dependencies: ["AgentCurl", "AgentPosix", "AgentCore", "HarnessSupport", "Launcher", "ToolSupport"], swiftSettings: strict),
        .testTarget(name: "AgentFleetTests", dependencies: ["AgentFleet", "AgentConfigFile", "AgentCore"], swiftSettings: strict),
        .testTarget(name: "AgentSystemdTests", dependencies: ["AgentSystemd"], swiftSettings: strict),
        .testTarget(name: "AgentControlTests", dependencies: ["AgentControl", "AgentWire", "AgentCore", "AgentPosix", "HarnessSupport", "Launcher"], swiftSettings: strict),
        .testTarget(name: "AgentDaemonTests", dependencies: ["AgentCurl", "AgentDaemon", "AgentConfigFile", "AgentPosix", "AgentCore", "AgentTestSupport", "AgentWire", "HarnessSupport", "Launcher", "ToolSupport"], swiftSettings: strict),
        .testTarget(name: "EmulatorCoreTests", dependencies: ["EmulatorCore", "AgentCore", "AgentWire"], swiftSettings: strict),
        .testTarget(name: "EmulatorTests", dependencies: ["Emulator", "EmulatorCore", "AgentCore", "AgentPosix", "HarnessSupport", "ToolSupport"], swiftSettings: strict),
        .testTarget(name: "SoakTests", dependencies: ["Soak", "AgentCore", "AgentPosix", "AgentWire", "HarnessSupport"], swiftSettings: strict),
        .testTarget(name: "ToolSupportTests", dependencies: ["ToolSupport", "AgentCore", "AgentPosix", "AgentWire"], swiftSettings: strict),
        .testTarget(name: "LabClockTests", dependencies: ["LabClock", "AgentWire"], swiftSettings: strict),
        .testTarget(name: "SystemdUnitTests", swiftSettings: strict),
        // Package.swift against the imports of each target's sources.
        .testTarget(name: "PackageTests", swiftSettings: strict),
    ]
)
