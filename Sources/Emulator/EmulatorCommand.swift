import AgentCore
import AgentPosix
import EmulatorCore
import Foundation
import Glibc
import Lab

/// `pushwoosh-emulator [--listen 127.0.0.1:8080] [--apps FILE] [--state FILE] [--require-token FILE] [--admin-token FILE]`.
public enum EmulatorCommand {
    public static let usage = """
        usage: pushwoosh-emulator [--listen HOST:PORT] [--apps FILE] [--state FILE]
                                  [--require-token FILE] [--admin-token FILE] [--allow-remote]
                                  [--threads N] [--record-limit N] [--max-connections N]
                                  [--idle-timeout SECONDS] [--verbose]
                                  [--tls-cert FILE --tls-key FILE]
                                  [--upstream URL [--record FILE.har] | --replay FILE.har]
                                  [--lab DIR [--agentd PATH]]
               pushwoosh-emulator --apps-from-har FILE.har

        A fake Pushwoosh server: the device API at /json/1.3/{method} and an admin API
        under /admin/ (docs/device-api.md A and D).

          --listen HOST:PORT     IPv4 address and port (default 127.0.0.1:8080; port 0 picks a
                                 free port). Prints "listening on HOST:PORT" once bound. Only
                                 loopback addresses (127.0.0.0/8) unless --allow-remote.
          --apps FILE            JSON file with one application definition or an array of them
          --state FILE           a saved lab (GET /admin/state): apps, devices, clock offset,
                                 loaded over --apps at start (POST /admin/reset goes back to --apps)
          --require-token FILE   device API calls need "Authorization: Token TOKEN", TOKEN being
                                 the file's content, else HTTP 401 (read as --admin-token's: no
                                 secret on the command line)
          --admin-token FILE     the admin API (/admin/...) needs "Authorization: Bearer TOKEN",
                                 TOKEN being the file's content, else HTTP 401
          --allow-remote         allow a --listen address other hosts can reach (then lock the
                                 admin API with --admin-token; with --lab it is required)
          --threads N            HTTP worker threads (default: number of CPUs, at least 2)
          --record-limit N       device API calls kept for GET /admin/requests (default 20000)
          --max-connections N    connections at once, parked waits included (default 4096; the
                                 open-files limit is raised to fit); past it a new connection
                                 closes the one idle the longest (sent nothing, or between
                                 requests), never one whose request is being handled
          --idle-timeout SECONDS a connection quiet this long is closed (default 30; a parked
                                 wait or a delayed answer is not quiet)
          --tls-cert FILE        serve HTTPS with this certificate (PEM; the chain, leaf first)
          --tls-key FILE         and this private key (PEM, readable by this user only); both or neither
          --upstream URL         forward the device API to URL (e.g. the real server's
                                 https://CODE.api.pushwoosh.com/json/1.3/); faults, waits and
                                 the admin API keep working on top
          --record FILE.har      with --upstream: append each exchange to a HAR 1.2 file (0600,
                                 never through a symlink), with Authorization, X-Api-Key, Cookie,
                                 hwid, userId, push_token (any case, JSON or form bodies) and
                                 the URL's credentials replaced by stable placeholders (HWID-1,
                                 API-TOKEN-1, ...); an existing file continues its numbering
          --replay FILE.har      answer the device API from a recording: per method, in order,
                                 the last answer repeated; faults and waits on top
          --apps-from-har FILE   print an --apps definition serving the recorded flags, and exit
          --lab DIR              serve the lab at /lab/ (docs/lab.md): devices started
                                 (pushwoosh-agentd children, their state under DIR/devices/NAME),
                                 attached, called, restarted and moved together by one clock;
                                 the devices end with the lab. DIR must be this user's and
                                 writable by no one else. The lab is always locked: under
                                 --admin-token, else a new token in DIR/token (0600, made at
                                 each start; "lab token: DIR/token" is printed). Whoever holds
                                 the token runs programs as this user; a lab needs no root
          --agentd PATH          the daemon the lab starts (default: beside this binary, then PATH)
          --verbose              log every request to standard error
          --help                 show this help
          --version              show the version

        The request log (GET /admin/requests) shows an Authorization header's scheme only
        ("Token [redacted]"), and neither token anywhere. Request bodies are limited to 1 MiB
        on the device API and 8 MiB on the admin API (HTTP 413).

        Exit status: 0 after SIGTERM or SIGINT, 1 when the apps, state or token file or the
        address is unusable, 2 for bad arguments or a --lab DIR that is not this user's own.
        """

