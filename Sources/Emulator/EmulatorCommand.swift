import AgentCore
import EmulatorCore
import Foundation
import Glibc

/// `pushwoosh-emulator [--listen 127.0.0.1:8080] [--apps FILE] [--state FILE] [--require-token TOKEN]`.
public enum EmulatorCommand {
    public static let usage = """
        usage: pushwoosh-emulator [--listen HOST:PORT] [--apps FILE] [--state FILE]
                                  [--require-token TOKEN] [--threads N] [--record-limit N]
                                  [--max-connections N] [--verbose]

        A fake Pushwoosh server: the device API at /json/1.3/{method} and an admin API
        under /admin/ (PROTOCOL.md sections A and D).

          --listen HOST:PORT     IPv4 address and port (default 127.0.0.1:8080; port 0 picks a
                                 free port). Prints "listening on HOST:PORT" once bound.
          --apps FILE            JSON file with one application definition or an array of them
          --state FILE           a saved lab (GET /admin/state): apps, devices, clock offset,
                                 loaded over --apps at start (POST /admin/reset goes back to --apps)
          --require-token TOKEN  device API calls need "Authorization: Token TOKEN", else HTTP 401
          --threads N            HTTP worker threads (default: number of CPUs, at least 2)
          --record-limit N       device API calls kept for GET /admin/requests (default 20000)
          --max-connections N    connections at once, parked waits included (default 4096; the
                                 open-files limit is raised to fit)
          --verbose              log every request to standard error
          --help                 show this help
          --version              show the version

        Exit status: 0 after SIGTERM or SIGINT, 1 when the apps file or the address is
        unusable, 2 for bad arguments.
        """

    public struct Options: Sendable, Equatable {
        public var listen = "127.0.0.1:8080"
        public var appsFile: String?
        public var stateFile: String?
        public var maxConnections = 4096
        public var requireToken: String?
        public var threads = max(2, ProcessInfo.processInfo.activeProcessorCount)
        public var recordLimit = 20_000
        public var verbose = false
        public var help = false
        public var version = false

        public init() {}
    }

    public struct UsageError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    public static func parse(_ args: [String]) throws(UsageError) -> Options {
        var o = Options()
        var k = 0
        while k < args.count {
            var arg = args[k]
            var inline: String?
            if arg.hasPrefix("--"), let eq = arg.firstIndex(of: "=") {
                inline = String(arg[arg.index(after: eq)...])
                arg = String(arg[..<eq])
            }
            func value() throws(UsageError) -> String {
                if let inline { return inline }
                k += 1
                guard k < args.count else { throw UsageError(description: "\(arg) needs a value") }
                return args[k]
            }
            func number(_ range: ClosedRange<Int>) throws(UsageError) -> Int {
                let text = try value()
                guard let n = Int(text), range.contains(n) else {
                    throw UsageError(description: "\(arg): expected a number \(range.lowerBound)-\(range.upperBound), found \"\(text)\"")
                }
                return n
            }
            switch arg {
            case "--listen": o.listen = try value()
            case "--apps": o.appsFile = try value()
            case "--state": o.stateFile = try value()
            case "--max-connections": o.maxConnections = try number(16...1_000_000)
            case "--require-token":
                let t = try value()
                guard !t.isEmpty else { throw UsageError(description: "--require-token: expected a non-empty token") }
                o.requireToken = t
            case "--threads": o.threads = try number(1...256)
            case "--record-limit": o.recordLimit = try number(1...10_000_000)
            case "--verbose", "-v":
                if inline != nil { throw UsageError(description: "\(arg) takes no value") }
                o.verbose = true
            case "--help", "-h": o.help = true
            case "--version": o.version = true
            default: throw UsageError(description: "unknown argument \"\(args[k])\"")
            }
            k += 1
        }
        do {
            _ = try EmulatorServer.parseListen(o.listen)
        } catch {
            throw UsageError(description: error.description)
        }
        return o
    }

