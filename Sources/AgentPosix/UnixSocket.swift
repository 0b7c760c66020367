import Glibc

/// Why a Unix socket could not be set up. `code` is stable; `description`
/// names the path and says what to do.
public struct UnixSocketError: Error, Sendable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        /// The path exists and is not a socket: it is never removed.
        case notASocket
        /// Another process accepts connections on the path.
        case alreadyListening
        /// The path does not fit in `sockaddr_un.sun_path` (107 bytes).
        case pathTooLong
        /// `SocketGroup` names no group.
        case unknownGroup
        /// An adopted descriptor is not a listening stream socket.
        case notListening
        /// A system call failed; see `cause`.
        case system
    }

    public let code: Code
    public let path: String
    public let cause: PosixError?
    public let detail: String?

    public init(_ code: Code, path: String, cause: PosixError? = nil, detail: String? = nil) {
        self.code = code
        self.path = path
        self.cause = cause
        self.detail = detail
    }

    public var description: String {
        switch code {
        case .notASocket:
            return "\(path) exists and is not a socket; refusing to replace it"
        case .alreadyListening:
            return "another agent is already listening on \(path)"
        case .pathTooLong:
            return "socket path \(path) is too long (at most 107 bytes)"
        case .unknownGroup:
            return "socket group \(detail ?? "?") does not exist (for \(path))"
        case .notListening:
            return "the socket passed for \(path) is not a listening stream socket"
        case .system:
            if let cause { return "\(path): \(cause)" }
            return "\(path): \(detail ?? "system error")"
        }
    }
}

/// The credentials of a connected peer process (`SO_PEERCRED`, `SO_PEERGROUPS`), as of when
/// it called `connect`.
public struct PeerCredentials: Sendable, Equatable {
    public let pid: pid_t
    public let uid: uid_t
    /// The primary group.
    public let gid: gid_t
    /// The supplementary groups the kernel holds for the process (`SO_PEERGROUPS`, Linux ≥
    /// 4.13); nil when the kernel could not say (then only `gid` counts).
    public let groups: [gid_t]?

    public init(pid: pid_t, uid: uid_t, gid: gid_t, groups: [gid_t]? = nil) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.groups = groups
    }

    /// Whether the group `target` is one of the process's: its primary group or, as the kernel
    /// says, a supplementary one (a user added with `usermod -aG`, once logged in again).
    public func isInGroup(_ target: gid_t) -> Bool {
        gid == target || groups?.contains(target) == true
    }
}

/// Glibc does not import `struct ucred` (it needs `_GNU_SOURCE`); this is
/// its layout.
private struct UCred {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
}

