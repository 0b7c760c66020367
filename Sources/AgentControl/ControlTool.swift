import AgentCore
import AgentWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Where the CLI writes. The real one writes unbuffered to the standard streams.
public protocol ControlOutput {
    func out(_ line: String)
    func err(_ line: String)
}

/// Standard output and error, one `write(2)` per line (so `watch | …` sees each line at once).
/// A reader that went away (`fleet metrics | grep -q …`, `watch | head`) ends the command
/// quietly with exit code 0, as if it had finished: it did what it was asked to.
public struct StandardOutput: ControlOutput {
    public init() {}
    public func out(_ line: String) { Self.write(1, line + "\n") }
    public func err(_ line: String) { Self.write(2, line + "\n") }

    static func write(_ fd: Int32, _ text: String) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if n > 0 { bytes = bytes.dropFirst(n); continue }
            if n < 0, errno == EINTR { continue }
            if n < 0, errno == EPIPE { exit(0) }
            return  // another failure: nothing better to say it on
        }
    }
}

/// `pushwoosh-agentctl`: parse, connect, call, print, exit.
public enum ControlTool {
    public static func run(arguments: [String], environment: [String: String], output raw: some ControlOutput,
                           now: () -> Date = Date.init, timeZone: TimeZone = .current) -> Int32 {
        // Output is data: no control character from an answer reaches the terminal raw.
        let output = VisibleOutput(base: raw)
        let invocation: ControlInvocation
        do {
            switch try ControlArguments.parse(arguments, environment: environment) {
            case .help(let text):
                output.out(text)
                return ExitCode.success.rawValue
            case .run(let parsed):
                invocation = parsed
            case .fleet(let fleet):
                return FleetTool.run(fleet, output: output, now: now).rawValue
            }
        } catch {
            output.err(error.description)
            return ExitCode.usage.rawValue
        }
        do {
            return try execute(invocation, output: output, now: now, timeZone: timeZone).rawValue
        } catch {
            output.err("pushwoosh-agentctl: " + error.message)
            return error.exit.rawValue
        }
    }

    static func execute(_ invocation: ControlInvocation, output: some ControlOutput, now: () -> Date,
                        timeZone: TimeZone) throws(ClientError) -> ExitCode {
        let client = try SocketClient(path: invocation.socketPath, timeout: invocation.timeout)
        let (method, params) = invocation.command.request
        let response = try client.call(method: method, params: params)
        let result: JSONValue
        switch response.outcome {
        case .failure(let error):
            let (text, exit) = OutputFormatter.format(error: error)
            output.err(text)
            return exit
        case .success(let value):
            result = value
        }
        guard case .watch = invocation.command else {
            let (text, exit) = OutputFormatter.format(invocation.command, result: result, json: invocation.json)
            output.out(text)
            return exit
        }
        // watch: subscribed; print notifications until the agent goes away or we are interrupted.
        client.setTimeout(nil)
        if !invocation.json { output.err("watching \(invocation.socketPath) for flag updates (Ctrl-C to stop)") }
        while let line = try client.readLine() {
            guard case .notification(let method, let params)? = try? RPCServerMessage.parse(line) else { continue }
            output.out(OutputFormatter.formatNotification(method: method, params: params, at: now(),
                                                          timeZone: timeZone, json: invocation.json))
        }
        throw ClientError(exit: .notRunning, message: "pushwoosh-agentd closed the connection")
    }
}
