import Foundation
import HarnessSupport
import Testing

/// The daemon links no Foundation and no FoundationNetworking (FoundationEssentials
/// is all it needs), so it starts small and no libdispatch thread comes with URLSession.
@Suite struct LinkageTests {
    /// The shared libraries `pushwoosh-agentd` asks for (its ELF `DT_NEEDED` entries).
    func neededLibraries(_ path: String) throws -> [String] {
        let readelf = try runCapturing("/usr/bin/readelf", ["--dynamic", "--wide", path])
        #expect(readelf.status == 0, "\(readelf.err)")
        let text = readelf.out
        return text.split(separator: "\n").filter { $0.contains("(NEEDED)") }.compactMap { line in
            guard let open = line.firstIndex(of: "["), let close = line.lastIndex(of: "]") else { return nil }
            return String(line[line.index(after: open)..<close])
        }
    }

    @Test func daemonLinksNoFoundation() throws {
        let needed = try neededLibraries(Binaries.agentd)
        // libcurl is loaded with dlopen when first used, after READY=1 (AgentCurl's CurlLibrary.swift):
        // the dynamic loader does not load it, and the ~20 libraries only it brings, at exec.
        #expect(!needed.contains("libcurl.so.4"), "pushwoosh-agentd links libcurl: \(needed)")
        #expect(needed.contains("libsystemd.so.0"))
        for library in ["libFoundation.so", "libFoundationNetworking.so", "libFoundationInternationalization.so"] {
            #expect(!needed.contains(library), "pushwoosh-agentd links \(library): \(needed)")
        }
    }

    /// The tools' code stays out of the daemon: no symbol of ToolSupport (the blocking clients,
    /// the spawner), HarnessSupport, LabClock or Lab is in `pushwoosh-agentd` (its modules do not
    /// link them, and SwiftPM links every object of a linked module).
    @Test func daemonCarriesNoToolCode() throws {
        let nm = try runCapturing("/usr/bin/nm", [Binaries.agentd])
        #expect(nm.status == 0, "\(nm.err)")
        // Swift mangles a module's name with its length in front: 11ToolSupport.
        let modules = ["ToolSupport", "HarnessSupport", "LabClock", "Lab"].map { "\($0.utf8.count)\($0)" }
        // And the types themselves, wherever they would live.
        let types = ["LoopbackHTTP", "ChildProcess", "LineClient", "BlockingSocket", "HTTPResponseReader"].map { "\($0.utf8.count)\($0)" }
        let found = nm.out.split(separator: "\n").filter { line in
            modules.contains { line.contains("$s\($0)") } || types.contains { line.contains($0) }
        }
        #expect(found.isEmpty, "pushwoosh-agentd carries tool code: \(found.prefix(5))")
    }
}
