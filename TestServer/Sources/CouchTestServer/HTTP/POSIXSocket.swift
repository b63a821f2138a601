import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why a socket operation failed.
public struct SocketError: Error, Sendable, CustomStringConvertible {
    /// What was being done (`bind`, `connect`, ...).
    public var operation: String
    /// The `errno` value.
    public var code: Int32

    public var description: String { "\(operation) failed: \(String(cString: strerror(code))) (errno \(code))" }

    /// True when the address was in use (bind).
    public var isAddressInUse: Bool { code == EADDRINUSE }
}

/// Thin wrappers around the POSIX socket calls the TestServer needs, for IPv4 on 127.0.0.1 only.
enum POSIXSocket {
    #if canImport(Darwin)
        static let streamType = SOCK_STREAM
        static let sendFlags: Int32 = 0
    #else
        static let streamType = Int32(SOCK_STREAM.rawValue)
        static let sendFlags = Int32(MSG_NOSIGNAL)
    #endif

    private static let ignoreSIGPIPEOnce: Void = {
        _ = signal(SIGPIPE, SIG_IGN)
    }()

    /// Makes writes to a closed peer fail with EPIPE instead of killing the process.
    static func ignoreSIGPIPE() { _ = ignoreSIGPIPEOnce }

    static func loopbackAddress(port: Int) -> sockaddr_in {
        var addr = sockaddr_in()
        #if canImport(Darwin)
            addr.sin_len = UInt8(MemoryLayout<sockaddr_in>.size)
        #endif
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(truncatingIfNeeded: port)).bigEndian
        addr.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
        return addr
    }

    static func newSocket() throws -> Int32 {
        let fd = socket(AF_INET, streamType, 0)
        guard fd >= 0 else { throw SocketError(operation: "socket", code: errno) }
        #if canImport(Darwin)
            var one: Int32 = 1
            _ = setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, socklen_t(MemoryLayout<Int32>.size))
        #endif
        return fd
    }

    /// A listening socket on 127.0.0.1:`port` (0 = any free port) with SO_REUSEADDR, and the port it got.
    static func listen(port: Int, backlog: Int32 = 128) throws -> (fd: Int32, port: Int) {
        ignoreSIGPIPE()
        let fd = try newSocket()
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = loopbackAddress(port: port)
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0 else {
            let code = errno
            _ = close(fd)
            throw SocketError(operation: "bind to 127.0.0.1:\(port)", code: code)
        }
        #if canImport(Darwin)
            let listened = Darwin.listen(fd, backlog)
        #elseif canImport(Musl)
            let listened = Musl.listen(fd, backlog)
        #else
            let listened = Glibc.listen(fd, backlog)
        #endif
        guard listened == 0 else {
            let code = errno
            _ = close(fd)
            throw SocketError(operation: "listen", code: code)
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return (fd, Int(UInt16(bigEndian: actual.sin_port)))
    }

    /// Accepts one connection; nil once the listener is shut down or closed.
    static func accept(_ listener: Int32) -> Int32? {
        while true {
            #if canImport(Darwin)
                let fd = Darwin.accept(listener, nil, nil)
            #elseif canImport(Musl)
                let fd = Musl.accept(listener, nil, nil)
            #else
                let fd = Glibc.accept(listener, nil, nil)
            #endif
            if fd >= 0 {
                #if canImport(Darwin)
                    var one: Int32 = 1
                    _ = setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, socklen_t(MemoryLayout<Int32>.size))
                #endif
                setNoDelay(fd)
                return fd
            }
            switch errno {
            case EINTR, ECONNABORTED, EMFILE, ENFILE, ENOBUFS, ENOMEM, EPROTO:
                if errno == EMFILE || errno == ENFILE { usleep(10_000) }
                continue
            default:
                return nil
            }
        }
    }

    /// Connects to 127.0.0.1:`port`.
    static func connect(port: Int) throws -> Int32 {
        ignoreSIGPIPE()
        let fd = try newSocket()
        var addr = loopbackAddress(port: port)
        while true {
            let result = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    #if canImport(Darwin)
                        Darwin.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                    #elseif canImport(Musl)
                        Musl.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                    #else
                        Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                    #endif
                }
            }
            if result == 0 { break }
            if errno == EINTR { continue }
            let code = errno
            _ = close(fd)
            throw SocketError(operation: "connect to 127.0.0.1:\(port)", code: code)
        }
        setNoDelay(fd)
        return fd
    }

    static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Sets the receive timeout (0 = none).
    static func setReceiveTimeout(_ fd: Int32, seconds: Double) {
        var tv = timeval()
        tv.tv_sec = .init(seconds.rounded(.down))
        tv.tv_usec = .init((seconds - seconds.rounded(.down)) * 1_000_000)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Reads up to `buffer.count` bytes. Returns the count, 0 at end of stream, -1 on error or timeout.
    static func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        while true {
            let n = recv(fd, buffer.baseAddress, buffer.count, 0)
            if n >= 0 { return n }
            if errno == EINTR { continue }
            return -1
        }
    }

    /// Writes all of `bytes`. False when the peer has gone away (or on any other error).
    static func sendAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = send(fd, bytes.baseAddress! + offset, bytes.count - offset, sendFlags)
            if n > 0 {
                offset += n
            } else if n < 0, errno == EINTR {
                continue
            } else {
                return false
            }
        }
        return true
    }

    /// Writes all of `pieces`, in order, with as few `sendmsg` calls as the socket takes them in (at most
    /// `IOV_MAX` pieces a call). False when the peer has gone away.
    static func sendAll(_ fd: Int32, _ pieces: [Data]) -> Bool {
        var index = 0
        var skip = 0  // bytes of pieces[index] already sent
        while index < pieces.count {
            if pieces[index].count == skip {
                index += 1
                skip = 0
                continue
            }
            let batch = pieces[index..<min(pieces.count, index + 64)]
            let sent: Int = withIOVectors(batch, skippingFirst: skip) { vectors in
                var message = msghdr()
                message.msg_iov = vectors.baseAddress
                message.msg_iovlen = numericCast(vectors.count)
                return sendmsg(fd, &message, sendFlags)
            }
            if sent < 0 {
                if errno == EINTR { continue }
                return false
            }
            if sent == 0 { return false }
            // Moves past what was sent.
            var left = sent
            while left > 0, index < pieces.count {
                let rest = pieces[index].count - skip
                if left >= rest {
                    left -= rest
                    index += 1
                    skip = 0
                } else {
                    skip += left
                    left = 0
                }
            }
        }
        return true
    }

    /// Calls `body` with the I/O vectors of `pieces` (the first one's first `skip` bytes left out), while their
    /// bytes stay where they are.
    private static func withIOVectors(
        _ pieces: ArraySlice<Data>, skippingFirst skip: Int, _ body: (UnsafeMutableBufferPointer<iovec>) -> Int
    ) -> Int {
        var vectors: [iovec] = []
        vectors.reserveCapacity(pieces.count)
        func next(_ rest: ArraySlice<Data>) -> Int {
            guard let piece = rest.first else {
                return vectors.withUnsafeMutableBufferPointer { body($0) }
            }
            return piece.withUnsafeBytes { raw in
                let offset = rest.startIndex == pieces.startIndex ? skip : 0
                if let base = raw.baseAddress, raw.count > offset {
                    vectors.append(
                        iovec(iov_base: UnsafeMutableRawPointer(mutating: base + offset), iov_len: raw.count - offset))
                }
                return next(rest.dropFirst())
            }
        }
        return next(pieces)
    }

    /// Writes all of `data`. False when the peer has gone away.
    static func sendAll(_ fd: Int32, _ data: Data) -> Bool {
        if data.isEmpty { return true }
        return data.withUnsafeBytes { sendAll(fd, $0) }
    }

    /// Stops reads and writes on `fd` (wakes threads blocked on it); the descriptor stays open.
    static func shutdownBoth(_ fd: Int32) {
        _ = shutdown(fd, Int32(SHUT_RDWR))
    }

    /// Stops writes on `fd`, so the peer reads the end of the stream.
    static func shutdownWrite(_ fd: Int32) {
        _ = shutdown(fd, Int32(SHUT_WR))
    }

    /// Makes the coming `close` reset the connection (RST) instead of a graceful FIN.
    static func resetOnClose(_ fd: Int32) {
        var option = linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
    }

    static func closeDescriptor(_ fd: Int32) {
        _ = close(fd)
    }
}

/// The current time as an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
func httpDate(_ date: Date = Date()) -> String {
    var t = time_t(date.timeIntervalSince1970)
    var parts = tm()
    _ = gmtime_r(&t, &parts)
    let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
    return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
        + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
}
