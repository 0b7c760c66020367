import AgentCore
import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Testing
import ToolSupport

/// docs/lab.md "The token", "Whose files" and "Nothing moves in silence", against the real
/// binaries, each attack as a hostile local user would make it: the lab is locked by default,
/// never remote without a token of one's choosing, acts only in directories of its own user,
/// follows no planted symlink, answers while a device hangs in its start, moves nothing for an
/// `until` nobody can reach, and takes the caller's mistakes as 400s naming the key.
@Suite(.serialized) struct LabLockTests {
    struct Lab {
        let dir = TempDir()
        let emulator: EmulatorProcess
        var path: String { dir.path + "/lab" }

        init(arguments: [String] = []) throws {
            emulator = try EmulatorProcess(arguments: ["--lab", dir.path + "/lab"] + arguments)
        }

        func call(_ method: String, _ path: String, _ body: String? = nil) -> (status: Int, json: JSONValue) {
            let (status, text) = emulator.admin(method, path, body)
            return (status, (try? JSONReader.parse(text)) ?? .null)
        }

        func clockOffset() -> Double { call("GET", "/admin/clock").json["offsetSeconds"]?.numberValue ?? -1 }
    }

    /// The emulator with `arguments`, its standard error kept: how it exited, or what it said
    /// once listening (then stopped).
    static func emulatorRun(_ arguments: [String]) throws -> (status: Int32?, out: String, err: String) {
        let dir = TempDir()
        let out = dir.file("out"), err = dir.file("err")
        guard case .success(let pid) = ChildProcess.spawn(path: Binaries.emulator, arguments: ["--listen", "127.0.0.1:0"] + arguments,
                                                          environment: ProcessInfo.processInfo.environment,
                                                          output: .files(stdout: out, stderr: err)) else { throw FixtureError("no emulator") }
        var status: Int32 = 0
        var exited: Int32?
        if ChildProcess.announcedPort(in: out, timeout: 10, alive: { waitpid(pid, &status, WNOHANG) == 0 }) != nil {
            kill(pid, SIGTERM)
            waitpid(pid, &status, 0)
        } else {
            exited = (status >> 8) & 0xff
        }
        return (exited, (try? String(contentsOfFile: out, encoding: .utf8)) ?? "", (try? String(contentsOfFile: err, encoding: .utf8)) ?? "")
    }

    // P: never unlocked: a token of 128 random bits in DIR/token (0600), anew at each start,
    // named on standard output; 401 without it.
    @Test func theDefaultLabIsLocked() throws {
        let lab = try Lab()
        let file = lab.path + "/token"
        var info = stat()
        #expect(lstat(file, &info) == 0 && info.st_mode & S_IFMT == S_IFREG && info.st_mode & 0o777 == 0o600)
        let token = lab.emulator.token ?? ""
        #expect(token.count == 32 && token.allSatisfy(\.isHexDigit), "\(token)")
        #expect(lab.emulator.tokenFile == file)
        #expect(http("GET", lab.emulator.baseURL + "/lab/devices", nil).0 == 401)
        #expect(http("POST", lab.emulator.baseURL + "/lab/devices", #"{"name":"x1","agentd":"/bin/sh"}"#).0 == 401)
        #expect(http("GET", lab.emulator.baseURL + "/admin/apps", nil).0 == 401)
        #expect(lab.call("GET", "/lab/devices").status == 200)
        // A second lab on the same directory makes a new token; the first one's no longer opens it.
        lab.emulator.stop()
        let again = try EmulatorProcess(arguments: ["--lab", lab.path])
        #expect(again.token != nil && again.token != token)
        #expect(http("GET", again.baseURL + "/lab/devices", nil, token: token).0 == 401)
    }

    // P: a planted token symlink is removed, never written through.
    @Test func aPlantedTokenSymlinkIsNotFollowed() throws {
        let dir = TempDir(files: ["victim": "root's own\n"])
        mkdir(dir.file("lab"), 0o700)
        symlink(dir.file("victim"), dir.file("lab/token"))
        let emulator = try EmulatorProcess(arguments: ["--lab", dir.file("lab")])
        #expect(try String(contentsOfFile: dir.file("victim"), encoding: .utf8) == "root's own\n")
        var info = stat()
        #expect(lstat(dir.file("lab/token"), &info) == 0 && info.st_mode & S_IFMT == S_IFREG)
        #expect(emulator.token != nil)
    }

