import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Synchronization
import ToolSupport

/// One throughput/latency measurement: `clients` connections to a line server, each with
/// `depth` requests in flight, for `warmup` + `duration` seconds.
struct LoadCell: Sendable {
    var socket: String
    /// The request line is `prefix` + decimal id + `suffix` (suffix ends in `\n`).
    var prefix: [UInt8]
    var suffix: [UInt8]
    var clients: Int
    var depth: Int
    var warmup: Double
    var duration: Double
    /// Client threads (connections are spread over them round-robin).
    var threads: Int
    /// The server process, for its CPU time.
    var serverPID: pid_t
    /// 0: answers end with `\n` (the socket API). Otherwise every answer is this many bytes
    /// (HTTP/1.1 responses of one request, whose length does not change) and starts with "H".
    var answerBytes = 0
}

struct LoadResult: Sendable {
    var answers: Int
    var seconds: Double
    var requestsPerSecond: Double { Double(answers) / seconds }
    /// Latency percentiles in microseconds (send of a request → receipt of its answer).
    var p50: Double
    var p99: Double
    /// CPU time during the measured window, in % of one core.
    var serverCPU: Double
    var clientCPU: Double
    /// Server CPU time per answer, in microseconds.
    var cpuPerRequest: Double { requestsPerSecond > 0 ? serverCPU / 100 / requestsPerSecond * 1e6 : 0 }
}

/// The load driver: a fixed number of client threads (default: one per core), each
/// driving its share of the connections. A thread with a single connection uses plain
/// blocking `send`/`recv`; a thread with several waits for them with `epoll`. Requests
/// are written with one `send` per connection and readiness event (all the answers that
/// arrived are replaced at once), answers are counted by `\n` and matched to their send
/// time first-in first-out (both servers answer a connection's requests in order).
enum LoadDriver {
    private final class Collected: Sendable {
        let state = Mutex<(answers: Int, latencies: [UInt32], error: String?)>((0, [], nil))
    }

