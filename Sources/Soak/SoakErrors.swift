import AgentCore
import AgentPosix
import Glibc
import ToolSupport

/// A command line the soak runner cannot take: the option at fault and what is wrong with it
/// (`-h`/`--help` comes as `.help`: the usage, exit 0).
public struct SoakOptionError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Problem: Sendable, Equatable {
        /// The option is the last argument.
        case missingValue
        /// Its value, as given, and what was expected instead.
        case badValue(String, expected: String)
        case unknown
        case help
        /// Options that `--real-timings` overrides (its timings are the SDK's own), all of them as given.
        case notWithRealTimings([String])
    }

    /// As on the command line (`--agents`).
    public var option: String
    public var problem: Problem

    public init(_ option: String, _ problem: Problem) {
        self.option = option
        self.problem = problem
    }

    /// 0 for `--help`, 2 (usage error) otherwise.
    public var exitCode: Int32 { problem == .help ? 0 : 2 }

    public var description: String {
        switch problem {
        case .missingValue: "\(option) needs a value"
        case .badValue(let value, let expected): "\(option): expected \(expected), found \"\(value)\""
        case .unknown: "unknown option \(option)\n\n\(SoakOptions.usage)"
        case .help: SoakOptions.usage
        case .notWithRealTimings(let options):
            "\(options.joined(separator: ", ")) cannot be used with --real-timings (it runs the SDK's own timings: "
                + "24h lifetime, 30m session gap, 1h refresh, 5m throttle)"
        }
    }
}

/// A process of the run (the emulator, an agent) that could not be started.
public struct SoakProcessError: Error, Sendable, CustomStringConvertible {
    public enum Why: Sendable, Equatable {
        /// Not an executable file (the `--bin` directory is wrong).
        case notExecutable
        /// `posix_spawn` failed.
        case spawn(PosixError)
        /// It never announced its port; `exit` if it exited, the last lines of its log.
        case noPort(within: Double, exit: String?, logTail: [String])
        /// Its lab's token (`lab token: FILE`) could not be read: the file and why.
        case noLabToken(String)
    }

    /// What it is (`emulator`, `agent-2`) and its executable.
    public var name: String
    public var binary: String
    public var why: Why

    public init(name: String, binary: String, _ why: Why) {
        self.name = name
        self.binary = binary
        self.why = why
    }

    public var description: String {
        switch why {
        case .notExecutable: "no executable \(binary) (use --bin DIR)"
        case .spawn(let error): "cannot start the \(name) (\(binary)): \(error.call): \(error.message)"
        case .noPort(let seconds, let exit, let logTail):
            "the \(name) (\(binary)) did not start: no port announced within \(TimeSpan.format(seconds))"
                + (exit.map { " (it exited: \($0))" } ?? "") + ": " + logTail.joined(separator: " | ")
        case .noLabToken(let why): "the \(name) (\(binary)) started its lab, but its token cannot be read: \(why)"
        }
    }
}

/// A file or directory the runner could not write (its work directory, an agent's
/// configuration, the report, summary.json, report.html, the JUnit file): the path, the call
/// and errno.
public struct SoakFileError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What the file is for (`the report`, `agent 0's configuration`).
    public var what: String
    public var path: String
    public var call: String
    public var errno: Int32

    public init(_ what: String, path: String, call: String, errno: Int32) {
        self.what = what
        self.path = path
        self.call = call
        self.errno = errno
    }

    public var description: String {
        "cannot write \(what): \(call) \(path): \(String(cString: strerror(errno))) (errno \(errno))"
    }
}

/// A socket call to one of the run's agents that brought no usable answer: the agent (index
/// and HWID), the method and why.
public struct AgentCallError: Error, Sendable, Equatable, CustomStringConvertible {
    public var agent: Int
    /// Empty before the agent's first `status`.
    public var hwid: String
    public var method: String
    public var why: String

    public init(agent: Int, hwid: String, method: String, why: String) {
        self.agent = agent
        self.hwid = hwid
        self.method = method
        self.why = why
    }

    public var description: String {
        "agent \(agent)\(hwid.isEmpty ? "" : " (\(hwid))"): \(method): \(why)"
    }
}

/// Why a run could not be set up or finished (exit 2): each case names what failed.
public enum SoakError: Error, Sendable, CustomStringConvertible {
    case process(SoakProcessError)
    case emulator(EmulatorCallError)
    case file(SoakFileError)
    /// No `--apps` file, and none found next to the binaries.
    case noApps
    /// An output directory (the report's, the JUnit file's) that others than its owner can write.
    case unsafeDirectory(UnsafeDirectory)

    public var description: String {
        switch self {
        case .process(let e): e.description
        case .emulator(let e): e.description
        case .file(let e): e.description
        case .noApps: "cannot find config/flags.example.json (use --apps FILE)"
        case .unsafeDirectory(let e): e.description
        }
    }
}

/// Creates `path` and its missing parents (mode 0755); an error naming the directory and errno.
func makeDirectories(_ path: String, for what: String) throws(SoakFileError) {
    var prefix = path.hasPrefix("/") ? "" : "."
    for part in path.split(separator: "/") {
        prefix += "/" + part
        if mkdir(prefix, 0o755) != 0, errno != EEXIST {
            throw SoakFileError(what, path: prefix, call: "mkdir", errno: errno)
        }
    }
}
