import Glibc

// The Glibc module that ships with the toolchain does not import
// <sys/epoll.h>, <sys/eventfd.h> or <sys/signalfd.h>, and this package adds no
// C target for them. These are the few entry points the event loop needs,
// resolved once from libc with `dlsym` and called through C function pointers
// (so the C calling convention is exact). Structures are read and written as
// bytes at their documented offsets.

enum Linux {
    typealias EpollCreate1 = @convention(c) (Int32) -> Int32
    typealias EpollCtl = @convention(c) (Int32, Int32, Int32, UnsafeMutableRawPointer?) -> Int32
    typealias EpollWait = @convention(c) (Int32, UnsafeMutableRawPointer?, Int32, Int32) -> Int32
    typealias EventFD = @convention(c) (UInt32, Int32) -> Int32
    typealias SignalFD = @convention(c) (Int32, UnsafePointer<sigset_t>?, Int32) -> Int32

    private static func resolve<F>(_ name: String, as type: F.Type) -> F {
        guard let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, name) else {
            fatalError("libc has no \(name)")
        }
        return unsafeBitCast(symbol, to: type)
    }

    static let epollCreate1 = resolve("epoll_create1", as: EpollCreate1.self)
    static let epollCtl = resolve("epoll_ctl", as: EpollCtl.self)
    static let epollWait = resolve("epoll_wait", as: EpollWait.self)
    static let eventFD = resolve("eventfd", as: EventFD.self)
    static let signalFD = resolve("signalfd", as: SignalFD.self)

    // <sys/epoll.h>
    static let EPOLLIN: UInt32 = 0x001
    static let EPOLLOUT: UInt32 = 0x004
    static let EPOLLERR: UInt32 = 0x008
    static let EPOLLHUP: UInt32 = 0x010
    static let EPOLL_CTL_ADD: Int32 = 1
    static let EPOLL_CTL_DEL: Int32 = 2
    static let EPOLL_CTL_MOD: Int32 = 3
    // EPOLL_CLOEXEC, EFD_CLOEXEC and SFD_CLOEXEC are O_CLOEXEC; the
    // *_NONBLOCK flags are O_NONBLOCK.

    /// `struct epoll_event` is `{ uint32_t events; uint64_t data; }`, packed
    /// on x86_64 (12 bytes) and naturally aligned elsewhere (16 bytes).
    #if arch(x86_64)
    static let epollEventSize = 12
    static let epollDataOffset = 4
    #else
    static let epollEventSize = 16
    static let epollDataOffset = 8
    #endif

    /// `sizeof(struct signalfd_siginfo)`; `ssi_signo` is its first `uint32_t`.
    static let signalfdSiginfoSize = 128
}
