import AgentPosix
import Glibc
import HarnessSupport

/// `pushwoosh-bench echo-server --socket PATH`: the baseline. AgentPosix's `EchoServer`
/// (same `EventLoop`, `UnixListener` and `Connection` as the agent's socket server) in a
/// process of its own, so that it competes for the CPU the way the agent does.
enum EchoCommand {
    static func run(_ arguments: [String]) -> Int32 {
        guard arguments.count == 2, arguments[0] == "--socket" else {
            printErr("usage: pushwoosh-bench echo-server --socket PATH")
            return 2
        }
        do {
            let loop = try EventLoop()
            let server = try EchoServer(loop: loop, path: arguments[1])
            try server.start()
            try loop.run()
            return 0
        } catch {
            printErr("echo-server: \(error)")
            return 1
        }
    }
}

/// `pushwoosh-bench load --socket PATH …`: one load cell against a server that is already
/// running (the agent under `perf` or `valgrind`, say).
enum LoadCommand {
    static func run(_ arguments: [String]) -> Int32 {
        var socket: String?
        var method = "isEnabled"
        var clients = 1
        var depth = 1
        var seconds = 5.0
        var threads = max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
        var k = 0
        while k + 1 < arguments.count {
            let value = arguments[k + 1]
            switch arguments[k] {
            case "--socket": socket = value
            case "--method": method = value
            case "--clients": clients = Int(value) ?? clients
            case "--depth": depth = Int(value) ?? depth
            case "--seconds": seconds = Double(value) ?? seconds
            case "--client-threads": threads = Int(value) ?? threads
            default:
                printErr("load: unknown argument \(arguments[k])")
                return 2
            }
            k += 2
        }
        guard let socket, k == arguments.count else {
            printErr("usage: pushwoosh-bench load --socket PATH [--method isEnabled|get] [--clients N] [--depth N] [--seconds S] [--client-threads N]")
            return 2
        }
        let suffix = method == "get" ? #","method":"get","params":{"key":"new_checkout"}}"#
            : #","method":"isEnabled","params":{"key":"new_checkout","default":false}}"#
        let cell = LoadCell(socket: socket, prefix: Array(#"{"jsonrpc":"2.0","id":"#.utf8), suffix: Array(suffix.utf8) + [0x0A],
                            clients: clients, depth: depth, warmup: 0.5, duration: seconds, threads: threads, serverPID: 0)
        do {
            let r = try LoadDriver.run(cell)
            print("\(method) clients=\(clients) depth=\(depth): \(Int(r.requestsPerSecond)) req/s p50 \(r.p50) µs p99 \(r.p99) µs client CPU \(Int(r.clientCPU)) %")
            return 0
        } catch {
            printErr("load: \(error)")
            return 1
        }
    }
}
