import CSystemd
import Glibc

extension SystemdNotifier {
    /// The descriptors passed by socket activation with their names
    /// (`FileDescriptorName=`, from `LISTEN_FDNAMES`; systemd's default is the socket
    /// unit's name). Like `listenFDs()`, it unsets `LISTEN_*`: call it once, at start,
    /// before other threads exist.
    public static func namedListenFDs() -> [(fd: Int32, name: String)] {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let count = sd_listen_fds_with_names(1, &names)
        guard count > 0 else { return [] }
        defer {
            if let names {
                for i in 0..<Int(count) { free(names[i]) }
                free(names)
            }
        }
        return (0..<count).map { i in
            let name = names?[Int(i)].map { String(cString: $0) } ?? "unknown"
            return (Int32(SD_LISTEN_FDS_START) + i, name)
        }
    }

    /// Whether `fd` is a listening stream socket of any family (the HTTP interface takes
    /// TCP and Unix sockets).
    public static func isListeningStreamSocket(_ fd: Int32) -> Bool {
        sd_is_socket(fd, AF_UNSPEC, Int32(SOCK_STREAM.rawValue), 1) > 0
    }
}
