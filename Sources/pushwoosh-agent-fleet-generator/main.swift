// pushwoosh-agent-fleet-generator NORMAL_DIR [EARLY_DIR LATE_DIR]: the systemd generator
// (systemd.generator(7)) of docs/fleet.md E.1. systemd runs it at boot and at every
// `systemctl daemon-reload`; it turns /etc/pushwoosh-agent/fleet.conf into instances
// wanted by pushwoosh-agent-fleet.target (AgentFleet's FleetGenerator), written into
// NORMAL_DIR. No fleet.conf: nothing is written. A bad one: one line naming file, line and
// key on standard error (and /dev/kmsg, where systemd's generator logs go), exit 1, and
// nothing is written, so the running devices are left alone. Nothing goes to standard output.
//
// For tests and by hand: --manifest FILE and --unit-dir DIR (default: the units beside
// this program, ../../system from lib/systemd/system-generators).
import AgentConfigFile
import AgentCore
import AgentFleet
import AgentPosix
import Glibc

let program = "pushwoosh-agent-fleet-generator"

func report(_ message: String) {
    let line = "\(program): \(message)\n"
    var bytes = Array(line.utf8)
    _ = bytes.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
    // The journal has the line already when standard error is the kernel log.
    var err = stat(), kmsg = stat()
    guard fstat(2, &err) == 0, stat("/dev/kmsg", &kmsg) == 0, err.st_rdev != kmsg.st_rdev else { return }
    let fd = open("/dev/kmsg", O_WRONLY | O_CLOEXEC)
    guard fd >= 0 else { return }
    var prefixed = Array("<3>".utf8) + bytes
    _ = prefixed.withUnsafeMutableBytes { write(fd, $0.baseAddress, $0.count) }
    close(fd)
}

func fail(_ message: String, status: Int32 = 1) -> Never {
    report(message)
    exit(status)
}

/// The directory of the units the package installed, from where this program lives.
func defaultUnitDirectory() -> String {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    guard n > 0 else { return "/lib/systemd/system" }
    let exe = String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    var parts = exe.split(separator: "/", omittingEmptySubsequences: false)
    guard parts.count > 2, parts[parts.count - 2] == "system-generators" else { return "/lib/systemd/system" }
    parts.removeLast(2)
    return parts.joined(separator: "/") + "/system"
}

/// Directories made so far: 1,000 instances make 2,000 drop-in directories below one
/// output directory, and each is made once.
nonisolated(unsafe) var made: Set<String> = []

func makeDirectories(_ path: String) throws(PosixError) {
    guard !made.contains(path) else { return }
    if mkdir(path, 0o755) != 0 {
        switch errno {
        case EEXIST: break
        case ENOENT:
            guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else {
                throw PosixError(errno: ENOENT, call: "mkdir", path: path)
            }
            try makeDirectories(String(path[..<slash]))
            if mkdir(path, 0o755) != 0, errno != EEXIST { throw PosixError(errno: errno, call: "mkdir", path: path) }
        default: throw PosixError(errno: errno, call: "mkdir", path: path)
        }
    }
    made.insert(path)
}

func writeEntry(_ entry: GeneratedEntry, into directory: String) throws(PosixError) {
    let path = directory + "/" + entry.path
    let parent = String(path[..<path.lastIndex(of: "/")!])
    try makeDirectories(parent)
    switch entry {
    case .symlink(_, let target):
        if symlink(target, path) != 0 { throw PosixError(errno: errno, call: "symlink", path: path) }
    case .file(_, let contents):
        try writeWholeFile(path, Array(contents.utf8))
    }
}

var manifestPath = FleetManifest.defaultPath
var unitDirectory: String?
var directories: [String] = []
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--manifest":
        guard let value = arguments.popFirst() else { fail("--manifest needs a file", status: 2) }
        manifestPath = value
    case "--unit-dir":
        guard let value = arguments.popFirst() else { fail("--unit-dir needs a directory", status: 2) }
        unitDirectory = value
    case "--version":
        print(PackageVersion.line(program))
        exit(0)
    case "--help", "-h":
        print("""
            usage: \(program) [--manifest FILE] [--unit-dir DIR] NORMAL_DIR [EARLY_DIR LATE_DIR]

            The systemd generator of the device fleet: turns \(FleetManifest.defaultPath) into
            pushwoosh-agent@NAME instances wanted by pushwoosh-agent-fleet.target, written into
            NORMAL_DIR. systemd runs it at boot and at every daemon-reload.

              --manifest FILE   the fleet's configuration (default \(FleetManifest.defaultPath))
              --unit-dir DIR    where the package's units are (default: beside this program)
              --version         the version
            """)
        exit(0)
    default:
        guard !argument.hasPrefix("-") else { fail("unknown option \(argument)", status: 2) }
        directories.append(argument)
    }
}
guard directories.count == 1 || directories.count == 3, let normal = directories.first else {
    fail("usage: \(program) [--manifest FILE] [--unit-dir DIR] NORMAL_DIR [EARLY_DIR LATE_DIR]", status: 2)
}
guard access(manifestPath, F_OK) == 0 else { exit(0) }  // no fleet on this host
let manifest: FleetManifest
do {
    manifest = try FleetManifest.load(manifestPath)
} catch {
    fail("\(error); no fleet instances generated (running ones are left alone)")
}
for entry in FleetGenerator.entries(for: manifest, unitDirectory: unitDirectory ?? defaultUnitDirectory()) {
    do {
        try writeEntry(entry, into: normal)
    } catch {
        fail("\(error)")
    }
}
exit(0)
