// `pushwoosh-fault`, the fault suite's helper (docs/testing.md), run by scripts/fault-kill9 and
// scripts/fault-disk. A package target: the NOTIFY_SOCKET receiver, the line client, child
// processes and the state-file reader are HarnessSupport's. Subcommands:
//
//   kill9 --bin DIR --work DIR [--kills N] [--seed S] [--flags N]
//       Runs the real emulator and agent; N times: start the agent, wait for READY=1, check
//       that it loaded the stored state without damage, refresh in a loop (the emulator's
//       flags bumped to a new version before each refresh), SIGKILL it 0–50 ms after a random
//       refresh started, then check the state file on disk (ST-6): a complete file whose
//       flags are exactly one earlier response, or no flags at all.
//   notify PATH             Prints every datagram received on a new datagram socket at PATH.
//   rpc SOCKET METHOD [PARAMS-JSON]   One JSON-RPC call; prints the answer line.
//   check-state FILE        Prints `none`, `flags <count> version <v>` or `invalid: …` (exit 1).
//   http METHOD URL [BODY]  One plain HTTP/1.1 call on loopback; prints the status and body.
//   app FLAGS VERSION       Prints the versioned application definition kill9 uses.
//   hold [--socket PATH] [--http-port P] [--sockets N] [--https M] [--mode half|idle|pipeline|long]
//        [--seconds S]      Holds N socket and M HTTP connections (Abuse.swift).
//   abuse --socket PATH --http-port P [--seconds S]
//                           Abuses both doors for S seconds, then checks that /healthz and
//                           `status` answer within a second (ConnectionAbuse.swift).

import AgentCore
import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Launcher
import ToolSupport

// MARK: - Entry

let args = Array(CommandLine.arguments.dropFirst())

/// The `--name value` options after the subcommand: `apply` is given each name and a reader of
/// its value, and says whether it knows the name (an unknown one, or a missing value, ends the run).
func readOptions(_ args: [String], _ apply: (String, () -> String) -> Bool) {
    var i = 1
    while i < args.count {
        let name = args[i]
        let known = apply(name) {
            i += 1
            guard i < args.count else { die("\(name) needs a value") }
            return args[i]
        }
        if !known { die("unknown option \(name)") }
        i += 1
    }
}
guard let command = args.first else { die("usage: pushwoosh-fault kill9|notify|rpc|check-state|http|hold|abuse …") }
switch command {
case "--version":
    print(PackageVersion.line("pushwoosh-fault"))
    exit(0)

case "--help", "-h":
    print(faultUsage)
    exit(0)

case "kill9":
    var o = Kill9Options()
    readOptions(args) { name, value in
        switch name {
        case "--bin": o.bin = value()
        case "--work": o.work = value()
        case "--kills": o.kills = Int(value()) ?? 0
        case "--seed": o.seed = UInt64(value()) ?? 0
        case "--flags": o.flags = Int(value()) ?? 0
        default: return false
        }
        return true
    }
    guard !o.bin.isEmpty, !o.work.isEmpty, o.kills > 0, o.flags > 0 else { die("kill9 needs --bin DIR --work DIR") }
    exit(runKill9(o))

case "notify":
    guard args.count == 2 else { die("usage: notify PATH") }
    let receiver: NotifyReceiver
    do { receiver = try NotifyReceiver(path: args[1]) } catch { die("\(error)") }
    signal(SIGTERM) { _ in exit(0) }
    while true {
        guard let message = receiver.receive(timeout: 3_600) else { continue }
        print(message.replacingOccurrences(of: "\n", with: " | "))
        fflush(nil)
    }

case "rpc":
    guard args.count == 3 || args.count == 4 else { die("usage: rpc SOCKET METHOD [PARAMS]") }
    do {
        let client = try LineClient(path: args[1], timeout: 10)
        let params = args.count == 4 ? args[3] : "{}"
        guard client.send(#"{"jsonrpc":"2.0","id":1,"method":"\#(args[2])","params":\#(params)}"# + "\n"),
              let line = client.readLine() else { die("no answer") }
        print(line)
    } catch { die("\(error)") }

case "check-state":
    guard args.count == 2 else { die("usage: check-state FILE") }
    do {
        switch try StateFile.read(args[1]) {
        case .missing: print("none")
        case .noFlags: print("none")
        case .flags(let s):
            let versions = Set(s.flags.values.map(VersionedApp.version))
            print("flags \(s.flags.count) version \(versions.count == 1 ? String(versions.first!) : "mixed \(versions.sorted())")")
        }
    } catch {
        print("invalid: \(error)")
        exit(1)
    }

case "app":
    guard args.count == 3, let count = Int(args[1]), let version = Int(args[2]) else { die("usage: app FLAGS VERSION") }
    print(VersionedApp(count: count).definition(version: version))

case "http":
    guard args.count == 3 || args.count == 4 else { die("usage: http METHOD URL [BODY]") }
    do {
        guard let (server, path) = LoopbackHTTP.parse(url: args[2]) else { die("not an http://IPv4:PORT URL: \(args[2])") }
        let r = try server.call(args[1], path, body: args.count == 4 ? Array(args[3].utf8) : nil)
        print(r.status)
        print(String(decoding: r.body, as: UTF8.self))
    } catch { die("\(error)") }

case "hold", "abuse":
    var hold = HoldOptions()
    readOptions(args) { name, value in
        switch name {
        case "--socket": hold.socket = value()
        case "--http-port": hold.httpPort = UInt16(value()) ?? 0
        case "--sockets": hold.socketCount = Int(value()) ?? 0
        case "--https": hold.httpCount = Int(value()) ?? 0
        case "--mode": hold.mode = value()
        case "--seconds": hold.seconds = Double(value()) ?? 0
        default: return false
        }
        return true
    }
    guard ["half", "idle", "pipeline", "long"].contains(hold.mode) else { die("--mode is half, idle, pipeline or long") }
    if command == "hold" { exit(runHold(hold)) }
    guard let socket = hold.socket, let port = hold.httpPort, port > 0 else { die("abuse needs --socket PATH --http-port P") }
    exit(runAbuse(socket: socket, httpPort: port, seconds: min(hold.seconds, 120)))

default:
    die("unknown command \(command)")
}

/// `pushwoosh-fault --help`.
var faultUsage: String {
    """
    usage: pushwoosh-fault COMMAND [ARGS]

    The fault suite's helper (scripts/fault-kill9, scripts/fault-disk):
      kill9 --bin DIR --work DIR [--kills N] [--seed S] [--flags N]
                              SIGKILL the agent during refreshes, check the state on disk
      notify PATH             print every datagram received on a new datagram socket at PATH
      rpc SOCKET METHOD [PARAMS-JSON]
                              one JSON-RPC call; prints the answer line
      check-state FILE        print none, flags <count> version <v>, or invalid: … (exit 1)
      http METHOD URL [BODY]  one plain HTTP/1.1 call on loopback; prints the status and body
      app FLAGS VERSION       print the versioned application definition kill9 uses
      --version               the version
    """
}
