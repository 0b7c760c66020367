import AgentCore
import AgentPosix
import Foundation
import Glibc
#if canImport(FoundationNetworking)
import FoundationNetworking
import HarnessSupport
#endif

/// The built executables, next to the test bundle.
enum Binaries {
    static let directory: String = {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var dir = URL(fileURLWithPath: exe).deletingLastPathComponent()
        // The test binary lives in `<bin>/<package>PackageTests.xctest` on Linux.
        if dir.lastPathComponent.hasSuffix(".xctest") { dir = dir.deletingLastPathComponent() }
        return dir.path
    }()
    static var agentd: String { directory + "/pushwoosh-agentd" }
    static var agentctl: String { directory + "/pushwoosh-agentctl" }
    static var emulator: String { directory + "/pushwoosh-emulator" }
    static var repositoryRoot: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    }
}

/// A temporary directory removed on deinit.
final class TempDir {
    let path: String
    init() {
        var template = Array("/tmp/pwagent-test-XXXXXX".utf8CString)
        path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)) }
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A real `pushwoosh-emulator` process on a free loopback port.
final class EmulatorProcess {
    let process = Process()
    let port: Int
    var baseURL: String { "http://127.0.0.1:\(port)" }
    var serverURL: String { baseURL + "/json/1.3/" }

    init(apps: String = Binaries.repositoryRoot + "/config/flags.example.json") throws {
        process.executableURL = URL(fileURLWithPath: Binaries.emulator)
        process.arguments = ["--listen", "127.0.0.1:0", "--apps", apps]
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

    func stop() {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
    }

    deinit { stop() }

    /// An admin call; returns status and body.
    @discardableResult
    func admin(_ method: String, _ path: String, _ body: String? = nil) -> (Int, String) {
        http(method, baseURL + path, body)
    }
}

func http(_ method: String, _ url: String, _ body: String?) -> (Int, String) {
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

struct FixtureError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

extension FileHandle {
    /// Reads up to the first newline (blocking).
    func availableDataLine() -> Data {
        var data = Data()
        while true {
            let chunk = readData(ofLength: 1)
            if chunk.isEmpty || chunk == Data("\n".utf8) { return data }
            data.append(chunk)
        }
    }
}

/// A real `pushwoosh-agentd` process with its own state directory, socket and
/// `NOTIFY_SOCKET` datagram receiver.
final class AgentProcess {
    let dir: TempDir
    let process = Process()
    let notify: NotifyReceiver
    let stderrPipe = Pipe()
    var socketPath: String { dir.path + "/agent.sock" }
    var configPath: String { dir.path + "/agent.conf" }
    var stateDirectory: String { dir.path + "/state" }

    static func config(server: String, extra: String = "", socketMode: String = "0660", dir: String) -> String {
        """
        [Agent]
        ApplicationCode=ABCDE-12345
        ServerURL=\(server)
        Socket=\(dir)/agent.sock
        SocketMode=\(socketMode)
        StateDirectory=\(dir)/state
        RequestTimeout=5s
        \(extra)
        """
    }

    init(dir: TempDir = TempDir(), config: String? = nil, server: String, environment: [String: String] = [:],
         arguments: [String]? = nil, launcher: [String] = []) throws {
        self.dir = dir
        let text = config ?? Self.config(server: server, dir: dir.path)
        try text.write(toFile: dir.path + "/agent.conf", atomically: true, encoding: .utf8)
        notify = try NotifyReceiver(path: dir.path + "/notify-\(UUID().uuidString.prefix(8)).sock")
        let args = arguments ?? ["--config", dir.path + "/agent.conf"]
        if launcher.isEmpty {
            process.executableURL = URL(fileURLWithPath: Binaries.agentd)
            process.arguments = args
        } else {
            process.executableURL = URL(fileURLWithPath: launcher[0])
            process.arguments = Array(launcher.dropFirst()) + [Binaries.agentd] + args
        }
        var env = ["NOTIFY_SOCKET": notify.path, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"]
        env.merge(environment) { $1 }
        process.environment = env
        process.standardError = stderrPipe
        process.standardOutput = FileHandle.nullDevice
        try process.run()
    }

    /// Waits for a datagram containing `needle`; returns it.
    func waitForNotify(_ needle: String, timeout: Double = 10) -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let message = notify.receive(timeout: max(0.01, deadline.timeIntervalSinceNow)), message.contains(needle) {
                return message
            }
        }
        return nil
    }

    func signal(_ sig: Int32) { kill(process.processIdentifier, sig) }

    /// Sends SIGTERM and waits; returns the exit status and how long it took.
    func stop() -> (status: Int32, seconds: Double) {
        let start = Date()
        signal(SIGTERM)
        process.waitUntilExit()
        return (process.terminationStatus, Date().timeIntervalSince(start))
    }

    var stderrText: String { String(decoding: stderrPipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}

/// Parses a line into a JSONValue (kinds kept apart: a Boolean is never a Number).
func json(_ line: String) -> JSONValue {
    (try? JSONDecoder().decode(JSONValue.self, from: Data(line.utf8))) ?? .null
}

/// Polls `condition` for up to `timeout` seconds.
func eventually(timeout: Double = 10, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if condition() { return true }
        usleep(20_000)
    }
    return condition()
}
