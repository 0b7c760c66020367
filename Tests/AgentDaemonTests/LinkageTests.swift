import Foundation
import HarnessSupport
import Testing

/// The daemon links no Foundation and no FoundationNetworking (FoundationEssentials
/// is all it needs), so it starts small and no libdispatch thread comes with URLSession.
@Suite struct LinkageTests {
    /// The shared libraries `pushwoosh-agentd` asks for (its ELF `DT_NEEDED` entries).
    func neededLibraries(_ path: String) throws -> [String] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/readelf")
        process.arguments = ["--dynamic", "--wide", path]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        return text.split(separator: "\n").filter { $0.contains("(NEEDED)") }.compactMap { line in
            guard let open = line.firstIndex(of: "["), let close = line.lastIndex(of: "]") else { return nil }
            return String(line[line.index(after: open)..<close])
        }
    }

    @Test func daemonLinksNoFoundation() throws {
        let needed = try neededLibraries(Binaries.agentd)
        #expect(needed.contains("libcurl.so.4"))
        #expect(needed.contains("libsystemd.so.0"))
        for library in ["libFoundation.so", "libFoundationNetworking.so", "libFoundationInternationalization.so"] {
            #expect(!needed.contains(library), "pushwoosh-agentd links \(library): \(needed)")
        }
    }
}
