import Foundation
import HarnessSupport
import ToolSupport
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
        // libmicrohttpd likewise, when the HTTP interface starts (MicroHTTPD.swift): GnuTLS and the
        // other libraries it brings are not loaded by an agent without one, nor before READY=1.
        #expect(!needed.contains("libmicrohttpd.so.12"), "pushwoosh-agentd links libmicrohttpd: \(needed)")
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

    /// The libraries an agent has mapped, by file name (its /proc/PID/maps).
    func mappedLibraries(_ pid: Int32) -> Set<String> {
        let file = FileHandle(forReadingAtPath: "/proc/\(pid)/maps")  // a /proc file's size reads as 0: read to its end
        let maps = String(decoding: (try? file?.readToEnd()) ?? Data(), as: UTF8.self)
        return Set(maps.split(separator: "\n").compactMap { line in
            line.split(separator: " ", omittingEmptySubsequences: true).last.flatMap { $0.hasPrefix("/") ? String($0.split(separator: "/").last!) : nil }
        })
    }

    /// An agent without an HTTP interface never maps libmicrohttpd (GnuTLS still comes, with
    /// libcurl's own libraries, at its first request); one with it maps libmicrohttpd after READY=1 and answers a connection made at READY=1 (it waits in the backlog).
    @Test func libmicrohttpdOnlyWithTheHTTPInterfaceAndAfterReady() throws {
        let plain = try AgentProcess(server: "http://127.0.0.1:9/json/1.3/")
        defer { _ = plain.stop() }
        #expect(plain.waitForNotify("READY=1") != nil, "\(plain.stderrText)")
        let client = try LineClient(path: plain.socketPath)
        #expect(client.call("status")["result"]?["hwid"]?.stringValue != nil)
        let mapped = mappedLibraries(plain.process.processIdentifier)
        #expect(mapped.contains { $0.hasPrefix("libsystemd.so") }, "maps read: \(mapped)")
        #expect(!mapped.contains { $0.hasPrefix("libmicrohttpd.so") }, "\(mapped)")

        let dir = TempDir()
        let config = AgentProcess.config(server: "http://127.0.0.1:9/json/1.3/", dir: dir.path) + "\n[HTTP]\nListen=\(dir.path)/http.sock\n"
        let served = try AgentProcess(dir: dir, config: config, server: "")
        defer { _ = served.stop() }
        #expect(served.waitForNotify("READY=1") != nil, "\(served.stderrText)")
        let http = try HTTPClient(.unix(dir.path + "/http.sock"))
        #expect(http.request("GET", "/healthz").status == 200)
        #expect(mappedLibraries(served.process.processIdentifier).contains { $0.hasPrefix("libmicrohttpd.so") })
    }
}