public enum UnixSocket {
    /// `sockaddr_un` for `path`, and the length to pass with it.
    public static func address(_ path: String) throws(UnixSocketError) -> (sockaddr_un, socklen_t) {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard !bytes.isEmpty, bytes.count < capacity, !bytes.contains(0) else {
            throw UnixSocketError(.pathTooLong, path: path)
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let length = MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + bytes.count + 1
        return (address, socklen_t(length))
    }

    /// A new `AF_UNIX` socket of `type` with `SOCK_CLOEXEC` (and
    /// `SOCK_NONBLOCK` when asked).
    public static func socket(_ type: __socket_type, nonBlocking: Bool) throws(PosixError) -> FileDescriptor {
        var flags = Int32(type.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        if nonBlocking { flags |= Int32(SOCK_NONBLOCK.rawValue) }
        return FileDescriptor(try retryingEINTR("socket") { Glibc.socket(AF_UNIX, flags, 0) })
    }

    /// A socket (stream unless told); a failure is reported as being about `path`.
    public static func makeSocket(path: String, nonBlocking: Bool, type: __socket_type = SOCK_STREAM) throws(UnixSocketError) -> FileDescriptor {
        do throws(PosixError) {
            return try socket(type, nonBlocking: nonBlocking)
        } catch {
            throw UnixSocketError(.system, path: path, cause: error)
        }
    }

    /// Connects a blocking stream socket to `path` (clients and tests).
    public static func connect(to path: String) throws(UnixSocketError) -> FileDescriptor {
        let fd = try makeSocket(path: path, nonBlocking: false)
        var (address, length) = try address(path)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd.rawValue, $0, length) }
        }
        if result == -1 {
            // An interrupted connect completes on its own; treat EINTR as failure
            // to keep the client simple.
            throw UnixSocketError(.system, path: path, cause: PosixError(errno: errno, call: "connect", path: path))
        }
        return fd
    }

    /// The credentials of the process at the other end of the connected
    /// Unix socket `fd` (`SO_PEERCRED`), with its supplementary groups (`peerGroups`).
    public static func peerCredentials(_ fd: Int32) throws(PosixError) -> PeerCredentials {
        var credentials = UCred()
        var length = socklen_t(MemoryLayout<UCred>.size)
        try retryingEINTR("getsockopt(SO_PEERCRED)") {
            getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length)
        }
        return PeerCredentials(pid: credentials.pid, uid: credentials.uid, gid: credentials.gid, groups: peerGroups(fd))
    }

    /// Linux's `SO_PEERGROUPS` (asm-generic/socket.h; Glibc does not name it).
    static let soPeerGroups: Int32 = 59

    /// The supplementary groups of the peer of the connected Unix socket `fd` as the kernel
    /// recorded them at `connect` (`SO_PEERGROUPS`, Linux ≥ 4.13); nil when the kernel does not
    /// know the option or the call fails.
    public static func peerGroups(_ fd: Int32) -> [gid_t]? {
        var groups = [gid_t](repeating: 0, count: 64)
        while true {
            var length = socklen_t(groups.count * MemoryLayout<gid_t>.size)
            let result = groups.withUnsafeMutableBytes { getsockopt(fd, SOL_SOCKET, soPeerGroups, $0.baseAddress, &length) }
            if result == 0 { return Array(groups.prefix(Int(length) / MemoryLayout<gid_t>.size)) }
            switch errno {
            case EINTR: continue
            // Too small: `length` says what is needed (at most NGROUPS_MAX, 65,536).
            case ERANGE where Int(length) > groups.count * MemoryLayout<gid_t>.size && Int(length) <= 65_536 * MemoryLayout<gid_t>.size:
                groups = [gid_t](repeating: 0, count: Int(length) / MemoryLayout<gid_t>.size)
            default: return nil
            }
        }
    }

    /// The path a Unix socket is bound to (`getsockname`), nil when it is
    /// unnamed or abstract.
    public static func boundPath(_ fd: Int32) -> String? {
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let result = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        let offset = MemoryLayout<sockaddr_un>.offset(of: \.sun_path)!
        guard result == 0, Int(length) > offset + 1 else { return nil }
        return withUnsafeBytes(of: &address.sun_path) { raw -> String? in
            guard raw[0] != 0 else { return nil }  // abstract
            let end = raw.firstIndex(of: 0) ?? raw.count
            return String(decoding: raw[..<end], as: UTF8.self)
        }
    }

    /// The id of the group called `name`, nil when there is none.
    public static func groupID(named name: String) -> gid_t? {
        lookUp { buffer in
            var entry = group()
            var result: UnsafeMutablePointer<group>?
            let size = buffer.count
            let status = getgrnam_r(name, &entry, &buffer, size, &result)
            return (status, result == nil ? nil : entry.gr_gid)
        }
    }

    /// Whether the peer `credentials` belongs to the group called `name` (`ControlGroup`
    /// checks): it is the peer's primary group or one of the supplementary groups the kernel
    /// holds for it (`SO_PEERGROUPS`). Not the group database: a process that dropped a group
    /// has left it, and one given a group (`setgroups`, `newgrp`, a new login after `usermod
    /// -aG`) is in it. False when the group does not exist.
    public static func isMember(_ credentials: PeerCredentials, ofGroup name: String) -> Bool {
        guard let target = groupID(named: name) else { return false }
        return credentials.isInGroup(target)
    }

    /// The login name of `uid`, nil when it has no passwd entry.
    public static func userName(_ uid: uid_t) -> String? {
        lookUp { buffer in
            var entry = passwd()
            var result: UnsafeMutablePointer<passwd>?
            let size = buffer.count
            let status = getpwuid_r(uid, &entry, &buffer, size, &result)
            return (status, result == nil ? nil : entry.pw_name.map { String(cString: $0) })
        }
    }

    /// Runs a reentrant `get…_r` lookup with a buffer that grows fourfold on `ERANGE` (up to
    /// 1 MiB), retrying `EINTR`. `call` returns the status and, when it found an entry, what the
    /// caller keeps of it (copied out while the buffer lives); nil when there is none or it failed.
    private static func lookUp<Found>(_ call: (inout [CChar]) -> (status: Int32, found: Found?)) -> Found? {
        var buffer = [CChar](repeating: 0, count: 1024)
        while true {
            let (status, found) = call(&buffer)
            if status == ERANGE, buffer.count < 1 << 20 {
                buffer = [CChar](repeating: 0, count: buffer.count * 4)
                continue
            }
            if status == EINTR { continue }
            return status == 0 ? found : nil
        }
    }
}