    static func run(_ cell: LoadCell) throws -> LoadResult {
        var fds: [Int32] = []
        defer { fds.forEach { close($0) } }
        for _ in 0..<cell.clients {
            let fd = try Sockets.connectUnix(cell.socket)
            BlockingSocket.setReceiveTimeout(fd, 5)
            fds.append(fd)
        }
        let threadCount = max(1, min(cell.threads, cell.clients))
        var shares = Array(repeating: [Int32](), count: threadCount)
        for (index, fd) in fds.enumerated() { shares[index % threadCount].append(fd) }

        let begin = monotonicSeconds() + 0.05
        let measureStart = begin + cell.warmup
        let end = measureStart + cell.duration
        let window = (start: UInt64(measureStart * 1e9), end: UInt64(end * 1e9))
        let collected = Collected()
        let group = DispatchGroup()
        for share in shares {
            group.enter()
            let thread = Thread {
                var worker = Worker(cell: cell, fds: share, window: window)
                let outcome = worker.run(begin: begin)
                collected.state.withLock { state in
                    state.answers += outcome.answers
                    state.latencies.append(contentsOf: outcome.latencies)
                    if let error = outcome.error { state.error = state.error ?? error }
                }
                group.leave()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        sleepSeconds(measureStart - monotonicSeconds())
        let server0 = ProcStats.cpuSeconds(pid: cell.serverPID)
        let client0 = ProcStats.selfCPUSeconds()
        let wall0 = monotonicSeconds()
        sleepSeconds(end - monotonicSeconds())
        let server1 = ProcStats.cpuSeconds(pid: cell.serverPID)
        let client1 = ProcStats.selfCPUSeconds()
        let wall1 = monotonicSeconds()
        group.wait()

        let result = collected.state.withLock { $0 }
        if let error = result.error { throw BenchError("load driver: \(error)") }
        var latencies = result.latencies
        latencies.sort()
        func percentile(_ p: Double) -> Double {
            guard !latencies.isEmpty else { return 0 }
            let index = min(latencies.count - 1, Int((Double(latencies.count) * p).rounded(.up)) - 1)
            return Double(latencies[max(0, index)]) / 1000
        }
        let wall = wall1 - wall0
        return LoadResult(answers: result.answers, seconds: cell.duration,
                          p50: percentile(0.50), p99: percentile(0.99),
                          serverCPU: ((server1 ?? 0) - (server0 ?? 0)) / wall * 100,
                          clientCPU: (client1 - client0) / wall * 100)
    }

    /// One client thread.
    private struct Worker {
        let cell: LoadCell
        let fds: [Int32]
        let window: (start: UInt64, end: UInt64)

        /// Per connection: send times of the requests in flight (a ring), next id.
        private var sentAt: [UInt64]
        private var ringHead: [Int]
        private var ringCount: [Int]
        private var nextID: [Int]
        /// Bytes of the answer being received, per connection (answerBytes > 0).
        private var partial: [Int]
        private var output: [UInt8] = []
        private var latencies: [UInt32] = []
        private var answers = 0

        init(cell: LoadCell, fds: [Int32], window: (start: UInt64, end: UInt64)) {
            self.cell = cell
            self.fds = fds
            self.window = window
            sentAt = Array(repeating: 0, count: fds.count * cell.depth)
            ringHead = Array(repeating: 0, count: fds.count)
            ringCount = Array(repeating: 0, count: fds.count)
            nextID = Array(repeating: 1, count: fds.count)
            partial = Array(repeating: 0, count: fds.count)
            output.reserveCapacity(cell.depth * (cell.prefix.count + cell.suffix.count + 20))
            latencies.reserveCapacity(1 << 18)
        }

        mutating func run(begin: Double) -> (answers: Int, latencies: [UInt32], error: String?) {
            sleepSeconds(begin - monotonicSeconds())
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
            defer { buffer.deallocate() }
            do {
                for index in fds.indices { try send(index, count: cell.depth) }
                if fds.count == 1 {
                    try runBlocking(buffer)
                } else {
                    try runEpoll(buffer)
                }
            } catch {
                return (answers, latencies, "\(error)")
            }
            return (answers, latencies, nil)
        }

        private mutating func runBlocking(_ buffer: UnsafeMutableRawBufferPointer) throws {
            while true {
                let n = recv(fds[0], buffer.baseAddress, buffer.count, 0)
                if n <= 0 {
                    if n < 0 && errno == EINTR { continue }
                    throw BenchError(n == 0 ? "server closed the connection" : "recv: \(String(cString: strerror(errno)))")
                }
                let now = monotonicNanoseconds()
                let completed = try received(0, UnsafeRawBufferPointer(start: buffer.baseAddress, count: n), at: now)
                if now >= window.end { return }
                if completed > 0 { try send(0, count: completed) }
            }
        }

        private mutating func runEpoll(_ buffer: UnsafeMutableRawBufferPointer) throws {
            let epfd = Epoll.create1(O_CLOEXEC)
            guard epfd >= 0 else { throw BenchError("epoll_create1: \(String(cString: strerror(errno)))") }
            defer { close(epfd) }
            for (index, fd) in fds.enumerated() {
                var event: (UInt64, UInt64) = (0, 0)  // 16 bytes: room for either layout
                let result = withUnsafeMutableBytes(of: &event) { raw in
                    raw.storeBytes(of: Epoll.IN, toByteOffset: 0, as: UInt32.self)
                    raw.storeBytes(of: UInt64(index), toByteOffset: Epoll.dataOffset, as: UInt64.self)
                    return Epoll.ctl(epfd, Epoll.CTL_ADD, fd, raw.baseAddress)
                }
                guard result == 0 else { throw BenchError("epoll_ctl: \(String(cString: strerror(errno)))") }
            }
            let maxEvents = 256
            let events = UnsafeMutableRawPointer.allocate(byteCount: maxEvents * Epoll.eventSize, alignment: 8)
            defer { events.deallocate() }
            var lastProgress = monotonicNanoseconds()
            while true {
                let count = Epoll.wait(epfd, events, Int32(maxEvents), 20)
                if count < 0 {
                    if errno == EINTR { continue }
                    throw BenchError("epoll_wait: \(String(cString: strerror(errno)))")
                }
                var now = monotonicNanoseconds()
                if count == 0 {
                    if now >= window.end { return }
                    if now - lastProgress > 5_000_000_000 { throw BenchError("no answers for 5 s") }
                    continue
                }
                lastProgress = now
                for k in 0..<Int(count) {
                    let index = Int((events + k * Epoll.eventSize + Epoll.dataOffset).loadUnaligned(as: UInt64.self))
                    let n = recv(fds[index], buffer.baseAddress, buffer.count, Int32(MSG_DONTWAIT))
                    if n <= 0 {
                        if n < 0 && (errno == EINTR || errno == EAGAIN) { continue }
                        throw BenchError(n == 0 ? "server closed the connection" : "recv: \(String(cString: strerror(errno)))")
                    }
                    now = monotonicNanoseconds()
                    let completed = try received(index, UnsafeRawBufferPointer(start: buffer.baseAddress, count: n), at: now)
                    if completed > 0, now < window.end { try send(index, count: completed) }
                }
                if now >= window.end { return }
            }
        }

        /// Counts the answers (newlines, or fixed-size answers) in `bytes`; returns how many completed.
        private mutating func received(_ index: Int, _ bytes: UnsafeRawBufferPointer, at now: UInt64) throws -> Int {
            guard let base = bytes.baseAddress else { return 0 }
            var completed = 0
            var offset = 0
            let inWindow = now >= window.start && now < window.end
            while offset < bytes.count {
                if cell.answerBytes > 0 {
                    if partial[index] == 0, bytes[offset] != UInt8(ascii: "H") {
                        throw BenchError("an HTTP answer's length changed (expected \(cell.answerBytes) bytes each)")
                    }
                    let take = min(cell.answerBytes - partial[index], bytes.count - offset)
                    partial[index] += take
                    offset += take
                    guard partial[index] == cell.answerBytes else { break }
                    partial[index] = 0
                } else {
                    guard let hit = memchr(base + offset, 0x0A, bytes.count - offset) else { break }
                    offset = UnsafeRawPointer(hit) - base + 1
                }
                completed += 1
                let slot = index * cell.depth + ringHead[index]
                ringHead[index] = (ringHead[index] + 1) % cell.depth
                ringCount[index] -= 1
                if inWindow {
                    answers += 1
                    latencies.append(UInt32(clamping: now &- sentAt[slot]))
                }
            }
            return completed
        }

        /// Writes `count` new requests on connection `index` in one `send`.
        private mutating func send(_ index: Int, count: Int) throws {
            output.removeAll(keepingCapacity: true)
            for _ in 0..<count {
                output.append(contentsOf: cell.prefix)
                appendDecimal(nextID[index])
                nextID[index] += 1
                output.append(contentsOf: cell.suffix)
            }
            let now = monotonicNanoseconds()
            for _ in 0..<count {
                let tail = (ringHead[index] + ringCount[index]) % cell.depth
                sentAt[index * cell.depth + tail] = now
                ringCount[index] += 1
            }
            var offset = 0
            let fd = fds[index]
            while offset < output.count {
                let n = output.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
                if n < 0 {
                    if errno == EINTR { continue }
                    if errno == EAGAIN {  // cannot happen with a few KiB in flight; be safe
                        var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                        _ = poll(&pfd, 1, 100)
                        continue
                    }
                    throw BenchError("send: \(String(cString: strerror(errno)))")
                }
                offset += n
            }
        }

        private mutating func appendDecimal(_ value: Int) {
            var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                         UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
                (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            var v = value
            var count = 0
            withUnsafeMutableBytes(of: &digits) { raw in
                repeat {
                    raw[19 - count] = UInt8(48 + v % 10)
                    v /= 10
                    count += 1
                } while v > 0
                output.append(contentsOf: raw[(20 - count)...])
            }
        }
    }
}


/// `<sys/epoll.h>`, which the toolchain's Glibc module does not import: resolved with
/// `dlsym` (as AgentPosix does for its event loop).
enum Epoll {
    typealias Create1 = @convention(c) (Int32) -> Int32
    typealias Ctl = @convention(c) (Int32, Int32, Int32, UnsafeMutableRawPointer?) -> Int32
    typealias Wait = @convention(c) (Int32, UnsafeMutableRawPointer?, Int32, Int32) -> Int32

    private static func resolve<F>(_ name: String, as type: F.Type) -> F {
        guard let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, name) else { fatalError("libc has no \(name)") }
        return unsafeBitCast(symbol, to: type)
    }

    static let create1 = resolve("epoll_create1", as: Create1.self)
    static let ctl = resolve("epoll_ctl", as: Ctl.self)
    static let wait = resolve("epoll_wait", as: Wait.self)
    static let IN: UInt32 = 0x001
    static let CTL_ADD: Int32 = 1
    #if arch(x86_64)
    static let eventSize = 12  // packed on x86_64
    static let dataOffset = 4
    #else
    static let eventSize = 16
    static let dataOffset = 8
    #endif
}
