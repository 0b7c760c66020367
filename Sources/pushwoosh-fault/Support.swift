// pushwoosh-fault: small helpers on AgentPosix and HarnessSupport (the notify receiver, the spawner).

import AgentCore
import AgentPosix
import AgentWire
import Foundation
import Glibc
import HarnessSupport
import Launcher
import ToolSupport

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

/// Starts `argv` with stdout to `stdoutPath` and stderr to `stderrPath`; returns the pid.
func spawn(_ argv: [String], environment: [String: String], stdoutPath: String = "/dev/null", stderrPath: String) throws -> pid_t {
    switch ChildProcess.spawn(path: argv[0], arguments: Array(argv.dropFirst()), environment: environment,
                              output: .files(stdout: stdoutPath, stderr: stderrPath)) {
    case .success(let pid): return pid
    case .failure(let error): throw Failure("posix_spawn \(argv[0]): \(error.message)")
    }
}
