import AgentPosix
import Foundation
import Glibc

// What /proc says of a process: the benchmark's figures, the soak's samples and the tests'
// memory bounds read it here.

/// A text file read to its end (procfs files report size 0); nil when it cannot be read.
public func readText(_ path: String) -> String? {
    (try? readWholeFile(path)).map { String(decoding: $0, as: UTF8.self) }
}

/// /proc readings.
public enum ProcStats {
    public static let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))

    /// User + system CPU seconds of `pid` (all threads), from /proc/PID/stat.
    public static func cpuSeconds(pid: pid_t) -> Double? {
        guard let text = readText("/proc/\(pid)/stat"), let close = text.lastIndex(of: ")") else { return nil }
        // Fields after "(comm)": state is field 3; utime 14, stime 15.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / ticksPerSecond
    }

    /// Whether `pid` runs (exists and is not a zombie waiting to be reaped).
    public static func isAlive(_ pid: pid_t) -> Bool {
        guard let text = readText("/proc/\(pid)/stat"), let close = text.lastIndex(of: ")") else { return false }
        return text[text.index(after: close)...].split(separator: " ").first != "Z"
    }

    public static func selfCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    /// A `Vm*` field of /proc/PID/status in KiB.
    public static func status(pid: pid_t, field: String) -> Int? {
        Self.field(field, in: "/proc/\(pid)/status")
    }

    /// A field of /proc/PID/smaps_rollup in KiB (`Pss`, `Private_Dirty`, `Shared_Clean`…):
    /// what the process costs beyond the library pages every agent on the host shares.
    public static func smaps(pid: pid_t, field: String) -> Int? {
        self.field(field, in: "/proc/\(pid)/smaps_rollup")
    }

    private static func field(_ field: String, in path: String) -> Int? {
        guard let text = readText(path) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(field + ":") {
            let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            if parts.count >= 2 { return Int(parts[1]) }
        }
        return nil
    }

    public struct ThreadSample: Sendable {
        public var tid: Int
        public var name: String
        public var voluntary: Int
        public var nonvoluntary: Int
        /// The first field of /proc/PID/task/TID/syscall: what it is blocked in.
        public var syscall: String
    }

    public static func threads(pid: pid_t) -> [ThreadSample] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        var samples: [ThreadSample] = []
        for entry in entries {
            guard let tid = Int(entry), let status = readText("/proc/\(pid)/task/\(tid)/status") else { continue }
            var sample = ThreadSample(tid: tid, name: "?", voluntary: 0, nonvoluntary: 0, syscall: "?")
            for line in status.split(separator: "\n") {
                let parts = line.split(separator: ":", maxSplits: 1)
                guard parts.count == 2 else { continue }
                let value = parts[1].trimmingCharacters(in: .whitespaces)
                switch parts[0] {
                case "Name": sample.name = value
                case "voluntary_ctxt_switches": sample.voluntary = Int(value) ?? 0
                case "nonvoluntary_ctxt_switches": sample.nonvoluntary = Int(value) ?? 0
                default: break
                }
            }
            if let text = readText("/proc/\(pid)/task/\(tid)/syscall"),
               let first = text.split(separator: " ").first.map(String.init)?.trimmingCharacters(in: .whitespacesAndNewlines) {
                sample.syscall = syscallName(first)
            }
            samples.append(sample)
        }
        return samples.sorted { $0.tid < $1.tid }
    }

    /// x86-64 numbers of the blocking calls seen in practice.
    public static func syscallName(_ number: String) -> String {
        let names: [String: String] = [
            "0": "read", "7": "poll", "23": "select", "202": "futex", "232": "epoll_wait", "281": "epoll_pwait",
            "270": "pselect6", "271": "ppoll", "35": "nanosleep", "230": "clock_nanosleep", "61": "wait4",
            "128": "rt_sigtimedwait", "441": "epoll_pwait2", "45": "recvfrom", "47": "recvmsg",
        ]
        return names[number] ?? (number == "running" ? "running" : "syscall \(number)")
    }
}
