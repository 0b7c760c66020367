import CLinux
import Glibc

// epoll, eventfd and signalfd come from glibc through the `CLinux` shim (the toolchain's
// Glibc module does not import their headers). The event loop reads and writes
// `struct epoll_event` as bytes at the offsets the C compiler gives: the struct is packed
// on x86_64 (12 bytes) and naturally aligned elsewhere (16 bytes).
enum Linux {
    static func epollCreate1(_ flags: Int32) -> Int32 { epoll_create1(flags) }

    static func epollCtl(_ epfd: Int32, _ op: Int32, _ fd: Int32, _ event: UnsafeMutableRawPointer?) -> Int32 {
        epoll_ctl(epfd, op, fd, event?.assumingMemoryBound(to: epoll_event.self))
    }

    static func epollWait(_ epfd: Int32, _ events: UnsafeMutableRawPointer?, _ maxEvents: Int32, _ timeout: Int32) -> Int32 {
        epoll_wait(epfd, events?.assumingMemoryBound(to: epoll_event.self), maxEvents, timeout)
    }

    static func eventFD(_ initial: UInt32, _ flags: Int32) -> Int32 { eventfd(initial, flags) }

    static func signalFD(_ fd: Int32, _ mask: UnsafePointer<sigset_t>, _ flags: Int32) -> Int32 {
        signalfd(fd, mask, flags)
    }

    static let EPOLLIN = CLinux.EPOLLIN.rawValue
    static let EPOLLOUT = CLinux.EPOLLOUT.rawValue
    static let EPOLLERR = CLinux.EPOLLERR.rawValue
    static let EPOLLHUP = CLinux.EPOLLHUP.rawValue
    static let EPOLLRDHUP = CLinux.EPOLLRDHUP.rawValue
    static let EPOLL_CTL_ADD = CLinux.EPOLL_CTL_ADD
    static let EPOLL_CTL_DEL = CLinux.EPOLL_CTL_DEL
    static let EPOLL_CTL_MOD = CLinux.EPOLL_CTL_MOD

    static let epollEventSize = MemoryLayout<epoll_event>.size
    static let epollDataOffset = MemoryLayout<epoll_event>.offset(of: \epoll_event.data)!
    static let signalfdSiginfoSize = MemoryLayout<signalfd_siginfo>.size
}
