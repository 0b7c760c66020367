import AgentCore
import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Testing
import ToolSupport

/// The stored state against the real `pushwoosh-agentd`: a file it cannot read is never
/// trusted nor overwritten, a full disk fails the method that needed the save and shows in
/// `status` and `/metrics`, and nothing planted in the state directory is followed.
@Suite(.serialized) struct StorageDaemonTests {
    static let nobody: uid_t = 65534

    /// A state file as an earlier run of the device left it.
    static func writeState(_ directory: String, hwid: String, userId: String) throws {
        var state = PersistentState(hwid: hwid)
        state.userId = userId
        try FileStateStore(directory: directory).save(state)
    }

    static func bytes(_ path: String) -> [UInt8]? { (try? Data(contentsOf: URL(fileURLWithPath: path))).map { [UInt8]($0) } }

    static func run(_ tool: String, _ arguments: [String]) -> Int32 {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: tool)
        p.arguments = arguments
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        guard (try? p.run()) != nil else { return -1 }
        p.waitUntilExit()
        return p.terminationStatus
    }

    /// Waits for the process to exit (at most `timeout` seconds); its status, nil if it did not.
    static func exitStatus(_ agent: AgentProcess, timeout: Double = 10) -> Int32? {
        guard eventually(timeout: timeout, { !agent.process.isRunning }) else { return nil }
        return agent.process.terminationStatus
    }

    @Test("A state file the agent cannot read (root's, mode 000, agent as nobody) stops it, naming the file and the error; the file stays intact",
          .enabled(if: geteuid() == 0, "chown and setpriv need root"))
    func unreadableStateStopsTheAgentAndStaysIntact() throws {
        let emulator = try EmulatorProcess()
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let state = dir.path + "/state", run = dir.path + "/run"
        try Self.writeState(state, hwid: "0E4C3D6A-5B1F-4C2D-9E8F-0A1B2C3D4E5F", userId: "alice")
        let file = state + "/state.json"
        chown(file, 0, 0)
        chmod(file, 0o000)
        chown(state, Self.nobody, Self.nobody)
        mkdir(run, 0o700)
        chown(run, Self.nobody, Self.nobody)
        let before = try #require(Self.bytes(file))
        let config = AgentProcess.config(server: emulator.serverURL, dir: dir.path)
            .replacingOccurrences(of: "Socket=\(dir.path)/agent.sock", with: "Socket=\(run)/agent.sock")
        let launcher = ["/usr/bin/setpriv", "--reuid=\(Self.nobody)", "--regid=\(Self.nobody)", "--clear-groups"]
        let agent = try AgentProcess(dir: dir, config: config, server: emulator.serverURL, launcher: launcher)
        let status = Self.exitStatus(agent)
        #expect(status == 1)
        let stderr = agent.stderrText
        #expect(stderr.contains("cannot start"))
        #expect(stderr.contains(file) && stderr.contains("Permission denied"))
        #expect(!FileManager.default.fileExists(atPath: run + "/agent.sock"))  // it never served
        // Intact: the same bytes, owner and mode; nothing set aside, no temporary file.
        #expect(Self.bytes(file) == before)
        var st = stat()
        stat(file, &st)
        #expect(st.st_uid == 0 && st.st_mode & 0o7777 == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: state).sorted().filter { $0.hasPrefix("state") } == ["state.json"])
        #expect(json(emulator.admin("GET", "/admin/requests/count").1)["count"] == 0)  // no request went out

        // Readable again: the same device comes back, and setUserId and a refresh work.
        chown(file, Self.nobody, Self.nobody)
        chmod(file, 0o600)
        let again = try AgentProcess(dir: dir, config: config, server: emulator.serverURL, launcher: launcher)
        let c = try #require(firstConnection { try LineClient(path: run + "/agent.sock") })
        let answer = c.call("status")["result"]
        #expect(answer?["hwid"] == "0E4C3D6A-5B1F-4C2D-9E8F-0A1B2C3D4E5F")
        #expect(answer?["userId"] == "alice")
        #expect(c.call("setUserId", #"{"userId":"bob"}"#)["result"] == [:])
        #expect(c.call("refresh")["result"]?["error"] == .null)
        #expect(try FileStateStore.read(file)?.userId == "bob")
        #expect(again.stop().status == 0)
    }

    @Test("A full disk (a 64 KiB tmpfs) makes setUserId answer -32005; status.storageError, /metrics and agentctl show it; it recovers",
          .enabled(if: geteuid() == 0, "mount needs root"))
    func fullDiskFailsTheMethodAndShows() throws {
        let emulator = try EmulatorProcess()
        let dir = TempDir()
        let state = dir.path + "/state"
        mkdir(state, 0o700)
        guard Self.run("/bin/mount", ["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", state]) == 0 else {
            Issue.record("mount -t tmpfs failed")
            return
        }
        defer { _ = Self.run("/bin/umount", ["-l", state]) }
        let agent = try AgentProcess(dir: dir, server: emulator.serverURL)
        defer { _ = agent.stop() }
        #expect(agent.waitForNotify("READY=1") != nil)
        let c = try LineClient(path: agent.socketPath)
        #expect(c.call("setUserId", #"{"userId":"alice"}"#)["result"] == [:])
        #expect(c.call("status")["result"]?["storageError"] == .null)

        // Fill the disk.
        _ = Self.run("/bin/dd", ["if=/dev/zero", "of=\(state)/filler", "bs=4096"])
        let failed = c.call("setUserId", #"{"userId":"bob"}"#)
        #expect(failed["result"] == nil)
        #expect(failed["error"]?["code"] == -32005)
        #expect(failed["error"]?["data"]?["method"] == "setUserId")
        #expect(failed["error"]?["message"]?.stringValue?.contains("No space left on device") == true)
        let problem = c.call("status")["result"]?["storageError"]
        #expect(problem?["operation"] == "save")
        #expect(problem?["message"]?.stringValue?.contains("No space left on device") == true)
        #expect(problem?["at"]?.stringValue.flatMap { try? Date($0, strategy: .iso8601) } != nil)
        #expect(c.call("status")["result"]?["userId"] == "bob")  // in memory
        #expect(try FileStateStore.read(state + "/state.json")?.userId == "alice")  // the disk keeps the last complete state
        let metrics = c.call("metrics")["result"]?["text"]?.stringValue ?? ""
        let saveErrors = metrics.split(separator: "\n").first { $0.hasPrefix(#"pushwoosh_agent_storage_errors_total{operation="save"} "#) }
        #expect(saveErrors.flatMap { Double($0.split(separator: " ").last!) }.map { $0 >= 1 } == true)
        // agentctl prints it (human and --json), and exits 1 on the failed method.
        let human = agentctl(["--socket", agent.socketPath, "status"])
        #expect(human.output.contains("storageError:") && human.output.contains("save failed at"))
        #expect(human.output.contains("No space left on device"))
        let set = agentctl(["--socket", agent.socketPath, "set-user", "carol"])
        #expect(set.status == 1)
        #expect(set.output.contains("state not saved"))

        // Space again: the next change saves, and storageError is gone.
        unlink(state + "/filler")
        #expect(c.call("setUserId", #"{"userId":"dave"}"#)["result"] == [:])
        #expect(c.call("status")["result"]?["storageError"] == .null)
        #expect(try FileStateStore.read(state + "/state.json")?.userId == "dave")
    }

    @Test("A state directory writable by others stops the agent, naming the directory and its mode")
    func worldWritableStateDirectoryIsRefused() throws {
        let emulator = try EmulatorProcess()
        let dir = TempDir()
        let state = dir.path + "/state"
        mkdir(state, 0o700)
        chmod(state, 0o777)
        let agent = try AgentProcess(dir: dir, server: emulator.serverURL)
        #expect(Self.exitStatus(agent) == 1)
        let stderr = agent.stderrText
        #expect(stderr.contains("state directory \(state) is writable by others (mode 0777)"))
        #expect(!FileManager.default.fileExists(atPath: agent.socketPath))
    }

    @Test("A symlink planted as state.json.tmp is never followed: its root-owned target stays untouched")
    func plantedSymlinkIsNotFollowed() throws {
        let emulator = try EmulatorProcess()
        let dir = TempDir()
        let victim = dir.path + "/victim"
        _ = FileManager.default.createFile(atPath: victim, contents: Data("root's own file\n".utf8))
        chmod(victim, 0o644)
        let agent = try AgentProcess(dir: dir, server: emulator.serverURL)
        defer { _ = agent.stop() }
        #expect(agent.waitForNotify("READY=1") != nil)
        let c = try LineClient(path: agent.socketPath)
        // After the start-up refresh is stored (its save would race with the planting).
        #expect(eventually { c.call("status")["result"]?["state"] == "ready" })
        let temporary = agent.stateDirectory + "/state.json.tmp"
        #expect(symlink(victim, temporary) == 0, "symlink: \(String(cString: strerror(errno)))")
        #expect(c.call("setUserId", #"{"userId":"mallory-proof"}"#)["result"] == [:])
        #expect(Self.bytes(victim) == Array("root's own file\n".utf8))
        var st = stat()
        lstat(agent.stateDirectory + "/state.json", &st)
        #expect(st.st_mode & S_IFMT == S_IFREG)
        // The planted link is gone (a later save's own temporary file may be there for a moment).
        #expect(lstat(temporary, &st) != 0 || st.st_mode & S_IFMT == S_IFREG)
        #expect(try FileStateStore.read(agent.stateDirectory + "/state.json")?.userId == "mallory-proof")
    }

    /// Runs agentctl; its exit status and standard output and error together.
    func agentctl(_ arguments: [String]) -> (status: Int32, output: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Binaries.agentctl)
        p.arguments = arguments
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        guard (try? p.run()) != nil else { return (-1, "") }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}