    /// Reads an apps file: one application object or an array of them.
    public static func loadApps(path: String) throws(EmulatorServerError) -> [Application] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw EmulatorServerError(description: "\(path): cannot read the file")
        }
        do throws(DefinitionError) {
            return try Application.decodeList(StrictJSONParser.parse([UInt8](data)))
        } catch {
            throw EmulatorServerError(description: "\(path): \(error.description)")
        }
    }

    /// Reads a saved lab (`GET /admin/state`); errors name the file and the field.
    public static func loadState(path: String) throws(EmulatorServerError) -> StateDocument {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw EmulatorServerError(description: "\(path): cannot read the file")
        }
        do throws(DefinitionError) {
            return try StateDocument(json: StrictJSONParser.parse([UInt8](data)))
        } catch {
            throw EmulatorServerError(description: "\(path): \(error.description)")
        }
    }

    /// Raises the soft open-files limit towards the hard one so that `connections` fit; returns the soft limit.
    @discardableResult
    public static func raiseOpenFilesLimit(toFit connections: Int) -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 0 }
        let wanted = rlim_t(connections + 64)
        if limit.rlim_cur < wanted {
            limit.rlim_cur = min(wanted, limit.rlim_max)
            _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
            _ = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        return Int(limit.rlim_cur)
    }

    /// Writes one line to standard error in a single write(2).
    @Sendable public static func logLine(_ message: String) {
        let line = "\(Timestamp.format(Date())) \(message)\n"
        _ = line.utf8CString.withUnsafeBufferPointer { write(2, $0.baseAddress, $0.count - 1) }
    }

    /// Runs the emulator until SIGTERM or SIGINT; returns the exit status.
    public static func main(_ args: [String] = Array(CommandLine.arguments.dropFirst())) -> Int32 {
        let options: Options
        do {
            options = try parse(args)
        } catch {
            FileHandle.standardError.write(Data("pushwoosh-emulator: \(error.description)\n\n\(usage)\n".utf8))
            return 2
        }
        if options.help {
            print(usage)
            return 0
        }
        if options.version {
            print(PackageVersion.line("pushwoosh-emulator"))
            return 0
        }
        // Block the stop signals in every thread (the server's threads inherit
        // the mask) and take them synchronously below with sigwait.
        var stopSignals = sigset_t()
        sigemptyset(&stopSignals)
        sigaddset(&stopSignals, SIGTERM)
        sigaddset(&stopSignals, SIGINT)
        pthread_sigmask(SIG_BLOCK, &stopSignals, nil)
        signal(SIGPIPE, SIG_IGN)

        let server: EmulatorServer
        do throws(EmulatorServerError) {
            var apps: [Application] = []
            if let file = options.appsFile {
                apps = try loadApps(path: file)
                for app in apps {
                    logLine("app loaded code=\(app.code) flags=\(app.flags.count) file=\(file)")
                }
            }
            var saved: StateDocument?
            if let file = options.stateFile {
                let doc = try loadState(path: file)
                logLine("state loaded apps=\(doc.apps.count) devices=\(doc.devices.count) clockOffsetSeconds=\(doc.clockOffset) file=\(file)")
                saved = doc
            }
            let files = raiseOpenFilesLimit(toFit: options.maxConnections)
            server = try EmulatorServer(
                listen: options.listen,
                configuration: EmulatorConfiguration(requireToken: options.requireToken, recordLimit: options.recordLimit),
                apps: apps, threads: options.threads, verbose: options.verbose, log: logLine, initialState: saved,
                connectionLimit: min(options.maxConnections, max(16, files - 64)))
            let port = try server.start()
            print("listening on \(server.host):\(port)")
            fflush(nil)
        } catch {
            FileHandle.standardError.write(Data("pushwoosh-emulator: \(error.description)\n".utf8))
            return 1
        }
        var received: Int32 = 0
        while sigwait(&stopSignals, &received) != 0 {}
        logLine("signal received signal=\(received == SIGTERM ? "SIGTERM" : "SIGINT")")
        server.stop()
        return 0
    }
}
