import Foundation
import Glibc
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// Fixtures of the tests that run the built executables: where they are, a temporary
// directory, and a real emulator on a free loopback port (AgentDaemonTests, and the
// libcurl transport's tests in AgentPosixTests).

/// The built executables, next to the test bundle.
public enum Binaries {
    public static let directory: String = {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var dir = URL(fileURLWithPath: exe).deletingLastPathComponent()
        // The test binary lives in `<bin>/<package>PackageTests.xctest` on Linux.
        if dir.lastPathComponent.hasSuffix(".xctest") { dir = dir.deletingLastPathComponent() }
        return dir.path
    }()
    public static var agentd: String { directory + "/pushwoosh-agentd" }
    public static var agentctl: String { directory + "/pushwoosh-agentctl" }
    public static var emulator: String { directory + "/pushwoosh-emulator" }
    public static var repositoryRoot: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    }
}

/// A temporary directory removed on deinit.
public final class TempDir {
    public let path: String
    public init() {
        var template = Array("/tmp/pwagent-test-XXXXXX".utf8CString)
        path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)) }
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A real `pushwoosh-emulator` process on a free loopback port.
public final class EmulatorProcess {
    public let process = Process()
    public let port: Int
    public var baseURL: String { "http://127.0.0.1:\(port)" }
    public var serverURL: String { baseURL + "/json/1.3/" }

    /// `arguments`: more of the emulator's options (`--require-token T`).
    public init(apps: String = Binaries.repositoryRoot + "/config/flags.example.json", arguments: [String] = []) throws {
        process.executableURL = URL(fileURLWithPath: Binaries.emulator)
        process.arguments = ["--listen", "127.0.0.1:0", "--apps", apps] + arguments
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        let line = String(decoding: out.fileHandleForReading.availableDataLine(), as: UTF8.self)
        guard let port = Int(line.split(separator: ":").last?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "") else {
            process.terminate()
            throw FixtureError("emulator did not say where it listens: \(line)")
        }
        self.port = port
    }

    public func stop() {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
    }

    deinit { stop() }

    /// An admin call; returns status and body.
    @discardableResult
    public func admin(_ method: String, _ path: String, _ body: String? = nil) -> (Int, String) {
        http(method, baseURL + path, body)
    }
}

public func http(_ method: String, _ url: String, _ body: String?) -> (Int, String) {
    var request = URLRequest(url: URL(string: url)!, timeoutInterval: 10)
    request.httpMethod = method
    request.httpBody = body.map { Data($0.utf8) }
    let box = ResultBox()
    URLSession.shared.dataTask(with: request) { data, response, _ in
        box.set(((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data ?? Data(), as: UTF8.self)))
    }.resume()
    return box.wait()
}

final class ResultBox: @unchecked Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    private var value: (Int, String) = (0, "")
    func set(_ v: (Int, String)) { value = v; semaphore.signal() }
    func wait() -> (Int, String) { semaphore.wait(); return value }
}

public struct FixtureError: Error, CustomStringConvertible {
    public let description: String
    public init(_ d: String) { description = d }
}

extension FileHandle {
    /// Reads up to the first newline (blocking).
    public func availableDataLine() -> Data {
        var data = Data()
        while true {
            let chunk = readData(ofLength: 1)
            if chunk.isEmpty || chunk == Data("\n".utf8) { return data }
            data.append(chunk)
        }
    }
}

