import AgentPosix
import Foundation
import Glibc
import ToolSupport

// Fixtures of the tests that run the built executables: where they are, a temporary
// directory, and a real emulator on a free loopback port (AgentDaemonTests, and the
// libcurl transport's tests in AgentPosixTests), on the spawner and the HTTP client the
// tools use (ToolSupport's `ChildProcess`, `LoopbackHTTP`).

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

/// A fresh directory under /tmp (short: socket paths must fit 107 bytes), removed with
/// everything in it when released; `files` (name: text) are written into it first.
public final class TempDir: Sendable {
    public let path: String

    public init(files: [String: String] = [:]) {
        var template = Array("/tmp/pwagent-test-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed: errno \(errno)")
        path = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
        for (name, text) in files {
            precondition(FileManager.default.createFile(atPath: file(name), contents: Data(text.utf8)), "cannot write \(file(name))")
        }
    }

    /// The path of `name` inside the directory.
    public func file(_ name: String) -> String { path + "/" + name }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A real `pushwoosh-emulator` process on a free loopback port.
public final class EmulatorProcess {
    public let pid: pid_t
    public let port: Int
    private let output: TempDir
    private var running = true
    public var baseURL: String { "http://127.0.0.1:\(port)" }
    /// The admin (and lab) token and its file: the one it printed (`--lab`), or `--admin-token`'s.
    public let token: String?
    public let tokenFile: String?
    public var serverURL: String { baseURL + "/json/1.3/" }

    /// `arguments`: more of the emulator's options (`--require-token FILE`).
    public init(apps: String = Binaries.repositoryRoot + "/config/flags.example.json", arguments: [String] = []) throws {
        output = TempDir()
        let stdout = output.path + "/emulator.out"
        switch ChildProcess.spawn(path: Binaries.emulator, arguments: ["--listen", "127.0.0.1:0", "--apps", apps] + arguments,
                                  environment: ProcessInfo.processInfo.environment,
                                  output: .files(stdout: stdout, stderr: "/dev/null")) {
        case .success(let pid): self.pid = pid
        case .failure(let error): throw FixtureError("cannot start the emulator: \(error)")
        }
        let pid = pid
        guard let port = ChildProcess.announcedPort(in: stdout, timeout: 10, alive: { ChildProcess.isRunning(pid) }) else {
            ChildProcess.stop(pid)
            running = false
            throw FixtureError("emulator did not say where it listens: \((try? String(contentsOfFile: stdout, encoding: .utf8)) ?? "")")
        }
        self.port = Int(port)
        // A lab is always locked: its token is in the file it names ("lab token: FILE").
        let said = (try? String(contentsOfFile: stdout, encoding: .utf8)) ?? ""
        if let line = said.split(separator: "\n").first(where: { $0.hasPrefix("lab token: ") }) {
            tokenFile = String(line.dropFirst("lab token: ".count))
        } else if let at = arguments.firstIndex(of: "--admin-token"), at + 1 < arguments.count {
            tokenFile = arguments[at + 1]
        } else {
            tokenFile = nil
        }
        token = tokenFile.flatMap { try? String(contentsOfFile: $0, encoding: .utf8) }?.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    public func stop() {
        if running {
            running = false
            ChildProcess.stop(pid)
        }
    }

    deinit { stop() }

    /// An admin call; returns status and body.
    @discardableResult
    public func admin(_ method: String, _ path: String, _ body: String? = nil) -> (Int, String) {
        http(method, baseURL + path, body, token: token)
    }
}

/// One HTTP call to a loopback `http://` URL; status and body, `(0, "")` when it failed.
public func http(_ method: String, _ url: String, _ body: String?, token: String? = nil) -> (Int, String) {
    guard let parsed = LoopbackHTTP.parse(url: url, timeout: 10) else { return (0, "") }
    var server = parsed.server
    let path = parsed.path
    server.bearerToken = token
    guard let answer = try? server.call(method, path, body: body.map { Array($0.utf8) }) else { return (0, "") }
    return (answer.status, String(decoding: answer.body, as: UTF8.self))
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

/// What a finished command printed, its exit status and how long it ran.
public struct CapturedRun: Sendable {
    public var status: Int32
    public var out: String
    public var err: String
    public var seconds: Double

    public init(status: Int32, out: String, err: String, seconds: Double = 0) {
        self.status = status
        self.out = out
        self.err = err
        self.seconds = seconds
    }
}

/// Runs `executable` with `arguments` to its end, capturing standard output and error, with
/// `input` (if any) on its standard input and /dev/null otherwise; a command given input must
/// read all of it. The input is written and standard error read on threads of their own, so a
/// command that prints much to either cannot block on a full pipe.
public func runCapturing(_ executable: String, _ arguments: [String], input: String? = nil) throws -> CapturedRun {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let out = Pipe(), err = Pipe(), stdin = input.map { _ in Pipe() }
    process.standardOutput = out
    process.standardError = err
    process.standardInput = stdin ?? FileHandle.nullDevice
    let started = monotonicSeconds()
    try process.run()
    let done = DispatchGroup()
    let errText = LockedText()
    DispatchQueue.global().async(group: done) { errText.set(err.fileHandleForReading.readDataToEndOfFile()) }
    if let input, let stdin {
        let writer = stdin.fileHandleForWriting
        DispatchQueue.global().async(group: done) {
            try? writer.write(contentsOf: Data(input.utf8))
            try? writer.close()
        }
    }
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    done.wait()
    process.waitUntilExit()
    return CapturedRun(status: process.terminationStatus, out: String(decoding: outData, as: UTF8.self), err: errText.text,
                       seconds: monotonicSeconds() - started)
}

/// Text one thread sets and another reads after a wait.
private final class LockedText: @unchecked Sendable {
    private let lock = NSLock()
    private var value = ""
    func set(_ data: Data) { lock.withLock { value = String(decoding: data, as: UTF8.self) } }
    var text: String { lock.withLock { value } }
}
