import AgentConfigFile
import AgentFleet
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// Where the instances of `pushwoosh-agentctl fleet` are: a manifest's, a socket directory's,
// and the ones `--expect` names.

public enum FleetTargets {
    public static let socketDirectory = AgentPaths.socketDirectory

    /// The instances `source` names, in order, and the `expected` ones it does not (in a
    /// socket directory, at `DIR/NAME.sock`; else at their `--instance` path), by name.
    public static func resolve(_ source: FleetSource, expecting expected: [String] = []) throws(ClientError) -> [FleetTarget] {
        let found = try resolve(source)
        let absent = expected.filter { name in !found.contains { $0.name == name } }
        guard !absent.isEmpty else { return found }
        let added = absent.map { name in
            if case .socketDirectory(let dir) = source { return FleetTarget(name: name, socketPath: dir + "/" + name + ".sock") }
            return FleetTarget(name: name, socketPath: ControlArguments.instanceSocketPath(name))
        }
        return (found + added).sorted { $0.name < $1.name }
    }

    /// The instances `source` names, in order.
    public static func resolve(_ source: FleetSource) throws(ClientError) -> [FleetTarget] {
        switch source {
        case .socketDirectory(let dir):
            return try sockets(in: dir, skipping: [])
        case .manifest(let path):
            guard access(path, F_OK) == 0 else {
                guard path == FleetManifest.defaultPath else {
                    throw ClientError(exit: .usage, message: "\(path): cannot read the configuration file: no such file")
                }
                return try sockets(in: socketDirectory, skipping: ["agent"])
            }
            do {
                let manifest = try FleetManifest.load(path)
                return manifest.instances.map { FleetTarget(name: $0.name, socketPath: ControlArguments.instanceSocketPath($0.name)) }
            } catch {
                throw ClientError(exit: .usage, message: "\(error)")
            }
        }
    }

    static func sockets(in dir: String, skipping: Set<String>) throws(ClientError) -> [FleetTarget] {
        let entries: [String]
        do {
            entries = try FileManager.default.contentsOfDirectory(atPath: dir)
        } catch {
            throw ClientError(exit: .notRunning, message: "cannot list \(dir): no fleet running here")
        }
        return entries.filter { $0.hasSuffix(".sock") }.map { String($0.dropLast(5)) }
            .filter { !$0.isEmpty && !skipping.contains($0) }
            .sorted().map { FleetTarget(name: $0, socketPath: dir + "/" + $0 + ".sock") }
    }
}