    public struct Options: Sendable, Equatable {
        public var listen = "127.0.0.1:8080"
        public var appsFile: String?
        public var stateFile: String?
        public var maxConnections = 4096
        public var idleTimeout = EmulatorServer.defaultIdleTimeout
        /// `--require-token FILE`: the file; the device API's token is read from it at start.
        public var requireTokenFile: String?
        /// `--admin-token FILE`: the file; its token is read at start.
        public var adminTokenFile: String?
        public var allowRemote = false
        public var threads = max(2, ProcessInfo.processInfo.activeProcessorCount)
        public var recordLimit = 20_000
        public var verbose = false
        public var help = false
        public var version = false
        public var tlsCertificate: String?
        public var tlsKey: String?
        public var upstream: String?
        public var recordFile: String?
        public var replayFile: String?
        public var appsFromHAR: String?
        public var labDirectory: String?
        public var agentd: String?

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
            case "--idle-timeout": o.idleTimeout = try number(1...86_400)
            case "--require-token":
                let file = try value()
                guard !file.isEmpty else { throw UsageError(description: "--require-token: expected a file name") }
                o.requireTokenFile = file
            case "--admin-token":
                let file = try value()
                guard !file.isEmpty else { throw UsageError(description: "--admin-token: expected a file name") }
                o.adminTokenFile = file
            case "--allow-remote":
                if inline != nil { throw UsageError(description: "\(arg) takes no value") }
                o.allowRemote = true
            case "--threads": o.threads = try number(1...256)
            case "--record-limit": o.recordLimit = try number(1...10_000_000)
            case "--tls-cert": o.tlsCertificate = try value()
            case "--tls-key": o.tlsKey = try value()
            case "--upstream":
                let text = try value()
                guard let url = PushwooshAPI.normalizedServerURL(text) else {
                    throw UsageError(description: "--upstream: expected an http:// or https:// URL with a host, found \"\(text)\"")
                }
                o.upstream = url
            case "--record": o.recordFile = try value()
            case "--replay": o.replayFile = try value()
            case "--apps-from-har": o.appsFromHAR = try value()
            case "--lab":
                let dir = try value()
                guard dir.hasPrefix("/") || !dir.isEmpty else { throw UsageError(description: "--lab needs a directory") }
                o.labDirectory = dir
            case "--agentd": o.agentd = try value()
            case "--verbose", "-v":
                if inline != nil { throw UsageError(description: "\(arg) takes no value") }
                o.verbose = true
            case "--help", "-h": o.help = true
            case "--version": o.version = true
            default: throw UsageError(description: "unknown argument \"\(args[k])\"")
            }
            k += 1
        }
        if o.recordFile != nil && o.upstream == nil { throw UsageError(description: "--record needs --upstream URL") }
        if o.agentd != nil && o.labDirectory == nil { throw UsageError(description: "--agentd needs --lab DIR") }
        if o.replayFile != nil && o.upstream != nil { throw UsageError(description: "--replay and --upstream exclude each other") }
        if (o.tlsCertificate == nil) != (o.tlsKey == nil) {
            throw UsageError(description: o.tlsKey == nil ? "--tls-cert needs --tls-key" : "--tls-key needs --tls-cert")
        }
        let host: String
        do {
            host = try EmulatorServer.parseListen(o.listen).0
        } catch {
            throw UsageError(description: error.description)
        }
        if o.allowRemote, o.labDirectory != nil, o.adminTokenFile == nil {
            throw UsageError(description: "--allow-remote with --lab needs --admin-token FILE: whoever reaches a lab runs programs "
                             + "as its user, so a lab other hosts can reach is never without a token of your choosing")
        }
        if !o.allowRemote, !host.hasPrefix("127.") {
            throw UsageError(description: "--listen \(o.listen): not a loopback address: other hosts could reach the device and admin APIs; "
                             + "add --allow-remote to mean it (and lock the admin API with --admin-token FILE)")
        }
        return o
    }

    /// Reads `--admin-token FILE` (`loadToken`).
    public static func loadAdminToken(path: String) throws(EmulatorServerError) -> String {
        try loadToken(path: path, option: "--admin-token")
    }

    /// Reads an apps file: one application object or an array of them.
    public static func loadApps(path: String) throws(EmulatorServerError) -> [Application] {
        let data: [UInt8]
        do throws(DefinitionError) { data = try readInput(path, maxBytes: maxDefinitionBytes) } catch {
            throw EmulatorServerError(description: "\(path): \(error.message)")
        }
        do throws(DefinitionError) {
            return try Application.decodeList(StrictJSONParser.parse(data))
        } catch {
            throw EmulatorServerError(description: "\(path): \(error.description)")
        }
    }

    /// Reads a saved lab (`GET /admin/state`); errors name the file and the field.
    public static func loadState(path: String) throws(EmulatorServerError) -> StateDocument {
        let data: [UInt8]
        do throws(DefinitionError) { data = try readInput(path, maxBytes: maxDefinitionBytes) } catch {
            throw EmulatorServerError(description: "\(path): \(error.message)")
        }
        do throws(DefinitionError) {
            return try StateDocument(json: StrictJSONParser.parse(data))
        } catch {
            throw EmulatorServerError(description: "\(path): \(error.description)")
        }
    }

    /// Raises the soft open-files limit towards the hard one so that `connections` fit; returns the soft limit.
    @discardableResult
    public static func raiseOpenFilesLimit(toFit connections: Int) -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 0 }
        let wanted = rlim_t(connections + 64 + EmulatorServer.acceptReserve)
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
        if let file = options.appsFromHAR {
            do throws(EmulatorServerError) {
                print(JSONWriter.string(try appsFromHAR(path: file)))
                return 0
            } catch {
                FileHandle.standardError.write(Data("pushwoosh-emulator: \(error.description)\n".utf8))
                return 1
            }
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
        var lab: LabDirectory?
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
            var adminToken = try options.adminTokenFile.map { (file) throws(EmulatorServerError) in try loadAdminToken(path: file) }
            let requireToken = try options.requireTokenFile.map { (file) throws(EmulatorServerError) in try loadRequireToken(path: file) }
            if adminToken != nil { logLine("admin API locked: Authorization: Bearer token from \(options.adminTokenFile ?? "")") }
            if let directory = options.labDirectory {
                guard let prepared = prepareLab(directory, adminToken: adminToken, options: options) else { return 2 }
                lab = prepared
                adminToken = prepared.token
            }
            var tls: TLSIdentity?
            if let certificate = options.tlsCertificate, let key = options.tlsKey {
                tls = try TLSIdentity.load(certificate: certificate, key: key)
            }
            var replay: Recording?
            if let file = options.replayFile {
                replay = try loadRecording(path: file)
                logLine("replay loaded methods=\(replay!.answers.keys.sorted().joined(separator: ",")) file=\(file)")
            }
            var upstream: Upstream?
            if let url = options.upstream {
                let recorder = try options.recordFile.map { (path) throws(EmulatorServerError) in try HARRecorder(path: path) }
                upstream = Upstream(baseURL: url, recorder: recorder, log: logLine)
                logLine("upstream url=\(Redactor.hidingCredentials(url)) record=\(options.recordFile ?? "-")")
            }
            let files = raiseOpenFilesLimit(toFit: options.maxConnections)
            server = try EmulatorServer(
                listen: options.listen,
                configuration: EmulatorConfiguration(requireToken: requireToken, recordLimit: options.recordLimit,
                                                     upstream: options.upstream, replay: replay, adminToken: adminToken),
                apps: apps, threads: options.threads, verbose: options.verbose, log: logLine, initialState: saved,
                connectionLimit: min(options.maxConnections, max(16, files - 64 - EmulatorServer.acceptReserve)),
                idleTimeout: options.idleTimeout, tls: tls, upstream: upstream)
            let port = try server.start()
            if let lab {
                try server.startLab(lab.directory, agentd: options.agentd)
            }
            // The token's file first: a client that has read "listening on" finds it said.
            if let lab { print("lab token: \(options.adminTokenFile ?? lab.directory.file(LabDirectory.tokenFile))") }
            print("listening on \(server.host):\(port)")
            fflush(nil)
        } catch {
            FileHandle.standardError.write(Data("pushwoosh-emulator: \(error.description)\n".utf8))
            return 1
        }
        var received: Int32 = 0
        while sigwait(&stopSignals, &received) != 0 {}
        logLine("signal received signal=\(received == SIGTERM ? "SIGTERM" : "SIGINT")")
        server.stopLab()
        server.stop()
        return 0
    }

    /// `--lab DIR` made ready (`LabDirectory.prepare`), or nil once the refusal is said (exit 2).
    static func prepareLab(_ directory: String, adminToken: String?, options: Options) -> LabDirectory? {
        do throws(PrivateDirectoryError) {
            return try LabDirectory.prepare(directory, adminToken: adminToken, adminTokenFile: options.adminTokenFile, log: logLine)
        } catch {
            FileHandle.standardError.write(Data("pushwoosh-emulator: --lab \(error.description)\n".utf8))
            return nil
        }
    }
}