    // P: no remote lab without a token of one's choosing; the root warning, once.
    @Test func noRemoteLabWithoutAToken() throws {
        let dir = TempDir()
        let run = try Self.emulatorRun(["--listen", "0.0.0.0:0", "--allow-remote", "--lab", dir.file("lab")])
        #expect(run.status == 2, "\(run.err)")
        #expect(run.err.contains("--allow-remote with --lab needs --admin-token FILE"), "\(run.err)")
        let local = try Self.emulatorRun(["--lab", dir.file("lab")])
        #expect(local.status == nil && local.out.contains("lab token: \(dir.file("lab"))/token\n"), "\(local)")
        let warnings = local.err.split(separator: "\n").filter { $0.contains("the lab runs as root") }
        #expect(warnings.count == (geteuid() == 0 ? 1 : 0), "\(local.err)")
    }

    // P: `--lab DIR` must be this user's and writable by no one else: exit 2, saying why.
    @Test(arguments: ["open", "foreign", "symlink"])
    func aLabDirectoryNotOurOwnIsRefused(_ kind: String) throws {
        let dir = TempDir()
        let lab = dir.file("lab")
        switch kind {
        case "open":
            mkdir(lab, 0o700)
            chmod(lab, 0o777)
        case "foreign":
            guard geteuid() == 0 else { return }  // only root can give a directory away
            mkdir(lab, 0o700)
            chown(lab, 1001, 1001)
        default:
            mkdir(dir.file("elsewhere"), 0o700)
            symlink(dir.file("elsewhere"), lab)
        }
        let run = try Self.emulatorRun(["--lab", lab])
        #expect(run.status == 2, "\(kind): \(run)")
        let why = ["open": "writable by others (mode 0777)", "foreign": "owned by uid 1001, not the lab's user",
                   "symlink": "a symbolic link"][kind]!
        #expect(run.err.contains("--lab \(lab): \(why)"), "\(run.err)")
        #expect(access(lab + "/token", F_OK) != 0, "no token written there")
    }

