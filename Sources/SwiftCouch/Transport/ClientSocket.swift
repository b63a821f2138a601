import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Thin wrappers around the blocking POSIX socket calls ``SocketTransport`` makes, with every
/// failure turned into the `URLError` the session understands.
enum ClientSocket {
    #if canImport(Darwin)
        static let streamType = SOCK_STREAM
        static let sendFlags: Int32 = 0
    #else
        static let streamType = Int32(SOCK_STREAM.rawValue)
        static let sendFlags = Int32(MSG_NOSIGNAL)
    #endif

    /// An error with `code`, a message naming what failed, and the `errno` text when there is one.
    /// The `userInfo` key marking an error for a request of which nothing was sent.
    static let neverSentKey = "SwiftCouch.RequestNeverSent"

    /// An error for a request of which nothing was sent (``InterceptableSession`` counts it as
    /// provably not sent: it cannot have been carried out).
    static func neverSent(_ code: URLError.Code, _ message: String) -> URLError {
        URLError(code, userInfo: [NSLocalizedDescriptionKey: message, neverSentKey: true])
    }

    static func error(_ code: URLError.Code, _ message: String, errno number: Int32 = 0) -> URLError {
        var text = message
        if number != 0 { text += ": " + String(cString: strerror(number)) + " (errno \(number))" }
        return URLError(code, userInfo: [NSLocalizedDescriptionKey: text])
    }

