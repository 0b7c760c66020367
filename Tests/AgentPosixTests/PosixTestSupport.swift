import AgentPosix
import Foundation
import Glibc
import Synchronization

/// A value shared between the test thread and the loop thread.
/// (An NSLock, a pthread mutex underneath, so that ThreadSanitizer sees the ordering.)
final class Shared<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: Value
    init(_ value: Value) { storage = value }
    var value: Value { lock.withLock { storage } }
    func update<R: Sendable>(_ body: (inout Value) -> R) -> R { lock.withLock { body(&storage) } }
}

/// Work handed from a test thread to the loop thread: a queue behind a lock, and a pipe
/// registered on the loop that wakes it. (The daemon has no cross-thread work at all; only
/// tests that drive a loop from outside need this.)
final class LoopInbox: @unchecked Sendable {
    private let lock = NSLock()
    private var queue: [@Sendable () -> Void] = []
    private let readFD: Int32
    private let writeFD: Int32

    /// Registers on `loop`; call before the loop runs, on the thread that will run it.
    init(loop: EventLoop) throws {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw TestFailure("pipe: errno \(errno)") }
        readFD = fds[0]
        writeFD = fds[1]
        for fd in fds { _ = fcntl(fd, F_SETFL, O_NONBLOCK) }
        try loop.register(readFD, interest: .read) { [self] _ in drain() }
    }

    deinit {
        close(readFD)
        close(writeFD)
    }

    /// Any thread: `work` runs on the loop thread soon.
    func post(_ work: @escaping @Sendable () -> Void) {
        lock.withLock { queue.append(work) }
        var byte: UInt8 = 1
        _ = write(writeFD, &byte, 1)  // EAGAIN: the pipe is full, the loop will wake anyway
    }

    private func drain() {
        var scratch = [UInt8](repeating: 0, count: 256)
        while read(readFD, &scratch, scratch.count) > 0 {}
        while true {
            let batch: [@Sendable () -> Void] = lock.withLock {
                defer { queue.removeAll() }
                return queue
            }
            if batch.isEmpty { return }
            for work in batch { work() }
        }
    }
}

/// Holds loop-thread objects (listeners, connections) for the duration of a
/// test; only touched on the loop thread.
final class LoopBox: @unchecked Sendable {
    var objects: [AnyObject] = []
}

/// An `EventLoop` running on its own thread.
final class LoopThread: Sendable {
    let loop: EventLoop
    let box = LoopBox()
    private let finished = DispatchSemaphore(value: 0)
    private let failure = Shared<String?>(nil)

    let inbox: LoopInbox

    /// `clock`: pass a `ManualLoopClock` to run the loop's timers in virtual time.
    init(clock: any LoopClock = SystemLoopClock.shared) throws {
        let loop = try EventLoop(clock: clock)
        self.loop = loop
        inbox = try LoopInbox(loop: loop)
        let finished = self.finished
        let failure = self.failure
        let thread = Thread {
            do {
                try loop.run()
            } catch {
                failure.update { $0 = "\(error)" }
            }
            finished.signal()
        }
        thread.start()
    }

    /// Runs `body` on the loop thread and returns its result.
    @discardableResult
    func sync<T: Sendable>(_ body: @escaping @Sendable (EventLoop, LoopBox) throws -> T) throws -> T {
        let result = Shared<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let box = self.box
        inbox.post { [loop] in
            let outcome = Result { try body(loop, box) }
            result.update { $0 = outcome }
            done.signal()
        }
        guard done.wait(timeout: .now() + 10) == .success else { throw TestFailure("loop did not answer") }
        return try result.value!.get()
    }

    /// Moves `clock` (the loop's) forward on the loop thread, then waits for the loop's
    /// next pass: when this returns, every timer that came due has run.
    func advance(_ clock: ManualLoopClock, by seconds: Double) throws {
        let done = DispatchSemaphore(value: 0)
        inbox.post { [loop] in
            clock.advance(by: seconds)
            // Deferred work runs at the start of the next pass, after this pass's timers.
            loop.deferToEndOfIteration { done.signal() }
        }
        guard done.wait(timeout: .now() + 10) == .success else { throw TestFailure("loop did not answer") }
    }

    /// Stops the loop and waits for its thread to end, releasing the
    /// loop-thread objects on the loop thread first.
    func stop() {
        let box = self.box
        inbox.post { [loop] in
            box.objects.removeAll()
            loop.stop()
        }
        _ = finished.wait(timeout: .now() + 10)
    }

    deinit { }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Polls `condition` every millisecond until it holds or `timeout` passes.
func waitUntil(timeout: Double = 5, _ condition: () -> Bool) -> Bool {
    let deadline = monotonicSeconds() + timeout
    while monotonicSeconds() < deadline {
        if condition() { return true }
        usleep(1000)
    }
    return condition()
}

/// A blocking client socket for tests.
struct TestClient: ~Copyable {
    let socket: FileDescriptor

    init(path: String, receiveTimeout: Double = 5) throws {
        socket = try UnixSocket.connect(to: path)
        var timeout = timeval(tv_sec: Int(receiveTimeout), tv_usec: Int((receiveTimeout - receiveTimeout.rounded(.down)) * 1_000_000))
        setsockopt(socket.rawValue, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    var fd: Int32 { socket.rawValue }

    func write(_ text: String) throws { try write(Array(text.utf8)) }

    func write(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            }
            if count < 0 {
                if errno == EINTR { continue }
                throw PosixError(errno: errno, call: "send")
            }
            offset += count
        }
    }

    /// Reads until `count` bytes came, EOF, or the receive timeout.
    func read(count: Int) -> [UInt8] {
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while result.count < count {
            let n = buffer.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, min($0.count, count - result.count), 0) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            result.append(contentsOf: buffer[..<n])
        }
        return result
    }

    func readString(count: Int) -> String { String(decoding: read(count: count), as: UTF8.self) }

    /// 0 at EOF, -1 with errno on error or timeout, else the bytes read.
    func readOnce() -> Int {
        var buffer = [UInt8](repeating: 0, count: 4096)
        return buffer.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, 0) }
    }

    func shutdownWrite() { shutdown(fd, Int32(SHUT_WR)) }
}