    // P: a device's `directory` likewise (400 naming `directory`), and no file in it is
    // opened through a planted symlink: not at the start, not by the log route later.
    @Test func aDevicesFilesAreItsOwn() throws {
        let lab = try Lab()
        let open = TempDir()
        chmod(open.path, 0o777)
        let refused = lab.call("POST", "/lab/devices", #"{"name":"o","directory":"\#(open.path)"}"#)
        #expect(refused.status == 400 && refused.json["path"] == "directory", "\(refused.json)")
        #expect(refused.json["error"]?.stringValue?.contains("writable by others") == true, "\(refused.json)")

        let secret = TempDir(files: ["shadow": "secret line\n"])
        let planted = TempDir()
        symlink(secret.file("shadow"), planted.file("agent.log"))
        let symlinked = lab.call("POST", "/lab/devices", #"{"name":"p","directory":"\#(planted.path)"}"#)
        #expect(symlinked.status == 400 && symlinked.json["path"] == "directory", "\(symlinked.json)")
        #expect(symlinked.json["error"]?.stringValue?.contains("agent.log: a symbolic link") == true, "\(symlinked.json)")
        #expect(try String(contentsOfFile: secret.file("shadow"), encoding: .utf8) == "secret line\n", "nothing appended")
        #expect(lab.call("GET", "/lab/devices").json["devices"]?.arrayValue?.isEmpty == true)

        // Planted after the start: the log route refuses it rather than serve what it names.
        let own = TempDir()
        #expect(lab.call("POST", "/lab/devices", #"{"name":"q","directory":"\#(own.path)"}"#).status == 201)
        unlink(own.file("agent.log"))
        symlink(secret.file("shadow"), own.file("agent.log"))
        let log = lab.call("GET", "/lab/devices/q/log")
        #expect(log.status == 409 && !"\(log.json)".contains("secret line"), "\(log.json)")
        // And a restart refuses to start on it.
        let restart = lab.call("POST", "/lab/devices/q/restart")
        #expect(restart.status == 409 && restart.json["error"]?.stringValue?.contains("agent.log: a symbolic link") == true, "\(restart.json)")
        #expect(try String(contentsOfFile: secret.file("shadow"), encoding: .utf8) == "secret line\n", "nothing appended")
    }

    // P: a device whose READY never comes holds no other request.
    @Test func aHangingStartHoldsNothingElse() throws {
        let lab = try Lab()
        #expect(lab.call("POST", "/lab/devices", #"{"name":"fine"}"#).status == 201)
        // It neither answers nor sends READY=1 for 3 s (its configuration check included), then exits.
        let scripts = TempDir(files: ["hang": "#!/bin/sh\nexec sleep 3\n"])
        chmod(scripts.file("hang"), 0o755)
        let done = DispatchSemaphore(value: 0)
        let hangs = (0..<4).map { #"{"name":"hang\#($0)","agentd":"\#(scripts.file("hang"))"}"# }
        for body in hangs {
            let url = lab.emulator.baseURL + "/lab/devices", token = lab.emulator.token
            Thread.detachNewThread {
                _ = http("POST", url, body, token: token)
                done.signal()
            }
        }
        usleep(300_000)
        var slowest = 0.0
        for _ in 0..<5 {
            let t0 = monotonicSeconds()
            let listed = lab.call("GET", "/lab/devices")
            let call = lab.call("POST", "/lab/devices/fine/call", #"{"method":"status"}"#)
            let admin = lab.call("GET", "/admin/clock")
            slowest = max(slowest, monotonicSeconds() - t0)
            #expect(listed.status == 200 && call.status == 200 && admin.status == 200)
            let states = Dictionary(uniqueKeysWithValues: (listed.json["devices"]?.arrayValue ?? []).map { ($0["name"]?.stringValue ?? "", $0["state"]) })
            #expect(states["fine"] == "ready" && states["hang0"] == "starting", "\(states)")
            usleep(200_000)
        }
        #expect(slowest < 1.5, "the slowest round of three requests took \(slowest) s")
        for _ in hangs { done.wait() }
        let deadline = monotonicSeconds() + 30
        while lab.call("GET", "/lab/devices").json["devices"]?.arrayValue?.count != 1, monotonicSeconds() < deadline { usleep(100_000) }
        #expect(lab.call("GET", "/lab/devices").json["devices"]?.arrayValue?.count == 1, "the hanging starts ended as 502s, gone from the lab")
    }

    // P: an `until` that no targeted device can reach is a 409 and moves nothing, the
    // emulator's clock included; `strict` moves nothing unless every device can follow.
    @Test func nothingMovesInSilence() throws {
        let lab = try Lab()
        for until in ["nextRefresh", "nextTimer"] {
            let empty = lab.call("POST", "/lab/advance", #"{"until":"\#(until)"}"#)
            #expect(empty.status == 409 && empty.json["error"]?.stringValue?.contains("nothing moved") == true, "\(empty.json)")
        }
        #expect(lab.clockOffset() == 0)
        #expect(lab.call("POST", "/lab/devices", #"{"name":"bg"}"#).status == 201)
        #expect(lab.call("POST", "/lab/devices/bg/call", #"{"method":"setAppState","params":{"state":"background"}}"#).status == 200)
        let background = lab.call("POST", "/lab/advance", #"{"until":"nextRefresh"}"#)
        #expect(background.status == 409, "\(background.json)")
        #expect(background.json["skipped"]?.arrayValue?.first?["name"] == "bg", "\(background.json)")
        #expect(lab.clockOffset() == 0)

        #expect(lab.call("POST", "/lab/devices", #"{"name":"sys","clock":"system"}"#).status == 201)
        let strict = lab.call("POST", "/lab/advance", #"{"seconds":600,"strict":true}"#)
        #expect(strict.status == 409 && strict.json["skipped"]?.arrayValue?.contains { $0["name"] == "sys" } == true, "\(strict.json)")
        #expect(lab.clockOffset() == 0)
        let loose = lab.call("POST", "/lab/advance", #"{"seconds":600}"#)
        #expect(loose.status == 200 && loose.json["skipped"]?.arrayValue?.contains { $0["name"] == "sys" } == true, "\(loose.json)")
        #expect(abs(lab.clockOffset() - 600) < 1)
        #expect(lab.call("POST", "/lab/advance", #"{"seconds":60,"strict":"yes"}"#).json["path"] == "strict")
    }

    // P: configuration the agent would refuse is a 400 naming the key, found before any
    // process starts; faults by a device's name.
    @Test(arguments: [
        (#"{"Agent":{"NoSuchKey":1}}"#, "", "config.Agent.NoSuchKey", "unknown key in [Agent]"),
        (#"{"Nope":{"Key":"v"}}"#, "", "config.Nope", "unknown section"),
        (#"{"Agent":{"RequestTimeout":"soon"}}"#, "", "config.Agent.RequestTimeout", "invalid time span"),
        ("{}", #"[Agent]\nFoo=1\n"#, "extraConfig", "unknown key in [Agent]"),
    ])
    func configurationMistakesAreTheCallers(_ config: String, _ extra: String, _ path: String, _ reason: String) throws {
        let lab = try Lab()
        let answer = lab.call("POST", "/lab/devices", #"{"count":2,"name":"c","config":\#(config),"extraConfig":"\#(extra)"}"#)
        #expect(answer.status == 400 && answer.json["path"] == .string(path), "\(answer.json)")
        #expect(answer.json["error"]?.stringValue?.contains(reason) == true, "\(answer.json)")
        #expect(lab.call("GET", "/lab/devices").json["devices"]?.arrayValue?.isEmpty == true, "nothing started")
    }

    @Test func faultsByDeviceName() throws {
        let lab = try Lab()
        let started = lab.call("POST", "/lab/devices", #"{"name":"f"}"#)
        let hwid = started.json["devices"]?.arrayValue?.first?["hwid"]
        let armed = lab.call("POST", "/admin/faults", #"{"device":"f","method":"getFeatureFlags","http":503}"#)
        #expect(armed.status == 200 && armed.json["armed"]?["hwid"] == hwid, "\(armed.json)")
        let unknown = lab.call("POST", "/admin/faults", #"{"device":"nobody","method":"getFeatureFlags","http":503}"#)
        #expect(unknown.status == 400 && unknown.json["path"] == "device", "\(unknown.json)")
        let both = lab.call("POST", "/admin/faults", #"{"device":"f","hwid":"X","method":"getFeatureFlags","http":503}"#)
        #expect(both.status == 400 && both.json["path"] == "device", "\(both.json)")
        #expect(lab.call("GET", "/admin/faults").json["faults"]?.arrayValue?.count == 1, "only the first was armed")
        // The fault reaches the device: past the throttle window, its manual refresh fails with the 503.
        #expect(lab.call("POST", "/lab/advance", #"{"seconds":600}"#).status == 200)
        let refresh = lab.call("POST", "/lab/devices/f/call", #"{"method":"refresh"}"#)
        #expect(refresh.status == 200 && "\(refresh.json)".contains("503"), "\(refresh.json)")
        // Without a lab, `device` is refused, naming it.
        let plain = try EmulatorProcess()
        let (status, body) = plain.admin("POST", "/admin/faults", #"{"device":"f","method":"getFeatureFlags","http":503}"#)
        #expect(status == 400 && body.contains("\"device\"") && body.contains("serves no lab"), "\(body)")
    }

    // The limits docs/lab.md names: 64 devices a request, 256 in the lab at once.
    @Test func theLabHoldsAtMost256Devices() throws {
        let lab = try Lab()
        #expect(lab.call("POST", "/lab/devices", #"{"count":65,"name":"many"}"#).json["path"] == "count")
        let first = lab.call("POST", "/lab/devices", #"{"name":"a"}"#)
        let socket = first.json["devices"]?.arrayValue?.first?["socket"]?.stringValue ?? ""
        for i in 1..<256 {
            let attached = lab.call("POST", "/lab/devices", #"{"attach":"\#(socket)","name":"x\#(i)"}"#)
            guard attached.status == 201 else { Issue.record("attach \(i): \(attached.json)"); return }
        }
        let over = lab.call("POST", "/lab/devices", #"{"attach":"\#(socket)","name":"x256"}"#)
        #expect(over.status == 409 && over.json["error"]?.stringValue?.contains("takes at most 256") == true, "\(over.json)")
        #expect(lab.call("GET", "/lab/devices").json["devices"]?.arrayValue?.count == 256)
    }
}