    /// Resolves `host` and connects to the first address that answers within `timeout` seconds
    /// (0: no limit). `register` is called with each new descriptor before connecting, so that a
    /// cancellation can shut it down; the descriptor returned is blocking, with `TCP_NODELAY`.
    static func connect(
        host: String, port: Int, timeout: TimeInterval, register: (Int32) -> Bool
    ) throws(URLError) -> Int32 {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = streamType
        #if !canImport(Darwin)
            hints.ai_flags = AI_NUMERICSERV
        #endif
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let first = list else {
            throw error(.cannotFindHost, "Cannot resolve \(host): " + String(cString: gai_strerror(status)))
        }
        defer { freeaddrinfo(first) }
        var lastError = error(.cannotConnectToHost, "Cannot connect to \(host):\(port)")
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let info = entry {
            entry = info.pointee.ai_next
            let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype, info.pointee.ai_protocol)
            guard fd >= 0 else {
                lastError = error(.cannotConnectToHost, "socket() failed", errno: errno)
                continue
            }
            guard register(fd) else {
                close(fd)
                throw error(.cancelled, "The request was cancelled")
            }
            do throws(URLError) {
                try connect(fd, address: info.pointee.ai_addr, length: info.pointee.ai_addrlen, timeout: timeout)
                configure(fd)
                return fd
            } catch {
                _ = register(-1)
                close(fd)
                lastError = error
                if error.code == .timedOut || error.code == .cancelled { throw error }
            }
        }
        throw lastError
    }

    /// A non-blocking connect bounded by `timeout`, then back to blocking.
    private static func connect(
        _ fd: Int32, address: UnsafeMutablePointer<sockaddr>?, length: socklen_t, timeout: TimeInterval
    ) throws(URLError) {
        let flags = fcntl(fd, F_GETFL, 0)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        defer { _ = fcntl(fd, F_SETFL, flags) }
        #if canImport(Darwin)
            let started = Darwin.connect(fd, address, length)
        #elseif canImport(Musl)
            let started = Musl.connect(fd, address, length)
        #else
            let started = Glibc.connect(fd, address, length)
        #endif
        if started == 0 { return }
        let code = errno
        guard code == EINPROGRESS || code == EINTR else {
            throw error(.cannotConnectToHost, "Cannot connect", errno: code)
        }
        var descriptor = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        let deadline = timeout > 0 ? Date().addingTimeInterval(timeout) : .distantFuture
        while true {
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else { throw error(.timedOut, "Connecting timed out") }
            let milliseconds = Int32(min(remaining * 1000, Double(Int32.max - 1)).rounded(.up))
            let ready = poll(&descriptor, 1, milliseconds)
            if ready < 0, errno == EINTR { continue }
            if ready == 0 { continue }
            break
        }
        var failure: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        _ = getsockopt(fd, SOL_SOCKET, SO_ERROR, &failure, &size)
        guard failure == 0 else {
            // A shut-down socket (a cancellation) reports no useful error of its own.
            throw error(.cannotConnectToHost, "Cannot connect", errno: failure)
        }
    }

    private static func configure(_ fd: Int32) {
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        #if canImport(Darwin)
            _ = setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, socklen_t(MemoryLayout<Int32>.size))
        #endif
    }

    /// Sets the receive and send timeouts (0: none); each blocked call then fails after that long
    /// without progress.
    static func setTimeouts(_ fd: Int32, seconds: TimeInterval) {
        let clamped = max(0, min(seconds, 86_400 * 365))
        let whole = clamped.rounded(.down)
        var value = timeval()
        value.tv_sec = .init(whole)
        value.tv_usec = .init((clamped - whole) * 1_000_000)
        let size = socklen_t(MemoryLayout<timeval>.size)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, size)
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &value, size)
    }

    /// Whether an idle keep-alive connection is still usable: nothing to read and no end of
    /// stream or error pending. One non-blocking peek.
    static func isIdleAndOpen(_ fd: Int32) -> Bool {
        var byte: UInt8 = 0
        while true {
            let n = recv(fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT))
            if n > 0 { return false }  // unsolicited bytes: the stream is out of step
            if n == 0 { return false }  // the server closed it
            let code = errno
            if code == EINTR { continue }
            return code == EAGAIN || code == EWOULDBLOCK
        }
    }

    /// The outcome of a read.
    enum ReadResult {
        case bytes(Int)
        case endOfStream
        case failed(Int32)
    }

    static func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
        while true {
            let n = recv(fd, buffer.baseAddress, buffer.count, 0)
            if n > 0 { return .bytes(n) }
            if n == 0 { return .endOfStream }
            let code = errno
            if code == EINTR { continue }
            return .failed(code)
        }
    }

    /// Writes every byte of `pieces` with `sendmsg` (no `SIGPIPE`), calling `progress` with the
    /// number of bytes accepted after each call. Returns the `errno` of a failed write, or nil.
    /// With `nonBlocking`, a full socket buffer ends the write with `EAGAIN` (the bytes accepted
    /// so far were reported) instead of waiting.
    static func sendAll(
        _ fd: Int32, _ pieces: [UnsafeRawBufferPointer], nonBlocking: Bool = false, progress: (Int) -> Void
    ) -> Int32? {
        // The vectors live on the stack: no array is made per write.
        withUnsafeTemporaryAllocation(of: iovec.self, capacity: max(pieces.count, 1)) { vectors in
            var count = 0
            for piece in pieces where piece.count > 0 {
                vectors[count] = iovec(
                    iov_base: UnsafeMutableRawPointer(mutating: piece.baseAddress), iov_len: piece.count)
                count += 1
            }
            let flags = nonBlocking ? sendFlags | Int32(MSG_DONTWAIT) : sendFlags
            var index = 0
            while index < count {
                var message = msghdr()
                message.msg_iov = vectors.baseAddress! + index
                message.msg_iovlen = .init(count - index)
                let written = sendmsg(fd, &message, flags)
                if written < 0 {
                    let code = errno
                    if code == EINTR { continue }
                    return code
                }
                progress(written)
                var remaining = written
                while remaining > 0, index < count {
                    let length = vectors[index].iov_len
                    if remaining >= length {
                        remaining -= length
                        index += 1
                    } else {
                        vectors[index].iov_base = vectors[index].iov_base! + remaining
                        vectors[index].iov_len = length - remaining
                        remaining = 0
                    }
                }
            }
            return nil
        }
    }

    /// Waits until `fd` (when not negative) is readable, `bell` rings, or `deadline` passes. True
    /// when the socket has something to read: an answer, or (with no request written) the server's
    /// close or bytes out of step.
    static func waitIdle(_ fd: Int32, bell: Doorbell, until deadline: DispatchTime) -> Bool {
        var descriptors = [
            pollfd(fd: bell.readEnd, events: Int16(POLLIN), revents: 0),
            pollfd(fd: fd, events: Int16(POLLIN), revents: 0),
        ]
        let now = DispatchTime.now().uptimeNanoseconds
        let end = deadline.uptimeNanoseconds
        let milliseconds: Int32 =
            end <= now ? 0 : Int32(min((end - now + 999_999) / 1_000_000, UInt64(Int32.max - 1)))
        let ready = descriptors.withUnsafeMutableBufferPointer { buffer in
            poll(buffer.baseAddress, fd >= 0 ? 2 : 1, milliseconds)
        }
        guard ready > 0 else { return false }
        if descriptors[0].revents != 0 { bell.drain() }
        return fd >= 0 && descriptors[1].revents != 0
    }

    /// Wakes any thread blocked on `fd` (its reads return end of stream, writes fail).
    static func shutdownBoth(_ fd: Int32) {
        _ = shutdown(fd, Int32(SHUT_RDWR))
    }

    static func close(_ fd: Int32) {
        #if canImport(Darwin)
            _ = Darwin.close(fd)
        #elseif canImport(Musl)
            _ = Musl.close(fd)
        #else
            _ = Glibc.close(fd)
        #endif
    }
}

/// A non-blocking pipe that wakes a thread waiting in `poll` beside its socket: a connection's
/// thread waits idle on both, so a request written to the socket by its caller needs no wake
/// (the answer wakes it), and anything else (a request for the thread to write, a shutdown)
/// rings.
///
/// `@unchecked Sendable`: the descriptors are immutable; `ring` and `drain` are safe on any
/// thread (the kernel orders them).
final class Doorbell: @unchecked Sendable {
    let readEnd: Int32
    private let writeEnd: Int32

    /// Nil when no pipe can be made (descriptors exhausted).
    init?() {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { return nil }
        for end in ends {
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        readEnd = ends[0]
        writeEnd = ends[1]
    }

    deinit {
        ClientSocket.close(readEnd)
        ClientSocket.close(writeEnd)
    }

    /// Wakes the waiting thread (a ring already pending is enough: a full pipe drops this one).
    func ring() {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    /// Empties the pipe, after a wake.
    func drain() {
        var bytes = (UInt64(0), UInt64(0))
        while withUnsafeMutableBytes(of: &bytes, { read(readEnd, $0.baseAddress, $0.count) }) > 0 {}
    }
}
