// pushwoosh-fault: small helpers on HarnessSupport (the line client, the notify receiver).

import AgentCore
import AgentPosix
import AgentWire
import Foundation
import Glibc
import HarnessSupport

// MARK: - Small helpers (the rest is HarnessSupport's)

struct Failure: Error, CustomStringConvertible {
    let description: String
    init(_ text: String) { description = text }
}

func die(_ text: String) -> Never {
    FileHandle.standardError.write(Data("pushwoosh-fault: \(text)\n".utf8))
    exit(2)
}

extension NotifyReceiver {
    /// Waits up to `timeout` for a datagram containing `needle`.
    func wait(containing needle: String, timeout: Double) -> String? {
        let deadline = monotonicSeconds() + timeout
        while true {
            let left = deadline - monotonicSeconds()
            guard left > 0, let message = receive(timeout: left) else { return nil }
            if message.contains(needle) { return message }
        }
    }
}

extension LineClient {
    /// One request, one answer (no pipelining: the answer is the next line), as a typed JSON value.
    func request(_ method: SocketMethod, _ params: [String: JSONValue] = [:], id: Int = 1) -> JSONValue? {
        guard send(RPCEncoder.request(id: .number(Double(id)), method: method, params: params)), let line = readLineBytes() else { return nil }
        return try? JSONReader.parse(line)
    }
}

/// Starts `argv` with stdout to `stdoutPath` and stderr to `stderrPath`; returns the pid.
func spawn(_ argv: [String], environment: [String: String], stdoutPath: String = "/dev/null", stderrPath: String) throws -> pid_t {
    switch ChildProcess.spawn(path: argv[0], arguments: Array(argv.dropFirst()), environment: environment,
                              output: .files(stdout: stdoutPath, stderr: stderrPath)) {
    case .success(let pid): return pid
    case .failure(let error): throw Failure("posix_spawn \(argv[0]): \(error.message)")
    }
}
