import Foundation
import Testing

/// Package.swift says exactly what each module imports: for every target, the package's
/// modules its sources import are the dependencies it declares, no more and no fewer.
/// (Modules from outside the package — Foundation, Glibc, Testing… — are not declared.)
@Suite struct DependencyTests {
    struct Target {
        var name: String
        var kind: String
        var dependencies: Set<String>
        var path: String
    }

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// The targets of Package.swift: each `.target`, `.executableTarget`, `.testTarget` and
    /// `.systemLibrary` call, its name, its `dependencies: [...]` and its `path:`.
    static func targets() throws -> [Target] {
        let manifest = try String(contentsOf: root.appendingPathComponent("Package.swift"), encoding: .utf8)
        let call = try Regex(#"\.(target|executableTarget|testTarget|systemLibrary)\(\s*name:\s*"([^"]+)""#)
        let matches = manifest.matches(of: call)
        var result: [Target] = []
        for (i, m) in matches.enumerated() {
            let end = i + 1 < matches.count ? matches[i + 1].range.lowerBound : manifest.endIndex
            let body = String(manifest[m.range.upperBound..<end])
            let kind = String(m.output[1].substring!)
            let name = String(m.output[2].substring!)
            var dependencies: Set<String> = []
            if let list = body.firstMatch(of: try Regex(#"dependencies:\s*\[([^\]]*)\]"#)) {
                let quoted = try Regex(#""([^"]+)""#)
                for d in String(list.output[1].substring!).matches(of: quoted) {
                    dependencies.insert(String(d.output[1].substring!))
                }
            }
            let explicitPath = body.firstMatch(of: try Regex(#"path:\s*"([^"]+)""#)).map { String($0.output[1].substring!) }
            let path = explicitPath ?? (kind == "testTarget" ? "Tests/\(name)" : "Sources/\(name)")
            result.append(Target(name: name, kind: kind, dependencies: dependencies, path: path))
        }
        return result
    }

    /// The modules the Swift files under `path` import (`import X`, `@testable import X`,
    /// `@_exported import X`, also inside `#if`).
    static func imports(under path: String) throws -> Set<String> {
        let directory = root.appendingPathComponent(path)
        let line = try Regex(#"^\s*(?:@[A-Za-z_]+\s+)*(?:public\s+|package\s+|internal\s+)?import\s+(?:struct\s+|enum\s+|class\s+|func\s+)?([A-Za-z_][A-Za-z0-9_]*)"#)
            .anchorsMatchLineEndings()
        var modules: Set<String> = []
        let files = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil)
        while let file = files?.nextObject() as? URL {
            guard file.pathExtension == "swift" else { continue }
            let text = try String(contentsOf: file, encoding: .utf8)
            for m in text.matches(of: line) { modules.insert(String(m.output[1].substring!)) }
        }
        return modules
    }

    @Test func theManifestIsRead() throws {
        let targets = try Self.targets()
        #expect(targets.count > 20)
        #expect(targets.contains { $0.name == "AgentDaemon" && $0.dependencies.contains("AgentCore") })
        #expect(targets.contains { $0.name == "pushwoosh-bench" && $0.path == "Benchmarks/pushwoosh-bench" })
    }

    @Test func dependenciesAreTheImports() throws {
        let targets = try Self.targets()
        let names = Set(targets.map(\.name))
        for target in targets where target.kind != "systemLibrary" {
            let imported = try Self.imports(under: target.path).intersection(names)
            let unused = target.dependencies.subtracting(imported).sorted()
            let undeclared = imported.subtracting(target.dependencies).sorted()
            #expect(unused == [], "\(target.name) declares dependencies it does not import")
            #expect(undeclared == [], "\(target.name) imports modules it does not declare")
        }
    }

    /// The modules `target` links, itself included: its dependencies, theirs, and so on.
    static func closure(of target: String, in targets: [Target]) -> Set<String> {
        var seen: Set<String> = []
        var next = [target]
        while let name = next.popLast() {
            guard seen.insert(name).inserted else { continue }
            next += targets.first { $0.name == name }?.dependencies ?? []
        }
        return seen
    }

    /// The shipped emulator and agentctl carry no test harness: the lab's launcher and clock are
    /// the lab's own modules (Launcher, LabClock), and agentctl moves a fleet through the lab
    /// rather than with a clock driver of its own.
    @Test func theShippedToolsLinkNoHarness() throws {
        let targets = try Self.targets()
        let harness: Set<String> = ["HarnessSupport", "AgentTestSupport"]
        for tool in ["pushwoosh-emulator", "pushwoosh-agentctl", "pushwoosh-agentd", "pushwoosh-agent-fleet-generator"] {
            let linked = Self.closure(of: tool, in: targets)
            #expect(linked.count > 1, "\(tool) is in Package.swift")
            #expect(linked.intersection(harness).sorted() == [], "\(tool)")
        }
        #expect(!Self.closure(of: "pushwoosh-agentctl", in: targets).contains("LabClock"), "agentctl drives no lab clock of its own")
        #expect(Self.closure(of: "pushwoosh-emulator", in: targets).isSuperset(of: ["Lab", "Launcher", "LabClock"]))
    }

    /// The daemon's modules use FoundationEssentials at most, never Foundation (LinkageTests
    /// checks the binary; this names the file's module at once).
    @Test func theDaemonsModulesDoNotImportFoundation() throws {
        let daemon = ["AgentJSON", "AgentCore", "AgentWire", "AgentPosix", "AgentCurl", "AgentSystemd", "AgentDaemon", "MicroHTTPD",
                      "pushwoosh-agentd"]
        let targets = try Self.targets()
        for name in daemon {
            let target = try #require(targets.first { $0.name == name }, "\(name) is not in Package.swift")
            let heavy = try Self.imports(under: target.path).intersection(["Foundation", "FoundationNetworking", "FoundationXML"])
            #expect(heavy.sorted() == [], "\(name)")
        }
    }

    /// Every module the package's sources import is a target, or comes with the toolchain
    /// or the system (a misspelt or forgotten target fails here, not only at link time).
    @Test func everyImportIsKnown() throws {
        let targets = try Self.targets()
        let names = Set(targets.map(\.name))
        let toolchain: Set<String> = [
            "Foundation", "FoundationEssentials", "FoundationNetworking", "FoundationXML", "Glibc", "Darwin",
            "Dispatch", "Synchronization", "Testing", "XCTest",
        ]
        for target in targets where target.kind != "systemLibrary" {
            let unknown = try Self.imports(under: target.path).subtracting(names).subtracting(toolchain).sorted()
            #expect(unknown == [], "\(target.name)")
        }
    }
}
