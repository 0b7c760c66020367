import AgentCore
import AgentPosix
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
        if let watching = invocation.command.watch {
            return try watch(invocation, events: watching.events, reconnect: watching.reconnect, output: output, now: now, timeZone: timeZone)
        }
        let client = try SocketClient(path: invocation.socketPath, timeout: invocation.timeout)
        // `refresh` says what it changed: the updates heard on this connection while it is
        // waited for (the agent sends them before its answer).
        var changed: [String]?
        if case .typed(.refresh) = invocation.command.call, !invocation.json {
            let subscribed = try client.call(method: .subscribe, params: [:])
            switch subscribed.outcome {
            case .success:
                changed = []
            case .failure(let error) where subscribed.id == .null:
                // Not an answer to the request: the connection refused (-32000, the reason), its end.
                let (text, exit) = OutputFormatter.format(error: error)
                output.err(text)
                return exit
            case .failure:
                break
            }
        }
        let (method, params) = invocation.command.request
        let response = try client.call(method: method, params: params) { method, params in
            guard changed != nil, case .flagsDidUpdate(.refresh, let keys, _)? = try? SocketNotification(method: method, params: params) else { return }
            for key in keys where !changed!.contains(key) { changed!.append(key) }
        }
        let result: JSONValue
        switch response.outcome {
        case .failure(let error):
            let (text, exit) = OutputFormatter.format(error: error)
            output.err(text)
            return exit
        case .success(let value):
            result = value
        }
        var (text, exit) = OutputFormatter.format(invocation.command, result: result, json: invocation.json)
        if case .typed(.refresh) = invocation.command.call, !invocation.json, exit == .success, let answer = try? RefreshAnswer(json: result) {
            text = OutputFormatter.refresh(answer, changed: changed?.sorted())
        }
        output.out(text)
        // A fallback is never silent: the value as asked, and on standard error what it is.
        if let warning = OutputFormatter.warning(invocation.command, result: result) {
            if case .typed(.refresh) = invocation.command.call, !invocation.json {
                // "refresh: not sent (…)" on standard output says it already.
            } else {
                output.err(warning)
            }
            if invocation.strict, exit == .success { exit = .notAsAsked }
        }
        return exit
    }

    /// `watch`: subscribed; prints notifications until the agent goes away or we are
    /// interrupted. With `reconnect`, a closed connection is reopened once the agent is back,
    /// each attempt after a wait that doubles from 100 ms to 2 s (`ReconnectBackoff`), so a
    /// socket that accepts and closes at once costs a few connections a second, not thousands.
    static func watch(_ invocation: ControlInvocation, events: [SubscriptionEvent], reconnect: Bool, output: some ControlOutput,
                      now: () -> Date, timeZone: TimeZone,
                      sleep: (Double) -> Void = { usleep(UInt32($0 * 1_000_000)) }) throws(ClientError) -> ExitCode {
        let names = events.map(\.rawValue).joined(separator: ", ")
        var connected = false
        var backoff = ReconnectBackoff()
        while true {
            let client: SocketClient
            do {
                client = try SocketClient(path: invocation.socketPath, timeout: invocation.timeout)
                let (method, params) = invocation.command.request
                if case .failure(let error) = try client.call(method: method, params: params).outcome {
                    let (text, exit) = OutputFormatter.format(error: error)
                    output.err(text)
                    return exit
                }
            } catch {
                guard reconnect, connected, error.exit == .notRunning else { throw error }
                sleep(backoff.next())  // the agent is restarting: try again
                continue
            }
            let subscribedAt = monotonicSeconds()
            if connected {
                output.err("reconnected to \(invocation.socketPath); watching \(names) again")
            } else if !invocation.json {
                output.err("watching \(invocation.socketPath) for \(names) (Ctrl-C to stop)")
            }
            connected = true
            client.setTimeout(nil)
            do {
                while let line = try client.readLine() {
                    guard case .notification(let method, let params)? = try? RPCServerMessage.parse(line) else { continue }
                    output.out(OutputFormatter.formatNotification(method: method, params: params, received: now(),
                                                                  timeZone: timeZone, json: invocation.json))
                }
            } catch {
                guard reconnect else { throw error }
            }
            guard reconnect else { throw ClientError(exit: .notRunning, message: "pushwoosh-agentd closed the connection") }
            output.err("pushwoosh-agentd closed the connection; reconnecting (--reconnect)")
            // A connection that held is a restart of the agent: the waits start afresh.
            if monotonicSeconds() - subscribedAt >= ReconnectBackoff.maximum { backoff.reset() }
            sleep(backoff.next())
        }
    }
}

/// How long `watch --reconnect` waits before each attempt: 100 ms, doubling to at most 2 s,
/// back to 100 ms after a connection that held (at most a few attempts a second, however the
/// other end behaves).
struct ReconnectBackoff {
    static let initial = 0.1
    static let maximum = 2.0
    private var delay = initial

    /// The wait before the next attempt (and doubles the one after it).
    mutating func next() -> Double {
        defer { delay = min(Self.maximum, delay * 2) }
        return delay
    }

    mutating func reset() { delay = Self.initial }
}
