// `pushwoosh-fault abuse`: the connection abuse an unprivileged local user can try, in
// rounds for a bounded time, each round followed by the checks the agent promises: once
// the abusers are gone, /healthz and `status` answer within a second.

import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import ToolSupport

/// Closes `fd` with a reset (SO_LINGER 0) instead of a FIN.
func reset(_ fd: Int32) {
    var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
    Glibc.close(fd)
}

/// Whether `probe` succeeds within one second (tried every 50 ms); how long it took.
func withinASecond(_ probe: () -> Bool) -> (Bool, Double) {
    let start = monotonicSeconds()
    while monotonicSeconds() - start < 1 {
        if probe() { return (true, monotonicSeconds() - start) }
        sleepSeconds(0.05)
    }
    return (false, monotonicSeconds() - start)
}

func runAbuse(socket: String, httpPort: UInt16, seconds: Double) -> Int32 {
    let http = LoopbackHTTP(port: httpPort, timeout: 1)
    let healthz = { (try? http.call("GET", "/healthz", body: nil))?.status == 200 }
    let status = { () -> Bool in
        guard let client = try? LineClient(path: socket, timeout: 1) else { return false }
        return (try? client.call(.status))?["hwid"] != nil
    }
    let deadline = monotonicSeconds() + seconds
    var rounds = 0, failures = 0, slowest = 0.0
    let bigLine = [UInt8](repeating: 0x20, count: 2 << 20)
    // Slow clients kept across rounds, a byte each round, never finishing a request: the
    // agent must close them (RequestReadTimeout); each closed one is replaced.
    var slow: [(fd: Int32, socket: Bool)] = []
    var slowClosed = 0
    while monotonicSeconds() < deadline {
        rounds += 1
        slow.removeAll { entry in
            guard serverClosed(entry.fd) else { return false }
            slowClosed += 1
            Glibc.close(entry.fd)
            return true
        }
        while slow.count < 4 {
            let onSocket = slow.filter(\.socket).count < 2
            guard let fd = onSocket ? connectRaw(socket: socket, port: nil) : connectRaw(socket: nil, port: httpPort) else { break }
            sendSome(fd, onSocket ? halfLine : halfHeaders)
            slow.append((fd, onSocket))
        }
        for entry in slow { sendSome(entry.fd, [UInt8(ascii: "x")]) }
        var held: [Int32] = []
        // Bursts: half-sent headers and half-written lines, then closed or reset.
        for i in 0..<40 {
            if let fd = connectRaw(socket: nil, port: httpPort) {
                sendSome(fd, halfHeaders)
                held.append(fd)
            }
            if i % 2 == 0, let fd = connectRaw(socket: socket, port: nil) {
                sendSome(fd, halfLine)
                held.append(fd)
            }
        }
        // Non-readers pipelining `status`, and a line over the limit.
        var pipeliners: [Int32] = []
        for _ in 0..<5 { if let fd = connectRaw(socket: socket, port: nil) { pipeliners.append(fd) } }
        let pipelined = Array(repeating: statusLine, count: 256).flatMap { $0 }
        for _ in 0..<20 {
            for fd in pipeliners { sendSome(fd, pipelined) }
            sleepSeconds(0.01)
        }
        if let fd = connectRaw(socket: socket, port: nil) {
            sendSome(fd, bigLine)
            held.append(fd)
        }
        // Slowloris: a byte at a time.
        for step in 0..<10 {
            for fd in held.prefix(10) { sendSome(fd, [UInt8(ascii: "x")]) }
            _ = step
            sleepSeconds(0.05)
        }
        for (index, fd) in held.enumerated() { if index % 3 == 0 { reset(fd) } else { Glibc.close(fd) } }
        for fd in pipeliners { Glibc.close(fd) }
        let (healthy, took) = withinASecond(healthz)
        let (answered, tookStatus) = withinASecond(status)
        slowest = max(slowest, took, tookStatus)
        if !healthy || !answered {
            failures += 1
            print("round \(rounds): /healthz \(healthy ? "ok" : "NO ANSWER within 1 s"), status \(answered ? "ok" : "NO ANSWER within 1 s")")
        }
    }
    for entry in slow { Glibc.close(entry.fd) }
    print("abuse: \(rounds) rounds in \(Int(seconds)) s, \(failures) failed, slowest recovery \(Int(slowest * 1000)) ms, "
          + "\(slowClosed) slow clients closed by the agent")
    return failures == 0 && rounds > 0 ? 0 : 1
}
