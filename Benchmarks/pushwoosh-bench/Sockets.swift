import AgentCore
import AgentPosix
import Glibc
import HarnessSupport
import ToolSupport

/// Small blocking socket helpers for the benchmark's setup steps (not the load driver), on
/// HarnessSupport's.
enum Sockets {
    /// A connected blocking Unix stream socket.
    static func connectUnix(_ path: String) throws -> Int32 {
        do {
            return try UnixSocket.connect(to: path).take()
        } catch {
            throw BenchError("connect \(path): \(error)")
        }
    }

    /// Waits until something accepts on `path` (a listener coming up).
    static func waitForListener(_ path: String, timeout: Double, alive: () -> Bool = { true }) throws {
        let deadline = monotonicSeconds() + timeout
        while monotonicSeconds() < deadline {
            if let fd = try? connectUnix(path) {
                close(fd)
                return
            }
            guard alive() else { throw BenchError("the server for \(path) exited") }
            sleepSeconds(0.005)
        }
        throw BenchError("nothing listens on \(path) after \(timeout) s")
    }
}

/// The emulator's admin API on loopback (AgentPosix's `LoopbackHTTP`), its body as text.
enum HTTP {
    static func request(port: UInt16, method: String, path: String, body: [UInt8] = []) throws -> (status: Int, body: String) {
        do {
            let answer = try LoopbackHTTP(port: port, timeout: 30).call(method, path, body: body)
            return (answer.status, String(decoding: answer.body, as: UTF8.self))
        } catch {
            throw BenchError("\(error)")
        }
    }
}
